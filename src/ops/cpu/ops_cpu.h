/* The CPU reference kernels in two precisions: _f32 (behind tt_backend_cpu()) and _f64 (the
 * gradient check). The _f32 kernels give a token's rows the same bits wherever the token sits in
 * the micro-batch, and add every reduction over tokens in token order onto the value already
 * there (ops_cpu_impl.h says how). Both are compiled from ops_cpu_impl.h; the semantics, shapes and
 * accumulation rules are those of the matching entries of tt_backend (src/ops/backend.h), with
 * typed pointers, and with rstd, lse, cos, sin and logits in the variant's precision.
 * All are deterministic: the same inputs give the same bits whatever the thread count.
 * In-place use beyond backend.h: rmsnorm_backward's dx may be dout, lm_head_loss's dxn may be
 * xn, and the element-wise ops (swiglu, add, rmsnorm_forward) may write over their inputs. */
#ifndef TT_OPS_CPU_OPS_CPU_H
#define TT_OPS_CPU_OPS_CPU_H

#include <stdbool.h>
#include <stdint.h>

#include "ops/backend.h"

/* Scratch for the ops (see scratch_bytes in ops/backend.h), one area per backend context, passed to
 * the kernels that need it. Takes are LIFO and last one op call. Inside a training step the area is
 * set, and a take it cannot serve is a bug in tt_cpu_scratch_bytes (checked). With no area (NULL,
 * or none set: the gradient check and other direct callers of the kernels) a take allocates from
 * the system. */
typedef struct tt_cpu_scratch {
    unsigned char *base;
    size_t bytes;
    size_t used;
} tt_cpu_scratch;

void *tt_cpu_scratch_take(tt_cpu_scratch *area, size_t bytes, const char *what);
void tt_cpu_scratch_give(tt_cpu_scratch *area, void *pointer);
void tt_cpu_scratch_set(tt_cpu_scratch *area, void *base, size_t bytes);
/* The largest area the ops of shape need when they run on `threads` OpenMP threads. */
size_t tt_cpu_scratch_bytes(const tt_scratch_shape *shape, int threads);

/* ---- fp32: the CPU backend's compute precision */

/* out[N,D] = table[ids[n], :] */
void tt_cpu_embedding_forward_f32(float *out, const int32_t *ids, const float *table, int64_t N, int64_t D,
                                  float scale);

/* dtable[V,D] += dout[n] at row ids[n], for n in order */
void tt_cpu_embedding_backward_f32(float *dtable, const int32_t *ids, const float *dout, int64_t N, int64_t D,
                                   float scale);

/* out[R,C] = w[C] * (x * rstd); rstd[R] = 1 / sqrt(mean(x^2) + eps) */
void tt_cpu_rmsnorm_forward_f32(float *out, float *rstd, const float *x, const float *w, const float *residual,
                                int64_t R, int64_t C, double eps, float weight_offset);

/* dx[R,C] += d/dx; dw[C] += d/dw (row after row, in order, onto dw's value); either may be NULL */
void tt_cpu_rmsnorm_backward_f32(tt_cpu_scratch *scratch, float *dx, float *dw, const float *dout, const float *x,
                                 const float *w, const float *rstd, int64_t R, int64_t C, float weight_offset);

/* y[N,out] (= or += when accumulate) x[N,in] W[out,in]^T (+ b[out] when b != NULL) */
void tt_cpu_linear_forward_f32(tt_cpu_scratch *scratch, float *y, const float *x, const float *W, const float *b,
                               int64_t N, int64_t in, int64_t out, bool accumulate);

/* dx[N,in] (= or += when accumulate_dx) dy W; dW[out,in] += dy^T x; db[out] += sum_n dy, dW and db
 * token after token, in order, onto their values; dx, dW, db may each be NULL */
void tt_cpu_linear_backward_f32(tt_cpu_scratch *scratch, float *dx, float *dW, float *db, const float *dy,
                                const float *x, const float *W, int64_t N, int64_t in, int64_t out, bool accumulate_dx);

/* in place on x[B*T, H, hd], rotate-half layout; cos/sin[T, hd/2] at position n % T */
void tt_cpu_rope_forward_f32(float *x, const float *cos_t, const float *sin_t, int64_t B, int64_t T, int64_t H,
                             int64_t hd, int64_t rotary_dim);

/* in place on dx[B*T, H, hd]: rotation by the negative angle */
void tt_cpu_rope_backward_f32(float *dx, const float *cos_t, const float *sin_t, int64_t B, int64_t T, int64_t H,
                              int64_t hd, int64_t rotary_dim);

/* out[B*T, Hq*hd], lse[B, Hq, T] from q[B*T, Hq*hd], k, v[B*T, Hkv*hd]; causal, GQA, window */
void tt_cpu_attention_forward_f32(tt_cpu_scratch *scratch, float *out, float *lse, const float *q, const float *k,
                                  const float *v, const tt_attention_shape *shape);

/* out[n, Hq*hd] of n new queries at positions start.. over the KV cache's rows [0, start + n) */
void tt_cpu_attention_cached_f32(tt_cpu_scratch *scratch, float *out, const float *q, const float *k_cache,
                                 const float *v_cache, int64_t start, int64_t n, const tt_attention_shape *shape);

/* dq[B*T, Hq*hd], dk, dv[B*T, Hkv*hd] (overwritten) */
void tt_cpu_attention_backward_f32(tt_cpu_scratch *scratch, float *dq, float *dk, float *dv, const float *dout,
                                   const float *out, const float *lse, const float *q, const float *k, const float *v,
                                   const tt_attention_shape *shape);

/* h[n] = act(gate) * up */
void tt_cpu_glu_forward_f32(float *h, const float *gate, const float *up, int64_t n, tt_glu_activation act);

/* dgate[n], dup[n] (overwritten) */
void tt_cpu_glu_backward_f32(float *dgate, float *dup, const float *dh, const float *gate, const float *up, int64_t n,
                             tt_glu_activation act);

/* out[n] = a[n] + b[n] */
void tt_cpu_add_f32(float *out, const float *a, const float *b, int64_t n);

/* out[n] = x[n] * multiplier where tt_dropout_bits(seed, n) >= drop_threshold, else 0; out may be x */
/* x[n] += NEFTune noise of (seed, element) in [-magnitude, magnitude) */
void tt_cpu_add_uniform_noise_f32(float *x, int64_t n, float magnitude, uint64_t seed);
void tt_cpu_dropout_scale_f32(float *out, const float *x, int64_t n, float multiplier, uint32_t drop_threshold,
                              uint64_t seed);

/* xn[N,D], W[V,D], targets[N], logits[chunk,V] workspace; returns loss_before + the losses, added in token
 * order; when dxn != NULL: dxn[N,D] overwritten, dW[V,D] += token after token (dW may be NULL) */
double tt_cpu_lm_head_loss_f32(tt_cpu_scratch *scratch, float *dxn, float *dW, const float *xn, const float *W,
                               const int32_t *targets, int64_t N, int64_t D, int64_t V, int64_t chunk, float *logits,
                               double logit_scale, double softcap, double scale, double loss_before, int64_t *count);

/* sum of x[n]^2 in double, blocks of 4096 summed in order */
double tt_cpu_sum_squares_f32(tt_cpu_scratch *scratch, const float *x, int64_t n);

/* one torch.optim.AdamW step on p, m, v[n] (fp32) with g[n] * grad_scale */
void tt_cpu_adamw_update_f32(float *p, const float *g, float *m, float *v, int64_t n, float lr, float beta1,
                             float beta2, float eps, float weight_decay, int64_t step, float grad_scale);

/* ---- fp64: the finite-difference gradient check */

/* out[N,D] = table[ids[n], :] */
void tt_cpu_embedding_forward_f64(double *out, const int32_t *ids, const double *table, int64_t N, int64_t D,
                                  double scale);

/* dtable[V,D] += dout[n] at row ids[n], for n in order */
void tt_cpu_embedding_backward_f64(double *dtable, const int32_t *ids, const double *dout, int64_t N, int64_t D,
                                   double scale);

/* out[R,C] = w[C] * (x * rstd); rstd[R] = 1 / sqrt(mean(x^2) + eps) */
void tt_cpu_rmsnorm_forward_f64(double *out, double *rstd, const double *x, const double *w, const double *residual,
                                int64_t R, int64_t C, double eps, double weight_offset);

/* dx[R,C] += d/dx; dw[C] += d/dw (row after row, in order, onto dw's value); either may be NULL */
void tt_cpu_rmsnorm_backward_f64(tt_cpu_scratch *scratch, double *dx, double *dw, const double *dout, const double *x,
                                 const double *w, const double *rstd, int64_t R, int64_t C, double weight_offset);

/* y[N,out] (= or += when accumulate) x[N,in] W[out,in]^T (+ b[out] when b != NULL) */
void tt_cpu_linear_forward_f64(tt_cpu_scratch *scratch, double *y, const double *x, const double *W, const double *b,
                               int64_t N, int64_t in, int64_t out, bool accumulate);

/* dx[N,in] (= or += when accumulate_dx) dy W; dW[out,in] += dy^T x (dgemm: the sum, then one add);
 * db[out] += sum_n dy, token after token; dx, dW, db may each be NULL */
void tt_cpu_linear_backward_f64(tt_cpu_scratch *scratch, double *dx, double *dW, double *db, const double *dy,
                                const double *x, const double *W, int64_t N, int64_t in, int64_t out,
                                bool accumulate_dx);

/* in place on x[B*T, H, hd], rotate-half layout; cos/sin[T, hd/2] at position n % T */
void tt_cpu_rope_forward_f64(double *x, const double *cos_t, const double *sin_t, int64_t B, int64_t T, int64_t H,
                             int64_t hd, int64_t rotary_dim);

/* in place on dx[B*T, H, hd]: rotation by the negative angle */
void tt_cpu_rope_backward_f64(double *dx, const double *cos_t, const double *sin_t, int64_t B, int64_t T, int64_t H,
                              int64_t hd, int64_t rotary_dim);

/* out[B*T, Hq*hd], lse[B, Hq, T] from q[B*T, Hq*hd], k, v[B*T, Hkv*hd]; causal, GQA, window */
void tt_cpu_attention_forward_f64(tt_cpu_scratch *scratch, double *out, double *lse, const double *q, const double *k,
                                  const double *v, const tt_attention_shape *shape);

/* out[n, Hq*hd] of n new queries at positions start.. over the KV cache's rows [0, start + n) */
void tt_cpu_attention_cached_f64(tt_cpu_scratch *scratch, double *out, const double *q, const double *k_cache,
                                 const double *v_cache, int64_t start, int64_t n, const tt_attention_shape *shape);

/* dq[B*T, Hq*hd], dk, dv[B*T, Hkv*hd] (overwritten) */
void tt_cpu_attention_backward_f64(tt_cpu_scratch *scratch, double *dq, double *dk, double *dv, const double *dout,
                                   const double *out, const double *lse, const double *q, const double *k,
                                   const double *v, const tt_attention_shape *shape);

/* h[n] = act(gate) * up */
void tt_cpu_glu_forward_f64(double *h, const double *gate, const double *up, int64_t n, tt_glu_activation act);

/* dgate[n], dup[n] (overwritten) */
void tt_cpu_glu_backward_f64(double *dgate, double *dup, const double *dh, const double *gate, const double *up,
                             int64_t n, tt_glu_activation act);

/* out[n] = a[n] + b[n] */
void tt_cpu_add_f64(double *out, const double *a, const double *b, int64_t n);

/* out[n] = x[n] * multiplier where tt_dropout_bits(seed, n) >= drop_threshold, else 0; out may be x */
/* x[n] += NEFTune noise of (seed, element) in [-magnitude, magnitude) */
void tt_cpu_add_uniform_noise_f64(double *x, int64_t n, float magnitude, uint64_t seed);
void tt_cpu_dropout_scale_f64(double *out, const double *x, int64_t n, double multiplier, uint32_t drop_threshold,
                              uint64_t seed);

/* xn[N,D], W[V,D], targets[N], logits[chunk,V] workspace; returns loss_before + the losses, added in token
 * order; when dxn != NULL: dxn[N,D] overwritten, dW[V,D] += (dgemm, chunk by chunk; dW may be NULL) */
double tt_cpu_lm_head_loss_f64(tt_cpu_scratch *scratch, double *dxn, double *dW, const double *xn, const double *W,
                               const int32_t *targets, int64_t N, int64_t D, int64_t V, int64_t chunk, double *logits,
                               double logit_scale, double softcap, double scale, double loss_before, int64_t *count);

/* sum of x[n]^2 in double, blocks of 4096 summed in order */
double tt_cpu_sum_squares_f64(tt_cpu_scratch *scratch, const double *x, int64_t n);

/* one torch.optim.AdamW step on p, m, v[n] (fp32) with g[n] * grad_scale */
void tt_cpu_adamw_update_f64(float *p, const double *g, float *m, float *v, int64_t n, float lr, float beta1,
                             float beta2, float eps, float weight_decay, int64_t step, float grad_scale);

#endif
