#include "train/optimizer.h"

#include <math.h>
#include <stdlib.h>

#include "core/check.h"
#include "memory/adamw_8bit_layout.h"

float tt_clip_scale(double grad_norm, float max_grad_norm) {
    if (max_grad_norm <= 0.0f) return 1.0f;
    double coefficient = (double)max_grad_norm / (grad_norm + 1e-6);
    return coefficient < 1.0 ? (float)coefficient : 1.0f;
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

/* [lo, hi) clipped to this rank's optimizer shard (whole units: a weight-offloaded layer is in or out) */
static void add_piece(tt_model_state *s, int64_t lo, int64_t hi, int64_t layer) {
    if (lo < s->sizes.optimizer_shard_start) lo = s->sizes.optimizer_shard_start;
    if (hi > s->sizes.optimizer_shard_end) hi = s->sizes.optimizer_shard_end; /* (the host share is cut before) */
    if (hi <= lo) return;
    const tt_param_table *t = &s->params;
    tt_adamw_piece *piece = &s->adamw_pieces[s->adamw_piece_count++];
    *piece = (tt_adamw_piece){
        .lo = lo, .hi = hi, .layer = layer, .weights = layer < 0 ? tt_model_trainable_weights_at(s, lo) : NULL};
    piece->segments = tt_clip_segments(t->decay_segment_start, t->decay_segment_decays, t->decay_segments, lo, hi,
                                       &piece->segment_start, &piece->segment_decays);
    if (s->adamw_8bit) piece->tensor_count = tt_adamw_8bit_tensors_in(s->adamw_8bit, lo, hi, &piece->tensors);
}

void tt_adamw_8bit_attach(tt_model_state *s) {
    if (!s->plan.moments_8bit) return;
    s->adamw_8bit = tt_xcalloc(1, sizeof *s->adamw_8bit, "8-bit AdamW layout");
    tt_adamw_8bit_layout_build(s->adamw_8bit, &s->params);
    TT_CHECK(s->adamw_8bit->moment_bytes * 2 == s->sizes.optimizer_state,
             "8-bit AdamW moments of %zu bytes, %zu priced", s->adamw_8bit->moment_bytes * 2, s->sizes.optimizer_state);
}

void tt_adamw_8bit_detach(tt_model_state *s) {
    if (!s->adamw_8bit) return;
    tt_adamw_8bit_layout_free(s->adamw_8bit);
    free(s->adamw_8bit);
    s->adamw_8bit = NULL;
}

void tt_adamw_pieces_build(tt_model_state *s) {
    const int64_t L = s->config.num_layers, K = s->plan.offloaded_weight_layers;
    const int64_t end = s->sizes.optimizer_host_start; /* trainable_numel without optimizer offload */
    const int64_t first = s->sizes.weight_offload_first < end ? s->sizes.weight_offload_first : end;
    s->adamw_pieces = tt_xcalloc((size_t)L + 2, sizeof(tt_adamw_piece), "optimizer pieces");
    add_piece(s, 0, first, -1);
    for (int64_t l = 0; l < K && s->unit_start[l + 2] <= end; l++)
        add_piece(s, s->unit_start[l + 1], s->unit_start[l + 2], l);
    if (s->sizes.weight_offload_end < end) add_piece(s, s->sizes.weight_offload_end, end, -1);
}

void tt_adamw_pieces_free(tt_model_state *s) {
    for (int i = 0; i < s->adamw_piece_count; i++) {
        free(s->adamw_pieces[i].segment_start);
        free(s->adamw_pieces[i].segment_decays);
        free(s->adamw_pieces[i].tensors);
    }
    free(s->adamw_pieces);
    s->adamw_pieces = NULL;
    s->adamw_piece_count = 0;
}

/* One piece's update by the 8-bit AdamW: the fp32 master (the GPU's) or the weights themselves (the CPU's, or bf16
 * parameters without a master), and the compute copy rounded from the master. */
static void update_8bit(tt_model_state *s, const tt_adamw_piece *piece, void *weights,
                        const tt_adamw_8bit_scalars *scalars) {
    TT_CHECK(s->sizes.optimizer_shard_start == 0, "8-bit AdamW with a shard");
    const tt_adamw_8bit_moment m = tt_adamw_8bit_moment_in(s->adamw_8bit, s->adam_m);
    const tt_adamw_8bit_moment v = tt_adamw_8bit_moment_in(s->adamw_8bit, s->adam_v);
    tt_backend_adamw_8bit_update(s->backend, weights, s->master ? s->master + piece->lo : NULL,
                                 tt_model_gradients_at(s, piece->lo), &m, &v, piece->tensors, piece->tensor_count,
                                 scalars);
}

void tt_compute_tier_adamw(tt_model_state *s, const tt_adamw_settings *o, float learning_rate, int64_t step,
                           float grad_scale) {
    const tt_adamw_8bit_scalars scalars_8bit =
        tt_adamw_8bit_scalars_for(learning_rate, o->beta1, o->beta2, o->epsilon, o->weight_decay, step, grad_scale);
    for (int i = 0; i < s->adamw_piece_count; i++) {
        const tt_adamw_piece *piece = &s->adamw_pieces[i];
        void *weights = piece->weights;
        if (piece->layer >= 0) { /* in its buffer, the next offloaded piece's layer prefetched */
            const int64_t next = i + 1 < s->adamw_piece_count ? s->adamw_pieces[i + 1].layer : -1;
            tt_weight_stream_need(&s->weight_offload, piece->layer, next);
            weights = tt_weight_stream_buffer(&s->weight_offload, piece->layer);
        }
        /* the gradients where the residency map puts them; master and moments hold this rank's shard only */
        const size_t state = (size_t)(piece->lo - s->sizes.optimizer_shard_start);
        if (s->adamw_8bit) update_8bit(s, piece, weights, &scalars_8bit);
        else
            tt_backend_adamw_update(
                s->backend, weights, s->master ? s->master + state : NULL, tt_model_gradients_at(s, piece->lo),
                (unsigned char *)s->adam_m + state * s->plan.moment_bytes,
                (unsigned char *)s->adam_v + state * s->plan.moment_bytes, piece->segment_start, piece->segment_decays,
                piece->segments, learning_rate, o->beta1, o->beta2, o->epsilon, o->weight_decay, step, grad_scale);
        if (piece->layer >= 0) tt_weight_stream_store(&s->weight_offload, piece->layer);
    }
}
