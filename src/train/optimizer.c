#include "train/optimizer.h"

#include <math.h>
#include <stdlib.h>

#include "core/check.h"

#include "train/optimizer_offload.h"

double tt_gradient_norm(const tt_model_state *s) {
    /* Per optimizer unit, each unit's fixed-order sum of squares on the compute tier (the padding
     * between parameters holds zeros), then one host round trip and the units' sums added in unit
     * order: the same bits whether a unit's gradients stay on the compute tier or stream out during
     * the backward (optimizer offload's gradient ring takes their sums then). */
    const int64_t units = s->config.num_layers + 2;
    for (int64_t u = 0; u < units; u++)
        if (s->unit_start[u + 1] > s->unit_start[u] && !tt_optimizer_offload_unit_streamed(s->optimizer_offload, u))
            s->backend->sum_squares(&s->norm_partials[u], tt_model_unit_gradients(s, u),
                                    s->unit_start[u + 1] - s->unit_start[u]);
    s->backend->download(s->host_norm_partials, s->norm_partials, sizeof(double) * (size_t)units);
    double total = 0;
    for (int64_t u = 0; u < units; u++)
        if (s->unit_start[u + 1] > s->unit_start[u]) total += s->host_norm_partials[u];
    return sqrt(total);
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
    if (s->optimizer_offload) /* the compute tier's share here, the host share on the CPU */
        tt_optimizer_offload_update(s->optimizer_offload, o, learning_rate, step, grad_scale);
    else
        tt_compute_tier_adamw(s, o, learning_rate, step, grad_scale);
    /* weight-offloaded layers updated on the CPU changed their homes: the buffers' copies are stale */
    if (s->plan.offloaded_weight_layers && s->optimizer_offload) tt_weight_stream_forget(&s->weight_offload);
}

int tt_clip_segments(const int64_t *start, const unsigned char *decays, int count, int64_t lo, int64_t hi,
                     int64_t **out_start, unsigned char **out_decays) {
    int n = 0;
    *out_start = tt_xcalloc((size_t)count + 1, sizeof(int64_t), "optimizer segments");
    *out_decays = tt_xcalloc((size_t)count + 1, 1, "optimizer segments");
    for (int i = 0; i < count; i++) {
        const int64_t a = start[i] > lo ? start[i] : lo, b = start[i + 1] < hi ? start[i + 1] : hi;
        if (a >= b) continue;
        (*out_start)[n] = a - lo;
        (*out_start)[n + 1] = b - lo;
        (*out_decays)[n] = decays[i];
        n++;
    }
    return n;
}

static void add_piece(tt_model_state *s, int64_t lo, int64_t hi, int64_t layer) {
    if (hi <= lo) return;
    const tt_param_table *t = &s->params;
    tt_adamw_piece *piece = &s->adamw_pieces[s->adamw_piece_count++];
    *piece = (tt_adamw_piece){.lo = lo, .hi = hi, .layer = layer,
                              .weights = layer < 0 ? tt_model_trainable_weights_at(s, lo) : NULL};
    piece->segments = tt_clip_segments(t->decay_segment_start, t->decay_segment_decays, t->decay_segments, lo, hi,
                                       &piece->segment_start, &piece->segment_decays);
}

void tt_adamw_pieces_build(tt_model_state *s) {
    const int64_t L = s->config.num_layers, K = s->plan.offloaded_weight_layers;
    const int64_t end = s->optimizer_offload ? s->optimizer_offload->host_start : s->params.trainable_numel;
    const int64_t first = s->sizes.weight_offload_first < end ? s->sizes.weight_offload_first : end;
    s->adamw_pieces = tt_xcalloc((size_t)L + 2, sizeof(tt_adamw_piece), "optimizer pieces");
    add_piece(s, 0, first, -1);
    for (int64_t l = 0; l < K && s->unit_start[l + 2] <= end; l++) add_piece(s, s->unit_start[l + 1], s->unit_start[l + 2], l);
    if (s->sizes.weight_offload_end < end) add_piece(s, s->sizes.weight_offload_end, end, -1);
}

void tt_adamw_pieces_free(tt_model_state *s) {
    for (int i = 0; i < s->adamw_piece_count; i++) {
        free(s->adamw_pieces[i].segment_start);
        free(s->adamw_pieces[i].segment_decays);
    }
    free(s->adamw_pieces);
    s->adamw_pieces = NULL;
    s->adamw_piece_count = 0;
}

void tt_compute_tier_adamw(tt_model_state *s, const tt_adamw_settings *o, float learning_rate, int64_t step,
                           float grad_scale) {
    for (int i = 0; i < s->adamw_piece_count; i++) {
        const tt_adamw_piece *piece = &s->adamw_pieces[i];
        void *weights = piece->weights;
        if (piece->layer >= 0) { /* in its buffer, the next offloaded piece's layer prefetched */
            const int64_t next = i + 1 < s->adamw_piece_count ? s->adamw_pieces[i + 1].layer : -1;
            tt_weight_stream_need(&s->weight_offload, piece->layer, next);
            weights = tt_weight_stream_buffer(&s->weight_offload, piece->layer);
        }
        const size_t lo = (size_t)piece->lo;
        s->backend->adamw_update(weights, s->master ? s->master + lo : NULL,
                                 (unsigned char *)s->gradients + lo * s->plan.gradient_bytes,
                                 (unsigned char *)s->adam_m + lo * s->plan.moment_bytes,
                                 (unsigned char *)s->adam_v + lo * s->plan.moment_bytes, piece->segment_start,
                                 piece->segment_decays, piece->segments, learning_rate, o->beta1, o->beta2, o->epsilon,
                                 o->weight_decay, step, grad_scale);
        if (piece->layer >= 0) tt_weight_stream_store(&s->weight_offload, piece->layer);
    }
}
