#include "train/streamed_save.h"

#include <stdio.h>
#include <stdlib.h>

#include "core/check.h"
#include "model/safetensors.h"
#include "model/weights.h"
#include "train/model_io.h"

static int64_t largest_trainable(const tt_param_table *table) {
    int64_t largest = 0;
    for (int i = 0; i < table->count; i++)
        if (table->params[i].trainable && table->params[i].numel > largest) largest = table->params[i].numel;
    return largest;
}

static float *tensor_buffer(const tt_param_table *table) {
    const int64_t largest = largest_trainable(table);
    return tt_xmalloc(tt_mul_size((size_t)(largest > 0 ? largest : 1), sizeof(float), "a tensor of the save"),
                      "a tensor of the save");
}

size_t tt_streamed_save_host_bytes(const tt_model_state *s) {
    return ((size_t)s->params.trainable_start + (size_t)largest_trainable(&s->params)) * sizeof(float);
}

void tt_save_model_streamed(const tt_model_state *s, const char *dir, size_t max_shard_bytes) {
    const tt_param_table *table = &s->params;
    float *frozen = NULL; /* the frozen part read whole: it has one copy, converted (a full fine-tune's is small) */
    if (table->trainable_start > 0) {
        frozen = tt_xmalloc(tt_mul_size((size_t)table->trainable_start, sizeof(float), "the frozen weights"),
                            "the frozen weights");
        tt_model_get_frozen_weights(s, frozen);
    }
    float *tensor = tensor_buffer(table);
    tt_hf_writer *writer = tt_hf_writer_open(table, s->config.dtype, dir, max_shard_bytes);
    for (int i = 0; i < table->count; i++) {
        const tt_param_info *p = &table->params[i];
        if (p->kind == TT_PARAM_LORA_A || p->kind == TT_PARAM_LORA_B) continue; /* the base model only */
        const float *values = frozen ? frozen + p->offset : NULL;
        if (p->trainable) {
            tt_model_get_trainable_range(s, TT_TRAINABLE_WEIGHTS, p->offset - table->trainable_start, p->numel, tensor);
            values = tensor;
        }
        TT_CHECK(values != NULL, "frozen parameter %s without the frozen weights", p->name);
        tt_hf_writer_values(writer, p, 0, p->numel, values);
    }
    tt_hf_writer_close(writer, &s->config);
    free(tensor);
    free(frozen);
}

void tt_save_optimizer_streamed(const tt_model_state *s, const char *path) {
    static const struct {
        const char *prefix;
        tt_trainable_values what;
    } parts[] = {
        {"master", TT_TRAINABLE_WEIGHTS}, {"exp_avg", TT_TRAINABLE_MOMENT_M}, {"exp_avg_sq", TT_TRAINABLE_MOMENT_V}};
    const tt_param_table *table = &s->params;
    tt_st_writer writer;
    tt_st_writer_init(&writer);
    char name[160];
    for (int i = 0; i < table->count; i++) {
        const tt_param_info *p = &table->params[i];
        if (!p->trainable) continue;
        for (int k = 0; k < 3; k++) {
            snprintf(name, sizeof name, "%s.%s", parts[k].prefix, p->name);
            tt_st_writer_add(&writer, name, TT_F32, p->ndim, p->shape, NULL);
        }
    }
    tt_st_writer_begin(&writer, path);
    float *tensor = tensor_buffer(table);
    for (int i = 0; i < table->count; i++) {
        const tt_param_info *p = &table->params[i];
        if (!p->trainable) continue;
        for (int k = 0; k < 3; k++) {
            tt_model_get_trainable_range(s, parts[k].what, p->offset - table->trainable_start, p->numel, tensor);
            tt_st_writer_write(&writer, tensor, (size_t)p->numel * sizeof(float));
        }
    }
    tt_st_writer_finish(&writer);
    tt_st_writer_free(&writer);
    free(tensor);
}
