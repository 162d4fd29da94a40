#include "train/streamed_save.h"

#include <stdio.h>
#include <stdlib.h>

#include "core/check.h"
#include "model/safetensors.h"
#include "model/weights.h"
#include "train/model_io.h"

/* The largest parameter's elements: trainable ones only, or every parameter of the base model. */
static int64_t largest_param(const tt_param_table *table, bool trainable_only) {
    int64_t largest = 0;
    for (int i = 0; i < table->count; i++) {
        const tt_param_info *p = &table->params[i];
        if ((p->trainable || !trainable_only) && p->numel > largest) largest = p->numel;
    }
    return largest;
}

static float *tensor_buffer(int64_t elements) {
    return tt_xmalloc(tt_mul_size((size_t)(elements > 0 ? elements : 1), sizeof(float), "a tensor of the save"),
                      "a tensor of the save");
}

/* The model writer's converted piece (weights.c: 2^20 values a piece, at most 4 bytes each). */
#define WRITER_PIECE_BYTES ((size_t)4 << 20)

size_t tt_streamed_save_host_bytes(const tt_model_state *s) {
    /* one tensor in fp32, and the copy in the compute format it is converted from (at most 4 bytes a value) */
    return (size_t)largest_param(&s->params, false) * 2 * sizeof(float) + WRITER_PIECE_BYTES;
}

void tt_save_model_streamed(const tt_model_state *s, const char *dir, size_t max_shard_bytes, const char *base_dir,
                            bool writes) {
    const tt_param_table *table = &s->params;
    float *tensor = tensor_buffer(largest_param(table, false));
    tt_hf_writer *writer = writes ? tt_hf_writer_open(table, s->config.dtype, dir, max_shard_bytes, base_dir) : NULL;
    for (int i = 0; i < table->count; i++) {
        const tt_param_info *p = &table->params[i];
        if (p->kind == TT_PARAM_LORA_A || p->kind == TT_PARAM_LORA_B) continue; /* the base model only */
        if (p->trainable) /* with zero_stage sharding a collective: every rank, in the same order */
            tt_model_get_trainable_range(s, TT_TRAINABLE_WEIGHTS, p->offset - table->trainable_start, p->numel, tensor);
        else if (writes) tt_model_get_frozen_range(s, p->offset, p->numel, tensor);
        if (writes) tt_hf_writer_values(writer, p, 0, p->numel, tensor);
    }
    if (writes) tt_hf_writer_close(writer, &s->config);
    free(tensor);
}

void tt_save_optimizer_streamed(const tt_model_state *s, const char *path, bool writes) {
    static const struct {
        const char *prefix;
        tt_trainable_values what;
    } parts[] = {
        {"master", TT_TRAINABLE_WEIGHTS}, {"exp_avg", TT_TRAINABLE_MOMENT_M}, {"exp_avg_sq", TT_TRAINABLE_MOMENT_V}};
    const tt_param_table *table = &s->params;
    tt_st_writer writer;
    tt_st_writer_init(&writer);
    char name[160];
    for (int i = 0; writes && i < table->count; i++) {
        const tt_param_info *p = &table->params[i];
        if (!p->trainable) continue;
        for (int k = 0; k < 3; k++) {
            snprintf(name, sizeof name, "%s.%s", parts[k].prefix, p->name);
            tt_st_writer_add(&writer, name, TT_F32, p->ndim, p->shape, NULL);
        }
    }
    if (writes) tt_st_writer_begin(&writer, path);
    float *tensor = tensor_buffer(largest_param(table, true));
    for (int i = 0; i < table->count; i++) {
        const tt_param_info *p = &table->params[i];
        if (!p->trainable) continue;
        for (int k = 0; k < 3; k++) {
            tt_model_get_trainable_range(s, parts[k].what, p->offset - table->trainable_start, p->numel, tensor);
            if (writes) tt_st_writer_write(&writer, tensor, (size_t)p->numel * sizeof(float));
        }
    }
    if (writes) tt_st_writer_finish(&writer);
    tt_st_writer_free(&writer);
    free(tensor);
}
