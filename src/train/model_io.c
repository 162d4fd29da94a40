/* Moving model state between host memory and the compute tier: weights and AdamW moments
 * cross as fp32 in the flat parameter layout (what checkpoints and Hugging Face files hold),
 * and are converted to the run's formats on the way. Only at load and save time, never in a
 * step, so a host staging buffer per call is fine. */
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/dtype.h"
#include "train/optimizer_offload.h"
#include "train/model_io.h"
#include "train/step.h"

/* Uploads n fp32 host values into a compute-tier buffer of format dtype. */
static void upload_as(const tt_backend *b, void *dst, tt_dtype dtype, const float *host, size_t n) {
    if (n == 0) return;
    if (dtype == TT_F32) {
        b->upload(dst, host, n * sizeof(float));
        return;
    }
    void *staged = tt_xmalloc(tt_mul_size(n, tt_dtype_size(dtype), "a staging buffer"), "a staging buffer");
    tt_convert_from_f32(staged, dtype, host, n);
    b->upload(dst, staged, n * tt_dtype_size(dtype));
    free(staged);
}

static void download_as(const tt_backend *b, float *host, const void *src, tt_dtype dtype, size_t n) {
    if (n == 0) return;
    if (dtype == TT_F32) {
        b->download(host, src, n * sizeof(float));
        return;
    }
    void *staged = tt_xmalloc(tt_mul_size(n, tt_dtype_size(dtype), "a staging buffer"), "a staging buffer");
    b->download(staged, src, n * tt_dtype_size(dtype));
    tt_convert_to_f32(host, staged, dtype, n);
    free(staged);
}

/* The trainable elements whose master weights and moments live on the compute tier: all of them, or with
 * optimizer offload those before the host share. */
static size_t compute_share(const tt_model_state *s) {
    return s->optimizer_offload ? (size_t)s->optimizer_offload->host_start : (size_t)s->params.trainable_numel;
}

/* The trainable weights' compute copy from fp32 host values [trainable_numel]: the compute tier's pieces, and with
 * weight offload the offloaded layers' homes (their buffers' copies are then stale). */
static void set_trainable_weights(tt_model_state *s, const float *host) {
    const size_t n = (size_t)s->params.trainable_numel;
    const size_t first = (size_t)s->sizes.weight_offload_first, end = (size_t)s->sizes.weight_offload_end;
    const tt_dtype dtype = s->plan.precision.activation;
    upload_as(s->backend, s->trainable_weights, dtype, host, first);
    if (end < n) upload_as(s->backend, tt_model_trainable_weights_at(s, (int64_t)end), dtype, host + end, n - end);
    for (int64_t l = 0; l < s->plan.offloaded_weight_layers; l++)
        if (tt_weight_stream_has(&s->weight_offload, l))
            tt_convert_from_f32(s->weight_offload.block_home[l], dtype, host + s->unit_start[l + 1],
                                (size_t)s->weight_offload.block_numel[l]);
    tt_weight_stream_forget(&s->weight_offload);
}

static void get_trainable_weights(const tt_model_state *s, float *host) {
    const size_t n = (size_t)s->params.trainable_numel;
    const size_t first = (size_t)s->sizes.weight_offload_first, end = (size_t)s->sizes.weight_offload_end;
    const tt_dtype dtype = s->plan.precision.activation;
    download_as(s->backend, host, s->trainable_weights, dtype, first);
    if (end < n) download_as(s->backend, host + end, tt_model_trainable_weights_at(s, (int64_t)end), dtype, n - end);
    if (s->plan.offloaded_weight_layers > 0) s->backend->synchronize(); /* the last stores home are done */
    for (int64_t l = 0; l < s->plan.offloaded_weight_layers; l++)
        if (tt_weight_stream_has(&s->weight_offload, l))
            tt_convert_to_f32(host + s->unit_start[l + 1], s->weight_offload.block_home[l], dtype,
                              (size_t)s->weight_offload.block_numel[l]);
}

void tt_model_set_weights(tt_model_state *s, const float *host) {
    const size_t first = (size_t)s->params.trainable_start;
    const size_t share = compute_share(s);
    tt_optimizer_offload *offload = s->optimizer_offload;
    tt_optimizer_offload_finish(offload);
    if (s->master && share) s->backend->upload(s->master, host + first, share * sizeof(float));
    /* the host share's fp32 copy: its master weights (on the CPU backend the compute copy is the same fp32) */
    if (offload && offload->host_numel)
        memcpy(offload->master, host + first + share, (size_t)offload->host_numel * sizeof(float));
    if (s->frozen_host) { /* layer_offloading: the frozen part goes to its pinned copy, then the GPU's */
        tt_convert_from_f32(s->frozen_host, s->plan.precision.activation, host, first);
        tt_weight_stream_reload(&s->stream, &s->params);
    } else {
        upload_as(s->backend, s->weights, s->plan.precision.activation, host, first);
    }
    set_trainable_weights(s, host + first);
}

void tt_model_get_weights(const tt_model_state *s, float *host) {
    const size_t first = (size_t)s->params.trainable_start;
    const size_t share = compute_share(s);
    tt_optimizer_offload *offload = s->optimizer_offload;
    tt_optimizer_offload_finish(offload);
    if (s->frozen_host) { /* layer_offloading: the frozen part from its pinned copy */
        tt_convert_to_f32(host, s->frozen_host, s->plan.precision.activation, first);
        if (!s->plan.precision.master) {
            get_trainable_weights(s, host + first);
            return;
        }
        if (share) s->backend->download(host + first, s->master, share * sizeof(float));
        if (offload && offload->host_numel)
            memcpy(host + first + share, offload->master, (size_t)offload->host_numel * sizeof(float));
        return;
    }
    if (s->plan.precision.master) { /* frozen parameters have no master copy: their compute copy is all there is */
        download_as(s->backend, host, s->weights, s->plan.precision.activation, first);
        if (share) s->backend->download(host + first, s->master, share * sizeof(float));
        if (offload && offload->host_numel)
            memcpy(host + first + share, offload->master, (size_t)offload->host_numel * sizeof(float));
    } else {
        download_as(s->backend, host, s->weights, s->plan.precision.activation, first);
        get_trainable_weights(s, host + first);
    }
}

void tt_model_set_moments(tt_model_state *s, const float *host_m, const float *host_v) {
    const size_t share = compute_share(s);
    tt_optimizer_offload *offload = s->optimizer_offload;
    tt_optimizer_offload_finish(offload);
    if (share) {
        upload_as(s->backend, s->adam_m, s->plan.precision.moment, host_m, share);
        upload_as(s->backend, s->adam_v, s->plan.precision.moment, host_v, share);
    }
    if (offload && offload->host_numel) {
        memcpy(offload->m, host_m + share, (size_t)offload->host_numel * sizeof(float));
        memcpy(offload->v, host_v + share, (size_t)offload->host_numel * sizeof(float));
    }
}

void tt_model_get_moments(const tt_model_state *s, float *host_m, float *host_v) {
    const size_t share = compute_share(s);
    tt_optimizer_offload *offload = s->optimizer_offload;
    tt_optimizer_offload_finish(offload);
    if (share) {
        download_as(s->backend, host_m, s->adam_m, s->plan.precision.moment, share);
        download_as(s->backend, host_v, s->adam_v, s->plan.precision.moment, share);
    }
    if (offload && offload->host_numel) {
        memcpy(host_m + share, offload->m, (size_t)offload->host_numel * sizeof(float));
        memcpy(host_v + share, offload->v, (size_t)offload->host_numel * sizeof(float));
    }
}

void tt_model_set_batch(tt_model_state *s, const int32_t *inputs, const int32_t *targets) {
    const size_t bytes = sizeof(int32_t) * (size_t)(s->plan.micro_batch * s->plan.seq_len);
    s->backend->upload(s->batch_inputs, inputs, bytes);
    s->backend->upload(s->batch_targets, targets, bytes);
    s->batch_has_positions = false;
}

void tt_model_set_positions(tt_model_state *s, const int32_t *positions) {
    TT_CHECK(s->plan.packed_documents, "positions are set for packed documents only (plan.packed_documents)");
    const int64_t B = s->plan.micro_batch, T = s->plan.seq_len, N = B * T, half = s->config.head_dim / 2;
    /* a document starts at position 0 and counts up by one; a sequence starts a document. The attention
     * kernels read i - positions[i] as the first key of query i, so nothing else may pass. */
    for (int64_t n = 0; n < N; n++) {
        const int64_t t = n % T;
        const bool starts = positions[n] == 0, continues = t > 0 && positions[n] == positions[n - 1] + 1;
        TT_CHECK(starts || continues, "token %lld of sequence %lld has position %d after %d; positions restart at 0 "
                 "and count up within a document", (long long)t, (long long)(n / T), positions[n],
                 t > 0 ? positions[n - 1] : -1);
    }
    float *cos_rows = s->host_batch_rope, *sin_rows = s->host_batch_rope + N * half;
    for (int64_t n = 0; n < N; n++) {
        memcpy(cos_rows + n * half, s->host_rope_cos + positions[n] * half, sizeof(float) * (size_t)half);
        memcpy(sin_rows + n * half, s->host_rope_sin + positions[n] * half, sizeof(float) * (size_t)half);
    }
    const size_t rows_bytes = sizeof(float) * (size_t)(N * half);
    s->backend->upload(s->rope_cos, cos_rows, rows_bytes);
    s->backend->upload(s->rope_sin, sin_rows, rows_bytes);
    s->backend->upload(s->batch_positions, positions, sizeof(int32_t) * (size_t)N);
    s->batch_has_positions = true;
}
