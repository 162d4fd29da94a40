/* Row-major GEMMs on cuBLASLt: bf16 inputs, fp32 accumulation, bf16 or fp32 output.
 * Descriptors and the chosen algorithm are cached per shape; the workspace is the caller's
 * (a slice of the gpu arena), so a GEMM never allocates. */
#ifndef TT_OPS_CUDA_GEMM_CUDA_H
#define TT_OPS_CUDA_GEMM_CUDA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "ops/cuda/ops_cuda.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tt_cuda_gemm_context tt_cuda_gemm_context;

/* Workspace cuBLASLt may use for one GEMM (Hopper kernels want 32 MiB). */
#define TT_CUDA_GEMM_WORKSPACE_BYTES ((size_t)32 << 20)

tt_cuda_gemm_context *tt_cuda_gemm_create(void *workspace, size_t workspace_bytes);
void tt_cuda_gemm_destroy(tt_cuda_gemm_context *context);

/* C[M,N] = alpha op(A)[M,K] op(B)[K,N] + beta C, all row-major with leading dimensions lda,
 * ldb, ldc (op = transpose when trans_*). A and B are bf16; C is fp32 when c_is_fp32, else bf16.
 * beta 0 overwrites C (NaN in C does not propagate), beta 1 accumulates. */
void tt_cuda_gemm(tt_cuda_gemm_context *context, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                  float alpha, const tt_bf16 *A, int64_t lda, const tt_bf16 *B, int64_t ldb, float beta, void *C,
                  bool c_is_fp32, int64_t ldc, cudaStream_t stream);

/* D[M,N] = op(A) op(B) + addend (bf16; addend may be NULL): the residual add in the GEMM's
 * epilogue, with the input and output in different buffers. */
void tt_cuda_gemm_add(tt_cuda_gemm_context *context, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                      const tt_bf16 *A, int64_t lda, const tt_bf16 *B, int64_t ldb, const tt_bf16 *addend, tt_bf16 *D,
                      int64_t ldd, cudaStream_t stream);

/* Diagnostics (`test_gpu_kernels --gemm-probe`): the heuristic's first `count` algorithms for the shape of a
 * tt_cuda_gemm_add call (the first is the one tt_cuda_gemm_add uses), each timed over `reps` calls into D
 * (ms[i]: per call), with whether its output has the first one's bits (D_first receives the first one's output)
 * and its split-K factor. Returns how many the heuristic offered. */
int tt_cuda_gemm_probe(tt_cuda_gemm_context *context, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                       const tt_bf16 *A, int64_t lda, const tt_bf16 *B, int64_t ldb, const tt_bf16 *addend, tt_bf16 *D,
                       tt_bf16 *D_first, int64_t ldd, int count, int reps, float *ms, bool *same_bits, int *split_k);

/* Number of shapes in the descriptor cache (for tests). */
int tt_cuda_gemm_cached_shapes(const tt_cuda_gemm_context *context);

#ifdef __cplusplus
}
#endif

#endif
