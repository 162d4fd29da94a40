/* A streamed save's reads (train/streamed_save.h) against the whole-layout getters: every trainable tensor's weights
 * and moments read a tensor at a time (tt_model_get_trainable_range) are the same bytes as the whole getters gave
 * (weights in the trainable layout, m, v). True where the state cannot be read in ranges (zero_stage shards). */
#ifndef TT_TESTS_TRAINABLE_RANGES_H
#define TT_TESTS_TRAINABLE_RANGES_H

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "train/model_io.h"

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

#endif
