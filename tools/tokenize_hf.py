#!/usr/bin/env python3
"""Turn text into a tiertrain token file with a Hugging Face tokenizer.

usage: tokenize_hf.py --tokenizer PATH --output out.tok [--jsonl-field text] [--split-lines] INPUT...

.txt inputs are one document per file (or per line with --split-lines); .jsonl inputs hold one
document per line in the field --jsonl-field. Every document is followed by the tokenizer's
eos id. The format is described in docs/token_format.md. Needs transformers (no numpy).
"""
import argparse
import json
import os
import struct
import sys
from array import array

MAGIC = b"TTTOKENS"
VERSION = 1
NO_EOS = 0xFFFFFFFF


def documents(paths, jsonl_field, split_lines):
    for path in paths:
        with open(path, encoding="utf-8") as f:
            if path.endswith(".jsonl"):
                for number, line in enumerate(f, 1):
                    if not line.strip():
                        continue
                    try:
                        record = json.loads(line)
                    except json.JSONDecodeError as error:
                        sys.exit(f"{path}:{number}: not valid JSON: {error}")
                    if jsonl_field not in record or not isinstance(record[jsonl_field], str):
                        sys.exit(f"{path}:{number}: no string field '{jsonl_field}' (set --jsonl-field)")
                    yield record[jsonl_field]
            elif split_lines:
                for line in f:
                    if line.strip():
                        yield line.rstrip("\n")
            else:
                yield f.read()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokenizer", required=True, help="tokenizer directory or cached name")
    parser.add_argument("--output", required=True)
    parser.add_argument("--jsonl-field", default="text")
    parser.add_argument("--split-lines", action="store_true")
    parser.add_argument("inputs", nargs="+")
    args = parser.parse_args()

    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    eos = tokenizer.eos_token_id
    vocab_size = len(tokenizer)
    ids = array("I")
    count = 0
    for text in documents(args.inputs, args.jsonl_field, args.split_lines):
        ids.extend(tokenizer(text, add_special_tokens=False)["input_ids"])
        if eos is not None:
            ids.append(eos)
        count += 1
    if sys.byteorder != "little":
        ids.byteswap()
    header = struct.pack("<8sIIQII", MAGIC, VERSION, vocab_size, len(ids), NO_EOS if eos is None else eos, 0)
    temporary = args.output + ".tmp"
    with open(temporary, "wb") as f:
        f.write(header)
        ids.tofile(f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(temporary, args.output)
    print(f"wrote {args.output}: {len(ids)} tokens from {count} documents (vocab {vocab_size}, eos {eos})")


if __name__ == "__main__":
    main()
