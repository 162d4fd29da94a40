/* Device helpers shared by the kernels: bf16 <-> fp32 and block-wide reductions in a fixed
 * order (warp shuffles, then the warps' partial results in warp order), so every reduction
 * gives the same bits on every run. */
#ifndef TT_OPS_CUDA_DEVICE_MATH_CUH
#define TT_OPS_CUDA_DEVICE_MATH_CUH

#include <cuda_bf16.h>

#include "ops/cuda/ops_cuda.h"

static __device__ __forceinline__ float bf16_to_float(tt_bf16 v) { return __bfloat162float(__ushort_as_bfloat16(v)); }

static __device__ __forceinline__ tt_bf16 float_to_bf16(float v) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(v));
}

/* shared: 32 floats of shared memory; every thread of the block must call. */
static __device__ float block_sum(float v, float *shared) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    __syncthreads(); /* shared may still be read by a previous call */
    if ((threadIdx.x & 31) == 0) shared[threadIdx.x >> 5] = v;
    __syncthreads();
    float total = 0.0f;
    for (int w = 0; w < (int)((blockDim.x + 31) >> 5); w++) total += shared[w];
    return total;
}

static __device__ float block_max(float v, float *shared) {
    for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    __syncthreads();
    if ((threadIdx.x & 31) == 0) shared[threadIdx.x >> 5] = v;
    __syncthreads();
    float m = -INFINITY;
    for (int w = 0; w < (int)((blockDim.x + 31) >> 5); w++) m = fmaxf(m, shared[w]);
    return m;
}

/* The same for doubles; the result is valid in thread 0. */
static __device__ double block_sum_double(double v, double *shared /* [32] */) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    __syncthreads();
    if ((threadIdx.x & 31) == 0) shared[threadIdx.x >> 5] = v;
    __syncthreads();
    double total = 0.0;
    for (int w = 0; w < (int)((blockDim.x + 31) >> 5); w++) total += shared[w];
    return total;
}

#endif
