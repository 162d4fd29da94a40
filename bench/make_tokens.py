"""Writes a TTTOKENS v1 file of uniformly random ids (docs/token_format.md): bench data."""
import array
import random
import struct
import sys

path, vocab, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(0)
ids = array.array("I", (rng.randrange(vocab) for _ in range(count)))
with open(path, "wb") as f:
    f.write(struct.pack("<8sIIQII", b"TTTOKENS", 1, vocab, count, 0xFFFFFFFF, 0))
    f.write(ids.tobytes())
