/* RMSNorm forward and backward, bf16 in and out, fp32 arithmetic. One warp per row for the
 * forward and the input gradient; the weight gradient goes through per-row-block partial sums
 * that a second kernel adds in a fixed order: deterministic, no atomics. */
#include <cuda_bf16.h>

#include "ops/cuda/cuda_check.h"
#include "ops/cuda/device_math.cuh"
#include "ops/cuda/ops_cuda.h"

/* One warp per row: the row's squares reduced with shuffles (every lane gets the same bits),
 * then the normalised row written; bf16 pairs per load. Rows of a few hundred to a few thousand
 * columns (hidden size; head_dim for the q/k norms) fit a warp better than a block. */
#define WARPS_PER_BLOCK 8

static __device__ __forceinline__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

static __device__ __forceinline__ float2 load_pair(const tt_bf16 *p) {
    return __bfloat1622float2(*(const __nv_bfloat162 *)p);
}

static __device__ __forceinline__ void store_pair(tt_bf16 *p, float a, float b) {
    *(__nv_bfloat162 *)p = __floats2bfloat162_rn(a, b);
}

/* out = (residual +) (x r) (w + offset): the norm's output rounded to bf16 before a residual is added, as a separate
 * add of the two bf16 tensors would. */
static __global__ void rmsnorm_forward_kernel(tt_bf16 *out, float *rstd, const tt_bf16 *x, const tt_bf16 *w,
                                              const tt_bf16 *residual, int64_t R, int64_t C, float eps, float offset) {
    const int64_t row = (int64_t)blockIdx.x * WARPS_PER_BLOCK + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= R) return;
    const tt_bf16 *xr = x + row * C;
    float sum_squares = 0.0f;
    for (int64_t c = 2 * lane; c < C; c += 64) {
        const float2 v = load_pair(xr + c);
        sum_squares += v.x * v.x + v.y * v.y;
    }
    const float r = rsqrtf(warp_sum(sum_squares) / (float)C + eps);
    if (lane == 0) rstd[row] = r;
    if (!out) return; /* the statistics alone (a recompute that keeps the output) */
    tt_bf16 *o = out + row * C;
    const tt_bf16 *res = residual ? residual + row * C : NULL;
    for (int64_t c = 2 * lane; c < C; c += 64) {
        const float2 v = load_pair(xr + c), g = load_pair(w + c);
        float a = (g.x + offset) * (v.x * r), b = (g.y + offset) * (v.y * r);
        if (res) {
            const float2 base = load_pair(res + c);
            a = base.x + bf16_to_float(float_to_bf16(a));
            b = base.y + bf16_to_float(float_to_bf16(b));
        }
        store_pair(o + c, a, b);
    }
}

extern "C" void tt_cuda_rmsnorm_forward(tt_bf16 *out, float *rstd, const tt_bf16 *x, const tt_bf16 *w,
                                        const tt_bf16 *residual, int64_t R, int64_t C, float eps, float weight_offset,
                                        cudaStream_t stream) {
    if (R == 0) return;
    TT_CHECK(C % 2 == 0, "RMSNorm over %lld columns: the CUDA kernels need an even row length", (long long)C);
    rmsnorm_forward_kernel<<<(unsigned)((R + WARPS_PER_BLOCK - 1) / WARPS_PER_BLOCK), 32 * WARPS_PER_BLOCK, 0, stream>>>(
        out, rstd, x, w, residual, R, C, eps, weight_offset);
    TT_CUDA_CHECK(cudaGetLastError());
}

extern "C" int64_t tt_cuda_rmsnorm_backward_scratch(int64_t R, int64_t C) {
    return (R + TT_CUDA_RMSNORM_BACKWARD_ROWS - 1) / TT_CUDA_RMSNORM_BACKWARD_ROWS * C;
}

/* dx, one warp per row: dx += r w' dout - x r^3 (sum_c w' dout x) / C, w' = w + offset. */
static __global__ void rmsnorm_backward_dx_kernel(tt_bf16 *dx, const tt_bf16 *dout, const tt_bf16 *x, const tt_bf16 *w,
                                                  const float *rstd, int64_t R, int64_t C, float offset) {
    const int64_t row = (int64_t)blockIdx.x * WARPS_PER_BLOCK + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= R) return;
    const tt_bf16 *xr = x + row * C, *dr = dout + row * C;
    const float r = rstd[row];
    float dot = 0.0f;
    for (int64_t c = 2 * lane; c < C; c += 64) {
        const float2 g = load_pair(w + c), d = load_pair(dr + c), v = load_pair(xr + c);
        dot += (g.x + offset) * d.x * v.x + (g.y + offset) * d.y * v.y;
    }
    const float correction = r * r * r * warp_sum(dot) / (float)C;
    tt_bf16 *dxr = dx + row * C;
    for (int64_t c = 2 * lane; c < C; c += 64) {
        const float2 g = load_pair(w + c), d = load_pair(dr + c), v = load_pair(xr + c), old = load_pair(dxr + c);
        store_pair(dxr + c, old.x + (r * (g.x + offset) * d.x - v.x * correction),
                   old.y + (r * (g.y + offset) * d.y - v.y * correction));
    }
}

/* dw partials: block b sums dout x r over rows [b * ROWS, ...) for the columns its threads own,
 * in row order. */
static __global__ void rmsnorm_backward_dw_kernel(float *partial, const tt_bf16 *dout, const tt_bf16 *x,
                                                  const float *rstd, int64_t R, int64_t C) {
    const int64_t c = (int64_t)blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= C) return;
    const int64_t first = (int64_t)blockIdx.x * TT_CUDA_RMSNORM_BACKWARD_ROWS;
    const int64_t last = first + TT_CUDA_RMSNORM_BACKWARD_ROWS < R ? first + TT_CUDA_RMSNORM_BACKWARD_ROWS : R;
    float total = 0.0f;
    for (int64_t row = first; row < last; row++)
        total += bf16_to_float(dout[row * C + c]) * bf16_to_float(x[row * C + c]) * rstd[row];
    partial[(int64_t)blockIdx.x * C + c] = total;
}

extern "C" void tt_cuda_rmsnorm_backward(tt_bf16 *dx, void *dw, int dw_is_fp32, const tt_bf16 *dout, const tt_bf16 *x,
                                         const tt_bf16 *w, const float *rstd, int64_t R, int64_t C, float weight_offset,
                                         float *scratch, cudaStream_t stream) {
    if (R == 0) return;
    TT_CHECK(C % 2 == 0, "RMSNorm over %lld columns: the CUDA kernels need an even row length", (long long)C);
    rmsnorm_backward_dx_kernel<<<(unsigned)((R + WARPS_PER_BLOCK - 1) / WARPS_PER_BLOCK), 32 * WARPS_PER_BLOCK, 0,
                                 stream>>>(dx, dout, x, w, rstd, R, C, weight_offset);
    TT_CUDA_CHECK(cudaGetLastError());
    if (!dw) return;
    const int64_t blocks = (R + TT_CUDA_RMSNORM_BACKWARD_ROWS - 1) / TT_CUDA_RMSNORM_BACKWARD_ROWS;
    const int threads = C < 256 ? (int)((C + 31) / 32 * 32) : 256;
    const dim3 grid((unsigned)blocks, (unsigned)((C + threads - 1) / threads));
    rmsnorm_backward_dw_kernel<<<grid, threads, 0, stream>>>(scratch, dout, x, rstd, R, C);
    TT_CUDA_CHECK(cudaGetLastError());
    tt_cuda_add_column_partials(dw, dw_is_fp32, scratch, blocks, C, stream);
}
