/* Element-wise kernels: the gated activations (SwiGLU, GeGLU), RoPE and the embedding lookup and its deterministic
 * backward.
 * bf16 storage, fp32 arithmetic, one rounding per output. */
#include <cuda_bf16.h>

#include "ops/cuda/cuda_check.h"
#include "ops/dropout_mask.h"
#include "ops/cuda/device_math.cuh"
#include "ops/cuda/ops_cuda.h"

static unsigned grid_for(int64_t n, int threads) { return (unsigned)((n + threads - 1) / threads); }

/* The gated activations over 8 elements per thread (one 16-byte load of each input) where the tensor allows, one
 * element per thread for the rest. */
#define GLU_VECTOR 8

static __device__ __forceinline__ float silu(float g) { return g / (1.0f + expf(-g)); }

/* torch's gelu(approximate="tanh"), in the order of its kernel: 0.5 g (1 + tanh(beta (g + kappa g^3))). */
#define GELU_BETA 0.7978845608028654f /* sqrt(2 / pi) */
#define GELU_KAPPA 0.044715f

static __device__ __forceinline__ float gelu_tanh(float g) {
    return 0.5f * g * (1.0f + tanhf(GELU_BETA * (g + GELU_KAPPA * (g * g * g))));
}

static __device__ __forceinline__ float activation(float g, int act) {
    return act == TT_GLU_SILU ? silu(g) : gelu_tanh(g);
}

/* d act / d g: silu' = sig (1 + g (1 - sig)); tanh gelu' = 0.5 (1 + t) + 0.5 g (1 - t^2) beta (1 + 3 kappa g^2). */
static __device__ __forceinline__ float activation_slope(float g, int act, float *value) {
    if (act == TT_GLU_SILU) {
        const float sig = 1.0f / (1.0f + expf(-g));
        *value = g * sig;
        return sig * (1.0f + g * (1.0f - sig));
    }
    const float g2 = g * g, t = tanhf(GELU_BETA * (g + GELU_KAPPA * (g2 * g)));
    *value = 0.5f * g * (1.0f + t);
    return 0.5f * (1.0f + t) + 0.5f * g * ((1.0f - t * t) * (GELU_BETA * (1.0f + 3.0f * GELU_KAPPA * g2)));
}

static __device__ __forceinline__ void glu_backward_element(float g, float u, float d, int act, tt_bf16 *dg,
                                                            tt_bf16 *du) {
    float value;
    const float slope = activation_slope(g, act, &value);
    *dg = float_to_bf16(d * u * slope);
    *du = float_to_bf16(d * value);
}

static __global__ void glu_forward_kernel(tt_bf16 *h, const tt_bf16 *gate, const tt_bf16 *up, int64_t n, int act) {
    const int64_t v = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, first = v * GLU_VECTOR;
    if (first + GLU_VECTOR <= n) {
        const uint4 gb = *(const uint4 *)(gate + first), ub = *(const uint4 *)(up + first);
        const tt_bf16 *g = (const tt_bf16 *)&gb, *u = (const tt_bf16 *)&ub;
        uint4 hb;
        tt_bf16 *o = (tt_bf16 *)&hb;
#pragma unroll
        for (int k = 0; k < GLU_VECTOR; k++)
            o[k] = float_to_bf16(activation(bf16_to_float(g[k]), act) * bf16_to_float(u[k]));
        *(uint4 *)(h + first) = hb;
    } else {
        for (int64_t i = first; i < n; i++)
            h[i] = float_to_bf16(activation(bf16_to_float(gate[i]), act) * bf16_to_float(up[i]));
    }
}

static __global__ void glu_backward_kernel(tt_bf16 *dgate, tt_bf16 *dup, const tt_bf16 *dh, const tt_bf16 *gate,
                                           const tt_bf16 *up, int64_t n, int act) {
    const int64_t v = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, first = v * GLU_VECTOR;
    if (first + GLU_VECTOR <= n) {
        /* every input is read before any output is written: dgate may be gate, dup up */
        const uint4 gb = *(const uint4 *)(gate + first), ub = *(const uint4 *)(up + first),
                    db = *(const uint4 *)(dh + first);
        const tt_bf16 *g = (const tt_bf16 *)&gb, *u = (const tt_bf16 *)&ub, *d = (const tt_bf16 *)&db;
        uint4 dgb, dub;
        tt_bf16 *dg = (tt_bf16 *)&dgb, *du = (tt_bf16 *)&dub;
#pragma unroll
        for (int k = 0; k < GLU_VECTOR; k++)
            glu_backward_element(bf16_to_float(g[k]), bf16_to_float(u[k]), bf16_to_float(d[k]), act, &dg[k], &du[k]);
        *(uint4 *)(dgate + first) = dgb;
        *(uint4 *)(dup + first) = dub;
    } else {
        for (int64_t i = first; i < n; i++) {
            tt_bf16 dg, du;
            glu_backward_element(bf16_to_float(gate[i]), bf16_to_float(up[i]), bf16_to_float(dh[i]), act, &dg, &du);
            dgate[i] = dg;
            dup[i] = du;
        }
    }
}

/* Threads for n elements, GLU_VECTOR each; the pointers are 16-byte aligned (arena slots). */
static unsigned glu_grid(int64_t n) { return grid_for((n + GLU_VECTOR - 1) / GLU_VECTOR, 256); }

extern "C" void tt_cuda_glu_forward(tt_bf16 *h, const tt_bf16 *gate, const tt_bf16 *up, int64_t n,
                                    tt_glu_activation act, cudaStream_t stream) {
    if (n == 0) return;
    glu_forward_kernel<<<glu_grid(n), 256, 0, stream>>>(h, gate, up, n, (int)act);
    TT_CUDA_CHECK(cudaGetLastError());
}

extern "C" void tt_cuda_glu_backward(tt_bf16 *dgate, tt_bf16 *dup, const tt_bf16 *dh, const tt_bf16 *gate,
                                     const tt_bf16 *up, int64_t n, tt_glu_activation act, cudaStream_t stream) {
    if (n == 0) return;
    glu_backward_kernel<<<glu_grid(n), 256, 0, stream>>>(dgate, dup, dh, gate, up, n, (int)act);
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
                                   int64_t hd, int64_t half, int64_t pairs, float direction) {
    const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= pairs) return;
    const int64_t i = idx % half, token = idx / (half * H), head = (idx / half) % H;
    const int64_t position = token % T;
    const float c = cos_table[position * half + i], s = direction * sin_table[position * half + i];
    tt_bf16 *v = x + (token * H + head) * hd;
    float a, b;
    rope_rotate(bf16_to_float(v[i]), bf16_to_float(v[i + half]), c, s, &a, &b);
    v[i] = float_to_bf16(a);
    v[i + half] = float_to_bf16(b);
}

/* Two neighbouring pairs per thread (i even), four-byte loads and 32-bit index arithmetic: for
 * even halves and fewer than 2^31 pairs (every model here; the kernel above takes the rest). */
static __global__ void rope_pairs2_kernel(tt_bf16 *x, const float *cos_table, const float *sin_table, uint32_t T,
                                          uint32_t H, uint32_t hd, uint32_t half, uint32_t pair2s, float direction) {
    const uint32_t idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= pair2s) return;
    const uint32_t half2 = half / 2, i = 2 * (idx % half2), row = idx / half2; /* row = token * H + head */
    const uint32_t position = (row / H) % T;
    const float2 c = *(const float2 *)(cos_table + (size_t)position * half + i);
    const float2 sn = *(const float2 *)(sin_table + (size_t)position * half + i);
    __nv_bfloat162 *lo = (__nv_bfloat162 *)(x + (size_t)row * hd + i);
    __nv_bfloat162 *hi = (__nv_bfloat162 *)(x + (size_t)row * hd + half + i);
    const float2 a = __bfloat1622float2(*lo), b = __bfloat1622float2(*hi);
    float a0, b0, a1, b1;
    rope_rotate(a.x, b.x, c.x, direction * sn.x, &a0, &b0);
    rope_rotate(a.y, b.y, c.y, direction * sn.y, &a1, &b1);
    *lo = __floats2bfloat162_rn(a0, a1);
    *hi = __floats2bfloat162_rn(b0, b1);
}

/* Over the first rotary_dim of each head of hd (partial rotary: the rest are left as they are). The paired kernel's
 * four-byte loads need an even half and an even head_dim. */
static void rope(tt_bf16 *x, const float *cos_table, const float *sin_table, int64_t B, int64_t T, int64_t H,
                 int64_t hd, int64_t rotary_dim, float direction, cudaStream_t stream) {
    TT_CHECK(rotary_dim > 0 && rotary_dim % 2 == 0 && rotary_dim <= hd,
             "RoPE over %lld of head_dim %lld dimensions: an even count, at most head_dim", (long long)rotary_dim,
             (long long)hd);
    const int64_t half = rotary_dim / 2, pairs = B * T * H * half;
    if (pairs == 0) return;
    if (half % 2 == 0 && hd % 2 == 0 && pairs < ((int64_t)1 << 31))
        rope_pairs2_kernel<<<grid_for(pairs / 2, 256), 256, 0, stream>>>(x, cos_table, sin_table, (uint32_t)T,
                                                                         (uint32_t)H, (uint32_t)hd, (uint32_t)half,
                                                                         (uint32_t)(pairs / 2), direction);
    else
        rope_kernel<<<grid_for(pairs, 256), 256, 0, stream>>>(x, cos_table, sin_table, T, H, hd, half, pairs,
                                                              direction);
    TT_CUDA_CHECK(cudaGetLastError());
}

extern "C" void tt_cuda_rope_forward(tt_bf16 *x, const float *cos_table, const float *sin_table, int64_t B, int64_t T,
                                     int64_t H, int64_t hd, int64_t rotary_dim, cudaStream_t stream) {
    rope(x, cos_table, sin_table, B, T, H, hd, rotary_dim, 1.0f, stream);
}

extern "C" void tt_cuda_rope_backward(tt_bf16 *dx, const float *cos_table, const float *sin_table, int64_t B, int64_t T,
                                      int64_t H, int64_t hd, int64_t rotary_dim, cudaStream_t stream) {
    rope(dx, cos_table, sin_table, B, T, H, hd, rotary_dim, -1.0f, stream);
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

static __global__ void add_uniform_noise_kernel(tt_bf16 *x, int64_t n, float magnitude, uint64_t seed) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    x[i] = float_to_bf16(bf16_to_float(x[i]) + tt_uniform_noise(seed, (uint64_t)i, magnitude));
}

extern "C" void tt_cuda_add_uniform_noise(tt_bf16 *x, int64_t n, float magnitude, uint64_t seed, cudaStream_t stream) {
    if (n == 0) return;
    add_uniform_noise_kernel<<<grid_for(n, 256), 256, 0, stream>>>(x, n, magnitude, seed);
    TT_CUDA_CHECK(cudaGetLastError());
}

static __global__ void embedding_forward_kernel(tt_bf16 *out, const int32_t *ids, const tt_bf16 *table, int64_t D,
                                                float scale) {
    const int64_t n = blockIdx.x;
    const tt_bf16 *row = table + (int64_t)ids[n] * D;
    if (scale == 1.0f)
        for (int64_t d = threadIdx.x; d < D; d += blockDim.x) out[n * D + d] = row[d];
    else
        for (int64_t d = threadIdx.x; d < D; d += blockDim.x)
            out[n * D + d] = float_to_bf16(bf16_to_float(row[d]) * scale);
}

extern "C" void tt_cuda_embedding_forward(tt_bf16 *out, const int32_t *ids, const tt_bf16 *table, int64_t N, int64_t D,
                                          float scale, cudaStream_t stream) {
    if (N == 0) return;
    embedding_forward_kernel<<<(unsigned)N, 256, 0, stream>>>(out, ids, table, D, scale);
    TT_CUDA_CHECK(cudaGetLastError());
}

/* One block per segment (one token id); positions added in ascending order in fp32, the row's
 * previous value first, rounded once into a bf16 table. */
static __global__ void embedding_backward_kernel(void *dtable, int dtable_is_fp32, const int32_t *order,
                                                 const int32_t *starts, const int32_t *segment_tokens,
                                                 const tt_bf16 *dout, int64_t D, float scale) {
    const int64_t s = blockIdx.x;
    const int64_t row = (int64_t)segment_tokens[s] * D;
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
        float total = dtable_is_fp32 ? ((float *)dtable)[row + d] : bf16_to_float(((tt_bf16 *)dtable)[row + d]);
        for (int32_t k = starts[s]; k < starts[s + 1]; k++)
            total += scale == 1.0f ? bf16_to_float(dout[(int64_t)order[k] * D + d])
                                   : bf16_to_float(dout[(int64_t)order[k] * D + d]) * scale;
        if (dtable_is_fp32) ((float *)dtable)[row + d] = total;
        else ((tt_bf16 *)dtable)[row + d] = float_to_bf16(total);
    }
}

extern "C" void tt_cuda_embedding_backward(void *dtable, int dtable_is_fp32, const int32_t *order,
                                           const int32_t *starts, const int32_t *segment_tokens, int64_t segments,
                                           const tt_bf16 *dout, int64_t D, float scale, cudaStream_t stream) {
    if (segments == 0) return;
    embedding_backward_kernel<<<(unsigned)segments, 256, 0, stream>>>(dtable, dtable_is_fp32, order, starts,
                                                                      segment_tokens, dout, D, scale);
    TT_CUDA_CHECK(cudaGetLastError());
}
