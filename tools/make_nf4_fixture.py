#!/usr/bin/env python3
"""The 4-bit quantization fixture of tests/test_quant4.c: bitsandbytes' quantize_4bit (NF4 and FP4,
blocksize 64) and its double quantization of the absmax, mirrored from the published algorithm.

usage: python3 tools/make_nf4_fixture.py --out tests/fixtures/quant4/nf4.safetensors
       python3 tools/make_nf4_fixture.py --model-dirs tests/fixtures/quant4/model
       python3 tools/make_nf4_fixture.py --check-torch      (where torch is installed)

Pure Python (no numpy, no torch): every float32 operation of bitsandbytes' CUDA kernels is done in
Python's double and rounded to float32 with struct, which gives the float32 result bit for bit for
one +, -, * or / of float32 operands (double has more than 2 * 24 + 2 bits). What it mirrors
(bitsandbytes csrc/kernels.cu and bitsandbytes/functional.py):

- kQuantizeBlockwiseSmall / kQuantizeBlockwise for NF4 and FP4: per block of 64 values the absmax
  max |x| (float32), its reciprocal 1.0f / absmax, each value times the reciprocal (float32), then
  dQuantizeNF4's (or dQuantizeFP4's) comparisons against its float32 thresholds; two codes per byte,
  the first value in the high nibble; an odd tail is padded with 0.0 (quantized like a value).
- quantize_4bit(compress_statistics=True): offset = absmax.mean(), then quantize_blockwise of
  absmax - offset with blocksize 256 and the dynamic map: per block absmax2 = max |v|, v * (1 / absmax2),
  and dQuantize<0>'s binary search over the 256 codes with its midpoint rule. torch's mean is a
  parallel reduction whose last bit is not specified; here (and in tiertrain) it is the float64 sum in
  order divided by n, rounded to float32 (the stored offset makes the dequantization exact either way).
- create_dynamic_map(signed=True, max_exponent_bits=7, total_bits=8), with torch.linspace's float32
  arithmetic (step = (end - start) / (n - 1); start + step * i below n / 2, end - step * (n - 1 - i)
  above). --check-torch compares this mirror with torch's own linspace and prints the verdict.
- kDequantizeBlockwise: code[q] * absmax (float32); the nested absmax: dynamic[q] * absmax2 + offset,
  two float32 roundings.

The fixture (safetensors, written with struct + json): inputs 'x.<name>' (float32 values that are
exact bfloat16 numbers, as a bf16 checkpoint gives), and for each type t in nf4, fp4:
'<t>.<name>.codes' (U8), '<t>.<name>.absmax' (F32), '<t>.<name>.dequant' (F32: the float32 products
the kernel rounds to the output dtype), and with double quantization '<t>dq.<name>.codes',
'.qabsmax' (U8), '.nested_absmax' (F32), '.offset' (F32 [1]), '.dequant'; and 'dynamic_map' (F32 [256]).
"""
import argparse
import json
import math
import os
import struct

BLOCK = 64
NESTED_BLOCK = 256


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def bf16(x):
    """Round a float32 to bfloat16 (nearest even), returned as a float."""
    bits = struct.unpack("<I", struct.pack("<f", x))[0]
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return struct.unpack("<f", struct.pack("<I", bits))[0]


def fmul(a, b):
    if math.isinf(a) or math.isinf(b):
        if a == 0 or b == 0:
            return float("nan")
    return f32(a * b)


NF4 = [f32(v) for v in (-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
                        -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
                        0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224,
                        0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0)]
FP4_LUT = [f32(v) for v in (0.0, 0.005208333333, 0.66666667, 1.0, 0.33333333, 0.5, 0.16666667, 0.25)]


def gt(x, threshold):
    return x > f32(threshold)  # NaN compares false, as on the GPU


def quantize_nf4(x):
    if gt(x, 0.03979014977812767):
        if gt(x, 0.3893125355243683):
            if gt(x, 0.6427869200706482):
                return 0b1111 if gt(x, 0.8614784181118011) else 0b1110
            return 0b1101 if gt(x, 0.5016634166240692) else 0b1100
        if gt(x, 0.2035212516784668):
            return 0b1011 if gt(x, 0.2920137718319893) else 0b1010
        return 0b1001 if gt(x, 0.1202552504837513) else 0b1000
    if gt(x, -0.33967943489551544):
        if gt(x, -0.13791173323988914):
            return 0b0111 if gt(x, -0.045525018125772476) else 0b0110
        return 0b0101 if gt(x, -0.23460740596055984) else 0b0100
    if gt(x, -0.6106329262256622):
        return 0b0011 if gt(x, -0.4599952697753906) else 0b0010
    return 0b0001 if gt(x, -0.8480964004993439) else 0b0000


def quantize_fp4(x):
    sign = 0b1000 if x < 0 else 0
    x = abs(x)  # fabsf(NaN) is NaN: every comparison below is false
    if gt(x, 0.29166667):
        if gt(x, 0.583333):
            return (0b0011 if gt(x, 0.8333333) else 0b0010) + sign
        return (0b101 if gt(x, 0.4166667) else 0b100) + sign
    if gt(x, 0.0859375):
        return (0b0111 if gt(x, 0.20833333) else 0b0110) + sign
    return (0b0001 if gt(x, 0.00260417) else 0b0000) + sign


def dequantize_code(code, quant_type):
    if quant_type == "nf4":
        return NF4[code]
    sign = f32(1.0 - 2 * ((code & 0b1000) >> 3))
    return f32(FP4_LUT[code & 0b111] * sign)


def quantize_4bit(values, quant_type):
    """Returns (packed codes, absmax per block)."""
    quantize = quantize_nf4 if quant_type == "nf4" else quantize_fp4
    codes, absmax = [], []
    for start in range(0, len(values), BLOCK):
        block = values[start:start + BLOCK]
        amax = f32(max(abs(v) for v in block))
        absmax.append(amax)
        recip = f32(1.0 / amax) if amax != 0 else float("inf")
        if len(block) % 2:
            block = block + [0.0]
        for k in range(0, len(block), 2):
            hi = quantize(fmul(block[k], recip))
            lo = quantize(fmul(block[k + 1], recip))
            codes.append((hi << 4) | lo)
    return codes, absmax


def linspace_f32(start, end, n):
    start, end = f32(start), f32(end)
    step = f32(f32(end - start) / f32(n - 1))
    half = n // 2
    return [f32(start + f32(step * i)) if i < half else f32(end - f32(step * (n - i - 1))) for i in range(n)]


def dynamic_map(linspace=linspace_f32):
    data = []
    max_exponent_bits, non_sign_bits = 7, 7
    for i in range(max_exponent_bits):
        items = 2 ** (i + non_sign_bits - max_exponent_bits) + 1
        b = linspace(0.1, 1, items)
        means = [f32(f32(b[k] + b[k + 1]) / 2.0) for k in range(items - 1)]
        scale = f32(10 ** (-(max_exponent_bits - 1) + i))
        data += [f32(scale * m) for m in means]
        data += [f32(-scale * m) for m in means]
    data += [0.0, 1.0]
    assert len(data) == 256
    return sorted(data)


def quantize_dynamic(code, x):
    """dQuantize<0>: binary search over the sorted 256 codes, then the midpoint rule."""
    pivot, upper_pivot, lower_pivot = 127, 255, 0
    lower, upper = -1.0, 1.0
    val = code[pivot]
    i = 64
    while i > 0:
        if x > val:
            lower_pivot, lower = pivot, val
            pivot += i
        else:
            upper_pivot, upper = pivot, val
            pivot -= i
        val = code[pivot]
        i >>= 1
    if upper_pivot == 255:
        upper = code[upper_pivot]
    if lower_pivot == 0:
        lower = code[lower_pivot]
    if x > val:
        return upper_pivot if x > f32(f32(upper + val) * 0.5) else pivot
    return lower_pivot if x < f32(f32(lower + val) * 0.5) else pivot


def double_quantize(absmax, code):
    offset = f32(sum(absmax) / len(absmax))
    centred = [f32(a - offset) for a in absmax]
    qabsmax, nested = [], []
    for start in range(0, len(centred), NESTED_BLOCK):
        block = centred[start:start + NESTED_BLOCK]
        amax = f32(max(abs(v) for v in block))
        nested.append(amax)
        recip = f32(1.0 / amax) if amax != 0 else float("inf")
        qabsmax += [quantize_dynamic(code, fmul(v, recip)) for v in block]
    return qabsmax, nested, offset


def dequantize_4bit(codes, absmax, n, quant_type):
    out = []
    for k in range(n):
        byte = codes[k // 2]
        code = byte >> 4 if k % 2 == 0 else byte & 0x0F
        out.append(f32(dequantize_code(code, quant_type) * absmax[k // BLOCK]))
    return out


def nested_absmax(qabsmax, nested, offset, code):
    return [f32(f32(code[q] * nested[b // NESTED_BLOCK]) + offset) for b, q in enumerate(qabsmax)]


def inputs():
    """Deterministic bf16 test matrices: normal values from an LCG, with an all-zero block, a
    constant block, a block whose absmax is negative, values on NF4 thresholds and an odd tail."""
    state = [0x853C49E6748FEA9B]

    def uniform():
        state[0] = (state[0] * 6364136223846793005 + 1442695040888963407) % 2**64
        return ((state[0] >> 11) + 0.5) / 2**53

    def normal():
        return math.sqrt(-2 * math.log(uniform())) * math.cos(2 * math.pi * uniform())

    def matrix(n, std):
        return [bf16(f32(std * normal())) for _ in range(n)]

    w = matrix(160 * 200, 0.02)
    w[3 * 64:4 * 64] = [0.0] * 64                      # an all-zero block
    w[5 * 64:6 * 64] = [bf16(0.125)] * 64               # a constant block
    w[7 * 64:8 * 64] = [bf16(-v) for v in w[7 * 64:8 * 64]]
    w[7 * 64 + 9] = -0.5                                # its absmax is a negative value
    # values whose normalised form sits on an NF4 threshold's neighbourhood (absmax 1.0)
    w[9 * 64] = 1.0
    for k, t in enumerate((0.03979014977812767, 0.3893125355243683, -0.33967943489551544, 0.8614784181118011)):
        w[9 * 64 + 1 + k] = bf16(f32(t))
    return {"w": ([160, 200], w), "tail": ([5, 27], matrix(135, 1.5))}


def write_safetensors(path, tensors, metadata):
    header, blobs, offset = {}, [], 0
    for name, (dtype, shape, data) in tensors.items():
        blob = bytes(data) if dtype == "U8" else struct.pack("<%df" % len(data), *data)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    header["__metadata__"] = metadata
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)
    os.replace(tmp, path)


def make(out):
    code = dynamic_map()
    tensors = {"dynamic_map": ("F32", [256], code)}
    for name, (shape, values) in inputs().items():
        n = len(values)
        tensors["x." + name] = ("F32", shape, values)
        for quant_type in ("nf4", "fp4"):
            codes, absmax = quantize_4bit(values, quant_type)
            tensors["%s.%s.codes" % (quant_type, name)] = ("U8", [len(codes)], codes)
            tensors["%s.%s.absmax" % (quant_type, name)] = ("F32", [len(absmax)], absmax)
            tensors["%s.%s.dequant" % (quant_type, name)] = ("F32", shape, dequantize_4bit(codes, absmax, n, quant_type))
            qabsmax, nested, offset = double_quantize(absmax, code)
            prefix = "%sdq.%s" % (quant_type, name)
            tensors[prefix + ".qabsmax"] = ("U8", [len(qabsmax)], qabsmax)
            tensors[prefix + ".nested_absmax"] = ("F32", [len(nested)], nested)
            tensors[prefix + ".offset"] = ("F32", [1], [offset])
            deq_absmax = nested_absmax(qabsmax, nested, offset, code)
            tensors[prefix + ".dequant"] = ("F32", shape, dequantize_4bit(codes, deq_absmax, n, quant_type))
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    write_safetensors(out, tensors, {"reference": "tools/make_nf4_fixture.py (bitsandbytes' CUDA algorithm, mirrored)",
                                     "blocksize": str(BLOCK), "nested_blocksize": str(NESTED_BLOCK)})
    print("wrote %s (%d tensors)" % (out, len(tensors)))


# The model fixtures (--model-dirs): a one-layer Qwen3 of hidden 64 saved in bf16 and, from the same bf16 values, as
# transformers saves a model loaded with BitsAndBytesConfig(load_in_4bit=True) (NF4 with double quantization, and FP4
# without), every part as bitsandbytes' QuantState.as_dict(packed=True) and Linear4bit's state dict name it.
MODEL_CONFIG = {
    "architectures": ["Qwen3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0, "bos_token_id": None,
    "dtype": "bfloat16", "eos_token_id": None, "head_dim": 32, "hidden_act": "silu", "hidden_size": 64,
    "initializer_range": 0.02, "intermediate_size": 128, "max_position_embeddings": 64, "model_type": "qwen3",
    "num_attention_heads": 2, "num_hidden_layers": 1, "num_key_value_heads": 1, "rms_norm_eps": 1e-06,
    "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"}, "sliding_window": None,
    "tie_word_embeddings": True, "use_cache": True, "use_sliding_window": False, "vocab_size": 32,
}
LINEAR = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
          "mlp.up_proj", "mlp.down_proj")


def model_tensors():
    """The bf16 model's tensors, name -> (shape, values): normal values from the fixture's LCG (std 0.05), norms near 1,
    and an all-zero block in q_proj (absmax 0: every value gets the lowest code, as on the GPU)."""
    state = [0x2545F4914F6CDD1D]

    def uniform():
        state[0] = (state[0] * 6364136223846793005 + 1442695040888963407) % 2**64
        return ((state[0] >> 11) + 0.5) / 2**53

    def normal():
        return math.sqrt(-2 * math.log(uniform())) * math.cos(2 * math.pi * uniform())

    c = MODEL_CONFIG
    D, F, hd = c["hidden_size"], c["intermediate_size"], c["head_dim"]
    q, kv = c["num_attention_heads"] * hd, c["num_key_value_heads"] * hd
    shapes = {"self_attn.q_proj": [q, D], "self_attn.k_proj": [kv, D], "self_attn.v_proj": [kv, D],
              "self_attn.o_proj": [D, q], "mlp.gate_proj": [F, D], "mlp.up_proj": [F, D], "mlp.down_proj": [D, F]}
    tensors = {"model.embed_tokens.weight": ([c["vocab_size"], D],
                                             [bf16(f32(0.05 * normal())) for _ in range(c["vocab_size"] * D)])}
    prefix = "model.layers.0."
    for name, shape in (("input_layernorm", [D]), ("post_attention_layernorm", [D]), ("self_attn.q_norm", [hd]),
                        ("self_attn.k_norm", [hd])):
        tensors[prefix + name + ".weight"] = (shape, [bf16(f32(1.0 + 0.1 * normal())) for _ in range(shape[0])])
    for name in LINEAR:
        shape = shapes[name]
        values = [bf16(f32(0.05 * normal())) for _ in range(shape[0] * shape[1])]
        if name == "self_attn.q_proj":
            values[2 * BLOCK:3 * BLOCK] = [0.0] * BLOCK
        tensors[prefix + name + ".weight"] = (shape, values)
    tensors["model.norm.weight"] = ([D], [bf16(f32(1.0 + 0.1 * normal())) for _ in range(D)])
    return tensors


def bf16_bytes(values):
    return b"".join(struct.pack("<I", struct.unpack("<I", struct.pack("<f", v))[0])[2:] for v in values)


def write_model_safetensors(path, tensors):
    """tensors: name -> (dtype, shape, raw bytes), in order; as safetensors.torch.save_file lays them out."""
    header, offset = {}, 0
    for name, (dtype, shape, blob) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(blob)]}
        offset += len(blob)
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for _, _, blob in tensors.values():
            f.write(blob)


def fp32_bytes(values):
    return struct.pack("<%df" % len(values), *values)


def quant_map(quant_type):
    """get_4bit_type(quant_type): the table in float32, divided by its largest magnitude."""
    if quant_type == "nf4":
        return list(NF4)
    data = [0, 0.0625, 8.0, 12.0, 4.0, 6.0, 2.0, 3.0, -0, -0.0625, -8.0, -12.0, -4.0, -6.0, -2.0, -3.0]
    return [f32(f32(v) / f32(12.0)) for v in data]


def write_model_dir(out, tensors, quant_type=None, double_quant=False, skip=None):
    """skip: llm_int8_skip_modules; a linear weight whose module name ends with one of them stays in bf16 (as
    transformers' should_convert_module leaves such a module unconverted)."""
    os.makedirs(out, exist_ok=True)
    config = dict(MODEL_CONFIG)
    saved = {}
    code = dynamic_map()
    for name, (shape, values) in tensors.items():
        module = name[:-len(".weight")]
        kept = skip and any(module.endswith(key) for key in skip)
        if quant_type is None or kept or not any(name.endswith(m + ".weight") for m in LINEAR):
            saved[name] = ("BF16", shape, bf16_bytes(values))
            continue
        codes, absmax = quantize_4bit(values, quant_type)
        state = {"quant_type": quant_type, "blocksize": BLOCK, "dtype": "bfloat16", "shape": shape}
        saved[name] = ("U8", [(len(values) + 1) // 2, 1], bytes(codes))
        if double_quant:
            qabsmax, nested, offset = double_quantize(absmax, code)
            saved[name + ".absmax"] = ("U8", [len(qabsmax)], bytes(qabsmax))
        else:
            saved[name + ".absmax"] = ("F32", [len(absmax)], fp32_bytes(absmax))
        saved[name + ".quant_map"] = ("F32", [16], fp32_bytes(quant_map(quant_type)))
        if double_quant:
            saved[name + ".nested_absmax"] = ("F32", [len(nested)], fp32_bytes(nested))
            saved[name + ".nested_quant_map"] = ("F32", [256], fp32_bytes(code))
            state.update({"nested_blocksize": NESTED_BLOCK, "nested_dtype": "float32", "nested_offset": offset})
        packed = json.dumps(state).encode("utf-8")
        saved[name + ".quant_state.bitsandbytes__" + quant_type] = ("U8", [len(packed)], packed)
    if quant_type:
        config["quantization_config"] = {
            "_load_in_4bit": True, "_load_in_8bit": False, "bnb_4bit_compute_dtype": "bfloat16",
            "bnb_4bit_quant_storage": "uint8", "bnb_4bit_quant_type": quant_type,
            "bnb_4bit_use_double_quant": double_quant, "llm_int8_enable_fp32_cpu_offload": False,
            "llm_int8_has_fp16_weight": False, "llm_int8_skip_modules": skip, "llm_int8_threshold": 6.0,
            "load_in_4bit": True, "load_in_8bit": False, "quant_method": "bitsandbytes"}
    # transformers sorts the state dict's names when it writes safetensors
    write_model_safetensors(os.path.join(out, "model.safetensors"), dict(sorted(saved.items())))
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
        f.write("\n")
    print("wrote %s (%d tensors)" % (out, len(saved)))


def make_model_dirs(out):
    tensors = model_tensors()
    write_model_dir(os.path.join(out, "bf16"), tensors)
    write_model_dir(os.path.join(out, "bnb_nf4_dq"), tensors, "nf4", True)
    write_model_dir(os.path.join(out, "bnb_fp4"), tensors, "fp4", False)
    # as Unsloth's dynamic 4-bit saves: some linear layers kept in 16 bits
    write_model_dir(os.path.join(out, "bnb_nf4_skip"), tensors, "nf4", True,
                    ["lm_head", "model.layers.0.mlp.down_proj", "v_proj"])


def check_torch():
    import torch

    def torch_linspace(start, end, n):
        return torch.linspace(start, end, n, dtype=torch.float32).tolist()

    mirror = dynamic_map()
    data = []
    for i in range(7):
        items = 2 ** i + 1
        boundaries = torch.linspace(0.1, 1, items, dtype=torch.float32)
        means = (boundaries[:-1] + boundaries[1:]) / 2.0
        data += ((10 ** (-6 + i)) * means).tolist()
        data += (-(10 ** (-6 + i)) * means).tolist()
    data += [0, 1.0]
    reference = torch.tensor(sorted(data), dtype=torch.float32).tolist()
    same = all(struct.pack("<f", a) == struct.pack("<f", b) for a, b in zip(mirror, reference))
    print("dynamic map: torch and the mirror %s" % ("agree bit for bit" if same else "DIFFER"))
    for quant_type in ("nf4", "fp4"):
        import random
        rng = random.Random(5)
        values = [bf16(f32(rng.gauss(0, 0.02))) for _ in range(64 * 33 + 5)]
        codes, absmax = quantize_4bit(values, quant_type)
        print("%s: mirror on %d values: %d code bytes, %d blocks" % (quant_type, len(values), len(codes), len(absmax)))
    return 0 if same else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="tests/fixtures/quant4/nf4.safetensors")
    parser.add_argument("--check-torch", action="store_true")
    parser.add_argument("--model-dirs", metavar="DIR",
                        help="write the model fixtures instead: DIR/bf16, DIR/bnb_nf4_dq, DIR/bnb_fp4, DIR/bnb_nf4_skip")
    args = parser.parse_args()
    if args.check_torch:
        raise SystemExit(check_torch())
    if args.model_dirs:
        make_model_dirs(args.model_dirs)
    else:
        make(args.out)
