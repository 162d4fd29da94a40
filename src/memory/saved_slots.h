/* The tensors one decoder layer's backward reads: saved by its forward, or recomputed from the
 * layer input (and whatever else is saved) in the backward. The plan says which, per slot; the
 * size table sizes them; the step program pushes them. */
#ifndef TT_MEMORY_SAVED_SLOTS_H
#define TT_MEMORY_SAVED_SLOTS_H

#include <stdint.h>

/* What one decoder layer's backward reads, saved by the forward (or recomputed). */
typedef enum tt_saved_slot {
    TT_SAVED_ATTN_RSTD,   /* [N] fp32: 1/rms of the layer input */
    TT_SAVED_ATTN_NORMED, /* [N, D] input_layernorm output */
    TT_SAVED_LORA_Q,      /* [N, r] q_proj's adapter: scaling * A dropout(x) (LoRA only) */
    TT_SAVED_LORA_K,      /* [N, r] (LoRA only) */
    TT_SAVED_LORA_V,      /* [N, r] (LoRA only) */
    TT_SAVED_Q_RAW,       /* [N, Hq*hd] q projection before q_norm (qk_norm only) */
    TT_SAVED_Q_RSTD,      /* [N*Hq] fp32 (qk_norm only) */
    TT_SAVED_K_RAW,       /* [N, Hkv*hd] (qk_norm only) */
    TT_SAVED_K_RSTD,      /* [N*Hkv] fp32 (qk_norm only) */
    TT_SAVED_Q,           /* [N, Hq*hd] after norm and RoPE */
    TT_SAVED_K,           /* [N, Hkv*hd] after norm and RoPE */
    TT_SAVED_V,           /* [N, Hkv*hd] */
    TT_SAVED_ATTN_OUT,    /* [N, Hq*hd] attention output before o_proj */
    TT_SAVED_LSE,         /* [B, Hq, T] fp32 log-sum-exp of the attention scores */
    TT_SAVED_LORA_O,      /* [N, r] o_proj's adapter (LoRA only) */
    TT_SAVED_RESIDUAL_MID,/* [N, D] residual stream after attention; the MLP's slots start here */
    TT_SAVED_MLP_RSTD,    /* [N] fp32 */
    TT_SAVED_MLP_NORMED,  /* [N, D] post_attention_layernorm output */
    TT_SAVED_LORA_GATE,   /* [N, r] gate_proj's adapter (LoRA only) */
    TT_SAVED_LORA_UP,     /* [N, r] up_proj's adapter (LoRA only) */
    TT_SAVED_GATE,        /* [N, F] */
    TT_SAVED_UP,          /* [N, F] */
    TT_SAVED_SWIGLU,      /* [N, F] silu(gate) * up */
    TT_SAVED_LORA_DOWN,   /* [N, r] down_proj's adapter (LoRA only) */
    TT_SAVED_SLOT_COUNT
} tt_saved_slot;

/* The MLP's saved slots are the last ones, from here on: its backward runs first and pops them
 * before the attention backward pushes its scratch. */
#define TT_SAVED_FIRST_MLP_SLOT TT_SAVED_RESIDUAL_MID

/* The saved slot of each LoRA module's down projection (tt_lora_module order). */
#define TT_SAVED_LORA_SLOTS                                                                                         \
    { TT_SAVED_LORA_Q, TT_SAVED_LORA_K, TT_SAVED_LORA_V, TT_SAVED_LORA_O, TT_SAVED_LORA_GATE, TT_SAVED_LORA_UP, \
      TT_SAVED_LORA_DOWN }

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
#define TT_MLP_SHARD_SLOTS (TT_SLOT(TT_SAVED_GATE) | TT_SLOT(TT_SAVED_UP) | TT_SLOT(TT_SAVED_SWIGLU))

#endif
