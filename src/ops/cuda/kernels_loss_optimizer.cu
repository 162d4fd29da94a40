/* The cross-entropy half of the fused LM head, and AdamW. */
#include <cuda_bf16.h>
#include <math.h>

#include "ops/adamw_scalars.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/device_math.cuh"
#include "ops/cuda/ops_cuda.h"

#define CE_THREADS 512
#define IGNORE_INDEX (-100)


static __global__ void cross_entropy_kernel(tt_bf16 *logits, float *row_loss, const int32_t *targets, int64_t V,
                                            float scale) {
    __shared__ float shared[32];
    const int64_t r = blockIdx.x;
    tt_bf16 *row = logits + r * V;
    const int32_t target = targets[r];
    if (target == IGNORE_INDEX) {
        for (int64_t j = threadIdx.x; j < V; j += blockDim.x) row[j] = 0;
        if (threadIdx.x == 0) row_loss[r] = 0.0f;
        return;
    }
    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j < V; j += blockDim.x) m = fmaxf(m, bf16_to_float(row[j]));
    m = block_max(m, shared);
    float s = 0.0f;
    for (int64_t j = threadIdx.x; j < V; j += blockDim.x) s += expf(bf16_to_float(row[j]) - m);
    s = block_sum(s, shared);
    const float log_sum = logf(s);
    if (threadIdx.x == 0) row_loss[r] = m + log_sum - bf16_to_float(row[target]);
    __syncthreads(); /* row[target] is read above before being overwritten below */
    const float inv = 1.0f / s;
    for (int64_t j = threadIdx.x; j < V; j += blockDim.x) {
        float p = expf(bf16_to_float(row[j]) - m) * inv;
        row[j] = float_to_bf16(scale * (p - (j == target ? 1.0f : 0.0f)));
    }
}

extern "C" void tt_cuda_cross_entropy_chunk(tt_bf16 *logits, float *row_loss, const int32_t *targets, int64_t rows,
                                            int64_t V, float scale, cudaStream_t stream) {
    if (rows == 0) return;
    cross_entropy_kernel<<<(unsigned)rows, CE_THREADS, 0, stream>>>(logits, row_loss, targets, V, scale);
    TT_CUDA_CHECK(cudaGetLastError());
}

/* The parameters' segments of one launch: [start[s], start[s + 1]) decays by decay[s]. Passed by
 * value (kernel parameter space), so a launch needs no device table. */
typedef struct adamw_segments {
    int count;
    int64_t start[TT_CUDA_ADAMW_SEGMENTS_PER_LAUNCH + 1];
    float decay[TT_CUDA_ADAMW_SEGMENTS_PER_LAUNCH];
} adamw_segments;

/* The same operations in the same order as the CPU backend's adamw_update, each rounded once
 * (the _rn intrinsics keep nvcc from fusing them into FMAs): with fp32 moments the GPU and the
 * CPU produce the same bits. Grid-stride over the launch's elements; each thread's index only
 * grows, so its segment cursor only moves forward. */
static __global__ void adamw_kernel(float *master, tt_bf16 *weight_bf16, const void *g, int g_is_fp32, void *m_ptr,
                                    void *v_ptr, int moments_bf16, const __grid_constant__ adamw_segments seg,
                                    tt_adamw_scalars k) {
    const int64_t end = seg.start[seg.count], stride = (int64_t)gridDim.x * blockDim.x;
    int s = 0;
    for (int64_t i = seg.start[0] + (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < end; i += stride) {
        while (seg.start[s + 1] <= i) s++;
        const float raw = g_is_fp32 ? ((const float *)g)[i] : bf16_to_float(((const tt_bf16 *)g)[i]);
        const float grad = __fmul_rn(raw, k.grad_scale);
        const float m = moments_bf16 ? bf16_to_float(((tt_bf16 *)m_ptr)[i]) : ((float *)m_ptr)[i];
        const float v = moments_bf16 ? bf16_to_float(((tt_bf16 *)v_ptr)[i]) : ((float *)v_ptr)[i];
        float p = __fmul_rn(master ? master[i] : bf16_to_float(weight_bf16[i]), seg.decay[s]);
        const float m_new = __fadd_rn(__fmul_rn(k.beta1, m), __fmul_rn(k.one_minus_beta1, grad));
        const float v_new = __fadd_rn(__fmul_rn(k.beta2, v), __fmul_rn(__fmul_rn(k.one_minus_beta2, grad), grad));
        const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(v_new), k.bias_correction2_sqrt), k.eps);
        p = __fadd_rn(p, __fdiv_rn(__fmul_rn(k.neg_step_size, m_new), denom));
        if (master) master[i] = p;
        if (moments_bf16) {
            ((tt_bf16 *)m_ptr)[i] = float_to_bf16(m_new);
            ((tt_bf16 *)v_ptr)[i] = float_to_bf16(v_new);
        } else {
            ((float *)m_ptr)[i] = m_new;
            ((float *)v_ptr)[i] = v_new;
        }
        if (weight_bf16) weight_bf16[i] = float_to_bf16(p);
    }
}

extern "C" void tt_cuda_adamw(float *master, tt_bf16 *weight_bf16, const void *g, int g_is_fp32, void *m, void *v,
                              int moments_bf16, const int64_t *segment_start, const unsigned char *segment_decays,
                              int segments, float lr, float beta1, float beta2, float eps, float weight_decay,
                              int64_t step, float grad_scale, cudaStream_t stream) {
    /* the scalars exactly as the CPU backend derives them */
    const tt_adamw_scalars k = tt_adamw_scalars_for(lr, beta1, beta2, eps, weight_decay, step, grad_scale);
    static int sm_count = 0; /* the device's, asked once */
    if (!sm_count) {
        int device = 0;
        TT_CUDA_CHECK(cudaGetDevice(&device));
        TT_CUDA_CHECK(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device));
    }
    for (int first = 0; first < segments; first += TT_CUDA_ADAMW_SEGMENTS_PER_LAUNCH) {
        adamw_segments seg;
        seg.count = segments - first < TT_CUDA_ADAMW_SEGMENTS_PER_LAUNCH ? segments - first
                                                                         : TT_CUDA_ADAMW_SEGMENTS_PER_LAUNCH;
        for (int s = 0; s <= seg.count; s++) seg.start[s] = segment_start[first + s];
        for (int s = 0; s < seg.count; s++) seg.decay[s] = segment_decays[first + s] ? k.decay : 1.0f;
        const int64_t n = seg.start[seg.count] - seg.start[0];
        if (n <= 0) continue;
        const int64_t blocks_needed = (n + 255) / 256, blocks_cap = (int64_t)sm_count * 16;
        adamw_kernel<<<(unsigned)(blocks_needed < blocks_cap ? blocks_needed : blocks_cap), 256, 0, stream>>>(
            master, weight_bf16, g, g_is_fp32, m, v, moments_bf16, seg, k);
        TT_CUDA_CHECK(cudaGetLastError());
    }
}
