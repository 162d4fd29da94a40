#!/usr/bin/env python3
"""Checks that transformers loads what tiertrain saved (run where torch is installed).

usage: python3 tests/hf_load_check.py FIXTURES_DIR SAVED_DIR...

A saved directory named like a fixture (tiny_qwen3, ...) was fine-tuned from that fixture for
one step at learning rate 1e-30, so its weights are the fixture's: it must load with no missing
or unexpected weights and give the fixture's golden loss. Any other directory (a sharded save,
say) must load cleanly and give a finite loss on tiny_qwen3's golden batch.
"""
import os
import sys

import torch
import transformers
from safetensors.torch import load_file


def main():
    fixtures, saved_dirs = sys.argv[1], sys.argv[2:]
    failures = 0
    for saved in saved_dirs:
        name = os.path.basename(saved.rstrip("/"))
        # eager attention: transformers' SDPA path leaves out Gemma 2's attention soft-capping
        model, info = transformers.AutoModelForCausalLM.from_pretrained(saved, output_loading_info=True,
                                                                         dtype=torch.float32,
                                                                         attn_implementation="eager")
        problems = {k: v for k, v in info.items() if v}
        fixture = name if name.startswith("tiny_") else "tiny_qwen3"
        if fixture == "tiny_gemma3_multimodal":  # tiny_gemma3's language model inside Gemma3ForConditionalGeneration
            fixture = "tiny_gemma3"
        golden = load_file(os.path.join(fixtures, fixture, "golden.safetensors"))
        ids, labels = golden["input_ids"].long(), golden["labels"].long()
        with torch.no_grad():
            loss = float(model(input_ids=ids, labels=labels).loss)
        ok = not problems and loss == loss and abs(loss) != float("inf")
        detail = ""
        if name.startswith("tiny_"):
            expected = float(golden["loss"][0])
            ok = ok and abs(loss - expected) <= 1e-5 * abs(expected)
            detail = f", fixture loss {expected:.9f}"
        print(f"{saved}: {type(model).__name__}, loading problems: {problems or 'none'}, loss {loss:.9f}{detail}: "
              f"{'OK' if ok else 'FAILED'}")
        failures += not ok
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
