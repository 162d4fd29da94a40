/* Device helpers the attention kernels share (kernels_attention_flash.cu, kernels_attention_hopper.cu; included by
 * .cu files only): cp.async copies into shared memory, the softmax's base-2 exponential and its row reductions over
 * the four lanes that hold a row, and bf16 pairs in the MMA operand order. */
#ifndef TT_OPS_CUDA_ATTENTION_DEVICE_CUH
#define TT_OPS_CUDA_ATTENTION_DEVICE_CUH

#include <stdint.h>

#include <cuda_bf16.h>

#define LOG2E 1.4426950408889634f
#define LN2 0.6931471805599453f

static __device__ __forceinline__ uint32_t shared_address(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* 16 bytes global -> shared, bypassing L1; when !valid the 16 bytes are zero-filled and src is
 * not read (it must still be a valid address expression). */
static __device__ __forceinline__ void cp_async_16(uint32_t dst, const void *src, bool valid) {
    const int src_bytes = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}

/* 4 bytes, zero-filled when !valid (the per-row lse and D values). */
static __device__ __forceinline__ void cp_async_4(uint32_t dst, const void *src, bool valid) {
    const int src_bytes = valid ? 4 : 0;
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}

static __device__ __forceinline__ void cp_async_commit(void) { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

/* All but the newest PENDING committed groups have landed. */
template <int PENDING> static __device__ __forceinline__ void cp_async_wait(void) {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(PENDING) : "memory");
}

/* 2^x in one MUFU instruction; 2^-inf = 0, which is what masked scores rely on. */
static __device__ __forceinline__ float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

/* Two floats as a bf16 pair, the lower index in the low half (the mma operand order). */
static __device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *(uint32_t *)&v;
}

/* The maximum and the sum over the four lanes of a quad (lane / 4 equal): the lanes that hold one accumulator row. */
static __device__ __forceinline__ float quad_max(float v) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

static __device__ __forceinline__ float quad_sum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

#endif
