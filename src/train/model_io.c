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
        tt_backend_upload(b, dst, host, n * sizeof(float));
        return;
    }
    void *staged = tt_xmalloc(tt_mul_size(n, tt_dtype_size(dtype), "a staging buffer"), "a staging buffer");
    tt_convert_from_f32(staged, dtype, host, n);
    tt_backend_upload(b, dst, staged, n * tt_dtype_size(dtype));
    free(staged);
}

static void download_as(const tt_backend *b, float *host, const void *src, tt_dtype dtype, size_t n) {
    if (n == 0) return;
    if (dtype == TT_F32) {
        tt_backend_download(b, host, src, n * sizeof(float));
        return;
    }
    void *staged = tt_xmalloc(tt_mul_size(n, tt_dtype_size(dtype), "a staging buffer"), "a staging buffer");
    tt_backend_download(b, staged, src, n * tt_dtype_size(dtype));
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
    if (s->plan.offloaded_weight_layers > 0) tt_backend_synchronize(s->backend); /* the last stores home are done */
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
    if (s->master && share) tt_backend_upload(s->backend, s->master, host + first, share * sizeof(float));
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
        if (share) tt_backend_download(s->backend, host + first, s->master, share * sizeof(float));
        if (offload && offload->host_numel)
            memcpy(host + first + share, offload->master, (size_t)offload->host_numel * sizeof(float));
        return;
    }
    if (s->plan.precision.master) { /* frozen parameters have no master copy: their compute copy is all there is */
        download_as(s->backend, host, s->weights, s->plan.precision.activation, first);
        if (share) tt_backend_download(s->backend, host + first, s->master, share * sizeof(float));
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
    tt_backend_upload(s->backend, s->batch_inputs, inputs, bytes);
    tt_backend_upload(s->backend, s->batch_targets, targets, bytes);
}
