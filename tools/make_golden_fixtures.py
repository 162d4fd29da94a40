#!/usr/bin/env python3
"""Golden fixtures for tiertrain's CPU backend, made with transformers in float64.

usage: python3 tools/make_golden_fixtures.py --out tests/fixtures

For each of tiny_qwen3 (tied embeddings, q/k norm, explicit head_dim), tiny_llama (untied,
llama3 RoPE scaling) and tiny_qwen2 (q/k/v biases) it writes:
  config.json, model.safetensors  save_pretrained() of a random fp32 model
  golden.safetensors              input_ids, labels (HF semantics: shifted inside the loss),
                                  loss (float64), grad.<name> and adamw.<name> (after one
                                  torch.optim.AdamW step) for every parameter
The reference runs in float64. transformers keeps a few ops in float32 even then (RMSNorm
upcasts to float32, eager softmax runs in float32); those are patched to run in the input's
dtype so the reference is float64 throughout, except the RoPE tables, which transformers
builds in float32 exactly as tiertrain does.
"""
import argparse
import json
import os

import torch
import transformers
from safetensors.torch import save_file

SHAPES = dict(vocab_size=96, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
              rms_norm_eps=1e-6)
ADAMW = dict(lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)


def make_config(name):
    if name == "tiny_qwen3":
        rope = {"rope_type": "default", "rope_theta": 10000.0}
        kwargs = dict(SHAPES, head_dim=16, tie_word_embeddings=True)
        cls = transformers.Qwen3Config
    elif name == "tiny_llama":
        # head_dim 8, theta 5e5: inverse frequencies 1, 0.0376, 0.00141, 5.3e-5, wavelengths 6.3,
        # 167, 4443, 1.2e5. With original_max_position_embeddings 64, low_freq_factor 1 and
        # high_freq_factor 16 the band edges are 4 and 64: wavelength 6.3 lies in the smoothing
        # band, the others are divided by the factor. Both llama3 branches are exercised.
        rope = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                "high_freq_factor": 16.0, "original_max_position_embeddings": 64}
        kwargs = dict(SHAPES, head_dim=8, tie_word_embeddings=False)
        cls = transformers.LlamaConfig
    elif name == "tiny_qwen2":
        rope = {"rope_type": "default", "rope_theta": 1000000.0}
        kwargs = dict(SHAPES, tie_word_embeddings=False)
        cls = transformers.Qwen2Config
    else:
        raise ValueError(name)
    try:
        config = cls(**kwargs, rope_parameters=rope)
    except TypeError:  # transformers 4 spelling
        theta = rope.pop("rope_theta")
        scaling = rope if rope["rope_type"] != "default" else None
        config = cls(**kwargs, rope_theta=theta, rope_scaling=scaling)
    config._attn_implementation = "sdpa"
    return config


def init_weights(model):
    torch.manual_seed(1234)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 1 and "norm" in name:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            elif p.ndim == 1:
                p.copy_(0.1 * torch.randn_like(p))
            else:
                p.copy_(0.2 * torch.randn_like(p))


def rms_norm_in_input_dtype(self, x):
    variance = x.pow(2).mean(-1, keepdim=True)
    return self.weight * (x * torch.rsqrt(variance + self.variance_epsilon))


def make_fixture(name, out_dir):
    directory = os.path.join(out_dir, name)
    os.makedirs(directory, exist_ok=True)
    config = make_config(name)
    model = transformers.AutoModelForCausalLM.from_config(config)
    model = model.to(torch.float32)
    init_weights(model)
    model.save_pretrained(directory)

    # The reference: float64 everywhere (see the module docstring).
    model = model.to(torch.float64)
    for module in model.modules():
        if type(module).__name__.endswith("RMSNorm"):
            module.forward = rms_norm_in_input_dtype.__get__(module)
    model.train()

    generator = torch.Generator().manual_seed(7)
    input_ids = torch.randint(0, config.vocab_size, (2, 12), generator=generator)
    labels = input_ids.clone()
    labels[0, :3] = -100
    labels[1, 7] = -100

    logits = model(input_ids=input_ids).logits
    vocab = logits.shape[-1]
    loss = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, vocab), labels[:, 1:].reshape(-1),
                                             ignore_index=-100, reduction="mean")
    hf_loss = model(input_ids=input_ids, labels=labels).loss
    loss.backward()

    tensors = {
        "input_ids": input_ids.to(torch.int32).contiguous(),
        "labels": labels.to(torch.int32).contiguous(),
        "loss": loss.detach().reshape(1).to(torch.float64).contiguous(),
    }
    sum_squares = 0.0
    named = dict(model.named_parameters())
    for pname, p in named.items():
        tensors["grad." + pname] = p.grad.detach().to(torch.float32).contiguous()
        sum_squares += float((p.grad.double() ** 2).sum())

    decay = [p for p in named.values() if p.ndim >= 2]
    no_decay = [p for p in named.values() if p.ndim < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": ADAMW["weight_decay"]},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=ADAMW["lr"], betas=ADAMW["betas"], eps=ADAMW["eps"], foreach=False,
                                  fused=False)
    optimizer.step()
    for pname, p in named.items():
        tensors["adamw." + pname] = p.detach().to(torch.float32).contiguous()

    metadata = {
        "lr": repr(ADAMW["lr"]), "beta1": repr(ADAMW["betas"][0]), "beta2": repr(ADAMW["betas"][1]),
        "eps": repr(ADAMW["eps"]), "weight_decay": repr(ADAMW["weight_decay"]),
        "torch": torch.__version__, "transformers": transformers.__version__, "model_type": config.model_type,
        "hf_loss": repr(float(hf_loss)),
    }
    save_file(tensors, os.path.join(directory, "golden.safetensors"), metadata=metadata)
    saved = sorted(os.listdir(directory))
    print(f"{name}: loss {float(loss):.12f} (transformers' own loss {float(hf_loss):.12f}), "
          f"sum of squared gradients {sum_squares:.9g}, files {saved}")
    print(json.dumps(json.load(open(os.path.join(directory, "config.json"))), sort_keys=True))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="tests/fixtures")
    parser.add_argument("--only", nargs="*", default=["tiny_qwen3", "tiny_llama", "tiny_qwen2"])
    args = parser.parse_args()
    torch.use_deterministic_algorithms(True)
    for name in args.only:
        make_fixture(name, args.out)


if __name__ == "__main__":
    main()
