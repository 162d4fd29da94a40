/* `make test-gpu`: every CUDA kernel against the CPU reference on fresh random inputs.
 * Inputs are rounded to bf16 first so both sides see the same values; outputs are poisoned with
 * NaN before kernels that overwrite them; results must agree within bf16 bounds (max |a-b| /
 * max |b| per tensor) and two runs must give the same bits. */
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "core/dtype.h"
#include "core/rng.h"
#include "ops/cpu/ops_cpu.h"
#include <cblas.h>

#include "ops/cuda/cuda_check.h"
#include "ops/cuda/gemm_cuda.h"
#include "ops/cuda/ops_cuda.h"
#include "ops/dropout_mask.h"
#include "gpu/gpu_test_util.h"
#include "test_util.h"

#define BF16_TOLERANCE 1e-2 /* a few bf16 ulps (2^-8 = 3.9e-3) of the largest value */

/* offset: Gemma's (1 + w) (1) or w (0); joined: the forward adds a residual (a norm after a sublayer) */
static void test_rmsnorm(int64_t R, int64_t C, float offset, bool joined) {
    tt_bf16 *dx_dev, *x_dev, *w_dev, *dout_dev;
    float *x = random_bf16(R * C, 2.0f, &x_dev);
    float *w = random_bf16(C, 1.5f, &w_dev);
    float *dout = random_bf16(R * C, 1.0f, &dout_dev);
    float *dx0 = random_bf16(R * C, 0.5f, &dx_dev); /* dx accumulates: start from non-zero */
    tt_bf16 *out_dev = device_poisoned(R * C);
    float *rstd_dev, *dw_dev, *scratch;
    TT_CUDA_CHECK(cudaMalloc((void **)&rstd_dev, sizeof(float) * (size_t)R));
    TT_CUDA_CHECK(cudaMalloc((void **)&dw_dev, sizeof(float) * (size_t)C));
    TT_CUDA_CHECK(cudaMemset(dw_dev, 0, sizeof(float) * (size_t)C));
    TT_CUDA_CHECK(cudaMalloc((void **)&scratch, sizeof(float) * (size_t)tt_cuda_rmsnorm_backward_scratch(R, C)));

    tt_bf16 *residual_dev = NULL;
    float *residual = joined ? random_bf16(R * C, 3.0f, &residual_dev) : NULL;
    tt_cuda_rmsnorm_forward(out_dev, rstd_dev, x_dev, w_dev, residual_dev, R, C, 1e-6f, offset, 0);
    tt_cuda_rmsnorm_backward(dx_dev, dw_dev, 1, dout_dev, x_dev, w_dev, rstd_dev, R, C, offset, scratch, 0);
    TT_CUDA_CHECK(cudaDeviceSynchronize());

    float *out = malloc(sizeof(float) * (size_t)(R * C)), *rstd = malloc(sizeof(float) * (size_t)R);
    float *dw = calloc((size_t)C, sizeof(float));
    tt_cpu_rmsnorm_forward_f32(out, rstd, x, w, residual, R, C, 1e-6, offset);
    tt_cpu_rmsnorm_backward_f32(NULL, dx0, dw, dout, x, w, rstd, R, C, offset);
    char what[96];
    snprintf(what, sizeof what, "rmsnorm forward [%lld, %lld] offset %g%s", (long long)R, (long long)C, offset,
             joined ? " joining a residual" : "");
    expect_device_close(what, out_dev, out, R * C, BF16_TOLERANCE);
    float *g = download_f32(rstd_dev, R);
    expect_close("rmsnorm rstd", g, rstd, R, 1e-5);
    free(g);
    expect_device_close("rmsnorm backward dx (+=)", dx_dev, dx0, R * C, 2 * BF16_TOLERANCE);
    g = download_f32(dw_dev, C);
    expect_close("rmsnorm backward dw (+=, fp32)", g, dw, C, 1e-3);
    free(g);

    /* determinism: the same call again gives the same bits; with no output, the same rstd alone */
    tt_bf16 *out2 = device_poisoned(R * C);
    tt_cuda_rmsnorm_forward(out2, rstd_dev, x_dev, w_dev, residual_dev, R, C, 1e-6f, offset, 0);
    TT_EXPECT(same_bits_bf16(out_dev, out2, R * C), "rmsnorm forward is deterministic");
    float *rstd_first = download_f32(rstd_dev, R);
    TT_CUDA_CHECK(cudaMemset(rstd_dev, 0xff, sizeof(float) * (size_t)R));
    tt_cuda_rmsnorm_forward(NULL, rstd_dev, x_dev, w_dev, residual_dev, R, C, 1e-6f, offset, 0);
    float *rstd_alone = download_f32(rstd_dev, R);
    TT_EXPECT(memcmp(rstd_first, rstd_alone, sizeof(float) * (size_t)R) == 0, "rmsnorm forward with no output: rstd");
    free(rstd_first);
    free(rstd_alone);
    cudaFree(out2);
    cudaFree(residual_dev);
    free(residual);
    cudaFree(out_dev);
    cudaFree(rstd_dev);
    cudaFree(dw_dev);
    cudaFree(scratch);
    cudaFree(x_dev);
    cudaFree(w_dev);
    cudaFree(dout_dev);
    cudaFree(dx_dev);
    free(x);
    free(w);
    free(dout);
    free(dx0);
    free(out);
    free(rstd);
    free(dw);
}

static void test_glu(int64_t n, tt_glu_activation act) {
    tt_bf16 *gate_dev, *up_dev, *dh_dev;
    float *gate = random_bf16(n, 4.0f, &gate_dev), *up = random_bf16(n, 2.0f, &up_dev),
          *dh = random_bf16(n, 1.0f, &dh_dev);
    tt_bf16 *h_dev = device_poisoned(n), *dgate_dev = device_poisoned(n), *dup_dev = device_poisoned(n);
    tt_cuda_glu_forward(h_dev, gate_dev, up_dev, n, act, 0);
    tt_cuda_glu_backward(dgate_dev, dup_dev, dh_dev, gate_dev, up_dev, n, act, 0);
    TT_CUDA_CHECK(cudaDeviceSynchronize());
    float *h = malloc(sizeof(float) * (size_t)n), *dgate = malloc(sizeof(float) * (size_t)n),
          *dup = malloc(sizeof(float) * (size_t)n);
    tt_cpu_glu_forward_f32(h, gate, up, n, act);
    tt_cpu_glu_backward_f32(dgate, dup, dh, gate, up, n, act);
    const char *name = act == TT_GLU_SILU ? "swiglu" : "geglu";
    char what[64];
    snprintf(what, sizeof what, "%s forward", name);
    expect_device_close(what, h_dev, h, n, BF16_TOLERANCE);
    snprintf(what, sizeof what, "%s backward dgate", name);
    expect_device_close(what, dgate_dev, dgate, n, BF16_TOLERANCE);
    snprintf(what, sizeof what, "%s backward dup", name);
    expect_device_close(what, dup_dev, dup, n, BF16_TOLERANCE);
    cudaFree(gate_dev);
    cudaFree(up_dev);
    cudaFree(dh_dev);
    cudaFree(h_dev);
    cudaFree(dgate_dev);
    cudaFree(dup_dev);
    free(gate);
    free(up);
    free(dh);
    free(h);
    free(dgate);
    free(dup);
}

/* rd: the rotated dimensions of each head (partial rotary below hd) */
static void test_rope(int64_t B, int64_t T, int64_t H, int64_t hd, int64_t rd) {
    const int64_t n = B * T * H * hd, half = rd / 2;
    float *cos_table = malloc(sizeof(float) * (size_t)(T * half)),
          *sin_table = malloc(sizeof(float) * (size_t)(T * half));
    for (int64_t p = 0; p < T; p++)
        for (int64_t i = 0; i < half; i++) {
            float angle = (float)p / powf(10000.0f, (float)(2 * i) / (float)rd);
            cos_table[p * half + i] = cosf(angle);
            sin_table[p * half + i] = sinf(angle);
        }
    float *cos_dev, *sin_dev;
    TT_CUDA_CHECK(cudaMalloc((void **)&cos_dev, sizeof(float) * (size_t)(T * half)));
    TT_CUDA_CHECK(cudaMalloc((void **)&sin_dev, sizeof(float) * (size_t)(T * half)));
    TT_CUDA_CHECK(cudaMemcpy(cos_dev, cos_table, sizeof(float) * (size_t)(T * half), cudaMemcpyHostToDevice));
    TT_CUDA_CHECK(cudaMemcpy(sin_dev, sin_table, sizeof(float) * (size_t)(T * half), cudaMemcpyHostToDevice));
    tt_bf16 *x_dev, *dx_dev;
    float *x = random_bf16(n, 2.0f, &x_dev), *dx = random_bf16(n, 1.0f, &dx_dev);
    tt_cuda_rope_forward(x_dev, cos_dev, sin_dev, B, T, H, hd, rd, 0);
    tt_cuda_rope_backward(dx_dev, cos_dev, sin_dev, B, T, H, hd, rd, 0);
    TT_CUDA_CHECK(cudaDeviceSynchronize());
    tt_cpu_rope_forward_f32(x, cos_table, sin_table, B, T, H, hd, rd);
    tt_cpu_rope_backward_f32(dx, cos_table, sin_table, B, T, H, hd, rd);
    char what[64];
    snprintf(what, sizeof what, "rope forward (%lld of %lld)", (long long)rd, (long long)hd);
    expect_device_close(what, x_dev, x, n, BF16_TOLERANCE);
    snprintf(what, sizeof what, "rope backward (%lld of %lld)", (long long)rd, (long long)hd);
    expect_device_close(what, dx_dev, dx, n, BF16_TOLERANCE);
    cudaFree(cos_dev);
    cudaFree(sin_dev);
    cudaFree(x_dev);
    cudaFree(dx_dev);
    free(cos_table);
    free(sin_table);
    free(x);
    free(dx);
}

/* scale: the output's multiplier (1: a plain lookup, exact both ways) */
static void test_embedding(int64_t N, int64_t V, int64_t D, float scale) {
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)N);
    for (int64_t n = 0; n < N; n++) ids[n] = (int32_t)(tt_rng_next(&gpu_test_rng) % (uint64_t)(n % 3 == 0 ? 5 : V));
    tt_bf16 *table_dev, *dout_dev;
    float *table = random_bf16(V * D, 1.0f, &table_dev), *dout = random_bf16(N * D, 1.0f, &dout_dev);
    int32_t *ids_dev;
    TT_CUDA_CHECK(cudaMalloc((void **)&ids_dev, sizeof(int32_t) * (size_t)N));
    TT_CUDA_CHECK(cudaMemcpy(ids_dev, ids, sizeof(int32_t) * (size_t)N, cudaMemcpyHostToDevice));
    tt_bf16 *out_dev = device_poisoned(N * D);
    tt_cuda_embedding_forward(out_dev, ids_dev, table_dev, N, D, scale, 0);

    int32_t *order = malloc(sizeof(int32_t) * (size_t)N), *starts = malloc(sizeof(int32_t) * (size_t)(N + 1)),
            *tokens = malloc(sizeof(int32_t) * (size_t)N), *counts = malloc(sizeof(int32_t) * (size_t)(V + 1));
    int64_t segments = tt_embedding_backward_order(ids, N, V, order, starts, tokens, counts);
    bool sorted = true;
    for (int64_t s = 0; s < segments; s++)
        for (int32_t k = starts[s]; k < starts[s + 1]; k++) {
            sorted = sorted && ids[order[k]] == tokens[s];
            if (k > starts[s]) sorted = sorted && order[k] > order[k - 1];
        }
    TT_EXPECT(sorted && starts[segments] == N, "embedding backward order groups positions by token, ascending");
    int32_t *order_dev, *starts_dev, *tokens_dev;
    TT_CUDA_CHECK(cudaMalloc((void **)&order_dev, sizeof(int32_t) * (size_t)N));
    TT_CUDA_CHECK(cudaMalloc((void **)&starts_dev, sizeof(int32_t) * (size_t)(N + 1)));
    TT_CUDA_CHECK(cudaMalloc((void **)&tokens_dev, sizeof(int32_t) * (size_t)N));
    TT_CUDA_CHECK(cudaMemcpy(order_dev, order, sizeof(int32_t) * (size_t)N, cudaMemcpyHostToDevice));
    TT_CUDA_CHECK(cudaMemcpy(starts_dev, starts, sizeof(int32_t) * (size_t)(N + 1), cudaMemcpyHostToDevice));
    TT_CUDA_CHECK(cudaMemcpy(tokens_dev, tokens, sizeof(int32_t) * (size_t)N, cudaMemcpyHostToDevice));
    float *dtable_dev;
    TT_CUDA_CHECK(cudaMalloc((void **)&dtable_dev, sizeof(float) * (size_t)(V * D)));
    TT_CUDA_CHECK(cudaMemset(dtable_dev, 0, sizeof(float) * (size_t)(V * D)));
    tt_cuda_embedding_backward(dtable_dev, 1, order_dev, starts_dev, tokens_dev, segments, dout_dev, D, scale, 0);
    TT_CUDA_CHECK(cudaDeviceSynchronize());

    float *out = malloc(sizeof(float) * (size_t)(N * D)), *dtable = calloc((size_t)(V * D), sizeof(float));
    tt_cpu_embedding_forward_f32(out, ids, table, N, D, scale);
    tt_cpu_embedding_backward_f32(dtable, ids, dout, N, D, scale);
    float *g = download_bf16(out_dev, N * D);
    if (scale == 1.0f)
        TT_EXPECT(memcmp(g, out, sizeof(float) * (size_t)(N * D)) == 0, "embedding forward copies rows exactly");
    expect_close("embedding forward", g, out, N * D, BF16_TOLERANCE);
    free(g);
    g = download_f32(dtable_dev, V * D);
    if (scale == 1.0f)
        TT_EXPECT(memcmp(g, dtable, sizeof(float) * (size_t)(V * D)) == 0,
                  "embedding backward: fp32 sums in position order equal the CPU's bit for bit");
    expect_close("embedding backward", g, dtable, V * D, 1e-6);
    free(g);
    cudaFree(ids_dev);
    cudaFree(table_dev);
    cudaFree(dout_dev);
    cudaFree(out_dev);
    cudaFree(order_dev);
    cudaFree(starts_dev);
    cudaFree(tokens_dev);
    cudaFree(dtable_dev);
    free(ids);
    free(table);
    free(dout);
    free(order);
    free(starts);
    free(tokens);
    free(counts);
    free(out);
    free(dtable);
}

/* C = op(A) op(B) (+ C), against cblas_sgemm on the same bf16-rounded inputs. */
static void test_gemm(tt_cuda_gemm_context *context, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                      bool c_is_fp32, float beta) {
    tt_bf16 *a_dev, *b_dev;
    float *a = random_bf16(M * K, 1.0f, &a_dev), *b = random_bf16(K * N, 1.0f, &b_dev);
    const int64_t lda = trans_a ? M : K, ldb = trans_b ? K : N, ldc = N;
    tt_bf16 *c0_dev;
    float *c = random_bf16(M * N, 4.0f, &c0_dev); /* the accumulated-into start values */
    void *c_dev;
    if (c_is_fp32) {
        TT_CUDA_CHECK(cudaMalloc(&c_dev, sizeof(float) * (size_t)(M * N)));
        if (beta != 0) {
            TT_CUDA_CHECK(cudaMemcpy(c_dev, c, sizeof(float) * (size_t)(M * N), cudaMemcpyHostToDevice));
        } else {
            TT_CUDA_CHECK(cudaMemset(c_dev, 0xff, sizeof(float) * (size_t)(M * N))); /* NaN poison */
        }
    } else {
        c_dev = beta != 0 ? (void *)c0_dev : (void *)device_poisoned(M * N);
    }
    tt_cuda_gemm(context, trans_a, trans_b, M, N, K, 1.0f, a_dev, lda, b_dev, ldb, beta, c_dev, c_is_fp32, ldc, 0);
    TT_CUDA_CHECK(cudaDeviceSynchronize());
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, (int)M, (int)N,
                (int)K, 1.0f, a, (int)lda, b, (int)ldb, beta, c, (int)ldc);
    float *g = c_is_fp32 ? download_f32(c_dev, M * N) : download_bf16(c_dev, M * N);
    char what[96];
    snprintf(what, sizeof what, "gemm %s%s %lldx%lldx%lld %s beta %g", trans_a ? "T" : "N", trans_b ? "T" : "N",
             (long long)M, (long long)N, (long long)K, c_is_fp32 ? "fp32" : "bf16", (double)beta);
    expect_close(what, g, c, M * N, c_is_fp32 ? 1e-4 : BF16_TOLERANCE);
    free(g);
    if (c_dev != (void *)c0_dev) cudaFree(c_dev);
    cudaFree(c0_dev);
    cudaFree(a_dev);
    cudaFree(b_dev);
    free(a);
    free(b);
    free(c);
}

/* The LoRA dropout (and scale) kernel: the same mask as the CPU op, bit for bit, and the kept
 * values as the CPU's fp32 product rounded once to bf16; in place (out == x) too. */
static void test_dropout_scale(int64_t n, double probability, float multiplier) {
    tt_bf16 *x_dev;
    float *x = random_bf16(n, 3.0f, &x_dev);
    tt_bf16 *out_dev = device_poisoned(n);
    const uint32_t threshold = tt_dropout_threshold(probability);
    tt_cuda_dropout_scale(out_dev, x_dev, n, multiplier, threshold, 0x5eedull, 0);
    tt_cuda_dropout_scale(x_dev, x_dev, n, multiplier, threshold, 0x5eedull, 0);
    TT_CUDA_CHECK(cudaDeviceSynchronize());
    float *want = malloc(sizeof(float) * (size_t)n);
    tt_cpu_dropout_scale_f32(want, x, n, multiplier, threshold, 0x5eedull);
    float *got = download_bf16(out_dev, n), *got_in_place = download_bf16(x_dev, n);
    int64_t same = 0, dropped = 0;
    for (int64_t i = 0; i < n; i++) {
        const float rounded = tt_bf16_to_f32(tt_f32_to_bf16(want[i]));
        same += got[i] == rounded && got_in_place[i] == rounded;
        dropped += want[i] == 0 && x[i] != 0;
    }
    TT_EXPECT(same == n, "dropout p=%g: %lld of %lld elements as the CPU's (mask and value)", probability,
              (long long)same, (long long)n);
    printf("  %-44s %lld of %lld match, %.3f dropped\n", "dropout scale", (long long)same, (long long)n,
           (double)dropped / (double)n);
    cudaFree(x_dev);
    cudaFree(out_dev);
    free(x);
    free(want);
    free(got);
    free(got_in_place);
}

/* y += x W^T in place (the addend is the output): a LoRA adapter's up projection onto the base output. */
static void test_gemm_add_in_place(tt_cuda_gemm_context *context, int64_t N, int64_t in, int64_t out) {
    tt_bf16 *x_dev, *w_dev, *y_dev;
    float *x = random_bf16(N * in, 1.0f, &x_dev), *w = random_bf16(out * in, 1.0f, &w_dev);
    float *y = random_bf16(N * out, 4.0f, &y_dev);
    tt_cuda_gemm_add(context, false, true, N, out, in, x_dev, in, w_dev, in, y_dev, y_dev, out, 0);
    TT_CUDA_CHECK(cudaDeviceSynchronize());
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)N, (int)out, (int)in, 1.0f, x, (int)in, w, (int)in, 1.0f,
                y, (int)out);
    expect_device_close("gemm add in place (LoRA up projection)", y_dev, y, N * out, BF16_TOLERANCE);
    cudaFree(x_dev);
    cudaFree(w_dev);
    cudaFree(y_dev);
    free(x);
    free(w);
    free(y);
}

/* The simple attention kernels against the CPU op; the backward gets the same (bf16-rounded)
 * forward output and log-sum-exp on both sides. */
static void test_attention(int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t hd, int64_t window, double softcap) {
    tt_attention_shape shape = {.batch = B,
                                .seq_len = T,
                                .num_heads = Hq,
                                .num_kv_heads = Hkv,
                                .head_dim = hd,
                                .softcap = softcap,
                                .scale = 1.0 / sqrt((double)hd),
                                .sliding_window = window};
    const int64_t nq = B * T * Hq * hd, nkv = B * T * Hkv * hd, rows = B * Hq * T;
    tt_bf16 *q_dev, *k_dev, *v_dev, *dout_dev;
    float *q = random_bf16(nq, 2.0f, &q_dev), *k = random_bf16(nkv, 2.0f, &k_dev), *v = random_bf16(nkv, 1.0f, &v_dev);
    float *dout = random_bf16(nq, 1.0f, &dout_dev);
    tt_bf16 *out_dev = device_poisoned(nq);
    float *lse_dev;
    TT_CUDA_CHECK(cudaMalloc((void **)&lse_dev, sizeof(float) * (size_t)rows));
    tt_cuda_attention_forward(out_dev, lse_dev, q_dev, k_dev, v_dev, &shape, 0);
    TT_CUDA_CHECK(cudaDeviceSynchronize());
    float *out = malloc(sizeof(float) * (size_t)nq), *lse = malloc(sizeof(float) * (size_t)rows);
    tt_cpu_attention_forward_f32(NULL, out, lse, q, k, v, &shape);
    char what[96];
    snprintf(what, sizeof what, "attention forward hd %lld window %lld", (long long)hd, (long long)window);
    expect_device_close(what, out_dev, out, nq, BF16_TOLERANCE);
    float *g = download_f32(lse_dev, rows);
    expect_close("attention log-sum-exp", g, lse, rows, 1e-5);
    free(g);

    tt_bf16 *same_out_dev = upload_as_bf16(out, nq);
    float *same_lse_dev = upload_f32(lse, rows), *scratch;
    TT_CUDA_CHECK(cudaMalloc((void **)&scratch, sizeof(float) * (size_t)rows));
    tt_bf16 *dq_dev = device_poisoned(nq), *dk_dev = device_poisoned(nkv), *dv_dev = device_poisoned(nkv);
    tt_cuda_attention_backward(dq_dev, dk_dev, dv_dev, dout_dev, same_out_dev, same_lse_dev, q_dev, k_dev, v_dev,
                               &shape, scratch, 0);
    TT_CUDA_CHECK(cudaDeviceSynchronize());
    expect_attention_backward_close("attention backward", dq_dev, dk_dev, dv_dev, dout, out, lse, q, k, v, &shape,
                                    2 * BF16_TOLERANCE);
    tt_bf16 *dq2_dev = device_poisoned(nq);
    tt_cuda_attention_backward(dq2_dev, dk_dev, dv_dev, dout_dev, same_out_dev, same_lse_dev, q_dev, k_dev, v_dev,
                               &shape, scratch, 0);
    TT_EXPECT(same_bits_bf16(dq_dev, dq2_dev, nq), "attention backward is deterministic");
    cudaFree(dq2_dev);
    cudaFree(q_dev);
    cudaFree(k_dev);
    cudaFree(v_dev);
    cudaFree(dout_dev);
    cudaFree(out_dev);
    cudaFree(lse_dev);
    cudaFree(same_out_dev);
    cudaFree(same_lse_dev);
    cudaFree(scratch);
    cudaFree(dq_dev);
    cudaFree(dk_dev);
    cudaFree(dv_dev);
    free(q);
    free(k);
    free(v);
    free(dout);
    free(out);
    free(lse);
}

/* The KV-cache attention (generation) against the CPU op: n queries at positions start.. over start + n cached keys
 * (decoding: n 1; a prompt's prefill: start 0), twice for the same bits. */
static void test_attention_cached(int64_t start, int64_t n, int64_t Hq, int64_t Hkv, int64_t hd, int64_t window,
                                  double softcap) {
    const tt_attention_shape shape = {.num_heads = Hq,
                                      .num_kv_heads = Hkv,
                                      .head_dim = hd,
                                      .softcap = softcap,
                                      .scale = 1.0 / sqrt((double)hd),
                                      .sliding_window = window};
    const int64_t keys = start + n, nq = n * Hq * hd, nkv = keys * Hkv * hd;
    tt_bf16 *q_dev, *k_dev, *v_dev;
    float *q = random_bf16(nq, 2.0f, &q_dev), *k = random_bf16(nkv, 2.0f, &k_dev), *v = random_bf16(nkv, 1.0f, &v_dev);
    tt_bf16 *out_dev = device_poisoned(nq), *again_dev = device_poisoned(nq), *whole_dev = device_poisoned(nq);
    const size_t scratch_bytes = tt_cuda_attention_cached_scratch_bytes(Hq, hd);
    float *scratch;
    TT_CUDA_CHECK(cudaMalloc((void **)&scratch, scratch_bytes));
    tt_cuda_attention_cached(out_dev, q_dev, k_dev, v_dev, start, n, &shape, scratch, scratch_bytes, 0);
    tt_cuda_attention_cached(again_dev, q_dev, k_dev, v_dev, start, n, &shape, scratch, scratch_bytes, 0);
    tt_cuda_attention_cached(whole_dev, q_dev, k_dev, v_dev, start, n, &shape, NULL, 0, 0); /* keys not split */
    TT_CUDA_CHECK(cudaDeviceSynchronize());
    float *out = malloc(sizeof(float) * (size_t)nq);
    tt_cpu_attention_cached_f32(NULL, out, q, k, v, start, n, &shape);
    char what[128];
    snprintf(what, sizeof what, "cached attention start %lld n %lld hd %lld window %lld", (long long)start,
             (long long)n, (long long)hd, (long long)window);
    expect_device_close(what, out_dev, out, nq, BF16_TOLERANCE);
    snprintf(what, sizeof what, "cached attention, keys not split, start %lld n %lld", (long long)start, (long long)n);
    expect_device_close(what, whole_dev, out, nq, BF16_TOLERANCE);
    TT_EXPECT(same_bits_bf16(out_dev, again_dev, nq), "cached attention is deterministic");
    cudaFree(whole_dev);
    cudaFree(scratch);
    cudaFree(q_dev);
    cudaFree(k_dev);
    cudaFree(v_dev);
    cudaFree(out_dev);
    cudaFree(again_dev);
    free(q);
    free(k);
    free(v);
    free(out);
}

/* NEFTune's noise: the same draws as the CPU op, within the bf16 rounding of the sum. */
static void test_uniform_noise(int64_t n, float magnitude) {
    tt_bf16 *x_dev;
    float *x = random_bf16(n, 1.0f, &x_dev);
    tt_cuda_add_uniform_noise(x_dev, n, magnitude, 1234567, 0);
    TT_CUDA_CHECK(cudaDeviceSynchronize());
    tt_cpu_add_uniform_noise_f32(x, n, magnitude, 1234567);
    expect_device_close("NEFTune noise", x_dev, x, n, BF16_TOLERANCE);
    cudaFree(x_dev);
    free(x);
}

/* Cross-entropy on a chunk of logits against a double-precision reference. */
/* logit_scale, softcap: the logits' multiplier (Granite) and soft-capping (Gemma 2; 0: none) */
static void test_cross_entropy(int64_t rows, int64_t V, float logit_scale, float softcap) {
    tt_bf16 *logits_dev;
    float *logits = random_bf16(rows * V, 8.0f, &logits_dev);
    int32_t *targets = malloc(sizeof(int32_t) * (size_t)rows);
    for (int64_t r = 0; r < rows; r++)
        targets[r] = r % 7 == 3 ? -100 : (int32_t)(tt_rng_next(&gpu_test_rng) % (uint64_t)V);
    int32_t *targets_dev;
    float *row_loss_dev;
    double *sum_dev;
    TT_CUDA_CHECK(cudaMalloc((void **)&targets_dev, sizeof(int32_t) * (size_t)rows));
    TT_CUDA_CHECK(cudaMemcpy(targets_dev, targets, sizeof(int32_t) * (size_t)rows, cudaMemcpyHostToDevice));
    TT_CUDA_CHECK(cudaMalloc((void **)&row_loss_dev, sizeof(float) * (size_t)rows));
    TT_CUDA_CHECK(cudaMalloc((void **)&sum_dev, sizeof(double)));
    const float scale = 1.0f / 50.0f;
    tt_cuda_cross_entropy_chunk(logits_dev, row_loss_dev, targets_dev, rows, V, scale, logit_scale, softcap, 0);
    tt_cuda_sum(sum_dev, row_loss_dev, rows, 0);
    TT_CUDA_CHECK(cudaDeviceSynchronize());

    float *loss = malloc(sizeof(float) * (size_t)rows), *grad = malloc(sizeof(float) * (size_t)(rows * V));
    double total = 0;
    for (int64_t r = 0; r < rows; r++) {
        const float *row = logits + r * V;
        if (targets[r] == -100) {
            loss[r] = 0;
            for (int64_t j = 0; j < V; j++) grad[r * V + j] = 0;
            continue;
        }
        double *z = malloc(sizeof(double) * (size_t)V), *slope = malloc(sizeof(double) * (size_t)V);
        for (int64_t j = 0; j < V; j++) {
            const double u = (double)row[j] * logit_scale;
            z[j] = softcap > 0 ? softcap * tanh(u / softcap) : u;
            slope[j] = logit_scale * (softcap > 0 ? 1 - (z[j] / softcap) * (z[j] / softcap) : 1);
        }
        double m = -INFINITY, sum = 0;
        for (int64_t j = 0; j < V; j++) m = z[j] > m ? z[j] : m;
        for (int64_t j = 0; j < V; j++) sum += exp(z[j] - m);
        loss[r] = (float)(m + log(sum) - z[targets[r]]);
        total += loss[r];
        for (int64_t j = 0; j < V; j++)
            grad[r * V + j] = (float)(scale * (exp(z[j] - m) / sum - (j == targets[r] ? 1.0 : 0.0)) * slope[j]);
        free(z);
        free(slope);
    }
    float *g = download_f32(row_loss_dev, rows);
    expect_close("cross-entropy row losses", g, loss, rows, 1e-5);
    free(g);
    expect_device_close("cross-entropy gradient (in place)", logits_dev, grad, rows * V, BF16_TOLERANCE);
    double gpu_total = 0;
    TT_CUDA_CHECK(cudaMemcpy(&gpu_total, sum_dev, sizeof(double), cudaMemcpyDeviceToHost));
    TT_EXPECT(fabs(gpu_total - total) <= 1e-5 * fabs(total), "loss sum %.9g vs %.9g", gpu_total, total);
    cudaFree(logits_dev);
    cudaFree(targets_dev);
    cudaFree(row_loss_dev);
    cudaFree(sum_dev);
    free(logits);
    free(targets);
    free(loss);
    free(grad);
}

/* AdamW with fp32 moments gives the CPU backend's bits; with bf16 moments it stays close. */
static void test_adamw(int64_t n) {
    float *p = malloc(sizeof(float) * (size_t)n), *g = malloc(sizeof(float) * (size_t)n),
          *m = malloc(sizeof(float) * (size_t)n), *v = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
        p[i] = (float)(tt_rng_uniform(&gpu_test_rng) - 0.5);
        g[i] = (float)(1e-2 * (tt_rng_uniform(&gpu_test_rng) - 0.5));
        m[i] = (float)(1e-3 * (tt_rng_uniform(&gpu_test_rng) - 0.5));
        v[i] = (float)(1e-5 * tt_rng_uniform(&gpu_test_rng));
    }
    float *p_dev, *g_dev, *m_dev, *v_dev;
    tt_bf16 *w_dev = device_poisoned(n);
    const size_t bytes = sizeof(float) * (size_t)n;
    TT_CUDA_CHECK(cudaMalloc((void **)&p_dev, bytes));
    TT_CUDA_CHECK(cudaMalloc((void **)&g_dev, bytes));
    TT_CUDA_CHECK(cudaMalloc((void **)&m_dev, bytes));
    TT_CUDA_CHECK(cudaMalloc((void **)&v_dev, bytes));
    TT_CUDA_CHECK(cudaMemcpy(p_dev, p, bytes, cudaMemcpyHostToDevice));
    TT_CUDA_CHECK(cudaMemcpy(g_dev, g, bytes, cudaMemcpyHostToDevice));
    TT_CUDA_CHECK(cudaMemcpy(m_dev, m, bytes, cudaMemcpyHostToDevice));
    TT_CUDA_CHECK(cudaMemcpy(v_dev, v, bytes, cudaMemcpyHostToDevice));
    /* three segments, the middle one without weight decay: one multi-tensor launch against three
     * CPU calls */
    const int64_t starts[4] = {0, n / 3, 2 * n / 3, n};
    const unsigned char decays[3] = {1, 0, 1};
    tt_cuda_adamw(p_dev, w_dev, g_dev, 1, m_dev, v_dev, 0, starts, decays, 3, 3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 7, 0.5f,
                  0);
    TT_CUDA_CHECK(cudaDeviceSynchronize());
    for (int s = 0; s < 3; s++)
        tt_cpu_adamw_update_f32(p + starts[s], g + starts[s], m + starts[s], v + starts[s], starts[s + 1] - starts[s],
                                3e-4f, 0.9f, 0.95f, 1e-8f, decays[s] ? 0.1f : 0.0f, 7, 0.5f);
    float *got_p = download_f32(p_dev, n), *got_m = download_f32(m_dev, n), *got_v = download_f32(v_dev, n);
    TT_EXPECT(memcmp(got_p, p, bytes) == 0 && memcmp(got_m, m, bytes) == 0 && memcmp(got_v, v, bytes) == 0,
              "GPU AdamW (fp32 moments) gives the CPU backend's bits");
    float *got_w = download_bf16(w_dev, n);
    bool rounded = true;
    for (int64_t i = 0; i < n; i++) rounded = rounded && got_w[i] == tt_bf16_to_f32(tt_f32_to_bf16(p[i]));
    TT_EXPECT(rounded, "AdamW writes the bf16 compute copy of every updated weight");
    printf("  %-34s bit-identical to the CPU: %s\n", "adamw (fp32 moments)",
           memcmp(got_p, p, bytes) == 0 ? "yes" : "no");
    free(got_p);
    free(got_m);
    free(got_v);
    free(got_w);
    cudaFree(p_dev);
    cudaFree(g_dev);
    cudaFree(m_dev);
    cudaFree(v_dev);
    cudaFree(w_dev);
    free(p);
    free(g);
    free(m);
    free(v);
}

/* Column sums (bias gradients), the sum of squares, bias add and add. */
static void test_reductions(int64_t R, int64_t C) {
    tt_bf16 *x_dev, *b_dev, *y_dev, *a_dev;
    float *x = random_bf16(R * C, 1.0f, &x_dev), *b = random_bf16(C, 1.0f, &b_dev);
    float *y = random_bf16(R * C, 1.0f, &y_dev), *a = random_bf16(R * C, 1.0f, &a_dev);
    float *scratch, *db_dev;
    TT_CUDA_CHECK(cudaMalloc((void **)&scratch, sizeof(float) * (size_t)tt_cuda_column_sum_scratch(R, C)));
    TT_CUDA_CHECK(cudaMalloc((void **)&db_dev, sizeof(float) * (size_t)C));
    float *db = malloc(sizeof(float) * (size_t)C);
    for (int64_t c = 0; c < C; c++) db[c] = 0.5f; /* accumulates onto existing values */
    TT_CUDA_CHECK(cudaMemcpy(db_dev, db, sizeof(float) * (size_t)C, cudaMemcpyHostToDevice));
    tt_cuda_column_sum(db_dev, 1, x_dev, R, C, scratch, 0);
    double *sums_dev, *sum_scratch;
    TT_CUDA_CHECK(cudaMalloc((void **)&sums_dev, sizeof(double)));
    TT_CUDA_CHECK(cudaMalloc((void **)&sum_scratch, sizeof(double) * TT_CUDA_SUM_SQUARES_BLOCKS));
    tt_cuda_sum_squares(sums_dev, x_dev, 0, R * C, sum_scratch, 0);
    tt_bf16 *sum_dev = device_poisoned(R * C);
    tt_cuda_add(sum_dev, y_dev, a_dev, R * C, 0);
    tt_cuda_add_bias(y_dev, b_dev, R, C, 0);
    TT_CUDA_CHECK(cudaDeviceSynchronize());

    for (int64_t c = 0; c < C; c++) {
        double total = 0;
        for (int64_t r = 0; r < R; r++) total += x[r * C + c];
        db[c] = (float)(0.5 + total);
    }
    float *g = download_f32(db_dev, C);
    expect_close("column sums (bias gradient, +=)", g, db, C, 1e-6);
    free(g);
    double gpu_sum = 0, cpu_sum = tt_cpu_sum_squares_f32(NULL, x, R * C);
    TT_CUDA_CHECK(cudaMemcpy(&gpu_sum, sums_dev, sizeof(double), cudaMemcpyDeviceToHost));
    TT_EXPECT(fabs(gpu_sum - cpu_sum) <= 1e-12 * cpu_sum, "sum of squares %.17g vs CPU %.17g", gpu_sum, cpu_sum);
    printf("  %-34s relative difference %.2e\n", "sum of squares (double)", fabs(gpu_sum - cpu_sum) / cpu_sum);
    float *want = malloc(sizeof(float) * (size_t)(R * C));
    for (int64_t i = 0; i < R * C; i++) want[i] = y[i] + a[i];
    expect_device_close("add", sum_dev, want, R * C, BF16_TOLERANCE);
    for (int64_t i = 0; i < R * C; i++) want[i] = y[i] + b[i % C];
    expect_device_close("bias add", y_dev, want, R * C, BF16_TOLERANCE);
    cudaFree(x_dev);
    cudaFree(b_dev);
    cudaFree(y_dev);
    cudaFree(a_dev);
    cudaFree(scratch);
    cudaFree(db_dev);
    cudaFree(sums_dev);
    cudaFree(sum_scratch);
    cudaFree(sum_dev);
    free(x);
    free(b);
    free(y);
    free(a);
    free(db);
    free(want);
}

/* --gemm-probe T: the linear layers' GEMMs of Qwen3-1.7B at T tokens (forward y = x W^T, with the residual for
 * o_proj and down_proj; backward dx = dy W), each with the heuristic's first 8 algorithms: TFLOP/s, split-K, and
 * whether each gives the first one's bits. A diagnostic: it asserts nothing. */
static void gemm_probe(int64_t T) {
    static const struct {
        const char *name;
        int64_t out, in;
        bool residual;
    } layers[] = {{"q_proj", 2048, 2048, false},
                  {"k_proj", 1024, 2048, false},
                  {"o_proj", 2048, 2048, true},
                  {"gate_proj", 6144, 2048, false},
                  {"down_proj", 2048, 6144, true}};
    void *workspace;
    TT_CUDA_CHECK(cudaMalloc(&workspace, TT_CUDA_GEMM_WORKSPACE_BYTES));
    tt_cuda_gemm_context *gemm = tt_cuda_gemm_create(workspace, TT_CUDA_GEMM_WORKSPACE_BYTES);
    for (size_t li = 0; li < sizeof layers / sizeof layers[0]; li++)
        for (int backward = 0; backward < 2; backward++) {
            const int64_t out = layers[li].out, in = layers[li].in;
            const int64_t M = T, N = backward ? in : out, K = backward ? out : in;
            tt_bf16 *A, *B, *addend = NULL, *D, *D_first;
            free(random_bf16(M * K, 1.0f, &A));
            free(random_bf16(backward ? K * N : N * K, 0.05f, &B));
            if (layers[li].residual && !backward) free(random_bf16(M * N, 1.0f, &addend));
            D = device_poisoned(M * N);
            D_first = device_poisoned(M * N);
            float ms[8];
            bool same[8];
            int splits[8];
            const int found = tt_cuda_gemm_probe(gemm, false, !backward, M, N, K, A, K, B, backward ? N : K, addend, D,
                                                 D_first, N, 8, 20, ms, same, splits);
            printf("%-9s %-8s [%lld x %lld x %lld]:", layers[li].name, backward ? "dx" : "forward", (long long)M,
                   (long long)N, (long long)K);
            for (int i = 0; i < found; i++)
                printf("  %.0f%s%s", 2.0 * (double)M * (double)N * (double)K / (ms[i] * 1e-3) / 1e12,
                       splits[i] > 1 ? "(splitK)" : "", same[i] ? "" : "*");
            printf("   TFLOP/s (first: what runs; *: other bits)\n");
            cudaFree(A);
            cudaFree(B);
            cudaFree(addend);
            cudaFree(D);
            cudaFree(D_first);
        }
    tt_cuda_gemm_destroy(gemm);
    cudaFree(workspace);
}

/* The data-parallel sum of the ranks' parts: each element's terms added in part order, the CPU's bits exactly. */
static void test_sum_parts(int count, int64_t n) {
    float *parts = malloc(sizeof(float) * (size_t)count * (size_t)n), *expected = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < count * n; i++) parts[i] = (float)(tt_rng_normal(&gpu_test_rng) * 1e-3);
    for (int64_t i = 0; i < n; i++) {
        float sum = parts[i];
        for (int r = 1; r < count; r++) sum += parts[(size_t)r * (size_t)n + (size_t)i];
        expected[i] = sum;
    }
    float *parts_dev, *out_dev;
    TT_CUDA_CHECK(cudaMalloc((void **)&parts_dev, sizeof(float) * (size_t)count * (size_t)n));
    TT_CUDA_CHECK(cudaMalloc((void **)&out_dev, sizeof(float) * (size_t)n));
    TT_CUDA_CHECK(cudaMemcpy(parts_dev, parts, sizeof(float) * (size_t)count * (size_t)n, cudaMemcpyHostToDevice));
    tt_cuda_sum_parts(out_dev, parts_dev, count, n, 0);
    float *got = malloc(sizeof(float) * (size_t)n);
    TT_CUDA_CHECK(cudaMemcpy(got, out_dev, sizeof(float) * (size_t)n, cudaMemcpyDeviceToHost));
    TT_EXPECT(memcmp(got, expected, sizeof(float) * (size_t)n) == 0, "sum of %d parts of %lld: the CPU's bits", count,
              (long long)n);
    cudaFree(parts_dev);
    cudaFree(out_dev);
    free(parts);
    free(expected);
    free(got);
}

int main(int argc, char **argv) {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        fprintf(stderr, "test_gpu_kernels: no CUDA device; run `make test-gpu` on a machine with a GPU\n");
        return 1;
    }
    if (argc == 3 && strcmp(argv[1], "--gemm-probe") == 0) {
        tt_rng_seed(&gpu_test_rng, 2026);
        gemm_probe(atoll(argv[2]));
        return 0;
    }
    tt_rng_seed(&gpu_test_rng, 2026);
    test_rmsnorm(37, 2048, 0.0f, false);
    test_rmsnorm(300, 128, 0.0f, false); /* per-head q/k norm shape, several row blocks */
    test_rmsnorm(37, 2304, 1.0f, true);  /* Gemma's (1 + w), a norm after a sublayer joining the residual */
    test_glu(100003, TT_GLU_SILU);
    test_glu(100003, TT_GLU_GELU_TANH);
    test_dropout_scale(100003, 0.1, (float)(1.0 / 0.9));
    test_dropout_scale(4099, 0.0, 2.0f); /* a plain scale (the adapter's scaling) */
    test_rope(2, 33, 4, 128, 128);
    test_rope(1, 17, 3, 64, 64);
    test_rope(2, 19, 3, 128, 96); /* partial rotary (Phi-4-mini's 0.75) */
    test_rope(1, 11, 2, 64, 6);   /* an odd half: the one-pair kernel */
    test_embedding(1000, 300, 96, 1.0f);
    test_embedding(1000, 300, 96, 48.0f); /* Gemma's sqrt(hidden), in bf16 */

    test_attention(2, 67, 4, 2, 64, 0, 0.0);
    test_attention(1, 70, 8, 2, 128, 0, 0.0);
    test_attention(2, 40, 4, 4, 128, 16, 0.0);
    test_attention(2, 40, 4, 2, 256, 16, 5.0); /* Gemma 2: soft-capping, a window, head_dim 256 */
    test_uniform_noise(100003, 0.05f);
    test_attention_cached(0, 37, 4, 2, 64, 0, 0.0);       /* a prompt's prefill */
    test_attention_cached(300, 1, 8, 2, 128, 0, 0.0);     /* decoding one token */
    test_attention_cached(1000, 3, 8, 8, 128, 16, 0.0);   /* a window */
    test_attention_cached(50, 1, 4, 2, 256, 0, 5.0);      /* Gemma 2: soft-capping, head_dim 256 */
    test_attention_cached(4000, 2, 16, 8, 128, 0, 0.0);   /* keys split in ranges (MAX_SPLITS) */
    test_attention_cached(5000, 1, 8, 4, 128, 1024, 0.0); /* ranges within a window */
    test_reductions(1000, 384);
    test_sum_parts(2, 100003);
    test_sum_parts(8, 4099);
    test_cross_entropy(50, 32000, 1.0f, 0.0f);
    test_cross_entropy(7, 151936, 1.0f, 0.0f);
    test_cross_entropy(9, 32000, 0.125f, 0.0f); /* Granite's 1 / logits_scaling */
    test_cross_entropy(9, 32000, 1.0f, 3.0f);   /* Gemma 2's final soft-capping */
    test_adamw(1000003);

    void *workspace;
    TT_CUDA_CHECK(cudaMalloc(&workspace, TT_CUDA_GEMM_WORKSPACE_BYTES));
    tt_cuda_gemm_context *gemm = tt_cuda_gemm_create(workspace, TT_CUDA_GEMM_WORKSPACE_BYTES);
    test_gemm(gemm, false, true, 300, 256, 512, false, 0.0f);  /* linear forward: y = x W^T */
    test_gemm(gemm, false, true, 300, 256, 512, false, 1.0f);  /* ... accumulated onto the residual */
    test_gemm(gemm, false, false, 300, 512, 256, false, 0.0f); /* dx = dy W */
    test_gemm(gemm, true, false, 256, 512, 300, true, 1.0f);   /* dW += dy^T x, fp32 gradients */
    test_gemm(gemm, true, false, 256, 512, 300, true, 0.0f);
    test_gemm(gemm, false, true, 300, 256, 512, false, 0.0f); /* the same shape again: cached */
    test_gemm_add_in_place(gemm, 300, 16, 256);
    /* beta is a run-time scalar, not part of a shape: NT/bf16, NN/bf16, TN/fp32, and the in-place add's K = 16 */
    TT_EXPECT(tt_cuda_gemm_cached_shapes(gemm) == 4, "GEMM descriptors cached per shape (%d)",
              tt_cuda_gemm_cached_shapes(gemm));
    tt_cuda_gemm_destroy(gemm);
    cudaFree(workspace);
    return tt_test_summary("gpu_kernels");
}
