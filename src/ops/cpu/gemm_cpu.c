/* The oracle's fp32 GEMM (gemm_cpu.h): every element one fmaf per k, in k order, from its start.
 *
 * The work: C is cut into fixed tiles of GEMM_ROWS x GEMM_COLS (constants: the cut never depends on
 * the thread count), each computed by one OpenMP thread. A tile runs over K in blocks of GEMM_DEPTH:
 * it packs its rows of op(A) into panels of GEMM_MR rows ([k][GEMM_MR]) and its columns of op(B) into
 * panels of GEMM_NR columns ([k][GEMM_NR]), zero-padded to whole panels, and the micro-kernel adds
 * one k after another into a GEMM_MR x GEMM_NR block of the tile's accumulator, which holds every
 * element's running sum from its start to the end of K (so the K blocks only decide when memory is
 * touched, not the order of the additions). Padded rows and columns are computed and never stored:
 * each lane's arithmetic is its own, so no edge case needs another code path. The accumulator then
 * goes into C (SET, CONTINUE) or is added to it (ADD).
 *
 * This file is compiled with -ffp-contract=off: the only fused operations are the explicit ones. */
#include "ops/cpu/gemm_cpu.h"

#include <math.h>
#include <omp.h>
#include <string.h>

#include "core/check.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define GEMM_HAVE_AVX2 1
#else
#define GEMM_HAVE_AVX2 0
#endif

/* The micro-kernel's block: 6 rows x 16 columns is 12 AVX2 accumulators, two of op(B) and one
 * broadcast of op(A): 15 of the 16 vector registers. */
#define GEMM_MR 6
#define GEMM_NR 16
/* A tile of C (whole panels) and the depth of one packing: the packed op(A) block (96 KiB) stays in
 * L2, a packed op(B) panel (16 KiB) in L1. */
#define GEMM_ROWS 96
#define GEMM_COLS 128
#define GEMM_DEPTH 256

/* GEMMs of fewer multiply-adds than this (about half a millisecond on one core) run on the calling thread: waking
 * the team costs more, and with more threads than free cores a barrier can cost a scheduler time slice. A tile's
 * arithmetic is the same on any thread, so the bits do not change. */
#define GEMM_PARALLEL_MIN_WORK ((int64_t)1 << 22)

/* One thread's buffers, in floats: packed op(A) [GEMM_ROWS x GEMM_DEPTH], packed op(B)
 * [GEMM_DEPTH x GEMM_COLS], the tile's accumulator [GEMM_ROWS x GEMM_COLS]. */
#define GEMM_PACKED_A_FLOATS ((size_t)GEMM_ROWS * GEMM_DEPTH)
#define GEMM_PACKED_B_FLOATS ((size_t)GEMM_DEPTH * GEMM_COLS)
#define GEMM_THREAD_FLOATS (GEMM_PACKED_A_FLOATS + GEMM_PACKED_B_FLOATS + (size_t)GEMM_ROWS * GEMM_COLS)

static inline int64_t gemm_min(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t round_up(int64_t n, int64_t to) { return (n + to - 1) / to * to; }

size_t tt_cpu_gemm_scratch_bytes(int threads) {
    return (size_t)(threads > 0 ? threads : 1) * GEMM_THREAD_FLOATS * sizeof(float);
}

/* acc[GEMM_MR x GEMM_NR] (row stride ld) += over k in order: a[k][i] * b[k][j], one fmaf each. */
#if GEMM_HAVE_AVX2
static void micro_kernel(int64_t depth, const float *a, const float *b, float *acc, int64_t ld) {
    __m256 c00 = _mm256_loadu_ps(acc + 0 * ld), c01 = _mm256_loadu_ps(acc + 0 * ld + 8);
    __m256 c10 = _mm256_loadu_ps(acc + 1 * ld), c11 = _mm256_loadu_ps(acc + 1 * ld + 8);
    __m256 c20 = _mm256_loadu_ps(acc + 2 * ld), c21 = _mm256_loadu_ps(acc + 2 * ld + 8);
    __m256 c30 = _mm256_loadu_ps(acc + 3 * ld), c31 = _mm256_loadu_ps(acc + 3 * ld + 8);
    __m256 c40 = _mm256_loadu_ps(acc + 4 * ld), c41 = _mm256_loadu_ps(acc + 4 * ld + 8);
    __m256 c50 = _mm256_loadu_ps(acc + 5 * ld), c51 = _mm256_loadu_ps(acc + 5 * ld + 8);
    for (int64_t k = 0; k < depth; k++, a += GEMM_MR, b += GEMM_NR) {
        const __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
        __m256 ai = _mm256_broadcast_ss(a + 0);
        c00 = _mm256_fmadd_ps(ai, b0, c00), c01 = _mm256_fmadd_ps(ai, b1, c01);
        ai = _mm256_broadcast_ss(a + 1);
        c10 = _mm256_fmadd_ps(ai, b0, c10), c11 = _mm256_fmadd_ps(ai, b1, c11);
        ai = _mm256_broadcast_ss(a + 2);
        c20 = _mm256_fmadd_ps(ai, b0, c20), c21 = _mm256_fmadd_ps(ai, b1, c21);
        ai = _mm256_broadcast_ss(a + 3);
        c30 = _mm256_fmadd_ps(ai, b0, c30), c31 = _mm256_fmadd_ps(ai, b1, c31);
        ai = _mm256_broadcast_ss(a + 4);
        c40 = _mm256_fmadd_ps(ai, b0, c40), c41 = _mm256_fmadd_ps(ai, b1, c41);
        ai = _mm256_broadcast_ss(a + 5);
        c50 = _mm256_fmadd_ps(ai, b0, c50), c51 = _mm256_fmadd_ps(ai, b1, c51);
    }
    _mm256_storeu_ps(acc + 0 * ld, c00), _mm256_storeu_ps(acc + 0 * ld + 8, c01);
    _mm256_storeu_ps(acc + 1 * ld, c10), _mm256_storeu_ps(acc + 1 * ld + 8, c11);
    _mm256_storeu_ps(acc + 2 * ld, c20), _mm256_storeu_ps(acc + 2 * ld + 8, c21);
    _mm256_storeu_ps(acc + 3 * ld, c30), _mm256_storeu_ps(acc + 3 * ld + 8, c31);
    _mm256_storeu_ps(acc + 4 * ld, c40), _mm256_storeu_ps(acc + 4 * ld + 8, c41);
    _mm256_storeu_ps(acc + 5 * ld, c50), _mm256_storeu_ps(acc + 5 * ld + 8, c51);
}
#else
/* Without AVX2 and FMA: the same fmaf per element, one at a time. */
static void micro_kernel(int64_t depth, const float *a, const float *b, float *acc, int64_t ld) {
    for (int64_t k = 0; k < depth; k++, a += GEMM_MR, b += GEMM_NR)
        for (int i = 0; i < GEMM_MR; i++)
            for (int j = 0; j < GEMM_NR; j++) acc[i * ld + j] = fmaf(a[i], b[j], acc[i * ld + j]);
}
#endif

/* Rows [m0, m0 + rows) and depth [k0, k0 + depth) of op(A) into panels of GEMM_MR rows, each
 * [depth][GEMM_MR]; rows past `rows` up to the whole panel are 0. */
static void pack_a(float *packed, bool trans_a, const float *A, int64_t lda, int64_t m0, int64_t rows, int64_t k0,
                   int64_t depth) {
    const int64_t padded = round_up(rows, GEMM_MR);
    for (int64_t p = 0; p < padded; p += GEMM_MR) {
        float *panel = packed + p * depth;
        const int64_t height = gemm_min(GEMM_MR, rows - p);
        if (trans_a) { /* A[K, M]: op(A)[m, k] = A[k, m], the panel's rows side by side in each row of A */
            for (int64_t k = 0; k < depth; k++) {
                const float *row = A + (k0 + k) * lda + m0 + p;
                float *out = panel + k * GEMM_MR;
                for (int64_t i = 0; i < height; i++) out[i] = row[i];
                for (int64_t i = height; i < GEMM_MR; i++) out[i] = 0;
            }
        } else {
            for (int64_t i = 0; i < GEMM_MR; i++) {
                if (i >= height) {
                    for (int64_t k = 0; k < depth; k++) panel[k * GEMM_MR + i] = 0;
                    continue;
                }
                const float *row = A + (m0 + p + i) * lda + k0;
                for (int64_t k = 0; k < depth; k++) panel[k * GEMM_MR + i] = row[k];
            }
        }
    }
}

/* Depth [k0, k0 + depth) and columns [n0, n0 + cols) of op(B) into panels of GEMM_NR columns, each
 * [depth][GEMM_NR]; columns past `cols` up to the whole panel are 0. */
static void pack_b(float *packed, bool trans_b, const float *B, int64_t ldb, int64_t n0, int64_t cols, int64_t k0,
                   int64_t depth) {
    const int64_t padded = round_up(cols, GEMM_NR);
    for (int64_t q = 0; q < padded; q += GEMM_NR) {
        float *panel = packed + q * depth;
        const int64_t width = gemm_min(GEMM_NR, cols - q);
        if (trans_b) { /* B[N, K]: op(B)[k, n] = B[n, k] */
            for (int64_t j = 0; j < GEMM_NR; j++) {
                if (j >= width) {
                    for (int64_t k = 0; k < depth; k++) panel[k * GEMM_NR + j] = 0;
                    continue;
                }
                const float *column = B + (n0 + q + j) * ldb + k0;
                for (int64_t k = 0; k < depth; k++) panel[k * GEMM_NR + j] = column[k];
            }
        } else {
            for (int64_t k = 0; k < depth; k++) {
                const float *row = B + (k0 + k) * ldb + n0 + q;
                float *out = panel + k * GEMM_NR;
                for (int64_t j = 0; j < width; j++) out[j] = row[j];
                for (int64_t j = width; j < GEMM_NR; j++) out[j] = 0;
            }
        }
    }
}

typedef struct gemm_problem {
    bool trans_a, trans_b;
    int64_t M, N, K;
    const float *A, *B;
    int64_t lda, ldb, ldc;
    float *C;
    tt_cpu_gemm_mode mode;
} gemm_problem;

/* The tile of C at [m0, m0 + rows) x [n0, n0 + cols), with one thread's buffers. */
static void gemm_tile(const gemm_problem *g, int64_t m0, int64_t rows, int64_t n0, int64_t cols, float *buffers) {
    float *packed_a = buffers, *packed_b = buffers + GEMM_PACKED_A_FLOATS;
    float *acc = packed_b + GEMM_PACKED_B_FLOATS;
    const int64_t padded_rows = round_up(rows, GEMM_MR), padded_cols = round_up(cols, GEMM_NR), ld = padded_cols;
    /* every element's start: its own value (CONTINUE) or 0; padding starts at 0 */
    for (int64_t i = 0; i < padded_rows; i++) {
        float *acc_row = acc + i * ld;
        if (g->mode == TT_CPU_GEMM_CONTINUE && i < rows) {
            memcpy(acc_row, g->C + (m0 + i) * g->ldc + n0, sizeof(float) * (size_t)cols);
            for (int64_t j = cols; j < padded_cols; j++) acc_row[j] = 0;
        } else {
            for (int64_t j = 0; j < padded_cols; j++) acc_row[j] = 0;
        }
    }
    for (int64_t k0 = 0; k0 < g->K; k0 += GEMM_DEPTH) {
        const int64_t depth = gemm_min(GEMM_DEPTH, g->K - k0);
        pack_a(packed_a, g->trans_a, g->A, g->lda, m0, rows, k0, depth);
        pack_b(packed_b, g->trans_b, g->B, g->ldb, n0, cols, k0, depth);
        for (int64_t q = 0; q < padded_cols; q += GEMM_NR)
            for (int64_t p = 0; p < padded_rows; p += GEMM_MR)
                micro_kernel(depth, packed_a + p * depth, packed_b + q * depth, acc + p * ld + q, ld);
    }
    for (int64_t i = 0; i < rows; i++) {
        float *c_row = g->C + (m0 + i) * g->ldc + n0;
        const float *acc_row = acc + i * ld;
        if (g->mode == TT_CPU_GEMM_ADD)
            for (int64_t j = 0; j < cols; j++) c_row[j] = c_row[j] + acc_row[j];
        else memcpy(c_row, acc_row, sizeof(float) * (size_t)cols);
    }
}

void tt_cpu_gemm_f32(tt_cpu_scratch *scratch, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                     const float *A, int64_t lda, const float *B, int64_t ldb, float *C, int64_t ldc,
                     tt_cpu_gemm_mode mode) {
    TT_CHECK(M >= 0 && N >= 0 && K >= 0, "GEMM of %lld x %lld x %lld", (long long)M, (long long)N, (long long)K);
    if (M == 0 || N == 0) return;
    const gemm_problem g = {.trans_a = trans_a,
                            .trans_b = trans_b,
                            .M = M,
                            .N = N,
                            .K = K,
                            .A = A,
                            .B = B,
                            .lda = lda,
                            .ldb = ldb,
                            .ldc = ldc,
                            .C = C,
                            .mode = mode};
    const int64_t row_tiles = (M + GEMM_ROWS - 1) / GEMM_ROWS, col_tiles = (N + GEMM_COLS - 1) / GEMM_COLS;
    const int64_t tiles = row_tiles * col_tiles;
    const bool small = (double)M * (double)N * (double)K < (double)GEMM_PARALLEL_MIN_WORK;
    const int threads = small ? 1 : (int)gemm_min(omp_get_max_threads(), tiles);
    float *buffers = tt_cpu_scratch_take(scratch, tt_cpu_gemm_scratch_bytes(threads), "GEMM packing");
    /* Column tiles vary fastest: neighbouring threads share their rows of op(A). */
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1) if (threads > 1)
    for (int64_t tile = 0; tile < tiles; tile++) {
        const int64_t m0 = (tile / col_tiles) * GEMM_ROWS, n0 = (tile % col_tiles) * GEMM_COLS;
        gemm_tile(&g, m0, gemm_min(GEMM_ROWS, M - m0), n0, gemm_min(GEMM_COLS, N - n0),
                  buffers + (size_t)omp_get_thread_num() * GEMM_THREAD_FLOATS);
    }
    tt_cpu_scratch_give(scratch, buffers);
}
