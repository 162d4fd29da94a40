"""The PyTorch peer of bench/run.sh: transformers' model for the config (AutoModelForCausalLM: Qwen3ForCausalLM,
Gemma3ForCausalLM, Phi3ForCausalLM, ...), random init, bf16
parameters, SDPA attention (cuDNN backend first), fused torch AdamW (bf16 state, as a bf16
model gets), HF gradient checkpointing with use_reentrant=False, and the LM head + loss in
checkpointed 4096-token chunks. Prints one JSON line: tok/s, GPU peak allocated.

--memory picks how activations are handled:
  gc             HF gradient checkpointing (use_reentrant=False), the default;
  hidden_states  HF gradient checkpointing (use_reentrant=True, as axolotl's hidden_states mode
                 forces) with each checkpoint's input (the layer's hidden states) offloaded to
                 pinned host memory on a side stream, a bounded number in flight, and in the
                 backward the next-needed one prefetched on the side stream;
  save_on_cpu    no checkpointing: torch.autograd.graph.save_on_cpu(pin_memory=True) for every
                 saved tensor of the decoder."""
import argparse
import json
import time

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint
from transformers import AutoConfig, AutoModelForCausalLM

p = argparse.ArgumentParser()
p.add_argument("--model", required=True, help="directory with config.json")
p.add_argument("--seq", type=int, required=True)
p.add_argument("--steps", type=int, default=6)
p.add_argument("--warmup", type=int, default=2)
p.add_argument("--chunk", type=int, default=4096)
p.add_argument("--loss", choices=["chunked", "hf"], default="chunked")
p.add_argument("--memory", choices=["gc", "hidden_states", "save_on_cpu"], default="gc")
p.add_argument("--lora", type=int, default=0,
               help="LoRA rank on every linear layer but the LM head (peft's all-linear); 0: full")
a = p.parse_args()

torch.manual_seed(0)
config = AutoConfig.from_pretrained(a.model)
config.use_cache = False
with torch.device("cuda"):
    model = AutoModelForCausalLM.from_config(config, torch_dtype=torch.bfloat16, attn_implementation="sdpa")
if a.memory != "save_on_cpu":
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": a.memory == "hidden_states"})
if a.lora:
    import peft
    model.enable_input_require_grads()  # reentrant checkpointing needs an input that requires grad
    model = peft.get_peft_model(model, peft.LoraConfig(
        r=a.lora, lora_alpha=2 * a.lora, lora_dropout=0.0, bias="none", task_type="CAUSAL_LM",
        target_modules="all-linear"))
    model = model.base_model.model  # the ...ForCausalLM with adapters injected
model.train()
opt = torch.optim.AdamW([q for q in model.parameters() if q.requires_grad], lr=1e-5, weight_decay=0.0, fused=True)
V = config.vocab_size
D = config.hidden_size
T = a.seq


final_softcap = getattr(config, "final_logit_softcapping", None)
logits_scaling = getattr(config, "logits_scaling", None)  # Granite divides the logits by it


def chunk_loss(h, labels):
    logits = model.lm_head(h).float()
    if logits_scaling:
        logits = logits / logits_scaling
    if final_softcap:
        logits = torch.tanh(logits / final_softcap) * final_softcap
    return F.cross_entropy(logits.view(-1, V), labels.reshape(-1), reduction="sum")


class HiddenStateOffload:
    """saved_tensors_hooks that move each [1, T, D] hidden state to pinned host memory on a side
    stream (at most `in_flight` copies outstanding) and bring them back in the backward, the
    next-needed one prefetched while the current layer recomputes."""

    def __init__(self, in_flight=2):
        self.stream = torch.cuda.Stream()
        self.in_flight = in_flight
        self.pending = []  # (gpu tensor kept alive, event) of copies out still running
        self.packed = []   # entries in pack order: [cpu tensor, gpu copy or None, event or None]

    def pack(self, t):
        if not (t.is_cuda and t.dim() == 3 and t.shape[1] == T and t.shape[2] == D):
            return t
        cpu = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
        ready = torch.cuda.Event()
        ready.record()
        with torch.cuda.stream(self.stream):
            self.stream.wait_event(ready)
            cpu.copy_(t, non_blocking=True)
            done = torch.cuda.Event()
            done.record()
        self.pending.append((t, done))
        while len(self.pending) > self.in_flight:
            self.pending.pop(0)[1].synchronize()
        entry = [cpu, None, None, len(self.packed)]
        self.packed.append(entry)
        return entry

    def prefetch(self, entry):
        if entry[1] is not None:
            return
        with torch.cuda.stream(self.stream):
            gpu = entry[0].to("cuda", non_blocking=True)
            done = torch.cuda.Event()
            done.record()
        entry[1], entry[2] = gpu, done

    def unpack(self, entry):
        if isinstance(entry, torch.Tensor):
            return entry
        self.pending.clear()  # the forward is over: every copy out was issued before this copy back
        self.prefetch(entry)
        torch.cuda.current_stream().wait_event(entry[2])
        gpu = entry[1]
        gpu.record_stream(torch.cuda.current_stream())
        if entry[3] > 0:
            self.prefetch(self.packed[entry[3] - 1])
        entry[1] = entry[0] = None
        return gpu

    def reset(self):
        self.pending.clear()
        self.packed.clear()


offload = HiddenStateOffload() if a.memory == "hidden_states" else None


def decoder(inputs):
    if a.memory == "save_on_cpu":
        with torch.autograd.graph.save_on_cpu(pin_memory=True):
            return model.model(input_ids=inputs).last_hidden_state
    if offload is not None:
        offload.reset()
        with torch.autograd.graph.saved_tensors_hooks(offload.pack, offload.unpack):
            return model.model(input_ids=inputs).last_hidden_state
    return model.model(input_ids=inputs).last_hidden_state


def step(ids):
    inputs, labels = ids[:, :-1], ids[:, 1:]
    if a.loss == "hf":
        loss = model(input_ids=inputs, labels=ids[:, :-1]).loss
    else:
        hidden = decoder(inputs)
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
    peak_with_warmup = torch.cuda.max_memory_allocated()
    torch.cuda.reset_peak_memory_stats()  # the timed steps' own peak too: the first step allocates lazily
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
print(json.dumps({"who": "peer", "seq": T, "memory": a.memory, "adapter": f"lora{a.lora}" if a.lora else "full", "tok_s": T / median, "step_s": median,
                  "peak_bytes": max(peak_with_warmup, torch.cuda.max_memory_allocated()),
                  "peak_timed_bytes": torch.cuda.max_memory_allocated(), "loss": float(loss)}))
