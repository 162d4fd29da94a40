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
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/ops_cuda.h"

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

static inline bool same_bits_bf16(const tt_bf16 *a, const tt_bf16 *b, int64_t n) {
    tt_bf16 *x = malloc(2 * (size_t)n), *y = malloc(2 * (size_t)n);
    TT_CUDA_CHECK(cudaMemcpy(x, a, 2 * (size_t)n, cudaMemcpyDeviceToHost));
    TT_CUDA_CHECK(cudaMemcpy(y, b, 2 * (size_t)n, cudaMemcpyDeviceToHost));
    bool same = memcmp(x, y, 2 * (size_t)n) == 0;
    free(x);
    free(y);
    return same;
}

#endif
