/* The CPU backend's fp32 GEMM, the oracle's own (not a BLAS): C[M,N] from op(A)[M,K] op(B)[K,N],
 * row-major, op = transpose or not.
 *
 * Every element of C is one sum over k = 0, 1, ..., K-1 in that order, each term added with one
 * fused multiply-add (acc = fmaf(a_k, b_k, acc): one rounding), from a start that `mode` sets. The
 * vector and the scalar paths run the same fmaf per element, and blocking over K keeps the sum
 * where it is between blocks, so an element's bits depend only on its row of op(A), its column of
 * op(B) and its start: never on where it sits in the matrix, the thread count or the blocking.
 * That is the oracle's promise for packed documents: a document's rows get the bits they get at
 * any other row (OpenBLAS rounds a row by its position in the matrix: its edge kernels and
 * panels), and a reduction over tokens (a weight gradient, K = tokens) continued over several
 * calls in token order gives the bits of one call over all of them. */
#ifndef TT_OPS_CPU_GEMM_CPU_H
#define TT_OPS_CPU_GEMM_CPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ops/cpu/ops_cpu.h"

/* Where each element's sum starts and where it goes. */
typedef enum tt_cpu_gemm_mode {
    TT_CPU_GEMM_SET,      /* C = sum_k a_k b_k, from 0 (C is overwritten, even where it held NaN) */
    TT_CPU_GEMM_ADD,      /* C = C + (sum_k a_k b_k): the sum from 0, then one add (a residual, a bias, dx += ...) */
    TT_CPU_GEMM_CONTINUE, /* C = (((C + a_0 b_0) + a_1 b_1) + ...): the sum goes on from C's own value (weight
                             gradients over tokens: a batch cut into consecutive calls gives the bits of one) */
} tt_cpu_gemm_mode;

/* C[M,N] (ldc) per `mode` from A (op(A) = A[M,K] with lda, or A[K,M] transposed) and B (op(B) = B[K,N]
 * with ldb, or B[N,K] transposed). Called outside OpenMP parallel regions: it runs its tiles of C on
 * OpenMP's threads, each with its packing buffers from scratch (NULL: allocated). */
void tt_cpu_gemm_f32(tt_cpu_scratch *scratch, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                     const float *A, int64_t lda, const float *B, int64_t ldb, float *C, int64_t ldc,
                     tt_cpu_gemm_mode mode);

/* The scratch one call takes on `threads` threads, whatever its shape. */
size_t tt_cpu_gemm_scratch_bytes(int threads);

#endif
