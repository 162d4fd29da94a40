/* Writing a family's table of saved slots (saved_slots.h) in arch_<family>.c: one slot a line, in slot order,
 * and the groups of slots several families share. A slot left out of a table is absent in that family. */
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

/* The attention's pre-norm and the q/k/v adapters' down projections. */
#define TT_SLOTS_ATTENTION_INPUT                                                                                       \
    TT_SLOT_ENTRY(TT_SAVED_ATTN_RSTD, "attention norm rstd", TOKENS, ONE, true, RMSNORM, false, true, -1),         \
    TT_SLOT_ENTRY(TT_SAVED_ATTN_NORMED, "attention norm output", TOKENS, HIDDEN, false, RMSNORM, false, true, -1), \
    TT_SLOT_ENTRY(TT_SAVED_LORA_Q, "q_proj adapter", TOKENS, LORA_RANK, false, LORA_DOWN, false, false, TT_LORA_Q),\
    TT_SLOT_ENTRY(TT_SAVED_LORA_K, "k_proj adapter", TOKENS, LORA_RANK, false, LORA_DOWN, false, false, TT_LORA_K),\
    TT_SLOT_ENTRY(TT_SAVED_LORA_V, "v_proj adapter", TOKENS, LORA_RANK, false, LORA_DOWN, false, false, TT_LORA_V)

/* q and k straight from their projections, RoPE applied in place. */
#define TT_SLOTS_QK_PROJECTED                                                                                          \
    TT_SLOT_ENTRY(TT_SAVED_Q, "q", TOKENS, Q, false, LINEAR_ROPE, false, false, -1),                               \
    TT_SLOT_ENTRY(TT_SAVED_K, "k", TOKENS, KV, false, LINEAR_ROPE, false, false, -1)

/* q_norm and k_norm per head between the projections and RoPE, so q and k are cheap to recompute from the
 * projections' outputs. */
#define TT_SLOTS_QK_HEAD_NORMED                                                                                        \
    TT_SLOT_ENTRY(TT_SAVED_Q_RAW, "q before norm", TOKENS, Q, false, LINEAR, false, false, -1),                    \
    TT_SLOT_ENTRY(TT_SAVED_Q_RSTD, "q norm rstd", Q_HEADS, ONE, true, HEAD_NORM_ROPE, false, true, -1),            \
    TT_SLOT_ENTRY(TT_SAVED_K_RAW, "k before norm", TOKENS, KV, false, LINEAR, false, false, -1),                   \
    TT_SLOT_ENTRY(TT_SAVED_K_RSTD, "k norm rstd", KV_HEADS, ONE, true, HEAD_NORM_ROPE, false, true, -1),           \
    TT_SLOT_ENTRY(TT_SAVED_Q, "q", TOKENS, Q, false, HEAD_NORM_ROPE, false, true, -1),                             \
    TT_SLOT_ENTRY(TT_SAVED_K, "k", TOKENS, KV, false, HEAD_NORM_ROPE, false, true, -1)

/* v, the attention and the o_proj adapter's down projection. */
#define TT_SLOTS_ATTENTION                                                                                             \
    TT_SLOT_ENTRY(TT_SAVED_V, "v", TOKENS, KV, false, LINEAR, false, false, -1),                                   \
    TT_SLOT_ENTRY(TT_SAVED_ATTN_OUT, "attention output", TOKENS, Q, false, ATTENTION, false, false, -1),           \
    TT_SLOT_ENTRY(TT_SAVED_LSE, "attention log-sum-exp", Q_HEADS, ONE, true, ATTENTION, false, false, -1),         \
    TT_SLOT_ENTRY(TT_SAVED_LORA_O, "o_proj adapter", TOKENS, LORA_RANK, false, LORA_DOWN, false, false, TT_LORA_O)

/* The residual after attention (o_proj's output added in its epilogue) and a pre-norm SwiGLU MLP. */
#define TT_SLOTS_PRE_NORM_MLP                                                                                          \
    TT_SLOT_ENTRY(TT_SAVED_RESIDUAL_MID, "residual after attention", TOKENS, HIDDEN, false, RESIDUAL, true, false, -1),\
    TT_SLOT_ENTRY(TT_SAVED_MLP_RSTD, "MLP norm rstd", TOKENS, ONE, true, RMSNORM, true, true, -1),                 \
    TT_SLOT_ENTRY(TT_SAVED_MLP_NORMED, "MLP norm output", TOKENS, HIDDEN, false, RMSNORM, true, true, -1),         \
    TT_SLOT_ENTRY(TT_SAVED_LORA_GATE, "gate_proj adapter", TOKENS, LORA_RANK, false, LORA_DOWN, true, false,       \
                  TT_LORA_GATE),                                                                                   \
    TT_SLOT_ENTRY(TT_SAVED_LORA_UP, "up_proj adapter", TOKENS, LORA_RANK, false, LORA_DOWN, true, false, TT_LORA_UP),\
    TT_SLOT_ENTRY(TT_SAVED_GATE, "MLP gate", MLP, FFN, false, LINEAR, true, false, -1),                            \
    TT_SLOT_ENTRY(TT_SAVED_UP, "MLP up", MLP, FFN, false, LINEAR, true, false, -1),                                \
    TT_SLOT_ENTRY(TT_SAVED_SWIGLU, "SwiGLU output", MLP, FFN, false, SWIGLU, true, true, -1),                      \
    TT_SLOT_ENTRY(TT_SAVED_LORA_DOWN, "down_proj adapter", TOKENS, LORA_RANK, false, LORA_DOWN, true, false,       \
                  TT_LORA_DOWN)
/* clang-format on */

#endif
