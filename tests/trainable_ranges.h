/* A streamed save's reads (train/streamed_save.h) against the whole-layout getters: every trainable tensor's weights
 * and moments read a tensor at a time (tt_model_get_trainable_range) are the same bytes as the whole getters gave
 * (weights in the trainable layout, m, v). True where the state cannot be read in ranges (zero_stage shards). */
#ifndef TT_TESTS_TRAINABLE_RANGES_H
#define TT_TESTS_TRAINABLE_RANGES_H

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <stdio.h>

#include "core/check.h"
#include "model/weights.h"
#include "train/checkpoint.h"
#include "train/model_io.h"
#include "train/streamed_save.h"

static inline bool trainable_ranges_match(const tt_model_state *s, const float *weights, const float *m,
                                          const float *v) {
    if (!tt_model_reads_trainable_ranges(s)) return true;
    float *tensor = malloc((size_t)s->params.trainable_numel * sizeof(float) + sizeof(float));
    const float *whole[3] = {weights, m, v};
    bool same = true;
    for (int i = 0; same && i < s->params.count; i++) {
        const tt_param_info *p = &s->params.params[i];
        if (!p->trainable) continue;
        const int64_t at = p->offset - s->params.trainable_start;
        for (int k = 0; k < 3; k++) {
            tt_model_get_trainable_range(s, (tt_trainable_values)k, at, p->numel, tensor);
            same &= memcmp(tensor, whole[k] + at, (size_t)p->numel * sizeof(float)) == 0;
        }
    }
    free(tensor);
    return same;
}

/* The bytes of a file (NULL when it cannot be read); *size its length. */
static inline unsigned char *trainable_ranges_read(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    unsigned char *data = NULL;
    size_t capacity = 0;
    *size = 0;
    for (;;) {
        if (*size == capacity) data = realloc(data, capacity = capacity ? 2 * capacity : 65536);
        const size_t got = fread(data + *size, 1, capacity - *size, f);
        *size += got;
        if (got == 0) break;
    }
    fclose(f);
    return data;
}

static inline bool trainable_ranges_same_file(const char *a, const char *b) {
    size_t na = 0, nb = 0;
    unsigned char *x = trainable_ranges_read(a, &na), *y = trainable_ranges_read(b, &nb);
    const bool same = x && y && na == nb && memcmp(x, y, na) == 0;
    free(x);
    free(y);
    return same;
}

/* A full fine-tune's streamed saves (train/streamed_save.h) against the gathered ones, file for file: the model from
 * the whole weights (tt_model_get_weights, tt_weights_save_hf) and the optimizer file from the whole getters through
 * the gathered save's writer (tt_checkpoint_save_optimizer), in scratch (a directory). True where the saves do not
 * stream (LoRA, zero_stage shards). */
static inline bool streamed_saves_match(const tt_model_state *s, const char *scratch) {
    if (s->params.lora_rank > 0 || !tt_model_reads_trainable_ranges(s)) return true;
    char streamed[4200], gathered[4200], a[4300], b[4300];
    snprintf(streamed, sizeof streamed, "%s/streamed", scratch);
    snprintf(gathered, sizeof gathered, "%s/gathered", scratch);
    tt_make_directories(streamed);
    tt_make_directories(gathered);
    tt_save_model_streamed(s, streamed, 0, NULL, true);
    snprintf(a, sizeof a, "%s/optimizer.safetensors", streamed);
    tt_save_optimizer_streamed(s, a, true);

    const size_t total = (size_t)s->params.total_numel, n = (size_t)s->params.trainable_numel;
    float *weights = malloc(total * sizeof(float) + 4), *m = malloc(n * sizeof(float) + 4),
          *v = malloc(n * sizeof(float) + 4);
    tt_model_get_weights(s, weights);
    tt_model_get_moments(s, m, v);
    tt_weights_save_hf(weights, &s->params, &s->config, s->config.dtype, gathered, 0, NULL);
    snprintf(b, sizeof b, "%s/optimizer.safetensors", gathered);
    tt_checkpoint_save_optimizer(s, weights + s->params.trainable_start, m, v, b);
    free(weights);
    free(m);
    free(v);

    bool same = trainable_ranges_same_file(a, b);
    static const char *const model_files[] = {"model.safetensors", "config.json"};
    for (int k = 0; k < 2; k++) {
        snprintf(a, sizeof a, "%s/%s", streamed, model_files[k]);
        snprintf(b, sizeof b, "%s/%s", gathered, model_files[k]);
        same &= trainable_ranges_same_file(a, b);
    }
    return same;
}

#endif
