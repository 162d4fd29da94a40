#!/usr/bin/env python3
"""Turn text into a tiertrain token file with a Hugging Face tokenizer.

usage: tokenize_hf.py --tokenizer PATH --output out.tok [--jsonl-field text] [--split-lines] INPUT...

.txt inputs are one document per file (or one per line with --split-lines); .jsonl inputs hold
one document per line in the string field --jsonl-field (default "text"). Every document is
followed by the tokenizer's eos id; empty documents are skipped. The tokenizer is a local
directory or a name already in the Hugging Face cache (nothing is downloaded). The file is
written atomically (out.tok.tmp, then renamed). The format is described in
docs/token_format.md. Needs only the standard library and transformers.
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
HEADER = "<8sIIQII"  # magic, version, vocab_size, token_count, eos_id, reserved: 32 bytes


def fail(message):
    sys.exit(f"tokenize_hf.py: error: {message}")


def documents(paths, jsonl_field, split_lines):
    for path in paths:
        try:
            with open(path, encoding="utf-8") as f:
                if path.endswith(".jsonl"):
                    for number, line in enumerate(f, 1):
                        if not line.strip():
                            continue
                        try:
                            record = json.loads(line)
                        except json.JSONDecodeError as error:
                            fail(f"{path}:{number}: not valid JSON: {error}")
                        if not isinstance(record, dict) or not isinstance(record.get(jsonl_field), str):
                            fail(f"{path}:{number}: no string field '{jsonl_field}' (choose it with --jsonl-field)")
                        yield path, record[jsonl_field]
                elif split_lines:
                    for line in f:
                        yield path, line.rstrip("\r\n")
                else:
                    yield path, f.read()
        except OSError as error:
            fail(f"cannot read {path}: {error.strerror or error}")
        except UnicodeDecodeError as error:
            fail(f"{path}: not UTF-8 text ({error}); convert it to UTF-8 first")


def write_atomic(path, header, ids):
    temporary = path + ".tmp"
    try:
        with open(temporary, "wb") as f:
            f.write(header)
            ids.tofile(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, path)
    except OSError as error:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        fail(f"cannot write {path}: {error.strerror or error}")
    try:  # make the rename durable
        directory = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
    except OSError:
        pass


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokenizer", required=True, help="tokenizer directory, or a name already in the HF cache")
    parser.add_argument("--output", required=True, help="token file to write")
    parser.add_argument("--jsonl-field", default="text", help="field holding the text in .jsonl inputs")
    parser.add_argument("--split-lines", action="store_true", help=".txt inputs: one document per line")
    parser.add_argument("inputs", nargs="+", help=".txt or .jsonl files")
    args = parser.parse_args()

    try:
        from transformers import AutoTokenizer
    except ImportError:
        fail("needs the transformers package (pip install transformers)")
    try:
        tokenizer = AutoTokenizer.from_pretrained(args.tokenizer, local_files_only=True)
    except Exception as error:  # transformers raises several kinds here
        fail(f"cannot load the tokenizer {args.tokenizer}: {error}; give a local directory or a name already in "
             "the Hugging Face cache")
    tokenizer.model_max_length = sys.maxsize  # documents are packed later; silence the length warning
    eos = tokenizer.eos_token_id
    vocab_size = len(tokenizer)
    if eos is None:
        print(f"tokenize_hf.py: warning: {args.tokenizer} has no eos token; documents are written without a "
              "separator", file=sys.stderr)
    ids = array("I")
    if ids.itemsize != 4:
        fail("this Python's array('I') is not 32-bit")
    count = skipped = 0
    for path, text in documents(args.inputs, args.jsonl_field, args.split_lines):
        if not text.strip():
            skipped += 1
            continue
        document = tokenizer(text, add_special_tokens=False)["input_ids"]
        bad = [i for i in document if not 0 <= i < vocab_size]
        if bad:
            fail(f"{path}: the tokenizer produced id {bad[0]}, not below its vocab size {vocab_size}")
        ids.extend(document)
        if eos is not None:
            ids.append(eos)
        count += 1
    if not ids:
        fail("the inputs hold no text")
    if sys.byteorder != "little":
        ids.byteswap()
    header = struct.pack(HEADER, MAGIC, VERSION, vocab_size, len(ids), NO_EOS if eos is None else eos, 0)
    assert len(header) == 32
    write_atomic(args.output, header, ids)
    note = f", {skipped} empty skipped" if skipped else ""
    print(f"wrote {args.output}: {len(ids)} tokens from {count} documents{note} (vocab {vocab_size}, eos {eos})")


if __name__ == "__main__":
    main()
