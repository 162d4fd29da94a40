/* tiertrain's Hopper attention (sm_90a: warpgroup MMA): forward and deterministic backward with the semantics of
 * tt_cuda_flash_attention_forward/backward (attention_flash.h) for head_dim 64 and 128: causal, grouped-query heads,
 * packed documents (tt_attention_shape.positions). Asynchronous on `stream`; pointers are
 * device pointers, 16-byte aligned. */
#ifndef TT_OPS_CUDA_ATTENTION_HOPPER_H
#define TT_OPS_CUDA_ATTENTION_HOPPER_H

#include <stdbool.h>
#include <stddef.h>

#include <cuda_runtime_api.h>

#include "ops/backend.h"       /* tt_attention_shape */
#include "ops/cuda/ops_cuda.h" /* tt_bf16 */

#ifdef __cplusplus
extern "C" {
#endif

/* True for head_dim 64 or 128, no sliding window, num_heads a multiple of num_kv_heads (the ordered dQ schedules:
 * head_dim 128 only). */
int tt_cuda_hopper_attention_supported(const tt_attention_shape *s);

/* out[B*T, Hq*hd] bf16 and lse[B, Hq, T] fp32 (natural log) from q[B*T, Hq*hd], k, v[B*T, Hkv*hd] bf16. */
void tt_cuda_hopper_attention_forward(tt_bf16 *out, float *lse, const tt_bf16 *q, const tt_bf16 *k, const tt_bf16 *v,
                                      const tt_attention_shape *s, cudaStream_t stream);

/* The same forward (the same bits) through FlashAttention-3's pipeline: a producer warpgroup loading with TMA, two
 * consumer warpgroups taking turns at the tensor cores (kernels_attention_hopper_tma.cu). */
void tt_cuda_hopper_attention_forward_pipelined(tt_bf16 *out, float *lse, const tt_bf16 *q, const tt_bf16 *k,
                                                const tt_bf16 *v, const tt_attention_shape *s, cudaStream_t stream);

/* The backwards' first kernel: D[B, Hq, T] = rowsum(dout * out) in fp32 (a fixed shuffle tree a row). */
void tt_cuda_hopper_attention_dot(float *D, const tt_bf16 *dout, const tt_bf16 *out, const tt_attention_shape *s,
                                  cudaStream_t stream);

/* The backward through the pipeline of the pipelined forward: a producer warpgroup loading with TMA, two consumer
 * warpgroups (three in the dQ kernel). Without ordered_dq, dQ's own kernel: the bits of
 * tt_cuda_hopper_attention_backward's dQ-kernel schedule (head_dim 64 or 128). With ordered_dq (head_dim 128), each
 * key block's share of dQ is added in key order by a writer thread (bulk reductions, turn counters) and no dQ kernel
 * runs: 5 products a step instead of 7, its own fixed-order bits. */
size_t tt_cuda_hopper_attention_backward_pipelined_scratch_bytes(const tt_attention_shape *s, bool ordered_dq);

void tt_cuda_hopper_attention_backward_pipelined(tt_bf16 *dq, tt_bf16 *dk, tt_bf16 *dv, const tt_bf16 *dout,
                                                 const tt_bf16 *out, const float *lse, const tt_bf16 *q,
                                                 const tt_bf16 *k, const tt_bf16 *v, const tt_attention_shape *s,
                                                 void *scratch, size_t scratch_bytes, bool ordered_dq,
                                                 cudaStream_t stream);

/* Bytes of device scratch the backward needs at least: D[B, Hq, T] = rowsum(dout * out), fp32. dQ then has a kernel
 * of its own that recomputes S and dP (7 products a step). */
size_t tt_cuda_hopper_attention_backward_scratch_bytes(const tt_attention_shape *s);

/* Bytes of the cp.async ordered schedule's scratch: D, dQ in fp32 (B * Hq * T * 128 floats) and a turn counter per 64 queries of
 * each head; the dK/dV kernel adds each key block's share of dQ in key order (5 products a step). */
size_t tt_cuda_hopper_attention_backward_ordered_scratch_bytes(const tt_attention_shape *s);

/* dq, dk, dv overwritten; P recomputed from lse. ordered_dq picks the schedule (scratch_bytes must hold its scratch);
 * either way every element is a fixed-order sum: the same bits every run for the same schedule. */
void tt_cuda_hopper_attention_backward(tt_bf16 *dq, tt_bf16 *dk, tt_bf16 *dv, const tt_bf16 *dout, const tt_bf16 *out,
                                       const float *lse, const tt_bf16 *q, const tt_bf16 *k, const tt_bf16 *v,
                                       const tt_attention_shape *s, void *scratch, size_t scratch_bytes,
                                       bool ordered_dq, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
