"""Turns bench.jsonl into the table of docs/benchmarks.md: tok/s, GPU peak, MFU at 800 TFLOP/s
(8 x parameters + 4.5 x causal attention forward FLOPs per token, as with checkpointing; 6 x
parameters with LoRA, which computes no weight gradient of the base), and
tiertrain/peer ratios."""
import json
import sys

rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
models = sys.argv[2]


def flops_per_token(model, seq, adapter="full"):
    c = json.load(open(f"{models}/{model}/config.json"))
    D, F, L, V = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"], c["vocab_size"]
    hq, hkv, hd = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    layer = D * hq * hd + 2 * D * hkv * hd + hq * hd * D + 3 * D * F
    params = L * layer + V * D  # the LM head's matmul (tied or not, it runs once per token)
    attention_forward = 2 * 2 * seq / 2 * hd * hq * L  # per token, causal
    # full: forward, recompute, and both gradients (dx, dW) of every matrix; LoRA: no dW of the base
    return (6 if adapter.startswith("lora") else 8) * params + 4.5 * attention_forward


print(f"| model | seq | recipe | attention | memory | tiertrain tok/s | peer tok/s | ratio | tiertrain GPU peak | peer GPU peak | MFU ours | MFU peer |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")


def peer_memory(memory):
    """The peer's mode for one of ours (bench/run.sh): hidden_states when ours has it, else gc."""
    tokens = memory.split("+")
    return "hidden_states" if "hidden_states" in tokens else "save_on_cpu" if "save_on_cpu" in tokens else "gc"


def peer_for(model, seq, memory, adapter):
    memory = peer_memory(memory)
    return next((p for p in rows if p["who"] == "peer" and p["model"] == model and p["seq"] == seq
                 and p.get("memory", "gc") == memory and p.get("adapter", "full") == adapter), None)


for r in rows:
    memory = r.get("memory", "gc")
    if r["who"] == "peer":
        if memory == "save_on_cpu" or not any(t["who"] == "tiertrain" and t["model"] == r["model"] and t["seq"] == r["seq"]
                                                and peer_memory(t.get("memory", "gc")) == memory for t in rows):
            f = flops_per_token(r["model"], r["seq"], r.get("adapter", "full"))
            print(f"| {r['model']} {r.get('adapter', 'full')} | {r['seq']} | bf16 | - | peer {memory} | - | {r['tok_s']:.0f} | - | - | "
                  f"{r['peak_bytes'] / 1e9:.1f} GB | - | {r['tok_s'] * f / 800e12:.1%} |")
        continue
    peer = peer_for(r["model"], r["seq"], memory, r.get("adapter", "full"))
    f = flops_per_token(r["model"], r["seq"], r.get("adapter", "full"))
    mfu = r["tok_s"] * f / 800e12
    if peer and r["recipe"] == "bf16":
        pm = peer["tok_s"] * f / 800e12
        print(f"| {r['model']} {r.get('adapter', 'full')} | {r['seq']} | {r['recipe']} | {r.get('attention', 'auto')} | {memory} | {r['tok_s']:.0f} | {peer['tok_s']:.0f} | "
              f"{r['tok_s'] / peer['tok_s']:.2f}x | {r['peak_bytes'] / 1e9:.1f} GB | {peer['peak_bytes'] / 1e9:.1f} GB | "
              f"{mfu:.1%} | {pm:.1%} |")
    else:
        print(f"| {r['model']} {r.get('adapter', 'full')} | {r['seq']} | {r['recipe']} | {r.get('attention', 'auto')} | {memory} | {r['tok_s']:.0f} | - | - | {r['peak_bytes'] / 1e9:.1f} GB | - | "
              f"{mfu:.1%} | - |")

# Activation slope: GPU peak growth per extra context token, between the shortest and the longest
# length measured for the same model, recipe, attention and memory mode (a length run twice: its larger peak).
slopes = {}
for r in rows:
    key = (r["who"], r["model"] + " " + r.get("adapter", "full"), r.get("recipe", "bf16"), r.get("memory", "gc"),
           r.get("attention", "auto"))
    peaks = slopes.setdefault(key, {})
    peaks[r["seq"]] = max(peaks.get(r["seq"], 0), r["peak_bytes"])
lines = []
for (who, model, recipe, memory, _attention), peaks in sorted(slopes.items()):
    points = sorted(peaks.items())
    if len(points) < 2:  # one length: no slope
        continue
    (s0, p0), (s1, p1) = points[0], points[-1]
    lines.append(f"| {who} | {model} | {recipe} | {memory} | {s0} -> {s1} | {(p1 - p0) / (s1 - s0) / 1e6:.3f} MB/token |")
if lines:
    print()
    print("| who | model | recipe | memory | lengths | activation slope |")
    print("|---|---|---|---|---|---|")
    print("\n".join(lines))
