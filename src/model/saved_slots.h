/* The tensors one decoder layer's backward reads: saved by its forward, or recomputed from the
 * layer input (and whatever else is saved) in the backward. The plan says which, per slot; the
 * size table sizes them; the step program pushes them. What each slot is (shape, dtype, the op writing
 * it, its half, its LoRA module) is one table per family (its description, arch.h), read by all three. */
#ifndef TT_MEMORY_SAVED_SLOTS_H
#define TT_MEMORY_SAVED_SLOTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/model_config_fields.h"

/* What one decoder layer's backward reads, saved by the forward (or recomputed). */
typedef enum tt_saved_slot {
    TT_SAVED_ATTN_RSTD,      /* [N] fp32: 1/rms of the layer input (a pre-norm) */
    TT_SAVED_ATTN_NORMED,    /* [N, D] input_layernorm output (a pre-norm) */
    TT_SAVED_LORA_Q,         /* [N, r] q_proj's adapter: scaling * A dropout(x) (LoRA only) */
    TT_SAVED_LORA_K,         /* [N, r] (LoRA only) */
    TT_SAVED_LORA_V,         /* [N, r] (LoRA only) */
    TT_SAVED_LORA_QKV,       /* [N, r] a fused qkv_proj's adapter (Phi-3; LoRA only) */
    TT_SAVED_Q_RAW,          /* [N, Hq*hd] q projection before q_norm (qk_norm only) */
    TT_SAVED_Q_RSTD,         /* [N*Hq] fp32 (qk_norm per head; [N] over the whole projection) */
    TT_SAVED_K_RAW,          /* [N, Hkv*hd] (qk_norm only) */
    TT_SAVED_K_RSTD,         /* [N*Hkv] fp32 (qk_norm per head; [N] over the whole projection) */
    TT_SAVED_Q,              /* [N, Hq*hd] after norm and RoPE */
    TT_SAVED_K,              /* [N, Hkv*hd] after norm and RoPE */
    TT_SAVED_V,              /* [N, Hkv*hd] */
    TT_SAVED_ATTN_OUT,       /* [N, Hq*hd] attention output before o_proj */
    TT_SAVED_LSE,            /* [B, Hq, T] fp32 log-sum-exp of the attention scores */
    TT_SAVED_LORA_O,         /* [N, r] o_proj's adapter (LoRA only) */
    TT_SAVED_ATTN_PROJ,      /* [N, D] o_proj's output, the input of the norm after attention (post-norms only) */
    TT_SAVED_ATTN_POST_RSTD, /* [N] fp32: its 1/rms (post-norms only) */
    TT_SAVED_RESIDUAL_MID,   /* [N, D] residual stream after attention; the MLP's slots start here */
    TT_SAVED_MLP_RSTD,       /* [N] fp32 (a pre-norm) */
    TT_SAVED_MLP_NORMED,     /* [N, D] the MLP's pre-norm output (Llama's post_attention_layernorm) */
    TT_SAVED_LORA_GATE,      /* [N, r] gate_proj's adapter (LoRA only) */
    TT_SAVED_LORA_UP,        /* [N, r] up_proj's adapter (LoRA only) */
    TT_SAVED_LORA_GATE_UP,   /* [N, r] a fused gate_up_proj's adapter (Phi-3; LoRA only) */
    TT_SAVED_GATE,           /* [N, F] */
    TT_SAVED_UP,             /* [N, F] */
    TT_SAVED_GLU,            /* [N, F] act(gate) * up */
    TT_SAVED_LORA_DOWN,      /* [N, r] down_proj's adapter (LoRA only) */
    TT_SAVED_MLP_PROJ,       /* [N, D] down_proj's output, the input of the norm after the MLP (post-norms only) */
    TT_SAVED_MLP_POST_RSTD,  /* [N] fp32: its 1/rms (post-norms only) */
    /* a mixture of experts in place of the MLP (Qwen3-MoE), all written by one op (TT_SLOT_OP_EXPERTS); the routed rows
     * are the N x k (token, choice) pairs, grouped by expert (in expert order, each expert's by token) */
    TT_SAVED_ROUTER_PROBS,  /* [N, E] fp32 the router's softmax */
    TT_SAVED_EXPERT_INDEX,  /* [N, k] int32 in 4-byte elements: each token's experts, best first */
    TT_SAVED_EXPERT_WEIGHT, /* [N, k] fp32 their routing weights (renormalized with norm_topk_prob) */
    TT_SAVED_EXPERT_GATE,   /* [N*k, Fm] the routed rows' gate projections */
    TT_SAVED_EXPERT_UP,     /* [N*k, Fm] */
    TT_SAVED_EXPERT_GLU,    /* [N*k, Fm] act(gate) * up */
    TT_SAVED_EXPERT_OUT,    /* [N*k, D] each routed row's expert output, before its routing weight */
    TT_SAVED_SLOT_COUNT
} tt_saved_slot;

/* The MLP's saved slots are the last ones, from here on: its backward runs first and pops them
 * before the attention backward pushes its scratch. */
#define TT_SAVED_FIRST_MLP_SLOT TT_SAVED_RESIDUAL_MID

/* A set of a layer's saved slots, one bit each: 64 bits, so that the next architectures' slots (biases, MoE
 * routing, QLoRA's dequantized tiles) fit without a change of type. */
typedef uint64_t tt_slot_set;
_Static_assert(TT_SAVED_SLOT_COUNT < 64, "a tt_slot_set holds one bit per saved slot (bit i: slot i)");
#define TT_SLOT(slot) ((tt_slot_set)1u << (slot))
#define TT_ALL_SLOTS (TT_SLOT(TT_SAVED_SLOT_COUNT) - 1u)
/* The attention output and its log-sum-exp: what selective checkpointing keeps. */
#define TT_ATTENTION_SLOTS (TT_SLOT(TT_SAVED_ATTN_OUT) | TT_SLOT(TT_SAVED_LSE))
/* The MLP's slots (the last ones). */
#define TT_MLP_SLOTS (TT_ALL_SLOTS & ~(TT_SLOT(TT_SAVED_FIRST_MLP_SLOT) - 1u))
/* The MLP's [N, F] intermediates: with tiled_mlp they exist one row shard at a time (the size table
 * sizes them [shard rows, F]), written by the forward and recomputed shard by shard in the backward. */
#define TT_MLP_SHARD_SLOTS (TT_SLOT(TT_SAVED_GATE) | TT_SLOT(TT_SAVED_UP) | TT_SLOT(TT_SAVED_GLU))

/* ---- the table of a layer's slots, per architecture ---- */

/* A slot's rows. */
typedef enum tt_slot_rows {
    TT_SLOT_ROWS_TOKENS,   /* N = micro_batch x sequence_len */
    TT_SLOT_ROWS_MLP,      /* N, or one shard's rows with tiled_mlp */
    TT_SLOT_ROWS_Q_HEADS,  /* N x num_heads (one value per token and query head) */
    TT_SLOT_ROWS_KV_HEADS, /* N x num_kv_heads */
    TT_SLOT_ROWS_ROUTED,   /* N x num_experts_per_tok: a mixture of experts' routed rows */
} tt_slot_rows;

/* A slot's row width. */
typedef enum tt_slot_width {
    TT_SLOT_WIDTH_ONE,       /* a scalar per row */
    TT_SLOT_WIDTH_HIDDEN,    /* hidden_size */
    TT_SLOT_WIDTH_Q,         /* num_heads x head_dim */
    TT_SLOT_WIDTH_KV,        /* num_kv_heads x head_dim */
    TT_SLOT_WIDTH_FFN,       /* intermediate_size */
    TT_SLOT_WIDTH_LORA_RANK, /* lora_r */
    TT_SLOT_WIDTH_EXPERTS,   /* num_experts */
    TT_SLOT_WIDTH_TOP_K,     /* num_experts_per_tok */
    TT_SLOT_WIDTH_MOE_FFN,   /* moe_intermediate_size */
} tt_slot_width;

/* The op that writes a slot (in the forward, and again when it is recomputed). */
typedef enum tt_slot_op {
    TT_SLOT_OP_RMSNORM,        /* a pre-norm (input_layernorm, the MLP's): output and 1/rms */
    TT_SLOT_OP_LINEAR,         /* a projection (bias and LoRA's up projection added) */
    TT_SLOT_OP_LINEAR_ROPE,    /* q_proj / k_proj, then RoPE in place (where the layer has RoPE) */
    TT_SLOT_OP_HEAD_NORM_ROPE, /* q_norm / k_norm, then RoPE in place (qk_norm) */
    TT_SLOT_OP_ATTENTION,      /* the fused attention: output and log-sum-exp */
    TT_SLOT_OP_RESIDUAL,       /* o_proj with the residual joined (added in the GEMM's epilogue, scaled, or through the
                                  norm after attention) */
    TT_SLOT_OP_POST_NORM,      /* the norm after a half, added to the residual stream: its 1/rms */
    TT_SLOT_OP_GLU,            /* act(gate) * up */
    TT_SLOT_OP_LORA_DOWN,      /* an adapter's down projection: scaling * A dropout(x) */
    TT_SLOT_OP_EXPERTS,        /* a mixture of experts: the router, the routing and the experts' projections */
} tt_slot_op;

/* One saved slot of a decoder layer in one architecture. */
typedef struct tt_saved_slot_info {
    const char *name; /* the arena's label ("attention norm output") */
    bool present;     /* the architecture has it (Q_RAW only with qk_norm); LoRA slots: where adapted */
    tt_slot_rows rows;
    tt_slot_width width;
    bool fp32; /* fp32 always (norm statistics, log-sum-exp); else the run's activation dtype */
    tt_slot_op producer;
    bool mlp_half;   /* written by the MLP half (the backward pops these first) */
    bool cheap;      /* element-wise: Megatron's recompute_granularity selective recomputes it */
    int lora_module; /* the tt_lora_module whose down projection it holds, or -1 */
} tt_saved_slot_info;

/* A decoder layer's slots for one architecture, indexed by tt_saved_slot. */
typedef struct tt_layer_slots {
    const char *architecture; /* the family whose table it is ("llama" for llama, mistral and qwen2) */
    tt_saved_slot_info slot[TT_SAVED_SLOT_COUNT];
} tt_layer_slots;

/* The sizes a slot's shape is made of. */
typedef struct tt_slot_dims {
    int64_t tokens, mlp_rows; /* N, and the MLP's rows (a shard's with tiled_mlp) */
    int64_t num_heads, num_kv_heads, head_dim;
    int64_t hidden, intermediate, lora_rank;
    int64_t experts, experts_per_token, moe_intermediate; /* E, k, Fm (0 without experts) */
    size_t activation_bytes;                              /* per element of the run's activation dtype */
} tt_slot_dims;

/* Elements of a slot (0 where it is absent). */
int64_t tt_saved_slot_elements(const tt_saved_slot_info *info, const tt_slot_dims *dims);
/* The saved slot holding a LoRA module's down projection in a table. */
tt_saved_slot tt_lora_saved_slot(const tt_layer_slots *slots, int lora_module);
/* The slots an architecture marks cheap (what recompute_granularity selective recomputes). */
tt_slot_set tt_cheap_slots(const tt_layer_slots *slots);

#endif
