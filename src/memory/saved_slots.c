/* The saved slots of a decoder layer, one table per architecture. The size table sizes each slot from its
 * shape and dtype here, the plan takes its cheap set from here, the step program labels its pushes and finds
 * an adapter's slot here; the layer code (step.c) writes each slot with the op the table names. */
#include "memory/saved_slots.h"

#include "core/check.h"
#include "model/lora_modules.h"

/* One slot a line, in slot order (kept as written). */
/* clang-format off */
#define SLOT(id, label, rows_, width_, fp32_, op, mlp, cheap_, module)                                               \
    [id] = {.name = (label),                                                                                       \
            .present = true,                                                                                       \
            .rows = TT_SLOT_ROWS_##rows_,                                                                          \
            .width = TT_SLOT_WIDTH_##width_,                                                                       \
            .fp32 = (fp32_),                                                                                       \
            .producer = TT_SLOT_OP_##op,                                                                           \
            .mlp_half = (mlp),                                                                                     \
            .cheap = (cheap_),                                                                                     \
            .lora_module = (module)}
#define ABSENT(id, label) [id] = {.name = (label), .present = false, .lora_module = -1}

/* The slots both architectures share, in slot order; the attention projections' rows differ (below). */
#define ATTENTION_INPUT_SLOTS                                                                                          \
    SLOT(TT_SAVED_ATTN_RSTD, "attention norm rstd", TOKENS, ONE, true, RMSNORM, false, true, -1),                  \
    SLOT(TT_SAVED_ATTN_NORMED, "attention norm output", TOKENS, HIDDEN, false, RMSNORM, false, true, -1),          \
    SLOT(TT_SAVED_LORA_Q, "q_proj adapter", TOKENS, LORA_RANK, false, LORA_DOWN, false, false, TT_LORA_Q),         \
    SLOT(TT_SAVED_LORA_K, "k_proj adapter", TOKENS, LORA_RANK, false, LORA_DOWN, false, false, TT_LORA_K),         \
    SLOT(TT_SAVED_LORA_V, "v_proj adapter", TOKENS, LORA_RANK, false, LORA_DOWN, false, false, TT_LORA_V)
#define ATTENTION_OUTPUT_AND_MLP_SLOTS                                                                                 \
    SLOT(TT_SAVED_V, "v", TOKENS, KV, false, LINEAR, false, false, -1),                                            \
    SLOT(TT_SAVED_ATTN_OUT, "attention output", TOKENS, Q, false, ATTENTION, false, false, -1),                    \
    SLOT(TT_SAVED_LSE, "attention log-sum-exp", Q_HEADS, ONE, true, ATTENTION, false, false, -1),                  \
    SLOT(TT_SAVED_LORA_O, "o_proj adapter", TOKENS, LORA_RANK, false, LORA_DOWN, false, false, TT_LORA_O),         \
    SLOT(TT_SAVED_RESIDUAL_MID, "residual after attention", TOKENS, HIDDEN, false, RESIDUAL, true, false, -1),     \
    SLOT(TT_SAVED_MLP_RSTD, "MLP norm rstd", TOKENS, ONE, true, RMSNORM, true, true, -1),                          \
    SLOT(TT_SAVED_MLP_NORMED, "MLP norm output", TOKENS, HIDDEN, false, RMSNORM, true, true, -1),                  \
    SLOT(TT_SAVED_LORA_GATE, "gate_proj adapter", TOKENS, LORA_RANK, false, LORA_DOWN, true, false, TT_LORA_GATE), \
    SLOT(TT_SAVED_LORA_UP, "up_proj adapter", TOKENS, LORA_RANK, false, LORA_DOWN, true, false, TT_LORA_UP),       \
    SLOT(TT_SAVED_GATE, "MLP gate", MLP, FFN, false, LINEAR, true, false, -1),                                     \
    SLOT(TT_SAVED_UP, "MLP up", MLP, FFN, false, LINEAR, true, false, -1),                                         \
    SLOT(TT_SAVED_SWIGLU, "SwiGLU output", MLP, FFN, false, SWIGLU, true, true, -1),                               \
    SLOT(TT_SAVED_LORA_DOWN, "down_proj adapter", TOKENS, LORA_RANK, false, LORA_DOWN, true, false, TT_LORA_DOWN)

/* Llama, Mistral, Qwen2: q and k straight from their projections, RoPE applied in place. */
static const tt_layer_slots llama_slots = {
    .architecture = "llama",
    .slot = {ATTENTION_INPUT_SLOTS,
             ABSENT(TT_SAVED_Q_RAW, "q before norm"),
             ABSENT(TT_SAVED_Q_RSTD, "q norm rstd"),
             ABSENT(TT_SAVED_K_RAW, "k before norm"),
             ABSENT(TT_SAVED_K_RSTD, "k norm rstd"),
             SLOT(TT_SAVED_Q, "q", TOKENS, Q, false, LINEAR_ROPE, false, false, -1),
             SLOT(TT_SAVED_K, "k", TOKENS, KV, false, LINEAR_ROPE, false, false, -1),
             ATTENTION_OUTPUT_AND_MLP_SLOTS},
};

/* Qwen3: q_norm and k_norm per head between the projections and RoPE, so q and k are cheap to recompute from
 * the projections' outputs. */
static const tt_layer_slots qwen3_slots = {
    .architecture = "qwen3",
    .slot = {ATTENTION_INPUT_SLOTS,
             SLOT(TT_SAVED_Q_RAW, "q before norm", TOKENS, Q, false, LINEAR, false, false, -1),
             SLOT(TT_SAVED_Q_RSTD, "q norm rstd", Q_HEADS, ONE, true, HEAD_NORM_ROPE, false, true, -1),
             SLOT(TT_SAVED_K_RAW, "k before norm", TOKENS, KV, false, LINEAR, false, false, -1),
             SLOT(TT_SAVED_K_RSTD, "k norm rstd", KV_HEADS, ONE, true, HEAD_NORM_ROPE, false, true, -1),
             SLOT(TT_SAVED_Q, "q", TOKENS, Q, false, HEAD_NORM_ROPE, false, true, -1),
             SLOT(TT_SAVED_K, "k", TOKENS, KV, false, HEAD_NORM_ROPE, false, true, -1),
             ATTENTION_OUTPUT_AND_MLP_SLOTS},
};

/* clang-format on */

const tt_layer_slots *tt_layer_slots_for(const tt_model_config *model) {
    return model->qk_norm ? &qwen3_slots : &llama_slots;
}

int64_t tt_saved_slot_elements(const tt_saved_slot_info *info, const tt_slot_dims *dims) {
    if (!info->present) return 0;
    int64_t rows = 0, width = 0;
    switch (info->rows) {
    case TT_SLOT_ROWS_TOKENS: rows = dims->tokens; break;
    case TT_SLOT_ROWS_MLP: rows = dims->mlp_rows; break;
    case TT_SLOT_ROWS_Q_HEADS: rows = dims->tokens * dims->num_heads; break;
    case TT_SLOT_ROWS_KV_HEADS: rows = dims->tokens * dims->num_kv_heads; break;
    }
    switch (info->width) {
    case TT_SLOT_WIDTH_ONE: width = 1; break;
    case TT_SLOT_WIDTH_HIDDEN: width = dims->hidden; break;
    case TT_SLOT_WIDTH_Q: width = dims->num_heads * dims->head_dim; break;
    case TT_SLOT_WIDTH_KV: width = dims->num_kv_heads * dims->head_dim; break;
    case TT_SLOT_WIDTH_FFN: width = dims->intermediate; break;
    case TT_SLOT_WIDTH_LORA_RANK: width = dims->lora_rank; break;
    }
    return rows * width;
}

tt_saved_slot tt_lora_saved_slot(int lora_module) {
    for (int i = 0; i < TT_SAVED_SLOT_COUNT; i++)
        if (llama_slots.slot[i].lora_module == lora_module) return (tt_saved_slot)i;
    TT_CHECK(false, "no saved slot for LoRA module %d", lora_module);
    return TT_SAVED_SLOT_COUNT;
}

tt_slot_set tt_cheap_slots(const tt_layer_slots *slots) {
    tt_slot_set cheap = 0;
    for (int i = 0; i < TT_SAVED_SLOT_COUNT; i++)
        if (slots->slot[i].present && slots->slot[i].cheap) cheap |= TT_SLOT(i);
    return cheap;
}
