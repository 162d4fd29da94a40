/* Moving model state between host memory and the compute tier: weights and AdamW moments
 * cross as fp32 in the flat parameter layout (what checkpoints and Hugging Face files hold),
 * and are converted to the run's formats on the way. Only at load and save time, never in a
 * step, so a host staging buffer per call is fine. */
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/dtype.h"
#include "ops/quant4.h"
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

/* The frozen part of the flat layout ([params.trainable_start] elements) from the host's fp32 into dst in the compute
 * format: converted, except 4-bit weights (QLoRA), whose bytes cross as they are (the host holds them at the same
 * offsets). */
static void frozen_from_host(void *dst, const float *host, const tt_param_table *t, tt_dtype dtype) {
    const size_t elem = tt_dtype_size(dtype);
    tt_convert_from_f32(dst, dtype, host, (size_t)t->trainable_start);
    for (int i = 0; t->quantized && i < t->count; i++) {
        const tt_param_info *p = &t->params[i];
        if (p->quantized)
            memcpy((unsigned char *)dst + (size_t)p->offset * elem, host + p->offset, (size_t)p->storage_numel * elem);
    }
}

static void frozen_to_host(float *host, const void *src, const tt_param_table *t, tt_dtype dtype) {
    const size_t elem = tt_dtype_size(dtype);
    tt_convert_to_f32(host, src, dtype, (size_t)t->trainable_start);
    for (int i = 0; t->quantized && i < t->count; i++) {
        const tt_param_info *p = &t->params[i];
        if (!p->quantized) continue;
        const size_t bytes = (size_t)p->storage_numel * elem;
        memcpy(host + p->offset, (const unsigned char *)src + (size_t)p->offset * elem, bytes);
        memset((unsigned char *)(host + p->offset) + bytes, 0, (size_t)p->storage_numel * sizeof(float) - bytes);
    }
}

static void upload_frozen(const tt_model_state *s, const float *host) {
    const tt_dtype dtype = s->plan.precision.activation;
    if (!s->params.quantized) {
        upload_as(s->backend, s->weights, dtype, host, (size_t)s->params.trainable_start);
        return;
    }
    const size_t bytes = tt_mul_size((size_t)s->params.trainable_start, tt_dtype_size(dtype), "a staging buffer");
    void *staged = tt_xmalloc(bytes ? bytes : 1, "a staging buffer");
    frozen_from_host(staged, host, &s->params, dtype);
    tt_backend_upload(s->backend, s->weights, staged, bytes);
    free(staged);
}

static void download_frozen(const tt_model_state *s, float *host) {
    const tt_dtype dtype = s->plan.precision.activation;
    if (!s->params.quantized) {
        download_as(s->backend, host, s->weights, dtype, (size_t)s->params.trainable_start);
        return;
    }
    const size_t bytes = tt_mul_size((size_t)s->params.trainable_start, tt_dtype_size(dtype), "a staging buffer");
    void *staged = tt_xmalloc(bytes ? bytes : 1, "a staging buffer");
    tt_backend_download(s->backend, staged, s->weights, bytes);
    frozen_to_host(host, staged, &s->params, dtype);
    free(staged);
}

/* The trainable elements whose master weights and moments live on the compute tier, [first, end): all of them, with
 * optimizer offload those before the host share, with ZeRO stage 1 this rank's shard. */
typedef struct compute_share {
    size_t first, end;
} compute_share;

static compute_share compute_share_of(const tt_model_state *s) {
    const size_t end =
        s->optimizer_offload ? (size_t)s->optimizer_offload->host_start : (size_t)s->params.trainable_numel;
    const size_t first = (size_t)s->sizes.optimizer_shard_start, shard_end = (size_t)s->sizes.optimizer_shard_end;
    return (compute_share){.first = first, .end = end < shard_end ? end : shard_end};
}

/* ZeRO stage 1: the other ranks' shards of a host array in the trainable layout (a collective: every rank calls the
 * same getter at the same point) */
static void gather_shards(const tt_model_state *s, float *host) {
    if (s->shards) s->shards->gather_host(s->shards->ctx, host);
}

/* The trainable weights' compute copy from fp32 host values [trainable_numel]: the compute tier's pieces, and with
 * weight offload the offloaded layers' homes (their buffers' copies are then stale). */
/* zero_stage 3: the units whose weights live here (this rank's shard, the embedding, the head), each at its place */
static void move_resident_weights(const tt_model_state *s, float *host, bool upload) {
    const tt_dtype dtype = s->plan.precision.activation;
    for (int64_t u = 0; u < s->residency.units; u++) {
        const tt_unit_residency *r = &s->residency.unit[u];
        if (r->end == r->start || r->weights_slot >= 0) continue;
        void *at = tt_model_trainable_weights_at(s, r->start);
        if (upload) upload_as(s->backend, at, dtype, host + r->start, (size_t)(r->end - r->start));
        else download_as(s->backend, host + r->start, at, dtype, (size_t)(r->end - r->start));
    }
}

static void set_trainable_weights(tt_model_state *s, const float *host) {
    if (tt_plan_shards_weights(&s->plan)) {
        move_resident_weights(s, (float *)host, true);
        return;
    }
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
    if (tt_plan_shards_weights(&s->plan)) { /* the others' layers from their owners */
        move_resident_weights(s, host, false);
        gather_shards(s, host);
        return;
    }
    const size_t n = (size_t)s->params.trainable_numel;
    const size_t first = (size_t)s->sizes.weight_offload_first, end = (size_t)s->sizes.weight_offload_end;
    const tt_dtype dtype = s->plan.precision.activation;
    download_as(s->backend, host, s->trainable_weights, dtype, first);
    if (end < n) download_as(s->backend, host + end, tt_model_trainable_weights_at(s, (int64_t)end), dtype, n - end);
    if (s->plan.offloaded_weight_layers > 0) tt_weight_stream_wait_stored(&s->weight_offload); /* the stores home */
    for (int64_t l = 0; l < s->plan.offloaded_weight_layers; l++)
        if (tt_weight_stream_has(&s->weight_offload, l))
            tt_convert_to_f32(host + s->unit_start[l + 1], s->weight_offload.block_home[l], dtype,
                              (size_t)s->weight_offload.block_numel[l]);
}

void tt_model_set_trainable_weights(tt_model_state *s, const float *host) {
    const compute_share share = compute_share_of(s);
    tt_optimizer_offload *offload = s->optimizer_offload;
    tt_optimizer_offload_finish(offload);
    if (s->master && share.end > share.first)
        tt_backend_upload(s->backend, s->master, host + share.first, (share.end - share.first) * sizeof(float));
    /* the host share's fp32 copy: its master weights (on the CPU backend the compute copy is the same fp32) */
    if (offload && offload->host_numel)
        memcpy(offload->master, host + share.end, (size_t)offload->host_numel * sizeof(float));
    set_trainable_weights(s, host);
}

void tt_model_get_trainable_weights(const tt_model_state *s, float *host) {
    const compute_share share = compute_share_of(s);
    tt_optimizer_offload *offload = s->optimizer_offload;
    tt_optimizer_offload_finish(offload);
    if (!s->plan.precision.master) { /* the compute copy is all there is (every rank's, after the update) */
        get_trainable_weights(s, host);
        return;
    }
    if (share.end > share.first)
        tt_backend_download(s->backend, host + share.first, s->master, (share.end - share.first) * sizeof(float));
    if (offload && offload->host_numel)
        memcpy(host + share.end, offload->master, (size_t)offload->host_numel * sizeof(float));
    gather_shards(s, host);
}

void tt_model_set_weights(tt_model_state *s, const float *host) {
    if (s->frozen_host) { /* layer_offloading: the frozen part goes to its pinned copy, then the GPU's */
        frozen_from_host(s->frozen_host, host, &s->params, s->plan.precision.activation);
        tt_weight_stream_reload(&s->stream, &s->params);
    } else {
        upload_frozen(s, host);
    }
    tt_model_set_trainable_weights(s, host + s->params.trainable_start);
}

void tt_model_get_frozen_weights(const tt_model_state *s, float *host) {
    if (s->frozen_host) /* layer_offloading: the frozen part from its pinned copy */
        frozen_to_host(host, s->frozen_host, &s->params, s->plan.precision.activation);
    else download_frozen(s, host);
}

void tt_model_get_weights(const tt_model_state *s, float *host) {
    tt_model_get_frozen_weights(s, host);
    tt_model_get_trainable_weights(s, host + s->params.trainable_start);
}

/* One frozen parameter's stored bytes at byte offset `at` of the frozen part: into layer_offloading's pinned copy, or
 * onto the compute tier. */
static void put_frozen(tt_model_loader *loader, size_t at, const void *bytes, size_t count) {
    tt_model_state *s = loader->state;
    if (s->frozen_host) memcpy((unsigned char *)s->frozen_host + at, bytes, count);
    else tt_backend_upload(s->backend, (unsigned char *)s->weights + at, bytes, count);
}

static void loader_values(void *ctx, const tt_param_info *p, int64_t first, int64_t count, const float *values) {
    tt_model_loader *loader = ctx;
    const tt_model_state *s = loader->state;
    if (p->trainable) {
        memcpy(loader->trainable + (p->offset - s->params.trainable_start) + first, values,
               sizeof(float) * (size_t)count);
        return;
    }
    const tt_dtype dtype = s->plan.precision.activation;
    const size_t elem = tt_dtype_size(dtype), at = (size_t)(p->offset + first) * elem;
    if (dtype == TT_F32) {
        put_frozen(loader, at, values, sizeof(float) * (size_t)count);
        return;
    }
    const size_t bytes = (size_t)count * elem;
    if (bytes > loader->staging_bytes) {
        free(loader->staging);
        loader->staging = tt_xmalloc(bytes, "a piece of frozen weights");
        loader->staging_bytes = bytes;
    }
    /* converted by the threads in runs (each element on its own: the bits of one conversion) */
    const int64_t run = (int64_t)1 << 16;
#pragma omp parallel for schedule(static) if (count > run)
    for (int64_t k = 0; k < count; k += run)
        tt_convert_from_f32((unsigned char *)loader->staging + (size_t)k * elem, dtype, values + k,
                            (size_t)(count - k < run ? count - k : run));
    put_frozen(loader, at, loader->staging, bytes);
}

static void loader_quantized(void *ctx, const tt_param_info *p, const void *bytes) {
    tt_model_loader *loader = ctx;
    const tt_model_state *s = loader->state;
    const size_t elem = tt_dtype_size(s->plan.precision.activation);
    const size_t count = tt_quant4_layout_of(p->numel, &s->params.quant_format).bytes;
    TT_CHECK(!p->trainable && count == (size_t)p->storage_numel * elem, "4-bit weight %s in %lld elements", p->name,
             (long long)p->storage_numel);
    put_frozen(loader, (size_t)p->offset * elem, bytes, count);
}

tt_weight_sink tt_model_loader_begin(tt_model_loader *loader, tt_model_state *s, float *trainable) {
    memset(loader, 0, sizeof(*loader));
    loader->state = s;
    loader->trainable = trainable;
    return (tt_weight_sink){.values = loader_values, .quantized = loader_quantized, .ctx = loader};
}

void tt_model_loader_end(tt_model_loader *loader) {
    tt_model_state *s = loader->state;
    if (s->frozen_host) tt_weight_stream_reload(&s->stream, &s->params); /* the resident part up, the rest streams */
    tt_backend_synchronize(s->backend);
    free(loader->staging);
    memset(loader, 0, sizeof(*loader));
}

void tt_model_set_moments(tt_model_state *s, const float *host_m, const float *host_v) {
    TT_CHECK(!s->adamw_8bit,
             "fp32 moments of the 8-bit AdamW (its state crosses as it is: train/adamw_8bit_checkpoint.h)");
    const compute_share share = compute_share_of(s);
    const size_t n = share.end - share.first;
    tt_optimizer_offload *offload = s->optimizer_offload;
    tt_optimizer_offload_finish(offload);
    if (n) {
        upload_as(s->backend, s->adam_m, s->plan.precision.moment, host_m + share.first, n);
        upload_as(s->backend, s->adam_v, s->plan.precision.moment, host_v + share.first, n);
    }
    if (offload && offload->host_numel) {
        memcpy(offload->m, host_m + share.end, (size_t)offload->host_numel * sizeof(float));
        memcpy(offload->v, host_v + share.end, (size_t)offload->host_numel * sizeof(float));
    }
}

void tt_model_get_moments(const tt_model_state *s, float *host_m, float *host_v) {
    TT_CHECK(!s->adamw_8bit,
             "fp32 moments of the 8-bit AdamW (its state crosses as it is: train/adamw_8bit_checkpoint.h)");
    const compute_share share = compute_share_of(s);
    const size_t n = share.end - share.first;
    tt_optimizer_offload *offload = s->optimizer_offload;
    tt_optimizer_offload_finish(offload);
    if (n) {
        download_as(s->backend, host_m + share.first, s->adam_m, s->plan.precision.moment, n);
        download_as(s->backend, host_v + share.first, s->adam_v, s->plan.precision.moment, n);
    }
    if (offload && offload->host_numel) {
        memcpy(host_m + share.end, offload->m, (size_t)offload->host_numel * sizeof(float));
        memcpy(host_v + share.end, offload->v, (size_t)offload->host_numel * sizeof(float));
    }
    gather_shards(s, host_m);
    gather_shards(s, host_v);
}

/* [*lo, *hi): where [first, first + count) meets [begin, end); false when they do not meet. */
static bool overlap(int64_t first, int64_t count, int64_t begin, int64_t end, int64_t *lo, int64_t *hi) {
    *lo = first > begin ? first : begin;
    *hi = first + count < end ? first + count : end;
    return *lo < *hi;
}

bool tt_model_reads_trainable_ranges(const tt_model_state *s) {
    /* zero_stage 3's compute copy (no master copy) lives in its owners' slots: gathered whole */
    if (tt_plan_shards_weights(&s->plan) && !s->plan.precision.master) return false;
    return (s->shards != NULL) == tt_plan_shards_optimizer(&s->plan);
}

void tt_model_get_frozen_range(const tt_model_state *s, int64_t first, int64_t count, float *out) {
    TT_CHECK(!s->params.quantized,
             "a range of 4-bit frozen weights (they cross as bytes: tt_model_get_frozen_weights)");
    TT_CHECK(first >= 0 && count >= 0 && first + count <= s->params.trainable_start,
             "frozen elements [%lld, %lld) of %lld", (long long)first, (long long)(first + count),
             (long long)s->params.trainable_start);
    const tt_dtype dtype = s->plan.precision.activation;
    const size_t at = (size_t)first * tt_dtype_size(dtype);
    if (s->frozen_host) /* layer_offloading: its pinned copy */
        tt_convert_to_f32(out, (const unsigned char *)s->frozen_host + at, dtype, (size_t)count);
    else download_as(s->backend, out, (const unsigned char *)s->weights + at, dtype, (size_t)count);
}

/* The compute copy's [first, first + count) (get_trainable_weights' pieces: before the weight-offloaded layers, their
 * homes, after them). */
static void get_compute_copy_range(const tt_model_state *s, int64_t first, int64_t count, float *out) {
    const int64_t n = s->params.trainable_numel;
    const int64_t offloaded_first = s->sizes.weight_offload_first, offloaded_end = s->sizes.weight_offload_end;
    const tt_dtype dtype = s->plan.precision.activation;
    const size_t elem = tt_dtype_size(dtype);
    int64_t lo, hi;
    if (overlap(first, count, 0, offloaded_first, &lo, &hi))
        download_as(s->backend, out + (lo - first), (const unsigned char *)s->trainable_weights + (size_t)lo * elem,
                    dtype, (size_t)(hi - lo));
    if (offloaded_end < n && overlap(first, count, offloaded_end, n, &lo, &hi))
        download_as(s->backend, out + (lo - first),
                    (const unsigned char *)tt_model_trainable_weights_at(s, offloaded_end) +
                        (size_t)(lo - offloaded_end) * elem,
                    dtype, (size_t)(hi - lo));
    if (s->plan.offloaded_weight_layers > 0) tt_weight_stream_wait_stored(&s->weight_offload);
    for (int64_t l = 0; l < s->plan.offloaded_weight_layers; l++) {
        if (!tt_weight_stream_has(&s->weight_offload, l)) continue;
        const int64_t start = s->unit_start[l + 1];
        if (overlap(first, count, start, start + s->weight_offload.block_numel[l], &lo, &hi))
            tt_convert_to_f32(out + (lo - first),
                              (const unsigned char *)s->weight_offload.block_home[l] + (size_t)(lo - start) * elem,
                              dtype, (size_t)(hi - lo));
    }
}

/* This rank's own values at [first, first + count): the master copy or the moments of its compute share, and of the
 * optimizer offload's host share after it. */
static void get_own_range(const tt_model_state *s, tt_trainable_values what, int64_t first, int64_t count, float *out) {
    TT_CHECK(what == TT_TRAINABLE_WEIGHTS || !s->adamw_8bit,
             "fp32 moments of the 8-bit AdamW (its state crosses as it is: train/adamw_8bit_checkpoint.h)");
    const tt_optimizer_offload *offload = s->optimizer_offload;
    const compute_share share = compute_share_of(s);
    const void *device_copy = what == TT_TRAINABLE_WEIGHTS    ? s->master
                              : what == TT_TRAINABLE_MOMENT_M ? s->adam_m
                                                              : s->adam_v;
    const tt_dtype dtype = what == TT_TRAINABLE_WEIGHTS ? TT_F32 : s->plan.precision.moment;
    int64_t lo, hi;
    if (overlap(first, count, (int64_t)share.first, (int64_t)share.end, &lo, &hi))
        download_as(s->backend, out + (lo - first),
                    (const unsigned char *)device_copy + (size_t)(lo - (int64_t)share.first) * tt_dtype_size(dtype),
                    dtype, (size_t)(hi - lo));
    if (offload && offload->host_numel &&
        overlap(first, count, (int64_t)share.end, (int64_t)share.end + offload->host_numel, &lo, &hi)) {
        const float *host_copy = what == TT_TRAINABLE_WEIGHTS    ? offload->master
                                 : what == TT_TRAINABLE_MOMENT_M ? offload->m
                                                                 : offload->v;
        memcpy(out + (lo - first), host_copy + (lo - (int64_t)share.end), (size_t)(hi - lo) * sizeof(float));
    }
}

void tt_model_get_trainable_range(const tt_model_state *s, tt_trainable_values what, int64_t first, int64_t count,
                                  float *out) {
    TT_CHECK(tt_model_reads_trainable_ranges(s), "a range of zero_stage 3's compute copy (gathered whole)");
    TT_CHECK(first >= 0 && count >= 0 && first + count <= s->params.trainable_numel,
             "trainable elements [%lld, %lld) of %lld", (long long)first, (long long)(first + count),
             (long long)s->params.trainable_numel);
    tt_optimizer_offload *offload = s->optimizer_offload;
    tt_optimizer_offload_finish(offload);
    if (what == TT_TRAINABLE_WEIGHTS && !s->plan.precision.master) {
        get_compute_copy_range(s, first, count, out);
        return;
    }
    /* zero_stage 1 to 3: the tensor's unit is one rank's shard; its owner reads it and hands it to every rank */
    if (s->shards) {
        if (s->shards->owns(s->shards->ctx, first)) get_own_range(s, what, first, count, out);
        s->shards->share_host_range(s->shards->ctx, out, first, count);
        return;
    }
    get_own_range(s, what, first, count, out);
}

void tt_model_set_batch(tt_model_state *s, const int32_t *inputs, const int32_t *targets) {
    const int64_t T = s->plan.seq_len, whole = tt_plan_sequence_len(&s->plan);
    if (whole == T) {
        const size_t bytes = sizeof(int32_t) * (size_t)(s->plan.micro_batch * T);
        tt_backend_upload(s->backend, s->batch_inputs, inputs, bytes);
        tt_backend_upload(s->backend, s->batch_targets, targets, bytes);
    } else { /* sequence parallel: this rank's tokens of each sequence */
        const int64_t first = s->plan.sequence_parallel_rank * T;
        for (int64_t b = 0; b < s->plan.micro_batch; b++) {
            tt_backend_upload(s->backend, s->batch_inputs + b * T, inputs + b * whole + first,
                              sizeof(int32_t) * (size_t)T);
            tt_backend_upload(s->backend, s->batch_targets + b * T, targets + b * whole + first,
                              sizeof(int32_t) * (size_t)T);
        }
    }
    s->batch_has_positions = false;
}

void tt_model_set_positions(tt_model_state *s, const int32_t *positions) {
    TT_CHECK(s->plan.packed_documents, "positions are set for packed documents only (plan.packed_documents)");
    /* the whole sequences' positions (the attention's document mask); with sequence parallel this rank's tokens
     * take their RoPE rows from their share of them */
    const int64_t B = s->plan.micro_batch, T = tt_plan_sequence_len(&s->plan), N = B * T;
    const int64_t half = tt_model_rotary_dim(&s->config) / 2;
    const int64_t local = s->plan.seq_len, first = s->plan.sequence_parallel_rank * local, rows = B * local;
    /* a document starts at position 0 and counts up by one; a sequence starts a document. The attention
     * kernels read i - positions[i] as the first key of query i, so nothing else may pass. */
    for (int64_t n = 0; n < N; n++) {
        const int64_t t = n % T;
        const bool starts = positions[n] == 0, continues = t > 0 && positions[n] == positions[n - 1] + 1;
        TT_CHECK(starts || continues,
                 "token %lld of sequence %lld has position %d after %d; positions restart at 0 "
                 "and count up within a document",
                 (long long)t, (long long)(n / T), positions[n], t > 0 ? positions[n - 1] : -1);
    }
    /* LongRoPE switches to its long factors where the micro-batch's largest position reaches past the original length
     * (transformers' rule for the whole batch) */
    int32_t largest = 0;
    for (int64_t n = 0; n < N; n++)
        if (positions[n] > largest) largest = positions[n];
    const bool long_factors = s->host_rope_long_cos && tt_rope_long_factors(&s->config, (int64_t)largest + 1);
    float *cos_rows = s->host_batch_rope, *sin_rows = s->host_batch_rope + rows * half;
    const size_t rows_bytes = sizeof(float) * (size_t)(rows * half);
    for (int k = 0; k < s->sizes.rope_tables; k++) {
        const bool long_table = long_factors && k == TT_ROPE_TABLE_GLOBAL;
        const float *host_cos = long_table ? s->host_rope_long_cos : s->host_rope_cos[k];
        const float *host_sin = long_table ? s->host_rope_long_sin : s->host_rope_sin[k];
        for (int64_t n = 0; n < rows; n++) {
            const int32_t p = positions[(n / local) * T + first + n % local];
            memcpy(cos_rows + n * half, host_cos + p * half, sizeof(float) * (size_t)half);
            memcpy(sin_rows + n * half, host_sin + p * half, sizeof(float) * (size_t)half);
        }
        tt_backend_upload(s->backend, s->rope_cos[k], cos_rows, rows_bytes);
        tt_backend_upload(s->backend, s->rope_sin[k], sin_rows, rows_bytes);
    }
    tt_backend_upload(s->backend, s->batch_positions, positions, sizeof(int32_t) * (size_t)N);
    s->batch_has_positions = true;
}
