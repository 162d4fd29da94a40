/* Causal grouped-query attention through cuDNN's fused flash-attention engines (C backend API), with a sliding
 * window and soft-capping where the shape has them (tt_attention_shape).
 *
 * cuDNN 9.x has no causal attribute on a single SDPA node, so this builds the operation graphs
 * that cuDNN's fused engines pattern-match (the graphs cudnn-frontend lowers its SDPA nodes to):
 * matmul, scale, a causal mask from generated row/column indices, softmax through max/exp/sum and
 * the saved log-sum-exp, and the second matmul; the backward graph recomputes the probabilities
 * from that log-sum-exp. Both execution plans are built once per shape.
 *
 * Semantics, shapes and layouts are those of attention_forward / attention_backward in
 * src/ops/backend.h: q, out [B*T, Hq*hd] and k, v [B*T, Hkv*hd] token-major bf16; lse [B, Hq, T]
 * fp32 = natural-log log-sum-exp of the scaled scores; key j visible to query i iff j <= i; query
 * head h reads kv head h / (Hq / Hkv); dq, dk, dv overwritten. fp32 accumulation throughout.
 * All pointers are device pointers; calls are asynchronous on `stream`. */
#ifndef TT_OPS_CUDA_ATTENTION_CUDNN_H
#define TT_OPS_CUDA_ATTENTION_CUDNN_H

#include <stddef.h>

#include <cuda_runtime_api.h>

#include "ops/cuda/ops_cuda.h" /* tt_bf16, tt_attention_shape */

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tt_cudnn_attention tt_cudnn_attention;

/* The most head groups the deterministic backward runs at once (see tt_cudnn_attention_backward). */
#define TT_CUDNN_ATTENTION_MAX_LANES 8

/* Builds the forward (training mode: it writes lse) and backward plans for one shape, with its own
 * cuDNN handle on the current device. deterministic_backward asks for the backward graph whose dQ
 * is written without atomics (on Hopper that engine keeps a [B, heads, T, T] bf16 dP in the
 * workspace: it runs on groups of kv heads whose dP fits dp_limit bytes per call; when one kv head's
 * group does not fit, on one kv head's group at a time over chunks of keys: chunk [k0, k0 + C)
 * against queries [k0, T) (top-left causal again), C as large as the limit allows, so each
 * (with a sliding window, only the queries that see one of the chunk's keys), so each
 * chunk's dK and dV are whole and its dQ is the contribution of its keys, added over the chunks
 * in order in fp32 and rounded to bf16 once; refused, with the reason, when T % 128 != 0 or even
 * 128 keys do not fit). Returns NULL, with a one-line reason in why_not,
 * when this device's cuDNN cannot run the shape (cuDNN too old, no engine, head_dim unsupported,
 * sliding_window != 0, ...). */
tt_cudnn_attention *tt_cudnn_attention_create(const tt_attention_shape *s, int deterministic_backward, size_t dp_limit,
                                              char *why_not, size_t why_not_size);

/* Device workspace bytes that forward and backward need (the larger of the two), including the
 * fp32 scratch tensors the backward graph keeps there. */
size_t tt_cudnn_attention_workspace_bytes(const tt_cudnn_attention *a);

/* Bytes each further lane adds to the backward's workspace; 0 when the backward runs one call at a
 * time whatever its workspace (one head group, or the atomic graph). */
size_t tt_cudnn_attention_lane_bytes(const tt_cudnn_attention *a);

/* How many head groups a backward given workspace_bytes runs at once (0: not enough workspace). */
int tt_cudnn_attention_lanes_for(const tt_cudnn_attention *a, size_t workspace_bytes);

/* The most head groups a backward of this plan ran at once so far (0: none ran). */
int tt_cudnn_attention_most_lanes(const tt_cudnn_attention *a);

/* Device workspace bytes of the forward alone (for a run that takes only the forward from cuDNN). */
size_t tt_cudnn_attention_forward_workspace_bytes(const tt_cudnn_attention *a);

/* Whether the backward plan is deterministic as far as cuDNN says: the deterministic graph was
 * asked for and built, and the chosen engine does not carry cuDNN's NONDETERMINISTIC note. */
int tt_cudnn_attention_backward_is_deterministic(const tt_cudnn_attention *a);

/* One line naming the engines and workspaces chosen, for logs. */
const char *tt_cudnn_attention_describe(const tt_cudnn_attention *a);
/* The same, of the forward alone (for a run that takes only the forward from cuDNN). */
const char *tt_cudnn_attention_describe_forward(const tt_cudnn_attention *a);

void tt_cudnn_attention_forward(tt_cudnn_attention *a, tt_bf16 *out, float *lse, const tt_bf16 *q, const tt_bf16 *k,
                                const tt_bf16 *v, void *workspace, cudaStream_t stream);

/* workspace_bytes: at least tt_cudnn_attention_workspace_bytes(a); each tt_cudnn_attention_lane_bytes(a)
 * beyond it, and each in spare (spare_bytes of device memory whose contents are dead for the call; NULL:
 * none), lets one more head group run at the same time, on a stream of its own forked from and joined
 * back into `stream` (the groups' calls are the same, so the bits are too). */
void tt_cudnn_attention_backward(tt_cudnn_attention *a, tt_bf16 *dq, tt_bf16 *dk, tt_bf16 *dv, const tt_bf16 *dout,
                                 const tt_bf16 *out, const float *lse, const tt_bf16 *q, const tt_bf16 *k,
                                 const tt_bf16 *v, void *workspace, size_t workspace_bytes, void *spare,
                                 size_t spare_bytes, cudaStream_t stream);

void tt_cudnn_attention_destroy(tt_cudnn_attention *a);

/* Kernels of the key-chunked deterministic backward (kernels_attention_chunks.cu). acc fp32, partial
 * bf16, [B, T, width], rows row0..row0+rows-1 of the partial valid: there acc = partial (first) or acc += partial,
 * in fp32; then dq rows (row stride dq_row_stride) = bf16(acc), rows = B * T. */
void tt_cuda_dq_chunk_accumulate(float *acc, const tt_bf16 *partial, int64_t B, int64_t T, int64_t row0, int64_t rows,
                                 int64_t width, int first, cudaStream_t stream);
void tt_cuda_dq_chunk_store(tt_bf16 *dq, int64_t dq_row_stride, const float *acc, int64_t rows, int64_t width,
                            cudaStream_t stream);

/* "9.14.0 (built against 9.19.0)": the cuDNN library loaded at run time, and the headers; written
 * into text, which it returns. */
const char *tt_cudnn_version_string(char *text, size_t size);

#ifdef __cplusplus
}
#endif

#endif
