#!/usr/bin/env python3
"""Golden fixtures for tiertrain's golden test (tests/test_golden.c), made with transformers.

usage: python3 tools/make_golden_fixtures.py --out tests/fixtures [--lora]

Needs torch, transformers 5.x and safetensors (and peft for --lora); runs on the CPU in a few
seconds. For each of
  tiny_qwen3  tied embeddings, q/k norm, explicit head_dim 16 (!= hidden / heads = 8)
  tiny_llama  untied, llama3 RoPE scaling (theta 5e5)
  tiny_qwen2  untied, q/k/v biases
it writes into <out>/<name>/:
  config.json, model.safetensors  model.save_pretrained() of a random float32 model, exactly
                                  the Hugging Face tensor names (tied: no lm_head.weight)
  generation_config.json          also written by save_pretrained; unused
  golden.safetensors              input_ids, labels (int32 [2, 12], HF semantics: the model
                                  shifts them), loss (float64 [1]), grad.<name> and
                                  adamw.<name> (float32) for every parameter, and the AdamW
                                  settings and library versions as string metadata
  lora/ (with --lora)             the golden test of LoRA (tests/test_lora_golden.c): peft's
                                  save_pretrained of rank-4 adapters (lora_alpha 8, no dropout)
                                  on all seven linear layers of that model, A and B drawn at
                                  random (B != 0, so every gradient is exercised):
                                  adapter_model.safetensors and adapter_config.json; and
                                  golden.safetensors: input_ids, labels, loss (float64 [1]) and
                                  grad.<adapter name> (float32) for every adapter tensor, the base
                                  frozen, computed in float64 as above
  tiny_llama/lora_save/,          (with --lora-modules-to-save, alone) the same with peft's
  tiny_qwen3/lora_save/           
                                  modules_to_save [embed_tokens, lm_head] trained whole: their
                                  values moved off the base's (so a load must read them) and
                                  their gradients in golden.safetensors under peft's saved names

The reference (loss, gradients, the AdamW step) runs in float64. transformers keeps three things
in float32 even for a float64 model: RMSNorm (it upcasts to float32 and casts back), the eager
attention softmax (softmax(..., dtype=float32)) and the causal-LM loss (logits.float()). By
default the script runs those three in float64 (it replaces RMSNorm.forward on each instance,
swaps the modeling module's eager_attention_forward for a float64 copy, and takes the loss as
the same shifted cross-entropy on the float64 logits), so the reference is float64 except for
the RoPE tables, which transformers builds in float32 (inv_freq and the angles, then cast), as
tiertrain does. The unpatched model is run too: its .loss and gradients must agree with the
float64 reference to 1e-4 (they differ by float32 rounding, ~1e-7), which checks the patches.
--stock-transformers saves the unpatched model's .loss and gradients instead.
"""
import argparse
import inspect
import os
import sys
import types

import torch
import torch.nn.functional as F
import transformers
from safetensors import safe_open
from safetensors.torch import save_file

FIXTURES = ("tiny_qwen3", "tiny_llama", "tiny_qwen2", "tiny_gemma3", "tiny_gemma2", "tiny_olmo2", "tiny_smollm3",
            "tiny_granite", "tiny_phi3", "tiny_qwen3_moe", "tiny_qwen3_moe_aux")
# The families added after the first three draw their input ids from [1, V): their embeddings have padding_idx
# pad_token_id (0 here), whose row gets no gradient from the lookup in transformers.
FIRST_ID = {"tiny_qwen3": 0, "tiny_llama": 0, "tiny_qwen2": 0}
# Families whose RMSNorm multiplies by (1 + w) (w starts at 0 in transformers: drawn as N(0, 0.1) here).
UNIT_OFFSET_NORMS = ("tiny_gemma3", "tiny_gemma2")

SHAPES = dict(
    vocab_size=96,
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
    rms_norm_eps=1e-6,
)

WEIGHT_SEED = 1234
INPUT_SEED = 7
BATCH, SEQ = 2, 12
IGNORE_INDEX = -100

LR = 1e-2
BETAS = (0.9, 0.95)
EPS = 1e-8
WEIGHT_DECAY = 0.1

# The files this script writes into a fixture directory; stale copies are removed first, so
# that no leftover shard or index from another transformers version sits beside the new files.
OWN_FILES = ("config.json", "generation_config.json", "model.safetensors", "model.safetensors.index.json",
             "pytorch_model.bin", "golden.safetensors")


def make_config(name):
    """A transformers 5 config: RoPE settings live in rope_parameters (rope_theta included)."""
    common = dict(SHAPES, dtype="float32", attn_implementation="eager")
    if name not in FIRST_ID:
        common.update(pad_token_id=0, bos_token_id=1, eos_token_id=2)
    if name == "tiny_qwen3":
        return transformers.Qwen3Config(
            **common,
            head_dim=16,
            tie_word_embeddings=True,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        )
    if name == "tiny_llama":
        # llama3 RoPE at head_dim 8, theta 5e5: inv_freq[i] = 5e5^(-2i/8) = 1, 0.0376, 0.00141,
        # 5.32e-5, wavelengths 2*pi/inv_freq = 6.28, 167, 4443, 118143. The band edges are
        # original_max_position_embeddings / high_freq_factor = 16 / 4 = 4 and
        # original_max_position_embeddings / low_freq_factor = 16 / 1 = 16:
        #   6.28 lies inside [4, 16], so it is smoothed: s = (16 / 6.28 - 1) / (4 - 1) = 0.515,
        #        inv_freq = (1 - s) * 1 / 8 + s * 1 = 0.576;
        #   167, 4443 and 118143 are > 16, so those three are divided by factor 8.
        # No wavelength is < 4 (the unchanged high-frequency branch): at head_dim 8 and theta
        # 5e5 that would need e.g. original_max_position_embeddings 256 and high_freq_factor 32.
        return transformers.LlamaConfig(
            **common,
            head_dim=8,
            tie_word_embeddings=False,
            rope_parameters={
                "rope_type": "llama3",
                "rope_theta": 500000.0,
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 16,
            },
        )
    if name == "tiny_qwen2":
        # Qwen2Config has no head_dim field: the model uses hidden_size / heads = 8. q/k/v carry
        # biases (hard-wired in Qwen2Attention), o_proj does not.
        return transformers.Qwen2Config(
            **common,
            tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        )
    if name == "tiny_gemma3":
        # Gemma 3 text: three layers, sliding (window 5 of the 12 tokens), full, sliding; head_dim 16 (!= 32 / 4);
        # the attention scale query_pre_attn_scalar ** -0.5 with 24 (not head_dim); the full layers' RoPE theta 1e6
        # with linear scaling (factor 4), the sliding layers' theta 1e4; GeGLU (gelu tanh); (1 + w) norms; the
        # embedding scaled by sqrt(32); tied.
        return transformers.Gemma3TextConfig(
            **dict(common, num_hidden_layers=3),
            head_dim=16,
            query_pre_attn_scalar=24,
            sliding_window=5,
            layer_types=["sliding_attention", "full_attention", "sliding_attention"],
            rope_parameters={
                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                "full_attention": {"rope_type": "linear", "factor": 4.0, "rope_theta": 1000000.0},
            },
            hidden_activation="gelu_pytorch_tanh",
            tie_word_embeddings=True,
        )
    if name == "tiny_gemma2":
        # Gemma 2: alternating sliding (window 5) and full layers, attention soft-capping at 2 and final-logit
        # soft-capping at 3 (small, so that tanh bends the tiny model's scores), query_pre_attn_scalar 20, no q/k
        # norms, tied.
        return transformers.Gemma2Config(
            **common,
            head_dim=16,
            query_pre_attn_scalar=20,
            sliding_window=5,
            attn_logit_softcapping=2.0,
            final_logit_softcapping=3.0,
            hidden_activation="gelu_pytorch_tanh",
            tie_word_embeddings=True,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        )
    if name == "tiny_olmo2":
        # OLMo 2: no pre-norms, RMSNorm after attention and after the MLP, q/k norms over the whole projection
        return transformers.Olmo2Config(
            **common,
            tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
        )
    if name == "tiny_smollm3":
        # SmolLM3: three layers, the middle one without RoPE (no_rope_layers 0), tied
        return transformers.SmolLM3Config(
            **dict(common, num_hidden_layers=3),
            no_rope_layers=[1, 0, 1],
            tie_word_embeddings=True,
            rope_parameters={"rope_type": "default", "rope_theta": 2000000.0},
        )
    if name == "tiny_granite":
        # Granite: embedding, residual and attention multipliers and the logits' scaling
        return transformers.GraniteConfig(
            **common,
            embedding_multiplier=3.0,
            residual_multiplier=0.5,
            attention_multiplier=0.3,
            logits_scaling=2.5,
            tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        )
    if name == "tiny_qwen3_moe_aux":
        # the same model with the routers' load-balancing loss (output_router_logits, router_aux_loss_coef 0.25: large,
        # so that its gradient shows)
        config = make_config("tiny_qwen3_moe")
        config.output_router_logits = True
        config.router_aux_loss_coef = 0.25
        return config
    if name == "tiny_qwen3_moe":
        # Qwen3-MoE: Qwen3's attention (q/k norms per head), every layer a mixture of 4 experts of 16 (SwiGLU), each
        # token to its 2 most probable, the two weights renormalized (norm_topk_prob); untied. transformers 5 keeps
        # the experts as 3-D tensors (gate_up_proj [E, 2 Fm, D], down_proj [E, D, Fm]) and saves them per expert.
        return transformers.Qwen3MoeConfig(
            **common,
            head_dim=8,
            num_experts=4,
            num_experts_per_tok=2,
            moe_intermediate_size=16,
            norm_topk_prob=True,
            decoder_sparse_step=1,
            mlp_only_layers=[],
            output_router_logits=False,
            experts_implementation="eager",  # the loop over experts: transformers' grouped_mm takes no float64
            tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        )
    if name == "tiny_phi3":
        # Phi-3 / Phi-4-mini: fused qkv_proj and gate_up_proj; partial rotary 0.75 (6 of head_dim 8 rotate);
        # LongRoPE with original_max_position_embeddings 8 < the 12 tokens, so the long factors apply, and the
        # attention factor sqrt(1 + ln(64 / 8) / ln 8) = sqrt(2) scales cos and sin; tied (as Phi-4-mini)
        return transformers.Phi3Config(
            **common,
            partial_rotary_factor=0.75,
            original_max_position_embeddings=8,
            rope_parameters={
                "rope_type": "longrope",
                "rope_theta": 10000.0,
                "short_factor": [1.0, 1.25, 1.5],
                "long_factor": [1.5, 3.0, 7.0],
                "original_max_position_embeddings": 8,
                "partial_rotary_factor": 0.75,
            },
            tie_word_embeddings=True,
        )
    raise ValueError(f"unknown fixture {name}")


MODEL_CLASSES = {
    "tiny_qwen3": "Qwen3ForCausalLM",
    "tiny_llama": "LlamaForCausalLM",
    "tiny_qwen2": "Qwen2ForCausalLM",
    "tiny_gemma3": "Gemma3ForCausalLM",
    "tiny_gemma2": "Gemma2ForCausalLM",
    "tiny_olmo2": "Olmo2ForCausalLM",
    "tiny_smollm3": "SmolLM3ForCausalLM",
    "tiny_granite": "GraniteForCausalLM",
    "tiny_phi3": "Phi3ForCausalLM",
    "tiny_qwen3_moe": "Qwen3MoeForCausalLM",
    "tiny_qwen3_moe_aux": "Qwen3MoeForCausalLM",
}


def hub_tensors(name, tensor):
    """A parameter as the hub's checkpoints name it: transformers 5's 3-D experts split per expert
    (mlp.experts.gate_up_proj [E, 2 Fm, D] -> mlp.experts.<e>.gate_proj.weight and up_proj.weight [Fm, D];
    mlp.experts.down_proj [E, D, Fm] -> mlp.experts.<e>.down_proj.weight), anything else as it is."""
    if name.endswith(".mlp.experts.gate_up_proj"):
        stem, half = name[: -len("gate_up_proj")], tensor.shape[1] // 2
        return {f"{stem}{e}.{proj}_proj.weight": tensor[e, i * half:(i + 1) * half]
                for e in range(tensor.shape[0]) for i, proj in enumerate(("gate", "up"))}
    if name.endswith(".mlp.experts.down_proj"):
        stem = name[: -len("down_proj")]
        return {f"{stem}{e}.down_proj.weight": tensor[e] for e in range(tensor.shape[0])}
    return {name: tensor}


def build_model(name):
    config = make_config(name)
    model = getattr(transformers, MODEL_CLASSES[name])(config)
    model = model.to(torch.float32)
    if model.config._attn_implementation != "eager":
        raise SystemExit(f"{name}: attention implementation is {model.config._attn_implementation!r}, not eager")
    tied = bool(config.tie_word_embeddings)
    head, embed = model.get_output_embeddings().weight, model.get_input_embeddings().weight
    if tied and head is not embed:
        model.tie_weights()
        head = model.get_output_embeddings().weight
    if tied != (head is embed):
        raise SystemExit(f"{name}: lm_head and embed_tokens should {'' if tied else 'not '}share one tensor")
    return model


def init_weights(model, unit_offset_norms=False):
    """N(0, 0.2) for matrices, 1 + N(0, 0.1) for norm weights (N(0, 0.1) where the norm multiplies by 1 + w),
    N(0, 0.1) for biases, in the order of named_parameters() (a tied lm_head is the embedding and is drawn once)."""
    torch.manual_seed(WEIGHT_SEED)
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if p.ndim >= 2:
                p.normal_(0.0, 0.2)
            elif "norm" in pname:
                p.normal_(0.0, 0.1)
                if not unit_offset_norms:
                    p.add_(1.0)
            elif pname.endswith(".bias"):
                p.normal_(0.0, 0.1)
            else:
                raise SystemExit(f"unexpected 1-D parameter {pname}")


def save_model(model, directory):
    for fname in OWN_FILES:
        path = os.path.join(directory, fname)
        if os.path.isfile(path):
            os.remove(path)
    os.makedirs(directory, exist_ok=True)
    kwargs = {}
    # transformers 5 always writes safetensors and dropped the safe_serialization argument
    # (passing it raises); 4.x still takes it.
    if "safe_serialization" in inspect.signature(model.save_pretrained).parameters:
        kwargs["safe_serialization"] = True
    model.save_pretrained(directory, **kwargs)

    # model.safetensors must hold exactly the parameters, under their HF names, in float32.
    path = os.path.join(directory, "model.safetensors")
    if not os.path.isfile(path) or os.path.exists(os.path.join(directory, "model.safetensors.index.json")):
        raise SystemExit(f"{directory}: save_pretrained did not write a single model.safetensors")
    params = {}
    for pname, p in model.named_parameters():
        params.update(hub_tensors(pname, p.detach()))
    with safe_open(path, framework="pt") as f:
        saved = set(f.keys())
        if saved != set(params):
            raise SystemExit(f"{path}: tensor names differ from the parameters: only saved "
                             f"{sorted(saved - set(params))}, not saved {sorted(set(params) - saved)}")
        for pname, p in params.items():
            t = f.get_tensor(pname)
            if t.dtype != torch.float32 or not torch.equal(t, p):
                raise SystemExit(f"{path}: {pname} differs from the model's parameter")


def causal_lm_loss(logits, labels):
    """transformers' ForCausalLMLoss without its logits.float(): labels padded with -100 and
    shifted left, mean cross-entropy over the labels that are not -100, in logits' dtype."""
    shift_labels = F.pad(labels, (0, 1), value=IGNORE_INDEX)[..., 1:].contiguous()
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), shift_labels.reshape(-1),
                           ignore_index=IGNORE_INDEX, reduction="mean")


def _repeat_kv(x, n_rep):
    batch, kv_heads, seq, head_dim = x.shape
    if n_rep == 1:
        return x
    return x[:, :, None, :, :].expand(batch, kv_heads, n_rep, seq, head_dim).reshape(batch, kv_heads * n_rep, seq,
                                                                                       head_dim)


def _eager_attention_in_input_dtype(module, query, key, value, attention_mask, **kwargs):
    """transformers' eager_attention_forward with the softmax in the input's dtype."""
    scaling = kwargs["scaling"]
    dropout = kwargs.get("dropout", 0.0)
    key_states = _repeat_kv(key, module.num_key_value_groups)
    value_states = _repeat_kv(value, module.num_key_value_groups)
    attn_weights = torch.matmul(query, key_states.transpose(2, 3)) * scaling
    softcap = kwargs.get("softcap")
    if softcap is not None:  # Gemma 2: before the mask, as transformers' eager attention
        attn_weights = torch.tanh(attn_weights / softcap) * softcap
    if attention_mask is not None:
        attn_weights = attn_weights + attention_mask[:, :, :, : key_states.shape[-2]]
    attn_weights = torch.softmax(attn_weights, dim=-1)
    attn_weights = F.dropout(attn_weights, p=dropout, training=module.training)
    attn_output = torch.matmul(attn_weights, value_states).transpose(1, 2).contiguous()
    return attn_output, attn_weights


def _rms_norm_in_input_dtype(self, hidden_states):
    variance = hidden_states.pow(2).mean(-1, keepdim=True)
    if type(self).__name__.startswith("Gemma"):  # Gemma's (1 + w)
        return hidden_states * torch.rsqrt(variance + self.eps) * (1.0 + self.weight)
    return self.weight * (hidden_states * torch.rsqrt(variance + self.variance_epsilon))


class Float64Patches:
    """With float64=True: RMSNorm and the eager softmax run in the input's dtype. Either way the
    calls are counted, to prove that the eager path (and the patches) really ran."""

    def __init__(self, model, float64):
        self.model = model
        self.float64 = float64
        self.attention_calls = 0
        self.norm_calls = 0
        self.norms = [m for m in model.modules() if type(m).__name__.endswith("RMSNorm")]
        self.attentions = [m for m in model.modules() if type(m).__name__.endswith("Attention")]
        if not self.norms or not self.attentions:
            raise SystemExit(f"{type(model).__name__}: no RMSNorm or Attention modules found")
        modules = {type(m).__module__ for m in self.attentions}
        if len(modules) != 1:
            raise SystemExit(f"attention classes from several modules: {modules}")
        self.modeling = sys.modules[modules.pop()]
        if not hasattr(self.modeling, "eager_attention_forward"):
            raise SystemExit(f"{self.modeling.__name__} has no eager_attention_forward")

    def __enter__(self):
        self.original_eager = self.modeling.eager_attention_forward
        original = self.original_eager
        patches = self

        def eager(module, query, key, value, attention_mask, **kwargs):
            patches.attention_calls += 1
            if patches.float64:
                return _eager_attention_in_input_dtype(module, query, key, value, attention_mask, **kwargs)
            return original(module, query, key, value, attention_mask, **kwargs)

        self.modeling.eager_attention_forward = eager
        if self.float64:
            for norm in self.norms:
                if not (hasattr(norm, "weight") and (hasattr(norm, "variance_epsilon") or hasattr(norm, "eps"))):
                    raise SystemExit(f"{type(norm).__name__} has no weight / variance_epsilon")

                def forward(module, hidden_states):
                    patches.norm_calls += 1
                    return _rms_norm_in_input_dtype(module, hidden_states)

                norm.forward = types.MethodType(forward, norm)
        return self

    def __exit__(self, *exc):
        self.modeling.eager_attention_forward = self.original_eager
        for norm in self.norms:
            norm.__dict__.pop("forward", None)
        return False

    def check(self, name):
        layers = len(self.attentions)
        if self.attention_calls != layers:
            raise SystemExit(f"{name}: eager attention ran {self.attention_calls} times for {layers} layers")
        if self.float64 and self.norm_calls != len(self.norms):
            raise SystemExit(f"{name}: patched RMSNorm ran {self.norm_calls} times for {len(self.norms)} norms")


def forward_backward(name, model, input_ids, labels, float64):
    """One forward and backward of the float64 model. Returns (loss the gradients came from,
    the model's own .loss, {name: gradient})."""
    model.zero_grad(set_to_none=True)
    with Float64Patches(model, float64) as patches:
        out = model(input_ids=input_ids, labels=labels, use_cache=False)
        patches.check(name)
    if out.logits.dtype != torch.float64:
        raise SystemExit(f"{name}: logits are {out.logits.dtype}, not float64")
    loss = causal_lm_loss(out.logits, labels) if float64 else out.loss
    if float64 and getattr(model.config, "output_router_logits", False):  # transformers adds it to its own .loss
        loss = loss + model.config.router_aux_loss_coef * out.aux_loss
    loss.backward()
    grads = {pname: p.grad.detach().clone() for pname, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    return loss.detach().to(torch.float64), out.loss.detach(), grads


def make_inputs(name, vocab_size):
    generator = torch.Generator().manual_seed(INPUT_SEED)
    first = FIRST_ID.get(name, 1)
    input_ids = torch.randint(first, vocab_size, (BATCH, SEQ), generator=generator, dtype=torch.int64)
    labels = input_ids.clone()
    labels[0, :3] = IGNORE_INDEX
    labels[1, 7] = IGNORE_INDEX
    return input_ids, labels


def max_rel_error(a, b):
    """max |a - b| / max |b| (what tests/test_golden.c measures)."""
    scale = float(b.abs().max())
    return float((a - b).abs().max()) / (scale if scale > 0 else 1.0)


def make_fixture(name, out_dir, stock):
    directory = os.path.join(out_dir, name)
    model = build_model(name)
    config = model.config
    init_weights(model, name in UNIT_OFFSET_NORMS)
    for pname, p in model.named_parameters():
        if p.dtype != torch.float32:
            raise SystemExit(f"{name}: {pname} is {p.dtype}, not float32")
    save_model(model, directory)

    # The reference runs in float64 on the CPU. The RoPE buffer inv_freq becomes float64 too,
    # but the rotary embedding casts it back (.float()) and builds cos/sin in float32.
    model = model.to(torch.float64)
    model.eval()  # no dropout anywhere; gradients are unaffected

    input_ids, labels = make_inputs(name, config.vocab_size)

    stock_loss, stock_hf_loss, stock_grads = forward_backward(name, model, input_ids, labels, float64=False)
    ref_loss, ref_hf_loss, ref_grads = forward_backward(name, model, input_ids, labels, float64=True)
    again_loss, _, again_grads = forward_backward(name, model, input_ids, labels, float64=True)
    if not torch.equal(ref_loss, again_loss) or any(not torch.equal(ref_grads[k], again_grads[k]) for k in ref_grads):
        raise SystemExit(f"{name}: two float64 runs gave different bits")
    # The model's own .loss (float32 cross-entropy) against the float64 cross-entropy of the
    # same logits, and the unpatched model's gradients against the float64 ones.
    hf_vs_ref = abs(float(ref_hf_loss) - float(ref_loss)) / abs(float(ref_loss))
    stock_vs_ref = abs(float(stock_loss) - float(ref_loss)) / abs(float(ref_loss))
    grad_vs_ref = max(max_rel_error(stock_grads[k], ref_grads[k]) for k in ref_grads)
    if max(hf_vs_ref, stock_vs_ref, grad_vs_ref) > 1e-4:
        raise SystemExit(f"{name}: the float64 reference and transformers' own float32-upcast path disagree: "
                         f"loss {hf_vs_ref:.3g} / {stock_vs_ref:.3g}, gradients {grad_vs_ref:.3g} relative")
    loss, hf_loss, grads = (stock_loss, stock_hf_loss, stock_grads) if stock else (ref_loss, ref_hf_loss, ref_grads)

    tensors = {
        "input_ids": input_ids.to(torch.int32).contiguous(),
        "labels": labels.to(torch.int32).contiguous(),
        "loss": loss.reshape(1).to(torch.float64).contiguous(),
    }
    params = dict(model.named_parameters())  # tied: lm_head.weight is embed_tokens.weight, listed once
    sum_squares = 0.0
    for pname, g in grads.items():
        for hub_name, piece in hub_tensors(pname, g).items():
            tensors["grad." + hub_name] = piece.to(torch.float32).contiguous()
        sum_squares += float((g.to(torch.float64) ** 2).sum())

    # One AdamW step in float64 on those gradients: decay on matrices, none on biases and norm
    # weights (the Hugging Face Trainer's rule), no clipping.
    decay = [p for p in params.values() if p.ndim >= 2]
    no_decay = [p for p in params.values() if p.ndim == 1]
    if len(decay) + len(no_decay) != len(params):
        raise SystemExit(f"{name}: parameters of another rank")
    for pname, p in params.items():
        p.grad = grads[pname].clone()
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": WEIGHT_DECAY}, {"params": no_decay, "weight_decay": 0.0}],
        lr=LR, betas=BETAS, eps=EPS, weight_decay=WEIGHT_DECAY, foreach=False, fused=False)
    optimizer.step()
    for pname, p in params.items():
        for hub_name, piece in hub_tensors(pname, p.detach()).items():
            tensors["adamw." + hub_name] = piece.to(torch.float32).contiguous()

    metadata = {
        "lr": str(LR),
        "beta1": str(BETAS[0]),
        "beta2": str(BETAS[1]),
        "eps": str(EPS),
        "weight_decay": str(WEIGHT_DECAY),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "model_type": config.model_type,
        "hf_loss": repr(float(hf_loss)),  # the model's own .loss (float32 cross-entropy)
        "reference": "stock transformers" if stock else "float64 (RMSNorm, softmax, loss); float32 RoPE tables",
    }
    save_file(tensors, os.path.join(directory, "golden.safetensors"), metadata=metadata)

    sizes = {f: os.path.getsize(os.path.join(directory, f)) for f in sorted(os.listdir(directory))}
    print(f"{name}: loss {float(loss):.15g} (model's .loss {float(hf_loss):.9g}, {hf_vs_ref:.2g} relative), "
          f"sum of squared gradients {sum_squares:.15g}")
    print(f"  transformers' float32 upcasts vs the float64 reference: loss {stock_vs_ref:.2g}, "
          f"gradients {grad_vs_ref:.2g} relative (max over tensors)")
    print(f"  {len(grads)} parameters; files {sizes}")
    return sum(sizes.values())


LORA_SEED = 4321
LORA_RANK, LORA_ALPHA = 4, 8
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
LORA_TARGETS_FUSED = ["qkv_proj", "o_proj", "gate_up_proj", "down_proj"]  # Phi-3's linear layers


def peft_saved_name(pname):
    """The name peft's save_pretrained gives a trainable parameter: the adapter name dropped, and a module_to_save's
    wrapper too (base_model.model.model.embed_tokens.modules_to_save.default.weight ->
    base_model.model.model.embed_tokens.weight)."""
    return pname.replace(".modules_to_save.default.", ".").replace(".default.", ".")


def make_lora_fixture(name, out_dir, stock, modules_to_save=None):
    """peft's LoRA on the fixture's model: adapters saved by peft, and the loss and the adapters'
    gradients of one forward and backward (the base frozen) in float64. modules_to_save (a list of module names):
    those trained whole beside the adapters, into <name>/lora_save/."""
    import peft  # only --lora needs it

    directory = os.path.join(out_dir, name, "lora_save" if modules_to_save else "lora")
    for fname in ("adapter_model.safetensors", "adapter_config.json", "golden.safetensors", "README.md"):
        if os.path.isfile(os.path.join(directory, fname)):
            os.remove(os.path.join(directory, fname))
    os.makedirs(directory, exist_ok=True)
    base = build_model(name)
    init_weights(base, name in UNIT_OFFSET_NORMS)  # the same weights make_fixture saved as <name>/model.safetensors
    with safe_open(os.path.join(out_dir, name, "model.safetensors"), framework="pt") as f:
        for pname, p in base.named_parameters():
            if pname in f.keys() and not torch.equal(f.get_tensor(pname), p.detach()):
                raise SystemExit(f"{name}: {pname} differs from the fixture's model.safetensors; rerun without --only")
    targets = LORA_TARGETS_FUSED if name == "tiny_phi3" else LORA_TARGETS
    lora_config = peft.LoraConfig(r=LORA_RANK, lora_alpha=LORA_ALPHA, lora_dropout=0.0, target_modules=targets,
                                  bias="none", task_type="CAUSAL_LM", modules_to_save=modules_to_save)
    model = peft.get_peft_model(base, lora_config)
    torch.manual_seed(LORA_SEED)
    adapters = {}
    with torch.no_grad():
        for pname, p in model.named_parameters():
            if p.requires_grad:
                if ".modules_to_save." in pname:  # a copy of the base's: moved off it, so that a load must read it
                    p.add_(torch.randn_like(p) * 0.05)
                elif ".lora_A." not in pname and ".lora_B." not in pname:
                    raise SystemExit(f"{name}: trainable parameter {pname} is not a LoRA adapter")
                else:
                    p.normal_(0.0, 0.1)
                adapters[peft_saved_name(pname)] = p
    model.save_pretrained(directory)
    with safe_open(os.path.join(directory, "adapter_model.safetensors"), framework="pt") as f:
        if set(f.keys()) != set(adapters):
            raise SystemExit(f"{directory}: peft saved {sorted(f.keys())[:4]}..., expected {sorted(adapters)[:4]}...")
        for key in f.keys():
            if not key.startswith("base_model.model.") or f.get_tensor(key).dtype != torch.float32:
                raise SystemExit(f"{directory}: unexpected tensor {key}")
            if not torch.equal(f.get_tensor(key), adapters[key].detach()):
                raise SystemExit(f"{directory}: {key} was saved with other values than the model's")

    model = model.to(torch.float64)
    model.eval()
    input_ids, labels = make_inputs(name, model.config.vocab_size)
    model.zero_grad(set_to_none=True)
    with Float64Patches(model, not stock) as patches:
        out = model(input_ids=input_ids, labels=labels, use_cache=False)
        patches.check(name)
    loss = out.loss if stock else causal_lm_loss(out.logits, labels)
    loss.backward()
    tensors = {
        "input_ids": input_ids.to(torch.int32).contiguous(),
        "labels": labels.to(torch.int32).contiguous(),
        "loss": loss.detach().reshape(1).to(torch.float64).contiguous(),
    }
    for pname, p in model.named_parameters():
        if p.requires_grad:
            tensors["grad." + peft_saved_name(pname)] = p.grad.detach().to(torch.float32).contiguous()
        elif p.grad is not None:
            raise SystemExit(f"{name}: frozen {pname} got a gradient")
    metadata = {"torch": torch.__version__, "transformers": transformers.__version__, "peft": peft.__version__,
                "r": str(LORA_RANK), "lora_alpha": str(LORA_ALPHA),
                "reference": "stock transformers" if stock else "float64 (RMSNorm, softmax, loss); float32 RoPE tables"}
    save_file(tensors, os.path.join(directory, "golden.safetensors"), metadata=metadata)
    sizes = {f: os.path.getsize(os.path.join(directory, f)) for f in sorted(os.listdir(directory))}
    print(f"{name}/{os.path.basename(directory)}: loss {float(loss):.15g}, {len(adapters)} trainable tensors; "
          f"files {sizes}")
    return sum(sizes.values())


def make_gemma3_multimodal(out_dir):
    """tiny_gemma3's weights as the language model of a Gemma3ForConditionalGeneration (a tiny SigLIP tower and
    projector beside it), saved by save_pretrained: the layout of the hub's Gemma 3 4B-27B checkpoints. The test
    reads its text weights and expects tiny_gemma3's golden loss."""
    text = build_model("tiny_gemma3")
    init_weights(text, True)
    text_config = text.config.to_dict()
    for key in ("architectures", "model_type", "transformers_version", "dtype", "torch_dtype"):
        text_config.pop(key, None)
    vision_config = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                         image_size=16, patch_size=8, num_channels=3)
    config = transformers.Gemma3Config(text_config=text_config, vision_config=vision_config, mm_tokens_per_image=4,
                                       boi_token_index=93, eoi_token_index=94, image_token_index=95,
                                       dtype="float32")
    model = transformers.Gemma3ForConditionalGeneration(config).to(torch.float32)
    language_model = model.get_decoder() if hasattr(model, "get_decoder") else model.model.language_model
    missing, unexpected = language_model.load_state_dict(text.model.state_dict(), strict=False)
    if [k for k in missing if "embed_scale" not in k] or unexpected:
        raise SystemExit(f"gemma3 multimodal: the text weights do not fit its language model: {missing} {unexpected}")
    directory = os.path.join(out_dir, "tiny_gemma3_multimodal")
    os.makedirs(directory, exist_ok=True)
    for fname in OWN_FILES:
        if os.path.isfile(os.path.join(directory, fname)):
            os.remove(os.path.join(directory, fname))
    model.save_pretrained(directory)
    with safe_open(os.path.join(directory, "model.safetensors"), framework="pt") as f:
        keys = sorted(f.keys())
    print(f"tiny_gemma3_multimodal: {len(keys)} tensors, e.g. {[k for k in keys if 'layers.0.' in k][:3]}, "
          f"{[k for k in keys if 'vision' in k][:1]}")
    sizes = {f: os.path.getsize(os.path.join(directory, f)) for f in sorted(os.listdir(directory))}
    return sum(sizes.values())


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="tests/fixtures", help="directory that receives one folder per fixture")
    parser.add_argument("--only", nargs="+", choices=FIXTURES, default=list(FIXTURES))
    parser.add_argument("--stock-transformers", action="store_true",
                        help="save the unpatched model's .loss and gradients (float32 RMSNorm, softmax, loss)")
    parser.add_argument("--lora", action="store_true",
                        help="also write <fixture>/lora/: peft adapters and the LoRA gradients (needs peft)")
    parser.add_argument("--lora-modules-to-save", action="store_true",
                        help="write tiny_llama/lora_save/: the LoRA fixture with modules_to_save [embed_tokens, "
                             "lm_head] trained whole (needs peft; tiny_llama/model.safetensors as made before)")
    parser.add_argument("--gemma3-multimodal", action="store_true",
                        help="also write tiny_gemma3_multimodal/: tiny_gemma3's language model inside a "
                             "Gemma3ForConditionalGeneration checkpoint (with a tiny vision tower)")
    args = parser.parse_args()
    if not transformers.__version__.startswith("5."):
        print(f"warning: written for transformers 5.x, running {transformers.__version__}", file=sys.stderr)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)  # one reduction order, whatever the machine's core count
    total = 0
    failed = []
    for name in (args.only if not args.lora_modules_to_save or args.only != list(FIXTURES) else []):
        try:
            total += make_fixture(name, args.out, args.stock_transformers)
            if args.lora:
                total += make_lora_fixture(name, args.out, args.stock_transformers)
        except Exception as error:  # report every fixture's failure, not only the first one
            import traceback
            traceback.print_exc()
            failed.append(f"{name}: {type(error).__name__}: {error}")
    if args.lora_modules_to_save:
        try:
            for name in ("tiny_llama", "tiny_qwen3"):  # untied, and tied (peft wraps the two apart: untied copies)
                total += make_lora_fixture(name, args.out, args.stock_transformers, ["embed_tokens", "lm_head"])
        except Exception as error:
            import traceback
            traceback.print_exc()
            failed.append(f"tiny_llama lora_save: {type(error).__name__}: {error}")
    if args.gemma3_multimodal:
        try:
            total += make_gemma3_multimodal(args.out)
        except Exception as error:
            import traceback
            traceback.print_exc()
            failed.append(f"gemma3 multimodal: {type(error).__name__}: {error}")
    if failed:
        raise SystemExit("failed:\n  " + "\n  ".join(failed))
    print(f"torch {torch.__version__}, transformers {transformers.__version__}: {total} bytes in all")
    if total > 1 << 20:
        print("warning: the fixtures are over 1 MiB", file=sys.stderr)


if __name__ == "__main__":
    main()
