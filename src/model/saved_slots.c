/* What every family's table of saved slots answers the same way (the tables are the families': arch_*.c). */
#include "model/saved_slots.h"

#include "core/check.h"

int64_t tt_saved_slot_elements(const tt_saved_slot_info *info, const tt_slot_dims *dims) {
    if (!info->present) return 0;
    int64_t rows = 0, width = 0;
    switch (info->rows) {
    case TT_SLOT_ROWS_TOKENS: rows = dims->tokens; break;
    case TT_SLOT_ROWS_MLP: rows = dims->mlp_rows; break;
    case TT_SLOT_ROWS_Q_HEADS: rows = dims->tokens * dims->num_heads; break;
    case TT_SLOT_ROWS_KV_HEADS: rows = dims->tokens * dims->num_kv_heads; break;
    case TT_SLOT_ROWS_ROUTED: rows = dims->tokens * dims->experts_per_token; break;
    }
    switch (info->width) {
    case TT_SLOT_WIDTH_ONE: width = 1; break;
    case TT_SLOT_WIDTH_HIDDEN: width = dims->hidden; break;
    case TT_SLOT_WIDTH_Q: width = dims->num_heads * dims->head_dim; break;
    case TT_SLOT_WIDTH_KV: width = dims->num_kv_heads * dims->head_dim; break;
    case TT_SLOT_WIDTH_FFN: width = dims->intermediate; break;
    case TT_SLOT_WIDTH_LORA_RANK: width = dims->lora_rank; break;
    case TT_SLOT_WIDTH_EXPERTS: width = dims->experts; break;
    case TT_SLOT_WIDTH_TOP_K: width = dims->experts_per_token; break;
    case TT_SLOT_WIDTH_MOE_FFN: width = dims->moe_intermediate; break;
    }
    return rows * width;
}

tt_saved_slot tt_lora_saved_slot(const tt_layer_slots *slots, int lora_module) {
    for (int i = 0; i < TT_SAVED_SLOT_COUNT; i++)
        if (slots->slot[i].present && slots->slot[i].lora_module == lora_module) return (tt_saved_slot)i;
    TT_CHECK(false, "no saved slot for LoRA module %d", lora_module);
    return TT_SAVED_SLOT_COUNT;
}

tt_slot_set tt_cheap_slots(const tt_layer_slots *slots) {
    tt_slot_set cheap = 0;
    for (int i = 0; i < TT_SAVED_SLOT_COUNT; i++)
        if (slots->slot[i].present && slots->slot[i].cheap) cheap |= TT_SLOT(i);
    return cheap;
}
