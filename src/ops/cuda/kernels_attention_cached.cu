/* Attention over a KV cache (generation): n new queries of one sequence at positions start .. start + n - 1 over the
 * cached keys and values of every position up to theirs. A (query, head)'s visible keys are cut into `splits`
 * consecutive ranges, a block of KEY_WARPS warps each: warp w of a block takes its range's keys w, w + KEY_WARPS, ...
 * with an online softmax of its own (fp32; each lane holds head-dimension elements d = lane, lane + 32, ...), the
 * block merges its warps in warp order through shared memory, and with several ranges a second kernel merges the
 * ranges' partial softmaxes in range order (flash-decoding's split over keys): every sum runs in a fixed order, so the
 * bits repeat. Decoding one token (n = 1) has a block per head alone; the split puts the key ranges of every head on
 * the GPU side by side. The visibility rule, scale and soft-capping are the CPU op's (attention_cached in
 * ops/backend.h). */
#include <math.h>

#include "ops/cuda/cuda_check.h"
#include "ops/cuda/device_math.cuh"
#include "ops/cuda/ops_cuda.h"

#define KEY_WARPS 8
#define MAX_PER_LANE 8 /* head_dim <= 256 */
#define MAX_SPLITS 64
#define KEYS_PER_SPLIT 64 /* a range no shorter than this (the merge costs about a range's worth of work) */
#define TARGET_BLOCKS 264 /* two blocks per SM of an H100 / H200 */

static __device__ __forceinline__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

static __device__ __forceinline__ int64_t first_visible(int64_t position, int64_t window) {
    return window > 0 && position - window + 1 > 0 ? position - window + 1 : 0;
}

static __global__ void attention_cached_kernel(tt_bf16 *out, float *partials, const tt_bf16 *q, const tt_bf16 *k_cache,
                                               const tt_bf16 *v_cache, int64_t start, int splits, tt_attention_shape s,
                                               float scale) {
    __shared__ float warp_max[KEY_WARPS], warp_sum_exp[KEY_WARPS];
    __shared__ float warp_acc[KEY_WARPS][32 * MAX_PER_LANE];
    const int64_t Hq = s.num_heads, Hkv = s.num_kv_heads, row = blockIdx.x;
    const int hd = (int)s.head_dim, warp = threadIdx.x >> 5, lane = threadIdx.x & 31, split = (int)blockIdx.y;
    const int64_t i = row / Hq, h = row % Hq, kvh = h / (Hq / Hkv), position = start + i;
    const int64_t first = first_visible(position, s.sliding_window), count = position - first + 1;
    const int64_t per_split = (count + splits - 1) / splits;
    const int64_t begin = first + split * per_split;
    const int64_t end = begin + per_split < position + 1 ? begin + per_split : position + 1;
    const float cap = (float)s.softcap;
    float qi[MAX_PER_LANE], acc[MAX_PER_LANE];
    const tt_bf16 *q_row = q + (i * Hq + h) * hd;
#pragma unroll
    for (int e = 0; e < MAX_PER_LANE; e++) {
        const int d = lane + 32 * e;
        qi[e] = d < hd ? bf16_to_float(q_row[d]) : 0.0f;
        acc[e] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    for (int64_t j = begin + warp; j < end; j += KEY_WARPS) {
        const tt_bf16 *kj = k_cache + (j * Hkv + kvh) * hd, *vj = v_cache + (j * Hkv + kvh) * hd;
        float dot = 0.0f;
#pragma unroll
        for (int e = 0; e < MAX_PER_LANE; e++) {
            const int d = lane + 32 * e;
            if (d < hd) dot += qi[e] * bf16_to_float(kj[d]);
        }
        float score = warp_sum(dot) * scale;
        if (cap > 0.0f) score = cap * tanhf(score / cap);
        const float m_new = fmaxf(m, score), correction = expf(m - m_new), p = expf(score - m_new);
        l = l * correction + p;
#pragma unroll
        for (int e = 0; e < MAX_PER_LANE; e++) {
            const int d = lane + 32 * e;
            if (d < hd) acc[e] = acc[e] * correction + p * bf16_to_float(vj[d]);
        }
        m = m_new;
    }
    if (lane == 0) {
        warp_max[warp] = m;
        warp_sum_exp[warp] = l;
    }
#pragma unroll
    for (int e = 0; e < MAX_PER_LANE; e++) warp_acc[warp][lane + 32 * e] = acc[e];
    __syncthreads();
    if (warp != 0) return;
    /* warp 0 merges the warps' partial softmaxes in warp order (a warp with no key has m = -inf and adds nothing) */
    float total_max = -INFINITY;
    for (int w = 0; w < KEY_WARPS; w++) total_max = fmaxf(total_max, warp_max[w]);
    float total = 0.0f, merged[MAX_PER_LANE];
#pragma unroll
    for (int e = 0; e < MAX_PER_LANE; e++) merged[e] = 0.0f;
    for (int w = 0; w < KEY_WARPS; w++) {
        if (warp_max[w] == -INFINITY) continue;
        const float weight = expf(warp_max[w] - total_max);
        total += warp_sum_exp[w] * weight;
#pragma unroll
        for (int e = 0; e < MAX_PER_LANE; e++) merged[e] += warp_acc[w][lane + 32 * e] * weight;
    }
    if (splits > 1) { /* the range's partial softmax: its largest score m, the sum l of exp(score - m), acc[hd] */
        float *partial = partials + (row * splits + split) * (2 + hd);
        if (lane == 0) {
            partial[0] = total_max;
            partial[1] = total;
        }
#pragma unroll
        for (int e = 0; e < MAX_PER_LANE; e++) {
            const int d = lane + 32 * e;
            if (d < hd) partial[2 + d] = merged[e];
        }
        return;
    }
    tt_bf16 *o = out + (i * Hq + h) * hd;
    const float inv = 1.0f / total;
#pragma unroll
    for (int e = 0; e < MAX_PER_LANE; e++) {
        const int d = lane + 32 * e;
        if (d < hd) o[d] = float_to_bf16(merged[e] * inv);
    }
}

/* A warp per (query, head): its ranges' partial softmaxes merged in range order. */
static __global__ void attention_cached_merge_kernel(tt_bf16 *out, const float *partials, int splits, int hd) {
    const int64_t row = blockIdx.x;
    const int lane = threadIdx.x;
    const float *first = partials + row * splits * (2 + hd);
    float total_max = -INFINITY;
    for (int r = 0; r < splits; r++) total_max = fmaxf(total_max, first[r * (2 + hd)]);
    float total = 0.0f, merged[MAX_PER_LANE];
#pragma unroll
    for (int e = 0; e < MAX_PER_LANE; e++) merged[e] = 0.0f;
    for (int r = 0; r < splits; r++) {
        const float *partial = first + r * (2 + hd);
        if (partial[0] == -INFINITY) continue; /* a range past the visible keys */
        const float weight = expf(partial[0] - total_max);
        total += partial[1] * weight;
#pragma unroll
        for (int e = 0; e < MAX_PER_LANE; e++) {
            const int d = lane + 32 * e;
            if (d < hd) merged[e] += partial[2 + d] * weight;
        }
    }
    tt_bf16 *o = out + row * hd;
    const float inv = 1.0f / total;
#pragma unroll
    for (int e = 0; e < MAX_PER_LANE; e++) {
        const int d = lane + 32 * e;
        if (d < hd) o[d] = float_to_bf16(merged[e] * inv);
    }
}

extern "C" size_t tt_cuda_attention_cached_scratch_bytes(int64_t num_heads, int64_t head_dim) {
    return sizeof(float) * (size_t)(num_heads * MAX_SPLITS * (2 + head_dim));
}

extern "C" void tt_cuda_attention_cached(tt_bf16 *out, const tt_bf16 *q, const tt_bf16 *k_cache, const tt_bf16 *v_cache,
                                         int64_t start, int64_t n, const tt_attention_shape *shape, float *scratch,
                                         size_t scratch_bytes, cudaStream_t stream) {
    TT_CHECK(shape->head_dim > 0 && shape->head_dim <= 32 * MAX_PER_LANE && shape->num_kv_heads > 0 &&
                 shape->num_heads % shape->num_kv_heads == 0 && start >= 0 && n >= 0,
             "cached attention: head_dim %lld (at most %d), %lld heads, %lld kv heads, start %lld, %lld queries",
             (long long)shape->head_dim, 32 * MAX_PER_LANE, (long long)shape->num_heads, (long long)shape->num_kv_heads,
             (long long)start, (long long)n);
    const int64_t rows = n * shape->num_heads;
    if (rows == 0) return;
    TT_CHECK(rows <= 0x7fffffff, "cached attention: %lld queries of %lld heads in one call", (long long)n,
             (long long)shape->num_heads);
    /* split the keys where the rows alone leave the GPU idle, in ranges of KEYS_PER_SPLIT keys at least, as far as
     * the scratch holds the partials (the last query sees the most keys: its count bounds every row's) */
    const int64_t keys = start + n, row_bytes = (int64_t)sizeof(float) * (2 + shape->head_dim);
    int64_t splits = (TARGET_BLOCKS + rows - 1) / rows;
    if (splits > keys / KEYS_PER_SPLIT) splits = keys / KEYS_PER_SPLIT;
    if (splits > MAX_SPLITS) splits = MAX_SPLITS;
    if (scratch && splits > (int64_t)scratch_bytes / (rows * row_bytes))
        splits = (int64_t)scratch_bytes / (rows * row_bytes);
    if (!scratch || splits < 1) splits = 1;
    attention_cached_kernel<<<dim3((unsigned)rows, (unsigned)splits), 32 * KEY_WARPS, 0, stream>>>(
        out, scratch, q, k_cache, v_cache, start, (int)splits, *shape, (float)shape->scale);
    TT_CUDA_CHECK(cudaGetLastError());
    if (splits == 1) return;
    attention_cached_merge_kernel<<<(unsigned)rows, 32, 0, stream>>>(out, scratch, (int)splits, (int)shape->head_dim);
    TT_CUDA_CHECK(cudaGetLastError());
}
