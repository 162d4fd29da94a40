/* The measuring backend: the step program's dry run (train/measure.h) calls it instead of a real
 * backend. Every op and copy does nothing (the arenas it runs on hold no memory), the copy engine's
 * tickets are always done, and the size queries are the real backend's (pure: they change nothing
 * of it), so the dry run pushes the buffers the real run pushes. Its context is the real backend. */
#include <stddef.h>

#include "ops/backend.h"

static void measure_destroy(void *ctx) {}
static void *measure_block_alloc(void *ctx, size_t bytes) { return NULL; }
static void measure_block_free(void *ctx, void *base) {}
static void measure_copy(void *ctx, void *dst, const void *src, size_t bytes) {}
static void measure_copy_2d(void *ctx, void *dst, size_t dst_pitch, const void *src, size_t src_pitch, size_t width,
                            size_t rows) {}
static void measure_zero(void *ctx, void *dst, size_t bytes) {}
static void measure_synchronize(void *ctx) {}
static void measure_side_begin(void *ctx) {}
static uint64_t measure_side_end(void *ctx) { return 1; }
static void measure_side_wait(void *ctx, uint64_t ticket) {}
static void *measure_side_stream(void *ctx) { return NULL; }
static bool measure_side_active(void *ctx) { return true; }
static size_t measure_bytes_outside_arenas(void *ctx) { return 0; }
static uint64_t measure_copy_async(void *ctx, void *dst, const void *src, size_t bytes, bool to_host, uint64_t after) {
    return 1;
}
static void measure_copy_wait(void *ctx, uint64_t ticket) {}
static bool measure_copy_done(void *ctx, uint64_t ticket) { return true; }
static void measure_copy_set_delay(void *ctx, unsigned max_us) {}
static void measure_copy_stats(void *ctx, size_t *to_host, size_t *to_device, double *copy_seconds,
                               double *exposed_seconds) {
    *to_host = *to_device = 0;
    *copy_seconds = *exposed_seconds = 0;
}
static uint64_t measure_timestamp(void *ctx) { return 0; }
static double measure_timestamp_seconds(void *ctx, uint64_t id) { return 0; }
static bool measure_copy_span(void *ctx, uint64_t ticket, double *start, double *end) {
    *start = *end = 0;
    return false;
}
/* The real backend's answers: the queries are pure, so asking them for a hypothetical plan is safe. */
static size_t measure_scratch_bytes(void *ctx, const tt_backend_settings *settings, const tt_scratch_shape *shape) {
    return tt_backend_scratch_bytes((const tt_backend *)ctx, settings, shape);
}
static size_t measure_attention_workspace_bytes(void *ctx, const tt_backend_settings *settings,
                                                const tt_attention_shape *shape) {
    return tt_backend_attention_workspace_bytes((const tt_backend *)ctx, settings, shape);
}
static void measure_prepare(void *ctx, const tt_backend_settings *settings, const tt_scratch_shape *shape,
                            void *scratch, size_t scratch_bytes) {}
static void measure_release(void *ctx) {}
static void measure_embedding(void *ctx, void *out, const int32_t *ids, const void *table, int64_t N, int64_t D,
                              float scale) {}
static void measure_rmsnorm_forward(void *ctx, void *out, float *rstd, const void *x, const void *w,
                                    const void *residual, int64_t R, int64_t C, double eps, float weight_offset) {}
static void measure_rmsnorm_backward(void *ctx, void *dx, void *dw, const void *dout, const void *x, const void *w,
                                     const float *rstd, int64_t R, int64_t C, float weight_offset) {}
static void measure_linear_forward(void *ctx, void *y, const void *x, const void *W, const void *b,
                                   const void *residual, int64_t N, int64_t in, int64_t out) {}
static void measure_linear_backward(void *ctx, void *dx, void *dW, void *db, const void *dy, const void *x,
                                    const void *W, int64_t N, int64_t in, int64_t out, bool accumulate_dx) {}
static void measure_rope(void *ctx, void *x, const float *cos, const float *sin, int64_t B, int64_t T, int64_t H,
                         int64_t hd, int64_t rotary_dim) {}
static void measure_attention_forward(void *ctx, void *out, float *lse, const void *q, const void *k, const void *v,
                                      const tt_attention_shape *shape) {}
static void measure_add_uniform_noise(void *ctx, void *x, int64_t n, float magnitude, uint64_t seed) {}
static void measure_attention_cached(void *ctx, void *out, const void *q, const void *k_cache, const void *v_cache,
                                     int64_t start, int64_t n, const tt_attention_shape *shape) {}
static void measure_attention_backward(void *ctx, void *dq, void *dk, void *dv, const void *dout, const void *out,
                                       const float *lse, const void *q, const void *k, const void *v,
                                       const tt_attention_shape *shape, void *workspace, void *spare,
                                       size_t spare_bytes) {}
static void measure_glu_forward(void *ctx, void *h, const void *gate, const void *up, int64_t n,
                                tt_glu_activation act) {}
static void measure_glu_backward(void *ctx, void *dgate, void *dup, const void *dh, const void *gate, const void *up,
                                 int64_t n, tt_glu_activation act) {}
static void measure_add(void *ctx, void *out, const void *a, const void *b, int64_t n) {}
static void measure_dequantize_4bit(void *ctx, void *out, const void *quantized, int64_t numel,
                                    const tt_quant4_format *format) {}
static void measure_dropout_scale(void *ctx, void *out, const void *x, int64_t n, float multiplier,
                                  uint32_t drop_threshold, uint64_t seed) {}
static double measure_lm_head_loss(void *ctx, void *dxn, void *dW, const void *xn, const void *W,
                                   const int32_t *targets, int64_t N, int64_t D, int64_t V, int64_t chunk, void *logits,
                                   double logit_scale, double softcap, double scale, double loss_before,
                                   int64_t *count) {
    *count = 0;
    return loss_before;
}
static void measure_sum_squares(void *ctx, double *out, const void *x, int64_t n) {}
static void measure_sum_parts(void *ctx, float *dst, const float *parts, int count, int64_t n) {}
static void measure_adamw_update(void *ctx, void *weights, float *master, const void *g, void *m, void *v,
                                 const int64_t *segment_start, const unsigned char *segment_decays, int segments,
                                 float lr, float beta1, float beta2, float eps, float weight_decay, int64_t step,
                                 float grad_scale) {}
static void measure_adamw_8bit_update(void *ctx, void *weights, float *master, const void *g,
                                      const tt_adamw_8bit_moment *m, const tt_adamw_8bit_moment *v,
                                      const tt_adamw_8bit_tensor *tensors, int count,
                                      const tt_adamw_8bit_scalars *scalars) {}

static void measure_moe_forward(void *ctx, void *y, const void *residual, const void *x, const void *router,
                                const void *w_gate, const void *w_up, const void *w_down, const tt_moe_shape *shape,
                                const tt_moe_saved *saved) {}
static void measure_moe_backward(void *ctx, void *dx, void *d_router, void *d_gate, void *d_up, void *d_down,
                                 const void *dy, const void *x, const void *router, const void *w_gate,
                                 const void *w_up, const void *w_down, const tt_moe_shape *shape,
                                 const tt_moe_saved *saved, void *scratch) {}

static const tt_backend_iface measure_iface = {
    .destroy = measure_destroy,
    .block_alloc = measure_block_alloc,
    .block_free = measure_block_free,
    .copy = measure_copy,
    .copy_2d = measure_copy_2d,
    .pinned_alloc = measure_block_alloc,
    .pinned_free = measure_block_free,
    .zero = measure_zero,
    .synchronize = measure_synchronize,
    .side_begin = measure_side_begin,
    .side_end = measure_side_end,
    .side_wait = measure_side_wait,
    .side_stream = measure_side_stream,
    .side_active = measure_side_active,
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
    .scratch_bytes = measure_scratch_bytes,
    .attention_workspace_bytes = measure_attention_workspace_bytes,
    .prepare = measure_prepare,
    .release = measure_release,
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
    .attention_cached = measure_attention_cached,
    .add_uniform_noise = measure_add_uniform_noise,
    .glu_forward = measure_glu_forward,
    .glu_backward = measure_glu_backward,
    .add = measure_add,
    .dequantize_4bit = measure_dequantize_4bit,
    .dropout_scale = measure_dropout_scale,
    .lm_head_loss = measure_lm_head_loss,
    .sum_squares = measure_sum_squares,
    .sum_parts = measure_sum_parts,
    .adamw_update = measure_adamw_update,
    .adamw_8bit_update = measure_adamw_8bit_update,
    .moe_forward = measure_moe_forward,
    .moe_backward = measure_moe_backward,
};

void tt_backend_measure_init(tt_backend *out, const tt_backend *real) {
    *out = (tt_backend){
        .iface = &measure_iface,
        .ctx = (void *)real, /* borrowed; only its size queries are called */
        .name = "measure",
        .compute_tier = real->compute_tier,
    };
}
