/* The CUDA dequantization of 4-bit weights (kernels_quant4.cu) against the CPU oracle (model/quant4.c): NF4 and
 * FP4, plain and double-quantized absmax, and the 8-bit form (load_in_8bit), whole and ragged sizes; every bf16 output must be the CPU's fp32 value
 * rounded to bf16, bit for bit. Then the fused 4-bit GEMM (kernels_quant4_gemm.cu, y = x W^T) against a host
 * reference on the oracle's values and against today's path (dequantize, then cuBLASLt).
 *
 *   test_gpu_quant4 [SOURCE_DIR] [--quick]   the checks (all of them either way: they take seconds; the arguments
 *                                            are those tools/gpu_suite.sh passes every GPU test)
 *   test_gpu_quant4 --speed [M]              times both paths on Qwen3-8B's and a 70B model's linear shapes for M
 *                                            tokens (default 16384): one line a shape, starting "speed" */
#include <math.h>
#include <stdio.h>

#include "gpu_test_util.h"
#include "model/quant4.h"
#include "ops/cuda/gemm_cuda.h"

static void check_dequantize(int64_t n, tt_quant4_type type, bool double_quant) {
    const tt_quant4_format format = {.type = type, .double_quant = double_quant};
    const tt_quant4_layout l = tt_quant4_layout_of(n, &format);
    float *values = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i += 2) {
        double pair[2];
        tt_rng_normal_pair(&gpu_test_rng, pair);
        values[i] = tt_bf16_to_f32(tt_f32_to_bf16((float)(0.02 * pair[0])));
        if (i + 1 < n) values[i + 1] = tt_bf16_to_f32(tt_f32_to_bf16((float)(0.02 * pair[1])));
    }
    for (int64_t i = 0; i < 64 && i < n; i++) values[i] = 0.0f; /* an all-zero block */
    unsigned char *quantized = malloc(l.bytes);
    tt_quant4_quantize(quantized, values, n, &format);
    float *expected = malloc(sizeof(float) * (size_t)n);
    tt_quant4_dequantize(expected, quantized, n, &format);

    void *device_quantized;
    TT_CUDA_CHECK(cudaMalloc(&device_quantized, l.bytes));
    TT_CUDA_CHECK(cudaMemcpy(device_quantized, quantized, l.bytes, cudaMemcpyHostToDevice));
    tt_bf16 *out = device_poisoned(n);
    tt_cuda_dequantize_4bit(out, device_quantized, n, &format, 0);
    TT_CUDA_CHECK(cudaDeviceSynchronize());
    tt_bf16 *bits = malloc(sizeof(tt_bf16) * (size_t)n);
    TT_CUDA_CHECK(cudaMemcpy(bits, out, sizeof(tt_bf16) * (size_t)n, cudaMemcpyDeviceToHost));
    int64_t wrong = 0, first_wrong = -1;
    for (int64_t i = 0; i < n; i++)
        if (bits[i] != tt_f32_to_bf16(expected[i]) && wrong++ == 0) first_wrong = i;
    TT_EXPECT(wrong == 0, "%s%s, %lld values: %lld differ from the CPU's (first at %lld: 0x%04x vs 0x%04x)",
              tt_quant4_type_name(type), double_quant ? " double-quantized" : "", (long long)n, (long long)wrong,
              (long long)first_wrong, first_wrong >= 0 ? bits[first_wrong] : 0,
              first_wrong >= 0 ? tt_f32_to_bf16(expected[first_wrong]) : 0);
    TT_CUDA_CHECK(cudaFree(device_quantized));
    TT_CUDA_CHECK(cudaFree(out));
    free(bits);
    free(expected);
    free(quantized);
    free(values);
}

/* The fused GEMM's tolerance for one output whose exact value (over the bf16 operands) is ref, with abs_sum the sum of
 * |x_k w_k| over K: the bf16 rounding of the output, at most 2^-9 |result| (2^-8 |ref| leaves room for the fp32 sum's
 * own error moving the result), plus the fp32 accumulation error, which for K <= 1024 terms summed in any order is
 * far below 2^-14 abs_sum (about sqrt(K) 2^-24 abs_sum typically, K 2^-23 abs_sum at worst with truncating adds:
 * 2^-13 at K 1024, never seen). A wrong tile, row, block absmax or nibble order makes errors of the order of
 * abs_sum / sqrt(K) (>= 2^-5 abs_sum here); even one wrong weight value among K moves an output by about
 * abs_sum / K, above the bound for these shapes. */
static double fused_gemm_tolerance(double ref, double abs_sum) { return ldexp(fabs(ref), -8) + ldexp(abs_sum, -14); }

static void check_fused_gemm(tt_cuda_gemm_context *gemm, int64_t M, int64_t N, int64_t K, tt_quant4_type type,
                             bool double_quant) {
    const tt_quant4_format format = {.type = type, .double_quant = double_quant};
    const tt_quant4_layout l = tt_quant4_layout_of(N * K, &format);
    float *w = malloc(sizeof(float) * (size_t)(N * K)); /* W [N, K] */
    for (int64_t i = 0; i < N * K; i += 2) {
        double pair[2];
        tt_rng_normal_pair(&gpu_test_rng, pair);
        w[i] = (float)(0.02 * pair[0]);
        w[i + 1] = (float)(0.02 * pair[1]);
    }
    for (int64_t i = 0; i < 64; i++) w[K + i] = 0.0f; /* row 1's first block all zero: absmax 0 */
    unsigned char *quantized = malloc(l.bytes);
    tt_quant4_quantize(quantized, w, N * K, &format);
    tt_quant4_dequantize(w, quantized, N * K, &format);
    for (int64_t i = 0; i < N * K; i++) w[i] = tt_bf16_to_f32(tt_f32_to_bf16(w[i])); /* the GEMM's operand values */
    tt_bf16 *x_device;
    float *x = random_bf16(M * K, 1.0f, &x_device); /* x [M, K] */

    void *quantized_device;
    TT_CUDA_CHECK(cudaMalloc(&quantized_device, l.bytes));
    TT_CUDA_CHECK(cudaMemcpy(quantized_device, quantized, l.bytes, cudaMemcpyHostToDevice));
    tt_bf16 *y_fused = device_poisoned(M * N), *y_two_step = device_poisoned(M * N), *w_device = device_poisoned(N * K);
    tt_cuda_gemm_4bit_nt(y_fused, x_device, quantized_device, M, N, K, &format, 0);
    tt_cuda_dequantize_4bit(w_device, quantized_device, N * K, &format, 0);
    tt_cuda_gemm(gemm, false, true, M, N, K, 1.0f, x_device, K, w_device, K, 0.0f, y_two_step, false, N, 0);
    TT_CUDA_CHECK(cudaDeviceSynchronize());
    float *fused = download_bf16(y_fused, M * N), *two_step = download_bf16(y_two_step, M * N);

    int64_t wrong = 0, first = -1, disagree = 0, first_disagree = -1;
    double worst = 0.0; /* the largest |fused - ref| / tolerance */
    double first_ref = 0.0;
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            double ref = 0.0, abs_sum = 0.0;
            const float *xr = x + m * K, *wr = w + n * K;
            for (int64_t k = 0; k < K; k++) {
                const double term = (double)xr[k] * (double)wr[k];
                ref += term;
                abs_sum += fabs(term);
            }
            const double tolerance = fused_gemm_tolerance(ref, abs_sum) + 1e-30;
            const double error = fabs((double)fused[m * N + n] - ref); /* NaN (poison left) fails below */
            if (error / tolerance > worst) worst = error / tolerance;
            if (!(error <= tolerance) && wrong++ == 0) {
                first = m * N + n;
                first_ref = ref;
            }
            /* both paths within the tolerance of ref: within twice it of each other */
            if (!(fabs((double)fused[m * N + n] - (double)two_step[m * N + n]) <= 2.0 * tolerance) && disagree++ == 0)
                first_disagree = m * N + n;
        }
    const char *name = type == TT_QUANT4_NF4 ? "nf4" : "fp4";
    TT_EXPECT(wrong == 0,
              "fused 4-bit GEMM %s%s %lld x %lld x %lld: %lld of %lld outputs off the reference (first "
              "[%lld, %lld]: %g vs %g)",
              name, double_quant ? " double-quantized" : "", (long long)M, (long long)N, (long long)K, (long long)wrong,
              (long long)(M * N), first >= 0 ? (long long)(first / N) : -1LL,
              first >= 0 ? (long long)(first % N) : -1LL, first >= 0 ? fused[first] : 0.0, first_ref);
    TT_EXPECT(disagree == 0,
              "fused 4-bit GEMM %s%s %lld x %lld x %lld: %lld outputs disagree with dequantize + "
              "cuBLASLt (first [%lld, %lld]: %g vs %g)",
              name, double_quant ? " double-quantized" : "", (long long)M, (long long)N, (long long)K,
              (long long)disagree, first_disagree >= 0 ? (long long)(first_disagree / N) : -1LL,
              first_disagree >= 0 ? (long long)(first_disagree % N) : -1LL,
              first_disagree >= 0 ? fused[first_disagree] : 0.0, first_disagree >= 0 ? two_step[first_disagree] : 0.0);
    printf("  fused 4-bit GEMM %s%-17s M %5lld N %4lld K %5lld: worst error %.3f of the tolerance%s\n", name,
           double_quant ? " double-quantized" : "", (long long)M, (long long)N, (long long)K, worst,
           wrong || disagree ? "  <-- FAIL" : "");
    TT_CUDA_CHECK(cudaFree(quantized_device));
    TT_CUDA_CHECK(cudaFree(x_device));
    TT_CUDA_CHECK(cudaFree(y_fused));
    TT_CUDA_CHECK(cudaFree(y_two_step));
    TT_CUDA_CHECK(cudaFree(w_device));
    free(fused);
    free(two_step);
    free(x);
    free(quantized);
    free(w);
}

/* ---- --speed: today's path (dequantize into a bf16 buffer, then cuBLASLt) against the fused kernel ---- */

typedef struct speed_buffers {
    tt_cuda_gemm_context *gemm;
    int64_t M, N, K;
    tt_quant4_format format;
    const tt_bf16 *x;              /* [M, K] */
    const void *quantized;         /* W [N, K] */
    tt_bf16 *w;                    /* [N, K]: the transient bf16 weight of today's path */
    tt_bf16 *y_two_step, *y_fused; /* [M, N] */
} speed_buffers;

typedef enum speed_path { PATH_DEQUANTIZE, PATH_GEMM, PATH_DEQUANTIZE_GEMM, PATH_FUSED } speed_path;

static void run_path(const speed_buffers *b, speed_path path) {
    if (path == PATH_DEQUANTIZE || path == PATH_DEQUANTIZE_GEMM)
        tt_cuda_dequantize_4bit(b->w, b->quantized, b->N * b->K, &b->format, 0);
    if (path == PATH_GEMM || path == PATH_DEQUANTIZE_GEMM)
        tt_cuda_gemm(b->gemm, false, true, b->M, b->N, b->K, 1.0f, b->x, b->K, b->w, b->K, 0.0f, b->y_two_step, false,
                     b->N, 0);
    if (path == PATH_FUSED) tt_cuda_gemm_4bit_nt(b->y_fused, b->x, b->quantized, b->M, b->N, b->K, &b->format, 0);
}

#define SPEED_WARMUPS 3
#define SPEED_REPS 20

/* ms a call: the mean of SPEED_REPS back-to-back calls on the default stream after SPEED_WARMUPS. */
static float time_path(const speed_buffers *b, speed_path path) {
    for (int i = 0; i < SPEED_WARMUPS; i++) run_path(b, path);
    cudaEvent_t start, stop;
    TT_CUDA_CHECK(cudaEventCreate(&start));
    TT_CUDA_CHECK(cudaEventCreate(&stop));
    TT_CUDA_CHECK(cudaEventRecord(start, 0));
    for (int i = 0; i < SPEED_REPS; i++) run_path(b, path);
    TT_CUDA_CHECK(cudaEventRecord(stop, 0));
    TT_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0.0f;
    TT_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    TT_CUDA_CHECK(cudaEventDestroy(start));
    TT_CUDA_CHECK(cudaEventDestroy(stop));
    return ms / SPEED_REPS;
}

/* A quantized weight for timing: random code bytes and absmax codes (a repeated pattern), then sane (nested) absmax
 * values and offset so every absmax is finite. Its values are not a real weight's; the work is the same. */
static void *device_random_quantized(int64_t numel, const tt_quant4_format *format) {
    const tt_quant4_layout l = tt_quant4_layout_of(numel, format);
    unsigned char *bytes = malloc(l.bytes);
    const size_t pattern = (size_t)1 << 20;
    for (size_t i = 0; i < l.bytes && i < pattern; i += 8) {
        const uint64_t r = tt_rng_next(&gpu_test_rng);
        memcpy(bytes + i, &r, l.bytes - i < 8 ? l.bytes - i : 8);
    }
    for (size_t i = pattern; i < l.bytes; i++) bytes[i] = bytes[i - pattern];
    if (format->double_quant) {
        float *nested = (float *)(bytes + l.nested_absmax);
        for (int64_t i = 0; i < l.nested_blocks; i++) nested[i] = 0.05f;
        const float offset = 0.05f;
        memcpy(bytes + l.offset, &offset, sizeof offset);
    } else {
        float *absmax = (float *)(bytes + l.absmax);
        for (int64_t i = 0; i < l.blocks; i++) absmax[i] = 0.05f;
    }
    void *device;
    TT_CUDA_CHECK(cudaMalloc(&device, l.bytes));
    TT_CUDA_CHECK(cudaMemcpy(device, bytes, l.bytes, cudaMemcpyHostToDevice));
    free(bytes);
    return device;
}

/* max |fused - two_step| / max |two_step| over the whole output: a check that the big shapes agree too. */
static double relative_difference(const tt_bf16 *a, const tt_bf16 *b, int64_t n) {
    float *x = download_bf16(a, n), *y = download_bf16(b, n);
    double diff = 0.0, scale = 0.0;
    for (int64_t i = 0; i < n; i++) {
        const double d = fabs((double)x[i] - (double)y[i]);
        if (!(d <= diff)) diff = d; /* NaN sticks */
        if (fabs((double)y[i]) > scale) scale = fabs((double)y[i]);
    }
    free(x);
    free(y);
    return diff / scale;
}

static void speed(int64_t M) {
    typedef struct shape {
        const char *name;
        int64_t N, K; /* W [N, K] */
    } shape;
    const shape shapes[] = {{"q_proj", 4096, 4096},   {"k_proj", 1024, 4096}, {"o_proj", 4096, 4096},
                            {"gate/up", 12288, 4096}, {"down", 4096, 12288},  {"70b_mlp", 28672, 8192}};
    void *workspace;
    TT_CUDA_CHECK(cudaMalloc(&workspace, TT_CUDA_GEMM_WORKSPACE_BYTES));
    tt_cuda_gemm_context *gemm = tt_cuda_gemm_create(workspace, TT_CUDA_GEMM_WORKSPACE_BYTES);
    const tt_quant4_format format = {.type = TT_QUANT4_NF4, .double_quant = true};
    printf("speed: M %lld tokens, NF4 double-quantized, ms a call (mean of %d after %d warmups)\n", (long long)M,
           SPEED_REPS, SPEED_WARMUPS);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int64_t N = shapes[s].N, K = shapes[s].K;
        speed_buffers b = {.gemm = gemm, .M = M, .N = N, .K = K, .format = format};
        tt_bf16 *x = device_random_repeated(M * K, 1.0f), *w, *y_two_step, *y_fused;
        void *quantized = device_random_quantized(N * K, &format);
        TT_CUDA_CHECK(cudaMalloc((void **)&w, sizeof(tt_bf16) * (size_t)(N * K)));
        TT_CUDA_CHECK(cudaMalloc((void **)&y_two_step, sizeof(tt_bf16) * (size_t)(M * N)));
        TT_CUDA_CHECK(cudaMalloc((void **)&y_fused, sizeof(tt_bf16) * (size_t)(M * N)));
        b.x = x;
        b.quantized = quantized;
        b.w = w;
        b.y_two_step = y_two_step;
        b.y_fused = y_fused;
        const float dequantize_ms = time_path(&b, PATH_DEQUANTIZE), gemm_ms = time_path(&b, PATH_GEMM);
        const float two_step_ms = time_path(&b, PATH_DEQUANTIZE_GEMM), fused_ms = time_path(&b, PATH_FUSED);
        TT_CUDA_CHECK(cudaDeviceSynchronize());
        const double flop = 2.0 * (double)M * (double)N * (double)K;
        const double difference = relative_difference(y_fused, y_two_step, M * N);
        printf(
            "speed %-8s M %lld N %5lld K %5lld  dequant %8.3f ms  gemm %8.3f ms  dequant+gemm %8.3f ms %6.1f TFLOP/s  "
            "fused %8.3f ms %6.1f TFLOP/s  fused/(dequant+gemm) %.3f  max_rel_diff %.1e\n",
            shapes[s].name, (long long)M, (long long)N, (long long)K, dequantize_ms, gemm_ms, two_step_ms,
            flop / (two_step_ms * 1e9), fused_ms, flop / (fused_ms * 1e9), fused_ms / two_step_ms, difference);
        fflush(stdout);
        TT_EXPECT(difference <= 1e-2,
                  "speed %s: the fused output differs from dequantize + cuBLASLt by %.2e of its "
                  "largest value",
                  shapes[s].name, difference);
        TT_CUDA_CHECK(cudaFree(x));
        TT_CUDA_CHECK(cudaFree(quantized));
        TT_CUDA_CHECK(cudaFree(w));
        TT_CUDA_CHECK(cudaFree(y_two_step));
        TT_CUDA_CHECK(cudaFree(y_fused));
    }
    tt_cuda_gemm_destroy(gemm);
    TT_CUDA_CHECK(cudaFree(workspace));
}

int main(int argc, char **argv) {
    tt_rng_seed(&gpu_test_rng, 17);
    tt_cuda_quant4_set_dynamic_map(tt_quant4_dynamic_map());
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--speed") == 0) {
            long long M = 16384;
            if (i + 1 < argc) {
                char *end;
                M = strtoll(argv[i + 1], &end, 10);
                TT_CHECK(*end == '\0' && M > 0, "--speed takes a token count M > 0, not '%s'", argv[i + 1]);
            }
            speed((int64_t)M);
            return tt_test_summary("gpu_quant4 --speed");
        }
    const int64_t sizes[] = {135, 64 * 300 + 8, 4096 * 1024, 1024 * 4096 + 5};
    for (int s = 0; s < 4; s++)
        for (int type = 0; type < 2; type++)
            for (int dq = 0; dq < 2; dq++) check_dequantize(sizes[s], (tt_quant4_type)type, dq);
    for (int s = 0; s < 4; s++) check_dequantize(sizes[s], TT_QUANT_INT8, false); /* load_in_8bit's form */

    void *workspace;
    TT_CUDA_CHECK(cudaMalloc(&workspace, TT_CUDA_GEMM_WORKSPACE_BYTES));
    tt_cuda_gemm_context *gemm = tt_cuda_gemm_create(workspace, TT_CUDA_GEMM_WORKSPACE_BYTES);
    /* M: a partial block of 256 rows, exactly one of 128 rows, several blocks; K: 1 to 16 tiles of 64 (fewer tiles
     * than the ring's depth too); N: several blocks of 128 */
    const int64_t shapes[][3] = {{300, 256, 512}, {128, 128, 64}, {1000, 384, 1024},
                                 {257, 128, 192}, {1, 256, 128},  {513, 640, 320}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int type = 0; type < 2; type++)
            for (int dq = 0; dq < 2; dq++)
                check_fused_gemm(gemm, shapes[s][0], shapes[s][1], shapes[s][2], (tt_quant4_type)type, dq);
    tt_cuda_gemm_destroy(gemm);
    TT_CUDA_CHECK(cudaFree(workspace));
    return tt_test_summary("gpu_quant4");
}
