#!/usr/bin/env python3
"""Greedy-decoding goldens for `tiertrain inference` (tests/test_inference_cli.sh), made with transformers.

usage: python3 tools/make_generation_golden.py --fixtures tests/fixtures --out tests/fixtures/generation/greedy.json

For every tiny fixture of tests/fixtures (float32 models, see tests/fixtures/README.md) and for the same model with
its peft adapter (<fixture>/lora), transformers' generate(do_sample=False, max_new_tokens=NEW) continues a prompt of
PROMPT_LEN ids drawn from a torch.Generator seeded 11 (ids in [3, 96)), on the CPU in float32 with the model's
default attention and KV cache, ending where generation_config.json's eos_token_id says.

tiny_phi3's LongRoPE switches to its long factors once a sequence passes original_max_position_embeddings (8):
its prompts are 9 ids, so that every step takes the long ones. The step that crosses is its own case,
"tiny_phi3 crossing" (7 ids): there transformers' Phi-3 drops its cache and generate runs the step with one cache
position for the whole sequence, whose mask is not causal, while the model's own forward over the sequence is; the
reference of that case is greedy decoding by a full forward of the sequence at every step (no cache), which is what
tiertrain computes (it runs the sequence again with the long factors, causally).

Writes --out (JSON: per case the prompt, the new ids and each step's gap between the largest and the second largest
logit, so that a near tie is visible) and the same cases as text beside it (greedy.txt: a line per case,
"name model adapter|- prompt-ids new-ids gaps", lists comma-separated) for tests/test_inference_cli.sh.
"""
import argparse
import json
import os

import torch
import transformers
from transformers import AutoModelForCausalLM

FIXTURES = ("tiny_qwen3", "tiny_llama", "tiny_qwen2", "tiny_gemma3", "tiny_gemma2", "tiny_olmo2", "tiny_smollm3",
            "tiny_granite", "tiny_phi3")
PROMPT_LEN = 7
NEW = 24


def gap_of(logits):
    top = torch.topk(logits.double(), 2).values
    return float(top[0] - top[1])


def greedy(model, prompt):
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=NEW, do_sample=False, output_scores=True,
                             return_dict_in_generate=True, top_k=None, top_p=None, temperature=None)
    return out.sequences[0, len(prompt):].tolist(), [gap_of(scores[0]) for scores in out.scores]


def greedy_without_cache(model, prompt):
    """Greedy decoding by a full forward of the whole sequence at every step."""
    seq, gaps = list(prompt), []
    with torch.no_grad():
        for _ in range(NEW):
            logits = model(torch.tensor([seq]), use_cache=False).logits[0, -1]
            gaps.append(gap_of(logits))
            seq.append(int(logits.argmax()))
    return seq[len(prompt):], gaps


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--fixtures", required=True)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(11)
    golden = {"transformers": transformers.__version__, "torch": torch.__version__, "cases": {}}
    import peft
    cases = golden["cases"]
    for name in FIXTURES:
        prompt = torch.randint(3, 96, (PROMPT_LEN + (2 if name == "tiny_phi3" else 0),), generator=g).tolist()
        path = os.path.join(args.fixtures, name)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
        ids, gaps = greedy(model, prompt)
        cases[name] = {"model": name, "prompt": prompt, "ids": ids, "gaps": gaps}
        if name == "tiny_phi3":
            crossing = prompt[:PROMPT_LEN]
            ids, gaps = greedy_without_cache(model, crossing)
            cases[name + "_crossing"] = {"model": name, "prompt": crossing, "ids": ids, "gaps": gaps}
        adapted = peft.PeftModel.from_pretrained(model, os.path.join(path, "lora")).eval()
        ids, gaps = greedy(adapted, prompt)
        cases[name + "+lora"] = {"model": name, "adapter": "lora", "prompt": prompt, "ids": ids, "gaps": gaps}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(golden, f, indent=1)
        f.write("\n")
    with open(os.path.join(os.path.dirname(os.path.abspath(args.out)), "greedy.txt"), "w") as f:
        for name, c in cases.items():
            f.write("%s %s %s %s %s %s\n" % (name, c["model"], c.get("adapter", "-"), ",".join(map(str, c["prompt"])),
                                             ",".join(map(str, c["ids"])),
                                             ",".join("%.3g" % x for x in c["gaps"])))
            print(name, "smallest gap %.3g" % min(c["gaps"]))


if __name__ == "__main__":
    main()
