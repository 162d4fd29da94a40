/* tiertrain's tensor-core flash attention (FlashAttention-2 style) for sm_90a: causal
 * grouped-query attention with the exact semantics of tt_cuda_attention_forward/backward
 * (src/ops/cuda/ops_cuda.h, src/ops/backend.h): q[B*T, Hq*hd], k, v[B*T, Hkv*hd] bf16; key j is
 * visible to query i iff j <= i (and, with packed documents, s->positions != NULL, iff also
 * j >= i - positions[i], the first token of i's document); query head h reads kv head h / (Hq / Hkv); out[B*T, Hq*hd]
 * bf16; lse[B, Hq, T] fp32 is the natural-log log-sum-exp of the scaled scores. bf16 operands,
 * fp32 accumulation and softmax. The backward is deterministic (no atomics, fixed summation
 * order, GQA heads summed in head order). All pointers are device pointers, 16-byte aligned;
 * every call is asynchronous on `stream`. */
#ifndef TT_OPS_CUDA_ATTENTION_FLASH_H
#define TT_OPS_CUDA_ATTENTION_FLASH_H

#include <stddef.h>

#include <cuda_runtime_api.h>

#include "ops/backend.h"       /* tt_attention_shape */
#include "ops/cuda/ops_cuda.h" /* tt_bf16 */

#ifdef __cplusplus
extern "C" {
#endif

/* True when these kernels handle the shape: head_dim 64 or 128, num_heads a multiple of
 * num_kv_heads, no sliding window. */
int tt_cuda_flash_attention_supported(const tt_attention_shape *s);

void tt_cuda_flash_attention_forward(tt_bf16 *out, float *lse, const tt_bf16 *q, const tt_bf16 *k, const tt_bf16 *v,
                                     const tt_attention_shape *s, cudaStream_t stream);

/* Bytes of device scratch the backward needs: D[B, Hq, T] = rowsum(dout * out), fp32. */
size_t tt_cuda_flash_attention_backward_scratch_bytes(const tt_attention_shape *s);

/* dq, dk, dv overwritten. P is recomputed from lse. */
void tt_cuda_flash_attention_backward(tt_bf16 *dq, tt_bf16 *dk, tt_bf16 *dv, const tt_bf16 *dout, const tt_bf16 *out,
                                      const float *lse, const tt_bf16 *q, const tt_bf16 *k, const tt_bf16 *v,
                                      const tt_attention_shape *s, void *scratch, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
