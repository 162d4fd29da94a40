/* Element-wise kernels: SwiGLU, RoPE and the embedding lookup and its deterministic backward.
 * bf16 storage, fp32 arithmetic, one rounding per output. */
#include <cuda_bf16.h>

#include "ops/cuda/cuda_check.h"
#include "ops/dropout_mask.h"
#include "ops/cuda/device_math.cuh"
#include "ops/cuda/ops_cuda.h"

static unsigned grid_for(int64_t n, int threads) { return (unsigned)((n + threads - 1) / threads); }

/* SwiGLU over 8 elements per thread (one 16-byte load of each input) where the tensor allows,
 * one element per thread for the rest. */
#define SWIGLU_VECTOR 8

typedef struct bf16x8 {
    uint4 bits;
} bf16x8;

static __device__ __forceinline__ float silu(float g) { return g / (1.0f + expf(-g)); }

static __device__ __forceinline__ void swiglu_forward_one(tt_bf16 *h, const tt_bf16 *gate, const tt_bf16 *up,
                                                          int64_t i) {
    h[i] = float_to_bf16(silu(bf16_to_float(gate[i])) * bf16_to_float(up[i]));
}

static __device__ __forceinline__ void swiglu_backward_one(tt_bf16 *dgate, tt_bf16 *dup, const tt_bf16 *dh,
                                                           const tt_bf16 *gate, const tt_bf16 *up, int64_t i) {
    const float g = bf16_to_float(gate[i]), u = bf16_to_float(up[i]), d = bf16_to_float(dh[i]);
    const float sig = 1.0f / (1.0f + expf(-g));
    dgate[i] = float_to_bf16(d * u * sig * (1.0f + g * (1.0f - sig)));
    dup[i] = float_to_bf16(d * g * sig);
}

static __global__ void swiglu_forward_kernel(tt_bf16 *h, const tt_bf16 *gate, const tt_bf16 *up, int64_t n) {
    const int64_t v = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, first = v * SWIGLU_VECTOR;
    if (first + SWIGLU_VECTOR <= n) {
        const uint4 gb = *(const uint4 *)(gate + first), ub = *(const uint4 *)(up + first);
        const tt_bf16 *g = (const tt_bf16 *)&gb, *u = (const tt_bf16 *)&ub;
        uint4 hb;
        tt_bf16 *o = (tt_bf16 *)&hb;
#pragma unroll
        for (int k = 0; k < SWIGLU_VECTOR; k++) o[k] = float_to_bf16(silu(bf16_to_float(g[k])) * bf16_to_float(u[k]));
        *(uint4 *)(h + first) = hb;
    } else {
        for (int64_t i = first; i < n; i++) swiglu_forward_one(h, gate, up, i);
    }
}

static __global__ void swiglu_backward_kernel(tt_bf16 *dgate, tt_bf16 *dup, const tt_bf16 *dh, const tt_bf16 *gate,
                                              const tt_bf16 *up, int64_t n) {
    const int64_t v = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, first = v * SWIGLU_VECTOR;
    if (first + SWIGLU_VECTOR <= n) {
        /* every input is read before any output is written: dgate may be gate, dup up */
        const uint4 gb = *(const uint4 *)(gate + first), ub = *(const uint4 *)(up + first),
                    db = *(const uint4 *)(dh + first);
        const tt_bf16 *g = (const tt_bf16 *)&gb, *u = (const tt_bf16 *)&ub, *d = (const tt_bf16 *)&db;
        uint4 dgb, dub;
        tt_bf16 *dg = (tt_bf16 *)&dgb, *du = (tt_bf16 *)&dub;
#pragma unroll
        for (int k = 0; k < SWIGLU_VECTOR; k++) {
            const float gv = bf16_to_float(g[k]), uv = bf16_to_float(u[k]), dv = bf16_to_float(d[k]);
            const float sig = 1.0f / (1.0f + expf(-gv));
            dg[k] = float_to_bf16(dv * uv * sig * (1.0f + gv * (1.0f - sig)));
            du[k] = float_to_bf16(dv * gv * sig);
        }
        *(uint4 *)(dgate + first) = dgb;
        *(uint4 *)(dup + first) = dub;
    } else {
        for (int64_t i = first; i < n; i++) swiglu_backward_one(dgate, dup, dh, gate, up, i);
    }
}

/* Threads for n elements, SWIGLU_VECTOR each; the pointers are 16-byte aligned (arena slots). */
static unsigned swiglu_grid(int64_t n) { return grid_for((n + SWIGLU_VECTOR - 1) / SWIGLU_VECTOR, 256); }

extern "C" void tt_cuda_swiglu_forward(tt_bf16 *h, const tt_bf16 *gate, const tt_bf16 *up, int64_t n,
                                       cudaStream_t stream) {
    if (n == 0) return;
    swiglu_forward_kernel<<<swiglu_grid(n), 256, 0, stream>>>(h, gate, up, n);
    TT_CUDA_CHECK(cudaGetLastError());
}

extern "C" void tt_cuda_swiglu_backward(tt_bf16 *dgate, tt_bf16 *dup, const tt_bf16 *dh, const tt_bf16 *gate,
                                        const tt_bf16 *up, int64_t n, cudaStream_t stream) {
    if (n == 0) return;
    swiglu_backward_kernel<<<swiglu_grid(n), 256, 0, stream>>>(dgate, dup, dh, gate, up, n);
    TT_CUDA_CHECK(cudaGetLastError());
}

/* One thread per (token, head, i < hd/2) pair; direction -1 rotates back (the backward). */
/* One element pair (i, i + half) of one head of one token; direction -1 rotates back (the
 * backward). The arithmetic of one pair, shared by both kernels below so that they give the same bits. */
static __device__ __forceinline__ void rope_rotate(float a, float b, float c, float s, float *out_a, float *out_b) {
    *out_a = a * c - b * s;
    *out_b = b * c + a * s;
}

static __global__ void rope_kernel(tt_bf16 *x, const float *cos_table, const float *sin_table, int64_t T, int64_t H,
                                   int64_t half, int64_t pairs, float direction) {
    const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= pairs) return;
    const int64_t i = idx % half, token = idx / (half * H), head = (idx / half) % H;
    const int64_t position = token % T;
    const float c = cos_table[position * half + i], s = direction * sin_table[position * half + i];
    tt_bf16 *v = x + (token * H + head) * 2 * half;
    float a, b;
    rope_rotate(bf16_to_float(v[i]), bf16_to_float(v[i + half]), c, s, &a, &b);
    v[i] = float_to_bf16(a);
    v[i + half] = float_to_bf16(b);
}

/* Two neighbouring pairs per thread (i even), four-byte loads and 32-bit index arithmetic: for
 * even halves and fewer than 2^31 pairs (every model here; the kernel above takes the rest). */
static __global__ void rope_pairs2_kernel(tt_bf16 *x, const float *cos_table, const float *sin_table, uint32_t T,
                                          uint32_t H, uint32_t half, uint32_t pair2s, float direction) {
    const uint32_t idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= pair2s) return;
    const uint32_t half2 = half / 2, i = 2 * (idx % half2), row = idx / half2; /* row = token * H + head */
    const uint32_t position = (row / H) % T;
    const float2 c = *(const float2 *)(cos_table + (size_t)position * half + i);
    const float2 sn = *(const float2 *)(sin_table + (size_t)position * half + i);
    __nv_bfloat162 *lo = (__nv_bfloat162 *)(x + (size_t)row * 2 * half + i);
    __nv_bfloat162 *hi = (__nv_bfloat162 *)(x + (size_t)row * 2 * half + half + i);
    const float2 a = __bfloat1622float2(*lo), b = __bfloat1622float2(*hi);
    float a0, b0, a1, b1;
    rope_rotate(a.x, b.x, c.x, direction * sn.x, &a0, &b0);
    rope_rotate(a.y, b.y, c.y, direction * sn.y, &a1, &b1);
    *lo = __floats2bfloat162_rn(a0, a1);
    *hi = __floats2bfloat162_rn(b0, b1);
}

static void rope(tt_bf16 *x, const float *cos_table, const float *sin_table, int64_t B, int64_t T, int64_t H,
                 int64_t hd, float direction, cudaStream_t stream) {
    const int64_t half = hd / 2, pairs = B * T * H * half;
    if (pairs == 0) return;
    if (half % 2 == 0 && pairs < ((int64_t)1 << 31))
        rope_pairs2_kernel<<<grid_for(pairs / 2, 256), 256, 0, stream>>>(
            x, cos_table, sin_table, (uint32_t)T, (uint32_t)H, (uint32_t)half, (uint32_t)(pairs / 2), direction);
    else rope_kernel<<<grid_for(pairs, 256), 256, 0, stream>>>(x, cos_table, sin_table, T, H, half, pairs, direction);
    TT_CUDA_CHECK(cudaGetLastError());
}

extern "C" void tt_cuda_rope_forward(tt_bf16 *x, const float *cos_table, const float *sin_table, int64_t B, int64_t T,
                                     int64_t H, int64_t hd, cudaStream_t stream) {
    rope(x, cos_table, sin_table, B, T, H, hd, 1.0f, stream);
}

extern "C" void tt_cuda_rope_backward(tt_bf16 *dx, const float *cos_table, const float *sin_table, int64_t B, int64_t T,
                                      int64_t H, int64_t hd, cudaStream_t stream) {
    rope(dx, cos_table, sin_table, B, T, H, hd, -1.0f, stream);
}

/* One thread per element; the mask bit comes from the element's index (dropout_mask.h), the same
 * function the CPU backend evaluates. */
static __global__ void dropout_scale_kernel(tt_bf16 *out, const tt_bf16 *x, int64_t n, float multiplier,
                                            uint32_t drop_threshold, uint64_t seed) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const bool keep = tt_dropout_bits(seed, (uint64_t)i) >= drop_threshold;
    out[i] = float_to_bf16(keep ? bf16_to_float(x[i]) * multiplier : 0.0f);
}

extern "C" void tt_cuda_dropout_scale(tt_bf16 *out, const tt_bf16 *x, int64_t n, float multiplier,
                                      uint32_t drop_threshold, uint64_t seed, cudaStream_t stream) {
    if (n == 0) return;
    dropout_scale_kernel<<<grid_for(n, 256), 256, 0, stream>>>(out, x, n, multiplier, drop_threshold, seed);
    TT_CUDA_CHECK(cudaGetLastError());
}

static __global__ void embedding_forward_kernel(tt_bf16 *out, const int32_t *ids, const tt_bf16 *table, int64_t D) {
    const int64_t n = blockIdx.x;
    const tt_bf16 *row = table + (int64_t)ids[n] * D;
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) out[n * D + d] = row[d];
}

extern "C" void tt_cuda_embedding_forward(tt_bf16 *out, const int32_t *ids, const tt_bf16 *table, int64_t N, int64_t D,
                                          cudaStream_t stream) {
    if (N == 0) return;
    embedding_forward_kernel<<<(unsigned)N, 256, 0, stream>>>(out, ids, table, D);
    TT_CUDA_CHECK(cudaGetLastError());
}

/* One block per segment (one token id); positions added in ascending order in fp32, the row's
 * previous value first, rounded once into a bf16 table. */
static __global__ void embedding_backward_kernel(void *dtable, int dtable_is_fp32, const int32_t *order,
                                                 const int32_t *starts, const int32_t *segment_tokens,
                                                 const tt_bf16 *dout, int64_t D) {
    const int64_t s = blockIdx.x;
    const int64_t row = (int64_t)segment_tokens[s] * D;
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
        float total = dtable_is_fp32 ? ((float *)dtable)[row + d] : bf16_to_float(((tt_bf16 *)dtable)[row + d]);
        for (int32_t k = starts[s]; k < starts[s + 1]; k++) total += bf16_to_float(dout[(int64_t)order[k] * D + d]);
        if (dtable_is_fp32) ((float *)dtable)[row + d] = total;
        else ((tt_bf16 *)dtable)[row + d] = float_to_bf16(total);
    }
}

extern "C" void tt_cuda_embedding_backward(void *dtable, int dtable_is_fp32, const int32_t *order,
                                           const int32_t *starts, const int32_t *segment_tokens, int64_t segments,
                                           const tt_bf16 *dout, int64_t D, cudaStream_t stream) {
    if (segments == 0) return;
    embedding_backward_kernel<<<(unsigned)segments, 256, 0, stream>>>(dtable, dtable_is_fp32, order, starts,
                                                                      segment_tokens, dout, D);
    TT_CUDA_CHECK(cudaGetLastError());
}
