"""The PyTorch peer of bench/run.sh: transformers' Qwen3ForCausalLM, random init, bf16
parameters, SDPA attention (cuDNN backend first), fused torch AdamW (bf16 state, as a bf16
model gets), HF gradient checkpointing with use_reentrant=False, and the LM head + loss in
checkpointed 4096-token chunks. Prints one JSON line: tok/s, GPU peak allocated."""
import argparse
import json
import time

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint
from transformers import AutoConfig, Qwen3ForCausalLM

p = argparse.ArgumentParser()
p.add_argument("--model", required=True, help="directory with config.json")
p.add_argument("--seq", type=int, required=True)
p.add_argument("--steps", type=int, default=6)
p.add_argument("--warmup", type=int, default=2)
p.add_argument("--chunk", type=int, default=4096)
p.add_argument("--loss", choices=["chunked", "hf"], default="chunked")
a = p.parse_args()

torch.manual_seed(0)
config = AutoConfig.from_pretrained(a.model)
config.use_cache = False
with torch.device("cuda"):
    model = Qwen3ForCausalLM._from_config(config, torch_dtype=torch.bfloat16, attn_implementation="sdpa")
model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
model.train()
opt = torch.optim.AdamW(model.parameters(), lr=1e-5, weight_decay=0.0, fused=True)
V = config.vocab_size
T = a.seq


def chunk_loss(h, labels):
    logits = model.lm_head(h).float()
    return F.cross_entropy(logits.view(-1, V), labels.reshape(-1), reduction="sum")


def step(ids):
    inputs, labels = ids[:, :-1], ids[:, 1:]
    if a.loss == "hf":
        loss = model(input_ids=inputs, labels=ids[:, :-1]).loss
    else:
        hidden = model.model(input_ids=inputs).last_hidden_state
        total = 0.0
        for s in range(0, T, a.chunk):
            total = total + checkpoint(chunk_loss, hidden[:, s:s + a.chunk], labels[:, s:s + a.chunk],
                                       use_reentrant=False)
        loss = total / T
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss


try:
    from torch.nn.attention import SDPBackend, sdpa_kernel
    attention = sdpa_kernel([SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION],
                            set_priority=True)
except (ImportError, TypeError):
    import contextlib
    attention = contextlib.nullcontext()

gen = torch.Generator(device="cuda").manual_seed(1)
with attention:
    for _ in range(a.warmup):
        step(torch.randint(0, V, (1, T + 1), device="cuda", generator=gen))
    torch.cuda.synchronize()
    times = []
    for _ in range(a.steps):
        ids = torch.randint(0, V, (1, T + 1), device="cuda", generator=gen)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = step(ids)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
times.sort()
median = times[len(times) // 2]
print(json.dumps({"who": "peer", "seq": T, "tok_s": T / median, "step_s": median,
                  "peak_bytes": torch.cuda.max_memory_allocated(), "loss": float(loss)}))
