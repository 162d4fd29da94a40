/* The measuring backend: the step program's dry run (train/measure.h) calls it instead of a real
 * backend. Every op and copy does nothing (the arenas it runs on hold no memory), the copy engine's
 * tickets are always done, and the size queries are the real backend's, so the dry run pushes the
 * buffers the real run pushes. */
#include <stddef.h>

#include "ops/backend.h"

static void *measure_block_alloc(size_t bytes) { return NULL; }
static void measure_block_free(void *base) {}
static void measure_copy(void *dst, const void *src, size_t bytes) {}
static void measure_zero(void *dst, size_t bytes) {}
static void measure_synchronize(void) {}
static size_t measure_bytes_outside_arenas(void) { return 0; }
static uint64_t measure_copy_async(void *dst, const void *src, size_t bytes, bool to_host, uint64_t after) {
    return 1;
}
static void measure_copy_wait(uint64_t ticket) {}
static bool measure_copy_done(uint64_t ticket) { return true; }
static void measure_copy_set_delay(unsigned max_us) {}
static void measure_copy_stats(size_t *to_host, size_t *to_device, double *copy_seconds, double *exposed_seconds) {
    *to_host = *to_device = 0;
    *copy_seconds = *exposed_seconds = 0;
}
static uint64_t measure_timestamp(void) { return 0; }
static double measure_timestamp_seconds(uint64_t id) { return 0; }
static bool measure_copy_span(uint64_t ticket, double *start, double *end) {
    *start = *end = 0;
    return false;
}
static void measure_configure(const tt_precision *precision, tt_attention_kind attention, size_t limit) {
}
static void measure_set_scratch(void *base, size_t bytes) {}
static void measure_embedding(void *out, const int32_t *ids, const void *table, int64_t N, int64_t D) {
}
static void measure_rmsnorm_forward(void *out, float *rstd, const void *x, const void *w, int64_t R, int64_t C,
                                    double eps) {
}
static void measure_rmsnorm_backward(void *dx, void *dw, const void *dout, const void *x, const void *w,
                                     const float *rstd, int64_t R, int64_t C) {
}
static void measure_linear_forward(void *y, const void *x, const void *W, const void *b, const void *residual,
                                   int64_t N, int64_t in, int64_t out) {
}
static void measure_linear_backward(void *dx, void *dW, void *db, const void *dy, const void *x, const void *W,
                                    int64_t N, int64_t in, int64_t out, bool accumulate_dx) {
}
static void measure_rope(void *x, const float *cos, const float *sin, int64_t B, int64_t T, int64_t H, int64_t hd) {
}
static void measure_attention_forward(void *out, float *lse, const void *q, const void *k, const void *v,
                                      const tt_attention_shape *shape) {
}
static void measure_attention_backward(void *dq, void *dk, void *dv, const void *dout, const void *out,
                                       const float *lse, const void *q, const void *k, const void *v,
                                       const tt_attention_shape *shape, void *workspace, void *spare,
                                       size_t spare_bytes) {
}
static void measure_swiglu_forward(void *h, const void *gate, const void *up, int64_t n) {
}
static void measure_swiglu_backward(void *dgate, void *dup, const void *dh, const void *gate, const void *up,
                                    int64_t n) {
}
static void measure_add(void *out, const void *a, const void *b, int64_t n) {}
static void measure_dequantize_4bit(void *out, const void *quantized, int64_t numel, const tt_quant4_format *format) {}
static void measure_dropout_scale(void *out, const void *x, int64_t n, float multiplier, uint32_t drop_threshold,
                                  uint64_t seed) {
}
static double measure_lm_head_loss(void *dxn, void *dW, const void *xn, const void *W, const int32_t *targets,
                                   int64_t N, int64_t D, int64_t V, int64_t chunk, void *logits, double scale,
                                   int64_t *count) {
    *count = 0;
    return 0;
}
static void measure_sum_squares(double *out, const void *x, int64_t n) {}
static void measure_adamw_update(void *weights, float *master, const void *g, void *m, void *v,
                                 const int64_t *segment_start, const unsigned char *segment_decays, int segments,
                                 float lr, float beta1, float beta2, float eps, float weight_decay, int64_t step,
                                 float grad_scale) {
}

void tt_backend_measure_init(tt_backend *out, const tt_backend *real) {
    *out = (tt_backend){
        .name = "measure",
        .compute_tier = real->compute_tier,
        .block_alloc = measure_block_alloc,
        .block_free = measure_block_free,
        .copy = measure_copy,
        .pinned_alloc = measure_block_alloc,
        .pinned_free = measure_block_free,
        .zero = measure_zero,
        .synchronize = measure_synchronize,
        .bytes_outside_arenas = measure_bytes_outside_arenas,
        .upload = measure_copy,
        .download = measure_copy,
        .copy_async = measure_copy_async,
        .copy_wait = measure_copy_wait,
        .copy_host_wait = measure_copy_wait,
        .copy_done = measure_copy_done,
        .copy_set_delay = measure_copy_set_delay,
        .copy_stats = measure_copy_stats,
        .timestamp = measure_timestamp,
        .timestamp_seconds = measure_timestamp_seconds,
        .copy_span = measure_copy_span,
        .configure = measure_configure,
        .scratch_bytes = real->scratch_bytes,
        .set_scratch = measure_set_scratch,
        .attention_workspace_bytes = real->attention_workspace_bytes,
        .embedding_forward = measure_embedding,
        .embedding_backward = measure_embedding,
        .rmsnorm_forward = measure_rmsnorm_forward,
        .rmsnorm_backward = measure_rmsnorm_backward,
        .linear_forward = measure_linear_forward,
        .linear_backward = measure_linear_backward,
        .rope_forward = measure_rope,
        .rope_backward = measure_rope,
        .attention_forward = measure_attention_forward,
        .attention_backward = measure_attention_backward,
        .swiglu_forward = measure_swiglu_forward,
        .swiglu_backward = measure_swiglu_backward,
        .add = measure_add,
        .dequantize_4bit = measure_dequantize_4bit,
        .dropout_scale = measure_dropout_scale,
        .lm_head_loss = measure_lm_head_loss,
        .sum_squares = measure_sum_squares,
        .adamw_update = measure_adamw_update,
    };
}
