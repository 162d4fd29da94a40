#include "train/optimizer.h"

#include <math.h>

#include "train/optimizer_offload.h"

double tt_gradient_norm(const tt_model_state *s) {
    /* One fixed-order sum over the flat buffer (the padding between parameters holds zeros): one
     * launch and one host round trip on the GPU instead of one per parameter. */
    return sqrt(s->backend->sum_squares(s->gradients, s->params.trainable_numel));
}

float tt_clip_scale(double grad_norm, float max_grad_norm) {
    if (max_grad_norm <= 0.0f) return 1.0f;
    double coefficient = (double)max_grad_norm / (grad_norm + 1e-6);
    return coefficient < 1.0 ? (float)coefficient : 1.0f;
}

void tt_adamw_step(tt_model_state *s, const tt_adamw_settings *o, float learning_rate, int64_t step,
                   float grad_scale) {
    /* One multi-tensor update over the trainable parameters (frozen ones have no gradient and no
     * state), segmented by weight-decay rule (the padding between parameters holds zeros, which
     * AdamW keeps at zero). */
    if (s->optimizer_offload) { /* the compute tier's share here, the host share on the CPU */
        tt_optimizer_offload_update(s->optimizer_offload, o, learning_rate, step, grad_scale);
        return;
    }
    const tt_param_table *t = &s->params;
    s->backend->adamw_update(s->trainable_weights, s->master, s->gradients, s->adam_m, s->adam_v, t->decay_segment_start,
                             t->decay_segment_decays, t->decay_segments, learning_rate, o->beta1, o->beta2,
                             o->epsilon, o->weight_decay, step, grad_scale);
}
