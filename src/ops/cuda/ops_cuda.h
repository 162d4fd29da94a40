/* CUDA kernels behind a C interface. Activations and weights are bfloat16 (tt_bf16 holds the
 * bits), statistics (rstd) and RoPE tables fp32, every reduction accumulates in fp32. All
 * pointers are device pointers; every call is asynchronous on `stream`. Semantics, shapes and
 * "+=" conventions are those of the same op in src/ops/backend.h; every kernel is
 * deterministic (fixed reduction order, no atomics). */
#ifndef TT_OPS_CUDA_OPS_CUDA_H
#define TT_OPS_CUDA_OPS_CUDA_H

#include <stdint.h>

#include <cuda_runtime_api.h>

#include "ops/backend.h" /* tt_attention_shape */

#ifdef __cplusplus
extern "C" {
#endif

typedef uint16_t tt_bf16; /* bfloat16 bits */

/* out[R,C] = (residual +) x * rstd * (w + weight_offset); rstd[R] = 1/sqrt(mean(x^2) + eps) */
void tt_cuda_rmsnorm_forward(tt_bf16 *out, float *rstd, const tt_bf16 *x, const tt_bf16 *w, const tt_bf16 *residual,
                             int64_t R, int64_t C, float eps, float weight_offset, cudaStream_t stream);

/* Rows per block of the weight-gradient partial sums of rmsnorm_backward. */
#define TT_CUDA_RMSNORM_BACKWARD_ROWS 64
/* Floats of scratch rmsnorm_backward needs: ceil(R / rows) * C. */
int64_t tt_cuda_rmsnorm_backward_scratch(int64_t R, int64_t C);
/* dx[R,C] += d/dx (dx may alias nothing else); dw[C] += d/dw, summed over rows in a fixed order
 * through scratch; dw is fp32 when dw_is_fp32, else bf16. */
void tt_cuda_rmsnorm_backward(tt_bf16 *dx, void *dw, int dw_is_fp32, const tt_bf16 *dout, const tt_bf16 *x,
                              const tt_bf16 *w, const float *rstd, int64_t R, int64_t C, float weight_offset,
                              float *scratch, cudaStream_t stream);

/* bitsandbytes' dynamic map (256 fp32, model/quant4.h) for the double-quantized absmax; once, before the first
 * dequantize_4bit (a synchronous copy). */
void tt_cuda_quant4_set_dynamic_map(const float *map);
/* out[numel] bf16 = a 4-bit weight (ops/quant4.h) dequantized: bf16(code value x absmax), the fp32 product as the
 * CPU oracle computes it, rounded once. out 16-byte aligned; quantized 4-byte aligned. */
void tt_cuda_dequantize_4bit(tt_bf16 *out, const void *quantized, int64_t numel, const tt_quant4_format *format,
                             cudaStream_t stream);
/* y[M,N] bf16 = x[M,K] W^T, W[N,K] a 4-bit weight (ops/quant4.h, numel N K: a linear layer's [out, in]) read as
 * stored and dequantized tile by tile inside the GEMM (kernels_quant4_gemm.cu, sm_90a): the operand values of
 * tt_cuda_dequantize_4bit, fp32 sums, y rounded once. K % 64 == 0 and N % 128 == 0, else it aborts with a message;
 * x and quantized 16-byte aligned, y 4-byte aligned. Needs tt_cuda_quant4_set_dynamic_map first (double
 * quantization). Not used by the model yet: the alternative to dequantize_4bit + cuBLASLt, under measurement. */
void tt_cuda_gemm_4bit_nt(tt_bf16 *y, const tt_bf16 *x, const void *quantized, int64_t M, int64_t N, int64_t K,
                          const tt_quant4_format *format, cudaStream_t stream);

/* h[n] = act(gate[n]) * up[n] */
void tt_cuda_glu_forward(tt_bf16 *h, const tt_bf16 *gate, const tt_bf16 *up, int64_t n, tt_glu_activation act,
                         cudaStream_t stream);
/* dgate, dup (overwritten) */
void tt_cuda_glu_backward(tt_bf16 *dgate, tt_bf16 *dup, const tt_bf16 *dh, const tt_bf16 *gate, const tt_bf16 *up,
                          int64_t n, tt_glu_activation act, cudaStream_t stream);

/* Rotate-half RoPE in place on x[B*T, H, hd] over the first rotary_dim of each head, with cos/sin[T, rotary_dim/2];
 * backward rotates by -angle. */
void tt_cuda_rope_forward(tt_bf16 *x, const float *cos_table, const float *sin_table, int64_t B, int64_t T, int64_t H,
                          int64_t hd, int64_t rotary_dim, cudaStream_t stream);
void tt_cuda_rope_backward(tt_bf16 *dx, const float *cos_table, const float *sin_table, int64_t B, int64_t T, int64_t H,
                           int64_t hd, int64_t rotary_dim, cudaStream_t stream);

/* out[N,D] = table[ids[n]] (* scale: one fp32 product, rounded once, where scale != 1) */
void tt_cuda_embedding_forward(tt_bf16 *out, const int32_t *ids, const tt_bf16 *table, int64_t N, int64_t D,
                               float scale, cudaStream_t stream);

/* Deterministic embedding backward. The host sorts the batch once (tt_embedding_backward_order):
 * segment s covers positions order[starts[s] .. starts[s+1]-1], all with token ids[s]
 * (ascending positions); one block per segment adds them in that order:
 * dtable[token, :] += sum dout[position, :] * scale. dtable is fp32 when dtable_is_fp32, else bf16. */
void tt_cuda_embedding_backward(void *dtable, int dtable_is_fp32, const int32_t *order, const int32_t *starts,
                                const int32_t *segment_tokens, int64_t segments, const tt_bf16 *dout, int64_t D,
                                float scale, cudaStream_t stream);

/* Fixed-order reductions (kernels_reduce.cu). */
/* Rows per block of the column-sum partials. */
#define TT_CUDA_COLUMN_ROWS 64
/* Floats of scratch for column sums of an [R, C] matrix: ceil(R / rows) * C. */
int64_t tt_cuda_column_sum_scratch(int64_t R, int64_t C);
/* dst[C] += sum over rows of x[R, C] (the bias gradient), through per-row-block partials added in
 * block order; dst is fp32 when dst_is_fp32, else bf16. */
void tt_cuda_column_sum(void *dst, int dst_is_fp32, const tt_bf16 *x, int64_t R, int64_t C, float *scratch,
                        cudaStream_t stream);
/* dst[C] += sum_b partial[b, C] for b in order: the second half of every column reduction. */
void tt_cuda_add_column_partials(void *dst, int dst_is_fp32, const float *partial, int64_t blocks, int64_t C,
                                 cudaStream_t stream);
/* Blocks of the sum-of-squares partials, and the scratch (doubles) it needs. */
#define TT_CUDA_SUM_SQUARES_BLOCKS 1024
/* *sum = sum of x[i]^2 (x fp32 when x_is_fp32, else bf16), in double, in a fixed order. */
void tt_cuda_sum_squares(double *sum, const void *x, int x_is_fp32, int64_t n, double *scratch, cudaStream_t stream);
/* dst[i] = parts[0][i] + parts[1][i] + ... in that order (the parts n floats apart). */
void tt_cuda_sum_parts(float *dst, const float *parts, int count, int64_t n, cudaStream_t stream);
/* y[N, C] += b[C] (bias add after a GEMM) */
void tt_cuda_add_bias(tt_bf16 *y, const tt_bf16 *b, int64_t N, int64_t C, cudaStream_t stream);
/* out[n] = a[n] + b[n] */
void tt_cuda_add(tt_bf16 *out, const tt_bf16 *a, const tt_bf16 *b, int64_t n, cudaStream_t stream);
/* out[n] = x[n] * multiplier (fp32, one rounding) where tt_dropout_bits(seed, n) >= drop_threshold, else 0;
 * out may be x (kernels_elementwise.cu) */
/* x[n] += NEFTune noise of (seed, element) (dropout_mask.h: tt_uniform_noise), one bf16 rounding */
void tt_cuda_add_uniform_noise(tt_bf16 *x, int64_t n, float magnitude, uint64_t seed, cudaStream_t stream);
void tt_cuda_dropout_scale(tt_bf16 *out, const tt_bf16 *x, int64_t n, float multiplier, uint32_t drop_threshold,
                           uint64_t seed, cudaStream_t stream);

/* Causal grouped-query attention, O(T) memory, one warp per query row with an online softmax:
 * the simple fallback kernel (CUDA cores, no tensor cores), exact semantics of the CPU op.
 * out[B*T, Hq*hd] bf16, lse[B, Hq, T] fp32. head_dim <= 256. */
void tt_cuda_attention_forward(tt_bf16 *out, float *lse, const tt_bf16 *q, const tt_bf16 *k, const tt_bf16 *v,
                               const tt_attention_shape *shape, cudaStream_t stream);
/* Generation: out[n, Hq*hd] of n new queries at positions start.. over k_cache, v_cache [start + n, Hkv*hd]
 * (kernels_attention_cached.cu; the CPU op's rule). head_dim <= 256. scratch: where the key ranges' partial softmaxes
 * go when the keys are split (NULL: not split); scratch_bytes(Hq, hd) lets one token's be split as far as it goes. */
size_t tt_cuda_attention_cached_scratch_bytes(int64_t num_heads, int64_t head_dim);
void tt_cuda_attention_cached(tt_bf16 *out, const tt_bf16 *q, const tt_bf16 *k_cache, const tt_bf16 *v_cache,
                              int64_t start, int64_t n, const tt_attention_shape *shape, float *scratch,
                              size_t scratch_bytes, cudaStream_t stream);
/* dq, dk, dv overwritten; two deterministic passes (queries, then keys) that recompute P from
 * lse; scratch holds D[B, Hq, T] (fp32). */
void tt_cuda_attention_backward(tt_bf16 *dq, tt_bf16 *dk, tt_bf16 *dv, const tt_bf16 *dout, const tt_bf16 *out,
                                const float *lse, const tt_bf16 *q, const tt_bf16 *k, const tt_bf16 *v,
                                const tt_attention_shape *shape, float *scratch, cudaStream_t stream);

/* Cross-entropy over one chunk of LM-head logits, in place: with z = logits * logit_scale, soft-capped where
 * softcap > 0 (softcap * tanh(z / softcap)), for each row r with targets[r] != -100,
 * loss_r = logsumexp(z[r]) - z[r][targets[r]] (fp32 math), written to row_loss[r] (0 for ignored rows); logits[r]
 * is replaced by its gradient scale * (softmax - onehot) through the cap and the scale (zero for ignored rows),
 * ready for the two backward GEMMs. */
void tt_cuda_cross_entropy_chunk(tt_bf16 *logits, float *row_loss, const int32_t *targets, int64_t rows, int64_t V,
                                 float scale, float logit_scale, float softcap, cudaStream_t stream);
/* Sum of n floats in a fixed order (one block), written to *sum; for the loss. */
void tt_cuda_sum(double *sum, const float *values, int64_t n, cudaStream_t stream);

/* Segments per kernel launch of tt_cuda_adamw (more are split over several launches). */
#define TT_CUDA_ADAMW_SEGMENTS_PER_LAUNCH 512
/* AdamW as torch.optim.AdamW, multi-tensor: one launch updates elements [segment_start[0],
 * segment_start[segments]) of the flat parameter buffers, segment s ([segment_start[s],
 * segment_start[s + 1]), host arrays) with weight decay when segment_decays[s]. g is scaled by
 * grad_scale (clipping) first; m and v are fp32 (or bf16 when moments_bf16). With master != NULL
 * the fp32 master weights are updated and the result is also rounded into weight_bf16 (when not
 * NULL), the compute copy the forward reads; with master == NULL weight_bf16 itself is the
 * parameter (read, updated in fp32, rounded back). */
void tt_cuda_adamw(float *master, tt_bf16 *weight_bf16, const void *g, int g_is_fp32, void *m, void *v,
                   int moments_bf16, const int64_t *segment_start, const unsigned char *segment_decays, int segments,
                   float lr, float beta1, float beta2, float eps, float weight_decay, int64_t step, float grad_scale,
                   cudaStream_t stream);

/* bitsandbytes' 8-bit AdamW over tensors[count] (ops/adamw_8bit.h; host descriptors, their elements relative to
 * weight_bf16, master and g): the CPU backend's arithmetic bit for bit, one launch per tensor. With master the fp32
 * master is the parameter and weight_bf16 (when not NULL) receives it rounded; without, weight_bf16 is the parameter. */
void tt_cuda_adamw_8bit(float *master, tt_bf16 *weight_bf16, const void *g, int g_is_fp32,
                        const tt_adamw_8bit_moment *m, const tt_adamw_8bit_moment *v,
                        const tt_adamw_8bit_tensor *tensors, int count, const tt_adamw_8bit_scalars *k,
                        const tt_adamw_8bit_maps *maps, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

/* Host side of the embedding backward: a stable counting sort of positions by token id.
 * order[N], starts[N+1], segment_tokens[N]; returns the number of segments. */
int64_t tt_embedding_backward_order(const int32_t *ids, int64_t N, int64_t vocab, int32_t *order, int32_t *starts,
                                    int32_t *segment_tokens, int32_t *counts_scratch);

#endif
