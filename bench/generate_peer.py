"""The PyTorch peer of `tiertrain inference`'s decode speed: a random-init bf16 model of a config (transformers'
AutoModelForCausalLM, SDPA attention, its default dynamic KV cache) saved with save_pretrained (so that tiertrain
loads the same weights), then greedy generate of --new tokens after a prompt of --prompt random ids on the GPU.
Prints one JSON line: the prompt, the new ids, the prefill seconds (generate of 1 token) and the decode rate
(new - 1 tokens over the time past the first token), each the best of --repeats runs.

usage: python3 bench/generate_peer.py --config bench/models/qwen3-1.7b --save /tmp/qwen3-1.7b --prompt 512 --new 256
"""
import argparse
import json
import time

import torch
from transformers import AutoConfig, AutoModelForCausalLM

p = argparse.ArgumentParser()
p.add_argument("--config", required=True)
p.add_argument("--save", required=True)
p.add_argument("--prompt", type=int, default=512)
p.add_argument("--new", type=int, default=256)
p.add_argument("--repeats", type=int, default=3)
args = p.parse_args()

torch.manual_seed(0)
config = AutoConfig.from_pretrained(args.config)
model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16, attn_implementation="sdpa").cuda().eval()
model.generation_config.eos_token_id = None  # every run goes to --new tokens, in both tools
model.generation_config.pad_token_id = 0
model.save_pretrained(args.save)
g = torch.Generator().manual_seed(5)
prompt = torch.randint(3, config.vocab_size, (1, args.prompt), generator=g).cuda()


def timed(new):
    best, ids = float("inf"), None
    for _ in range(args.repeats):
        torch.cuda.synchronize()
        t = time.perf_counter()
        with torch.no_grad():
            out = model.generate(prompt, max_new_tokens=new, min_new_tokens=new, do_sample=False)
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t)
        ids = out[0, args.prompt:].tolist()
    return best, ids


timed(4)  # warm-up
prefill, _ = timed(1)
total, ids = timed(args.new)
print(json.dumps({"prompt": prompt[0].tolist(), "ids": ids, "prefill_seconds": prefill,
                  "decode_tokens_per_second": (args.new - 1) / (total - prefill), "torch": torch.__version__}))
