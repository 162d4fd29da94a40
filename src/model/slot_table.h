/* Writing a family's table of saved slots (saved_slots.h) in arch_<family>.c: one slot a line, in slot order, and
 * the groups of slots families share. A slot left out of a table is absent in that family. */
#ifndef TT_MODEL_SLOT_TABLE_H
#define TT_MODEL_SLOT_TABLE_H

#include "model/lora_modules.h"
#include "model/saved_slots.h"

/* clang-format off */
/* id, the arena's label, rows, width, fp32, the op writing it, in the MLP half, cheap, its LoRA module (-1: none) */
#define TT_SLOT_ENTRY(id, label, rows_, width_, fp32_, op, mlp, cheap_, module)                                      \
    [id] = {.name = (label),                                                                                       \
            .present = true,                                                                                       \
            .rows = TT_SLOT_ROWS_##rows_,                                                                          \
            .width = TT_SLOT_WIDTH_##width_,                                                                       \
            .fp32 = (fp32_),                                                                                       \
            .producer = TT_SLOT_OP_##op,                                                                           \
            .mlp_half = (mlp),                                                                                     \
            .cheap = (cheap_),                                                                                     \
            .lora_module = (module)}

/* The attention's pre-norm. */
#define TT_SLOTS_ATTENTION_PRE_NORM                                                                                    \
    TT_SLOT_ENTRY(TT_SAVED_ATTN_RSTD, "attention norm rstd", TOKENS, ONE, true, RMSNORM, false, true, -1),         \
    TT_SLOT_ENTRY(TT_SAVED_ATTN_NORMED, "attention norm output", TOKENS, HIDDEN, false, RMSNORM, false, true, -1)

/* The q/k/v adapters' down projections. */
#define TT_SLOTS_QKV_ADAPTERS                                                                                          \
    TT_SLOT_ENTRY(TT_SAVED_LORA_Q, "q_proj adapter", TOKENS, LORA_RANK, false, LORA_DOWN, false, false, TT_LORA_Q),\
    TT_SLOT_ENTRY(TT_SAVED_LORA_K, "k_proj adapter", TOKENS, LORA_RANK, false, LORA_DOWN, false, false, TT_LORA_K),\
    TT_SLOT_ENTRY(TT_SAVED_LORA_V, "v_proj adapter", TOKENS, LORA_RANK, false, LORA_DOWN, false, false, TT_LORA_V)

/* A fused qkv_proj's adapter's down projection (Phi-3). */
#define TT_SLOTS_QKV_FUSED_ADAPTER                                                                                     \
    TT_SLOT_ENTRY(TT_SAVED_LORA_QKV, "qkv_proj adapter", TOKENS, LORA_RANK, false, LORA_DOWN, false, false,        \
                  TT_LORA_QKV)

/* q and k straight from their projections, RoPE applied in place. */
#define TT_SLOTS_QK_PROJECTED                                                                                          \
    TT_SLOT_ENTRY(TT_SAVED_Q, "q", TOKENS, Q, false, LINEAR_ROPE, false, false, -1),                               \
    TT_SLOT_ENTRY(TT_SAVED_K, "k", TOKENS, KV, false, LINEAR_ROPE, false, false, -1)

/* q_norm and k_norm between the projections and RoPE, per head (rows: one a head) or over the whole projection
 * (rows: one a token), so q and k are cheap to recompute from the projections' outputs. */
#define TT_SLOTS_QK_NORMED(q_rows, k_rows)                                                                             \
    TT_SLOT_ENTRY(TT_SAVED_Q_RAW, "q before norm", TOKENS, Q, false, LINEAR, false, false, -1),                    \
    TT_SLOT_ENTRY(TT_SAVED_Q_RSTD, "q norm rstd", q_rows, ONE, true, HEAD_NORM_ROPE, false, true, -1),             \
    TT_SLOT_ENTRY(TT_SAVED_K_RAW, "k before norm", TOKENS, KV, false, LINEAR, false, false, -1),                   \
    TT_SLOT_ENTRY(TT_SAVED_K_RSTD, "k norm rstd", k_rows, ONE, true, HEAD_NORM_ROPE, false, true, -1),             \
    TT_SLOT_ENTRY(TT_SAVED_Q, "q", TOKENS, Q, false, HEAD_NORM_ROPE, false, true, -1),                             \
    TT_SLOT_ENTRY(TT_SAVED_K, "k", TOKENS, KV, false, HEAD_NORM_ROPE, false, true, -1)
#define TT_SLOTS_QK_HEAD_NORMED TT_SLOTS_QK_NORMED(Q_HEADS, KV_HEADS)
#define TT_SLOTS_QK_PROJECTION_NORMED TT_SLOTS_QK_NORMED(TOKENS, TOKENS)

/* v, the attention and the o_proj adapter's down projection. */
#define TT_SLOTS_ATTENTION                                                                                             \
    TT_SLOT_ENTRY(TT_SAVED_V, "v", TOKENS, KV, false, LINEAR, false, false, -1),                                   \
    TT_SLOT_ENTRY(TT_SAVED_ATTN_OUT, "attention output", TOKENS, Q, false, ATTENTION, false, false, -1),           \
    TT_SLOT_ENTRY(TT_SAVED_LSE, "attention log-sum-exp", Q_HEADS, ONE, true, ATTENTION, false, false, -1),         \
    TT_SLOT_ENTRY(TT_SAVED_LORA_O, "o_proj adapter", TOKENS, LORA_RANK, false, LORA_DOWN, false, false, TT_LORA_O)

/* The residual after attention: o_proj's output added in its epilogue (or scaled, then added). */
#define TT_SLOTS_RESIDUAL_JOINED                                                                                       \
    TT_SLOT_ENTRY(TT_SAVED_RESIDUAL_MID, "residual after attention", TOKENS, HIDDEN, false, RESIDUAL, true, false, -1)

/* The norm after attention and the residual it joins: o_proj's output, its 1/rms, and the residual after attention
 * (cheap from o_proj's output). */
#define TT_SLOTS_ATTENTION_POST_NORM                                                                                   \
    TT_SLOT_ENTRY(TT_SAVED_ATTN_PROJ, "o_proj output", TOKENS, HIDDEN, false, LINEAR, false, false, -1),            \
    TT_SLOT_ENTRY(TT_SAVED_ATTN_POST_RSTD, "attention post-norm rstd", TOKENS, ONE, true, POST_NORM, false, true, -1),\
    TT_SLOT_ENTRY(TT_SAVED_RESIDUAL_MID, "residual after attention", TOKENS, HIDDEN, false, POST_NORM, true, true, -1)

/* The MLP's pre-norm. */
#define TT_SLOTS_MLP_PRE_NORM                                                                                          \
    TT_SLOT_ENTRY(TT_SAVED_MLP_RSTD, "MLP norm rstd", TOKENS, ONE, true, RMSNORM, true, true, -1),                 \
    TT_SLOT_ENTRY(TT_SAVED_MLP_NORMED, "MLP norm output", TOKENS, HIDDEN, false, RMSNORM, true, true, -1)

/* A gated MLP (SwiGLU, GeGLU) and its adapters. */
#define TT_SLOTS_GLU_MLP(glu_label)                                                                                    \
    TT_SLOT_ENTRY(TT_SAVED_LORA_GATE, "gate_proj adapter", TOKENS, LORA_RANK, false, LORA_DOWN, true, false,       \
                  TT_LORA_GATE),                                                                                   \
    TT_SLOT_ENTRY(TT_SAVED_LORA_UP, "up_proj adapter", TOKENS, LORA_RANK, false, LORA_DOWN, true, false, TT_LORA_UP),\
    TT_SLOT_ENTRY(TT_SAVED_GATE, "MLP gate", MLP, FFN, false, LINEAR, true, false, -1),                            \
    TT_SLOT_ENTRY(TT_SAVED_UP, "MLP up", MLP, FFN, false, LINEAR, true, false, -1),                                \
    TT_SLOT_ENTRY(TT_SAVED_GLU, glu_label, MLP, FFN, false, GLU, true, true, -1),                                  \
    TT_SLOT_ENTRY(TT_SAVED_LORA_DOWN, "down_proj adapter", TOKENS, LORA_RANK, false, LORA_DOWN, true, false,       \
                  TT_LORA_DOWN)

/* A gated MLP of a fused gate_up_proj (Phi-3): one adapter's down projection for gate and up. */
#define TT_SLOTS_GLU_MLP_FUSED(glu_label)                                                                              \
    TT_SLOT_ENTRY(TT_SAVED_LORA_GATE_UP, "gate_up_proj adapter", TOKENS, LORA_RANK, false, LORA_DOWN, true, false, \
                  TT_LORA_GATE_UP),                                                                                \
    TT_SLOT_ENTRY(TT_SAVED_GATE, "MLP gate", MLP, FFN, false, LINEAR, true, false, -1),                            \
    TT_SLOT_ENTRY(TT_SAVED_UP, "MLP up", MLP, FFN, false, LINEAR, true, false, -1),                                \
    TT_SLOT_ENTRY(TT_SAVED_GLU, glu_label, MLP, FFN, false, GLU, true, true, -1),                                  \
    TT_SLOT_ENTRY(TT_SAVED_LORA_DOWN, "down_proj adapter", TOKENS, LORA_RANK, false, LORA_DOWN, true, false,       \
                  TT_LORA_DOWN)

/* The norm after the MLP: down_proj's output and its 1/rms. */
#define TT_SLOTS_MLP_POST_NORM                                                                                         \
    TT_SLOT_ENTRY(TT_SAVED_MLP_PROJ, "down_proj output", TOKENS, HIDDEN, false, LINEAR, true, false, -1),          \
    TT_SLOT_ENTRY(TT_SAVED_MLP_POST_RSTD, "MLP post-norm rstd", TOKENS, ONE, true, POST_NORM, true, true, -1)

/* A mixture of experts in place of the MLP: one op writes them all. */
#define TT_SLOTS_EXPERTS                                                                                               \
    TT_SLOT_ENTRY(TT_SAVED_ROUTER_PROBS, "router softmax", TOKENS, EXPERTS, true, EXPERTS, true, false, -1),       \
    TT_SLOT_ENTRY(TT_SAVED_EXPERT_INDEX, "routed experts", TOKENS, TOP_K, true, EXPERTS, true, false, -1),         \
    TT_SLOT_ENTRY(TT_SAVED_EXPERT_WEIGHT, "routing weights", TOKENS, TOP_K, true, EXPERTS, true, false, -1),       \
    TT_SLOT_ENTRY(TT_SAVED_EXPERT_GATE, "experts' gate", ROUTED, MOE_FFN, false, EXPERTS, true, false, -1),        \
    TT_SLOT_ENTRY(TT_SAVED_EXPERT_UP, "experts' up", ROUTED, MOE_FFN, false, EXPERTS, true, false, -1),            \
    TT_SLOT_ENTRY(TT_SAVED_EXPERT_GLU, "experts' SwiGLU", ROUTED, MOE_FFN, false, EXPERTS, true, false, -1),       \
    TT_SLOT_ENTRY(TT_SAVED_EXPERT_OUT, "experts' output", ROUTED, HIDDEN, false, EXPERTS, true, false, -1)

/* Llama's layer (every pre-norm family whose q and k come straight from their projections). */
#define TT_SLOTS_PRE_NORM_LAYER(qk_slots)                                                                              \
    TT_SLOTS_ATTENTION_PRE_NORM, TT_SLOTS_QKV_ADAPTERS, qk_slots, TT_SLOTS_ATTENTION, TT_SLOTS_RESIDUAL_JOINED,    \
    TT_SLOTS_MLP_PRE_NORM, TT_SLOTS_GLU_MLP("SwiGLU output")
/* clang-format on */

#endif
