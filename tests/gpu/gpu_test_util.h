/* Helpers of the GPU test programs (tests/gpu/test_*.c): random bf16 inputs with their exact
 * host values, NaN-poisoned outputs, downloads, and bit comparisons. */
#ifndef TT_TESTS_GPU_TEST_UTIL_H
#define TT_TESTS_GPU_TEST_UTIL_H

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "core/dtype.h"
#include "core/rng.h"
#include "ops/cpu/ops_cpu.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/ops_cuda.h"
#include "test_util.h"

#define TT_BF16_POISON 0x7fc0 /* bf16 quiet NaN */

static tt_rng gpu_test_rng; /* seeded by each test's main */

/* n random values in [-scale, scale], rounded to bf16: host floats and device bf16 copies. */
static inline float *random_bf16(int64_t n, float scale, tt_bf16 **device) {
    float *host = calloc((size_t)n, sizeof(float));
    tt_bf16 *bits = malloc(sizeof(tt_bf16) * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
        bits[i] = tt_f32_to_bf16((float)((2.0 * tt_rng_uniform(&gpu_test_rng) - 1.0) * scale));
        host[i] = tt_bf16_to_f32(bits[i]);
    }
    TT_CUDA_CHECK(cudaMalloc((void **)device, sizeof(tt_bf16) * (size_t)n));
    TT_CUDA_CHECK(cudaMemcpy(*device, bits, sizeof(tt_bf16) * (size_t)n, cudaMemcpyHostToDevice));
    free(bits);
    return host;
}

static inline tt_bf16 *device_poisoned(int64_t n) {
    tt_bf16 *d;
    TT_CUDA_CHECK(cudaMalloc((void **)&d, sizeof(tt_bf16) * (size_t)n));
    tt_bf16 *bits = malloc(sizeof(tt_bf16) * (size_t)n);
    for (int64_t i = 0; i < n; i++) bits[i] = TT_BF16_POISON;
    TT_CUDA_CHECK(cudaMemcpy(d, bits, sizeof(tt_bf16) * (size_t)n, cudaMemcpyHostToDevice));
    free(bits);
    return d;
}

static inline float *device_poisoned_f32(int64_t n) {
    float *d;
    TT_CUDA_CHECK(cudaMalloc((void **)&d, sizeof(float) * (size_t)n));
    TT_CUDA_CHECK(cudaMemset(d, 0xff, sizeof(float) * (size_t)n)); /* all ones: a NaN */
    return d;
}

static inline float *download_bf16(const tt_bf16 *device, int64_t n) {
    tt_bf16 *bits = malloc(sizeof(tt_bf16) * (size_t)n);
    TT_CUDA_CHECK(cudaMemcpy(bits, device, sizeof(tt_bf16) * (size_t)n, cudaMemcpyDeviceToHost));
    float *host = calloc((size_t)n, sizeof(float));
    for (int64_t i = 0; i < n; i++) host[i] = tt_bf16_to_f32(bits[i]);
    free(bits);
    return host;
}

static inline float *download_f32(const float *device, int64_t n) {
    float *host = calloc((size_t)n, sizeof(float));
    TT_CUDA_CHECK(cudaMemcpy(host, device, sizeof(float) * (size_t)n, cudaMemcpyDeviceToHost));
    return host;
}

static inline float *upload_f32(const float *host, int64_t n) {
    float *device;
    TT_CUDA_CHECK(cudaMalloc((void **)&device, sizeof(float) * (size_t)n));
    TT_CUDA_CHECK(cudaMemcpy(device, host, sizeof(float) * (size_t)n, cudaMemcpyHostToDevice));
    return device;
}

/* Rounds host in place to bf16 and uploads those bits. */
static inline tt_bf16 *upload_as_bf16(float *host, int64_t n) {
    tt_bf16 *bits = malloc(sizeof(tt_bf16) * (size_t)n), *device;
    for (int64_t i = 0; i < n; i++) {
        bits[i] = tt_f32_to_bf16(host[i]);
        host[i] = tt_bf16_to_f32(bits[i]);
    }
    TT_CUDA_CHECK(cudaMalloc((void **)&device, sizeof(tt_bf16) * (size_t)n));
    TT_CUDA_CHECK(cudaMemcpy(device, bits, sizeof(tt_bf16) * (size_t)n, cudaMemcpyHostToDevice));
    free(bits);
    return device;
}

/* n bf16 values on the device: a random block of 2^20 values repeated (timing does not need
 * fresh randomness, and filling GiBs one value at a time would take seconds). */
static inline tt_bf16 *device_random_repeated(int64_t n, float scale) {
    const int64_t block = (int64_t)1 << 20;
    tt_bf16 *pattern = malloc(sizeof(tt_bf16) * (size_t)block);
    for (int64_t i = 0; i < block; i++)
        pattern[i] = tt_f32_to_bf16((float)((2.0 * tt_rng_uniform(&gpu_test_rng) - 1.0) * scale));
    tt_bf16 *device;
    TT_CUDA_CHECK(cudaMalloc((void **)&device, sizeof(tt_bf16) * (size_t)n));
    for (int64_t at = 0; at < n; at += block) {
        int64_t count = n - at < block ? n - at : block;
        TT_CUDA_CHECK(cudaMemcpy(device + at, pattern, sizeof(tt_bf16) * (size_t)count, cudaMemcpyHostToDevice));
    }
    free(pattern);
    return device;
}

/* How many of n device bf16 values differ in their bits. */
static inline int64_t different_bf16(const tt_bf16 *a, const tt_bf16 *b, int64_t n) {
    tt_bf16 *x = malloc(2 * (size_t)n), *y = malloc(2 * (size_t)n);
    TT_CUDA_CHECK(cudaMemcpy(x, a, 2 * (size_t)n, cudaMemcpyDeviceToHost));
    TT_CUDA_CHECK(cudaMemcpy(y, b, 2 * (size_t)n, cudaMemcpyDeviceToHost));
    int64_t count = 0;
    for (int64_t i = 0; i < n; i++) count += x[i] != y[i];
    free(x);
    free(y);
    return count;
}

static inline bool same_bits_bf16(const tt_bf16 *a, const tt_bf16 *b, int64_t n) {
    return different_bf16(a, b, n) == 0;
}

/* Two backwards' dq, dk and dv bit for bit; a failure says which of them differ, in how many values. */
static inline void expect_same_gradients(const char *what, const tt_bf16 *dq, const tt_bf16 *dq2, int64_t nq,
                                         const tt_bf16 *dk, const tt_bf16 *dk2, const tt_bf16 *dv, const tt_bf16 *dv2,
                                         int64_t nkv) {
    const int64_t q = different_bf16(dq, dq2, nq), k = different_bf16(dk, dk2, nkv), v = different_bf16(dv, dv2, nkv);
    TT_EXPECT(q == 0 && k == 0 && v == 0, "%s (values that differ: dq %lld of %lld, dk %lld, dv %lld of %lld)", what,
              (long long)q, (long long)nq, (long long)k, (long long)v, (long long)nkv);
}

/* max |got - want| / max |want| within tolerance, printed either way */
static inline void expect_close(const char *what, const float *got, const float *want, int64_t n, double tolerance) {
    double err = tt_max_rel_error_f32(got, want, (size_t)n);
    TT_EXPECT(err <= tolerance, "%s: relative error %.3g > %.3g", what, err, tolerance);
    printf("  %-44s max relative error %.2e%s\n", what, err, err <= tolerance ? "" : "  <-- FAIL");
}

/* A device bf16 tensor against host values. */
static inline void expect_device_close(const char *what, const tt_bf16 *device, const float *want, int64_t n,
                                       double tolerance) {
    float *got = download_bf16(device, n);
    expect_close(what, got, want, n, tolerance);
    free(got);
}

/* An attention backward's dq, dk, dv (device bf16) against the CPU reference on the same (host)
 * inputs, saved output and log-sum-exp. */
static inline void expect_attention_backward_close(const char *label, const tt_bf16 *dq_dev, const tt_bf16 *dk_dev,
                                                   const tt_bf16 *dv_dev, const float *dout, const float *out,
                                                   const float *lse, const float *q, const float *k, const float *v,
                                                   const tt_attention_shape *shape, double tolerance) {
    const int64_t rows = shape->batch * shape->seq_len;
    const int64_t nq = rows * shape->num_heads * shape->head_dim, nkv = rows * shape->num_kv_heads * shape->head_dim;
    float *want[3] = {calloc((size_t)nq, sizeof(float)), calloc((size_t)nkv, sizeof(float)),
                      calloc((size_t)nkv, sizeof(float))};
    tt_cpu_attention_backward_f32(NULL, want[0], want[1], want[2], dout, out, lse, q, k, v, shape);
    const tt_bf16 *got[3] = {dq_dev, dk_dev, dv_dev};
    const int64_t count[3] = {nq, nkv, nkv};
    const char *name[3] = {"dq", "dk", "dv"};
    for (int i = 0; i < 3; i++) {
        char what[96];
        snprintf(what, sizeof what, "%s %s", label, name[i]);
        expect_device_close(what, got[i], want[i], count[i], tolerance);
        free(want[i]);
    }
}

#endif
