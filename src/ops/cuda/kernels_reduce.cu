/* Reductions in a fixed order (no atomics): column sums through per-row-block partials, the sum
 * of squares for the gradient norm, the loss sum, and the small element-wise adds that go with
 * them. */
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/device_math.cuh"
#include "ops/cuda/ops_cuda.h"

static unsigned grid_for(int64_t n, int threads) { return (unsigned)((n + threads - 1) / threads); }

extern "C" int64_t tt_cuda_column_sum_scratch(int64_t R, int64_t C) {
    return (R + TT_CUDA_COLUMN_ROWS - 1) / TT_CUDA_COLUMN_ROWS * C;
}

/* Block b sums rows [b * ROWS, ...) of every column its threads own. */
static __global__ void column_partials_kernel(float *partial, const tt_bf16 *x, int64_t R, int64_t C) {
    const int64_t c = (int64_t)blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= C) return;
    const int64_t first = (int64_t)blockIdx.x * TT_CUDA_COLUMN_ROWS;
    const int64_t last = first + TT_CUDA_COLUMN_ROWS < R ? first + TT_CUDA_COLUMN_ROWS : R;
    float total = 0.0f;
    for (int64_t r = first; r < last; r++) total += bf16_to_float(x[r * C + c]);
    partial[(int64_t)blockIdx.x * C + c] = total;
}

/* dst[c] += sum_b partial[b, c]. A block owns 32 columns; its 32 row lanes sum partial rows
 * b = lane, lane + 32, ... and then lane 0 adds the 32 lane sums in lane order: a fixed order,
 * with 32 times fewer dependent loads per thread than one thread per column (the q/k norm
 * backward has thousands of partial rows). */
#define PARTIAL_COLUMNS 32
#define PARTIAL_LANES 32

static __global__ void add_partials_kernel(void *dst, int dst_is_fp32, const float *partial, int64_t blocks,
                                           int64_t C) {
    __shared__ float lane_sums[PARTIAL_LANES][PARTIAL_COLUMNS + 1];
    const int column = threadIdx.x % PARTIAL_COLUMNS, lane = threadIdx.x / PARTIAL_COLUMNS;
    const int64_t c = (int64_t)blockIdx.x * PARTIAL_COLUMNS + column;
    float total = 0.0f;
    if (c < C)
        for (int64_t b = lane; b < blocks; b += PARTIAL_LANES) total += partial[b * C + c];
    lane_sums[lane][column] = total;
    __syncthreads();
    if (lane != 0 || c >= C) return;
    float sum = 0.0f;
    for (int l = 0; l < PARTIAL_LANES; l++) sum += lane_sums[l][column];
    if (dst_is_fp32) {
        ((float *)dst)[c] += sum;
    } else {
        tt_bf16 *d = (tt_bf16 *)dst;
        d[c] = float_to_bf16(bf16_to_float(d[c]) + sum);
    }
}

extern "C" void tt_cuda_add_column_partials(void *dst, int dst_is_fp32, const float *partial, int64_t blocks, int64_t C,
                                            cudaStream_t stream) {
    if (C == 0) return;
    add_partials_kernel<<<grid_for(C, PARTIAL_COLUMNS), PARTIAL_COLUMNS * PARTIAL_LANES, 0, stream>>>(
        dst, dst_is_fp32, partial, blocks, C);
    TT_CUDA_CHECK(cudaGetLastError());
}

extern "C" void tt_cuda_column_sum(void *dst, int dst_is_fp32, const tt_bf16 *x, int64_t R, int64_t C, float *scratch,
                                   cudaStream_t stream) {
    if (R == 0 || C == 0) return;
    const int64_t blocks = (R + TT_CUDA_COLUMN_ROWS - 1) / TT_CUDA_COLUMN_ROWS;
    const dim3 grid((unsigned)blocks, grid_for(C, 256));
    column_partials_kernel<<<grid, 256, 0, stream>>>(scratch, x, R, C);
    TT_CUDA_CHECK(cudaGetLastError());
    tt_cuda_add_column_partials(dst, dst_is_fp32, scratch, blocks, C, stream);
}

/* Pass 1: each thread sums its grid-stride share of the elements, 16 bytes at a time when x is
 * 16-byte aligned (8 bf16 or 4 fp32 values, added in element order), then the tail one by one;
 * each block reduces its threads in a fixed shuffle order into partial[block]. Pass 2, one
 * block, adds the partials in a fixed tree order. No atomics: the same n and grid give the same
 * bits every time. (One 2-byte load per thread and iteration reached 320 GB/s.) */
static __device__ __forceinline__ double square(float v) { return (double)v * (double)v; }

static __global__ void sum_squares_partials_kernel(double *partial, const void *x, int x_is_fp32, int vectorised,
                                                   int64_t n) {
    __shared__ double shared[32];
    double s = 0.0;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x, first = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int per_vector = x_is_fp32 ? 4 : 8;
    const int64_t vectors = vectorised ? n / per_vector : 0;
    for (int64_t i = first; i < vectors; i += stride) {
        const uint4 raw = ((const uint4 *)x)[i];
        if (x_is_fp32) {
            s += square(__uint_as_float(raw.x));
            s += square(__uint_as_float(raw.y));
            s += square(__uint_as_float(raw.z));
            s += square(__uint_as_float(raw.w));
        } else {
            const unsigned words[4] = {raw.x, raw.y, raw.z, raw.w};
            for (int k = 0; k < 4; k++) {
                s += square(__uint_as_float(words[k] << 16));
                s += square(__uint_as_float(words[k] & 0xffff0000u));
            }
        }
    }
    for (int64_t i = vectors * per_vector + first; i < n; i += stride)
        s += square(x_is_fp32 ? ((const float *)x)[i] : bf16_to_float(((const tt_bf16 *)x)[i]));
    const double total = block_sum_double(s, shared);
    if (threadIdx.x == 0) partial[blockIdx.x] = total;
}

static __global__ void sum_partials_kernel(double *sum, const double *partial, int blocks) {
    __shared__ double shared[32];
    double s = 0.0;
    for (int b = threadIdx.x; b < blocks; b += blockDim.x) s += partial[b];
    const double total = block_sum_double(s, shared);
    if (threadIdx.x == 0) *sum = total;
}

extern "C" void tt_cuda_sum_squares(double *sum, const void *x, int x_is_fp32, int64_t n, double *scratch,
                                    cudaStream_t stream) {
    const int vectorised = ((uintptr_t)x & 15u) == 0;
    sum_squares_partials_kernel<<<TT_CUDA_SUM_SQUARES_BLOCKS, 256, 0, stream>>>(scratch, x, x_is_fp32, vectorised, n);
    TT_CUDA_CHECK(cudaGetLastError());
    sum_partials_kernel<<<1, 1024, 0, stream>>>(sum, scratch, TT_CUDA_SUM_SQUARES_BLOCKS);
    TT_CUDA_CHECK(cudaGetLastError());
}

/* One block: the loss sum of a micro-batch's row losses. */
static __global__ void sum_kernel(double *sum, const float *values, int64_t n) {
    __shared__ double shared[32];
    double s = 0.0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += (double)values[i];
    const double total = block_sum_double(s, shared);
    if (threadIdx.x == 0) *sum = total;
}

extern "C" void tt_cuda_sum(double *sum, const float *values, int64_t n, cudaStream_t stream) {
    sum_kernel<<<1, 1024, 0, stream>>>(sum, values, n);
    TT_CUDA_CHECK(cudaGetLastError());
}

static __global__ void add_bias_kernel(tt_bf16 *y, const tt_bf16 *b, int64_t total, int64_t C) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= total) return;
    y[i] = float_to_bf16(bf16_to_float(y[i]) + bf16_to_float(b[i % C]));
}

extern "C" void tt_cuda_add_bias(tt_bf16 *y, const tt_bf16 *b, int64_t N, int64_t C, cudaStream_t stream) {
    if (N * C == 0) return;
    add_bias_kernel<<<grid_for(N * C, 256), 256, 0, stream>>>(y, b, N * C, C);
    TT_CUDA_CHECK(cudaGetLastError());
}

static __global__ void add_kernel(tt_bf16 *out, const tt_bf16 *a, const tt_bf16 *b, int64_t n) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = float_to_bf16(bf16_to_float(a[i]) + bf16_to_float(b[i]));
}

extern "C" void tt_cuda_add(tt_bf16 *out, const tt_bf16 *a, const tt_bf16 *b, int64_t n, cudaStream_t stream) {
    if (n == 0) return;
    add_kernel<<<grid_for(n, 256), 256, 0, stream>>>(out, a, b, n);
    TT_CUDA_CHECK(cudaGetLastError());
}

/* Each thread one element: its terms added in part (rank) order, so the bits are the CPU's. */
static __global__ void sum_parts_kernel(float *dst, const float *parts, int count, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float sum = parts[i];
        for (int r = 1; r < count; r++) sum += parts[(size_t)r * (size_t)n + (size_t)i];
        dst[i] = sum;
    }
}

extern "C" void tt_cuda_sum_parts(float *dst, const float *parts, int count, int64_t n, cudaStream_t stream) {
    if (n <= 0) return;
    const int64_t blocks = (n + 255) / 256 < 4096 ? (n + 255) / 256 : 4096;
    sum_parts_kernel<<<(unsigned)blocks, 256, 0, stream>>>(dst, parts, count, n);
    TT_CUDA_CHECK(cudaGetLastError());
}
