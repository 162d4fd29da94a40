#!/usr/bin/env python3
"""Writes the mixed JSONL datasets of bench/preprocess_load.sh: about GB gigabytes in three files, the same bytes for
the same arguments (a seeded generator).

  completion.jsonl  55%: documents of 200 B to 40 kB (log-uniform), and a 64 MB line every 200 MB
  chat.jsonl        30%: conversations of 2-10 turns, a 2000-turn one every 50 MB, a 32 MB message every 200 MB
  alpaca.jsonl      15%: instruction / input / output records, a 16 MB output every 100 MB

The text mixes English-like words, digits, code-like punctuation, newlines and non-ASCII words (accents, CJK,
emoji), so every branch of a byte-level BPE pre-tokenizer is taken.

usage: preprocess_load_data.py OUT_DIR GB
"""
import json
import os
import random
import sys

out_dir, gigabytes = sys.argv[1], float(sys.argv[2])
rng = random.Random(20261129)
letters = "abcdefghijklmnopqrstuvwxyz"
words = ["".join(rng.choice(letters) for _ in range(rng.randint(1, 10))) for _ in range(20000)]
words += ["café", "naïve", "Straße", "東京", "数据", "テスト", "😀", "Ωmega", "x²", "—"] * 40
words += ["0", "42", "3.14159", "2026", "1e-5", "{", "}", "()", "->", "==", "    ", "\n", "\n\n", "\t"] * 60


def paragraph(n_bytes):
    out, n = [], 0
    while n < n_bytes:
        w = rng.choice(words)
        out.append(w)
        n += len(w.encode()) + 1
    return " ".join(out)


# a pool of paragraphs, sampled (with a random offset) so that generating gigabytes stays fast
pool = [paragraph(rng.randint(2000, 60000)) for _ in range(400)]


def text(n_bytes):
    parts, n = [], 0
    while n < n_bytes:
        p = rng.choice(pool)
        start = rng.randrange(len(p) // 2)
        piece = p[start:start + n_bytes - n]
        parts.append(piece)
        n += len(piece.encode())
    return "".join(parts)


def log_uniform(lo, hi):
    return int(lo * (hi / lo) ** rng.random())


def write(name, share, make_record, huge_every, make_huge):
    target = int(gigabytes * 1e9 * share)
    written = next_huge = 0
    with open(os.path.join(out_dir, name), "w", encoding="utf-8") as f:
        while written < target:
            if huge_every and written >= next_huge:
                next_huge += huge_every
                line = json.dumps(make_huge(), ensure_ascii=False)
            else:
                line = json.dumps(make_record(), ensure_ascii=False)
            f.write(line + "\n")
            written += len(line.encode()) + 1


def chat_record():
    turns = rng.randint(1, 5)
    messages = [{"role": "system", "content": text(log_uniform(20, 400))}] if rng.random() < 0.3 else []
    for _ in range(turns):
        messages.append({"role": "user", "content": text(log_uniform(50, 3000))})
        messages.append({"role": "assistant", "content": text(log_uniform(50, 4000))})
    return {"messages": messages}


long_chat_every = 50_000_000
state = {"chats": 0}


def huge_chat():
    state["chats"] += 1
    if state["chats"] % 4 == 0:  # one 32 MB message every 200 MB
        return {"messages": [{"role": "user", "content": "Summarize."},
                             {"role": "assistant", "content": text(32_000_000)}]}
    messages = []
    for _ in range(1000):  # 2000 turns
        messages.append({"role": "user", "content": text(100)})
        messages.append({"role": "assistant", "content": text(100)})
    return {"messages": messages}


os.makedirs(out_dir, exist_ok=True)
write("completion.jsonl", 0.55, lambda: {"text": text(log_uniform(200, 40000))}, 200_000_000,
      lambda: {"text": text(64_000_000)})
write("chat.jsonl", 0.30, chat_record, long_chat_every, huge_chat)
write("alpaca.jsonl", 0.15,
      lambda: {"instruction": text(log_uniform(20, 500)), "input": text(log_uniform(1, 2000)) if rng.random() < 0.5
               else "", "output": text(log_uniform(20, 3000))}, 100_000_000,
      lambda: {"instruction": "Write it all.", "input": "", "output": text(16_000_000)})
