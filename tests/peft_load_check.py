#!/usr/bin/env python3
"""Checks that peft loads the LoRA adapters tiertrain saved (run where torch, transformers and peft are
installed, e.g. on the GPU machine).

usage: python3 tests/peft_load_check.py --base BASE_DIR --adapter ADAPTER_DIR [--merged MERGED_DIR]
       [--tokens TOKENS_FILE [--seq-len T --rows B]] [--metrics METRICS_JSONL | --tiertrain-loss LOSS]
       [--tolerance REL]

BASE_DIR is the Hugging Face model the adapter was trained on (base_model of the run), ADAPTER_DIR a
directory tiertrain wrote with adapter: lora (output_dir, or a checkpoint-<step>). For adapter: qlora,
BASE_DIR is the base as the run computes with it, `tiertrain dequantize --base <base_model> -o BASE_DIR`
(its 4-bit weights dequantized, F32, loadable without bitsandbytes). The check:
  1. PeftModel.from_pretrained(base, ADAPTER_DIR) loads every tensor of adapter_model.safetensors into
     its lora_A / lora_B (no missing or unexpected keys) and the loaded values equal the file's;
  2. adapter_config.json is what peft reads back (peft_type LORA, r, lora_alpha, target_modules);
  3. the adapted model's loss on a batch (the first 64 tokens of TOKENS_FILE, a tiertrain token file,
     or a fixed random batch) is finite and differs from the base model's unless B is all zero;
  4. with --merged (the output of `tiertrain merge --base BASE_DIR --adapter ADAPTER_DIR -o MERGED_DIR`):
     the merged model's loss equals the adapted model's within 1e-4 relative (fp32; bf16 bases
     within 2e-2), as does peft's own merge_and_unload;
  5. with --metrics (tiertrain's metrics.jsonl of a run that loaded ADAPTER_DIR with lora_model_dir,
     lora_dropout 0, on a token file of exactly B * T + 1 tokens, sequence_len T, micro_batch_size B,
     max_steps 1: its step-1 loss is that batch's, before any update) or --tiertrain-loss: the adapted
     model's loss on the same B rows (row i: tokens [i T, i T + T], labels the same, so the T next-token
     predictions per row tiertrain makes) equals tiertrain's within --tolerance relative (default 1e-4:
     tiertrain's fp32 CPU backend; 2e-2 for a bf16 GPU run).
Exit status 0 when all hold; the last line is then OK.
"""
import argparse
import json
import os
import sys

import numpy as np
import torch
import transformers
from safetensors.torch import load_file


def read_tokens(tokens_path):
    """A tiertrain token file, version 1 (docs/token_format.md): a 32-byte header, then little-endian uint32 ids."""
    with open(tokens_path, "rb") as f:
        header = f.read(32)
    if header[:8] != b"TTTOKENS" or int.from_bytes(header[8:12], "little") != 1:
        raise SystemExit(f"{tokens_path}: not a version 1 tiertrain token file")
    count = int.from_bytes(header[16:24], "little")
    return np.fromfile(tokens_path, dtype="<u4", count=count, offset=32)


def rows_from(tokens_path, seq_len, rows, vocab_size):
    """tiertrain's sequences of a version 1 stream: row i is tokens [i T, i T + T] (T + 1 ids; stride T)."""
    ids = read_tokens(tokens_path)
    if len(ids) < rows * seq_len + 1:
        raise SystemExit(f"{tokens_path}: {len(ids)} tokens, fewer than rows x seq_len + 1 = {rows * seq_len + 1}")
    if len(ids) != rows * seq_len + 1:
        print(f"note: {tokens_path} has {len(ids)} tokens; tiertrain's step-1 batch is its first {rows} sequences "
              f"only when it has exactly {rows * seq_len + 1}")
    if int(ids.max()) >= vocab_size:
        raise SystemExit(f"{tokens_path}: token id {int(ids.max())} is not below the vocabulary ({vocab_size})")
    batch = np.stack([ids[i * seq_len:i * seq_len + seq_len + 1] for i in range(rows)]).astype(np.int64)
    ids = torch.tensor(batch)
    return ids, ids.clone()


def first_step_loss(metrics_path):
    with open(metrics_path) as f:
        for line in f:
            record = json.loads(line)
            if record.get("step") == 1 and "loss" in record:
                return float(record["loss"])
    raise SystemExit(f"{metrics_path}: no step 1 with a loss")


def batch_from(tokens_path, vocab_size):
    if tokens_path:
        # a tiertrain token file (docs/token_format.md): a 32-byte header, then little-endian uint32 ids
        ids = np.fromfile(tokens_path, dtype="<u4", count=4096, offset=32)
        ids = ids[ids < vocab_size][:64]
        if len(ids) < 8:
            raise SystemExit(f"{tokens_path}: too few token ids below the vocabulary ({vocab_size})")
        ids = torch.tensor(ids.astype(np.int64)).reshape(1, -1)
    else:
        ids = torch.randint(0, vocab_size, (2, 32), generator=torch.Generator().manual_seed(5))
    return ids, ids.clone()


def loss_of(model, ids, labels):
    with torch.no_grad():
        return float(model(input_ids=ids, labels=labels).loss)


def main():
    import peft

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", required=True)
    parser.add_argument("--adapter", required=True)
    parser.add_argument("--merged")
    parser.add_argument("--tokens")
    parser.add_argument("--seq-len", type=int, help="with --rows: tiertrain's batch of the token file (see 5.)")
    parser.add_argument("--rows", type=int, default=1)
    parser.add_argument("--metrics", help="tiertrain's metrics.jsonl: its step-1 loss is compared (see 5.)")
    parser.add_argument("--tiertrain-loss", type=float)
    parser.add_argument("--tolerance", type=float, default=1e-4)
    args = parser.parse_args()
    failures = []

    # eager attention: transformers' SDPA path leaves out Gemma 2's attention soft-capping
    base = transformers.AutoModelForCausalLM.from_pretrained(args.base, dtype=torch.float32, attn_implementation="eager")
    if getattr(base.config, "quantization_config", None):
        raise SystemExit(f"{args.base} is saved quantized; give the dequantized base (tiertrain dequantize --base "
                         f"{args.base} -o DIR)")
    dtype = base.config.dtype if hasattr(base.config, "dtype") else base.config.torch_dtype
    vocab_size = base.config.get_text_config().vocab_size  # a multimodal config keeps it in text_config
    if args.seq_len:
        if not args.tokens:
            raise SystemExit("--seq-len needs --tokens")
        ids, labels = rows_from(args.tokens, args.seq_len, args.rows, vocab_size)
    else:
        ids, labels = batch_from(args.tokens, vocab_size)
    expected = args.tiertrain_loss
    if args.metrics:
        expected = first_step_loss(args.metrics)
    base_loss = loss_of(base, ids, labels)

    saved = load_file(os.path.join(args.adapter, "adapter_model.safetensors"))
    config = json.load(open(os.path.join(args.adapter, "adapter_config.json")))
    model = peft.PeftModel.from_pretrained(base, args.adapter)
    model.eval()
    loaded = {k.replace(".default.", "."): v for k, v in model.named_parameters() if "lora_" in k}
    if set(loaded) != set(saved):
        failures.append(f"tensor names: only in the file {sorted(set(saved) - set(loaded))[:4]}, "
                        f"only in the model {sorted(set(loaded) - set(saved))[:4]}")
    for name, tensor in saved.items():
        if name in loaded and not torch.equal(loaded[name].detach().to(tensor.dtype), tensor):
            failures.append(f"{name}: loaded values differ from the file's")
    read_back = model.peft_config["default"]
    if (str(read_back.peft_type).split(".")[-1] != "LORA" or read_back.r != config["r"] or
            read_back.lora_alpha != config["lora_alpha"] or set(read_back.target_modules) != set(config["target_modules"])):
        failures.append(f"adapter_config.json read back as {read_back}")

    adapted_loss = loss_of(model, ids, labels)
    b_is_zero = all(float(v.abs().max()) == 0 for k, v in saved.items() if ".lora_B." in k)
    if adapted_loss != adapted_loss or (not b_is_zero and adapted_loss == base_loss):
        failures.append(f"adapted loss {adapted_loss} (base {base_loss})")
    print(f"base loss {base_loss:.9f}, adapted (peft) {adapted_loss:.9f}, {len(saved)} adapter tensors, "
          f"r {config['r']}, lora_alpha {config['lora_alpha']}")

    if expected is not None:
        difference = abs(adapted_loss - expected) / abs(expected)
        print(f"tiertrain's loss on the batch {expected:.9f}, peft's {adapted_loss:.9f}: relative difference "
              f"{difference:.2e} (tolerance {args.tolerance:g})")
        if not difference <= args.tolerance:
            failures.append(f"peft's loss {adapted_loss} vs tiertrain's {expected}: {difference:.2e} relative")

    if args.merged:
        tolerance = 2e-2 if str(dtype).endswith("bfloat16") else 1e-4
        merged = transformers.AutoModelForCausalLM.from_pretrained(args.merged, dtype=torch.float32,
                                                                   attn_implementation="eager")
        merged_loss = loss_of(merged, ids, labels)
        peft_merged_loss = loss_of(model.merge_and_unload(), ids, labels)
        print(f"tiertrain merge: loss {merged_loss:.9f}; peft merge_and_unload: {peft_merged_loss:.9f}")
        for what, value in (("tiertrain merge", merged_loss), ("peft merge_and_unload", peft_merged_loss)):
            if abs(value - adapted_loss) > tolerance * abs(adapted_loss):
                failures.append(f"{what} loss {value} vs adapted {adapted_loss}")

    for failure in failures:
        print("FAILED:", failure)
    print("OK" if not failures else f"{len(failures)} failure(s)")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
