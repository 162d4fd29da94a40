/* Tensor-core flash attention (FlashAttention-2 style), forward and deterministic backward, for
 * sm_90a with mma.sync m16n8k16 (bf16 in, fp32 accumulate), ldmatrix and cp.async.
 *
 * Every tile of rows x head_dim bf16 lives in shared memory with its rows of head_dim * 2 bytes
 * (128 or 256, a multiple of the 128-byte bank period) cut into 16-byte chunks, and chunk c of
 * row r stored at chunk c ^ (r & 7). An ldmatrix reads one logical chunk of 8 consecutive rows:
 * the XOR puts those 8 reads in 8 different 16-byte bank groups, so neither ldmatrix nor the
 * cp.async writes (whole rows, chunks permuted within the row) conflict.
 *
 * Each warp owns 16 rows of the "M" side of every product (query rows in the forward and dQ
 * kernels, key rows in the dK/dV kernel), so softmax statistics, P and dS never leave registers:
 * the fp32 accumulator layout of one m16n8 product is, packed to bf16 pairs, exactly the A
 * operand layout of the next one.
 *
 * Fragment layouts (PTX ISA, mma.m16n8k16 with .bf16; g = lane / 4, t = lane % 4):
 *   A 16x16 (4 regs): a0 = (g, 2t..2t+1), a1 = (g+8, 2t..), a2 = (g, 2t+8..), a3 = (g+8, 2t+8..)
 *   B 16x8  (2 regs): b0 = (k 2t..2t+1, n g), b1 = (k 2t+8..2t+9, n g)
 *   C 16x8  (4 f32):  c0,c1 = (g, 2t..2t+1), c2,c3 = (g+8, 2t..2t+1)
 *   ldmatrix.x4: lanes 8i..8i+7 give the row addresses of matrix i, register i receives matrix
 *   i with lane holding (row g, cols 2t..2t+1), or with .trans (rows 2t..2t+1, col g).
 *
 * Causality: key j is visible to query i iff j <= i. Query tiles only visit key tiles that hold
 * a visible key, and only tiles that straddle the diagonal pay for the mask.
 *
 * Packed documents (positions != NULL, tt_attention_shape): key j is visible to query i iff also
 * j >= i - positions[i], the first token of i's document. Document starts never decrease along a
 * sequence, so a query tile starts at the key tile holding its first query's document start (tiles
 * wholly before it are skipped), a key tile's dK/dV stop at the last query tile whose first query's
 * document starts at or before the tile's last key, and only tiles a document boundary crosses pay
 * for the document mask. Rows past T are
 * zero-filled by cp.async (src-size 0), so padded rows compute finite values that are never
 * stored.
 *
 * The backward runs three kernels: D = rowsum(dout * out); dK, dV per key tile (a loop over the
 * group's query heads in head order and over query tiles in order); dQ per query tile (a loop
 * over key tiles in order). Each output element is accumulated by one thread in a fixed order
 * and written once, so the result is the same bits on every run. */
#include <math.h>
#include <stdint.h>

#include <cuda_bf16.h>

#include "ops/cuda/attention_device.cuh"
#include "ops/cuda/attention_flash.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/kernel_attributes.h"

/* ---------------------------------------------------------------------------------------------
 * PTX wrappers */

static __device__ __forceinline__ void ldmatrix_x4(uint32_t *r, uint32_t address) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(address));
}

static __device__ __forceinline__ void ldmatrix_x4_trans(uint32_t *r, uint32_t address) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(address));
}

/* c[16x8] += a[16x16] b[16x8] */
static __device__ __forceinline__ void mma_bf16(float *c, const uint32_t *a, uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* ---------------------------------------------------------------------------------------------
 * Swizzled tiles */

/* Byte offset of 16-byte chunk `chunk` of row `row` in a tile of HEAD_DIM-wide bf16 rows. */
template <int HEAD_DIM> static __device__ __forceinline__ uint32_t tile_offset(int row, int chunk) {
    return (uint32_t)(row * (HEAD_DIM * 2) + ((chunk ^ (row & 7)) << 4));
}

/* cp.async ROWS rows of HEAD_DIM bf16 starting at src (row stride `stride` elements) into the
 * tile at shared address dst; rows >= valid_rows are zero-filled. */
template <int ROWS, int HEAD_DIM, int THREADS>
static __device__ __forceinline__ void load_tile(uint32_t dst, const tt_bf16 *src, int64_t stride, int valid_rows) {
    constexpr int CHUNKS = HEAD_DIM / 8;
    static_assert((ROWS * CHUNKS) % THREADS == 0, "tile chunks divide evenly among the threads");
#pragma unroll
    for (int it = 0; it < ROWS * CHUNKS / THREADS; it++) {
        const int index = it * THREADS + (int)threadIdx.x;
        const int row = index / CHUNKS, chunk = index % CHUNKS;
        const bool valid = row < valid_rows;
        const tt_bf16 *from = valid ? src + (int64_t)row * stride + chunk * 8 : src;
        cp_async_16(dst + tile_offset<HEAD_DIM>(row, chunk), from, valid);
    }
}

/* A operand (16 rows x 16 columns starting at row0, column 16 * kstep) of a row-major tile. */
template <int HEAD_DIM>
static __device__ __forceinline__ void load_a(uint32_t *a, uint32_t tile, int row0, int kstep, int lane) {
    ldmatrix_x4(a, tile + tile_offset<HEAD_DIM>(row0 + (lane & 15), 2 * kstep + (lane >> 4)));
}

/* B operands of two n-tiles (tile rows n0..n0+7 and n0+8..n0+15) for the k columns
 * 16 * kstep.. of a tile whose rows are the n index (B = tile^T: K for S = Q K^T):
 * b[0], b[1] for n-tile n0, b[2], b[3] for n-tile n0 + 8. */
template <int HEAD_DIM>
static __device__ __forceinline__ void load_b(uint32_t *b, uint32_t tile, int n0, int kstep, int lane) {
    ldmatrix_x4(b, tile + tile_offset<HEAD_DIM>(n0 + (lane & 7) + ((lane >> 4) << 3), 2 * kstep + ((lane >> 3) & 1)));
}

/* B operands of two n-tiles (columns 16 * npair.. and +8) for the k rows k0..k0+15 of a tile
 * whose rows are the k index (B = tile: V for O = P V): b[0], b[1] for the first n-tile, b[2],
 * b[3] for the second. */
template <int HEAD_DIM>
static __device__ __forceinline__ void load_b_trans(uint32_t *b, uint32_t tile, int k0, int npair, int lane) {
    ldmatrix_x4_trans(
        b, tile + tile_offset<HEAD_DIM>(k0 + (lane & 7) + (((lane >> 3) & 1) << 3), 2 * npair + (lane >> 4)));
}

/* The A operand of k-step `kstep` of the next product from C accumulators c[n-tile][4]. */
static __device__ __forceinline__ void accumulators_to_a(uint32_t *a, const float (*c)[4], int kstep) {
    a[0] = pack_bf16(c[2 * kstep][0], c[2 * kstep][1]);
    a[1] = pack_bf16(c[2 * kstep][2], c[2 * kstep][3]);
    a[2] = pack_bf16(c[2 * kstep + 1][0], c[2 * kstep + 1][1]);
    a[3] = pack_bf16(c[2 * kstep + 1][2], c[2 * kstep + 1][3]);
}

/* Stores an accumulator block acc[HEAD_DIM / 8][4] (rows g and g + 8 of a warp's 16) as bf16,
 * times `scale`, for the rows < valid (row_g, row_g8 already relative to `valid`). */
template <int HEAD_DIM>
static __device__ __forceinline__ void store_rows(tt_bf16 *row_g_ptr, tt_bf16 *row_g8_ptr, bool store_g, bool store_g8,
                                                  const float (*acc)[4], float scale_g, float scale_g8, int lane) {
    const int t = lane & 3;
#pragma unroll
    for (int dt = 0; dt < HEAD_DIM / 8; dt++) {
        const int d = dt * 8 + 2 * t;
        if (store_g) *(uint32_t *)(row_g_ptr + d) = pack_bf16(acc[dt][0] * scale_g, acc[dt][1] * scale_g);
        if (store_g8) *(uint32_t *)(row_g8_ptr + d) = pack_bf16(acc[dt][2] * scale_g8, acc[dt][3] * scale_g8);
    }
}

/* ---------------------------------------------------------------------------------------------
 * Packed documents: the first key each query row may see (0 without positions). */

typedef struct document_rows {
    int tile_start;        /* the document start of the block's first query: no key before it is visible */
    int start_g, start_g8; /* the document starts of this thread's rows g and g + 8 */
    int warp_start_max;    /* the latest document start among the warp's rows: keys before it need the mask */
} document_rows;

/* row_g: this thread's row g (row g + 8 follows); rows past T take start 0 (they are never stored). */
static __device__ __forceinline__ document_rows document_rows_of(const int32_t *positions, int b, int T, int m0,
                                                                 int row_g, int warp) {
    document_rows r = {0, 0, 0, 0};
    if (!positions) return r;
    const int32_t *p = positions + (int64_t)b * T;
    r.tile_start = m0 - p[m0];
    r.start_g = row_g < T ? row_g - p[row_g] : 0;
    r.start_g8 = row_g + 8 < T ? row_g + 8 - p[row_g + 8] : 0;
    const int warp_last = min(m0 + warp * 16 + 15, T - 1);
    r.warp_start_max = warp_last - p[warp_last];
    return r;
}

/* ---------------------------------------------------------------------------------------------
 * Forward: a block per (batch, query head, tile of 16 * WARPS queries); K and V tiles of
 * BLOCK_N keys double-buffered through cp.async; Q in registers; online softmax in base 2. */

template <int HEAD_DIM, int WARPS, int BLOCK_N> struct forward_config {
    static constexpr int BLOCK_M = 16 * WARPS;
    static constexpr int THREADS = 32 * WARPS;
    static constexpr int KV_TILE_BYTES = BLOCK_N * HEAD_DIM * 2;
    static constexpr int STAGE_BYTES = 2 * KV_TILE_BYTES; /* K then V */
    /* The Q tile is staged in the second K/V stage, which is free until the first prefetch. */
    static constexpr int SHARED_BYTES = 2 * STAGE_BYTES;
    static_assert(BLOCK_M * HEAD_DIM * 2 <= STAGE_BYTES, "the Q tile fits in one K/V stage");
};

template <int HEAD_DIM, int WARPS, int BLOCK_N>
static __global__ void __launch_bounds__(32 * WARPS)
    flash_forward_kernel(tt_bf16 *out, float *lse, const tt_bf16 *q, const tt_bf16 *k, const tt_bf16 *v, int T, int Hq,
                         int Hkv, float scale_log2, const int32_t *positions) {
    typedef forward_config<HEAD_DIM, WARPS, BLOCK_N> C;
    constexpr int KSTEPS = HEAD_DIM / 16; /* k-steps of Q K^T */
    constexpr int DTILES = HEAD_DIM / 8;  /* n-tiles of O */
    constexpr int NTILES = BLOCK_N / 8;   /* n-tiles of S */
    extern __shared__ __align__(128) unsigned char shared[];
    const uint32_t base = shared_address(shared);

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int b = blockIdx.x / Hq, h = blockIdx.x % Hq, kv_head = h / (Hq / Hkv);
    const int m0 = (gridDim.y - 1 - blockIdx.y) * C::BLOCK_M; /* the longest tiles start first */
    const int64_t q_stride = (int64_t)Hq * HEAD_DIM, kv_stride = (int64_t)Hkv * HEAD_DIM;
    const tt_bf16 *k_head = k + (int64_t)b * T * kv_stride + (int64_t)kv_head * HEAD_DIM;
    const tt_bf16 *v_head = v + (int64_t)b * T * kv_stride + (int64_t)kv_head * HEAD_DIM;
    const int key_end = min(m0 + C::BLOCK_M, T);
    const int key_tiles = (key_end + BLOCK_N - 1) / BLOCK_N;
    const document_rows docs = document_rows_of(positions, b, T, m0, m0 + warp * 16 + g, warp);
    const int first_tile = docs.tile_start / BLOCK_N;

    load_tile<C::BLOCK_M, HEAD_DIM, C::THREADS>(
        base + C::STAGE_BYTES, q + ((int64_t)b * T + m0) * q_stride + (int64_t)h * HEAD_DIM, q_stride, T - m0);
    cp_async_commit();
    load_tile<BLOCK_N, HEAD_DIM, C::THREADS>(base, k_head + (int64_t)first_tile * BLOCK_N * kv_stride, kv_stride,
                                             T - first_tile * BLOCK_N);
    load_tile<BLOCK_N, HEAD_DIM, C::THREADS>(base + C::KV_TILE_BYTES,
                                             v_head + (int64_t)first_tile * BLOCK_N * kv_stride, kv_stride,
                                             T - first_tile * BLOCK_N);
    cp_async_commit();

    cp_async_wait<1>(); /* Q has landed (K/V of tile 0 may still be in flight) */
    __syncthreads();
    uint32_t q_frag[KSTEPS][4];
#pragma unroll
    for (int ks = 0; ks < KSTEPS; ks++) load_a<HEAD_DIM>(q_frag[ks], base + C::STAGE_BYTES, warp * 16, ks, lane);

    float o[DTILES][4];
#pragma unroll
    for (int dt = 0; dt < DTILES; dt++) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.0f;
    /* Row statistics of rows g and g + 8 of the warp: running max (of score * scale * log2 e)
     * and this thread's part of the running sum (the quad's parts are added at the end). */
    float max_g = -INFINITY, max_g8 = -INFINITY, sum_g = 0.0f, sum_g8 = 0.0f;
    const int row_g = m0 + warp * 16 + g, row_g8 = row_g + 8;

    for (int tile = first_tile; tile < key_tiles; tile++) {
        cp_async_wait<0>();
        __syncthreads(); /* tile is visible to all, and every warp is done with the other stage */
        if (tile + 1 < key_tiles) {
            const uint32_t next = base + ((tile + 1 - first_tile) & 1) * C::STAGE_BYTES;
            const int n_next = (tile + 1) * BLOCK_N;
            load_tile<BLOCK_N, HEAD_DIM, C::THREADS>(next, k_head + n_next * kv_stride, kv_stride, T - n_next);
            load_tile<BLOCK_N, HEAD_DIM, C::THREADS>(next + C::KV_TILE_BYTES, v_head + n_next * kv_stride, kv_stride,
                                                     T - n_next);
        }
        cp_async_commit();
        const uint32_t k_tile = base + ((tile - first_tile) & 1) * C::STAGE_BYTES, v_tile = k_tile + C::KV_TILE_BYTES;
        const int n0 = tile * BLOCK_N;

        float s[NTILES][4];
#pragma unroll
        for (int nt = 0; nt < NTILES; nt++) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
        for (int ks = 0; ks < KSTEPS; ks++) {
#pragma unroll
            for (int np = 0; np < NTILES / 2; np++) {
                uint32_t bk[4];
                load_b<HEAD_DIM>(bk, k_tile, np * 16, ks, lane);
                mma_bf16(s[2 * np], q_frag[ks], bk[0], bk[1]);
                mma_bf16(s[2 * np + 1], q_frag[ks], bk[2], bk[3]);
            }
        }
        /* some key of the tile is after some row of the warp, or before some row's document */
        if (n0 + BLOCK_N - 1 > m0 + warp * 16 || n0 < docs.warp_start_max) {
#pragma unroll
            for (int nt = 0; nt < NTILES; nt++) {
                const int j = n0 + nt * 8 + 2 * t;
                if (j > row_g || j < docs.start_g) s[nt][0] = -INFINITY;
                if (j + 1 > row_g || j + 1 < docs.start_g) s[nt][1] = -INFINITY;
                if (j > row_g8 || j < docs.start_g8) s[nt][2] = -INFINITY;
                if (j + 1 > row_g8 || j + 1 < docs.start_g8) s[nt][3] = -INFINITY;
            }
        }

        float tile_max_g = -INFINITY, tile_max_g8 = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < NTILES; nt++) {
            tile_max_g = fmaxf(tile_max_g, fmaxf(s[nt][0], s[nt][1]));
            tile_max_g8 = fmaxf(tile_max_g8, fmaxf(s[nt][2], s[nt][3]));
        }
        const float new_max_g = fmaxf(max_g, quad_max(tile_max_g) * scale_log2);
        const float new_max_g8 = fmaxf(max_g8, quad_max(tile_max_g8) * scale_log2);
        /* A row with nothing visible yet keeps max -inf; subtract 0 then so no inf - inf = NaN. */
        const float shift_g = new_max_g == -INFINITY ? 0.0f : new_max_g;
        const float shift_g8 = new_max_g8 == -INFINITY ? 0.0f : new_max_g8;
        const float correction_g = fast_exp2(max_g - shift_g), correction_g8 = fast_exp2(max_g8 - shift_g8);
        max_g = new_max_g;
        max_g8 = new_max_g8;
        sum_g *= correction_g;
        sum_g8 *= correction_g8;
#pragma unroll
        for (int dt = 0; dt < DTILES; dt++) {
            o[dt][0] *= correction_g;
            o[dt][1] *= correction_g;
            o[dt][2] *= correction_g8;
            o[dt][3] *= correction_g8;
        }
#pragma unroll
        for (int nt = 0; nt < NTILES; nt++) {
            s[nt][0] = fast_exp2(fmaf(s[nt][0], scale_log2, -shift_g));
            s[nt][1] = fast_exp2(fmaf(s[nt][1], scale_log2, -shift_g));
            s[nt][2] = fast_exp2(fmaf(s[nt][2], scale_log2, -shift_g8));
            s[nt][3] = fast_exp2(fmaf(s[nt][3], scale_log2, -shift_g8));
            sum_g += s[nt][0] + s[nt][1];
            sum_g8 += s[nt][2] + s[nt][3];
        }

        /* O += P V: P (bf16) straight from the accumulators, V through ldmatrix.trans. */
#pragma unroll
        for (int ks = 0; ks < BLOCK_N / 16; ks++) {
            uint32_t p[4];
            accumulators_to_a(p, s, ks);
#pragma unroll
            for (int dp = 0; dp < DTILES / 2; dp++) {
                uint32_t bv[4];
                load_b_trans<HEAD_DIM>(bv, v_tile, ks * 16, dp, lane);
                mma_bf16(o[2 * dp], p, bv[0], bv[1]);
                mma_bf16(o[2 * dp + 1], p, bv[2], bv[3]);
            }
        }
    }
    cp_async_wait<0>();

    sum_g = quad_sum(sum_g);
    sum_g8 = quad_sum(sum_g8);
    tt_bf16 *out_g = out + ((int64_t)b * T + row_g) * q_stride + (int64_t)h * HEAD_DIM;
    tt_bf16 *out_g8 = out_g + 8 * q_stride;
    store_rows<HEAD_DIM>(out_g, out_g8, row_g < T, row_g8 < T, o, 1.0f / sum_g, 1.0f / sum_g8, lane);
    if (t == 0) {
        float *lse_head = lse + ((int64_t)b * Hq + h) * T;
        if (row_g < T) lse_head[row_g] = max_g * LN2 + logf(sum_g);
        if (row_g8 < T) lse_head[row_g8] = max_g8 * LN2 + logf(sum_g8);
    }
}

/* ---------------------------------------------------------------------------------------------
 * Backward, pass 1: D[b, h, i] = sum_d dout[i, h, d] * out[i, h, d] (fp32), a warp per row. */

static __global__ void flash_backward_dot_kernel(float *D, const tt_bf16 *dout, const tt_bf16 *out, int T, int Hq,
                                                 int head_dim, int64_t rows) {
    const int64_t row = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5); /* (b * T + i) * Hq + h */
    const int lane = threadIdx.x & 31;
    if (row >= rows) return;
    const __nv_bfloat162 *d2 = (const __nv_bfloat162 *)(dout + row * head_dim);
    const __nv_bfloat162 *o2 = (const __nv_bfloat162 *)(out + row * head_dim);
    float sum = 0.0f;
    for (int e = lane; e < head_dim / 2; e += 32) {
        const float2 x = __bfloat1622float2(d2[e]), y = __bfloat1622float2(o2[e]);
        sum = fmaf(x.x, y.x, fmaf(x.y, y.y, sum));
    }
    for (int offset = 16; offset > 0; offset >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    const int64_t h = row % Hq, token = row / Hq, i = token % T, b = token / T;
    if (lane == 0) D[(b * Hq + h) * T + i] = sum;
}

/* ---------------------------------------------------------------------------------------------
 * Backward, pass 2: dK, dV. A block per (batch, kv head, tile of 16 * WARPS keys); each warp
 * owns 16 keys and keeps their dK, dV in registers. It walks the group's query heads in order
 * and, for each, the query tiles of BLOCK_M queries that see the key tile, with Q, dO, lse and D
 * double-buffered. Per query tile, transposed so that keys are the rows:
 *   S^T = K Q^T, P^T = exp(S^T scale - lse), dP^T = V dO^T, dS^T = P^T (dP^T - D),
 *   dV += P^T dO, dK += dS^T Q (times scale at the end). */

template <int HEAD_DIM, int WARPS, int BLOCK_M> struct backward_kv_config {
    static constexpr int BLOCK_N = 16 * WARPS;
    static constexpr int THREADS = 32 * WARPS;
    static constexpr int KV_TILE_BYTES = BLOCK_N * HEAD_DIM * 2;
    static constexpr int Q_TILE_BYTES = BLOCK_M * HEAD_DIM * 2;
    /* stage: Q tile, dO tile, lse[BLOCK_M], D[BLOCK_M], positions[BLOCK_M] (packed documents) */
    static constexpr int STAGE_BYTES = 2 * Q_TILE_BYTES + 3 * BLOCK_M * 4;
    static constexpr int SHARED_BYTES = 2 * KV_TILE_BYTES + 2 * STAGE_BYTES;
};

/* Issues the loads of step `step` of the dK/dV kernel (query head kv_head * group + step /
 * q_tiles, query tile first_q_tile + step % q_tiles) into the stage at `stage`: the Q tile, the
 * dO tile, then lse, D and (packed documents) the positions of its BLOCK_M rows (zero past T). */
template <int HEAD_DIM, int BLOCK_M, int THREADS>
static __device__ __forceinline__ void
load_query_stage(uint32_t stage, int step, int q_tiles, int first_q_tile, int group, int kv_head, int b, int T, int Hq,
                 const tt_bf16 *q, const tt_bf16 *dout, const float *lse, const float *D, const int32_t *positions) {
    constexpr int Q_TILE_BYTES = BLOCK_M * HEAD_DIM * 2;
    const int h = kv_head * group + step / q_tiles, m0 = (first_q_tile + step % q_tiles) * BLOCK_M;
    const int64_t q_stride = (int64_t)Hq * HEAD_DIM;
    const int64_t q_offset = ((int64_t)b * T + m0) * q_stride + (int64_t)h * HEAD_DIM;
    load_tile<BLOCK_M, HEAD_DIM, THREADS>(stage, q + q_offset, q_stride, T - m0);
    load_tile<BLOCK_M, HEAD_DIM, THREADS>(stage + Q_TILE_BYTES, dout + q_offset, q_stride, T - m0);
    const int64_t row_offset = ((int64_t)b * Hq + h) * T + m0;
    for (int r = threadIdx.x; r < (positions ? 3 : 2) * BLOCK_M; r += THREADS) {
        const int i = r % BLOCK_M;
        const bool valid = m0 + i < T;
        const void *src = r < 2 * BLOCK_M ? (const void *)((r < BLOCK_M ? lse : D) + (valid ? row_offset + i : 0))
                                          : (const void *)(positions + (int64_t)b * T + (valid ? m0 + i : 0));
        cp_async_4(stage + 2 * Q_TILE_BYTES + r * 4, src, valid);
    }
}

template <int HEAD_DIM, int WARPS, int BLOCK_M>
static __global__ void __launch_bounds__(32 * WARPS)
    flash_backward_kv_kernel(tt_bf16 *dk, tt_bf16 *dv, const tt_bf16 *dout, const float *lse, const float *D,
                             const tt_bf16 *q, const tt_bf16 *k, const tt_bf16 *v, int T, int Hq, int Hkv, float scale,
                             float scale_log2, const int32_t *positions) {
    typedef backward_kv_config<HEAD_DIM, WARPS, BLOCK_M> C;
    constexpr int KSTEPS = HEAD_DIM / 16; /* k-steps of K Q^T and V dO^T */
    constexpr int DTILES = HEAD_DIM / 8;  /* n-tiles of dK, dV */
    constexpr int QTILES = BLOCK_M / 8;   /* n-tiles of S^T, dP^T */
    extern __shared__ __align__(128) unsigned char shared[];
    const uint32_t base = shared_address(shared);
    const uint32_t k_tile = base, v_tile = base + C::KV_TILE_BYTES, stages = base + 2 * C::KV_TILE_BYTES;

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int group = Hq / Hkv;
    const int b = blockIdx.x / Hkv, kv_head = blockIdx.x % Hkv;
    const int n0 = blockIdx.y * C::BLOCK_N; /* tile 0 has the most queries and starts first */
    const int64_t kv_stride = (int64_t)Hkv * HEAD_DIM;
    const int64_t kv_offset = ((int64_t)b * T + n0) * kv_stride + (int64_t)kv_head * HEAD_DIM;
    const int first_q_tile = n0 / BLOCK_M, all_q_tiles = (T + BLOCK_M - 1) / BLOCK_M;
    int q_tiles = all_q_tiles - first_q_tile;
    if (positions) {
        /* the query tiles whose first query's document starts at or before the tile's last key: a prefix,
         * since document starts never decrease; counted by the whole block at once */
        const int32_t *p = positions + (int64_t)b * T;
        const int key_last = min(n0 + C::BLOCK_N, T) - 1;
        int count = 0;
        for (int at = first_q_tile; at < all_q_tiles; at += C::THREADS) {
            const int qt = at + (int)threadIdx.x;
            count += __syncthreads_count(qt < all_q_tiles && qt * BLOCK_M - p[qt * BLOCK_M] <= key_last);
        }
        q_tiles = count;
    }
    const int steps = group * q_tiles; /* (head, query tile) pairs, head-major */

    load_tile<C::BLOCK_N, HEAD_DIM, C::THREADS>(k_tile, k + kv_offset, kv_stride, T - n0);
    load_tile<C::BLOCK_N, HEAD_DIM, C::THREADS>(v_tile, v + kv_offset, kv_stride, T - n0);

    load_query_stage<HEAD_DIM, BLOCK_M, C::THREADS>(stages, 0, q_tiles, first_q_tile, group, kv_head, b, T, Hq, q, dout,
                                                    lse, D, positions);
    cp_async_commit();

    float dk_acc[DTILES][4], dv_acc[DTILES][4];
#pragma unroll
    for (int dt = 0; dt < DTILES; dt++) {
#pragma unroll
        for (int e = 0; e < 4; e++) dk_acc[dt][e] = dv_acc[dt][e] = 0.0f;
    }
    const int key_g = n0 + warp * 16 + g, key_g8 = key_g + 8;

    for (int step = 0; step < steps; step++) {
        cp_async_wait<0>();
        __syncthreads(); /* step's stage is visible to all, and every warp is done with the other */
        if (step + 1 < steps)
            load_query_stage<HEAD_DIM, BLOCK_M, C::THREADS>(stages + ((step + 1) & 1) * C::STAGE_BYTES, step + 1,
                                                            q_tiles, first_q_tile, group, kv_head, b, T, Hq, q, dout,
                                                            lse, D, positions);
        cp_async_commit();
        const uint32_t q_tile = stages + (step & 1) * C::STAGE_BYTES, do_tile = q_tile + C::Q_TILE_BYTES;
        const float *row_lse =
            (const float *)(shared + 2 * C::KV_TILE_BYTES + (step & 1) * C::STAGE_BYTES + 2 * C::Q_TILE_BYTES);
        const float *row_D = row_lse + BLOCK_M;
        const int32_t *row_position = (const int32_t *)(row_D + BLOCK_M); /* packed documents only */
        const int m0 = (first_q_tile + step % q_tiles) * BLOCK_M;

        float s[QTILES][4], dp[QTILES][4];
#pragma unroll
        for (int nt = 0; nt < QTILES; nt++) {
#pragma unroll
            for (int e = 0; e < 4; e++) s[nt][e] = dp[nt][e] = 0.0f;
        }
#pragma unroll
        for (int ks = 0; ks < KSTEPS; ks++) {
            uint32_t ak[4], av[4];
            load_a<HEAD_DIM>(ak, k_tile, warp * 16, ks, lane);
            load_a<HEAD_DIM>(av, v_tile, warp * 16, ks, lane);
#pragma unroll
            for (int np = 0; np < QTILES / 2; np++) {
                uint32_t bq[4], bdo[4];
                load_b<HEAD_DIM>(bq, q_tile, np * 16, ks, lane);
                load_b<HEAD_DIM>(bdo, do_tile, np * 16, ks, lane);
                mma_bf16(s[2 * np], ak, bq[0], bq[1]);
                mma_bf16(s[2 * np + 1], ak, bq[2], bq[3]);
                mma_bf16(dp[2 * np], av, bdo[0], bdo[1]);
                mma_bf16(dp[2 * np + 1], av, bdo[2], bdo[3]);
            }
        }
        /* Queries before a key of the warp, past T, or (packed documents) in a later document than the key are
         * masked (P = 0, so dS = 0 too). */
        const bool needs_mask = m0 < n0 + warp * 16 + 15 || m0 + BLOCK_M > T || positions;
#pragma unroll
        for (int nt = 0; nt < QTILES; nt++) {
            const int c = nt * 8 + 2 * t; /* query columns c, c + 1 of the tile */
            const float lse0 = row_lse[c] * LOG2E, lse1 = row_lse[c + 1] * LOG2E;
            const float D0 = row_D[c], D1 = row_D[c + 1];
            float p[4];
            p[0] = fast_exp2(fmaf(s[nt][0], scale_log2, -lse0));
            p[1] = fast_exp2(fmaf(s[nt][1], scale_log2, -lse1));
            p[2] = fast_exp2(fmaf(s[nt][2], scale_log2, -lse0));
            p[3] = fast_exp2(fmaf(s[nt][3], scale_log2, -lse1));
            if (needs_mask) {
                const int i = m0 + c;
                /* the first token of query i's and i + 1's documents (0 unpacked) */
                const int start0 = positions ? i - row_position[c] : 0,
                          start1 = positions ? i + 1 - row_position[c + 1] : 0;
                if (i < key_g || i >= T || start0 > key_g) p[0] = 0.0f;
                if (i + 1 < key_g || i + 1 >= T || start1 > key_g) p[1] = 0.0f;
                if (i < key_g8 || i >= T || start0 > key_g8) p[2] = 0.0f;
                if (i + 1 < key_g8 || i + 1 >= T || start1 > key_g8) p[3] = 0.0f;
            }
            dp[nt][0] = p[0] * (dp[nt][0] - D0);
            dp[nt][1] = p[1] * (dp[nt][1] - D1);
            dp[nt][2] = p[2] * (dp[nt][2] - D0);
            dp[nt][3] = p[3] * (dp[nt][3] - D1);
            s[nt][0] = p[0];
            s[nt][1] = p[1];
            s[nt][2] = p[2];
            s[nt][3] = p[3];
        }
        /* dV += P^T dO and dK += dS^T Q, the query index as k. */
#pragma unroll
        for (int ks = 0; ks < BLOCK_M / 16; ks++) {
            uint32_t ap[4], ads[4];
            accumulators_to_a(ap, s, ks);
            accumulators_to_a(ads, dp, ks);
#pragma unroll
            for (int dpair = 0; dpair < DTILES / 2; dpair++) {
                uint32_t bdo[4], bq[4];
                load_b_trans<HEAD_DIM>(bdo, do_tile, ks * 16, dpair, lane);
                load_b_trans<HEAD_DIM>(bq, q_tile, ks * 16, dpair, lane);
                mma_bf16(dv_acc[2 * dpair], ap, bdo[0], bdo[1]);
                mma_bf16(dv_acc[2 * dpair + 1], ap, bdo[2], bdo[3]);
                mma_bf16(dk_acc[2 * dpair], ads, bq[0], bq[1]);
                mma_bf16(dk_acc[2 * dpair + 1], ads, bq[2], bq[3]);
            }
        }
    }
    cp_async_wait<0>();

    tt_bf16 *dk_g = dk + ((int64_t)b * T + key_g) * kv_stride + (int64_t)kv_head * HEAD_DIM;
    tt_bf16 *dv_g = dv + ((int64_t)b * T + key_g) * kv_stride + (int64_t)kv_head * HEAD_DIM;
    store_rows<HEAD_DIM>(dk_g, dk_g + 8 * kv_stride, key_g < T, key_g8 < T, dk_acc, scale, scale, lane);
    store_rows<HEAD_DIM>(dv_g, dv_g + 8 * kv_stride, key_g < T, key_g8 < T, dv_acc, 1.0f, 1.0f, lane);
}

/* ---------------------------------------------------------------------------------------------
 * Backward, pass 3: dQ. A block per (batch, query head, tile of 16 * WARPS queries); Q and dO
 * stay in shared memory (read per key tile, which keeps registers for the accumulators), K and V
 * tiles of BLOCK_N keys double-buffered. Per key tile:
 *   S = Q K^T, P = exp(S scale - lse), dP = dO V^T, dS = P (dP - D), dQ += dS K (times scale). */

template <int HEAD_DIM, int WARPS, int BLOCK_N> struct backward_q_config {
    static constexpr int BLOCK_M = 16 * WARPS;
    static constexpr int THREADS = 32 * WARPS;
    static constexpr int Q_TILE_BYTES = BLOCK_M * HEAD_DIM * 2;
    static constexpr int KV_TILE_BYTES = BLOCK_N * HEAD_DIM * 2;
    static constexpr int STAGE_BYTES = 2 * KV_TILE_BYTES;
    static constexpr int SHARED_BYTES = 2 * Q_TILE_BYTES + 2 * STAGE_BYTES;
};

template <int HEAD_DIM, int WARPS, int BLOCK_N>
static __global__ void __launch_bounds__(32 * WARPS)
    flash_backward_q_kernel(tt_bf16 *dq, const tt_bf16 *dout, const float *lse, const float *D, const tt_bf16 *q,
                            const tt_bf16 *k, const tt_bf16 *v, int T, int Hq, int Hkv, float scale, float scale_log2,
                            const int32_t *positions) {
    typedef backward_q_config<HEAD_DIM, WARPS, BLOCK_N> C;
    constexpr int KSTEPS = HEAD_DIM / 16; /* k-steps of Q K^T and dO V^T */
    constexpr int DTILES = HEAD_DIM / 8;  /* n-tiles of dQ */
    constexpr int NTILES = BLOCK_N / 8;   /* n-tiles of S, dP */
    extern __shared__ __align__(128) unsigned char shared[];
    const uint32_t base = shared_address(shared);
    const uint32_t q_tile = base, do_tile = base + C::Q_TILE_BYTES, stages = base + 2 * C::Q_TILE_BYTES;

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int b = blockIdx.x / Hq, h = blockIdx.x % Hq, kv_head = h / (Hq / Hkv);
    const int m0 = (gridDim.y - 1 - blockIdx.y) * C::BLOCK_M; /* the longest tiles start first */
    const int64_t q_stride = (int64_t)Hq * HEAD_DIM, kv_stride = (int64_t)Hkv * HEAD_DIM;
    const int64_t q_offset = ((int64_t)b * T + m0) * q_stride + (int64_t)h * HEAD_DIM;
    const tt_bf16 *k_head = k + (int64_t)b * T * kv_stride + (int64_t)kv_head * HEAD_DIM;
    const tt_bf16 *v_head = v + (int64_t)b * T * kv_stride + (int64_t)kv_head * HEAD_DIM;
    const int key_end = min(m0 + C::BLOCK_M, T);
    const int key_tiles = (key_end + BLOCK_N - 1) / BLOCK_N;
    const document_rows docs = document_rows_of(positions, b, T, m0, m0 + warp * 16 + g, warp);
    const int first_tile = docs.tile_start / BLOCK_N;

    load_tile<C::BLOCK_M, HEAD_DIM, C::THREADS>(q_tile, q + q_offset, q_stride, T - m0);
    load_tile<C::BLOCK_M, HEAD_DIM, C::THREADS>(do_tile, dout + q_offset, q_stride, T - m0);
    load_tile<BLOCK_N, HEAD_DIM, C::THREADS>(stages, k_head + (int64_t)first_tile * BLOCK_N * kv_stride, kv_stride,
                                             T - first_tile * BLOCK_N);
    load_tile<BLOCK_N, HEAD_DIM, C::THREADS>(stages + C::KV_TILE_BYTES,
                                             v_head + (int64_t)first_tile * BLOCK_N * kv_stride, kv_stride,
                                             T - first_tile * BLOCK_N);
    cp_async_commit();

    const int row_g = m0 + warp * 16 + g, row_g8 = row_g + 8;
    const float *lse_head = lse + ((int64_t)b * Hq + h) * T, *D_head = D + ((int64_t)b * Hq + h) * T;
    const float lse_g = row_g < T ? lse_head[row_g] * LOG2E : 0.0f;
    const float lse_g8 = row_g8 < T ? lse_head[row_g8] * LOG2E : 0.0f;
    const float D_g = row_g < T ? D_head[row_g] : 0.0f, D_g8 = row_g8 < T ? D_head[row_g8] : 0.0f;

    float dq_acc[DTILES][4];
#pragma unroll
    for (int dt = 0; dt < DTILES; dt++) dq_acc[dt][0] = dq_acc[dt][1] = dq_acc[dt][2] = dq_acc[dt][3] = 0.0f;

    for (int tile = first_tile; tile < key_tiles; tile++) {
        cp_async_wait<0>();
        __syncthreads(); /* tile is visible to all, and every warp is done with the other stage */
        if (tile + 1 < key_tiles) {
            const uint32_t next = stages + ((tile + 1 - first_tile) & 1) * C::STAGE_BYTES;
            const int n_next = (tile + 1) * BLOCK_N;
            load_tile<BLOCK_N, HEAD_DIM, C::THREADS>(next, k_head + n_next * kv_stride, kv_stride, T - n_next);
            load_tile<BLOCK_N, HEAD_DIM, C::THREADS>(next + C::KV_TILE_BYTES, v_head + n_next * kv_stride, kv_stride,
                                                     T - n_next);
        }
        cp_async_commit();
        const uint32_t k_tile = stages + ((tile - first_tile) & 1) * C::STAGE_BYTES, v_tile = k_tile + C::KV_TILE_BYTES;
        const int n0 = tile * BLOCK_N;

        float s[NTILES][4], dp[NTILES][4];
#pragma unroll
        for (int nt = 0; nt < NTILES; nt++) {
#pragma unroll
            for (int e = 0; e < 4; e++) s[nt][e] = dp[nt][e] = 0.0f;
        }
#pragma unroll
        for (int ks = 0; ks < KSTEPS; ks++) {
            uint32_t aq[4], ado[4];
            load_a<HEAD_DIM>(aq, q_tile, warp * 16, ks, lane);
            load_a<HEAD_DIM>(ado, do_tile, warp * 16, ks, lane);
#pragma unroll
            for (int np = 0; np < NTILES / 2; np++) {
                uint32_t bk[4], bv[4];
                load_b<HEAD_DIM>(bk, k_tile, np * 16, ks, lane);
                load_b<HEAD_DIM>(bv, v_tile, np * 16, ks, lane);
                mma_bf16(s[2 * np], aq, bk[0], bk[1]);
                mma_bf16(s[2 * np + 1], aq, bk[2], bk[3]);
                mma_bf16(dp[2 * np], ado, bv[0], bv[1]);
                mma_bf16(dp[2 * np + 1], ado, bv[2], bv[3]);
            }
        }
        const bool needs_mask = n0 + BLOCK_N - 1 > m0 + warp * 16 || n0 < docs.warp_start_max;
#pragma unroll
        for (int nt = 0; nt < NTILES; nt++) {
            float p[4];
            p[0] = fast_exp2(fmaf(s[nt][0], scale_log2, -lse_g));
            p[1] = fast_exp2(fmaf(s[nt][1], scale_log2, -lse_g));
            p[2] = fast_exp2(fmaf(s[nt][2], scale_log2, -lse_g8));
            p[3] = fast_exp2(fmaf(s[nt][3], scale_log2, -lse_g8));
            if (needs_mask) {
                const int j = n0 + nt * 8 + 2 * t;
                if (j > row_g || j < docs.start_g) p[0] = 0.0f;
                if (j + 1 > row_g || j + 1 < docs.start_g) p[1] = 0.0f;
                if (j > row_g8 || j < docs.start_g8) p[2] = 0.0f;
                if (j + 1 > row_g8 || j + 1 < docs.start_g8) p[3] = 0.0f;
            }
            dp[nt][0] = p[0] * (dp[nt][0] - D_g);
            dp[nt][1] = p[1] * (dp[nt][1] - D_g);
            dp[nt][2] = p[2] * (dp[nt][2] - D_g8);
            dp[nt][3] = p[3] * (dp[nt][3] - D_g8);
        }
        /* dQ += dS K, the key index as k. */
#pragma unroll
        for (int ks = 0; ks < BLOCK_N / 16; ks++) {
            uint32_t ads[4];
            accumulators_to_a(ads, dp, ks);
#pragma unroll
            for (int dpair = 0; dpair < DTILES / 2; dpair++) {
                uint32_t bk[4];
                load_b_trans<HEAD_DIM>(bk, k_tile, ks * 16, dpair, lane);
                mma_bf16(dq_acc[2 * dpair], ads, bk[0], bk[1]);
                mma_bf16(dq_acc[2 * dpair + 1], ads, bk[2], bk[3]);
            }
        }
    }
    cp_async_wait<0>();

    tt_bf16 *dq_g = dq + ((int64_t)b * T + row_g) * q_stride + (int64_t)h * HEAD_DIM;
    store_rows<HEAD_DIM>(dq_g, dq_g + 8 * q_stride, row_g < T, row_g8 < T, dq_acc, scale, scale, lane);
}

/* ---------------------------------------------------------------------------------------------
 * Host side */

/* Tile choices per head dimension (warps, then the other side's tile). */
#define FWD_WARPS 4
#define FWD_BLOCK_N 64
#define BWD_KV_WARPS 4
#define BWD_KV_BLOCK_M(hd) ((hd) == 64 ? 64 : 32)
#define BWD_Q_WARPS 4
#define BWD_Q_BLOCK_N 64

extern "C" int tt_cuda_flash_attention_supported(const tt_attention_shape *s) {
    return (s->head_dim == 64 || s->head_dim == 128) && s->num_kv_heads > 0 && s->num_heads > 0 &&
           s->num_heads % s->num_kv_heads == 0 && s->sliding_window == 0 && s->softcap == 0 && s->batch > 0 &&
           s->seq_len > 0 && s->seq_len <= INT32_MAX / 2 && s->batch * s->num_heads <= INT32_MAX;
}

static void check_flash_arguments(const tt_attention_shape *s, const void *const *pointers, int count) {
    TT_CHECK(tt_cuda_flash_attention_supported(s),
             "flash attention: unsupported shape (head_dim %lld, %lld heads, %lld kv heads, window %lld)",
             (long long)s->head_dim, (long long)s->num_heads, (long long)s->num_kv_heads, (long long)s->sliding_window);
    for (int i = 0; i < count; i++)
        TT_CHECK(((uintptr_t)pointers[i] & 15) == 0, "flash attention: operand %d is not 16-byte aligned", i);
}

template <int HEAD_DIM>
static void launch_forward(tt_bf16 *out, float *lse, const tt_bf16 *q, const tt_bf16 *k, const tt_bf16 *v,
                           const tt_attention_shape *s, cudaStream_t stream) {
    typedef forward_config<HEAD_DIM, FWD_WARPS, FWD_BLOCK_N> C;
    const int T = (int)s->seq_len;
    auto kernel = flash_forward_kernel<HEAD_DIM, FWD_WARPS, FWD_BLOCK_N>;
    tt_cuda_kernel_shared_bytes((const void *)kernel, (int)(C::SHARED_BYTES));
    const dim3 grid((unsigned)(s->batch * s->num_heads), (unsigned)((T + C::BLOCK_M - 1) / C::BLOCK_M));
    kernel<<<grid, C::THREADS, C::SHARED_BYTES, stream>>>(out, lse, q, k, v, T, (int)s->num_heads, (int)s->num_kv_heads,
                                                          (float)(s->scale * 1.4426950408889634), s->positions);
    TT_CUDA_CHECK(cudaGetLastError());
}

extern "C" void tt_cuda_flash_attention_forward(tt_bf16 *out, float *lse, const tt_bf16 *q, const tt_bf16 *k,
                                                const tt_bf16 *v, const tt_attention_shape *s, cudaStream_t stream) {
    const void *pointers[] = {out, q, k, v};
    check_flash_arguments(s, pointers, 4);
    if (s->head_dim == 64) launch_forward<64>(out, lse, q, k, v, s, stream);
    else launch_forward<128>(out, lse, q, k, v, s, stream);
}

extern "C" size_t tt_cuda_flash_attention_backward_scratch_bytes(const tt_attention_shape *s) {
    return sizeof(float) * (size_t)(s->batch * s->num_heads * s->seq_len);
}

template <int HEAD_DIM>
static void launch_backward(tt_bf16 *dq, tt_bf16 *dk, tt_bf16 *dv, const tt_bf16 *dout, const float *lse,
                            const float *D, const tt_bf16 *q, const tt_bf16 *k, const tt_bf16 *v,
                            const tt_attention_shape *s, cudaStream_t stream) {
    const int T = (int)s->seq_len, Hq = (int)s->num_heads, Hkv = (int)s->num_kv_heads;
    const float scale = (float)s->scale, scale_log2 = (float)(s->scale * 1.4426950408889634);

    constexpr int KV_BLOCK_M = BWD_KV_BLOCK_M(HEAD_DIM);
    typedef backward_kv_config<HEAD_DIM, BWD_KV_WARPS, KV_BLOCK_M> KV;
    auto kv_kernel = flash_backward_kv_kernel<HEAD_DIM, BWD_KV_WARPS, KV_BLOCK_M>;
    tt_cuda_kernel_shared_bytes((const void *)kv_kernel, (int)(KV::SHARED_BYTES));
    const dim3 kv_grid((unsigned)(s->batch * Hkv), (unsigned)((T + KV::BLOCK_N - 1) / KV::BLOCK_N));
    kv_kernel<<<kv_grid, KV::THREADS, KV::SHARED_BYTES, stream>>>(dk, dv, dout, lse, D, q, k, v, T, Hq, Hkv, scale,
                                                                  scale_log2, s->positions);
    TT_CUDA_CHECK(cudaGetLastError());

    typedef backward_q_config<HEAD_DIM, BWD_Q_WARPS, BWD_Q_BLOCK_N> Q;
    auto q_kernel = flash_backward_q_kernel<HEAD_DIM, BWD_Q_WARPS, BWD_Q_BLOCK_N>;
    tt_cuda_kernel_shared_bytes((const void *)q_kernel, (int)(Q::SHARED_BYTES));
    const dim3 q_grid((unsigned)(s->batch * Hq), (unsigned)((T + Q::BLOCK_M - 1) / Q::BLOCK_M));
    q_kernel<<<q_grid, Q::THREADS, Q::SHARED_BYTES, stream>>>(dq, dout, lse, D, q, k, v, T, Hq, Hkv, scale, scale_log2,
                                                              s->positions);
    TT_CUDA_CHECK(cudaGetLastError());
}

extern "C" void tt_cuda_flash_attention_backward(tt_bf16 *dq, tt_bf16 *dk, tt_bf16 *dv, const tt_bf16 *dout,
                                                 const tt_bf16 *out, const float *lse, const tt_bf16 *q,
                                                 const tt_bf16 *k, const tt_bf16 *v, const tt_attention_shape *s,
                                                 void *scratch, cudaStream_t stream) {
    const void *pointers[] = {dq, dk, dv, dout, out, q, k, v};
    check_flash_arguments(s, pointers, 8);
    float *D = (float *)scratch;
    const int64_t rows = s->batch * s->seq_len * s->num_heads;
    const int dot_warps = 8;
    flash_backward_dot_kernel<<<(unsigned)((rows + dot_warps - 1) / dot_warps), 32 * dot_warps, 0, stream>>>(
        D, dout, out, (int)s->seq_len, (int)s->num_heads, (int)s->head_dim, rows);
    TT_CUDA_CHECK(cudaGetLastError());
    if (s->head_dim == 64) launch_backward<64>(dq, dk, dv, dout, lse, D, q, k, v, s, stream);
    else launch_backward<128>(dq, dk, dv, dout, lse, D, q, k, v, s, stream);
}
