/* Device helpers of tiertrain's Hopper attention kernels (sm_90a; included by the .cu files only): warpgroup MMA
 * (wgmma) wrappers with their fences, 128-byte-swizzle shared memory descriptors and tile offsets, the softmax's
 * arithmetic, and packed documents' first key. The tile layout and descriptor conventions are described in
 * kernels_attention_hopper.cu. */
#ifndef TT_OPS_CUDA_HOPPER_WGMMA_CUH
#define TT_OPS_CUDA_HOPPER_WGMMA_CUH

#include <math.h>
#include <stdint.h>

#include <cuda_bf16.h>

#include "ops/cuda/attention_device.cuh" /* shared_address, fast_exp2, pack_bf16, quad_max/sum, LOG2E */
#include "ops/cuda/ops_cuda.h"           /* tt_bf16 */

#define HEAD_DIM 128

/* What this thread wrote to shared memory through the generic proxy (stores, cp.async) becomes visible to wgmma's
 * reads (the async proxy). */
static __device__ __forceinline__ void fence_proxy_async(void) {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

static __device__ __forceinline__ void wgmma_fence(void) { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }

static __device__ __forceinline__ void wgmma_commit(void) {
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

/* Keeps the compiler from moving reads or writes of N accumulators across the asynchronous MMA. */
template <int N> static __device__ __forceinline__ void fence_accumulators_n(float *d) {
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+f"(d[i])::"memory");
}

/* ... the 64 of an m64n128 product. */
static __device__ __forceinline__ void fence_accumulators(float *d) { fence_accumulators_n<64>(d); }

/* Placed after the wait that ends an asynchronous MMA: its register A operand (COUNT registers) stays live, so
 * nothing else is allocated there while the product reads it. */
template <int COUNT> static __device__ __forceinline__ void fence_operands(uint32_t *a) {
#pragma unroll
    for (int i = 0; i < COUNT; i++) asm volatile("" : "+r"(a[i])::"memory");
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

/* d[64x64 fp32, this thread's 32] += A[64x16] B[16x64]: A from registers, B from shared memory with its rows of N
 * contiguous (imm-trans-b 1): the head_dim 64 products with a register operand. */
static __device__ __forceinline__ void wgmma_rs_n64(float *d, const uint32_t *a, uint64_t b_desc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
          "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),
          "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
          "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc));
}

/* d[64 x HD] += A[64x16] B[16 x HD] with A from registers and B's rows of N = HD contiguous: HD 128 or 64. */
template <int HD> static __device__ __forceinline__ void wgmma_rs_hd(float *d, const uint32_t *a, uint64_t b_desc) {
    if constexpr (HD == 128) wgmma_rs(d, a, b_desc);
    else wgmma_rs_n64(d, a, b_desc);
}

/* d[64x64 fp32, this thread's 32] (+)= A[64x16] B[16x64], both from shared memory (B's rows of K contiguous); scale_d
 * 0 overwrites d. */
static __device__ __forceinline__ void wgmma_ss_n64(float *d, uint64_t a_desc, uint64_t b_desc, int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
          "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),
          "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
          "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(a_desc), "l"(b_desc), "r"(scale_d));
}

/* d[64x64 fp32] (+)= A[64x16] B[16x64] with both operands from shared memory stored M- and N-major (A's rows of M
 * contiguous, B's rows of N contiguous: imm-trans-a and imm-trans-b 1); scale_d 0 overwrites d. */
static __device__ __forceinline__ void wgmma_ss_n64_transposed(float *d, uint64_t a_desc, uint64_t b_desc,
                                                               int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, %32, %33, p, 1, 1, 1, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
          "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),
          "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
          "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(a_desc), "l"(b_desc), "r"(scale_d));
}

/* A turn counter in global memory: read with acquire (what the releasing block wrote before it is visible), and
 * set with release. */
static __device__ __forceinline__ int load_acquire(const int *p) {
    int v;
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
    return v;
}

static __device__ __forceinline__ void store_release(int *p, int v) {
    asm volatile("st.release.gpu.global.b32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}

/* A shared memory matrix descriptor with 128-byte swizzle. */
static __device__ __forceinline__ uint64_t descriptor(uint32_t address, uint32_t leading_bytes, uint32_t stride_bytes) {
    return (uint64_t)((address & 0x3FFFF) >> 4) | (uint64_t)((leading_bytes >> 4) & 0x3FFF) << 16 |
           (uint64_t)((stride_bytes >> 4) & 0x3FFF) << 32 | (uint64_t)1 << 62;
}

/* The descriptor of the matrix `bytes` further on than the one `desc` describes: the address field is bits 0-13 in
 * 16-byte units and a block's shared memory ends below 256 KiB, so the sum never carries into the next field. With
 * compile-time offsets (unrolled k slices) this is one add a product instead of the masks and shifts of
 * descriptor(), which, issued between the wgmma instructions of a product, left the tensor pipe waiting. */
static __device__ __forceinline__ uint64_t descriptor_plus(uint64_t desc, uint32_t bytes) {
    return desc + (bytes >> 4);
}

/* A warp-uniform value derived from threadIdx, broadcast from lane 0 so that the compiler may treat it as uniform
 * (CUTLASS's idiom for the warpgroup index). For the consumer index it is a measured choice, not a proven one: the
 * dK/dV kernel's K and V descriptors still reach the uniform registers by a move a product (SASS), and the kernel
 * without it ran the same at 64k and slower at 16k in three of four rounds (docs/benchmarks.md, eighth session). */
static __device__ __forceinline__ int warp_uniform(int v) { return __shfl_sync(0xffffffffu, v, 0); }

/* Byte offset of 16-byte chunk `chunk` (0..15) of row `row` in a tile of ROWS rows (its two 64-column halves
 * ROWS x 128 bytes apart). */
template <int ROWS> static __device__ __forceinline__ uint32_t tile_offset(int row, int chunk) {
    return (uint32_t)((chunk >> 3) * (ROWS * 128) + row * 128 + (((chunk & 7) ^ (row & 7)) << 4));
}

/* The byte offset of k slice ks (16 columns) of a K-major operand in a tile of ROWS rows. */
template <int ROWS> static __device__ __forceinline__ uint32_t k_slice(int ks) {
    return (uint32_t)((ks >> 2) * (ROWS * 128) + (ks & 3) * 32);
}

/* The low and high bf16 of a pair, widened to fp32. */
static __device__ __forceinline__ float bf16_low(uint32_t pair) { return __uint_as_float(pair << 16); }
static __device__ __forceinline__ float bf16_high(uint32_t pair) { return __uint_as_float(pair & 0xFFFF0000u); }

/* Packed documents: the first key query `row` of sequence b may see (0 without positions; rows past T take 0, they
 * are never stored). */
static __device__ __forceinline__ int document_start(const int32_t *positions, int b, int T, int row) {
    return positions && row < T ? row - positions[(int64_t)b * T + row] : 0;
}

/* The forward's running softmax of one thread's two query rows (g and g + 8 of its warp's 16): the running maximum
 * (log2 units, scaled) and the running sum of exp2. */
typedef struct softmax_rows {
    float max_g, max_g8, sum_g, sum_g8;
} softmax_rows;

/* One 128-key tile of S (this thread's 64 accumulators in the m64n128 layout: s[4c + 0..1] row g, keys n0 + 8c + 2t
 * and + 1; s[4c + 2..3] the same keys of row g + 8) into P = exp2(S * scale_log2 - running max), in place, with the
 * running maximum and sum updated. Keys past T, after the row (causal) or before the row's document start are
 * masked when `masked` (the warp-uniform test that the tile reaches one of them). Returns the factors the rows' O
 * must be rescaled by. The pipelined and the cp.async forward both call it: the same arithmetic, the same bits. */
static __device__ __forceinline__ void softmax_tile(float *s, softmax_rows *r, float *correction_g,
                                                    float *correction_g8, bool masked, int n0, int t, int T, int row_g,
                                                    int row_g8, int start_g, int start_g8, float scale_log2) {
    if (masked) {
#pragma unroll
        for (int c = 0; c < 16; c++) {
            const int key = n0 + 8 * c + 2 * t;
            if (key > row_g || key >= T || key < start_g) s[4 * c] = -INFINITY;
            if (key + 1 > row_g || key + 1 >= T || key + 1 < start_g) s[4 * c + 1] = -INFINITY;
            if (key > row_g8 || key >= T || key < start_g8) s[4 * c + 2] = -INFINITY;
            if (key + 1 > row_g8 || key + 1 >= T || key + 1 < start_g8) s[4 * c + 3] = -INFINITY;
        }
    }
    float tile_max_g = -INFINITY, tile_max_g8 = -INFINITY;
#pragma unroll
    for (int c = 0; c < 16; c++) {
        tile_max_g = fmaxf(tile_max_g, fmaxf(s[4 * c], s[4 * c + 1]));
        tile_max_g8 = fmaxf(tile_max_g8, fmaxf(s[4 * c + 2], s[4 * c + 3]));
    }
    const float new_max_g = fmaxf(r->max_g, quad_max(tile_max_g) * scale_log2);
    const float new_max_g8 = fmaxf(r->max_g8, quad_max(tile_max_g8) * scale_log2);
    const float shift_g = new_max_g == -INFINITY ? 0.0f : new_max_g;
    const float shift_g8 = new_max_g8 == -INFINITY ? 0.0f : new_max_g8;
    *correction_g = fast_exp2(r->max_g - shift_g);
    *correction_g8 = fast_exp2(r->max_g8 - shift_g8);
    r->max_g = new_max_g;
    r->max_g8 = new_max_g8;
    float tile_sum_g = 0.0f, tile_sum_g8 = 0.0f;
#pragma unroll
    for (int c = 0; c < 16; c++) {
        s[4 * c] = fast_exp2(s[4 * c] * scale_log2 - shift_g);
        s[4 * c + 1] = fast_exp2(s[4 * c + 1] * scale_log2 - shift_g);
        s[4 * c + 2] = fast_exp2(s[4 * c + 2] * scale_log2 - shift_g8);
        s[4 * c + 3] = fast_exp2(s[4 * c + 3] * scale_log2 - shift_g8);
        tile_sum_g += s[4 * c] + s[4 * c + 1];
        tile_sum_g8 += s[4 * c + 2] + s[4 * c + 3];
    }
    r->sum_g = r->sum_g * *correction_g + tile_sum_g;
    r->sum_g8 = r->sum_g8 * *correction_g8 + tile_sum_g8;
}

/* The forward's end for one thread's two query rows: O (this thread's accumulators of the m64 x HD layout, o[4c + 0..1]
 * row g, columns 8c + 2t and + 1; o[4c + 2..3] row g + 8) divided by the rows' sums, rounded to bf16 into out (rows of
 * q_stride elements, head h's HD columns), and each row's log-sum-exp (natural log) into lse [B, Hq, T]; rows past T
 * are not stored. The pipelined and the cp.async forward both end here. */
template <int HD>
static __device__ __forceinline__ void store_forward_rows(tt_bf16 *out, float *lse, const float *o,
                                                          const softmax_rows *rows, int b, int h, int Hq, int T,
                                                          int row_g, int t, int64_t q_stride) {
    const float sum_g = quad_sum(rows->sum_g), sum_g8 = quad_sum(rows->sum_g8);
    const float inv_g = sum_g > 0.0f ? 1.0f / sum_g : 0.0f, inv_g8 = sum_g8 > 0.0f ? 1.0f / sum_g8 : 0.0f;
    const int row_g8 = row_g + 8;
    tt_bf16 *out_g = out + ((int64_t)b * T + row_g) * q_stride + (int64_t)h * HD;
    tt_bf16 *out_g8 = out_g + 8 * q_stride;
#pragma unroll
    for (int c = 0; c < HD / 8; c++) {
        const int col = 8 * c + 2 * t;
        if (row_g < T) *(uint32_t *)(out_g + col) = pack_bf16(o[4 * c] * inv_g, o[4 * c + 1] * inv_g);
        if (row_g8 < T) *(uint32_t *)(out_g8 + col) = pack_bf16(o[4 * c + 2] * inv_g8, o[4 * c + 3] * inv_g8);
    }
    if (t == 0) {
        float *lse_head = lse + ((int64_t)b * Hq + h) * T;
        if (row_g < T) lse_head[row_g] = (rows->max_g + log2f(sum_g)) * LN2;
        if (row_g8 < T) lse_head[row_g8] = (rows->max_g8 + log2f(sum_g8)) * LN2;
    }
}

/* wgmma_wait<N>: at most N committed groups of this warpgroup still in flight. */
template <int N> static __device__ __forceinline__ void wgmma_wait(void) {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

/* Packs the accumulators of an m64n64 product (this thread's 32) into the register A operand of the next product's 4
 * k slices of 16 (columns 16kb.. of rows g and g + 8, then columns 16kb + 8..). */
static __device__ __forceinline__ void pack_a64(uint32_t *a, const float *x) {
#pragma unroll
    for (int j = 0; j < 8; j++) {
        a[2 * j] = pack_bf16(x[4 * j], x[4 * j + 1]);
        a[2 * j + 1] = pack_bf16(x[4 * j + 2], x[4 * j + 3]);
    }
}

/* ... the 32 of an m64n64 product. */
static __device__ __forceinline__ void fence_accumulators_32(float *d) { fence_accumulators_n<32>(d); }

/* acc[64 x 64 fp32] = A B^T over head_dim: A 64 rows of an A_ROWS-row tile at a_rows, B a 64-row tile, both K-major
 * in shared memory (the backward's S^T, dP^T, S and dP); committed as one group. */
template <int HD, int A_ROWS = 128>
static __device__ __forceinline__ void product_over_head_dim(float *acc, uint32_t a_rows, uint32_t b_tile) {
    const uint64_t a_desc = descriptor(a_rows, 16, 1024), b_desc = descriptor(b_tile, 16, 1024);
#pragma unroll
    for (int ks = 0; ks < HD / 16; ks++)
        wgmma_ss_n64(acc, descriptor_plus(a_desc, k_slice<A_ROWS>(ks)), descriptor_plus(b_desc, k_slice<64>(ks)),
                     ks > 0);
    wgmma_commit();
}

/* The backward's P in place over one step's 64 x 64 tile of S (this thread's 32 accumulators in the m64n64 layout),
 * as the dQ kernels hold it: rows are queries (row_g and row_g8, their document starts and lse_g, lse_g8 in log2
 * units), columns keys n0 + 8c + 2t (+1). P = exp2(S * scale_log2 - lse) where the key is visible, else 0; `whole`
 * (warp-uniform) says every key is visible to every row, which skips the mask arithmetic. */
static __device__ __forceinline__ void probabilities(float *s, bool whole, int n0, int t, int T, int row_g, int row_g8,
                                                     int start_g, int start_g8, float lse_g, float lse_g8,
                                                     float scale_log2) {
    if (whole) {
#pragma unroll
        for (int c = 0; c < 8; c++)
#pragma unroll
            for (int e = 0; e < 4; e++) s[4 * c + e] = fast_exp2(s[4 * c + e] * scale_log2 - (e < 2 ? lse_g : lse_g8));
    } else {
#pragma unroll
        for (int c = 0; c < 8; c++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int key = n0 + 8 * c + 2 * t + (e & 1), row = e < 2 ? row_g : row_g8;
                const bool visible = key <= row && key < T && row < T && key >= (e < 2 ? start_g : start_g8);
                s[4 * c + e] = visible ? fast_exp2(s[4 * c + e] * scale_log2 - (e < 2 ? lse_g : lse_g8)) : 0.0f;
            }
    }
}

/* The dK/dV kernels keep a step's 64 query values of each kind (lse, D) in shared memory in the order their readers
 * take them. Thread t of a quad needs columns 8j + 2t and + 1 (j = 0..7): its 16 values are floats 16t..16t + 15, read
 * as four 16-byte loads, and the 16-byte chunks of t = 2 and 3 are swapped in pairs so that the four addresses of a
 * warp's load fall in distinct banks. column_slot is where column `col` (0..63) is stored. */
static __device__ __forceinline__ int column_slot(int col) {
    const int t = (col >> 1) & 3, k = ((col >> 3) << 1) | (col & 1); /* k = 2j + e: the value's index in the thread */
    return 16 * t + ((((k >> 2) ^ (t >> 1)) << 2) | (k & 3));
}

/* This thread's 16 values of one kind into registers: v[2j + e] is column 8j + 2t + e. The dK/dV kernels load them
 * before they wait for the product that needs them, so the loads' latency is not on the step's path. */
static __device__ __forceinline__ void load_columns(float *v, const float *values, int t) {
#pragma unroll
    for (int c = 0; c < 4; c++) {
        const float4 x = ((const float4 *)(values + 16 * t))[c ^ (t >> 1)];
        v[4 * c] = x.x;
        v[4 * c + 1] = x.y;
        v[4 * c + 2] = x.z;
        v[4 * c + 3] = x.w;
    }
}

/* The same P transposed, as the dK/dV kernels hold it: rows are keys (key_g and key_g8), columns the step's queries
 * m0 + 8j + 2t (+1), whose lse in log2 units (lse_log2[2j + e]: the natural-log lse times LOG2E) are in registers and
 * whose positions (packed documents: `positions` is the sequence's, not NULL) come from shared memory a column each. */
static __device__ __forceinline__ void probabilities_transposed(float *st, bool whole, int m0, int t, int T, int key_g,
                                                                int key_g8, const float *lse_log2,
                                                                const int32_t *position_rows, const int32_t *positions,
                                                                float scale_log2) {
    if (whole) {
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                st[4 * j + e] = fast_exp2(st[4 * j + e] * scale_log2 - lse_log2[2 * j + (e & 1)]);
    } else {
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int col = 8 * j + 2 * t + (e & 1), query = m0 + col, key = e < 2 ? key_g : key_g8;
                const bool visible =
                    key <= query && query < T && key < T && (!positions || key >= query - position_rows[col]);
                /* hidden scores to -inf before the exponential (exp2(-inf) = +0): a branch on each result made the
                 * compiler copy all 32 scores first */
                const float x = st[4 * j + e] * scale_log2 - lse_log2[2 * j + (e & 1)];
                st[4 * j + e] = fast_exp2(visible ? x : -INFINITY);
            }
    }
}

/* dS = P (dP - D) in place over dP, rows' D in registers (the dQ kernels). */
static __device__ __forceinline__ void score_gradient(float *dp, const float *s, float d_g, float d_g8) {
#pragma unroll
    for (int c = 0; c < 8; c++)
#pragma unroll
        for (int e = 0; e < 4; e++) dp[4 * c + e] = s[4 * c + e] * (dp[4 * c + e] - (e < 2 ? d_g : d_g8));
}

/* dS^T = P^T (dP^T - D) in place over dP^T, the columns' D in registers (d[2j + e], load_columns') (the dK/dV
 * kernels). */
static __device__ __forceinline__ void score_gradient_transposed(float *dpt, const float *st, const float *d) {
#pragma unroll
    for (int j = 0; j < 8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) dpt[4 * j + e] = st[4 * j + e] * (dpt[4 * j + e] - d[2 * j + (e & 1)]);
}

#endif
