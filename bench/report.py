"""Turns bench.jsonl into the table of docs/benchmarks.md: tok/s, GPU peak, MFU at 800 TFLOP/s and
tiertrain/peer ratios. MFU counts the model's FLOPs, no recompute: 6 x parameters per token (4 x with LoRA, which
computes no weight gradient of the base) + 3.5 x the attention forward's (forward 1, backward 2.5; causal, or within
a sliding layer's window). Rows of docs/benchmarks.md before 2026-11-28 counted the recompute of checkpointing
(8 x and 6 x parameters, 4.5 x attention): those figures are HFU."""
import json
import sys

rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
models = sys.argv[2]


def visible_keys(seq, window):
    """Keys a query sees on average: seq / 2 causal, about the window with a sliding window shorter than seq."""
    if not window or window >= seq:
        return seq / 2
    return (window * seq - window * (window - 1) / 2) / seq


def layer_windows(c):
    """Each decoder layer's sliding window (None: full attention), as the config gives them."""
    L, window = c["num_hidden_layers"], c.get("sliding_window")
    if c.get("layer_types"):
        return [window if t == "sliding_attention" else None for t in c["layer_types"]]
    if c.get("sliding_window_pattern"):  # Gemma 3: every n-th layer full
        n = c["sliding_window_pattern"]
        return [None if (l + 1) % n == 0 else window for l in range(L)]
    if c["model_type"] in ("qwen2", "qwen3") and not c.get("use_sliding_window"):
        return [None] * L
    return [window] * L


def flops_per_token(model, seq, adapter="full"):
    c = json.load(open(f"{models}/{model}/config.json"))
    c = c.get("text_config", c)
    D, F, L, V = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"], c["vocab_size"]
    hq, hkv = c["num_attention_heads"], c["num_key_value_heads"]
    hd = c.get("head_dim") or D // hq
    layer = D * hq * hd + 2 * D * hkv * hd + hq * hd * D + 3 * D * F
    params = L * layer + V * D  # the LM head's matmul (tied or not, it runs once per token)
    # per token: causal, or a sliding layer's window
    attention_forward = sum(2 * 2 * visible_keys(seq, w) * hd * hq for w in layer_windows(c))
    # full: forward and both gradients (dx, dW) of every matrix; LoRA: no dW of the base; no recompute (MFU)
    return (4 if "lora" in adapter else 6) * params + 3.5 * attention_forward


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
