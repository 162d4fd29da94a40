/* The CPU backend: fp32 reference kernels (ops_cpu_f32.c) on pageable host memory.
 * Each entry is a thin wrapper from the untyped table signature to the typed _f32 kernel. */
#include <cblas.h>
#include <math.h>
#include <string.h>

#include "core/arena.h"
#include "core/check.h"
#include "core/trace.h"
#include "model/quant4.h"
#include "ops/backend.h"
#include "ops/cpu/ops_cpu.h"

static void cpu_copy(void *dst, const void *src, size_t bytes) {
    if (bytes) memcpy(dst, src, bytes);
}

static void cpu_zero(void *dst, size_t bytes) {
    if (bytes) memset(dst, 0, bytes);
}

static void cpu_synchronize(void) {}

static size_t cpu_bytes_outside_arenas(void) { return 0; }

static void cpu_upload(void *dst, const void *host_src, size_t bytes) { cpu_copy(dst, host_src, bytes); }

static void cpu_download(void *host_dst, const void *src, size_t bytes) { cpu_copy(host_dst, src, bytes); }

/* The copy engine on the CPU: every copy is done when copy_async returns, so the waits have
 * nothing to wait for and the step program's schedule runs the same as on the GPU. */
static uint64_t copies_issued;
static double copy_start[TT_TIMELINE_WINDOW], copy_end[TT_TIMELINE_WINDOW]; /* host clock, per ticket */
static size_t copied_to_host, copied_to_device;

static uint64_t cpu_copy_async(void *dst, const void *src, size_t bytes, bool to_host, uint64_t after) {
    TT_CHECK(after <= copies_issued, "copy ticket %llu not issued yet", (unsigned long long)after);
    const uint64_t ticket = copies_issued + 1;
    copy_start[ticket % TT_TIMELINE_WINDOW] = tt_monotonic_seconds();
    cpu_copy(dst, src, bytes);
    copy_end[ticket % TT_TIMELINE_WINDOW] = tt_monotonic_seconds();
    *(to_host ? &copied_to_host : &copied_to_device) += bytes;
    return copies_issued = ticket;
}

static void cpu_copy_wait(uint64_t ticket) {
    TT_CHECK(ticket <= copies_issued, "copy ticket %llu not issued yet", (unsigned long long)ticket);
}

static bool cpu_copy_done(uint64_t ticket) {
    cpu_copy_wait(ticket);
    return true;
}

/* The CPU's timeline is the host clock: ops are done when they return. */
static double marks[TT_TIMELINE_WINDOW];
static uint64_t marks_made;

static uint64_t cpu_timestamp(void) {
    marks[++marks_made % TT_TIMELINE_WINDOW] = tt_monotonic_seconds();
    return marks_made;
}

static double cpu_timestamp_seconds(uint64_t id) {
    return id && id <= marks_made && marks_made - id < TT_TIMELINE_WINDOW ? marks[id % TT_TIMELINE_WINDOW] : NAN;
}

static bool cpu_copy_span(uint64_t ticket, double *start, double *end) {
    if (!ticket || ticket > copies_issued || copies_issued - ticket >= TT_TIMELINE_WINDOW) return false;
    *start = copy_start[ticket % TT_TIMELINE_WINDOW];
    *end = copy_end[ticket % TT_TIMELINE_WINDOW];
    return true;
}

static void cpu_copy_set_delay(unsigned max_us) { (void)max_us; /* nothing runs concurrently to race */ }

static void cpu_copy_stats(size_t *to_host, size_t *to_device, double *copy_seconds, double *exposed_seconds) {
    *to_host = copied_to_host;
    *to_device = copied_to_device;
    *copy_seconds = 0; /* not timed: the copies are memcpy inside the step */
    *exposed_seconds = 0;
}

static void cpu_configure(const tt_precision *p, tt_attention_kind attention, size_t attention_workspace_limit) {
    (void)attention_workspace_limit; /* one attention, no workspace to bound */
    /* The CPU backend is the fp32 oracle; device selection keeps other settings away. */
    TT_CHECK(p->activation == TT_F32 && p->gradient == TT_F32 && p->moment == TT_F32 && !p->master,
             "the CPU backend computes in fp32 only");
    TT_CHECK(attention == TT_ATTENTION_AUTO || attention == TT_ATTENTION_SIMPLE, "the CPU backend has one attention");
}

static void cpu_embedding_forward(void *out, const int32_t *ids, const void *table, int64_t N, int64_t D) {
    tt_cpu_embedding_forward_f32(out, ids, table, N, D);
}

static void cpu_embedding_backward(void *dtable, const int32_t *ids, const void *dout, int64_t N, int64_t D) {
    tt_cpu_embedding_backward_f32(dtable, ids, dout, N, D);
}

static void cpu_rmsnorm_forward(void *out, float *rstd, const void *x, const void *w, int64_t R, int64_t C,
                                double eps) {
    tt_cpu_rmsnorm_forward_f32(out, rstd, x, w, R, C, eps);
}

static void cpu_rmsnorm_backward(void *dx, void *dw, const void *dout, const void *x, const void *w,
                                 const float *rstd, int64_t R, int64_t C) {
    tt_cpu_rmsnorm_backward_f32(dx, dw, dout, x, w, rstd, R, C);
}

static void cpu_linear_forward(void *y, const void *x, const void *W, const void *b, const void *residual,
                               int64_t N, int64_t in, int64_t out) {
    if (residual && residual != y) memcpy(y, residual, sizeof(float) * (size_t)(N * out));
    tt_cpu_linear_forward_f32(y, x, W, b, N, in, out, residual != NULL);
}

static void cpu_linear_backward(void *dx, void *dW, void *db, const void *dy, const void *x, const void *W,
                                int64_t N, int64_t in, int64_t out, bool accumulate_dx) {
    tt_cpu_linear_backward_f32(dx, dW, db, dy, x, W, N, in, out, accumulate_dx);
}

static void cpu_rope_forward(void *x, const float *cos_t, const float *sin_t, int64_t B, int64_t T, int64_t H,
                             int64_t hd) {
    tt_cpu_rope_forward_f32(x, cos_t, sin_t, B, T, H, hd);
}

static void cpu_rope_backward(void *dx, const float *cos_t, const float *sin_t, int64_t B, int64_t T, int64_t H,
                              int64_t hd) {
    tt_cpu_rope_backward_f32(dx, cos_t, sin_t, B, T, H, hd);
}

static void cpu_attention_forward(void *out, float *lse, const void *q, const void *k, const void *v,
                                  const tt_attention_shape *shape) {
    tt_cpu_attention_forward_f32(out, lse, q, k, v, shape);
}

static void cpu_attention_backward(void *dq, void *dk, void *dv, const void *dout, const void *out,
                                   const float *lse, const void *q, const void *k, const void *v,
                                   const tt_attention_shape *shape, void *workspace, void *spare,
                                   size_t spare_bytes) {
    (void)spare;
    (void)spare_bytes;
    (void)workspace; /* the CPU kernel keeps a row of scores per thread in the op scratch */
    tt_cpu_attention_backward_f32(dq, dk, dv, dout, out, lse, q, k, v, shape);
}

static size_t cpu_attention_workspace_bytes(const tt_attention_shape *shape) {
    (void)shape;
    return 0;
}

static void cpu_swiglu_forward(void *h, const void *gate, const void *up, int64_t n) {
    tt_cpu_swiglu_forward_f32(h, gate, up, n);
}

static void cpu_swiglu_backward(void *dgate, void *dup, const void *dh, const void *gate, const void *up,
                                int64_t n) {
    tt_cpu_swiglu_backward_f32(dgate, dup, dh, gate, up, n);
}

static void cpu_add(void *out, const void *a, const void *b, int64_t n) { tt_cpu_add_f32(out, a, b, n); }
/* The oracle's dequantization: model/quant4.c, one block after another (the same order every time). */
static void cpu_dequantize_4bit(void *out, const void *quantized, int64_t numel, const tt_quant4_format *format) {
    tt_quant4_dequantize(out, quantized, numel, format);
}

static void cpu_dropout_scale(void *out, const void *x, int64_t n, float multiplier, uint32_t drop_threshold,
                              uint64_t seed) {
    tt_cpu_dropout_scale_f32(out, x, n, multiplier, drop_threshold, seed);
}

static double cpu_lm_head_loss(void *dxn, void *dW, const void *xn, const void *W, const int32_t *targets,
                               int64_t N, int64_t D, int64_t V, int64_t chunk, void *logits, double scale,
                               int64_t *count) {
    return tt_cpu_lm_head_loss_f32(dxn, dW, xn, W, targets, N, D, V, chunk, logits, scale, count);
}

static void cpu_sum_squares(double *out, const void *x, int64_t n) { *out = tt_cpu_sum_squares_f32(x, n); }

static void cpu_adamw_update(void *weights, float *master, const void *g, void *m, void *v,
                             const int64_t *segment_start, const unsigned char *segment_decays, int segments,
                             float lr, float beta1, float beta2, float eps, float weight_decay, int64_t step,
                             float grad_scale) {
    TT_CHECK(master == NULL, "the CPU backend keeps no master copy");
    for (int s = 0; s < segments; s++) {
        const int64_t at = segment_start[s], n = segment_start[s + 1] - at;
        tt_cpu_adamw_update_f32((float *)weights + at, (const float *)g + at, (float *)m + at, (float *)v + at, n, lr,
                                beta1, beta2, eps, segment_decays[s] ? weight_decay : 0.0f, step, grad_scale);
    }
}

static const tt_backend cpu_backend = {
    .name = "cpu",
    .compute_tier = TT_TIER_HOST,
    .block_alloc = tt_host_block_alloc,
    .block_free = tt_host_block_free,
    .copy = cpu_copy,
    .pinned_alloc = tt_host_block_alloc,
    .pinned_free = tt_host_block_free,
    .zero = cpu_zero,
    .synchronize = cpu_synchronize,
    .bytes_outside_arenas = cpu_bytes_outside_arenas,
    .upload = cpu_upload,
    .download = cpu_download,
    .copy_async = cpu_copy_async,
    .copy_done = cpu_copy_done,
    .copy_wait = cpu_copy_wait,
    .copy_host_wait = cpu_copy_wait,
    .copy_set_delay = cpu_copy_set_delay,
    .copy_stats = cpu_copy_stats,
    .timestamp = cpu_timestamp,
    .timestamp_seconds = cpu_timestamp_seconds,
    .copy_span = cpu_copy_span,
    .configure = cpu_configure,
    .scratch_bytes = tt_cpu_scratch_bytes,
    .attention_workspace_bytes = cpu_attention_workspace_bytes,
    .set_scratch = tt_cpu_scratch_set,
    .embedding_forward = cpu_embedding_forward,
    .embedding_backward = cpu_embedding_backward,
    .rmsnorm_forward = cpu_rmsnorm_forward,
    .rmsnorm_backward = cpu_rmsnorm_backward,
    .linear_forward = cpu_linear_forward,
    .linear_backward = cpu_linear_backward,
    .rope_forward = cpu_rope_forward,
    .rope_backward = cpu_rope_backward,
    .attention_forward = cpu_attention_forward,
    .attention_backward = cpu_attention_backward,
    .swiglu_forward = cpu_swiglu_forward,
    .swiglu_backward = cpu_swiglu_backward,
    .add = cpu_add,
    .dequantize_4bit = cpu_dequantize_4bit,
    .dropout_scale = cpu_dropout_scale,
    .lm_head_loss = cpu_lm_head_loss,
    .sum_squares = cpu_sum_squares,
    .adamw_update = cpu_adamw_update,
};

const tt_backend *tt_backend_cpu(void) {
    /* GEMMs are tiled over OpenMP threads (ops_cpu_impl.h), each tile one single-threaded BLAS
     * call: OpenBLAS's own thread pool would compete with OpenMP's for the same cores. */
    openblas_set_num_threads(1);
    return &cpu_backend;
}
