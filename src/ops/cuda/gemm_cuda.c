#include "ops/cuda/gemm_cuda.h"

#include <cublasLt.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "ops/cuda/cuda_check.h"

#define TT_CUBLAS_CHECK(call)                                                                      \
    do {                                                                                           \
        cublasStatus_t tt_cublas_status = (call);                                                  \
        if (tt_cublas_status != CUBLAS_STATUS_SUCCESS)                                             \
            tt_check_failed(__FILE__, __LINE__, #call, "cuBLAS status %d", (int)tt_cublas_status); \
    } while (0)

/* Everything cuBLASLt needs for one shape, built once. */
typedef struct gemm_plan {
    bool trans_a, trans_b, c_is_fp32;
    int64_t M, N, K, lda, ldb, ldc;
    cublasLtMatmulDesc_t operation;
    cublasLtMatrixLayout_t layout_a, layout_b, layout_c; /* in cuBLASLt's column-major terms */
    cublasLtMatmulAlgo_t algorithm;
} gemm_plan;

#define MAX_CACHED_SHAPES 256

struct tt_cuda_gemm_context {
    cublasLtHandle_t handle;
    void *workspace;
    size_t workspace_bytes;
    gemm_plan plans[MAX_CACHED_SHAPES];
    int plan_count;
};

tt_cuda_gemm_context *tt_cuda_gemm_create(void *workspace, size_t workspace_bytes) {
    tt_cuda_gemm_context *c = tt_xcalloc(1, sizeof(*c), "GEMM context");
    TT_CUBLAS_CHECK(cublasLtCreate(&c->handle));
    c->workspace = workspace;
    c->workspace_bytes = workspace_bytes;
    return c;
}

void tt_cuda_gemm_destroy(tt_cuda_gemm_context *c) {
    if (!c) return;
    for (int i = 0; i < c->plan_count; i++) {
        cublasLtMatmulDescDestroy(c->plans[i].operation);
        cublasLtMatrixLayoutDestroy(c->plans[i].layout_a);
        cublasLtMatrixLayoutDestroy(c->plans[i].layout_b);
        cublasLtMatrixLayoutDestroy(c->plans[i].layout_c);
    }
    cublasLtDestroy(c->handle);
    free(c);
}

int tt_cuda_gemm_cached_shapes(const tt_cuda_gemm_context *c) { return c->plan_count; }

/* What an algorithm may use: the context's workspace, and split-K partial sums only through a workspace buffer
 * reduced in a fixed order, never added in place into the output (the same inputs give the same bits). The
 * caller destroys it. */
static cublasLtMatmulPreference_t algorithm_preference(const tt_cuda_gemm_context *c) {
    cublasLtMatmulPreference_t preference;
    TT_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference));
    TT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                         &c->workspace_bytes, sizeof c->workspace_bytes));
    const uint32_t reductions =
        CUBLASLT_REDUCTION_SCHEME_NONE | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE | CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE;
    TT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                                         &reductions, sizeof reductions));
    return preference;
}

/* Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: cuBLASLt's first operand is
 * our B, its second our A, and its output is [N, M] with leading dimension ldc. */
static gemm_plan *find_or_build_plan(tt_cuda_gemm_context *c, bool trans_a, bool trans_b, int64_t M, int64_t N,
                                     int64_t K, int64_t lda, int64_t ldb, int64_t ldc, bool c_is_fp32) {
    for (int i = 0; i < c->plan_count; i++) {
        gemm_plan *p = &c->plans[i];
        if (p->trans_a == trans_a && p->trans_b == trans_b && p->M == M && p->N == N && p->K == K && p->lda == lda &&
            p->ldb == ldb && p->ldc == ldc && p->c_is_fp32 == c_is_fp32)
            return p;
    }
    TT_CHECK(c->plan_count < MAX_CACHED_SHAPES, "more than %d GEMM shapes", MAX_CACHED_SHAPES);
    gemm_plan *p = &c->plans[c->plan_count];
    memset(p, 0, sizeof(*p));
    *p = (gemm_plan){.trans_a = trans_a,
                     .trans_b = trans_b,
                     .c_is_fp32 = c_is_fp32,
                     .M = M,
                     .N = N,
                     .K = K,
                     .lda = lda,
                     .ldb = ldb,
                     .ldc = ldc};
    TT_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->operation, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t op_first = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, op_second = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    TT_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(p->operation, CUBLASLT_MATMUL_DESC_TRANSA, &op_first, sizeof op_first));
    TT_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(p->operation, CUBLASLT_MATMUL_DESC_TRANSB, &op_second, sizeof op_second));
    /* stored shapes, column-major: our B is [N, K] (or [K, N] when transposed), our A [K, M] (or [M, K]) */
    TT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->layout_a, CUDA_R_16BF, (uint64_t)(trans_b ? K : N),
                                               (uint64_t)(trans_b ? N : K), ldb));
    TT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->layout_b, CUDA_R_16BF, (uint64_t)(trans_a ? M : K),
                                               (uint64_t)(trans_a ? K : M), lda));
    TT_CUBLAS_CHECK(
        cublasLtMatrixLayoutCreate(&p->layout_c, c_is_fp32 ? CUDA_R_32F : CUDA_R_16BF, (uint64_t)N, (uint64_t)M, ldc));

    cublasLtMatmulPreference_t preference = algorithm_preference(c);
    cublasLtMatmulHeuristicResult_t result;
    int found = 0;
    TT_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(c->handle, p->operation, p->layout_a, p->layout_b, p->layout_c,
                                                   p->layout_c, preference, 1, &result, &found));
    cublasLtMatmulPreferenceDestroy(preference);
    TT_CHECK(found > 0, "cuBLASLt has no algorithm for a %lld x %lld x %lld GEMM", (long long)M, (long long)N,
             (long long)K);
    p->algorithm = result.algo;
    c->plan_count++;
    return p;
}

void tt_cuda_gemm(tt_cuda_gemm_context *c, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                  const tt_bf16 *A, int64_t lda, const tt_bf16 *B, int64_t ldb, float beta, void *C, bool c_is_fp32,
                  int64_t ldc, cudaStream_t stream) {
    if (M == 0 || N == 0) return;
    gemm_plan *p = find_or_build_plan(c, trans_a, trans_b, M, N, K, lda, ldb, ldc, c_is_fp32);
    TT_CUBLAS_CHECK(cublasLtMatmul(c->handle, p->operation, &alpha, B, p->layout_a, A, p->layout_b, &beta, C,
                                   p->layout_c, C, p->layout_c, &p->algorithm, c->workspace, c->workspace_bytes,
                                   stream));
}

void tt_cuda_gemm_add(tt_cuda_gemm_context *c, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                      const tt_bf16 *A, int64_t lda, const tt_bf16 *B, int64_t ldb, const tt_bf16 *addend, tt_bf16 *D,
                      int64_t ldd, cudaStream_t stream) {
    if (M == 0 || N == 0) return;
    gemm_plan *p = find_or_build_plan(c, trans_a, trans_b, M, N, K, lda, ldb, ldd, false);
    const float alpha = 1.0f, beta = addend ? 1.0f : 0.0f;
    TT_CUBLAS_CHECK(cublasLtMatmul(c->handle, p->operation, &alpha, B, p->layout_a, A, p->layout_b, &beta,
                                   addend ? (const void *)addend : (const void *)D, p->layout_c, D, p->layout_c,
                                   &p->algorithm, c->workspace, c->workspace_bytes, stream));
}

int tt_cuda_gemm_probe(tt_cuda_gemm_context *c, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                       const tt_bf16 *A, int64_t lda, const tt_bf16 *B, int64_t ldb, const tt_bf16 *addend, tt_bf16 *D,
                       tt_bf16 *D_first, int64_t ldd, int count, int reps, float *ms, bool *same_bits, int *split_k) {
    gemm_plan *p = find_or_build_plan(c, trans_a, trans_b, M, N, K, lda, ldb, ldd, false);
    cublasLtMatmulPreference_t preference = algorithm_preference(c);
    cublasLtMatmulHeuristicResult_t *results = tt_xcalloc((size_t)count, sizeof *results, "GEMM probe");
    int found = 0;
    TT_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(c->handle, p->operation, p->layout_a, p->layout_b, p->layout_c,
                                                   p->layout_c, preference, count, results, &found));
    cublasLtMatmulPreferenceDestroy(preference);
    const size_t bytes = (size_t)M * (size_t)ldd * sizeof(tt_bf16);
    tt_bf16 *host_first = tt_xmalloc(bytes, "GEMM probe"), *host = tt_xmalloc(bytes, "GEMM probe");
    cudaEvent_t start, stop;
    TT_CUDA_CHECK(cudaEventCreate(&start));
    TT_CUDA_CHECK(cudaEventCreate(&stop));
    const float alpha = 1.0f, beta = addend ? 1.0f : 0.0f;
    for (int i = 0; i < found; i++) {
        int splits = 1;
        size_t written = 0;
        cublasLtMatmulAlgoConfigGetAttribute(&results[i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splits, sizeof splits,
                                             &written);
        split_k[i] = splits;
        tt_bf16 *out = i == 0 ? D_first : D;
        for (int r = 0; r <= reps; r++) {
            if (r == 1) TT_CUDA_CHECK(cudaEventRecord(start, 0));
            TT_CUBLAS_CHECK(cublasLtMatmul(c->handle, p->operation, &alpha, B, p->layout_a, A, p->layout_b, &beta,
                                           addend ? (const void *)addend : (const void *)out, p->layout_c, out,
                                           p->layout_c, &results[i].algo, c->workspace, c->workspace_bytes, 0));
        }
        TT_CUDA_CHECK(cudaEventRecord(stop, 0));
        TT_CUDA_CHECK(cudaEventSynchronize(stop));
        TT_CUDA_CHECK(cudaEventElapsedTime(&ms[i], start, stop));
        ms[i] /= (float)reps;
        TT_CUDA_CHECK(cudaMemcpy(i == 0 ? host_first : host, out, bytes, cudaMemcpyDeviceToHost));
        same_bits[i] = i == 0 || memcmp(host, host_first, bytes) == 0;
    }
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    free(host);
    free(host_first);
    free(results);
    return found;
}
