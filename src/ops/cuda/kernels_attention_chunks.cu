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

/* acc [B, T, width] fp32; partial [B, T, width] bf16, rows row0..T-1 valid. */
static __global__ void dq_chunk_accumulate_kernel(float *acc, const tt_bf16 *partial, int64_t T,
                                                  int64_t row0, int64_t width, int64_t n, int first) {
    const int64_t rows = T - row0;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t b = i / (rows * width), r = i % (rows * width);
        const int64_t at = b * T * width + row0 * width + r;
        const float x = bf16_to_float(partial[at]);
        acc[at] = first ? x : acc[at] + x;
    }
}

static __global__ void dq_chunk_store_kernel(tt_bf16 *dq, int64_t dq_row_stride, const float *acc, int64_t width,
                                             int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t row = i / width, c = i % width;
        dq[row * dq_row_stride + c] = float_to_bf16(acc[i]);
    }
}

extern "C" void tt_cuda_dq_chunk_accumulate(float *acc, const tt_bf16 *partial, int64_t B, int64_t T,
                                            int64_t row0, int64_t width, int first, cudaStream_t stream) {
    const int64_t n = B * (T - row0) * width;
    if (n <= 0) return;
    dq_chunk_accumulate_kernel<<<grid_for(n, 256), 256, 0, stream>>>(acc, partial, T, row0, width, n, first);
    TT_CUDA_CHECK(cudaGetLastError());
}

extern "C" void tt_cuda_dq_chunk_store(tt_bf16 *dq, int64_t dq_row_stride, const float *acc, int64_t rows,
                                       int64_t width, cudaStream_t stream) {
    const int64_t n = rows * width;
    if (n <= 0) return;
    dq_chunk_store_kernel<<<grid_for(n, 256), 256, 0, stream>>>(dq, dq_row_stride, acc, width, n);
    TT_CUDA_CHECK(cudaGetLastError());
}
