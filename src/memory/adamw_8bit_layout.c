#include "memory/adamw_8bit_layout.h"

#include <stdlib.h>

#include "core/check.h"
#include "core/tier.h"

/* The three parts' sizes, filling the layout's tensors where it has them. */
static void lay_out(tt_adamw_8bit_layout *layout, const tt_param_table *params) {
    int n = 0;
    for (int i = 0; i < params->count; i++) {
        const tt_param_info *p = &params->params[i];
        if (!p->trainable) continue;
        const bool quantized = p->numel >= TT_ADAMW_8BIT_MIN_NUMEL;
        if (layout->tensors) {
            layout->tensors[n] = (tt_adamw_8bit_tensor){
                .element = p->offset - params->trainable_start,
                .numel = p->numel,
                .decays = p->weight_decay,
                .quantized = quantized,
                .state = quantized ? layout->quantized_numel : layout->fp32_numel,
                .block = quantized ? layout->blocks : 0,
            };
            layout->param[n] = i;
        }
        if (quantized) {
            layout->quantized_numel += p->numel;
            layout->blocks += tt_adamw_8bit_blocks(p->numel);
        } else {
            layout->fp32_numel += p->numel;
        }
        n++;
    }
    layout->count = n;
    layout->absmax_offset = tt_align_up((size_t)layout->quantized_numel);
    layout->fp32_offset = layout->absmax_offset + tt_align_up((size_t)layout->blocks * sizeof(float));
    layout->moment_bytes = layout->fp32_offset + tt_align_up((size_t)layout->fp32_numel * sizeof(float));
}

void tt_adamw_8bit_layout_build(tt_adamw_8bit_layout *layout, const tt_param_table *params) {
    *layout = (tt_adamw_8bit_layout){0};
    int trainable = 0;
    for (int i = 0; i < params->count; i++) trainable += params->params[i].trainable;
    layout->tensors = tt_xcalloc((size_t)trainable + 1, sizeof(tt_adamw_8bit_tensor), "8-bit AdamW layout");
    layout->param = tt_xcalloc((size_t)trainable + 1, sizeof(int), "8-bit AdamW layout");
    lay_out(layout, params);
}

void tt_adamw_8bit_layout_free(tt_adamw_8bit_layout *layout) {
    free(layout->tensors);
    free(layout->param);
    *layout = (tt_adamw_8bit_layout){0};
}

size_t tt_adamw_8bit_moment_bytes(const tt_param_table *params) {
    tt_adamw_8bit_layout layout = {0};
    lay_out(&layout, params);
    return layout.moment_bytes;
}

tt_adamw_8bit_moment tt_adamw_8bit_moment_in(const tt_adamw_8bit_layout *layout, void *buffer) {
    unsigned char *base = buffer;
    return (tt_adamw_8bit_moment){.codes = base,
                                  .absmax = (float *)(void *)(base + layout->absmax_offset),
                                  .fp32 = (float *)(void *)(base + layout->fp32_offset)};
}

int tt_adamw_8bit_tensors_in(const tt_adamw_8bit_layout *layout, int64_t lo, int64_t hi, tt_adamw_8bit_tensor **out) {
    *out = NULL;
    int n = 0;
    for (int i = 0; i < layout->count; i++) {
        const tt_adamw_8bit_tensor *t = &layout->tensors[i];
        const int64_t end = t->element + t->numel;
        if (end <= lo || t->element >= hi) continue;
        TT_CHECK(t->element >= lo && end <= hi, "an 8-bit AdamW piece [%lld, %lld) cuts a parameter [%lld, %lld)",
                 (long long)lo, (long long)hi, (long long)t->element, (long long)end);
        if (!*out) *out = tt_xcalloc((size_t)layout->count, sizeof(tt_adamw_8bit_tensor), "8-bit AdamW piece");
        (*out)[n] = *t;
        (*out)[n].element -= lo;
        n++;
    }
    return n;
}
