/* dQ of cuDNN's deterministic attention backward run over key chunks (attention_cudnn.c): each
 * chunk's call writes the dQ contribution of its keys for the query rows at and after the chunk;
 * these kernels add the contributions in chunk order in fp32 and round the sum to bf16 once. */
#include <cuda_runtime.h>

#include "ops/cuda/cuda_check.h"
#include "ops/cuda/device_math.cuh"

static unsigned grid_for(int64_t n, int threads) {
    int64_t blocks = (n + threads - 1) / threads;
    return (unsigned)(blocks < 65535 * 16 ? blocks : 65535 * 16);
}

/* acc [B, T, width] fp32; partial [B, T, width] bf16, rows row0..row0+rows-1 valid. */
static __global__ void dq_chunk_accumulate_kernel(float *acc, const tt_bf16 *partial, int64_t T, int64_t row0,
                                                  int64_t rows, int64_t width, int64_t n, int first) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t b = i / (rows * width), r = i % (rows * width);
        const int64_t at = b * T * width + row0 * width + r;
        const float x = bf16_to_float(partial[at]);
        acc[at] = first ? x : acc[at] + x;
    }
}

/* The same, eight elements per thread (16-byte loads of the partial, 32-byte of the sum), for one
 * sequence (B = 1) and widths that are multiples of 8: the rows [row0, row0 + rows) are then one contiguous
 * run of rows * width elements starting at a multiple of 8. */
static __global__ void dq_chunk_accumulate8_kernel(float *acc, const tt_bf16 *partial, int64_t start, int64_t groups,
                                                   int first) {
    for (int64_t g = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; g < groups; g += (int64_t)gridDim.x * blockDim.x) {
        const int64_t at = start + 8 * g;
        const uint4 packed = *(const uint4 *)(partial + at);
        const tt_bf16 *p = (const tt_bf16 *)&packed;
        float4 *a = (float4 *)(acc + at);
        float4 lo = first ? make_float4(0.0f, 0.0f, 0.0f, 0.0f) : a[0], hi = first ? lo : a[1];
        /* first: the sum is the partial itself (0 + x = x exactly) */
        lo.x = first ? bf16_to_float(p[0]) : lo.x + bf16_to_float(p[0]);
        lo.y = first ? bf16_to_float(p[1]) : lo.y + bf16_to_float(p[1]);
        lo.z = first ? bf16_to_float(p[2]) : lo.z + bf16_to_float(p[2]);
        lo.w = first ? bf16_to_float(p[3]) : lo.w + bf16_to_float(p[3]);
        hi.x = first ? bf16_to_float(p[4]) : hi.x + bf16_to_float(p[4]);
        hi.y = first ? bf16_to_float(p[5]) : hi.y + bf16_to_float(p[5]);
        hi.z = first ? bf16_to_float(p[6]) : hi.z + bf16_to_float(p[6]);
        hi.w = first ? bf16_to_float(p[7]) : hi.w + bf16_to_float(p[7]);
        a[0] = lo;
        a[1] = hi;
    }
}

static __global__ void dq_chunk_store_kernel(tt_bf16 *dq, int64_t dq_row_stride, const float *acc, int64_t width,
                                             int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t row = i / width, c = i % width;
        dq[row * dq_row_stride + c] = float_to_bf16(acc[i]);
    }
}

/* Eight columns per thread; width and the row stride multiples of 8, dq 16-byte aligned. */
static __global__ void dq_chunk_store8_kernel(tt_bf16 *dq, int64_t dq_row_stride, const float *acc, int64_t width,
                                              int64_t groups) {
    const int64_t per_row = width / 8;
    for (int64_t g = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; g < groups; g += (int64_t)gridDim.x * blockDim.x) {
        const int64_t row = g / per_row, c = 8 * (g % per_row);
        const float4 lo = *(const float4 *)(acc + row * width + c), hi = *(const float4 *)(acc + row * width + c + 4);
        uint4 packed;
        tt_bf16 *p = (tt_bf16 *)&packed;
        p[0] = float_to_bf16(lo.x);
        p[1] = float_to_bf16(lo.y);
        p[2] = float_to_bf16(lo.z);
        p[3] = float_to_bf16(lo.w);
        p[4] = float_to_bf16(hi.x);
        p[5] = float_to_bf16(hi.y);
        p[6] = float_to_bf16(hi.z);
        p[7] = float_to_bf16(hi.w);
        *(uint4 *)(dq + row * dq_row_stride + c) = packed;
    }
}

static bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

extern "C" void tt_cuda_dq_chunk_accumulate(float *acc, const tt_bf16 *partial, int64_t B, int64_t T, int64_t row0,
                                            int64_t rows, int64_t width, int first, cudaStream_t stream) {
    const int64_t n = B * rows * width;
    if (n <= 0) return;
    if (B == 1 && width % 8 == 0 && aligned16(acc) && aligned16(partial))
        dq_chunk_accumulate8_kernel<<<grid_for(n / 8, 256), 256, 0, stream>>>(acc, partial, row0 * width, n / 8, first);
    else dq_chunk_accumulate_kernel<<<grid_for(n, 256), 256, 0, stream>>>(acc, partial, T, row0, rows, width, n, first);
    TT_CUDA_CHECK(cudaGetLastError());
}

extern "C" void tt_cuda_dq_chunk_store(tt_bf16 *dq, int64_t dq_row_stride, const float *acc, int64_t rows,
                                       int64_t width, cudaStream_t stream) {
    const int64_t n = rows * width;
    if (n <= 0) return;
    if (width % 8 == 0 && dq_row_stride % 8 == 0 && aligned16(dq) && aligned16(acc))
        dq_chunk_store8_kernel<<<grid_for(n / 8, 256), 256, 0, stream>>>(dq, dq_row_stride, acc, width, n / 8);
    else dq_chunk_store_kernel<<<grid_for(n, 256), 256, 0, stream>>>(dq, dq_row_stride, acc, width, n);
    TT_CUDA_CHECK(cudaGetLastError());
}
