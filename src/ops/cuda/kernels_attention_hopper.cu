/* tiertrain's Hopper attention (sm_90a): warpgroup MMA (wgmma) from shared memory, FlashAttention-3's shape without
 * its producer warp and TMA yet. A forward block takes 128 queries of one (sequence, query head): two warpgroups of
 * 64 query rows each; all 256 threads load the block's Q once and K and V tiles of 128 keys through cp.async into
 * rings of three; each warpgroup computes S = Q K^T (m64n128k16, both operands in shared memory), the online softmax
 * in registers (base 2), and O += P V with P from registers (the accumulator layout of S, packed to bf16, is the
 * register A operand layout) and V from shared memory as a transposed B. Packed documents (positions) limit each
 * block's keys to its documents and mask per row.
 *
 * A register operand of an asynchronous MMA (P here, dS in the backward) may not be written until the wait that
 * ends the product, and the compiler does not know that: the measured failure was P_{j} packed into the registers
 * P_{j-1} was still being read from (wrong, nondeterministic outputs past one key tile). So P is packed only after
 * the wait, and fence_operands after the wait keeps them live across the product.
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
#include "ops/cuda/kernel_attributes.h"
#include "ops/cuda/hopper_wgmma.cuh" /* and attention_device.cuh */

#define BLOCK_M 128 /* queries a block: two warpgroups of 64 */
#define BLOCK_N 128 /* keys a tile */
#define THREADS 256
/* Bytes of a ROWS-row tile of HD bf16 columns (Q, K, V, dO) */
#define TILE_OF(ROWS, HD) ((ROWS) * (HD)*2)

/* cp.async ROWS rows of HD bf16 from src (row stride `stride` elements) into the tile at dst; rows >= valid_rows
 * are zero-filled. */
template <int ROWS, int HD>
static __device__ __forceinline__ void load_tile(uint32_t dst, const tt_bf16 *src, int64_t stride, int valid_rows) {
    constexpr int CHUNKS = HD / 8; /* 16-byte chunks a row */
#pragma unroll
    for (int it = 0; it < ROWS * CHUNKS / THREADS; it++) {
        const int index = it * THREADS + (int)threadIdx.x;
        const int row = index / CHUNKS, chunk = index % CHUNKS;
        const bool valid = row < valid_rows;
        cp_async_16(dst + tile_offset<ROWS>(row, chunk), valid ? src + (int64_t)row * stride + chunk * 8 : src, valid);
    }
}

/* Accumulator layout of a warpgroup's m64n128 (PTX ISA, wgmma .f32 D fragments): warp w of the group holds rows
 * 16w + g and 16w + g + 8 (g = lane / 4, t = lane % 4); d[4j + 0..1] are row 16w + g, columns 8j + 2t and +1,
 * d[4j + 2..3] the same columns of row 16w + g + 8.
 *
 * The loop over key tiles j overlaps each warpgroup's softmax with its tensor cores: S_j = Q K_j^T is issued, then
 * O += P_{j-1} V_{j-1} (the previous tile's probabilities, still in registers), and the softmax of S_j runs while
 * that second product does; O is rescaled once it lands. K and V live in separate rings of three tiles: at step j
 * the block reads K_j and V_{j-1} and loads K_{j+2} and V_{j+1} into the slots of K_{j-1} and V_{j-2}, which every
 * warpgroup finished with before the step's barrier. Shared memory: Q, three K, three V (7 x 32 KiB). */
#define FWD_RING 3
#define FWD_SHARED_BYTES(HD) ((1 + 2 * FWD_RING) * TILE_OF(128, HD) + 1024)

template <int HD>
static __global__ void __launch_bounds__(THREADS, 1)
    hopper_forward_kernel(tt_bf16 *out, float *lse, const tt_bf16 *q, const tt_bf16 *k, const tt_bf16 *v, int T, int Hq,
                          int Hkv, float scale_log2, const int32_t *positions) {
    constexpr int TILE_BYTES = TILE_OF(128, HD);
    extern __shared__ unsigned char shared_raw[];
    const uint32_t base = (shared_address(shared_raw) + 1023) & ~1023u;
    const uint32_t q_tile = base, k_ring = base + TILE_BYTES, v_ring = k_ring + FWD_RING * TILE_BYTES;

    const int tid = threadIdx.x, group = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int b = blockIdx.x / Hq, h = blockIdx.x % Hq, kv_head = h / (Hq / Hkv);
    const int m0 = (gridDim.y - 1 - blockIdx.y) * BLOCK_M; /* the longest blocks start first */
    const int64_t q_stride = (int64_t)Hq * HD, kv_stride = (int64_t)Hkv * HD;
    const tt_bf16 *k_head = k + (int64_t)b * T * kv_stride + (int64_t)kv_head * HD;
    const tt_bf16 *v_head = v + (int64_t)b * T * kv_stride + (int64_t)kv_head * HD;
    /* keys from the document start of the block's first query (document starts never decrease) to its last query */
    const int first_tile = document_start(positions, b, T, m0) / BLOCK_N;
    const int tiles = (min(m0 + BLOCK_M, T) + BLOCK_N - 1) / BLOCK_N - first_tile;
    const int row_g = m0 + group * 64 + warp * 16 + g, row_g8 = row_g + 8;
    const int start_g = document_start(positions, b, T, row_g), start_g8 = document_start(positions, b, T, row_g8);
    const int warp_first = m0 + group * 64 + warp * 16;
    /* the latest document start among the warp's rows: keys before it need the mask */
    const int warp_start_max = document_start(positions, b, T, min(warp_first + 15, T - 1));

    /* group -2: Q and K_0; group -1: K_1 and V_0 */
    load_tile<128, HD>(q_tile, q + ((int64_t)b * T + m0) * q_stride + (int64_t)h * HD, q_stride, T - m0);
    const int n_first = first_tile * BLOCK_N;
    load_tile<128, HD>(k_ring, k_head + (int64_t)n_first * kv_stride, kv_stride, T - n_first);
    cp_async_commit();
    if (tiles > 1)
        load_tile<128, HD>(k_ring + TILE_BYTES, k_head + (int64_t)(n_first + BLOCK_N) * kv_stride, kv_stride,
                           T - n_first - BLOCK_N);
    load_tile<128, HD>(v_ring, v_head + (int64_t)n_first * kv_stride, kv_stride, T - n_first);
    cp_async_commit();

    float o[HD / 2], s[64];
#pragma unroll
    for (int i = 0; i < HD / 2; i++) o[i] = 0.0f;
    uint32_t p[32]; /* P_{j-1}, bf16 pairs in the register A layout */
    softmax_rows rows = {-INFINITY, -INFINITY, 0.0f, 0.0f};

    for (int j = 0; j < tiles; j++) {
        cp_async_wait<1>(); /* K_j and V_{j-1} (the groups of steps j - 2 and before) have landed */
        fence_proxy_async();
        __syncthreads(); /* ...for every thread; every warpgroup is done with K_{j-1} and V_{j-2} */
        if (j + 2 < tiles) {
            const int n = n_first + (j + 2) * BLOCK_N;
            load_tile<128, HD>(k_ring + ((j + 2) % FWD_RING) * TILE_BYTES, k_head + (int64_t)n * kv_stride, kv_stride,
                               T - n);
        }
        if (j + 1 < tiles) {
            const int n = n_first + (j + 1) * BLOCK_N;
            load_tile<128, HD>(v_ring + ((j + 1) % FWD_RING) * TILE_BYTES, v_head + (int64_t)n * kv_stride, kv_stride,
                               T - n);
        }
        cp_async_commit();
        const uint32_t k_tile = k_ring + (j % FWD_RING) * TILE_BYTES;
        const int n0 = n_first + j * BLOCK_N;

        /* S = Q K_j^T over head_dim in 8 slices of 16 */
        wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < HD / 16; ks++) {
            const uint32_t within = k_slice<128>(ks);
            wgmma_ss(s, descriptor(q_tile + group * 64 * 128 + within, 16, 1024), descriptor(k_tile + within, 16, 1024),
                     ks > 0);
        }
        wgmma_commit();
        if (j > 0) {
            /* O += P_{j-1} V_{j-1} over the tile's keys in 8 slices of 16: A fragment kb = p[4kb .. 4kb + 3] */
            const uint32_t v_tile = v_ring + ((j - 1) % FWD_RING) * TILE_BYTES;
            wgmma_fence(); /* P_{j-1} and the rescaled O were written since the last fence */
#pragma unroll
            for (int kb = 0; kb < BLOCK_N / 16; kb++)
                wgmma_rs_hd<HD>(o, p + 4 * kb, descriptor(v_tile + kb * 16 * 128, 128 * 128, 1024));
            wgmma_commit();
            wgmma_wait<1>(); /* S_j, while P_{j-1} V_{j-1} runs on */
        } else {
            wgmma_wait<0>();
        }
        fence_accumulators(s);

        /* P_j in fp32 over S_j (p still feeds the product in flight: it is rewritten only after the wait) */
        float correction_g, correction_g8;
        softmax_tile(s, &rows, &correction_g, &correction_g8,
                     n0 + BLOCK_N - 1 > warp_first || n0 + BLOCK_N > T || n0 < warp_start_max, n0, t, T, row_g, row_g8,
                     start_g, start_g8, scale_log2);
        wgmma_wait<0>(); /* P_{j-1} V_{j-1} is in O: rescale it to this tile's maximum */
        fence_accumulators_n<HD / 2>(o);
        fence_operands<32>(p);
#pragma unroll
        for (int c = 0; c < HD / 8; c++) {
            o[4 * c] *= correction_g;
            o[4 * c + 1] *= correction_g;
            o[4 * c + 2] *= correction_g8;
            o[4 * c + 3] *= correction_g8;
        }
#pragma unroll
        for (int c = 0; c < 16; c++) {
            p[2 * c] = pack_bf16(s[4 * c], s[4 * c + 1]);
            p[2 * c + 1] = pack_bf16(s[4 * c + 2], s[4 * c + 3]);
        }
    }
    /* the last tile's O += P V (its V landed with the last step's group) */
    cp_async_wait<0>();
    fence_proxy_async();
    __syncthreads();
    {
        const uint32_t v_tile = v_ring + ((tiles - 1) % FWD_RING) * TILE_BYTES;
        wgmma_fence();
#pragma unroll
        for (int kb = 0; kb < BLOCK_N / 16; kb++)
            wgmma_rs_hd<HD>(o, p + 4 * kb, descriptor(v_tile + kb * 16 * 128, 128 * 128, 1024));
        wgmma_commit();
        wgmma_wait<0>();
        fence_accumulators_n<HD / 2>(o);
        fence_operands<32>(p); /* nothing of the epilogue lands in P's registers while the product reads them */
    }

    store_forward_rows<HD>(out, lse, o, &rows, b, h, Hq, T, row_g, t, q_stride);
}

/* ---------------------------------------------------------------------------------------------
 * Backward: D = rowsum(dout * out); dK, dV per block of 128 keys (two warpgroups of 64 key rows; a loop over the
 * kv head's query heads in head order and over tiles of 64 queries in order); dQ per block of 128 queries (a loop
 * over tiles of 64 keys in order). Every output element is one thread's fixed-order sum, written once: the same bits
 * every run, no atomics, O(T) memory (D only). The other schedule (ORDERED_DQ below) folds dQ into the dK/dV kernel
 * with adds in key order; it is tested and slower today (see backend_cuda.c), the start of the next step.
 *
 * The products, with P = exp(scale * Q K^T - lse) and dS = P * (dP - D), dP = dO V^T:
 *   dK/dV kernel (rows = keys): S^T = K Q^T and dP^T = V dO^T (both operands K-major in shared memory, m64n64);
 *     dV += P^T dO and dK += dS^T Q (P^T, dS^T from registers; dO, Q as transposed B: m64n128);
 *   dQ kernel (rows = queries): S = Q K^T, dP = dO V^T (m64n64); dQ += dS K (K as transposed B, m64n128).
 * dK and dQ are scaled by the softmax scale at the end. */

#define KV_BLOCK 128 /* dK/dV: keys a block */
#define Q_TILE 64    /* dK/dV: queries a step of its loop */
#define Q_BLOCK 128  /* dQ: queries a block */
#define KV_TILE 64   /* dQ: keys a step of its loop */
/* dK/dV: K, V; two stages of Q, dO; two stages of lse, D, positions (64 each) */
#define DKDV_SHARED_BYTES(HD) (2 * TILE_OF(128, HD) + 4 * TILE_OF(64, HD) + 2 * 3 * 64 * 4 + 1024)
/* ...and (ORDERED_DQ, head_dim 128) the dS^T tile (128 keys x 64 queries bf16) after the rows, 1024-byte aligned */
#define DKDV_ORDERED_SHARED_BYTES (2 * TILE_OF(128, 128) + 4 * TILE_OF(64, 128) + 2048 + TILE_OF(64, 128) + 1024)
/* dQ: Q, dO; two stages of K, V */
#define DQ_SHARED_BYTES(HD) (2 * TILE_OF(128, HD) + 4 * TILE_OF(64, HD) + 1024)

/* D[b, h, t] = sum over head_dim of dout * out (fp32, each lane's HD / 32 values then a fixed shuffle tree): a warp a
 * row. */
template <int HD>
static __global__ void hopper_dot_kernel(float *D, const tt_bf16 *dout, const tt_bf16 *out, int T, int Hq,
                                         int64_t rows) {
    const int64_t row = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    if (row >= rows) return;
    /* tt_bf16 is the bits: widened by hand (a conversion operator would read them as an integer) */
    float sum;
    if constexpr (HD == 128) {
        const uint2 o = *(const uint2 *)(out + row * HD + lane * 4), d = *(const uint2 *)(dout + row * HD + lane * 4);
        sum = bf16_low(o.x) * bf16_low(d.x);
        sum += bf16_high(o.x) * bf16_high(d.x);
        sum += bf16_low(o.y) * bf16_low(d.y);
        sum += bf16_high(o.y) * bf16_high(d.y);
    } else {
        const uint32_t o = *(const uint32_t *)(out + row * HD + lane * 2),
                       d = *(const uint32_t *)(dout + row * HD + lane * 2);
        sum = bf16_low(o) * bf16_low(d);
        sum += bf16_high(o) * bf16_high(d);
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    if (lane == 0) {
        const int64_t b = row / ((int64_t)T * Hq), rest = row % ((int64_t)T * Hq);
        const int t = (int)(rest / Hq), h = (int)(rest % Hq);
        D[(b * Hq + h) * T + t] = sum;
    }
}

/* The dK/dV kernel's per-query values of a step: lse, D and (packed documents) the position, 64 of each a stage. */
#define ROW_VALUES 3

/* The dK/dV kernel's step i into stage `stage`: query head first_head + i / tiles, its query tile
 * first_tile + i % tiles: Q and dO (64 rows each) and their rows' lse, D and positions (64 each, after both stages;
 * zero past T). */
template <int HD>
static __device__ __forceinline__ void dkdv_load_step(const tt_bf16 *q, const tt_bf16 *dout, const float *lse,
                                                      const float *D, const int32_t *positions, uint32_t stages,
                                                      uint32_t rows_base, int b, int first_head, int first_tile,
                                                      int tiles, int T, int Hq, int i, int stage) {
    const int h = first_head + i / tiles, m0 = (first_tile + i % tiles) * Q_TILE, tid = threadIdx.x;
    const int64_t q_stride = (int64_t)Hq * HD;
    const int64_t q_offset = ((int64_t)b * T + m0) * q_stride + (int64_t)h * HD;
    const uint32_t at = stages + stage * 2 * TILE_OF(64, HD);
    load_tile<64, HD>(at, q + q_offset, q_stride, T - m0);
    load_tile<64, HD>(at + TILE_OF(64, HD), dout + q_offset, q_stride, T - m0);
    if (tid < (positions ? 3 : 2) * 64) {
        const int row = tid & 63, which = tid >> 6; /* lse, D, position */
        const bool valid = m0 + row < T;
        const void *from =
            which == 2 ? (const void *)(positions + (int64_t)b * T + (valid ? m0 + row : 0))
                       : (const void *)((which == 0 ? lse : D) + ((int64_t)b * Hq + h) * T + (valid ? m0 + row : 0));
        const int slot = which == 2 ? row : column_slot(row); /* lse and D in their readers' order */
        cp_async_4(rows_base + (uint32_t)(stage * ROW_VALUES + which) * 256 + slot * 4, from, valid);
    }
}

/* ORDERED_DQ: the block also makes its keys' share of dQ for each step's 64 queries (dQ_part = dS K over its 128 keys,
 * dS^T staged through shared memory as the transposed A) and adds it into dq_accum[B, Hq, T, 128] fp32 when its turn
 * comes: the key blocks of a (sequence, query head, query tile) add in key order, counted in turns[B, Hq, T / 64]
 * (both zero before the launch). The adds are L2 reductions; a step's turn passes on in the next step, once they are
 * done, so their latency hides behind that step's products. The same bits every run with no separate dQ kernel: 5
 * products a step instead of 7. Blocks wait only on blocks of lower index (launched first), so the chain moves. */
template <int HD, bool ORDERED_DQ>
static __global__ void __launch_bounds__(THREADS, 1)
    hopper_dkdv_kernel(tt_bf16 *dk, tt_bf16 *dv, const tt_bf16 *dout, const float *lse, const float *D,
                       const tt_bf16 *q, const tt_bf16 *k, const tt_bf16 *v, int T, int Hq, int Hkv, float scale_log2,
                       float scale, const int32_t *positions, float *dq_accum, int *turns) {
    static_assert(!ORDERED_DQ || HD == 128, "the ordered dQ is head_dim 128's");
    constexpr int TILE_BYTES = TILE_OF(128, HD), TILE64_BYTES = TILE_OF(64, HD);
    extern __shared__ unsigned char shared_raw[];
    const uint32_t base = (shared_address(shared_raw) + 1023) & ~1023u;
    const uint32_t k_tile = base, v_tile = base + TILE_BYTES, stages = base + 2 * TILE_BYTES;
    /* stage s: Q at stages + 2s tiles of 64 rows, dO after it; lse, D and positions of its 64 queries after both
     * stages; (ORDERED_DQ) dS^T of the step, 128 keys x 64 queries, after them */
    const uint32_t rows_base = stages + 4 * TILE64_BYTES;
    unsigned char *rows_generic = shared_raw + (rows_base - shared_address(shared_raw));
    const uint32_t ds_tile = rows_base + 2 * ROW_VALUES * 256 + 512; /* 1024-byte aligned: 1536 + 512 */

    const int tid = threadIdx.x, group = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int b = blockIdx.x / Hkv, kv_head = blockIdx.x % Hkv, heads = Hq / Hkv;
    const int n0 = blockIdx.y * KV_BLOCK; /* the first blocks have the most queries: they start first */
    const int64_t kv_stride = (int64_t)Hkv * HD;
    const int64_t kv_offset = (int64_t)b * T * kv_stride + (int64_t)kv_head * HD;
    const int first_tile = n0 / Q_TILE, all_tiles = (T + Q_TILE - 1) / Q_TILE;
    int tiles = all_tiles - first_tile;
    if (positions) {
        /* the query tiles whose first query's document starts at or before the block's last key: a prefix, since
         * document starts never decrease; counted by the whole block at once */
        const int32_t *p = positions + (int64_t)b * T;
        const int key_last = min(n0 + KV_BLOCK, T) - 1;
        int count = 0;
        for (int at = first_tile; at < all_tiles; at += THREADS) {
            const int qt = at + tid;
            count += __syncthreads_count(qt < all_tiles && qt * Q_TILE - p[qt * Q_TILE] <= key_last);
        }
        tiles = count;
    }

    load_tile<128, HD>(k_tile, k + kv_offset + (int64_t)n0 * kv_stride, kv_stride, T - n0);
    load_tile<128, HD>(v_tile, v + kv_offset + (int64_t)n0 * kv_stride, kv_stride, T - n0);
    /* step i: query head kv_head * heads + i / tiles, query tile first_tile + i % tiles */
    const int steps = heads * tiles;
    if (steps > 0)
        dkdv_load_step<HD>(q, dout, lse, D, positions, stages, rows_base, b, kv_head * heads, first_tile, tiles, T, Hq,
                           0, 0);
    cp_async_commit();

    float dk_acc[HD / 2], dv_acc[HD / 2], st[32], dpt[32];
#pragma unroll
    for (int i = 0; i < HD / 2; i++) dk_acc[i] = dv_acc[i] = 0.0f;
    const int key_g = n0 + group * 64 + warp * 16 + g, key_g8 = key_g + 8;
    const uint32_t k_rows = k_tile + group * 64 * 128, v_rows = v_tile + group * 64 * 128;
    int *pending_counter = NULL; /* (ORDERED_DQ) the previous step's turn counter, passed on once its adds are done */
    int pending_turn = 0;

    for (int i = 0; i < steps; i++) {
        cp_async_wait<0>();
        fence_proxy_async();
        __syncthreads(); /* step i's tiles are visible; every warpgroup is done with the other stage */
        if (i + 1 < steps)
            dkdv_load_step<HD>(q, dout, lse, D, positions, stages, rows_base, b, kv_head * heads, first_tile, tiles, T,
                               Hq, i + 1, (i + 1) & 1);
        cp_async_commit();
        const int stage = i & 1, m0 = (first_tile + i % tiles) * Q_TILE;
        const uint32_t q_at = stages + stage * 2 * TILE64_BYTES, do_at = q_at + TILE64_BYTES;
        const float *lse_rows = (const float *)(rows_generic + (stage * ROW_VALUES) * 256);
        const float *d_rows = (const float *)(rows_generic + (stage * ROW_VALUES + 1) * 256);
        const int32_t *position_rows = (const int32_t *)(rows_generic + (stage * ROW_VALUES + 2) * 256);

        /* S^T, then dP^T in a second group: P is computed while dP^T runs */
        wgmma_fence();
        product_over_head_dim<HD>(st, k_rows, q_at);
        product_over_head_dim<HD>(dpt, v_rows, do_at);
        wgmma_wait<1>();
        fence_accumulators_32(st);

        /* P^T in place: column c = query m0 + 8j + 2t (+1) */
        float lse_log2[16], d_columns[16];
        load_columns(lse_log2, lse_rows, t);
#pragma unroll
        for (int c = 0; c < 16; c++) lse_log2[c] *= LOG2E;
        probabilities_transposed(st, false, m0, t, T, key_g, key_g8, lse_log2, position_rows, positions, scale_log2);
        uint32_t pa[16], dsa[16];
        pack_a64(pa, st);
        wgmma_wait<0>();
        fence_accumulators_32(dpt);
        /* dV += P^T dO runs while dS^T = P^T (dP^T - D) is made */
        wgmma_fence();
#pragma unroll
        for (int kb = 0; kb < Q_TILE / 16; kb++)
            wgmma_rs_hd<HD>(dv_acc, pa + 4 * kb, descriptor(do_at + kb * 16 * 128, 64 * 128, 1024));
        wgmma_commit();
        load_columns(d_columns, d_rows, t);
        score_gradient_transposed(dpt, st, d_columns);
        pack_a64(dsa, dpt);
        if (ORDERED_DQ) {
            /* dS^T into shared memory (row = key, 64 queries = one 128-byte swizzled row), before dK's product reads
             * the same registers (a wgmma's register operand is not to be read while it runs) */
            const int row = group * 64 + warp * 16 + g;
#pragma unroll
            for (int j = 0; j < 8; j++) {
                const uint32_t chunk_g = (uint32_t)((j ^ (row & 7)) << 4),
                               chunk_g8 = (uint32_t)((j ^ ((row + 8) & 7)) << 4);
                asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(ds_tile + row * 128 + chunk_g + 4 * t), "r"(dsa[2 * j])
                             : "memory");
                asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(ds_tile + (row + 8) * 128 + chunk_g8 + 4 * t),
                             "r"(dsa[2 * j + 1])
                             : "memory");
            }
        }
        wgmma_fence();
#pragma unroll
        for (int kb = 0; kb < Q_TILE / 16; kb++)
            wgmma_rs_hd<HD>(dk_acc, dsa + 4 * kb, descriptor(q_at + kb * 16 * 128, 64 * 128, 1024));
        wgmma_commit();
        if (ORDERED_DQ) {
            /* the previous step's adds are done (each thread's own) before the barrier, while this step's products
             * run; past the barrier every thread's are, and that step's turn passes to the next key block */
            __threadfence();
            fence_proxy_async();
            __syncthreads(); /* both warpgroups' keys are in the tile */
            if (tid == 0 && pending_counter) store_release(pending_counter, pending_turn + 1);
            /* dQ_part[64 queries x this warpgroup's 64 of head_dim] = dS K over the block's 128 keys */
            float dq_part[32];
            wgmma_fence();
#pragma unroll
            for (int ks = 0; ks < KV_BLOCK / 16; ks++)
                wgmma_ss_n64_transposed(dq_part, descriptor(ds_tile + ks * 16 * 128, 64 * 128, 1024),
                                        descriptor(k_tile + group * 128 * 128 + ks * 16 * 128, 64 * 128, 1024), ks > 0);
            wgmma_commit();
            wgmma_wait<0>();
            fence_operands<16>(pa);
            fence_operands<16>(dsa);
            fence_accumulators_n<HD / 2>(dv_acc);
            fence_accumulators_n<HD / 2>(dk_acc);
            fence_accumulators_32(dq_part);

            /* the turn of this key block for (head, query tile): every key block before it whose keys reach the
             * tile's first document (packed documents: the blocks wholly before it skip the tile) */
            const int h = kv_head * heads + i / tiles, query_tile = m0 / Q_TILE;
            const int skipped = positions ? (m0 - positions[(int64_t)b * T + m0]) / KV_BLOCK : 0;
            const int turn = (int)blockIdx.y - skipped;
            int *counter = turns + ((int64_t)b * Hq + h) * all_tiles + query_tile;
            if (tid == 0)
                while (load_acquire(counter) != turn) __nanosleep(32);
            __syncthreads();
            /* adds in L2 (no value comes back); one key block at a time per element, in key order */
            float *accum = dq_accum + (((int64_t)b * Hq + h) * T + m0 + warp * 16 + g) * HD + group * 64 + 2 * t;
#pragma unroll
            for (int j = 0; j < 8; j++) {
                if (m0 + warp * 16 + g < T)
                    atomicAdd((float2 *)(accum + 8 * j), make_float2(dq_part[4 * j], dq_part[4 * j + 1]));
                if (m0 + warp * 16 + g + 8 < T)
                    atomicAdd((float2 *)(accum + 8 * HD + 8 * j), make_float2(dq_part[4 * j + 2], dq_part[4 * j + 3]));
            }
            pending_counter = counter; /* its turn passes on in the next step, once the adds are done */
            pending_turn = turn;
        } else {
            wgmma_wait<0>();
            fence_operands<16>(pa); /* dS^T was made while dV's product read P^T */
            fence_operands<16>(dsa);
            fence_accumulators_n<HD / 2>(dv_acc);
            fence_accumulators_n<HD / 2>(dk_acc);
        }
    }

    if (ORDERED_DQ) {
        __threadfence();
        __syncthreads();
        if (tid == 0 && pending_counter) store_release(pending_counter, pending_turn + 1);
    }
    tt_bf16 *dk_g = dk + kv_offset + (int64_t)key_g * kv_stride, *dv_g = dv + kv_offset + (int64_t)key_g * kv_stride;
#pragma unroll
    for (int j = 0; j < HD / 8; j++) {
        const int col = 8 * j + 2 * t;
        if (key_g < T) {
            *(uint32_t *)(dk_g + col) = pack_bf16(dk_acc[4 * j] * scale, dk_acc[4 * j + 1] * scale);
            *(uint32_t *)(dv_g + col) = pack_bf16(dv_acc[4 * j], dv_acc[4 * j + 1]);
        }
        if (key_g8 < T) {
            *(uint32_t *)(dk_g + 8 * kv_stride + col) = pack_bf16(dk_acc[4 * j + 2] * scale, dk_acc[4 * j + 3] * scale);
            *(uint32_t *)(dv_g + 8 * kv_stride + col) = pack_bf16(dv_acc[4 * j + 2], dv_acc[4 * j + 3]);
        }
    }
}

template <int HD>
static __global__ void __launch_bounds__(THREADS, 1)
    hopper_dq_kernel(tt_bf16 *dq, const tt_bf16 *dout, const float *lse, const float *D, const tt_bf16 *q,
                     const tt_bf16 *k, const tt_bf16 *v, int T, int Hq, int Hkv, float scale_log2, float scale,
                     const int32_t *positions) {
    constexpr int TILE_BYTES = TILE_OF(128, HD), TILE64_BYTES = TILE_OF(64, HD);
    extern __shared__ unsigned char shared_raw[];
    const uint32_t base = (shared_address(shared_raw) + 1023) & ~1023u;
    const uint32_t q_tile = base, do_tile = base + TILE_BYTES, stages = base + 2 * TILE_BYTES; /* stage: K then V */

    const int tid = threadIdx.x, group = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int b = blockIdx.x / Hq, h = blockIdx.x % Hq, kv_head = h / (Hq / Hkv);
    const int m0 = (gridDim.y - 1 - blockIdx.y) * Q_BLOCK; /* the longest blocks start first */
    const int64_t q_stride = (int64_t)Hq * HD, kv_stride = (int64_t)Hkv * HD;
    const int64_t q_offset = ((int64_t)b * T + m0) * q_stride + (int64_t)h * HD;
    const tt_bf16 *k_head = k + (int64_t)b * T * kv_stride + (int64_t)kv_head * HD;
    const tt_bf16 *v_head = v + (int64_t)b * T * kv_stride + (int64_t)kv_head * HD;
    /* keys from the document start of the block's first query to its last query */
    const int first_tile = document_start(positions, b, T, m0) / KV_TILE;
    const int n_first = first_tile * KV_TILE;
    const int key_tiles = (min(m0 + Q_BLOCK, T) + KV_TILE - 1) / KV_TILE - first_tile;

    load_tile<128, HD>(q_tile, q + q_offset, q_stride, T - m0);
    load_tile<128, HD>(do_tile, dout + q_offset, q_stride, T - m0);
    load_tile<64, HD>(stages, k_head + (int64_t)n_first * kv_stride, kv_stride, T - n_first);
    load_tile<64, HD>(stages + TILE64_BYTES, v_head + (int64_t)n_first * kv_stride, kv_stride, T - n_first);
    cp_async_commit();

    const int row_g = m0 + group * 64 + warp * 16 + g, row_g8 = row_g + 8;
    const int start_g = document_start(positions, b, T, row_g), start_g8 = document_start(positions, b, T, row_g8);
    const float *lse_head = lse + ((int64_t)b * Hq + h) * T, *d_head = D + ((int64_t)b * Hq + h) * T;
    const float lse_g = row_g < T ? lse_head[row_g] * LOG2E : 0.0f,
                lse_g8 = row_g8 < T ? lse_head[row_g8] * LOG2E : 0.0f;
    const float d_g = row_g < T ? d_head[row_g] : 0.0f, d_g8 = row_g8 < T ? d_head[row_g8] : 0.0f;
    const uint32_t q_rows = q_tile + group * 64 * 128, do_rows = do_tile + group * 64 * 128;

    float dq_acc[HD / 2], s[32], dp[32];
#pragma unroll
    for (int i = 0; i < HD / 2; i++) dq_acc[i] = 0.0f;
    for (int tile = 0; tile < key_tiles; tile++) {
        cp_async_wait<0>();
        fence_proxy_async();
        __syncthreads();
        if (tile + 1 < key_tiles) {
            const uint32_t next = stages + ((tile + 1) & 1) * 2 * TILE64_BYTES;
            const int n_next = n_first + (tile + 1) * KV_TILE;
            load_tile<64, HD>(next, k_head + (int64_t)n_next * kv_stride, kv_stride, T - n_next);
            load_tile<64, HD>(next + TILE64_BYTES, v_head + (int64_t)n_next * kv_stride, kv_stride, T - n_next);
        }
        cp_async_commit();
        const uint32_t k_at = stages + (tile & 1) * 2 * TILE64_BYTES, v_at = k_at + TILE64_BYTES;
        const int n0 = n_first + tile * KV_TILE;

        /* S, then dP in a second group: P is computed while dP runs */
        wgmma_fence();
        product_over_head_dim<HD>(s, q_rows, k_at);
        product_over_head_dim<HD>(dp, do_rows, v_at);
        wgmma_wait<1>();
        fence_accumulators_32(s);
        probabilities(s, false, n0, t, T, row_g, row_g8, start_g, start_g8, lse_g, lse_g8, scale_log2);
        wgmma_wait<0>();
        fence_accumulators_32(dp);
        score_gradient(dp, s, d_g, d_g8);
        uint32_t dsa[16];
        pack_a64(dsa, dp);
        wgmma_fence();
#pragma unroll
        for (int kb = 0; kb < KV_TILE / 16; kb++)
            wgmma_rs_hd<HD>(dq_acc, dsa + 4 * kb, descriptor(k_at + kb * 16 * 128, 64 * 128, 1024));
        wgmma_commit();
        wgmma_wait<0>();
        fence_operands<16>(dsa);
        fence_accumulators_n<HD / 2>(dq_acc);
    }

    tt_bf16 *dq_g = dq + ((int64_t)b * T + row_g) * q_stride + (int64_t)h * HD;
#pragma unroll
    for (int j = 0; j < HD / 8; j++) {
        const int col = 8 * j + 2 * t;
        if (row_g < T) *(uint32_t *)(dq_g + col) = pack_bf16(dq_acc[4 * j] * scale, dq_acc[4 * j + 1] * scale);
        if (row_g8 < T)
            *(uint32_t *)(dq_g + 8 * q_stride + col) = pack_bf16(dq_acc[4 * j + 2] * scale, dq_acc[4 * j + 3] * scale);
    }
}

/* dq[B*T, Hq*128] bf16 = scale * dq_accum[B, Hq, T, 128]: a thread per 4 values. */
static __global__ void hopper_dq_convert_kernel(tt_bf16 *dq, const float *dq_accum, int T, int Hq, float scale,
                                                int64_t count) {
    constexpr int DIM = 128; /* the ordered dQ is head_dim 128's */
    const int64_t at = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * 4;
    if (at >= count) return;
    const int64_t row = at / DIM, col = at % DIM; /* row of [B, Hq, T] */
    const int64_t b = row / ((int64_t)Hq * T), h = (row / T) % Hq, t = row % T;
    const float4 x = *(const float4 *)(dq_accum + at);
    uint2 packed;
    packed.x = pack_bf16(x.x * scale, x.y * scale);
    packed.y = pack_bf16(x.z * scale, x.w * scale);
    *(uint2 *)(dq + ((b * T + t) * Hq + h) * DIM + col) = packed;
}

extern "C" void tt_cuda_hopper_attention_dot(float *D, const tt_bf16 *dout, const tt_bf16 *out,
                                             const tt_attention_shape *s, cudaStream_t stream) {
    const int64_t rows = s->batch * s->seq_len * s->num_heads;
    const unsigned blocks = (unsigned)((rows * 32 + 255) / 256);
    if (s->head_dim == 64)
        hopper_dot_kernel<64><<<blocks, 256, 0, stream>>>(D, dout, out, (int)s->seq_len, (int)s->num_heads, rows);
    else hopper_dot_kernel<128><<<blocks, 256, 0, stream>>>(D, dout, out, (int)s->seq_len, (int)s->num_heads, rows);
    TT_CUDA_CHECK(cudaGetLastError());
}

/* The ordered-dQ backward's workspace after D: dq_accum, then the turn counters. */
static size_t ordered_accum_floats(const tt_attention_shape *s) {
    return (size_t)(s->batch * s->num_heads * s->seq_len * 128);
}

static size_t turn_count(const tt_attention_shape *s) {
    return (size_t)(s->batch * s->num_heads * ((s->seq_len + Q_TILE - 1) / Q_TILE));
}

static size_t d_floats_aligned(const tt_attention_shape *s) {
    return ((size_t)(s->batch * s->num_heads * s->seq_len) + 63) & ~(size_t)63; /* 256-byte aligned */
}

/* The shape is one the kernels take, the grid fits (T / 128 blocks in y), and every operand is 16-byte aligned. */
static void check_arguments(const tt_attention_shape *s, const void *const *pointers, int count) {
    TT_CHECK(tt_cuda_hopper_attention_supported(s),
             "the Hopper attention kernels take head_dim 64 or 128 and no sliding window (head_dim %lld, %lld heads, "
             "%lld kv heads, window %lld)",
             (long long)s->head_dim, (long long)s->num_heads, (long long)s->num_kv_heads, (long long)s->sliding_window);
    TT_CHECK(s->batch > 0 && s->num_heads > 0 && (s->seq_len + 127) / 128 <= 65535 &&
                 s->batch * s->num_heads <= INT32_MAX && s->batch * s->seq_len <= INT32_MAX,
             "the Hopper attention kernels take at most 65535 x 128 tokens a sequence (sequence_len %lld)",
             (long long)s->seq_len);
    for (int i = 0; i < count; i++)
        TT_CHECK(((uintptr_t)pointers[i] & 15) == 0, "the Hopper attention kernels: operand %d is not 16-byte aligned",
                 i);
}

extern "C" size_t tt_cuda_hopper_attention_backward_scratch_bytes(const tt_attention_shape *s) {
    return sizeof(float) * (size_t)(s->batch * s->num_heads * s->seq_len);
}

extern "C" size_t tt_cuda_hopper_attention_backward_ordered_scratch_bytes(const tt_attention_shape *s) {
    return sizeof(float) * (d_floats_aligned(s) + ordered_accum_floats(s)) + sizeof(int) * turn_count(s);
}

/* The backward with dQ's own kernel: D, then the dK/dV and dQ kernels at head_dim HD. */
template <int HD>
static void launch_backward(tt_bf16 *dq, tt_bf16 *dk, tt_bf16 *dv, const tt_bf16 *dout, const tt_bf16 *out,
                            const float *lse, const tt_bf16 *q, const tt_bf16 *k, const tt_bf16 *v,
                            const tt_attention_shape *s, void *scratch, cudaStream_t stream) {
    /* once per device (kernel_attributes.h): the attribute belongs to the current device's context */
    tt_cuda_kernel_shared_bytes((const void *)hopper_dkdv_kernel<HD, false>, (int)(DKDV_SHARED_BYTES(HD)));
    tt_cuda_kernel_shared_bytes((const void *)hopper_dq_kernel<HD>, (int)(DQ_SHARED_BYTES(HD)));
    const int T = (int)s->seq_len, Hq = (int)s->num_heads, Hkv = (int)s->num_kv_heads;
    const float scale = (float)s->scale, scale_log2 = (float)(s->scale * LOG2E);
    float *D = (float *)scratch;
    tt_cuda_hopper_attention_dot(D, dout, out, s, stream);
    const dim3 kv_grid((unsigned)(s->batch * Hkv), (unsigned)((T + KV_BLOCK - 1) / KV_BLOCK));
    hopper_dkdv_kernel<HD, false><<<kv_grid, THREADS, DKDV_SHARED_BYTES(HD), stream>>>(
        dk, dv, dout, lse, D, q, k, v, T, Hq, Hkv, scale_log2, scale, s->positions, NULL, NULL);
    TT_CUDA_CHECK(cudaGetLastError());
    const dim3 q_grid((unsigned)(s->batch * Hq), (unsigned)((T + Q_BLOCK - 1) / Q_BLOCK));
    hopper_dq_kernel<HD><<<q_grid, THREADS, DQ_SHARED_BYTES(HD), stream>>>(dq, dout, lse, D, q, k, v, T, Hq, Hkv,
                                                                           scale_log2, scale, s->positions);
    TT_CUDA_CHECK(cudaGetLastError());
}

extern "C" void tt_cuda_hopper_attention_backward(tt_bf16 *dq, tt_bf16 *dk, tt_bf16 *dv, const tt_bf16 *dout,
                                                  const tt_bf16 *out, const float *lse, const tt_bf16 *q,
                                                  const tt_bf16 *k, const tt_bf16 *v, const tt_attention_shape *s,
                                                  void *scratch, size_t scratch_bytes, bool ordered_dq,
                                                  cudaStream_t stream) {
    const void *pointers[] = {dq, dk, dv, dout, out, q, k, v};
    check_arguments(s, pointers, 8);
    const size_t need = ordered_dq ? tt_cuda_hopper_attention_backward_ordered_scratch_bytes(s)
                                   : tt_cuda_hopper_attention_backward_scratch_bytes(s);
    TT_CHECK(scratch && scratch_bytes >= need, "the Hopper attention backward's scratch is %zu bytes; %s needs %zu",
             scratch_bytes, ordered_dq ? "the ordered-dQ schedule" : "it", need);
    TT_CHECK(!ordered_dq || s->head_dim == 128, "the Hopper attention backward's ordered dQ takes head_dim 128");
    if (s->head_dim == 64) {
        launch_backward<64>(dq, dk, dv, dout, out, lse, q, k, v, s, scratch, stream);
        return;
    }
    /* once per device (kernel_attributes.h): the attribute belongs to the current device's context */
    tt_cuda_kernel_shared_bytes((const void *)hopper_dkdv_kernel<128, true>, (int)(DKDV_ORDERED_SHARED_BYTES));
    if (!ordered_dq) {
        launch_backward<128>(dq, dk, dv, dout, out, lse, q, k, v, s, scratch, stream);
        return;
    }
    const bool ordered = ordered_dq;
    const int T = (int)s->seq_len, Hq = (int)s->num_heads, Hkv = (int)s->num_kv_heads;
    const float scale = (float)s->scale, scale_log2 = (float)(s->scale * LOG2E);
    float *D = (float *)scratch;
    tt_cuda_hopper_attention_dot(D, dout, out, s, stream);
    const dim3 kv_grid((unsigned)(s->batch * Hkv), (unsigned)((T + KV_BLOCK - 1) / KV_BLOCK));
    if (ordered) {
        float *dq_accum = D + d_floats_aligned(s);
        int *turns = (int *)(dq_accum + ordered_accum_floats(s));
        /* dq_accum from zero (every key block adds: 0 + x is x) and the turns; both contiguous after D */
        TT_CUDA_CHECK(cudaMemsetAsync(dq_accum, 0,
                                      sizeof(float) * ordered_accum_floats(s) + sizeof(int) * turn_count(s), stream));
        hopper_dkdv_kernel<128, true><<<kv_grid, THREADS, DKDV_ORDERED_SHARED_BYTES, stream>>>(
            dk, dv, dout, lse, D, q, k, v, T, Hq, Hkv, scale_log2, scale, s->positions, dq_accum, turns);
        TT_CUDA_CHECK(cudaGetLastError());
        const int64_t count = (int64_t)ordered_accum_floats(s);
        hopper_dq_convert_kernel<<<(unsigned)((count / 4 + 255) / 256), 256, 0, stream>>>(dq, dq_accum, T, Hq, scale,
                                                                                          count);
        TT_CUDA_CHECK(cudaGetLastError());
    }
}

extern "C" int tt_cuda_hopper_attention_supported(const tt_attention_shape *s) {
    return (s->head_dim == 64 || s->head_dim == 128) && s->sliding_window == 0 && s->softcap == 0 &&
           s->num_kv_heads > 0 && s->num_heads % s->num_kv_heads == 0 && s->seq_len > 0;
}

extern "C" void tt_cuda_hopper_attention_forward(tt_bf16 *out, float *lse, const tt_bf16 *q, const tt_bf16 *k,
                                                 const tt_bf16 *v, const tt_attention_shape *s, cudaStream_t stream) {
    const void *pointers[] = {out, q, k, v};
    check_arguments(s, pointers, 4);
    const dim3 grid((unsigned)(s->batch * s->num_heads), (unsigned)((s->seq_len + BLOCK_M - 1) / BLOCK_M));
    const int T = (int)s->seq_len, Hq = (int)s->num_heads, Hkv = (int)s->num_kv_heads;
    const float scale_log2 = (float)(s->scale * LOG2E);
    if (s->head_dim == 64) {
        tt_cuda_kernel_shared_bytes((const void *)hopper_forward_kernel<64>, (int)(FWD_SHARED_BYTES(64)));
        hopper_forward_kernel<64>
            <<<grid, THREADS, FWD_SHARED_BYTES(64), stream>>>(out, lse, q, k, v, T, Hq, Hkv, scale_log2, s->positions);
    } else {
        tt_cuda_kernel_shared_bytes((const void *)hopper_forward_kernel<128>, (int)(FWD_SHARED_BYTES(128)));
        hopper_forward_kernel<128>
            <<<grid, THREADS, FWD_SHARED_BYTES(128), stream>>>(out, lse, q, k, v, T, Hq, Hkv, scale_log2, s->positions);
    }
    TT_CUDA_CHECK(cudaGetLastError());
}
