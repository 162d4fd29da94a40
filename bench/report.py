"""Turns bench.jsonl into the table of docs/benchmarks.md: tok/s, GPU peak, MFU, HFU and tiertrain/peer ratios.

MFU is the field's (PaLM appendix B, Megatron, torchtitan): model FLOPs, no recompute, over the dense bf16 peak of the
GPU the row ran on (its name in the row; 989 TFLOP/s for H100 SXM and H200). Model FLOPs a token: 6 x every matrix a
token passes through (the decoder layers' linear weights, LoRA's A and B, the LM head), 4 x a frozen one (LoRA and
QLoRA: no weight gradient of the base), + 3 x the attention forward (QK^T and PV over the visible keys: causal, or a
sliding layer's window; the backward 2 x). HFU counts what the run computed: tiertrain's row brings its own count
(metrics.jsonl's hardware_flops_per_token: its plan's recomputed GEMMs and attention forwards, and the attention
backward's score product, half a forward); the peer's, under gradient checkpointing, every layer's forward again and
the same half attention forward. tiertrain's model FLOPs (train/flops.c) are checked here against this script's.

Rows of docs/benchmarks.md before 2026-11-29 divided by 800 TFLOP/s: those before 2026-11-28 counted checkpointing's
recompute (8 x / 6 x parameters, 4.5 x attention: an HFU), those of 2026-11-28 model FLOPs with 3.5 x attention. The
section "MFU restated" of docs/benchmarks.md gives the published rows by this script's count."""
import json
import sys

rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
models = sys.argv[2]

# Dense bf16 tensor FLOP/s by GPU name, the more specific names first (the table of train/flops.c)
GPU_PEAKS = [("H100 PCIe", 756e12), ("H100 NVL", 835e12), ("H100", 989e12), ("H200 NVL", 835e12), ("H200", 989e12),
             ("GH200", 989e12), ("H800", 989e12), ("B200", 2250e12), ("B100", 1750e12), ("A100", 312e12),
             ("A800", 312e12), ("L40S", 362e12), ("A10G", 70e12)]


def peak_flops(row):
    name = row.get("gpu", "")
    return next((peak for key, peak in GPU_PEAKS if key in name), None)


def visible_keys(seq, window):
    """Keys a query sees on average: (seq + 1) / 2 causal; within a window shorter than seq, the first window queries
    see 1 .. window keys and the others window."""
    if not window or window >= seq:
        return (seq + 1) / 2
    return (window * (window + 1) / 2 + (seq - window) * window) / seq


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


def flop_terms(model, seq, adapter="full"):
    """Per token: (model FLOPs, the decoder layers' forward FLOPs a full recompute runs again, the attention
    forward)."""
    c = json.load(open(f"{models}/{model}/config.json"))
    c = c.get("text_config", c)
    D, F, L, V = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"], c["vocab_size"]
    hq, hkv = c["num_attention_heads"], c["num_key_value_heads"]
    hd = c.get("head_dim") or D // hq
    projections = [(D, hq * hd), (D, hkv * hd), (D, hkv * hd), (hq * hd, D), (D, F), (D, F), (F, D)]
    layer = sum(i * o for i, o in projections)
    lora = "lora" in adapter  # lora<r> and qlora<r>: every linear layer of the decoder adapted (all-linear)
    rank = int(adapter.split("lora")[1]) if lora else 0
    # PEFT's adapters are per linear layer: Phi-3's fused qkv_proj and gate_up_proj have one each
    adapted = [(D, (hq + 2 * hkv) * hd), (hq * hd, D), (D, 2 * F), (F, D)] if c["model_type"] == "phi3" else projections
    adapters = L * sum(rank * (i + o) for i, o in adapted)
    attention_forward = sum(2 * 2 * visible_keys(seq, w) * hd * hq for w in layer_windows(c))
    base = L * layer + V * D  # the LM head's matmul (tied or not, it runs once a token)
    model_flops = (4 if lora else 6) * base + 6 * adapters + 3 * attention_forward
    layers_forward = 2 * (L * layer + adapters) + attention_forward
    return model_flops, layers_forward, attention_forward


def peer_hardware(model, seq, adapter, memory):
    """The peer's FLOPs a token: its checkpointing (gc, hidden_states) runs every layer's forward again."""
    model_flops, layers_forward, attention_forward = flop_terms(model, seq, adapter)
    return model_flops + 0.5 * attention_forward + (layers_forward if memory != "save_on_cpu" else 0)


def percent(tok_s, flops, peak):
    return f"{tok_s * flops / peak:.1%}" if peak else "-"


def ours_flops(r):
    """tiertrain's model and hardware FLOPs a token from its metrics, its model FLOPs checked against flop_terms."""
    model_flops = flop_terms(r["model"], r["seq"], r.get("adapter", "full"))[0]
    if "model_flops_per_token" not in r:
        return model_flops, None
    if abs(r["model_flops_per_token"] - model_flops) > 1e-3 * model_flops:
        sys.exit(f"report: {r['model']} at {r['seq']}: tiertrain counts {r['model_flops_per_token']:.6g} model FLOPs "
                 f"a token, this script {model_flops:.6g}: one of the two counts is wrong")
    return r["model_flops_per_token"], r["hardware_flops_per_token"]


print("| model | seq | recipe | attention | memory | tiertrain tok/s | peer tok/s | ratio | tiertrain GPU peak | "
      "peer GPU peak | MFU ours | HFU ours | MFU peer | HFU peer |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")


def peer_memory(memory):
    """The peer's mode for one of ours (bench/run.sh): hidden_states when ours has it, else gc."""
    tokens = memory.split("+")
    return "hidden_states" if "hidden_states" in tokens else "save_on_cpu" if "save_on_cpu" in tokens else "gc"


def peer_for(model, seq, memory, adapter):
    memory = peer_memory(memory)
    return next((p for p in rows if p["who"] == "peer" and p["model"] == model and p["seq"] == seq
                 and p.get("memory", "gc") == memory and p.get("adapter", "full") == adapter), None)


def peer_columns(p):
    adapter, memory = p.get("adapter", "full"), p.get("memory", "gc")
    peak = peak_flops(p)
    model_flops = flop_terms(p["model"], p["seq"], adapter)[0]
    return (percent(p["tok_s"], model_flops, peak),
            percent(p["tok_s"], peer_hardware(p["model"], p["seq"], adapter, memory), peak))


for r in rows:
    memory, adapter = r.get("memory", "gc"), r.get("adapter", "full")
    if r["who"] == "peer":
        if memory == "save_on_cpu" or not any(t["who"] == "tiertrain" and t["model"] == r["model"] and t["seq"] == r["seq"]
                                                and peer_memory(t.get("memory", "gc")) == memory for t in rows):
            mfu, hfu = peer_columns(r)
            print(f"| {r['model']} {adapter} | {r['seq']} | bf16 | - | peer {memory} | - | {r['tok_s']:.0f} | - | - | "
                  f"{r['peak_bytes'] / 1e9:.1f} GB | - | - | {mfu} | {hfu} |")
        continue
    peer = peer_for(r["model"], r["seq"], memory, adapter)
    model_flops, hardware_flops = ours_flops(r)
    peak = peak_flops(r)
    ours = f"{percent(r['tok_s'], model_flops, peak)} | {percent(r['tok_s'], hardware_flops, peak) if hardware_flops else '-'}"
    if peer and r["recipe"] == "bf16":
        mfu, hfu = peer_columns(peer)
        print(f"| {r['model']} {adapter} | {r['seq']} | {r['recipe']} | {r.get('attention', 'auto')} | {memory} | {r['tok_s']:.0f} | {peer['tok_s']:.0f} | "
              f"{r['tok_s'] / peer['tok_s']:.2f}x | {r['peak_bytes'] / 1e9:.1f} GB | {peer['peak_bytes'] / 1e9:.1f} GB | "
              f"{ours} | {mfu} | {hfu} |")
    else:
        print(f"| {r['model']} {adapter} | {r['seq']} | {r['recipe']} | {r.get('attention', 'auto')} | {memory} | {r['tok_s']:.0f} | - | - | {r['peak_bytes'] / 1e9:.1f} GB | - | "
              f"{ours} | - | - |")

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
