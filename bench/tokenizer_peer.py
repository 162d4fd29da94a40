#!/usr/bin/env python3
"""The peer of bench/tokenizer_bench.c: Hugging Face `tokenizers` (Rust) encoding the same documents.

usage: RAYON_NUM_THREADS=N python3 bench/tokenizer_peer.py TOKENIZER_JSON FILE...

Reads each file as bytes, decoded with errors='replace' (as make_tokenizer_golden.py does), warms the
tokenizer's cache with one pass, then times `encode_batch` (add_special_tokens=True) over every
document for several passes: one Rayon thread with RAYON_NUM_THREADS=1, all cores otherwise. Prints MB/s
of UTF-8 input, as tokenizer_bench does.
"""
import os
import sys
import time


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(sys.argv[1])
    texts = []
    for path in sys.argv[2:]:
        with open(path, "rb") as f:
            texts.append(f.read().decode("utf-8", errors="replace"))
    size = sum(len(t.encode("utf-8")) for t in texts)
    tokenizer.encode_batch(texts, add_special_tokens=True)  # warm-up: the cache
    passes = 5
    start = time.perf_counter()
    tokens = 0
    for _ in range(passes):
        tokens += sum(len(e.ids) for e in tokenizer.encode_batch(texts, add_special_tokens=True))
    seconds = time.perf_counter() - start
    threads = os.environ.get("RAYON_NUM_THREADS", "all")
    print(f"hf tokenizers, {threads} thread(s): {passes * size / seconds / 1e6:.1f} MB/s "
          f"({tokens // passes} tokens per pass, {size / 1e6:.2f} MB)")


if __name__ == "__main__":
    main()
