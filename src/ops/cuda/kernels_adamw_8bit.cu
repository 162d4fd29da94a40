/* bitsandbytes' 8-bit AdamW on the GPU (ops/adamw_8bit.h says what it computes): the CPU backend's arithmetic
 * (ops/cpu/adamw_8bit_cpu.c) operation for operation, each product and sum rounded on its own (__fmul_rn, __fadd_rn:
 * nvcc would otherwise fuse them into multiply-adds, which round once) and IEEE division and square root, so that
 * both backends give the same bits. One launch per tensor: an 8-bit tensor runs one thread block per 256-element
 * quantization block (a thread an element), a small one an element a thread over its fp32 moments. */
#include <cuda_bf16.h>
#include <math.h>

#include "ops/cuda/cuda_check.h"
#include "ops/cuda/device_math.cuh"
#include "ops/cuda/ops_cuda.h"

static_assert(TT_ADAMW_8BIT_BLOCK == 256, "one thread an element of a quantization block");

static __device__ __forceinline__ float load_gradient(const void *g, int g_is_fp32, int64_t i) {
    return g_is_fp32 ? ((const float *)g)[i] : bf16_to_float(((const tt_bf16 *)g)[i]);
}

/* The parameter: the fp32 master when there is one, else the bf16 weight itself. */
static __device__ __forceinline__ float load_parameter(const float *master, const tt_bf16 *weight, int64_t i) {
    return master ? master[i] : bf16_to_float(weight[i]);
}

static __device__ __forceinline__ void store_parameter(float *master, tt_bf16 *weight, int64_t i, float p) {
    if (master) master[i] = p;
    if (weight) weight[i] = float_to_bf16(p);
}

static __global__ void adamw_8bit_block_kernel(float *master, tt_bf16 *weight, const void *g, int g_is_fp32,
                                               unsigned char *codes1, unsigned char *codes2, float *absmax1,
                                               float *absmax2, int64_t numel, bool decays,
                                               const __grid_constant__ tt_adamw_8bit_maps maps,
                                               tt_adamw_8bit_scalars k) {
    __shared__ float first[TT_DYNAMIC_MAP_CODES], second[TT_DYNAMIC_MAP_CODES], partial[TT_ADAMW_8BIT_BLOCK / 32];
    first[threadIdx.x] = maps.first[threadIdx.x];
    second[threadIdx.x] = maps.second[threadIdx.x];
    __syncthreads();
    const int64_t b = blockIdx.x, i = b * TT_ADAMW_8BIT_BLOCK + threadIdx.x;
    const bool valid = i < numel;
    const float old1 = absmax1[b], old2 = absmax2[b];
    /* an element past a short block's end is bitsandbytes' padding: codes 128 and 0 with a zero gradient, taken
     * into the absmax as the CPU backend takes them */
    const float gj = __fmul_rn(valid ? load_gradient(g, g_is_fp32, i) : 0.0f, k.grad_scale);
    const bool finite = isfinite(gj);
    float s1 = 0.0f, s2 = 0.0f;
    if (finite) {
        s2 = __fmul_rn(second[valid ? codes2[i] : 0], old2);
        s2 = __fadd_rn(__fmul_rn(s2, k.beta2), __fmul_rn(__fmul_rn(k.one_minus_beta2, gj), gj));
        s1 = __fmul_rn(first[valid ? codes1[i] : 128], old1);
        s1 = __fadd_rn(__fmul_rn(s1, k.beta1), __fmul_rn(k.one_minus_beta1, gj));
    }
    const float max1 = block_max(fabsf(s1), partial); /* device_math.cuh: every thread gets the block's maximum */
    const float max2 = block_max(fabsf(s2), partial);
    if (threadIdx.x == 0) {
        absmax1[b] = max1;
        absmax2[b] = max2;
    }
    if (!valid) return;
    if (finite) {
        float p = load_parameter(master, weight, i);
        p = __fadd_rn(p, __fmul_rn(k.step_size, __fdiv_rn(s1, __fadd_rn(__fsqrt_rn(s2), k.scaled_eps))));
        if (decays) p = __fmul_rn(p, k.decay);
        store_parameter(master, weight, i, p);
    }
    unsigned char c1 = tt_dynamic_map_nearest_in(first, __fdiv_rn(s1, max1), true);
    codes2[i] = tt_dynamic_map_nearest_in(second, __fdiv_rn(s2, max2), false);
    if ((signbit(first[c1]) != 0) != (signbit(s1) != 0)) c1 = (unsigned char)(s1 > 0.0f ? c1 + 1 : c1 - 1);
    codes1[i] = c1;
}

static __global__ void adamw_8bit_fp32_kernel(float *master, tt_bf16 *weight, const void *g, int g_is_fp32, float *m,
                                              float *v, int64_t numel, bool decays, tt_adamw_8bit_scalars k) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= numel) return;
    const float gi = __fmul_rn(load_gradient(g, g_is_fp32, i), k.grad_scale);
    const float mi = __fadd_rn(__fmul_rn(m[i], k.beta1), __fmul_rn(k.one_minus_beta1, gi));
    const float vi = __fadd_rn(__fmul_rn(v[i], k.beta2), __fmul_rn(k.one_minus_beta2, __fmul_rn(gi, gi)));
    float p = load_parameter(master, weight, i);
    p = __fadd_rn(p, __fmul_rn(k.step_size, __fdiv_rn(mi, __fadd_rn(__fsqrt_rn(vi), k.scaled_eps))));
    if (decays) p = __fmul_rn(p, k.decay);
    m[i] = mi;
    v[i] = vi;
    store_parameter(master, weight, i, p);
}

extern "C" void tt_cuda_adamw_8bit(float *master, tt_bf16 *weight_bf16, const void *g, int g_is_fp32,
                                   const tt_adamw_8bit_moment *m, const tt_adamw_8bit_moment *v,
                                   const tt_adamw_8bit_tensor *tensors, int count, const tt_adamw_8bit_scalars *k,
                                   const tt_adamw_8bit_maps *maps, cudaStream_t stream) {
    for (int t = 0; t < count; t++) {
        const tt_adamw_8bit_tensor *x = &tensors[t];
        const bool decays = x->decays && k->weight_decays;
        float *p_master = master ? master + x->element : NULL;
        tt_bf16 *p_weight = weight_bf16 ? weight_bf16 + x->element : NULL;
        const void *p_g =
            g_is_fp32 ? (const void *)((const float *)g + x->element) : (const void *)((const tt_bf16 *)g + x->element);
        if (x->quantized) {
            adamw_8bit_block_kernel<<<(unsigned)tt_adamw_8bit_blocks(x->numel), TT_ADAMW_8BIT_BLOCK, 0, stream>>>(
                p_master, p_weight, p_g, g_is_fp32, m->codes + x->state, v->codes + x->state, m->absmax + x->block,
                v->absmax + x->block, x->numel, decays, *maps, *k);
        } else {
            adamw_8bit_fp32_kernel<<<(unsigned)((x->numel + 255) / 256), 256, 0, stream>>>(
                p_master, p_weight, p_g, g_is_fp32, m->fp32 + x->state, v->fp32 + x->state, x->numel, decays, *k);
        }
        TT_CUDA_CHECK(cudaGetLastError());
    }
}
