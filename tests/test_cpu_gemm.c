/* The CPU backend's own fp32 GEMM (src/ops/cpu/gemm_cpu.h) against its definition, bit for bit: every element
 * of C is fmaf(a_k, b_k, acc) for k = 0..K-1 in order, from 0 (SET, ADD: then one add onto C) or from C (CONTINUE),
 * computed here by a plain loop. Shapes on both sides of the tile's rows (96), columns (128) and depth (256), odd
 * sizes for the micro-kernel's 6 x 16 edges, strided operands, all four transpositions; thread counts 1 and 3
 * give the same bits; and the promise the oracle rests on: a row of A moved to another row of the matrix gives
 * its row of C the same bits, and K cut into two calls, the second continuing the first, gives the bits of one. */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "core/rng.h"
#include "ops/cpu/gemm_cpu.h"
#include "test_util.h"

static float *random_floats(tt_rng *rng, int64_t n) {
    float *x = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    for (int64_t i = 0; i < n; i++) x[i] = (float)((double)(tt_rng_next(rng) >> 11) / 9007199254740992.0 * 2 - 1);
    return x;
}

/* op(A)[m, k] and op(B)[k, n] of the row-major operands. */
static float at_a(const float *A, bool trans, int64_t lda, int64_t m, int64_t k) {
    return trans ? A[k * lda + m] : A[m * lda + k];
}
static float at_b(const float *B, bool trans, int64_t ldb, int64_t k, int64_t n) {
    return trans ? B[n * ldb + k] : B[k * ldb + n];
}

/* The definition, one element at a time. */
static void reference_gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                           const float *B, int64_t ldb, float *C, int64_t ldc, tt_cpu_gemm_mode mode) {
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            float acc = mode == TT_CPU_GEMM_CONTINUE ? C[m * ldc + n] : 0.0f;
            for (int64_t k = 0; k < K; k++) acc = fmaf(at_a(A, trans_a, lda, m, k), at_b(B, trans_b, ldb, k, n), acc);
            C[m * ldc + n] = mode == TT_CPU_GEMM_ADD ? C[m * ldc + n] + acc : acc;
        }
}

static const char *const mode_names[] = {"set", "add", "continue"};

static void check_shape(tt_rng *rng, int64_t M, int64_t N, int64_t K) {
    for (int t = 0; t < 4; t++) {
        const bool trans_a = t & 1, trans_b = t & 2;
        /* leading dimensions a little past the rows, so that strides matter */
        const int64_t lda = (trans_a ? M : K) + 3, ldb = (trans_b ? K : N) + 5, ldc = N + 2;
        float *A = random_floats(rng, (trans_a ? K : M) * lda), *B = random_floats(rng, (trans_b ? N : K) * ldb);
        float *start = random_floats(rng, M * ldc);
        for (int mode = TT_CPU_GEMM_SET; mode <= TT_CPU_GEMM_CONTINUE; mode++) {
            float *want = malloc(sizeof(float) * (size_t)(M * ldc)), *got = malloc(sizeof(float) * (size_t)(M * ldc));
            memcpy(want, start, sizeof(float) * (size_t)(M * ldc));
            memcpy(got, start, sizeof(float) * (size_t)(M * ldc));
            if (mode == TT_CPU_GEMM_SET)
                for (int64_t i = 0; i < M * ldc; i++) got[i] = NAN; /* SET overwrites whatever C held */
            reference_gemm(trans_a, trans_b, M, N, K, A, lda, B, ldb, want, ldc, (tt_cpu_gemm_mode)mode);
            bool same = true;
            for (int threads = 1; threads <= 3; threads += 2) {
                float *run = malloc(sizeof(float) * (size_t)(M * ldc));
                memcpy(run, got, sizeof(float) * (size_t)(M * ldc));
                omp_set_num_threads(threads);
                tt_cpu_gemm_f32(NULL, trans_a, trans_b, M, N, K, A, lda, B, ldb, run, ldc, (tt_cpu_gemm_mode)mode);
                for (int64_t m = 0; m < M; m++)
                    same = same && memcmp(run + m * ldc, want + m * ldc, sizeof(float) * (size_t)N) == 0;
                free(run);
            }
            TT_EXPECT(same, "%lld x %lld x %lld, trans_a %d trans_b %d, %s: the definition's bits on 1 and 3 threads",
                      (long long)M, (long long)N, (long long)K, trans_a, trans_b, mode_names[mode]);
            free(want);
            free(got);
        }
        free(A);
        free(B);
        free(start);
    }
}

/* A row of op(A) placed at rows 0, 5, 97 and 150 of a 160-row matrix (other rows random) gets the same row of C;
 * the depth cut at 131 and at 300, the second call continuing the first, gives one call's bits. */
static void check_row_moves_and_depth_cuts(tt_rng *rng) {
    const int64_t M = 160, N = 200, K = 333;
    float *A = random_floats(rng, M * K), *B = random_floats(rng, N * K), *row = random_floats(rng, K);
    float *C = malloc(sizeof(float) * (size_t)(M * N)), *first = malloc(sizeof(float) * (size_t)N);
    const int64_t places[] = {0, 5, 97, 150};
    bool same = true;
    for (int p = 0; p < 4; p++) {
        memcpy(A + places[p] * K, row, sizeof(float) * (size_t)K);
        tt_cpu_gemm_f32(NULL, false, true, M, N, K, A, K, B, K, C, N, TT_CPU_GEMM_SET);
        if (p == 0) memcpy(first, C, sizeof(float) * (size_t)N);
        same = same && memcmp(first, C + places[p] * N, sizeof(float) * (size_t)N) == 0;
    }
    TT_EXPECT(same, "a row of A at rows 0, 5, 97 and 150 gives its row of C the same bits");

    /* weight-gradient shape: C[M=N_out, N=in] continues over tokens k (op(A) = dy^T, A stored [K, M]) */
    float *dy = random_floats(rng, K * M), *x = random_floats(rng, K * N);
    float *whole = random_floats(rng, M * N), *cut = malloc(sizeof(float) * (size_t)(M * N));
    const int64_t cuts[] = {131, 300};
    for (int c = 0; c < 2; c++) {
        memcpy(cut, whole, sizeof(float) * (size_t)(M * N));
        float *once = malloc(sizeof(float) * (size_t)(M * N));
        memcpy(once, whole, sizeof(float) * (size_t)(M * N));
        tt_cpu_gemm_f32(NULL, true, false, M, N, K, dy, M, x, N, once, N, TT_CPU_GEMM_CONTINUE);
        tt_cpu_gemm_f32(NULL, true, false, M, N, cuts[c], dy, M, x, N, cut, N, TT_CPU_GEMM_CONTINUE);
        tt_cpu_gemm_f32(NULL, true, false, M, N, K - cuts[c], dy + cuts[c] * M, M, x + cuts[c] * N, N, cut, N,
                        TT_CPU_GEMM_CONTINUE);
        TT_EXPECT(memcmp(once, cut, sizeof(float) * (size_t)(M * N)) == 0,
                  "the tokens cut at %lld into two continuing calls: one call's bits", (long long)cuts[c]);
        free(once);
    }
    free(A), free(B), free(row), free(C), free(first), free(dy), free(x), free(whole), free(cut);
}

int main(void) {
    tt_rng rng;
    tt_rng_seed(&rng, 2024);
    const int saved_threads = omp_get_max_threads();
    /* M x N x K; the last one large enough to run its tiles on several threads */
    const int64_t shapes[][3] = {{1, 1, 1},      {5, 7, 3},      {6, 16, 1},     {7, 17, 0},     {95, 127, 255},
                                 {97, 129, 257}, {200, 300, 40}, {13, 260, 520}, {250, 300, 100}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        check_shape(&rng, shapes[s][0], shapes[s][1], shapes[s][2]);
    omp_set_num_threads(saved_threads);
    check_row_moves_and_depth_cuts(&rng);
    return tt_test_summary("cpu_gemm");
}
