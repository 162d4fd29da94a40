"""Turns bench.jsonl into the table of docs/benchmarks.md: tok/s, GPU peak, MFU at 800 TFLOP/s
(8 x parameters + 4.5 x causal attention forward FLOPs per token, as with checkpointing), and
tiertrain/peer ratios."""
import json
import sys

rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
models = sys.argv[2]


def flops_per_token(model, seq):
    c = json.load(open(f"{models}/{model}/config.json"))
    D, F, L, V = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"], c["vocab_size"]
    hq, hkv, hd = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    layer = D * hq * hd + 2 * D * hkv * hd + hq * hd * D + 3 * D * F
    params = L * layer + V * D  # the LM head's matmul (tied or not, it runs once per token)
    attention_forward = 2 * 2 * seq / 2 * hd * hq * L  # per token, causal
    return 8 * params + 4.5 * attention_forward


print(f"| model | seq | recipe | attention | tiertrain tok/s | peer tok/s | ratio | tiertrain GPU peak | peer GPU peak | MFU ours | MFU peer |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    if r["who"] != "tiertrain":
        continue
    peer = next((p for p in rows if p["who"] == "peer" and p["model"] == r["model"] and p["seq"] == r["seq"]), None)
    f = flops_per_token(r["model"], r["seq"])
    mfu = r["tok_s"] * f / 800e12
    if peer and r["recipe"] == "bf16":
        pm = peer["tok_s"] * f / 800e12
        print(f"| {r['model']} | {r['seq']} | {r['recipe']} | {r.get('attention', 'auto')} | {r['tok_s']:.0f} | {peer['tok_s']:.0f} | "
              f"{r['tok_s'] / peer['tok_s']:.2f}x | {r['peak_bytes'] / 1e9:.1f} GB | {peer['peak_bytes'] / 1e9:.1f} GB | "
              f"{mfu:.1%} | {pm:.1%} |")
    else:
        print(f"| {r['model']} | {r['seq']} | {r['recipe']} | {r.get('attention', 'auto')} | {r['tok_s']:.0f} | - | - | {r['peak_bytes'] / 1e9:.1f} GB | - | "
              f"{mfu:.1%} | - |")
