#include "train/optimizer.h"

#include <math.h>
#include <stdlib.h>

#include "core/check.h"

double tt_gradient_norm(const tt_model_state *s) {
    /* One fixed-order sum over the flat buffer (the padding between parameters holds zeros): one
     * launch and one host round trip on the GPU instead of one per parameter. */
    return sqrt(s->backend->sum_squares(s->gradients, s->params.total_numel));
}

float tt_clip_scale(double grad_norm, float max_grad_norm) {
    if (max_grad_norm <= 0.0f) return 1.0f;
    double coefficient = (double)max_grad_norm / (grad_norm + 1e-6);
    return coefficient < 1.0 ? (float)coefficient : 1.0f;
}

void tt_adamw_step(tt_model_state *s, const tt_adamw_settings *o, float learning_rate, int64_t step,
                   float grad_scale) {
    /* One multi-tensor update over the flat buffers: runs of neighbouring parameters with the
     * same decay rule are one segment, and the padding between parameters (zeros, which AdamW
     * keeps at zero) joins the segment before it. */
    const tt_param_table *t = &s->params;
    int64_t *start = tt_xmalloc(sizeof(int64_t) * (size_t)(t->count + 1), "AdamW segments");
    unsigned char *decays = tt_xmalloc((size_t)t->count + 1, "AdamW segments");
    int segments = 0;
    for (int i = 0; i < t->count; i++) {
        const unsigned char decay = t->params[i].weight_decay;
        if (segments > 0 && decays[segments - 1] == decay) continue;
        start[segments] = segments == 0 ? 0 : t->params[i].offset;
        decays[segments++] = decay;
    }
    start[segments] = t->total_numel;
    s->backend->adamw_update(s->weights, s->master, s->gradients, s->adam_m, s->adam_v, start, decays, segments,
                             learning_rate, o->beta1, o->beta2, o->epsilon, o->weight_decay, step, grad_scale);
    free(start);
    free(decays);
}
