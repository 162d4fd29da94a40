#!/usr/bin/env python3
"""Checks that peft loads the LoRA adapters tiertrain saved (run where torch, transformers and peft are
installed, e.g. on the GPU machine).

usage: python3 tests/peft_load_check.py --base BASE_DIR --adapter ADAPTER_DIR [--merged MERGED_DIR]
       [--tokens TOKENS_FILE]

BASE_DIR is the Hugging Face model the adapter was trained on (base_model of the run), ADAPTER_DIR a
directory tiertrain wrote with adapter: lora (output_dir, or a checkpoint-<step>). The check:
  1. PeftModel.from_pretrained(base, ADAPTER_DIR) loads every tensor of adapter_model.safetensors into
     its lora_A / lora_B (no missing or unexpected keys) and the loaded values equal the file's;
  2. adapter_config.json is what peft reads back (peft_type LORA, r, lora_alpha, target_modules);
  3. the adapted model's loss on a batch (the first 64 tokens of TOKENS_FILE, a tiertrain token file,
     or a fixed random batch) is finite and differs from the base model's unless B is all zero;
  4. with --merged (the output of `tiertrain merge --base BASE_DIR --adapter ADAPTER_DIR -o MERGED_DIR`):
     the merged model's loss equals the adapted model's within 1e-4 relative (fp32; bf16 bases
     within 2e-2), as does peft's own merge_and_unload.
Exit status 0 when all hold.
"""
import argparse
import json
import os
import sys

import numpy as np
import torch
import transformers
from safetensors.torch import load_file


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
    args = parser.parse_args()
    failures = []

    base = transformers.AutoModelForCausalLM.from_pretrained(args.base, dtype=torch.float32)
    dtype = base.config.dtype if hasattr(base.config, "dtype") else base.config.torch_dtype
    ids, labels = batch_from(args.tokens, base.config.vocab_size)
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

    if args.merged:
        tolerance = 2e-2 if str(dtype).endswith("bfloat16") else 1e-4
        merged = transformers.AutoModelForCausalLM.from_pretrained(args.merged, dtype=torch.float32)
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
