/* The CPU backend: fp32 reference kernels (ops_cpu_f32.c) on pageable host memory, on the
 * context's thread count. Each entry is a thin wrapper from the untyped table signature to the
 * typed _f32 kernel. */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "core/arena.h"
#include "core/check.h"
#include "core/trace.h"
#include "model/quant4.h"
#include "ops/backend.h"
#include "ops/cpu/adamw_8bit_cpu.h"
#include "ops/cpu/moe_cpu.h"
#include "ops/cpu/ops_cpu.h"

typedef struct cpu_backend {
    int threads;            /* OpenMP threads of the ops; 0: the calling thread's OpenMP default */
    tt_cpu_scratch scratch; /* the op scratch prepare handed over (none: ops allocate) */
    /* The copy engine: every copy is done when copy_async returns, so the waits have nothing to
     * wait for and the step program's schedule runs the same as on the GPU. */
    uint64_t copies_issued;
    double copy_start[TT_TIMELINE_WINDOW], copy_end[TT_TIMELINE_WINDOW]; /* host clock, per ticket */
    size_t copied_to_host, copied_to_device;
    /* The timeline is the host clock: ops are done when they return. */
    double marks[TT_TIMELINE_WINDOW];
    uint64_t marks_made;
    /* The side queue: its ops are done when they return as well; the tickets and the nesting are checked so that
     * a misuse shows on the CPU too. */
    uint64_t side_tickets;
    bool in_side;
    tt_adamw_8bit_maps adamw_8bit_maps; /* bitsandbytes' quantization maps, built once */
} cpu_backend;

/* OpenMP's thread count is a setting of the calling thread: an op sets the backend's for its
 * parallel regions and gives the caller's back after, so that two backends (and the caller's own
 * parallel code) each keep theirs. */
static int enter_threads(const cpu_backend *cpu) {
    const int outer = omp_get_max_threads();
    if (cpu->threads > 0 && cpu->threads != outer) omp_set_num_threads(cpu->threads);
    return outer;
}

static void leave_threads(const cpu_backend *cpu, int outer) {
    if (cpu->threads > 0 && cpu->threads != outer) omp_set_num_threads(outer);
}

/* The body of each op: the statement after ctx, on the backend's threads, with `cpu` its context. */
#define ON_THREADS(ctx, ...)                           \
    do {                                               \
        cpu_backend *cpu = ctx;                        \
        const int outer_threads_ = enter_threads(cpu); \
        __VA_ARGS__;                                   \
        leave_threads(cpu, outer_threads_);            \
    } while (0)

static void cpu_copy(void *ctx, void *dst, const void *src, size_t bytes) {
    (void)ctx;
    if (bytes) memcpy(dst, src, bytes);
}

static void cpu_copy_2d(void *ctx, void *dst, size_t dst_pitch, const void *src, size_t src_pitch, size_t width,
                        size_t rows) {
    (void)ctx;
    for (size_t r = 0; r < rows && width; r++)
        memcpy((unsigned char *)dst + r * dst_pitch, (const unsigned char *)src + r * src_pitch, width);
}

static void cpu_zero(void *ctx, void *dst, size_t bytes) {
    (void)ctx;
    if (bytes) memset(dst, 0, bytes);
}

static void cpu_synchronize(void *ctx) { (void)ctx; }

static void cpu_side_begin(void *ctx) {
    cpu_backend *cpu = ctx;
    TT_CHECK(!cpu->in_side, "side_begin inside the side queue");
    cpu->in_side = true;
}

static uint64_t cpu_side_end(void *ctx) {
    cpu_backend *cpu = ctx;
    TT_CHECK(cpu->in_side, "side_end without side_begin");
    cpu->in_side = false;
    return ++cpu->side_tickets;
}

static void cpu_side_wait(void *ctx, uint64_t ticket) {
    const cpu_backend *cpu = ctx;
    TT_CHECK(!cpu->in_side && ticket <= cpu->side_tickets, "side_wait for ticket %llu (%llu issued)%s",
             (unsigned long long)ticket, (unsigned long long)cpu->side_tickets,
             cpu->in_side ? " inside the side queue" : "");
}

static void *cpu_side_stream(void *ctx) {
    (void)ctx;
    return NULL;
}

static bool cpu_side_active(void *ctx) { return ((const cpu_backend *)ctx)->in_side; }

static size_t cpu_bytes_outside_arenas(void *ctx) {
    (void)ctx;
    return 0;
}

static void *cpu_block_alloc(void *ctx, size_t bytes) {
    (void)ctx;
    return tt_host_block_alloc(bytes);
}

static void cpu_block_free(void *ctx, void *base) { tt_host_block_release(ctx, base); }

static uint64_t cpu_copy_async(void *ctx, void *dst, const void *src, size_t bytes, bool to_host, uint64_t after) {
    cpu_backend *cpu = ctx;
    TT_CHECK(after <= cpu->copies_issued, "copy ticket %llu not issued yet", (unsigned long long)after);
    const uint64_t ticket = cpu->copies_issued + 1;
    cpu->copy_start[ticket % TT_TIMELINE_WINDOW] = tt_monotonic_seconds();
    cpu_copy(ctx, dst, src, bytes);
    cpu->copy_end[ticket % TT_TIMELINE_WINDOW] = tt_monotonic_seconds();
    *(to_host ? &cpu->copied_to_host : &cpu->copied_to_device) += bytes;
    return cpu->copies_issued = ticket;
}

static void cpu_copy_wait(void *ctx, uint64_t ticket) {
    const cpu_backend *cpu = ctx;
    TT_CHECK(ticket <= cpu->copies_issued, "copy ticket %llu not issued yet", (unsigned long long)ticket);
}

static bool cpu_copy_done(void *ctx, uint64_t ticket) {
    cpu_copy_wait(ctx, ticket);
    return true;
}

static uint64_t cpu_timestamp(void *ctx) {
    cpu_backend *cpu = ctx;
    cpu->marks[++cpu->marks_made % TT_TIMELINE_WINDOW] = tt_monotonic_seconds();
    return cpu->marks_made;
}

static double cpu_timestamp_seconds(void *ctx, uint64_t id) {
    const cpu_backend *cpu = ctx;
    return id && id <= cpu->marks_made && cpu->marks_made - id < TT_TIMELINE_WINDOW
               ? cpu->marks[id % TT_TIMELINE_WINDOW]
               : NAN;
}

static bool cpu_copy_span(void *ctx, uint64_t ticket, double *start, double *end) {
    const cpu_backend *cpu = ctx;
    if (!ticket || ticket > cpu->copies_issued || cpu->copies_issued - ticket >= TT_TIMELINE_WINDOW) return false;
    *start = cpu->copy_start[ticket % TT_TIMELINE_WINDOW];
    *end = cpu->copy_end[ticket % TT_TIMELINE_WINDOW];
    return true;
}

static void cpu_copy_set_delay(void *ctx, unsigned max_us) {
    (void)ctx;
    (void)max_us; /* nothing runs concurrently to race */
}

static void cpu_copy_stats(void *ctx, size_t *to_host, size_t *to_device, double *copy_seconds,
                           double *exposed_seconds) {
    const cpu_backend *cpu = ctx;
    *to_host = cpu->copied_to_host;
    *to_device = cpu->copied_to_device;
    *copy_seconds = 0; /* not timed: the copies are memcpy inside the step */
    *exposed_seconds = 0;
}

/* The CPU backend is the fp32 oracle; device selection keeps other settings away. */
static void check_settings(const tt_backend_settings *settings) {
    const tt_precision *p = &settings->precision;
    TT_CHECK(p->activation == TT_F32 && p->gradient == TT_F32 && p->moment == TT_F32 && !p->master,
             "the CPU backend computes in fp32 only");
    TT_CHECK(settings->attention == TT_ATTENTION_AUTO || settings->attention == TT_ATTENTION_SIMPLE,
             "the CPU backend has one attention");
    /* attention_workspace_limit: one attention, no workspace to bound */
}

static int threads_of(const cpu_backend *cpu) { return cpu->threads > 0 ? cpu->threads : omp_get_max_threads(); }

static size_t cpu_scratch_bytes(void *ctx, const tt_backend_settings *settings, const tt_scratch_shape *shape) {
    check_settings(settings);
    return tt_cpu_scratch_bytes(shape, threads_of(ctx));
}

static size_t cpu_attention_workspace_bytes(void *ctx, const tt_backend_settings *settings,
                                            const tt_attention_shape *shape) {
    (void)ctx;
    (void)shape; /* the CPU kernel keeps a row of scores per thread in the op scratch */
    check_settings(settings);
    return 0;
}

/* Nothing to plan: the settings are checked and the scratch taken. */
static void cpu_prepare(void *ctx, const tt_backend_settings *settings, const tt_scratch_shape *shape, void *scratch,
                        size_t scratch_bytes) {
    cpu_backend *cpu = ctx;
    check_settings(settings);
    TT_CHECK(!scratch || scratch_bytes >= tt_cpu_scratch_bytes(shape, threads_of(cpu)),
             "CPU op scratch of %zu bytes, under scratch_bytes", scratch_bytes);
    tt_cpu_scratch_set(&cpu->scratch, scratch, scratch_bytes);
}

static void cpu_release(void *ctx) {
    cpu_backend *cpu = ctx;
    tt_cpu_scratch_set(&cpu->scratch, NULL, 0);
}

static void cpu_embedding_forward(void *ctx, void *out, const int32_t *ids, const void *table, int64_t N, int64_t D,
                                  float scale) {
    ON_THREADS(ctx, tt_cpu_embedding_forward_f32(out, ids, table, N, D, scale));
}

static void cpu_embedding_backward(void *ctx, void *dtable, const int32_t *ids, const void *dout, int64_t N, int64_t D,
                                   float scale) {
    ON_THREADS(ctx, tt_cpu_embedding_backward_f32(dtable, ids, dout, N, D, scale));
}

static void cpu_rmsnorm_forward(void *ctx, void *out, float *rstd, const void *x, const void *w, const void *residual,
                                int64_t R, int64_t C, double eps, float weight_offset) {
    ON_THREADS(ctx, tt_cpu_rmsnorm_forward_f32(out, rstd, x, w, residual, R, C, eps, weight_offset));
}

static void cpu_rmsnorm_backward(void *ctx, void *dx, void *dw, const void *dout, const void *x, const void *w,
                                 const float *rstd, int64_t R, int64_t C, float weight_offset) {
    ON_THREADS(ctx, tt_cpu_rmsnorm_backward_f32(&cpu->scratch, dx, dw, dout, x, w, rstd, R, C, weight_offset));
}

static void cpu_linear_forward(void *ctx, void *y, const void *x, const void *W, const void *b, const void *residual,
                               int64_t N, int64_t in, int64_t out) {
    if (residual && residual != y) memcpy(y, residual, sizeof(float) * (size_t)(N * out));
    ON_THREADS(ctx, tt_cpu_linear_forward_f32(&cpu->scratch, y, x, W, b, N, in, out, residual != NULL));
}

static void cpu_linear_backward(void *ctx, void *dx, void *dW, void *db, const void *dy, const void *x, const void *W,
                                int64_t N, int64_t in, int64_t out, bool accumulate_dx) {
    ON_THREADS(ctx, tt_cpu_linear_backward_f32(&cpu->scratch, dx, dW, db, dy, x, W, N, in, out, accumulate_dx));
}

static void cpu_rope_forward(void *ctx, void *x, const float *cos_t, const float *sin_t, int64_t B, int64_t T,
                             int64_t H, int64_t hd, int64_t rotary_dim) {
    ON_THREADS(ctx, tt_cpu_rope_forward_f32(x, cos_t, sin_t, B, T, H, hd, rotary_dim));
}

static void cpu_rope_backward(void *ctx, void *dx, const float *cos_t, const float *sin_t, int64_t B, int64_t T,
                              int64_t H, int64_t hd, int64_t rotary_dim) {
    ON_THREADS(ctx, tt_cpu_rope_backward_f32(dx, cos_t, sin_t, B, T, H, hd, rotary_dim));
}

static void cpu_attention_forward(void *ctx, void *out, float *lse, const void *q, const void *k, const void *v,
                                  const tt_attention_shape *shape) {
    ON_THREADS(ctx, tt_cpu_attention_forward_f32(&cpu->scratch, out, lse, q, k, v, shape));
}

static void cpu_attention_cached(void *ctx, void *out, const void *q, const void *k_cache, const void *v_cache,
                                 int64_t start, int64_t n, const tt_attention_shape *shape) {
    ON_THREADS(ctx, tt_cpu_attention_cached_f32(&cpu->scratch, out, q, k_cache, v_cache, start, n, shape));
}

static void cpu_attention_backward(void *ctx, void *dq, void *dk, void *dv, const void *dout, const void *out,
                                   const float *lse, const void *q, const void *k, const void *v,
                                   const tt_attention_shape *shape, void *workspace, void *spare, size_t spare_bytes) {
    (void)spare;
    (void)spare_bytes;
    (void)workspace; /* the CPU kernel keeps a row of scores per thread in the op scratch */
    ON_THREADS(ctx, tt_cpu_attention_backward_f32(&cpu->scratch, dq, dk, dv, dout, out, lse, q, k, v, shape));
}

static void cpu_glu_forward(void *ctx, void *h, const void *gate, const void *up, int64_t n, tt_glu_activation act) {
    ON_THREADS(ctx, tt_cpu_glu_forward_f32(h, gate, up, n, act));
}

static void cpu_glu_backward(void *ctx, void *dgate, void *dup, const void *dh, const void *gate, const void *up,
                             int64_t n, tt_glu_activation act) {
    ON_THREADS(ctx, tt_cpu_glu_backward_f32(dgate, dup, dh, gate, up, n, act));
}

static void cpu_add(void *ctx, void *out, const void *a, const void *b, int64_t n) {
    ON_THREADS(ctx, tt_cpu_add_f32(out, a, b, n));
}

/* The oracle's dequantization: model/quant4.c, each value one fp32 product (threads over blocks, the same bits). */
static void cpu_dequantize_4bit(void *ctx, void *out, const void *quantized, int64_t numel,
                                const tt_quant4_format *format) {
    ON_THREADS(ctx, (void)cpu; tt_quant4_dequantize(out, quantized, numel, format));
}

static void cpu_add_uniform_noise(void *ctx, void *x, int64_t n, float magnitude, uint64_t seed) {
    ON_THREADS(ctx, tt_cpu_add_uniform_noise_f32(x, n, magnitude, seed));
}

static void cpu_dropout_scale(void *ctx, void *out, const void *x, int64_t n, float multiplier, uint32_t drop_threshold,
                              uint64_t seed) {
    ON_THREADS(ctx, tt_cpu_dropout_scale_f32(out, x, n, multiplier, drop_threshold, seed));
}

static double cpu_lm_head_loss(void *ctx, void *dxn, void *dW, const void *xn, const void *W, const int32_t *targets,
                               int64_t N, int64_t D, int64_t V, int64_t chunk, void *logits, double logit_scale,
                               double softcap, double scale, double loss_before, int64_t *count) {
    double loss = 0;
    ON_THREADS(ctx, loss = tt_cpu_lm_head_loss_f32(&cpu->scratch, dxn, dW, xn, W, targets, N, D, V, chunk, logits,
                                                   logit_scale, softcap, scale, loss_before, count));
    return loss;
}

static void cpu_sum_parts(void *ctx, float *dst, const float *parts, int count, int64_t n) {
    (void)ctx;
    for (int64_t i = 0; i < n; i++) {
        float sum = parts[i];
        for (int r = 1; r < count; r++) sum += parts[(size_t)r * (size_t)n + (size_t)i];
        dst[i] = sum;
    }
}

static void cpu_sum_squares(void *ctx, double *out, const void *x, int64_t n) {
    ON_THREADS(ctx, *out = tt_cpu_sum_squares_f32(&cpu->scratch, x, n));
}

static void cpu_adamw_update(void *ctx, void *weights, float *master, const void *g, void *m, void *v,
                             const int64_t *segment_start, const unsigned char *segment_decays, int segments, float lr,
                             float beta1, float beta2, float eps, float weight_decay, int64_t step, float grad_scale) {
    TT_CHECK(master == NULL, "the CPU backend keeps no master copy");
    ON_THREADS(
        ctx, for (int s = 0; s < segments; s++) {
            const int64_t at = segment_start[s], n = segment_start[s + 1] - at;
            tt_cpu_adamw_update_f32((float *)weights + at, (const float *)g + at, (float *)m + at, (float *)v + at, n,
                                    lr, beta1, beta2, eps, segment_decays[s] ? weight_decay : 0.0f, step, grad_scale);
        });
}

static void cpu_moe_forward(void *ctx, void *y, const void *residual, const void *x, const void *router,
                            const void *w_gate, const void *w_up, const void *w_down, const tt_moe_shape *shape,
                            const tt_moe_saved *saved) {
    ON_THREADS(ctx, tt_cpu_moe_forward_f32(&cpu->scratch, y, residual, x, router, w_gate, w_up, w_down, shape, saved));
}

static void cpu_moe_backward(void *ctx, void *dx, void *d_router, void *d_gate, void *d_up, void *d_down,
                             const void *dy, const void *x, const void *router, const void *w_gate, const void *w_up,
                             const void *w_down, const tt_moe_shape *shape, const tt_moe_saved *saved, void *scratch) {
    ON_THREADS(ctx, tt_cpu_moe_backward_f32(&cpu->scratch, dx, d_router, d_gate, d_up, d_down, dy, x, router, w_gate,
                                            w_up, w_down, shape, saved, scratch));
}

static void cpu_adamw_8bit_update(void *ctx, void *weights, float *master, const void *g, const tt_adamw_8bit_moment *m,
                                  const tt_adamw_8bit_moment *v, const tt_adamw_8bit_tensor *tensors, int count,
                                  const tt_adamw_8bit_scalars *scalars) {
    TT_CHECK(master == NULL, "the CPU backend's weights are fp32: no master copy");
    ON_THREADS(ctx, tt_cpu_adamw_8bit_update(&cpu->adamw_8bit_maps, weights, g, m, v, tensors, count, scalars));
}

static void cpu_destroy(void *ctx) { free(ctx); }

static const tt_backend_iface cpu_iface = {
    .destroy = cpu_destroy,
    .block_alloc = cpu_block_alloc,
    .block_free = cpu_block_free,
    .copy = cpu_copy,
    .copy_2d = cpu_copy_2d,
    .pinned_alloc = cpu_block_alloc,
    .pinned_free = cpu_block_free,
    .zero = cpu_zero,
    .synchronize = cpu_synchronize,
    .side_begin = cpu_side_begin,
    .side_end = cpu_side_end,
    .side_wait = cpu_side_wait,
    .side_stream = cpu_side_stream,
    .side_active = cpu_side_active,
    .bytes_outside_arenas = cpu_bytes_outside_arenas,
    .upload = cpu_copy,
    .download = cpu_copy,
    .copy_async = cpu_copy_async,
    .copy_done = cpu_copy_done,
    .copy_wait = cpu_copy_wait,
    .copy_host_wait = cpu_copy_wait,
    .copy_set_delay = cpu_copy_set_delay,
    .copy_stats = cpu_copy_stats,
    .timestamp = cpu_timestamp,
    .timestamp_seconds = cpu_timestamp_seconds,
    .copy_span = cpu_copy_span,
    .scratch_bytes = cpu_scratch_bytes,
    .attention_workspace_bytes = cpu_attention_workspace_bytes,
    .prepare = cpu_prepare,
    .release = cpu_release,
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
    .attention_cached = cpu_attention_cached,
    .glu_forward = cpu_glu_forward,
    .glu_backward = cpu_glu_backward,
    .add = cpu_add,
    .dequantize_4bit = cpu_dequantize_4bit,
    .dropout_scale = cpu_dropout_scale,
    .add_uniform_noise = cpu_add_uniform_noise,
    .lm_head_loss = cpu_lm_head_loss,
    .sum_squares = cpu_sum_squares,
    .sum_parts = cpu_sum_parts,
    .adamw_update = cpu_adamw_update,
    .adamw_8bit_update = cpu_adamw_8bit_update,
    .moe_forward = cpu_moe_forward,
    .moe_backward = cpu_moe_backward,
};

tt_backend *tt_backend_cpu_create(int threads) {
    TT_CHECK(threads >= 0, "CPU backend threads %d", threads);
    /* The backend's fp32 GEMMs are tiertrain's own (gemm_cpu.h); the fp64 kernels beside them (the
     * gradient check) tile dgemm over OpenMP threads, each tile one single-threaded BLAS call:
     * OpenBLAS's own thread pool would compete with OpenMP's for the same cores. */
    openblas_set_num_threads(1);
    cpu_backend *cpu = tt_xcalloc(1, sizeof *cpu, "the CPU backend");
    cpu->threads = threads;
    tt_adamw_8bit_maps_build(&cpu->adamw_8bit_maps);
    tt_backend *backend = tt_xcalloc(1, sizeof *backend, "the CPU backend");
    *backend = (tt_backend){.iface = &cpu_iface, .ctx = cpu, .name = "cpu", .compute_tier = TT_TIER_HOST};
    return backend;
}
