#include "train/optimizer_step.h"

#include <math.h>

#include "train/optimizer_offload.h"

double tt_gradient_norm(const tt_model_state *s) {
    /* Per optimizer unit, each unit's fixed-order sum of squares on the compute tier (the padding
     * between parameters holds zeros), then one host round trip and the units' sums added in unit
     * order: the same bits whether a unit's gradients stay on the compute tier or stream out during
     * the backward (optimizer offload's gradient ring takes their sums then). */
    const int64_t units = s->config.num_layers + 2;
    for (int64_t u = 0; u < units; u++)
        if (s->unit_start[u + 1] > s->unit_start[u] && !tt_optimizer_offload_unit_streamed(s->optimizer_offload, u) &&
            !s->residency.unit[u].optimizer_on_other_rank) /* ZeRO stage 1: its summed gradients are there */
            tt_backend_sum_squares(s->backend, &s->norm_partials[u], tt_model_unit_gradients(s, u),
                                   s->unit_start[u + 1] - s->unit_start[u]);
    tt_backend_download(s->backend, s->host_norm_partials, s->norm_partials, sizeof(double) * (size_t)units);
    if (s->shards) s->shards->gather_norm_partials(s->shards->ctx, s->host_norm_partials);
    double total = 0;
    for (int64_t u = 0; u < units; u++)
        if (s->unit_start[u + 1] > s->unit_start[u]) total += s->host_norm_partials[u];
    return sqrt(total);
}

void tt_adamw_step(tt_model_state *s, const tt_adamw_settings *o, float learning_rate, int64_t step, float grad_scale) {
    /* One multi-tensor update over the trainable parameters (frozen ones have no gradient and no
     * state), segmented by weight-decay rule (the padding between parameters holds zeros, which
     * AdamW keeps at zero). */
    if (s->optimizer_offload) /* the compute tier's share here, the host share on the CPU */
        tt_optimizer_offload_update(s->optimizer_offload, o, learning_rate, step, grad_scale);
    else tt_compute_tier_adamw(s, o, learning_rate, step, grad_scale);
    /* weight-offloaded layers updated on the CPU changed their homes: the buffers' copies are stale */
    if (s->plan.offloaded_weight_layers && s->optimizer_offload) tt_weight_stream_forget(&s->weight_offload);
}
