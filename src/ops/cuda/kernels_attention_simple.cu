/* The simple attention kernels: one warp per row, online softmax, fp32 arithmetic. They are
 * the correctness fallback for the fused (tensor-core) attention, and follow the CPU
 * reference's definition: key j is visible to query i iff j <= i and (window == 0 or
 * i - j < window) and, with packed documents, j is in i's document (j >= i - positions[i]); query head h reads
 * kv head h / (Hq / Hkv); scores soft-capped where the shape says (Gemma 2). Each lane holds head-dimension
 * elements d = lane, lane + 32, ...; dot products are reduced with a fixed shuffle pattern, so
 * results are deterministic. */
#include <math.h>

#include "ops/cuda/cuda_check.h"
#include "ops/cuda/device_math.cuh"
#include "ops/cuda/ops_cuda.h"

#define WARPS_PER_BLOCK 4
#define MAX_PER_LANE 8 /* head_dim <= 256 */

static __device__ __forceinline__ float warp_sum(float v) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    return v;
}

static __device__ __forceinline__ void load_row(float *dst, const tt_bf16 *row, int hd, int lane) {
#pragma unroll
    for (int e = 0; e < MAX_PER_LANE; e++) {
        const int d = lane + 32 * e;
        dst[e] = d < hd ? bf16_to_float(row[d]) : 0.0f;
    }
}

static __device__ __forceinline__ float row_dot(const float *a, const tt_bf16 *row, int hd, int lane) {
    float s = 0.0f;
#pragma unroll
    for (int e = 0; e < MAX_PER_LANE; e++) {
        const int d = lane + 32 * e;
        if (d < hd) s += a[e] * bf16_to_float(row[d]);
    }
    return warp_sum(s);
}

static __device__ __forceinline__ int64_t first_key(int64_t i, int64_t window) {
    return window > 0 && i - window + 1 > 0 ? i - window + 1 : 0;
}

/* The first key query i of sequence b sees: the window's, or with packed documents (positions != NULL) its
 * document's first token, i - positions[i], when that is later. */
static __device__ __forceinline__ int64_t first_visible_key(int64_t i, int64_t b, int64_t T, int64_t window,
                                                            const int32_t *positions) {
    const int64_t j0 = first_key(i, window);
    if (!positions) return j0;
    const int64_t document_start = i - positions[b * T + i];
    return document_start > j0 ? document_start : j0;
}

/* Whether query i >= j of sequence b is in key j's document (queries leave it for good where a later one starts). */
static __device__ __forceinline__ bool query_sees_document_of(int64_t i, int64_t j, int64_t b, int64_t T,
                                                              const int32_t *positions) {
    return !positions || i - positions[b * T + i] <= j;
}

/* The scaled score u soft-capped where cap > 0 (Gemma 2: cap tanh(u / cap)); slope: its derivative, 1 - tanh^2. */
static __device__ __forceinline__ float capped_score(float u, float cap, float *slope) {
    if (!(cap > 0.0f)) {
        *slope = 1.0f;
        return u;
    }
    const float t = tanhf(u / cap);
    *slope = 1.0f - t * t;
    return cap * t;
}

static __global__ void attention_forward_kernel(tt_bf16 *out, float *lse, const tt_bf16 *q, const tt_bf16 *k,
                                                const tt_bf16 *v, tt_attention_shape s, float scale) {
    const int64_t row = (int64_t)blockIdx.x * WARPS_PER_BLOCK + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    const int64_t T = s.seq_len, Hq = s.num_heads, Hkv = s.num_kv_heads;
    const int hd = (int)s.head_dim;
    if (row >= s.batch * Hq * T) return;
    const int64_t i = row % T, h = (row / T) % Hq, b = row / (T * Hq), kvh = h / (Hq / Hkv);
    float qi[MAX_PER_LANE], acc[MAX_PER_LANE];
    load_row(qi, q + ((b * T + i) * Hq + h) * hd, hd, lane);
#pragma unroll
    for (int e = 0; e < MAX_PER_LANE; e++) acc[e] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    for (int64_t j = first_visible_key(i, b, T, s.sliding_window, s.positions); j <= i; j++) {
        float slope;
        const float score =
            capped_score(row_dot(qi, k + ((b * T + j) * Hkv + kvh) * hd, hd, lane) * scale, (float)s.softcap, &slope);
        const float m_new = fmaxf(m, score);
        const float correction = expf(m - m_new), p = expf(score - m_new);
        l = l * correction + p;
        const tt_bf16 *vj = v + ((b * T + j) * Hkv + kvh) * hd;
#pragma unroll
        for (int e = 0; e < MAX_PER_LANE; e++) {
            const int d = lane + 32 * e;
            if (d < hd) acc[e] = acc[e] * correction + p * bf16_to_float(vj[d]);
        }
        m = m_new;
    }
    tt_bf16 *o = out + ((b * T + i) * Hq + h) * hd;
    const float inv = 1.0f / l;
#pragma unroll
    for (int e = 0; e < MAX_PER_LANE; e++) {
        const int d = lane + 32 * e;
        if (d < hd) o[d] = float_to_bf16(acc[e] * inv);
    }
    if (lane == 0) lse[(b * Hq + h) * T + i] = m + logf(l);
}

/* Pass 1, a warp per query row: D_i = dout_i . out_i, dq_i = scale sum_j dS_ij k_j. */
static __global__ void attention_backward_queries_kernel(tt_bf16 *dq, float *D, const tt_bf16 *dout, const tt_bf16 *out,
                                                         const float *lse, const tt_bf16 *q, const tt_bf16 *k,
                                                         const tt_bf16 *v, tt_attention_shape s, float scale) {
    const int64_t row = (int64_t)blockIdx.x * WARPS_PER_BLOCK + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    const int64_t T = s.seq_len, Hq = s.num_heads, Hkv = s.num_kv_heads;
    const int hd = (int)s.head_dim;
    if (row >= s.batch * Hq * T) return;
    const int64_t i = row % T, h = (row / T) % Hq, b = row / (T * Hq), kvh = h / (Hq / Hkv);
    const int64_t offset = ((b * T + i) * Hq + h) * hd;
    float qi[MAX_PER_LANE], doi[MAX_PER_LANE], acc[MAX_PER_LANE];
    load_row(qi, q + offset, hd, lane);
    load_row(doi, dout + offset, hd, lane);
    const float Di = row_dot(doi, out + offset, hd, lane);
    const float lse_i = lse[(b * Hq + h) * T + i];
#pragma unroll
    for (int e = 0; e < MAX_PER_LANE; e++) acc[e] = 0.0f;
    for (int64_t j = first_visible_key(i, b, T, s.sliding_window, s.positions); j <= i; j++) {
        const tt_bf16 *kj = k + ((b * T + j) * Hkv + kvh) * hd, *vj = v + ((b * T + j) * Hkv + kvh) * hd;
        float slope;
        const float p = expf(capped_score(row_dot(qi, kj, hd, lane) * scale, (float)s.softcap, &slope) - lse_i);
        const float ds = p * (row_dot(doi, vj, hd, lane) - Di) * slope;
#pragma unroll
        for (int e = 0; e < MAX_PER_LANE; e++) {
            const int d = lane + 32 * e;
            if (d < hd) acc[e] += ds * bf16_to_float(kj[d]);
        }
    }
#pragma unroll
    for (int e = 0; e < MAX_PER_LANE; e++) {
        const int d = lane + 32 * e;
        if (d < hd) dq[offset + d] = float_to_bf16(scale * acc[e]);
    }
    if (lane == 0) D[(b * Hq + h) * T + i] = Di;
}

/* Pass 2, a warp per key row of a kv head: dk_j and dv_j summed over the group's query heads
 * (in head order) and the queries that see key j (in query order). */
static __global__ void attention_backward_keys_kernel(tt_bf16 *dk, tt_bf16 *dv, const float *D, const tt_bf16 *dout,
                                                      const float *lse, const tt_bf16 *q, const tt_bf16 *k,
                                                      const tt_bf16 *v, tt_attention_shape s, float scale) {
    const int64_t row = (int64_t)blockIdx.x * WARPS_PER_BLOCK + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    const int64_t T = s.seq_len, Hq = s.num_heads, Hkv = s.num_kv_heads, group = Hq / Hkv;
    const int hd = (int)s.head_dim;
    if (row >= s.batch * Hkv * T) return;
    const int64_t j = row % T, kvh = (row / T) % Hkv, b = row / (T * Hkv);
    const int64_t key_offset = ((b * T + j) * Hkv + kvh) * hd;
    float kj[MAX_PER_LANE], vj[MAX_PER_LANE], dk_acc[MAX_PER_LANE], dv_acc[MAX_PER_LANE];
    load_row(kj, k + key_offset, hd, lane);
    load_row(vj, v + key_offset, hd, lane);
#pragma unroll
    for (int e = 0; e < MAX_PER_LANE; e++) dk_acc[e] = dv_acc[e] = 0.0f;
    const int64_t last = s.sliding_window > 0 && j + s.sliding_window - 1 < T - 1 ? j + s.sliding_window - 1 : T - 1;
    for (int64_t h = kvh * group; h < (kvh + 1) * group; h++) {
        for (int64_t i = j; i <= last && query_sees_document_of(i, j, b, T, s.positions); i++) {
            const int64_t offset = ((b * T + i) * Hq + h) * hd;
            float slope;
            const float p = expf(capped_score(row_dot(kj, q + offset, hd, lane) * scale, (float)s.softcap, &slope) -
                                 lse[(b * Hq + h) * T + i]);
            const float ds = p * (row_dot(vj, dout + offset, hd, lane) - D[(b * Hq + h) * T + i]) * slope;
#pragma unroll
            for (int e = 0; e < MAX_PER_LANE; e++) {
                const int d = lane + 32 * e;
                if (d < hd) {
                    dk_acc[e] += ds * bf16_to_float(q[offset + d]);
                    dv_acc[e] += p * bf16_to_float(dout[offset + d]);
                }
            }
        }
    }
#pragma unroll
    for (int e = 0; e < MAX_PER_LANE; e++) {
        const int d = lane + 32 * e;
        if (d < hd) {
            dk[key_offset + d] = float_to_bf16(scale * dk_acc[e]);
            dv[key_offset + d] = float_to_bf16(dv_acc[e]);
        }
    }
}

static void check_shape(const tt_attention_shape *s) {
    TT_CHECK(s->head_dim > 0 && s->head_dim <= 32 * MAX_PER_LANE && s->num_kv_heads > 0 &&
                 s->num_heads % s->num_kv_heads == 0,
             "attention shape: head_dim %lld (at most %d), %lld heads, %lld kv heads", (long long)s->head_dim,
             32 * MAX_PER_LANE, (long long)s->num_heads, (long long)s->num_kv_heads);
}

static unsigned blocks_for(int64_t rows) { return (unsigned)((rows + WARPS_PER_BLOCK - 1) / WARPS_PER_BLOCK); }

extern "C" void tt_cuda_attention_forward(tt_bf16 *out, float *lse, const tt_bf16 *q, const tt_bf16 *k,
                                          const tt_bf16 *v, const tt_attention_shape *shape, cudaStream_t stream) {
    check_shape(shape);
    const int64_t rows = shape->batch * shape->num_heads * shape->seq_len;
    if (rows == 0) return;
    attention_forward_kernel<<<blocks_for(rows), 32 * WARPS_PER_BLOCK, 0, stream>>>(out, lse, q, k, v, *shape,
                                                                                    (float)shape->scale);
    TT_CUDA_CHECK(cudaGetLastError());
}

extern "C" void tt_cuda_attention_backward(tt_bf16 *dq, tt_bf16 *dk, tt_bf16 *dv, const tt_bf16 *dout,
                                           const tt_bf16 *out, const float *lse, const tt_bf16 *q, const tt_bf16 *k,
                                           const tt_bf16 *v, const tt_attention_shape *shape, float *scratch,
                                           cudaStream_t stream) {
    check_shape(shape);
    const int64_t query_rows = shape->batch * shape->num_heads * shape->seq_len;
    const int64_t key_rows = shape->batch * shape->num_kv_heads * shape->seq_len;
    if (query_rows == 0) return;
    attention_backward_queries_kernel<<<blocks_for(query_rows), 32 * WARPS_PER_BLOCK, 0, stream>>>(
        dq, scratch, dout, out, lse, q, k, v, *shape, (float)shape->scale);
    TT_CUDA_CHECK(cudaGetLastError());
    attention_backward_keys_kernel<<<blocks_for(key_rows), 32 * WARPS_PER_BLOCK, 0, stream>>>(
        dk, dv, scratch, dout, lse, q, k, v, *shape, (float)shape->scale);
    TT_CUDA_CHECK(cudaGetLastError());
}
