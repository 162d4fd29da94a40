/* The cross-entropy half of the fused LM head, and AdamW. */
#include <cuda_bf16.h>
#include <math.h>

#include "ops/adamw_scalars.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/device_math.cuh"
#include "ops/cuda/ops_cuda.h"

#define CE_THREADS 512
#define IGNORE_INDEX (-100)

/* A logit as the loss sees it: scaled, then soft-capped where cap > 0; slope: d(that) / d(logit). */
static __device__ __forceinline__ float transformed_logit(float raw, float logit_scale, float cap, float *slope) {
    const float z = raw * logit_scale;
    if (!(cap > 0.0f)) {
        *slope = logit_scale;
        return z;
    }
    const float t = tanhf(z / cap);
    *slope = (1.0f - t * t) * logit_scale;
    return cap * t;
}

static __global__ void cross_entropy_kernel(tt_bf16 *logits, float *row_loss, const int32_t *targets, int64_t V,
                                            float scale, float logit_scale, float cap) {
    __shared__ float shared[32];
    const int64_t r = blockIdx.x;
    tt_bf16 *row = logits + r * V;
    const int32_t target = targets[r];
    if (target == IGNORE_INDEX) {
        for (int64_t j = threadIdx.x; j < V; j += blockDim.x) row[j] = 0;
        if (threadIdx.x == 0) row_loss[r] = 0.0f;
        return;
    }
    float slope;
    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j < V; j += blockDim.x)
        m = fmaxf(m, transformed_logit(bf16_to_float(row[j]), logit_scale, cap, &slope));
    m = block_max(m, shared);
    float s = 0.0f;
    for (int64_t j = threadIdx.x; j < V; j += blockDim.x)
        s += expf(transformed_logit(bf16_to_float(row[j]), logit_scale, cap, &slope) - m);
    s = block_sum(s, shared);
    const float log_sum = logf(s);
    if (threadIdx.x == 0)
        row_loss[r] = m + log_sum - transformed_logit(bf16_to_float(row[target]), logit_scale, cap, &slope);
    __syncthreads(); /* row[target] is read above before being overwritten below */
    const float inv = 1.0f / s;
    for (int64_t j = threadIdx.x; j < V; j += blockDim.x) {
        const float z = transformed_logit(bf16_to_float(row[j]), logit_scale, cap, &slope);
        const float p = expf(z - m) * inv;
        const float d = scale * (p - (j == target ? 1.0f : 0.0f));
        row[j] = float_to_bf16(logit_scale == 1.0f && !(cap > 0.0f) ? d : d * slope);
    }
}

extern "C" void tt_cuda_cross_entropy_chunk(tt_bf16 *logits, float *row_loss, const int32_t *targets, int64_t rows,
                                            int64_t V, float scale, float logit_scale, float softcap,
                                            cudaStream_t stream) {
    if (rows == 0) return;
    cross_entropy_kernel<<<(unsigned)rows, CE_THREADS, 0, stream>>>(logits, row_loss, targets, V, scale, logit_scale,
                                                                    softcap);
    TT_CUDA_CHECK(cudaGetLastError());
}

/* The parameters' segments of one launch: [start[s], start[s + 1]) decays by decay[s]. Passed by
 * value (kernel parameter space), so a launch needs no device table. */
typedef struct adamw_segments {
    int count;
    int64_t start[TT_CUDA_ADAMW_SEGMENTS_PER_LAUNCH + 1];
    float decay[TT_CUDA_ADAMW_SEGMENTS_PER_LAUNCH];
} adamw_segments;

/* One element's update: the same operations in the same order as the CPU backend's adamw_update,
 * each rounded once (the _rn intrinsics keep nvcc from fusing them into FMAs): with fp32 moments the
 * GPU and the CPU produce the same bits. p: the master weight (or the bf16 weight) before decay. */
static __device__ __forceinline__ void adamw_element(float *p, float *m, float *v, float raw_grad, float decay,
                                                     const tt_adamw_scalars &k) {
    const float grad = __fmul_rn(raw_grad, k.grad_scale);
    float w = __fmul_rn(*p, decay);
    const float m_new = __fadd_rn(__fmul_rn(k.beta1, *m), __fmul_rn(k.one_minus_beta1, grad));
    const float v_new = __fadd_rn(__fmul_rn(k.beta2, *v), __fmul_rn(__fmul_rn(k.one_minus_beta2, grad), grad));
    const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(v_new), k.bias_correction2_sqrt), k.eps);
    w = __fadd_rn(w, __fdiv_rn(__fmul_rn(k.neg_step_size, m_new), denom));
    *p = w;
    *m = m_new;
    *v = v_new;
}

/* Grid-stride over the launch's elements; each thread's index only grows, so its segment cursor only
 * moves forward. */
static __global__ void adamw_kernel(float *master, tt_bf16 *weight_bf16, const void *g, int g_is_fp32, void *m_ptr,
                                    void *v_ptr, int moments_bf16, const __grid_constant__ adamw_segments seg,
                                    tt_adamw_scalars k) {
    const int64_t end = seg.start[seg.count], stride = (int64_t)gridDim.x * blockDim.x;
    int s = 0;
    for (int64_t i = seg.start[0] + (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < end; i += stride) {
        while (seg.start[s + 1] <= i) s++;
        const float raw = g_is_fp32 ? ((const float *)g)[i] : bf16_to_float(((const tt_bf16 *)g)[i]);
        float m = moments_bf16 ? bf16_to_float(((tt_bf16 *)m_ptr)[i]) : ((float *)m_ptr)[i];
        float v = moments_bf16 ? bf16_to_float(((tt_bf16 *)v_ptr)[i]) : ((float *)v_ptr)[i];
        float p = master ? master[i] : bf16_to_float(weight_bf16[i]);
        adamw_element(&p, &m, &v, raw, seg.decay[s], k);
        if (master) master[i] = p;
        if (moments_bf16) {
            ((tt_bf16 *)m_ptr)[i] = float_to_bf16(m);
            ((tt_bf16 *)v_ptr)[i] = float_to_bf16(v);
        } else {
            ((float *)m_ptr)[i] = m;
            ((float *)v_ptr)[i] = v;
        }
        if (weight_bf16) weight_bf16[i] = float_to_bf16(p);
    }
}

/* Four consecutive elements at a time (every segment starts on a multiple of 4 and every array is
 * aligned for it: tt_cuda_adamw checks), so each array moves in 8- or 16-byte accesses; the same
 * element arithmetic. */
typedef struct bf16x4 {
    tt_bf16 e[4];
} __align__(8) bf16x4;

static __device__ __forceinline__ void load4(float out[4], const void *base, int is_fp32, int64_t group) {
    if (is_fp32) {
        const float4 q = ((const float4 *)base)[group];
        out[0] = q.x;
        out[1] = q.y;
        out[2] = q.z;
        out[3] = q.w;
    } else {
        const bf16x4 q = ((const bf16x4 *)base)[group];
        for (int j = 0; j < 4; j++) out[j] = bf16_to_float(q.e[j]);
    }
}

static __device__ __forceinline__ void store4(void *base, int is_fp32, int64_t group, const float in[4]) {
    if (is_fp32) {
        ((float4 *)base)[group] = make_float4(in[0], in[1], in[2], in[3]);
    } else {
        bf16x4 q;
        for (int j = 0; j < 4; j++) q.e[j] = float_to_bf16(in[j]);
        ((bf16x4 *)base)[group] = q;
    }
}

static __global__ void adamw4_kernel(float *master, tt_bf16 *weight_bf16, const void *g, int g_is_fp32, void *m_ptr,
                                     void *v_ptr, int moments_bf16, const __grid_constant__ adamw_segments seg,
                                     tt_adamw_scalars k) {
    const int64_t end = seg.start[seg.count] / 4, stride = (int64_t)gridDim.x * blockDim.x;
    int s = 0;
    for (int64_t q = seg.start[0] / 4 + (int64_t)blockIdx.x * blockDim.x + threadIdx.x; q < end; q += stride) {
        while (seg.start[s + 1] <= q * 4) s++;
        float grad[4], m[4], v[4], p[4];
        load4(grad, g, g_is_fp32, q);
        load4(m, m_ptr, !moments_bf16, q);
        load4(v, v_ptr, !moments_bf16, q);
        if (master) load4(p, master, 1, q);
        else load4(p, weight_bf16, 0, q);
        for (int j = 0; j < 4; j++) adamw_element(&p[j], &m[j], &v[j], grad[j], seg.decay[s], k);
        if (master) store4(master, 1, q, p);
        store4(m_ptr, !moments_bf16, q, m);
        store4(v_ptr, !moments_bf16, q, v);
        if (weight_bf16) store4(weight_bf16, 0, q, p);
    }
}

extern "C" void tt_cuda_adamw(float *master, tt_bf16 *weight_bf16, const void *g, int g_is_fp32, void *m, void *v,
                              int moments_bf16, const int64_t *segment_start, const unsigned char *segment_decays,
                              int segments, float lr, float beta1, float beta2, float eps, float weight_decay,
                              int64_t step, float grad_scale, cudaStream_t stream) {
    /* the scalars exactly as the CPU backend derives them */
    const tt_adamw_scalars k = tt_adamw_scalars_for(lr, beta1, beta2, eps, weight_decay, step, grad_scale);
    /* the current device's (an attribute query: the runtime answers it from its cache, no device round trip) */
    int device = 0, sm_count = 0;
    TT_CUDA_CHECK(cudaGetDevice(&device));
    TT_CUDA_CHECK(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device));
    /* four elements at a time when every segment starts on a multiple of four and every array is aligned to
     * four of its elements (the parameter table aligns parameters to 64 elements) */
    bool by_four = ((uintptr_t)master & 15u) == 0 && ((uintptr_t)weight_bf16 & 7u) == 0 &&
                   ((uintptr_t)g & (g_is_fp32 ? 15u : 7u)) == 0 && ((uintptr_t)m & (moments_bf16 ? 7u : 15u)) == 0 &&
                   ((uintptr_t)v & (moments_bf16 ? 7u : 15u)) == 0;
    for (int s = 0; s <= segments && by_four; s++) by_four = segment_start[s] % 4 == 0;
    for (int first = 0; first < segments; first += TT_CUDA_ADAMW_SEGMENTS_PER_LAUNCH) {
        adamw_segments seg;
        seg.count =
            segments - first < TT_CUDA_ADAMW_SEGMENTS_PER_LAUNCH ? segments - first : TT_CUDA_ADAMW_SEGMENTS_PER_LAUNCH;
        for (int s = 0; s <= seg.count; s++) seg.start[s] = segment_start[first + s];
        for (int s = 0; s < seg.count; s++) seg.decay[s] = segment_decays[first + s] ? k.decay : 1.0f;
        const int64_t n = seg.start[seg.count] - seg.start[0];
        if (n <= 0) continue;
        const int64_t blocks_cap = (int64_t)sm_count * 16;
        if (by_four) {
            const int64_t blocks_needed = (n / 4 + 255) / 256;
            adamw4_kernel<<<(unsigned)(blocks_needed < blocks_cap ? blocks_needed : blocks_cap), 256, 0, stream>>>(
                master, weight_bf16, g, g_is_fp32, m, v, moments_bf16, seg, k);
        } else {
            const int64_t blocks_needed = (n + 255) / 256;
            adamw_kernel<<<(unsigned)(blocks_needed < blocks_cap ? blocks_needed : blocks_cap), 256, 0, stream>>>(
                master, weight_bf16, g, g_is_fp32, m, v, moments_bf16, seg, k);
        }
        TT_CUDA_CHECK(cudaGetLastError());
    }
}
