/* tiertrain's Hopper attention forward (sm_90a): warpgroup MMA (wgmma) from shared memory, FlashAttention-3's
 * shape without its producer warp and TMA yet. A block takes 128 queries of one (sequence, query head): two
 * warpgroups of 64 query rows each; all 256 threads load the block's Q once and each 128-key tile of K and V,
 * double-buffered through cp.async; each warpgroup computes S = Q K^T (m64n128k16, both operands in shared memory),
 * the online softmax in registers (base 2), and O += P V with P from registers (the accumulator layout of S, packed
 * to bf16, is the register A operand layout) and V from shared memory as a transposed B.
 *
 * Shared memory tiles of 128 rows x 128 bf16 are stored as two 64-column halves, each [128 rows x 128 bytes] with
 * the 16-byte chunk c of row r at chunk c ^ (r & 7): the canonical 128-byte-swizzle layout of wgmma. In a
 * descriptor (PTX ISA, "Matrix Descriptor"): the start address and offsets in 16-byte units, 128-byte swizzle
 * (mode 1), and for
 *   K-major operands (Q as A, K as B: rows of the 16-wide k slice contiguous): 8-row core groups 1024 bytes apart
 *     (stride byte offset), the leading byte offset unused; the k slice ks starts 32 * (ks % 4) bytes into its row
 *     in half ks / 4;
 *   V as the transposed B (N = head_dim contiguous): 8-key groups 1024 bytes apart (stride byte offset), the two
 *     64-column halves 128 x 128 bytes apart (leading byte offset).
 * Tiles start 1024-byte aligned (the swizzle repeats every 8 rows of 128 bytes).
 *
 * Semantics are tt_cuda_flash_attention_forward's (attention_hopper.h): causal, grouped-query heads, lse the
 * natural-log log-sum-exp of the scaled scores. Each output is one thread's fixed-order sum: the same bits run to
 * run. */
#include <math.h>
#include <stdint.h>

#include <cuda_bf16.h>

#include "ops/cuda/attention_hopper.h"
#include "ops/cuda/cuda_check.h"

#define LOG2E 1.4426950408889634f
#define LN2 0.6931471805599453f

#define HEAD_DIM 128
#define BLOCK_M 128 /* queries a block: two warpgroups of 64 */
#define BLOCK_N 128 /* keys a tile */
#define THREADS 256
#define TILE_BYTES (128 * HEAD_DIM * 2) /* a 128-row tile: Q, K or V */
/* Q, then two stages of K and V; 1024 bytes more to align the base */
#define SHARED_BYTES (5 * TILE_BYTES + 1024)

static __device__ __forceinline__ uint32_t shared_address(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}

static __device__ __forceinline__ void cp_async_16(uint32_t dst, const void *src, bool valid) {
    const int src_bytes = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}

static __device__ __forceinline__ void cp_async_commit(void) { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

static __device__ __forceinline__ void cp_async_wait_all(void) {
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}

/* What cp.async wrote (the generic proxy) becomes visible to wgmma's reads (the async proxy). */
static __device__ __forceinline__ void fence_proxy_async(void) {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

static __device__ __forceinline__ void wgmma_fence(void) { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }

static __device__ __forceinline__ void wgmma_commit(void) {
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

static __device__ __forceinline__ void wgmma_wait_all(void) {
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
}

/* Keeps the compiler from moving reads or writes of an accumulator across the asynchronous MMA. */
static __device__ __forceinline__ void fence_accumulators(float *d) {
#pragma unroll
    for (int i = 0; i < 64; i++) asm volatile("" : "+f"(d[i])::"memory");
}

/* d[64x128 fp32, this thread's 64] (+)= A[64x16] B[16x128], both from shared memory through descriptors (B's
 * rows of K contiguous); scale_d 0 overwrites d. */
static __device__ __forceinline__ void wgmma_ss(float *d, uint64_t a_desc, uint64_t b_desc, int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
          "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),
          "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
          "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]),
          "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]),
          "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
          "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),
          "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(a_desc), "l"(b_desc), "r"(scale_d));
}

/* d[64x128 fp32] += A[64x16] B[16x128]: A from registers (per warp, the mma.sync m16n8k16 A layout), B from shared
 * memory with its rows of N contiguous (imm-trans-b 1). */
static __device__ __forceinline__ void wgmma_rs(float *d, const uint32_t *a, uint64_t b_desc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
          "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),
          "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
          "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]),
          "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]),
          "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
          "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),
          "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc));
}

/* A shared memory matrix descriptor with 128-byte swizzle. */
static __device__ __forceinline__ uint64_t descriptor(uint32_t address, uint32_t leading_bytes, uint32_t stride_bytes) {
    return (uint64_t)((address & 0x3FFFF) >> 4) | (uint64_t)((leading_bytes >> 4) & 0x3FFF) << 16 |
           (uint64_t)((stride_bytes >> 4) & 0x3FFF) << 32 | (uint64_t)1 << 62;
}

/* Byte offset of 16-byte chunk `chunk` (0..15) of row `row` in a 128-row tile. */
static __device__ __forceinline__ uint32_t tile_offset(int row, int chunk) {
    return (uint32_t)((chunk >> 3) * (128 * 128) + row * 128 + (((chunk & 7) ^ (row & 7)) << 4));
}

/* cp.async 128 rows of HEAD_DIM bf16 from src (row stride `stride` elements) into the tile at dst; rows >= valid_rows
 * are zero-filled. */
static __device__ __forceinline__ void load_tile(uint32_t dst, const tt_bf16 *src, int64_t stride, int valid_rows) {
#pragma unroll
    for (int it = 0; it < 128 * 16 / THREADS; it++) {
        const int index = it * THREADS + (int)threadIdx.x;
        const int row = index >> 4, chunk = index & 15;
        const bool valid = row < valid_rows;
        cp_async_16(dst + tile_offset(row, chunk), valid ? src + (int64_t)row * stride + chunk * 8 : src, valid);
    }
}

static __device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *(uint32_t *)&v;
}

static __device__ __forceinline__ float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

static __device__ __forceinline__ float quad_max(float v) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

static __device__ __forceinline__ float quad_sum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

/* Accumulator layout of a warpgroup's m64n128 (PTX ISA, wgmma .f32 D fragments): warp w of the group holds rows
 * 16w + g and 16w + g + 8 (g = lane / 4, t = lane % 4); d[4j + 0..1] are row 16w + g, columns 8j + 2t and +1,
 * d[4j + 2..3] the same columns of row 16w + g + 8. */
static __global__ void __launch_bounds__(THREADS, 1)
    hopper_forward_kernel(tt_bf16 *out, float *lse, const tt_bf16 *q, const tt_bf16 *k, const tt_bf16 *v, int T, int Hq,
                          int Hkv, float scale_log2) {
    extern __shared__ unsigned char shared_raw[];
    const uint32_t raw = shared_address(shared_raw);
    const uint32_t base = (raw + 1023) & ~1023u;
    const uint32_t q_tile = base, stages = base + TILE_BYTES; /* stage s: K at stages + 2s tiles, V after it */

    const int tid = threadIdx.x, group = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int b = blockIdx.x / Hq, h = blockIdx.x % Hq, kv_head = h / (Hq / Hkv);
    const int m0 = (gridDim.y - 1 - blockIdx.y) * BLOCK_M; /* the longest blocks start first */
    const int64_t q_stride = (int64_t)Hq * HEAD_DIM, kv_stride = (int64_t)Hkv * HEAD_DIM;
    const tt_bf16 *k_head = k + (int64_t)b * T * kv_stride + (int64_t)kv_head * HEAD_DIM;
    const tt_bf16 *v_head = v + (int64_t)b * T * kv_stride + (int64_t)kv_head * HEAD_DIM;
    const int key_end = min(m0 + BLOCK_M, T);
    const int key_tiles = (key_end + BLOCK_N - 1) / BLOCK_N;

    load_tile(q_tile, q + ((int64_t)b * T + m0) * q_stride + (int64_t)h * HEAD_DIM, q_stride, T - m0);
    load_tile(stages, k_head, kv_stride, T);
    load_tile(stages + TILE_BYTES, v_head, kv_stride, T);
    cp_async_commit();

    float o[64], s[64];
#pragma unroll
    for (int i = 0; i < 64; i++) o[i] = 0.0f;
    const int row_g = m0 + group * 64 + warp * 16 + g, row_g8 = row_g + 8;
    float max_g = -INFINITY, max_g8 = -INFINITY, sum_g = 0.0f, sum_g8 = 0.0f;

    for (int tile = 0; tile < key_tiles; tile++) {
        cp_async_wait_all();
        fence_proxy_async();
        __syncthreads(); /* the tile is visible to every warpgroup, which are all done with the other stage */
        if (tile + 1 < key_tiles) {
            const uint32_t next = stages + ((tile + 1) & 1) * 2 * TILE_BYTES;
            const int n_next = (tile + 1) * BLOCK_N;
            load_tile(next, k_head + (int64_t)n_next * kv_stride, kv_stride, T - n_next);
            load_tile(next + TILE_BYTES, v_head + (int64_t)n_next * kv_stride, kv_stride, T - n_next);
        }
        cp_async_commit();
        const uint32_t k_tile = stages + (tile & 1) * 2 * TILE_BYTES, v_tile = k_tile + TILE_BYTES;
        const int n0 = tile * BLOCK_N;

        /* S = Q K^T over head_dim in 8 slices of 16 */
        wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < HEAD_DIM / 16; ks++) {
            const uint32_t within = (uint32_t)((ks >> 2) * (128 * 128) + (ks & 3) * 32);
            wgmma_ss(s, descriptor(q_tile + group * 64 * 128 + within, 16, 1024), descriptor(k_tile + within, 16, 1024),
                     ks > 0);
        }
        wgmma_commit();
        wgmma_wait_all();
        fence_accumulators(s);

        if (n0 + BLOCK_N - 1 > m0 + group * 64 + warp * 16 || n0 + BLOCK_N > T) {
#pragma unroll
            for (int j = 0; j < 16; j++) {
                const int key = n0 + 8 * j + 2 * t;
                if (key > row_g || key >= T) s[4 * j] = -INFINITY;
                if (key + 1 > row_g || key + 1 >= T) s[4 * j + 1] = -INFINITY;
                if (key > row_g8 || key >= T) s[4 * j + 2] = -INFINITY;
                if (key + 1 > row_g8 || key + 1 >= T) s[4 * j + 3] = -INFINITY;
            }
        }
        float tile_max_g = -INFINITY, tile_max_g8 = -INFINITY;
#pragma unroll
        for (int j = 0; j < 16; j++) {
            tile_max_g = fmaxf(tile_max_g, fmaxf(s[4 * j], s[4 * j + 1]));
            tile_max_g8 = fmaxf(tile_max_g8, fmaxf(s[4 * j + 2], s[4 * j + 3]));
        }
        const float new_max_g = fmaxf(max_g, quad_max(tile_max_g) * scale_log2);
        const float new_max_g8 = fmaxf(max_g8, quad_max(tile_max_g8) * scale_log2);
        const float shift_g = new_max_g == -INFINITY ? 0.0f : new_max_g;
        const float shift_g8 = new_max_g8 == -INFINITY ? 0.0f : new_max_g8;
        const float correction_g = fast_exp2(max_g - shift_g), correction_g8 = fast_exp2(max_g8 - shift_g8);
        max_g = new_max_g;
        max_g8 = new_max_g8;
        sum_g *= correction_g;
        sum_g8 *= correction_g8;
#pragma unroll
        for (int j = 0; j < 16; j++) {
            o[4 * j] *= correction_g;
            o[4 * j + 1] *= correction_g;
            o[4 * j + 2] *= correction_g8;
            o[4 * j + 3] *= correction_g8;
        }
        uint32_t p[32];
#pragma unroll
        for (int j = 0; j < 16; j++) {
            const float p0 = fast_exp2(s[4 * j] * scale_log2 - shift_g);
            const float p1 = fast_exp2(s[4 * j + 1] * scale_log2 - shift_g);
            const float p2 = fast_exp2(s[4 * j + 2] * scale_log2 - shift_g8);
            const float p3 = fast_exp2(s[4 * j + 3] * scale_log2 - shift_g8);
            sum_g += p0 + p1;
            sum_g8 += p2 + p3;
            p[2 * j] = pack_bf16(p0, p1);
            p[2 * j + 1] = pack_bf16(p2, p3);
        }
        /* O += P V over the tile's keys in 8 slices of 16: A fragment kb = p[4kb .. 4kb + 3] (columns 16kb.. of rows
         * g and g + 8, then columns 16kb + 8..) */
        wgmma_fence();
#pragma unroll
        for (int kb = 0; kb < BLOCK_N / 16; kb++)
            wgmma_rs(o, p + 4 * kb, descriptor(v_tile + kb * 16 * 128, 128 * 128, 1024));
        wgmma_commit();
        wgmma_wait_all();
        fence_accumulators(o);
    }

    sum_g = quad_sum(sum_g);
    sum_g8 = quad_sum(sum_g8);
    const float inv_g = sum_g > 0.0f ? 1.0f / sum_g : 0.0f, inv_g8 = sum_g8 > 0.0f ? 1.0f / sum_g8 : 0.0f;
    tt_bf16 *out_g = out + ((int64_t)b * T + row_g) * q_stride + (int64_t)h * HEAD_DIM;
    tt_bf16 *out_g8 = out_g + 8 * q_stride;
#pragma unroll
    for (int j = 0; j < 16; j++) {
        const int col = 8 * j + 2 * t;
        if (row_g < T) *(uint32_t *)(out_g + col) = pack_bf16(o[4 * j] * inv_g, o[4 * j + 1] * inv_g);
        if (row_g8 < T) *(uint32_t *)(out_g8 + col) = pack_bf16(o[4 * j + 2] * inv_g8, o[4 * j + 3] * inv_g8);
    }
    if (t == 0) {
        float *lse_head = lse + ((int64_t)b * Hq + h) * T;
        if (row_g < T) lse_head[row_g] = (max_g + log2f(sum_g)) * LN2;
        if (row_g8 < T) lse_head[row_g8] = (max_g8 + log2f(sum_g8)) * LN2;
    }
}

extern "C" int tt_cuda_hopper_attention_supported(const tt_attention_shape *s) {
    return s->head_dim == HEAD_DIM && s->sliding_window == 0 && !s->documents && !s->positions && s->num_kv_heads > 0 &&
           s->num_heads % s->num_kv_heads == 0 && s->seq_len > 0;
}

extern "C" void tt_cuda_hopper_attention_forward(tt_bf16 *out, float *lse, const tt_bf16 *q, const tt_bf16 *k,
                                                 const tt_bf16 *v, const tt_attention_shape *s, cudaStream_t stream) {
    TT_CHECK(tt_cuda_hopper_attention_supported(s), "the Hopper attention forward takes head_dim 128, no window, "
                                                    "no packed documents");
    static bool configured = false;
    if (!configured) {
        TT_CUDA_CHECK(
            cudaFuncSetAttribute(hopper_forward_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, SHARED_BYTES));
        configured = true;
    }
    const dim3 grid((unsigned)(s->batch * s->num_heads), (unsigned)((s->seq_len + BLOCK_M - 1) / BLOCK_M));
    hopper_forward_kernel<<<grid, THREADS, SHARED_BYTES, stream>>>(
        out, lse, q, k, v, (int)s->seq_len, (int)s->num_heads, (int)s->num_kv_heads, (float)(s->scale * LOG2E));
    TT_CUDA_CHECK(cudaGetLastError());
}
