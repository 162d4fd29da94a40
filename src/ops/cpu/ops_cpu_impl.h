/* The CPU reference kernels, written once over a macro type `real` and compiled twice:
 * ops_cpu_f32.c (real = float: the CPU backend) and ops_cpu_f64.c (real = double: the
 * finite-difference gradient check). The including file first includes every header this
 * file needs (ops_cpu.h, gemm_cpu.h, cblas.h, limits.h, math.h, stdlib.h, string.h, core/check.h;
 * OpenBLAS uses `real` as a field name, so the macro must come after them) and then defines:
 *
 *   real                  float or double
 *   TT_CPU_REAL_IS_DOUBLE 0 or 1 (picks the GEMM, expf/exp)
 *   TT_CPU_FN(name)       the public name with its precision suffix, tt_cpu_##name##_f32
 *
 * No include guard: each translation unit includes this file exactly once. The semantics of
 * every op are those of src/ops/backend.h; everything that is float there (rstd, lse, cos,
 * sin, logits) is `real` here.
 *
 * Determinism: every output element is computed by exactly one thread with a loop order that
 * does not depend on the thread count, so the bits do not depend on OMP_NUM_THREADS.
 * With -std=c11 GCC does not contract a*b+c into FMAs, so vectorised and scalar iterations of
 * an element-wise loop give the same bits.
 *
 * Row-position independence (fp32, the oracle): no output element's bits depend on where its
 * token sits in the micro-batch. The GEMMs are tiertrain's own (gemm_cpu.h: one fmaf per k, in
 * k order, whatever the row), row-wise ops read their row only, attention reads its document
 * from the document's first token, and every reduction over tokens (weight gradients, norm
 * and bias gradients, the embedding gradient, the loss) adds token after token, in token
 * order, onto the value already there. So a packed micro-batch of documents gives, bit for
 * bit, the loss and gradients of the same documents run one by one in that order, each
 * adding into the gradients (and the loss) the one before left. The fp64 variant keeps
 * OpenBLAS's dgemm (the gradient check compares derivatives, not bits). */

#ifndef TT_CPU_FN
#error "ops_cpu_impl.h: define real, TT_CPU_REAL_IS_DOUBLE and TT_CPU_FN before including"
#endif

#if TT_CPU_REAL_IS_DOUBLE
#define TT_CPU_EXP exp
#else
#define TT_CPU_EXP expf
#endif

/* Output tile of one BLAS call of the fp64 GEMM (see cpu_gemm). Constants: the tiling must not
 * depend on the thread count. */
#define TT_CPU_GEMM_TILE_ROWS 128
#define TT_CPU_GEMM_TILE_COLS 512
/* Columns per task of embedding backward. */
#define TT_CPU_COL_BLOCK 64
/* Columns per task of the column sums (norm and bias gradients): one cache line of fp32, so that
 * a norm over a head (128 columns) still spreads over 8 threads. */
#define TT_CPU_SUM_COL_BLOCK 16
/* Elements per block of sum_squares. */
#define TT_CPU_SUMSQ_BLOCK 4096
/* Element-wise loops shorter than this run on the calling thread: starting the team costs more than
 * the loop (and, with more threads than free cores, a barrier can cost a scheduler time slice). Each
 * element is computed the same way either way, so the bits do not change. */
#define TT_CPU_PARALLEL_MIN_ELEMENTS 32768

static inline int64_t cpu_min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* Dot product in a fixed order: 8 interleaved partial sums (which the compiler may keep in
 * one vector register), combined pairwise, then the tail. */
static inline real cpu_dot(const real *a, const real *b, int64_t n) {
    real acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++) acc[l] += a[i + l] * b[i + l];
    real s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

/* C[M,N] from op(A)[M,K] op(B)[K,N], row-major, per `mode` (gemm_cpu.h). fp32: tiertrain's own
 * GEMM, whose elements' bits do not depend on their row or column. fp64 (the gradient check):
 * OpenBLAS, SET as beta 0, ADD and CONTINUE as beta 1. */
static void cpu_gemm(tt_cpu_scratch *scratch, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                     const real *A, int64_t lda, const real *B, int64_t ldb, real *C, int64_t ldc,
                     tt_cpu_gemm_mode mode) {
#if TT_CPU_REAL_IS_DOUBLE
    (void)scratch;
    TT_CHECK(M >= 0 && N >= 0 && K >= 0 && M <= INT_MAX && N <= INT_MAX && K <= INT_MAX && lda <= INT_MAX &&
                 ldb <= INT_MAX && ldc <= INT_MAX,
             "GEMM of %lld x %lld x %lld exceeds the 32-bit BLAS interface", (long long)M, (long long)N, (long long)K);
    if (M == 0 || N == 0) return;
    const real beta = mode == TT_CPU_GEMM_SET ? 0 : 1;
    if (K == 0) {
        if (beta == 0)
            for (int64_t m = 0; m < M; m++) memset(C + m * ldc, 0, (size_t)N * sizeof(real));
        return;
    }
    /* The output is cut into fixed tiles, each computed by one single-threaded BLAS call on one
     * OpenMP thread. Tiles split rows and columns of C, never K, so every element's sum runs in
     * the same order whatever the thread count. */
    const int64_t row_tiles = (M + TT_CPU_GEMM_TILE_ROWS - 1) / TT_CPU_GEMM_TILE_ROWS;
    const int64_t col_tiles = (N + TT_CPU_GEMM_TILE_COLS - 1) / TT_CPU_GEMM_TILE_COLS;
#pragma omp parallel for schedule(dynamic, 1) if (row_tiles * col_tiles > 1)
    for (int64_t tile = 0; tile < row_tiles * col_tiles; tile++) {
        const int64_t m0 = (tile / col_tiles) * TT_CPU_GEMM_TILE_ROWS, n0 = (tile % col_tiles) * TT_CPU_GEMM_TILE_COLS;
        const int64_t mb = cpu_min64(TT_CPU_GEMM_TILE_ROWS, M - m0), nb = cpu_min64(TT_CPU_GEMM_TILE_COLS, N - n0);
        const real *A_tile = trans_a ? A + m0 : A + m0 * lda;
        const real *B_tile = trans_b ? B + n0 * ldb : B + n0;
        cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, (int)mb,
                    (int)nb, (int)K, 1.0, A_tile, (int)lda, B_tile, (int)ldb, beta, C + m0 * ldc + n0, (int)ldc);
    }
#else
    tt_cpu_gemm_f32(scratch, trans_a, trans_b, M, N, K, A, lda, B, ldb, C, ldc, mode);
#endif
}

/* dst[c] += sum_r a[r,c], or sum_r a[r,c] * x[r,c] * rs[r] when x != NULL, in row order onto dst's
 * own value: each row's term (in double) is added to dst[c] and the sum rounded to `real`, row after
 * row, as gradients accumulated over micro-batches are; so rows cut into consecutive calls give the
 * bits of one call over all of them. Parallel over blocks of columns. */
static void cpu_column_sums(real *dst, const real *a, const real *x, const real *rs, int64_t R, int64_t C) {
    if (R <= 0 || C <= 0) return;
    const int64_t nb = (C + TT_CPU_SUM_COL_BLOCK - 1) / TT_CPU_SUM_COL_BLOCK;
#pragma omp parallel for schedule(static) if (nb > 1 && R * C >= TT_CPU_PARALLEL_MIN_ELEMENTS)
    for (int64_t blk = 0; blk < nb; blk++) {
        const int64_t c0 = blk * TT_CPU_SUM_COL_BLOCK, c1 = cpu_min64(C, c0 + TT_CPU_SUM_COL_BLOCK);
        for (int64_t r = 0; r < R; r++) {
            const real *ar = a + r * C;
            if (x) {
                const real *xr = x + r * C;
                const double s = (double)rs[r];
                for (int64_t c = c0; c < c1; c++) dst[c] = (real)((double)dst[c] + (double)ar[c] * ((double)xr[c] * s));
            } else {
                for (int64_t c = c0; c < c1; c++) dst[c] = (real)((double)dst[c] + (double)ar[c]);
            }
        }
    }
}

/* ---------------------------------------------------------------- embedding */

void TT_CPU_FN(embedding_forward)(real *out, const int32_t *ids, const real *table, int64_t N, int64_t D, real scale) {
#pragma omp parallel for schedule(static) if (N * D >= TT_CPU_PARALLEL_MIN_ELEMENTS)
    for (int64_t n = 0; n < N; n++) {
        TT_CHECK(ids[n] >= 0, "negative token id %d at position %lld", (int)ids[n], (long long)n);
        const real *row = table + (int64_t)ids[n] * D;
        if (scale == 1) memcpy(out + n * D, row, (size_t)D * sizeof(real));
        else
            for (int64_t c = 0; c < D; c++) out[n * D + c] = row[c] * scale;
    }
}

void TT_CPU_FN(embedding_backward)(real *dtable, const int32_t *ids, const real *dout, int64_t N, int64_t D,
                                   real scale) {
    /* Parallel over column blocks; inside a block the tokens are added in order n = 0..N-1,
     * exactly the sequential definition. */
    const int64_t nb = (D + TT_CPU_COL_BLOCK - 1) / TT_CPU_COL_BLOCK;
#pragma omp parallel for schedule(static) if (nb > 1)
    for (int64_t blk = 0; blk < nb; blk++) {
        const int64_t c0 = blk * TT_CPU_COL_BLOCK, c1 = cpu_min64(D, c0 + TT_CPU_COL_BLOCK);
        for (int64_t n = 0; n < N; n++) {
            TT_CHECK(ids[n] >= 0, "negative token id %d at position %lld", (int)ids[n], (long long)n);
            real *row = dtable + (int64_t)ids[n] * D;
            const real *g = dout + n * D;
            if (scale == 1)
                for (int64_t c = c0; c < c1; c++) row[c] += g[c];
            else
                for (int64_t c = c0; c < c1; c++) row[c] += g[c] * scale;
        }
    }
}

/* ---------------------------------------------------------------- RMSNorm */

/* Hugging Face LlamaRMSNorm / Qwen3RMSNorm: out = w * (x * rsqrt(mean(x^2) + eps)); Gemma's with the weight
 * (1 + w) (offset 1, added first as transformers does); plus the residual when there is one. */
void TT_CPU_FN(rmsnorm_forward)(real *out, real *rstd, const real *x, const real *w, const real *residual, int64_t R,
                                int64_t C, double eps, real offset) {
#pragma omp parallel for schedule(static) if (R * C >= TT_CPU_PARALLEL_MIN_ELEMENTS)
    for (int64_t r = 0; r < R; r++) {
        const real *xr = x + r * C;
        real *o = out ? out + r * C : NULL;
        double ss = 0;
        for (int64_t c = 0; c < C; c++) ss += (double)xr[c] * (double)xr[c];
        const real rs = (real)(1.0 / sqrt(ss / (double)C + eps));
        rstd[r] = rs;
        if (!out) continue; /* the statistics alone (a recompute that keeps the output) */
        if (residual) {
            const real *res = residual + r * C;
            for (int64_t c = 0; c < C; c++) o[c] = res[c] + (w[c] + offset) * (xr[c] * rs);
        } else {
            for (int64_t c = 0; c < C; c++) o[c] = (w[c] + offset) * (xr[c] * rs);
        }
    }
}

/* With y_c = w'_c x_c r, w' = w + offset and r = (mean(x^2) + eps)^(-1/2):
 *   dx_c = r (w'_c g_c - x_c r^2 mean_k(w'_k g_k x_k)),  dw_c = sum_rows g_c x_c r. */
void TT_CPU_FN(rmsnorm_backward)(tt_cpu_scratch *scratch, real *dx, real *dw, const real *dout, const real *x,
                                 const real *w, const real *rstd, int64_t R, int64_t C, real offset) {
    /* dw first, so that dx may be the same buffer as dout. */
    if (dw) cpu_column_sums(dw, dout, x, rstd, R, C);
    if (dx) {
#pragma omp parallel for schedule(static) if (R * C >= TT_CPU_PARALLEL_MIN_ELEMENTS)
        for (int64_t r = 0; r < R; r++) {
            const real *xr = x + r * C, *g = dout + r * C;
            real *d = dx + r * C;
            double dot = 0;
            for (int64_t c = 0; c < C; c++) dot += (double)(w[c] + offset) * (double)g[c] * (double)xr[c];
            const double rs = (double)rstd[r];
            const real a = rstd[r];
            const real k = (real)(rs * rs * rs * (dot / (double)C));
            for (int64_t c = 0; c < C; c++) d[c] += a * ((w[c] + offset) * g[c]) - k * xr[c];
        }
    }
}

/* ---------------------------------------------------------------- linear */

void TT_CPU_FN(linear_forward)(tt_cpu_scratch *scratch, real *y, const real *x, const real *W, const real *b, int64_t N,
                               int64_t in, int64_t out, bool accumulate) {
    if (b) {
        /* y = b (or y += b), then y += x W^T. */
#pragma omp parallel for schedule(static) if (N * out >= TT_CPU_PARALLEL_MIN_ELEMENTS)
        for (int64_t n = 0; n < N; n++) {
            real *yr = y + n * out;
            if (accumulate)
                for (int64_t o = 0; o < out; o++) yr[o] += b[o];
            else
                for (int64_t o = 0; o < out; o++) yr[o] = b[o];
        }
        cpu_gemm(scratch, false, true, N, out, in, x, in, W, in, y, out, TT_CPU_GEMM_ADD);
    } else {
        cpu_gemm(scratch, false, true, N, out, in, x, in, W, in, y, out,
                 accumulate ? TT_CPU_GEMM_ADD : TT_CPU_GEMM_SET);
    }
}

void TT_CPU_FN(linear_backward)(tt_cpu_scratch *scratch, real *dx, real *dW, real *db, const real *dy, const real *x,
                                const real *W, int64_t N, int64_t in, int64_t out, bool accumulate_dx) {
    /* dW and db first: dx may be x's memory (backend.h). They go on from their values, token after token. */
    if (dW) cpu_gemm(scratch, true, false, out, in, N, dy, out, x, in, dW, in, TT_CPU_GEMM_CONTINUE);
    if (db) cpu_column_sums(db, dy, NULL, NULL, N, out);
    if (dx)
        cpu_gemm(scratch, false, false, N, in, out, dy, out, W, in, dx, in,
                 accumulate_dx ? TT_CPU_GEMM_ADD : TT_CPU_GEMM_SET);
}

/* ---------------------------------------------------------------- RoPE */

/* Hugging Face apply_rotary_pos_emb: x * cos + rotate_half(x) * sin, cos = cat(c, c), over the first rd dimensions
 * of each head (the rest pass through: partial rotary). */
void TT_CPU_FN(rope_forward)(real *x, const real *cos_t, const real *sin_t, int64_t B, int64_t T, int64_t H, int64_t hd,
                             int64_t rd) {
    TT_CHECK(rd % 2 == 0 && rd > 0 && rd <= hd,
             "rope over %lld of head_dim %lld dimensions: an even count, at most "
             "head_dim",
             (long long)rd, (long long)hd);
    const int64_t half = rd / 2;
#pragma omp parallel for schedule(static) if (B * T * H * hd >= TT_CPU_PARALLEL_MIN_ELEMENTS)
    for (int64_t n = 0; n < B * T; n++) {
        const real *cs = cos_t + (n % T) * half, *sn = sin_t + (n % T) * half;
        for (int64_t h = 0; h < H; h++) {
            real *xr = x + (n * H + h) * hd;
            for (int64_t i = 0; i < half; i++) {
                const real x1 = xr[i], x2 = xr[i + half];
                xr[i] = x1 * cs[i] - x2 * sn[i];
                xr[i + half] = x2 * cs[i] + x1 * sn[i];
            }
        }
    }
}

/* The transpose of the rotation: rotation by the negative angle. */
void TT_CPU_FN(rope_backward)(real *dx, const real *cos_t, const real *sin_t, int64_t B, int64_t T, int64_t H,
                              int64_t hd, int64_t rd) {
    TT_CHECK(rd % 2 == 0 && rd > 0 && rd <= hd,
             "rope over %lld of head_dim %lld dimensions: an even count, at most "
             "head_dim",
             (long long)rd, (long long)hd);
    const int64_t half = rd / 2;
#pragma omp parallel for schedule(static) if (B * T * H * hd >= TT_CPU_PARALLEL_MIN_ELEMENTS)
    for (int64_t n = 0; n < B * T; n++) {
        const real *cs = cos_t + (n % T) * half, *sn = sin_t + (n % T) * half;
        for (int64_t h = 0; h < H; h++) {
            real *g = dx + (n * H + h) * hd;
            for (int64_t i = 0; i < half; i++) {
                const real g1 = g[i], g2 = g[i + half];
                g[i] = g1 * cs[i] + g2 * sn[i];
                g[i + half] = g2 * cs[i] - g1 * sn[i];
            }
        }
    }
}

/* ---------------------------------------------------------------- attention */

/* First visible key of query i (keys j0..i are visible). */
static inline int64_t cpu_first_key(int64_t i, int64_t window) {
    return (window > 0 && i - window + 1 > 0) ? i - window + 1 : 0;
}

/* Last query that sees key j (queries j..i1 see it). */
static inline int64_t cpu_last_query(int64_t j, int64_t window, int64_t T) {
    return window > 0 ? cpu_min64(T - 1, j + window - 1) : T - 1;
}

/* First visible key of query i of sequence b: the window's first, or its document's first token
 * when documents are packed (positions restart at 0 where a document starts). */
static inline int64_t cpu_first_visible_key(const tt_attention_shape *s, int64_t b, int64_t i) {
    const int64_t j0 = cpu_first_key(i, s->sliding_window);
    if (!s->positions) return j0;
    const int64_t document_start = i - s->positions[b * s->seq_len + i];
    return document_start > j0 ? document_start : j0;
}

/* Whether query i of sequence b lies in the document of key j <= i (always, unpacked): queries after
 * j leave it where a later document starts, and never return. */
static inline bool cpu_query_in_key_document(const tt_attention_shape *s, int64_t b, int64_t i, int64_t j) {
    return !s->positions || i - s->positions[b * s->seq_len + i] <= j;
}

/* A scaled score soft-capped (Gemma 2: cap * tanh(s / cap)) where cap > 0. */
static inline real cpu_softcap(real s, real cap) {
#if TT_CPU_REAL_IS_DOUBLE
    return cap > 0 ? cap * tanh(s / cap) : s;
#else
    return cap > 0 ? cap * tanhf(s / cap) : s;
#endif
}

static void cpu_check_attention_shape(const tt_attention_shape *s) {
    TT_CHECK(s->batch >= 0 && s->seq_len >= 0 && s->head_dim > 0 && s->num_heads > 0 && s->num_kv_heads > 0 &&
                 s->num_heads % s->num_kv_heads == 0 && s->sliding_window >= 0,
             "bad attention shape: B=%lld T=%lld Hq=%lld Hkv=%lld hd=%lld window=%lld", (long long)s->batch,
             (long long)s->seq_len, (long long)s->num_heads, (long long)s->num_kv_heads, (long long)s->head_dim,
             (long long)s->sliding_window);
}

/* A query row's output from its scores e[nj] (largest m): e becomes exp(e - m), summed in double, and
 * o[hd] = sum_j e_j / sum * v_j over the value rows v, v + stride, ...; returns the sum. */
static inline double cpu_softmax_values(real *e, int64_t nj, real m, const real *v, int64_t stride, int64_t hd,
                                        real *o) {
    double sum = 0;
    for (int64_t j = 0; j < nj; j++) {
        e[j] = TT_CPU_EXP(e[j] - m);
        sum += (double)e[j];
    }
    const real inv = (real)(1.0 / sum);
    for (int64_t d = 0; d < hd; d++) o[d] = 0;
    for (int64_t j = 0; j < nj; j++) {
        const real p = e[j] * inv;
        const real *vj = v + j * stride;
        for (int64_t d = 0; d < hd; d++) o[d] += p * vj[d];
    }
    return sum;
}

/* One query row at a time: scores of the visible keys into an O(T) per-thread buffer, then
 * a softmax (sums in double) and the weighted sum of values. No [T, T] matrix exists. A row reads
 * only the keys of its own document, from the document's first token in order, so a packed
 * document's rows get the bits they get when the document is a sequence of its own. */
void TT_CPU_FN(attention_forward)(tt_cpu_scratch *scratch, real *out, real *lse, const real *q, const real *k,
                                  const real *v, const tt_attention_shape *shape) {
    cpu_check_attention_shape(shape);
    const int64_t B = shape->batch, T = shape->seq_len, Hq = shape->num_heads, Hkv = shape->num_kv_heads;
    const int64_t hd = shape->head_dim, group = Hq / Hkv;
    const real scale = (real)shape->scale, cap = (real)shape->softcap;
    const int64_t rows = B * Hq * T;
    /* One row of scores per thread, from the scratch area (see tt_cpu_scratch_bytes). */
    const int threads = omp_get_max_threads();
    real *scores =
        tt_cpu_scratch_take(scratch, (size_t)threads * (size_t)(T > 0 ? T : 1) * sizeof(real), "attention scores");
#pragma omp parallel num_threads(threads) if (rows * T * hd >= TT_CPU_PARALLEL_MIN_ELEMENTS)
    {
        real *e = scores + (size_t)omp_get_thread_num() * (size_t)(T > 0 ? T : 1);
#pragma omp for schedule(dynamic, 16)
        for (int64_t idx = 0; idx < rows; idx++) {
            const int64_t i = idx % T, h = (idx / T) % Hq, b = idx / (T * Hq), kvh = h / group;
            const int64_t j0 = cpu_first_visible_key(shape, b, i), nj = i - j0 + 1;
            const real *qi = q + ((b * T + i) * Hq + h) * hd;
            real m = -INFINITY;
            for (int64_t j = 0; j < nj; j++) {
                const real *kj = k + ((b * T + j0 + j) * Hkv + kvh) * hd;
                const real sc = cpu_softcap(cpu_dot(qi, kj, hd) * scale, cap);
                e[j] = sc;
                if (sc > m) m = sc;
            }
            const double sum = cpu_softmax_values(e, nj, m, v + ((b * T + j0) * Hkv + kvh) * hd, Hkv * hd, hd,
                                                  out + ((b * T + i) * Hq + h) * hd);
            lse[(b * Hq + h) * T + i] = (real)((double)m + log(sum));
        }
    }
    tt_cpu_scratch_give(scratch, scores);
}

/* Generation with a KV cache: the n new queries of one sequence, at positions start .. start + n - 1, over the cached
 * keys and values of every position up to theirs (cache rows [0, start + n)). The row arithmetic of
 * attention_forward: the visible scores into a per-thread buffer, their softmax (sums in double), the weighted values. */
void TT_CPU_FN(attention_cached)(tt_cpu_scratch *scratch, real *out, const real *q, const real *k_cache,
                                 const real *v_cache, int64_t start, int64_t n, const tt_attention_shape *shape) {
    cpu_check_attention_shape(shape);
    const int64_t Hq = shape->num_heads, Hkv = shape->num_kv_heads, hd = shape->head_dim, group = Hq / Hkv;
    const int64_t keys = start + n;
    const real scale = (real)shape->scale, cap = (real)shape->softcap;
    const int threads = omp_get_max_threads();
    real *scores = tt_cpu_scratch_take(scratch, (size_t)threads * (size_t)(keys > 0 ? keys : 1) * sizeof(real),
                                       "cached attention scores");
#pragma omp parallel num_threads(threads) if (n * Hq * keys * hd >= TT_CPU_PARALLEL_MIN_ELEMENTS)
    {
        real *e = scores + (size_t)omp_get_thread_num() * (size_t)(keys > 0 ? keys : 1);
#pragma omp for schedule(dynamic, 4)
        for (int64_t idx = 0; idx < n * Hq; idx++) {
            const int64_t i = idx / Hq, h = idx % Hq, kvh = h / group, position = start + i;
            const int64_t j0 = cpu_first_key(position, shape->sliding_window), nj = position - j0 + 1;
            const real *qi = q + (i * Hq + h) * hd;
            real m = -INFINITY;
            for (int64_t j = 0; j < nj; j++) {
                const real sc = cpu_softcap(cpu_dot(qi, k_cache + ((j0 + j) * Hkv + kvh) * hd, hd) * scale, cap);
                e[j] = sc;
                if (sc > m) m = sc;
            }
            cpu_softmax_values(e, nj, m, v_cache + (j0 * Hkv + kvh) * hd, Hkv * hd, hd, out + (i * Hq + h) * hd);
        }
    }
    tt_cpu_scratch_give(scratch, scores);
}

/* Flash-attention backward, in two deterministic passes that recompute P from lse:
 *   pass 1, parallel over queries: D_i = dout_i . out_i and dq_i = scale sum_j dS_ij k_j;
 *   pass 2, parallel over keys: dk_j = scale sum_{h in group} sum_i dS_ij q_i,
 *                               dv_j = sum_{h in group} sum_i P_ij dout_i,
 * with P_ij = exp(s_ij - lse_i), dS_ij = P_ij (dout_i . v_j - D_i); heads in order h, then
 * queries in order i. With soft-capping s_ij = cap tanh(u_ij / cap) of u_ij = scale q_i . k_j, and dS_ij takes
 * the factor 1 - tanh^2. The only extra state is D[B, Hq, T], from the scratch area. */
static inline real cpu_capped_score(const real *qi, const real *kj, int64_t hd, real scale, real cap, real *slope) {
    const real u = cpu_dot(qi, kj, hd) * scale;
    if (!(cap > 0)) {
        *slope = 1;
        return u;
    }
#if TT_CPU_REAL_IS_DOUBLE
    const real t = tanh(u / cap);
#else
    const real t = tanhf(u / cap);
#endif
    *slope = 1 - t * t;
    return cap * t;
}

void TT_CPU_FN(attention_backward)(tt_cpu_scratch *scratch, real *dq, real *dk, real *dv, const real *dout,
                                   const real *out, const real *lse, const real *q, const real *k, const real *v,
                                   const tt_attention_shape *shape) {
    cpu_check_attention_shape(shape);
    const int64_t B = shape->batch, T = shape->seq_len, Hq = shape->num_heads, Hkv = shape->num_kv_heads;
    const int64_t hd = shape->head_dim, window = shape->sliding_window, group = Hq / Hkv;
    const real scale = (real)shape->scale, cap = (real)shape->softcap;
    const int64_t rows = B * Hq * T;
    real *Dsum = tt_cpu_scratch_take(scratch, (size_t)(rows > 0 ? rows : 1) * sizeof(real), "attention backward D");

#pragma omp parallel for schedule(dynamic, 16) if (rows * T * hd >= TT_CPU_PARALLEL_MIN_ELEMENTS)
    for (int64_t idx = 0; idx < rows; idx++) {
        const int64_t i = idx % T, h = (idx / T) % Hq, b = idx / (T * Hq), kvh = h / group;
        const int64_t off = ((b * T + i) * Hq + h) * hd;
        const real *qi = q + off, *doi = dout + off, *oi = out + off;
        double dsum = 0;
        for (int64_t d = 0; d < hd; d++) dsum += (double)doi[d] * (double)oi[d];
        const real Di = (real)dsum;
        Dsum[(b * Hq + h) * T + i] = Di;
        const real li = lse[(b * Hq + h) * T + i];
        real *dqi = dq + off;
        for (int64_t d = 0; d < hd; d++) dqi[d] = 0;
        for (int64_t j = cpu_first_visible_key(shape, b, i); j <= i; j++) {
            const int64_t koff = ((b * T + j) * Hkv + kvh) * hd;
            const real *kj = k + koff, *vj = v + koff;
            real slope;
            const real p = TT_CPU_EXP(cpu_capped_score(qi, kj, hd, scale, cap, &slope) - li);
            const real ds = p * (cpu_dot(doi, vj, hd) - Di) * slope;
            const real c = scale * ds;
            for (int64_t d = 0; d < hd; d++) dqi[d] += c * kj[d];
        }
    }

    const int64_t krows = B * Hkv * T;
#pragma omp parallel for schedule(dynamic, 16) if (krows * T * hd >= TT_CPU_PARALLEL_MIN_ELEMENTS)
    for (int64_t idx = 0; idx < krows; idx++) {
        const int64_t j = idx % T, kvh = (idx / T) % Hkv, b = idx / (T * Hkv);
        const int64_t koff = ((b * T + j) * Hkv + kvh) * hd;
        const real *kj = k + koff, *vj = v + koff;
        real *dkj = dk + koff, *dvj = dv + koff;
        for (int64_t d = 0; d < hd; d++) dkj[d] = 0;
        for (int64_t d = 0; d < hd; d++) dvj[d] = 0;
        const int64_t i1 = cpu_last_query(j, window, T);
        for (int64_t r = 0; r < group; r++) {
            const int64_t h = kvh * group + r;
            for (int64_t i = j; i <= i1 && cpu_query_in_key_document(shape, b, i, j); i++) {
                const int64_t off = ((b * T + i) * Hq + h) * hd;
                const real *qi = q + off, *doi = dout + off;
                const real li = lse[(b * Hq + h) * T + i], Di = Dsum[(b * Hq + h) * T + i];
                real slope;
                const real p = TT_CPU_EXP(cpu_capped_score(qi, kj, hd, scale, cap, &slope) - li);
                const real ds = p * (cpu_dot(doi, vj, hd) - Di) * slope;
                const real c = scale * ds;
                for (int64_t d = 0; d < hd; d++) dkj[d] += c * qi[d];
                for (int64_t d = 0; d < hd; d++) dvj[d] += p * doi[d];
            }
        }
    }
    tt_cpu_scratch_give(scratch, Dsum);
}

/* ---------------------------------------------------------------- gated activations, add */

#if TT_CPU_REAL_IS_DOUBLE
#define TT_CPU_TANH tanh
#else
#define TT_CPU_TANH tanhf
#endif
/* torch's gelu(approximate="tanh") constants: sqrt(2 / pi) and the cubic's coefficient. */
#define TT_CPU_GELU_BETA ((real)(M_SQRT2 * M_2_SQRTPI * 0.5))
#define TT_CPU_GELU_KAPPA ((real)0.044715)

/* h = act(g) * up: torch's silu g / (1 + exp(-g)), or its tanh gelu 0.5 g (1 + tanh(beta (g + kappa g^3))) in the
 * order of its CPU kernel. */
void TT_CPU_FN(glu_forward)(real *h, const real *gate, const real *up, int64_t n, tt_glu_activation act) {
#pragma omp parallel for schedule(static) if (n >= TT_CPU_PARALLEL_MIN_ELEMENTS)
    for (int64_t i = 0; i < n; i++) {
        const real g = gate[i];
        if (act == TT_GLU_SILU) {
            h[i] = (g / (1 + TT_CPU_EXP(-g))) * up[i];
        } else {
            const real inner = TT_CPU_GELU_BETA * (g + TT_CPU_GELU_KAPPA * (g * g * g));
            h[i] = ((real)0.5 * g * (1 + TT_CPU_TANH(inner))) * up[i];
        }
    }
}

/* As autograd runs it: du = dh * act(g); dg = (dh * u) * act'(g), with silu' = sig(g) (1 + g (1 - sig(g))) and
 * tanh gelu' = 0.5 (1 + t) + 0.5 g (1 - t^2) beta (1 + 3 kappa g^2), t = tanh(beta (g + kappa g^3)). */
void TT_CPU_FN(glu_backward)(real *dgate, real *dup, const real *dh, const real *gate, const real *up, int64_t n,
                             tt_glu_activation act) {
#pragma omp parallel for schedule(static) if (n >= TT_CPU_PARALLEL_MIN_ELEMENTS)
    for (int64_t i = 0; i < n; i++) {
        const real g = gate[i], u = up[i], d = dh[i];
        if (act == TT_GLU_SILU) {
            const real e = TT_CPU_EXP(-g);
            const real sig = 1 / (1 + e), silu = g / (1 + e);
            dup[i] = d * silu;
            dgate[i] = (d * u) * (sig * (1 + g * (1 - sig)));
        } else {
            const real g2 = g * g;
            const real t = TT_CPU_TANH(TT_CPU_GELU_BETA * (g + TT_CPU_GELU_KAPPA * (g2 * g)));
            const real gelu = (real)0.5 * g * (1 + t);
            const real slope = (real)0.5 * (1 + t) +
                               (real)0.5 * g * ((1 - t * t) * (TT_CPU_GELU_BETA * (1 + 3 * TT_CPU_GELU_KAPPA * g2)));
            dup[i] = d * gelu;
            dgate[i] = (d * u) * slope;
        }
    }
}
#undef TT_CPU_GELU_BETA
#undef TT_CPU_GELU_KAPPA

void TT_CPU_FN(add)(real *out, const real *a, const real *b, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= TT_CPU_PARALLEL_MIN_ELEMENTS)
    for (int64_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

/* ---------------------------------------------------------------- dropout */

void TT_CPU_FN(dropout_scale)(real *out, const real *x, int64_t n, real multiplier, uint32_t drop_threshold,
                              uint64_t seed) {
#pragma omp parallel for schedule(static) if (n >= TT_CPU_PARALLEL_MIN_ELEMENTS)
    for (int64_t i = 0; i < n; i++)
        out[i] = tt_dropout_bits(seed, (uint64_t)i) >= drop_threshold ? x[i] * multiplier : 0;
}

void TT_CPU_FN(add_uniform_noise)(real *x, int64_t n, float magnitude, uint64_t seed) {
#pragma omp parallel for schedule(static) if (n >= TT_CPU_PARALLEL_MIN_ELEMENTS)
    for (int64_t i = 0; i < n; i++) x[i] = x[i] + (real)tt_uniform_noise(seed, (uint64_t)i, magnitude);
}

/* ---------------------------------------------------------------- LM head + cross-entropy */

double TT_CPU_FN(lm_head_loss)(tt_cpu_scratch *scratch, real *dxn, real *dW, const real *xn, const real *W,
                               const int32_t *targets, int64_t N, int64_t D, int64_t V, int64_t chunk, real *logits,
                               double logit_scale, double softcap, double scale, double loss_before, int64_t *count) {
    TT_CHECK(chunk > 0 && V > 0, "lm_head_loss: chunk %lld, vocab %lld", (long long)chunk, (long long)V);
    int64_t valid = 0;
    for (int64_t n = 0; n < N; n++) {
        const int32_t t = targets[n];
        TT_CHECK(t == TT_IGNORE_INDEX || (t >= 0 && t < V), "target %d at token %lld is outside [0, %lld)", (int)t,
                 (long long)n, (long long)V);
        if (t != TT_IGNORE_INDEX) valid++;
    }
    const int64_t max_rows = cpu_min64(chunk, N > 0 ? N : 1);
    /* The per-row losses of a chunk, added in order onto the running total afterwards. */
    double *row_loss = tt_cpu_scratch_take(scratch, (size_t)max_rows * sizeof(double), "lm head row losses");
    const real sc = (real)scale, ls = (real)logit_scale, cap = (real)softcap;
    const bool transformed = ls != 1 || cap > 0;
    double total = loss_before;
    for (int64_t c0 = 0; c0 < N; c0 += chunk) {
        const int64_t rows = cpu_min64(chunk, N - c0);
        const real *x = xn + c0 * D;
        cpu_gemm(scratch, false, true, rows, V, D, x, D, W, D, logits, V, TT_CPU_GEMM_SET);
#pragma omp parallel for schedule(static) if (rows * V >= TT_CPU_PARALLEL_MIN_ELEMENTS)
        for (int64_t r = 0; r < rows; r++) {
            real *lr = logits + r * V;
            const int32_t t = targets[c0 + r];
            if (transformed && t != TT_IGNORE_INDEX)
                for (int64_t j = 0; j < V; j++) lr[j] = cpu_softcap(lr[j] * ls, cap);
            if (t == TT_IGNORE_INDEX) {
                row_loss[r] = 0;
                if (dxn)
                    for (int64_t j = 0; j < V; j++) lr[j] = 0;
                continue;
            }
            real m = lr[0];
            for (int64_t j = 1; j < V; j++)
                if (lr[j] > m) m = lr[j];
            double sum = 0;
            for (int64_t j = 0; j < V; j++) sum += (double)TT_CPU_EXP(lr[j] - m);
            row_loss[r] = (double)m + log(sum) - (double)lr[t];
            if (dxn) {
                const real inv = (real)(1.0 / sum);
                if (!transformed) {
                    for (int64_t j = 0; j < V; j++) lr[j] = TT_CPU_EXP(lr[j] - m) * inv * sc;
                    lr[t] -= sc;
                } else {
                    /* through the cap (d/dz of cap tanh(z / cap) = 1 - (capped / cap)^2) and the scale */
                    for (int64_t j = 0; j < V; j++) {
                        const real capped = lr[j], slope = cap > 0 ? 1 - (capped / cap) * (capped / cap) : 1;
                        const real g = TT_CPU_EXP(capped - m) * inv * sc - (j == t ? sc : 0);
                        lr[j] = g * slope * ls;
                    }
                }
            }
        }
        for (int64_t r = 0; r < rows; r++) total += row_loss[r];
        if (dxn) {
            /* dW before dxn, so that dxn may be the same buffer as xn; dW goes on token after token, so the
             * chunks do not change its bits. */
            if (dW) cpu_gemm(scratch, true, false, V, D, rows, logits, V, x, D, dW, D, TT_CPU_GEMM_CONTINUE);
            cpu_gemm(scratch, false, false, rows, D, V, logits, V, W, D, dxn + c0 * D, D, TT_CPU_GEMM_SET);
        }
    }
    tt_cpu_scratch_give(scratch, row_loss);
    if (count) *count = valid;
    return total;
}

/* ---------------------------------------------------------------- optimizer */

double TT_CPU_FN(sum_squares)(tt_cpu_scratch *scratch, const real *x, int64_t n) {
    if (n <= 0) return 0;
    const int64_t nb = (n + TT_CPU_SUMSQ_BLOCK - 1) / TT_CPU_SUMSQ_BLOCK;
    /* The block sums, added in order. */
    double *part = tt_cpu_scratch_take(scratch, (size_t)nb * sizeof(double), "sum of squares");
#pragma omp parallel for schedule(static) if (nb > 1)
    for (int64_t blk = 0; blk < nb; blk++) {
        const int64_t i1 = cpu_min64(n, (blk + 1) * TT_CPU_SUMSQ_BLOCK);
        double s = 0;
        for (int64_t i = blk * TT_CPU_SUMSQ_BLOCK; i < i1; i++) s += (double)x[i] * (double)x[i];
        part[blk] = s;
    }
    double total = 0;
    for (int64_t blk = 0; blk < nb; blk++) total += part[blk];
    tt_cpu_scratch_give(scratch, part);
    return total;
}

/* torch.optim.AdamW (single-tensor path): the scalars of ops/adamw_scalars.h; the element-wise
 * operations run in float in torch's order. */
void TT_CPU_FN(adamw_update)(float *p, const real *g, float *m, float *v, int64_t n, float lr, float beta1, float beta2,
                             float eps, float weight_decay, int64_t step, float grad_scale) {
    const tt_adamw_scalars k = tt_adamw_scalars_for(lr, beta1, beta2, eps, weight_decay, step, grad_scale);
#pragma omp parallel for schedule(static) if (n >= TT_CPU_PARALLEL_MIN_ELEMENTS)
    for (int64_t i = 0; i < n; i++) {
        const float gi = (float)g[i] * k.grad_scale;
        float pi = p[i] * k.decay;
        const float mi = k.beta1 * m[i] + k.one_minus_beta1 * gi;
        const float vi = k.beta2 * v[i] + k.one_minus_beta2 * gi * gi;
        const float denom = sqrtf(vi) / k.bias_correction2_sqrt + k.eps;
        pi = pi + k.neg_step_size * mi / denom;
        m[i] = mi;
        v[i] = vi;
        p[i] = pi;
    }
}

#undef TT_CPU_EXP
#undef TT_CPU_TANH
#undef TT_CPU_GEMM_TILE_ROWS
#undef TT_CPU_GEMM_TILE_COLS
#undef TT_CPU_SUM_COL_BLOCK
#undef TT_CPU_COL_BLOCK
#undef TT_CPU_SUMSQ_BLOCK
#undef TT_CPU_PARALLEL_MIN_ELEMENTS
