#include "train/optimizer.h"

#include <math.h>

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
    const tt_plan *plan = &s->plan;
    unsigned char *weights = s->weights, *m = s->adam_m, *v = s->adam_v;
    const unsigned char *gradients = s->gradients;
    for (int i = 0; i < s->params.count; i++) {
        const tt_param_info *p = &s->params.params[i];
        const size_t at = (size_t)p->offset;
        s->backend->adamw_update(weights + at * plan->weight_bytes, s->master ? s->master + at : NULL,
                                 gradients + at * plan->gradient_bytes, m + at * plan->moment_bytes,
                                 v + at * plan->moment_bytes, p->numel, learning_rate, o->beta1, o->beta2,
                                 o->epsilon, p->weight_decay ? o->weight_decay : 0.0f, step, grad_scale);
    }
}
