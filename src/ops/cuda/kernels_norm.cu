/* RMSNorm forward and backward, bf16 in and out, fp32 arithmetic. One block per row for the
 * forward; the backward also writes per-row-block partial sums of the weight gradient, which a
 * second kernel adds in block order: deterministic, no atomics. */
#include <cuda_bf16.h>

#include "ops/cuda/cuda_check.h"
#include "ops/cuda/device_math.cuh"
#include "ops/cuda/ops_cuda.h"

#define NORM_THREADS 256

static __global__ void rmsnorm_forward_kernel(tt_bf16 *out, float *rstd, const tt_bf16 *x, const tt_bf16 *w,
                                              int64_t C, float eps) {
    __shared__ float shared[32];
    const int64_t row = blockIdx.x;
    const tt_bf16 *xr = x + row * C;
    float sum_squares = 0.0f;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
        float v = bf16_to_float(xr[c]);
        sum_squares += v * v;
    }
    const float r = rsqrtf(block_sum(sum_squares, shared) / (float)C + eps);
    if (threadIdx.x == 0) rstd[row] = r;
    tt_bf16 *o = out + row * C;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) o[c] = float_to_bf16(bf16_to_float(w[c]) * (bf16_to_float(xr[c]) * r));
}

extern "C" void tt_cuda_rmsnorm_forward(tt_bf16 *out, float *rstd, const tt_bf16 *x, const tt_bf16 *w, int64_t R,
                                        int64_t C, float eps, cudaStream_t stream) {
    if (R == 0) return;
    rmsnorm_forward_kernel<<<(unsigned)R, NORM_THREADS, 0, stream>>>(out, rstd, x, w, C, eps);
    TT_CUDA_CHECK(cudaGetLastError());
}

extern "C" int64_t tt_cuda_rmsnorm_backward_scratch(int64_t R, int64_t C) {
    return (R + TT_CUDA_RMSNORM_BACKWARD_ROWS - 1) / TT_CUDA_RMSNORM_BACKWARD_ROWS * C;
}

/* Rows [block * ROWS, ...): dx for each row, and this block's dw partial sums (each thread
 * owns columns c = threadIdx.x + k * blockDim.x, so the partials need no synchronisation). */
static __global__ void rmsnorm_backward_kernel(tt_bf16 *dx, float *partial, const tt_bf16 *dout, const tt_bf16 *x,
                                               const tt_bf16 *w, const float *rstd, int64_t R, int64_t C) {
    __shared__ float shared[32];
    const int64_t first = (int64_t)blockIdx.x * TT_CUDA_RMSNORM_BACKWARD_ROWS;
    const int64_t last = first + TT_CUDA_RMSNORM_BACKWARD_ROWS < R ? first + TT_CUDA_RMSNORM_BACKWARD_ROWS : R;
    float *p = partial + (int64_t)blockIdx.x * C;
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) p[c] = 0.0f;
    for (int64_t row = first; row < last; row++) {
        const tt_bf16 *xr = x + row * C, *dr = dout + row * C;
        const float r = rstd[row];
        float dot = 0.0f; /* sum_c w dout x */
        for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
            dot += bf16_to_float(w[c]) * bf16_to_float(dr[c]) * bf16_to_float(xr[c]);
        dot = block_sum(dot, shared);
        const float correction = r * r * r * dot / (float)C;
        tt_bf16 *dxr = dx + row * C;
        for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
            const float xv = bf16_to_float(xr[c]), dv = bf16_to_float(dr[c]);
            const float g = r * bf16_to_float(w[c]) * dv - xv * correction;
            dxr[c] = float_to_bf16(bf16_to_float(dxr[c]) + g);
            p[c] += dv * xv * r;
        }
    }
}

extern "C" void tt_cuda_rmsnorm_backward(tt_bf16 *dx, void *dw, int dw_is_fp32, const tt_bf16 *dout,
                                         const tt_bf16 *x, const tt_bf16 *w, const float *rstd, int64_t R, int64_t C,
                                         float *scratch, cudaStream_t stream) {
    if (R == 0) return;
    const int64_t blocks = (R + TT_CUDA_RMSNORM_BACKWARD_ROWS - 1) / TT_CUDA_RMSNORM_BACKWARD_ROWS;
    rmsnorm_backward_kernel<<<(unsigned)blocks, NORM_THREADS, 0, stream>>>(dx, scratch, dout, x, w, rstd, R, C);
    TT_CUDA_CHECK(cudaGetLastError());
    if (dw) tt_cuda_add_column_partials(dw, dw_is_fp32, scratch, blocks, C, stream);
}
