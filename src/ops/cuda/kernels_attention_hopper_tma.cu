/* tiertrain's Hopper attention forward with FlashAttention-3's pipeline (sm_90a): a producer warpgroup and two
 * consumer warpgroups. One producer thread loads Q once and the K and V tiles of 128 keys with TMA (tensor maps,
 * 128-byte swizzle: the same shared memory layout as kernels_attention_hopper.cu's cp.async tiles) into rings of
 * FWD_STAGES, each slot with a "full" barrier (the copy's bytes landed) and an "empty" one (both consumers are done
 * with it); the producer gives most of its registers to the consumers (setmaxnreg). The consumers never meet at a
 * block-wide barrier: each waits on the slot it reads, and they take turns issuing their products (two named
 * barriers, ping-pong), so one warpgroup's softmax runs while the other's products do. Within a consumer the softmax
 * of tile j also overlaps its own P_{j-1} V_{j-1} product, as in the cp.async kernel.
 *
 * Semantics are tt_cuda_hopper_attention_forward's (attention_hopper.h): causal, grouped-query heads, packed
 * documents, lse the natural-log log-sum-exp; each output one thread's fixed-order sum (the same bits run to run, and
 * the same bits as the cp.async kernel: the products and the softmax are the same, in the same order). Rows of a
 * tile past T are the next sequence's (or zeros past B * T): their keys are masked, and their queries not stored. */
#include <math.h>
#include <stdint.h>

#include <cuda.h> /* CUtensorMap and cuTensorMapEncodeTiled's types; the function comes through the runtime */
#include <cuda_bf16.h>

#include "ops/cuda/attention_hopper.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/hopper_pipeline.cuh"
#include "ops/cuda/hopper_wgmma.cuh"

#define PIPE_THREADS 384 /* a producer warpgroup, then two consumer warpgroups */
#define PIPE_BLOCK_M 128 /* queries a block: 64 a consumer */
#define PIPE_BLOCK_N 128 /* keys a tile */
#define PIPE_TILE_BYTES (128 * HEAD_DIM * 2)
#define FWD_STAGES 3
/* Q, then the K ring, then the V ring, then the barriers; 1024 bytes more to align the base */
#define PIPE_BARRIERS_OFFSET ((1 + 2 * FWD_STAGES) * PIPE_TILE_BYTES)
#define PIPE_SHARED_BYTES (PIPE_BARRIERS_OFFSET + (1 + 4 * FWD_STAGES) * 8 + 1024)
#define PRODUCER_REGISTERS 24
#define CONSUMER_REGISTERS 240

/* Named barrier ids (0 is __syncthreads'): consumer c waits on TURN_BARRIER + c for its turn to issue products. */
#define TURN_BARRIER 1

static __global__ void __launch_bounds__(PIPE_THREADS, 1)
    hopper_forward_pipelined_kernel(const __grid_constant__ CUtensorMap q_map, const __grid_constant__ CUtensorMap k_map,
                                    const __grid_constant__ CUtensorMap v_map, tt_bf16 *out, float *lse, int T, int Hq,
                                    int Hkv, float scale_log2, const int32_t *positions) {
    extern __shared__ unsigned char shared_raw[];
    const uint32_t base = (shared_address(shared_raw) + 1023) & ~1023u;
    const uint32_t q_tile = base, k_ring = base + PIPE_TILE_BYTES, v_ring = k_ring + FWD_STAGES * PIPE_TILE_BYTES;
    /* barriers: Q full; then for each slot s: K full, V full, K empty, V empty */
    const uint32_t barriers = base + PIPE_BARRIERS_OFFSET, q_full = barriers;
#define K_FULL(s) (barriers + 8 * (1 + (s)))
#define V_FULL(s) (barriers + 8 * (1 + FWD_STAGES + (s)))
#define K_EMPTY(s) (barriers + 8 * (1 + 2 * FWD_STAGES + (s)))
#define V_EMPTY(s) (barriers + 8 * (1 + 3 * FWD_STAGES + (s)))

    const int tid = threadIdx.x, warpgroup = tid >> 7;
    const int b = blockIdx.x / Hq, h = blockIdx.x % Hq, kv_head = h / (Hq / Hkv);
    const int m0 = (gridDim.y - 1 - blockIdx.y) * PIPE_BLOCK_M; /* the longest blocks start first */
    /* keys from the document start of the block's first query (document starts never decrease) to its last query */
    const int first_tile = document_start(positions, b, T, m0) / PIPE_BLOCK_N;
    const int n_first = first_tile * PIPE_BLOCK_N;
    const int tiles = (min(m0 + PIPE_BLOCK_M, T) + PIPE_BLOCK_N - 1) / PIPE_BLOCK_N - first_tile;

    if (tid == 0) {
        barrier_init(q_full, 1);
        for (int s = 0; s < FWD_STAGES; s++) {
            barrier_init(K_FULL(s), 1);
            barrier_init(V_FULL(s), 1);
            barrier_init(K_EMPTY(s), 2); /* one arrival from each consumer */
            barrier_init(V_EMPTY(s), 2);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    if (warpgroup == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(PRODUCER_REGISTERS));
        if (tid == 0) {
            barrier_expect_bytes(q_full, PIPE_TILE_BYTES);
            tma_load_tile<128>(q_tile, &q_map, h * HEAD_DIM, b * T + m0, q_full);
            for (int j = 0; j < tiles; j++) {
                const int s = j % FWD_STAGES, row = b * T + n_first + j * PIPE_BLOCK_N;
                const uint32_t empty_parity = ((j / FWD_STAGES) & 1) ^ 1;
                barrier_wait(K_EMPTY(s), empty_parity);
                barrier_expect_bytes(K_FULL(s), PIPE_TILE_BYTES);
                tma_load_tile<128>(k_ring + s * PIPE_TILE_BYTES, &k_map, kv_head * HEAD_DIM, row, K_FULL(s));
                barrier_wait(V_EMPTY(s), empty_parity);
                barrier_expect_bytes(V_FULL(s), PIPE_TILE_BYTES);
                tma_load_tile<128>(v_ring + s * PIPE_TILE_BYTES, &v_map, kv_head * HEAD_DIM, row, V_FULL(s));
            }
        }
        return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(CONSUMER_REGISTERS));

    const int consumer = warpgroup - 1, ctid = tid - 128, warp = (ctid >> 5) & 3, lane = ctid & 31, g = lane >> 2,
              t = lane & 3;
    const bool leader = (ctid & 127) == 0; /* arrives on the empty barriers for its warpgroup */
    const int64_t q_stride = (int64_t)Hq * HEAD_DIM;
    const int row_g = m0 + consumer * 64 + warp * 16 + g, row_g8 = row_g + 8;
    const int start_g = document_start(positions, b, T, row_g), start_g8 = document_start(positions, b, T, row_g8);
    const int warp_first = m0 + consumer * 64 + warp * 16;
    const int warp_start_max = document_start(positions, b, T, min(warp_first + 15, T - 1));

    float o[64], s[64];
#pragma unroll
    for (int i = 0; i < 64; i++) o[i] = 0.0f;
    uint32_t p[32]; /* P_{j-1}, bf16 pairs in the register A layout */
    float max_g = -INFINITY, max_g8 = -INFINITY, sum_g = 0.0f, sum_g8 = 0.0f;

    if (consumer == 1) named_barrier_arrive(TURN_BARRIER, 256); /* consumer 0 issues first */
    barrier_wait(q_full, 0);
    for (int j = 0; j < tiles; j++) {
        const int slot = j % FWD_STAGES, previous = (j + FWD_STAGES - 1) % FWD_STAGES;
        const int n0 = n_first + j * PIPE_BLOCK_N;
        barrier_wait(K_FULL(slot), (j / FWD_STAGES) & 1);
        if (j > 0) barrier_wait(V_FULL(previous), ((j - 1) / FWD_STAGES) & 1);

        named_barrier_sync(TURN_BARRIER + consumer, 256); /* this consumer's turn to issue */
        const uint32_t k_tile = k_ring + slot * PIPE_TILE_BYTES;
        wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < HEAD_DIM / 16; ks++) {
            const uint32_t within = k_slice<128>(ks);
            wgmma_ss(s, descriptor(q_tile + consumer * 64 * 128 + within, 16, 1024),
                     descriptor(k_tile + within, 16, 1024), ks > 0);
        }
        wgmma_commit();
        if (j > 0) {
            const uint32_t v_tile = v_ring + previous * PIPE_TILE_BYTES;
            wgmma_fence(); /* P_{j-1} and the rescaled O were written since the last fence */
#pragma unroll
            for (int kb = 0; kb < PIPE_BLOCK_N / 16; kb++)
                wgmma_rs(o, p + 4 * kb, descriptor(v_tile + kb * 16 * 128, 128 * 128, 1024));
            wgmma_commit();
            /* the other consumer's turn (the last tile's turn has no one after it on consumer 0's barrier) */
            if (consumer == 0 || j + 1 < tiles) named_barrier_arrive(TURN_BARRIER + 1 - consumer, 256);
            wgmma_wait<1>(); /* S_j, while P_{j-1} V_{j-1} runs on */
        } else {
            if (consumer == 0 || j + 1 < tiles) named_barrier_arrive(TURN_BARRIER + 1 - consumer, 256);
            wgmma_wait<0>();
        }
        fence_accumulators(s);
        if (leader) barrier_arrive(K_EMPTY(slot)); /* S_j is done with K_j */

        if (n0 + PIPE_BLOCK_N - 1 > warp_first || n0 + PIPE_BLOCK_N > T || n0 < warp_start_max) {
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
        const float new_max_g = fmaxf(max_g, quad_max(tile_max_g) * scale_log2);
        const float new_max_g8 = fmaxf(max_g8, quad_max(tile_max_g8) * scale_log2);
        const float shift_g = new_max_g == -INFINITY ? 0.0f : new_max_g;
        const float shift_g8 = new_max_g8 == -INFINITY ? 0.0f : new_max_g8;
        const float correction_g = fast_exp2(max_g - shift_g), correction_g8 = fast_exp2(max_g8 - shift_g8);
        max_g = new_max_g;
        max_g8 = new_max_g8;
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
        sum_g = sum_g * correction_g + tile_sum_g;
        sum_g8 = sum_g8 * correction_g8 + tile_sum_g8;
        wgmma_wait<0>(); /* P_{j-1} V_{j-1} is in O */
        fence_accumulators(o);
        fence_operands<32>(p);
        if (j > 0 && leader) barrier_arrive(V_EMPTY(previous));
#pragma unroll
        for (int c = 0; c < 16; c++) {
            o[4 * c] *= correction_g;
            o[4 * c + 1] *= correction_g;
            o[4 * c + 2] *= correction_g8;
            o[4 * c + 3] *= correction_g8;
            p[2 * c] = pack_bf16(s[4 * c], s[4 * c + 1]);
            p[2 * c + 1] = pack_bf16(s[4 * c + 2], s[4 * c + 3]);
        }
    }
    {
        const int last = (tiles - 1) % FWD_STAGES;
        barrier_wait(V_FULL(last), ((tiles - 1) / FWD_STAGES) & 1);
        wgmma_fence();
#pragma unroll
        for (int kb = 0; kb < PIPE_BLOCK_N / 16; kb++)
            wgmma_rs(o, p + 4 * kb, descriptor(v_ring + last * PIPE_TILE_BYTES + kb * 16 * 128, 128 * 128, 1024));
        wgmma_commit();
        wgmma_wait<0>();
        fence_accumulators(o);
        fence_operands<32>(p);
    }
#undef K_FULL
#undef V_FULL
#undef K_EMPTY
#undef V_EMPTY

    sum_g = quad_sum(sum_g);
    sum_g8 = quad_sum(sum_g8);
    const float inv_g = sum_g > 0.0f ? 1.0f / sum_g : 0.0f, inv_g8 = sum_g8 > 0.0f ? 1.0f / sum_g8 : 0.0f;
    tt_bf16 *out_g = out + ((int64_t)b * T + row_g) * q_stride + (int64_t)h * HEAD_DIM;
    tt_bf16 *out_g8 = out_g + 8 * q_stride;
#pragma unroll
    for (int c = 0; c < 16; c++) {
        const int col = 8 * c + 2 * t;
        if (row_g < T) *(uint32_t *)(out_g + col) = pack_bf16(o[4 * c] * inv_g, o[4 * c + 1] * inv_g);
        if (row_g8 < T) *(uint32_t *)(out_g8 + col) = pack_bf16(o[4 * c + 2] * inv_g8, o[4 * c + 3] * inv_g8);
    }
    if (t == 0) {
        float *lse_head = lse + ((int64_t)b * Hq + h) * T;
        if (row_g < T) lse_head[row_g] = (max_g + log2f(sum_g)) * LN2;
        if (row_g8 < T) lse_head[row_g8] = (max_g8 + log2f(sum_g8)) * LN2;
    }
}

/* ---- backward ----------------------------------------------------------------------------------------------
 * The same products, order and bits as kernels_attention_hopper.cu's dK/dV and dQ kernels, with the loads moved to
 * a producer warpgroup: TMA for the tiles, the producer's threads for the rows' lse, D and positions (plain shared
 * stores, released by their arrivals on the slot's full barrier). */

#define BWD_STAGES 3
#define PIPE_TILE64_BYTES (64 * HEAD_DIM * 2)
#define BWD_ROW_VALUES 3 /* lse, D, position: 64 of each a slot */
/* dK/dV: K, V; the ring of (Q, dO) slots; the ring of row values; the barriers (K/V full; full and empty a slot) */
#define DKDV_PIPE_BARRIERS_OFFSET (2 * PIPE_TILE_BYTES + BWD_STAGES * (2 * PIPE_TILE64_BYTES + BWD_ROW_VALUES * 256))
#define DKDV_PIPE_SHARED_BYTES (DKDV_PIPE_BARRIERS_OFFSET + (1 + 2 * BWD_STAGES) * 8 + 1024)
/* dQ: Q, dO (128 rows each); the ring of (K, V) slots of 64 keys; the barriers (Q/dO full; full and empty a slot) */
#define DQ_PIPE_BARRIERS_OFFSET (2 * PIPE_TILE_BYTES + BWD_STAGES * 2 * PIPE_TILE64_BYTES)
#define DQ_PIPE_SHARED_BYTES (DQ_PIPE_BARRIERS_OFFSET + (1 + 2 * BWD_STAGES) * 8 + 1024)

static __global__ void __launch_bounds__(PIPE_THREADS, 1)
    hopper_dkdv_pipelined_kernel(const __grid_constant__ CUtensorMap k_map, const __grid_constant__ CUtensorMap v_map,
                                 const __grid_constant__ CUtensorMap q_map64, const __grid_constant__ CUtensorMap do_map64,
                                 tt_bf16 *dk, tt_bf16 *dv, const float *lse, const float *D, int T, int Hq, int Hkv,
                                 float scale_log2, float scale, const int32_t *positions) {
    extern __shared__ unsigned char shared_raw[];
    const uint32_t raw = shared_address(shared_raw), base = (raw + 1023) & ~1023u;
    const uint32_t k_tile = base, v_tile = base + PIPE_TILE_BYTES, ring = base + 2 * PIPE_TILE_BYTES;
    const uint32_t rows_base = ring + BWD_STAGES * 2 * PIPE_TILE64_BYTES;
    unsigned char *rows_generic = shared_raw + (rows_base - raw);
    const uint32_t barriers = base + DKDV_PIPE_BARRIERS_OFFSET, kv_full = barriers;
#define FULL(s) (barriers + 8 * (1 + (s)))
#define EMPTY(s) (barriers + 8 * (1 + BWD_STAGES + (s)))

    const int tid = threadIdx.x, warpgroup = tid >> 7;
    const int b = blockIdx.x / Hkv, kv_head = blockIdx.x % Hkv, heads = Hq / Hkv;
    const int n0 = blockIdx.y * 128; /* the first blocks have the most queries: they start first */
    const int first_tile = n0 / 64, all_tiles = (T + 63) / 64;
    int tiles = all_tiles - first_tile;
    if (positions) { /* the query tiles whose document reaches the block's keys: a prefix (the cp.async kernel's) */
        const int32_t *p = positions + (int64_t)b * T;
        const int key_last = min(n0 + 128, T) - 1;
        int count = 0;
        for (int at = first_tile; at < all_tiles; at += PIPE_THREADS) {
            const int qt = at + tid;
            count += __syncthreads_count(qt < all_tiles && qt * 64 - p[qt * 64] <= key_last);
        }
        tiles = count;
    }
    const int steps = heads * tiles; /* step i: query head kv_head * heads + i / tiles, query tile first_tile + i % tiles */

    if (tid == 0) {
        barrier_init(kv_full, 1);
        for (int s = 0; s < BWD_STAGES; s++) {
            barrier_init(FULL(s), 128); /* every producer thread, after its row values (thread 0's with the bytes) */
            barrier_init(EMPTY(s), 2);  /* each consumer */
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    if (warpgroup == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(PRODUCER_REGISTERS));
        if (tid == 0) {
            barrier_expect_bytes(kv_full, 2 * PIPE_TILE_BYTES);
            tma_load_tile<128>(k_tile, &k_map, kv_head * HEAD_DIM, b * T + n0, kv_full);
            tma_load_tile<128>(v_tile, &v_map, kv_head * HEAD_DIM, b * T + n0, kv_full);
        }
        for (int i = 0; i < steps; i++) {
            const int slot = i % BWD_STAGES, h = kv_head * heads + i / tiles, m0 = (first_tile + i % tiles) * 64;
            barrier_wait(EMPTY(slot), ((i / BWD_STAGES) & 1) ^ 1);
            /* row values: thread r < 64 lse and position of query m0 + r, thread 64 + r its D (zero past T) */
            const int r = tid & 63, query = m0 + r;
            float *values = (float *)(rows_generic + slot * BWD_ROW_VALUES * 256);
            if (tid < 64) {
                values[r] = query < T ? lse[((int64_t)b * Hq + h) * T + query] : 0.0f;
                if (positions) ((int32_t *)values)[128 + r] = query < T ? positions[(int64_t)b * T + query] : 0;
            } else {
                values[64 + r] = query < T ? D[((int64_t)b * Hq + h) * T + query] : 0.0f;
            }
            if (tid == 0) {
                barrier_expect_bytes(FULL(slot), 2 * PIPE_TILE64_BYTES);
                const uint32_t at = ring + slot * 2 * PIPE_TILE64_BYTES;
                tma_load_tile<64>(at, &q_map64, h * HEAD_DIM, b * T + m0, FULL(slot));
                tma_load_tile<64>(at + PIPE_TILE64_BYTES, &do_map64, h * HEAD_DIM, b * T + m0, FULL(slot));
            } else {
                barrier_arrive(FULL(slot));
            }
        }
        return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(CONSUMER_REGISTERS));

    const int consumer = warpgroup - 1, ctid = tid - 128, warp = (ctid >> 5) & 3, lane = ctid & 31, g = lane >> 2,
              t = lane & 3;
    const bool leader = (ctid & 127) == 0;
    const int64_t kv_stride = (int64_t)Hkv * HEAD_DIM;
    const int64_t kv_offset = (int64_t)b * T * kv_stride + (int64_t)kv_head * HEAD_DIM;
    float dk_acc[64], dv_acc[64], st[32], dpt[32];
#pragma unroll
    for (int i = 0; i < 64; i++) dk_acc[i] = dv_acc[i] = 0.0f;
    const int key_g = n0 + consumer * 64 + warp * 16 + g, key_g8 = key_g + 8;
    const uint32_t k_rows = k_tile + consumer * 64 * 128, v_rows = v_tile + consumer * 64 * 128;

    barrier_wait(kv_full, 0);
    for (int i = 0; i < steps; i++) {
        const int slot = i % BWD_STAGES, m0 = (first_tile + i % tiles) * 64;
        barrier_wait(FULL(slot), (i / BWD_STAGES) & 1);
        const uint32_t q_at = ring + slot * 2 * PIPE_TILE64_BYTES, do_at = q_at + PIPE_TILE64_BYTES;
        const float *lse_rows = (const float *)(rows_generic + slot * BWD_ROW_VALUES * 256);
        const float *d_rows = lse_rows + 64;
        const int32_t *position_rows = (const int32_t *)(lse_rows + 128);

        wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < HEAD_DIM / 16; ks++)
            wgmma_ss_n64(st, descriptor(k_rows + k_slice<128>(ks), 16, 1024),
                         descriptor(q_at + k_slice<64>(ks), 16, 1024), ks > 0);
        wgmma_commit();
#pragma unroll
        for (int ks = 0; ks < HEAD_DIM / 16; ks++)
            wgmma_ss_n64(dpt, descriptor(v_rows + k_slice<128>(ks), 16, 1024),
                         descriptor(do_at + k_slice<64>(ks), 16, 1024), ks > 0);
        wgmma_commit();
        wgmma_wait<1>();
        fence_accumulators_32(st);
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int col = 8 * j + 2 * t + (e & 1), query = m0 + col, key = e < 2 ? key_g : key_g8;
                const bool visible = key <= query && query < T && key < T &&
                                     (!positions || key >= query - position_rows[col]);
                st[4 * j + e] = visible ? fast_exp2(st[4 * j + e] * scale_log2 - lse_rows[col] * LOG2E) : 0.0f;
            }
        uint32_t pa[16], dsa[16];
        pack_a64(pa, st);
        wgmma_wait<0>();
        fence_accumulators_32(dpt);
        wgmma_fence();
#pragma unroll
        for (int kb = 0; kb < 4; kb++)
            wgmma_rs(dv_acc, pa + 4 * kb, descriptor(do_at + kb * 16 * 128, 64 * 128, 1024));
        wgmma_commit();
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int col = 8 * j + 2 * t + (e & 1);
                dpt[4 * j + e] = st[4 * j + e] * (dpt[4 * j + e] - d_rows[col]);
            }
        pack_a64(dsa, dpt);
        wgmma_fence();
#pragma unroll
        for (int kb = 0; kb < 4; kb++)
            wgmma_rs(dk_acc, dsa + 4 * kb, descriptor(q_at + kb * 16 * 128, 64 * 128, 1024));
        wgmma_commit();
        wgmma_wait<0>();
        fence_operands<16>(pa);
        fence_operands<16>(dsa);
        fence_accumulators(dv_acc);
        fence_accumulators(dk_acc);
        if (leader) barrier_arrive(EMPTY(slot)); /* this consumer is done with the slot's Q, dO and rows */
    }
#undef FULL
#undef EMPTY

    tt_bf16 *dk_g = dk + kv_offset + (int64_t)key_g * kv_stride, *dv_g = dv + kv_offset + (int64_t)key_g * kv_stride;
#pragma unroll
    for (int j = 0; j < 16; j++) {
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

static __global__ void __launch_bounds__(PIPE_THREADS, 1)
    hopper_dq_pipelined_kernel(const __grid_constant__ CUtensorMap q_map, const __grid_constant__ CUtensorMap do_map,
                               const __grid_constant__ CUtensorMap k_map64, const __grid_constant__ CUtensorMap v_map64,
                               tt_bf16 *dq, const float *lse, const float *D, int T, int Hq, int Hkv, float scale_log2,
                               float scale, const int32_t *positions) {
    extern __shared__ unsigned char shared_raw[];
    const uint32_t base = (shared_address(shared_raw) + 1023) & ~1023u;
    const uint32_t q_tile = base, do_tile = base + PIPE_TILE_BYTES, ring = base + 2 * PIPE_TILE_BYTES;
    const uint32_t barriers = base + DQ_PIPE_BARRIERS_OFFSET, qd_full = barriers;
#define FULL(s) (barriers + 8 * (1 + (s)))
#define EMPTY(s) (barriers + 8 * (1 + BWD_STAGES + (s)))

    const int tid = threadIdx.x, warpgroup = tid >> 7;
    const int b = blockIdx.x / Hq, h = blockIdx.x % Hq, kv_head = h / (Hq / Hkv);
    const int m0 = (gridDim.y - 1 - blockIdx.y) * 128; /* the longest blocks start first */
    const int first_tile = document_start(positions, b, T, m0) / 64, n_first = first_tile * 64;
    const int key_tiles = (min(m0 + 128, T) + 63) / 64 - first_tile;

    if (tid == 0) {
        barrier_init(qd_full, 1);
        for (int s = 0; s < BWD_STAGES; s++) {
            barrier_init(FULL(s), 1);
            barrier_init(EMPTY(s), 2);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    if (warpgroup == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(PRODUCER_REGISTERS));
        if (tid == 0) {
            barrier_expect_bytes(qd_full, 2 * PIPE_TILE_BYTES);
            tma_load_tile<128>(q_tile, &q_map, h * HEAD_DIM, b * T + m0, qd_full);
            tma_load_tile<128>(do_tile, &do_map, h * HEAD_DIM, b * T + m0, qd_full);
            for (int j = 0; j < key_tiles; j++) {
                const int slot = j % BWD_STAGES, row = b * T + n_first + j * 64;
                barrier_wait(EMPTY(slot), ((j / BWD_STAGES) & 1) ^ 1);
                barrier_expect_bytes(FULL(slot), 2 * PIPE_TILE64_BYTES);
                const uint32_t at = ring + slot * 2 * PIPE_TILE64_BYTES;
                tma_load_tile<64>(at, &k_map64, kv_head * HEAD_DIM, row, FULL(slot));
                tma_load_tile<64>(at + PIPE_TILE64_BYTES, &v_map64, kv_head * HEAD_DIM, row, FULL(slot));
            }
        }
        return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(CONSUMER_REGISTERS));

    const int consumer = warpgroup - 1, ctid = tid - 128, warp = (ctid >> 5) & 3, lane = ctid & 31, g = lane >> 2,
              t = lane & 3;
    const bool leader = (ctid & 127) == 0;
    const int64_t q_stride = (int64_t)Hq * HEAD_DIM;
    const int row_g = m0 + consumer * 64 + warp * 16 + g, row_g8 = row_g + 8;
    const int start_g = document_start(positions, b, T, row_g), start_g8 = document_start(positions, b, T, row_g8);
    const float *lse_head = lse + ((int64_t)b * Hq + h) * T, *d_head = D + ((int64_t)b * Hq + h) * T;
    const float lse_g = row_g < T ? lse_head[row_g] * LOG2E : 0.0f,
                lse_g8 = row_g8 < T ? lse_head[row_g8] * LOG2E : 0.0f;
    const float d_g = row_g < T ? d_head[row_g] : 0.0f, d_g8 = row_g8 < T ? d_head[row_g8] : 0.0f;
    const uint32_t q_rows = q_tile + consumer * 64 * 128, do_rows = do_tile + consumer * 64 * 128;

    float dq_acc[64], s[32], dp[32];
#pragma unroll
    for (int i = 0; i < 64; i++) dq_acc[i] = 0.0f;
    barrier_wait(qd_full, 0);
    for (int j = 0; j < key_tiles; j++) {
        const int slot = j % BWD_STAGES, n0 = n_first + j * 64;
        barrier_wait(FULL(slot), (j / BWD_STAGES) & 1);
        const uint32_t k_at = ring + slot * 2 * PIPE_TILE64_BYTES, v_at = k_at + PIPE_TILE64_BYTES;
        wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < HEAD_DIM / 16; ks++)
            wgmma_ss_n64(s, descriptor(q_rows + k_slice<128>(ks), 16, 1024),
                         descriptor(k_at + k_slice<64>(ks), 16, 1024), ks > 0);
        wgmma_commit();
#pragma unroll
        for (int ks = 0; ks < HEAD_DIM / 16; ks++)
            wgmma_ss_n64(dp, descriptor(do_rows + k_slice<128>(ks), 16, 1024),
                         descriptor(v_at + k_slice<64>(ks), 16, 1024), ks > 0);
        wgmma_commit();
        wgmma_wait<1>();
        fence_accumulators_32(s);
#pragma unroll
        for (int c = 0; c < 8; c++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int key = n0 + 8 * c + 2 * t + (e & 1), row = e < 2 ? row_g : row_g8;
                const bool visible = key <= row && key < T && row < T && key >= (e < 2 ? start_g : start_g8);
                s[4 * c + e] = visible ? fast_exp2(s[4 * c + e] * scale_log2 - (e < 2 ? lse_g : lse_g8)) : 0.0f;
            }
        wgmma_wait<0>();
        fence_accumulators_32(dp);
#pragma unroll
        for (int c = 0; c < 8; c++)
#pragma unroll
            for (int e = 0; e < 4; e++) dp[4 * c + e] = s[4 * c + e] * (dp[4 * c + e] - (e < 2 ? d_g : d_g8));
        uint32_t dsa[16];
        pack_a64(dsa, dp);
        wgmma_fence();
#pragma unroll
        for (int kb = 0; kb < 4; kb++)
            wgmma_rs(dq_acc, dsa + 4 * kb, descriptor(k_at + kb * 16 * 128, 64 * 128, 1024));
        wgmma_commit();
        wgmma_wait<0>();
        fence_operands<16>(dsa);
        fence_accumulators(dq_acc);
        if (leader) barrier_arrive(EMPTY(slot)); /* this consumer is done with the slot's K and V */
    }
#undef FULL
#undef EMPTY

    tt_bf16 *dq_g = dq + ((int64_t)b * T + row_g) * q_stride + (int64_t)h * HEAD_DIM;
#pragma unroll
    for (int c = 0; c < 16; c++) {
        const int col = 8 * c + 2 * t;
        if (row_g < T) *(uint32_t *)(dq_g + col) = pack_bf16(dq_acc[4 * c] * scale, dq_acc[4 * c + 1] * scale);
        if (row_g8 < T)
            *(uint32_t *)(dq_g + 8 * q_stride + col) = pack_bf16(dq_acc[4 * c + 2] * scale, dq_acc[4 * c + 3] * scale);
    }
}

/* ---- host: tensor maps ---- */

typedef CUresult (*encode_tiled_fn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,
                                    const cuuint64_t *, const cuuint32_t *, const cuuint32_t *, CUtensorMapInterleave,
                                    CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

/* cuTensorMapEncodeTiled from the driver through the runtime (no link against libcuda). */
static encode_tiled_fn encode_tiled(void) {
    static encode_tiled_fn fn = NULL;
    if (!fn) {
        cudaDriverEntryPointQueryResult found;
        void *at = NULL;
        TT_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &at, 12000, cudaEnableDefault, &found));
        TT_CHECK(found == cudaDriverEntryPointSuccess && at,
                 "the CUDA driver has no cuTensorMapEncodeTiled (TMA needs a CUDA 12 driver or later)");
        fn = (encode_tiled_fn)at;
    }
    return fn;
}

/* The map of a row-major bf16 matrix [rows, columns] read in boxes of 64 columns x box_rows rows, 128-byte
 * swizzled. */
static CUtensorMap matrix_map(const void *base, int64_t rows, int64_t columns, int box_rows) {
    CUtensorMap map;
    const cuuint64_t dims[2] = {(cuuint64_t)columns, (cuuint64_t)rows};
    const cuuint64_t strides[1] = {(cuuint64_t)columns * 2};
    const cuuint32_t box[2] = {64, (cuuint32_t)box_rows}, element_strides[2] = {1, 1};
    const CUresult r = encode_tiled()(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, (void *)base, dims, strides, box,
                                      element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    TT_CHECK(r == CUDA_SUCCESS, "cuTensorMapEncodeTiled failed (%d) for a [%lld, %lld] bf16 matrix", (int)r,
             (long long)rows, (long long)columns);
    return map;
}

extern "C" void tt_cuda_hopper_attention_forward_pipelined(tt_bf16 *out, float *lse, const tt_bf16 *q,
                                                           const tt_bf16 *k, const tt_bf16 *v,
                                                           const tt_attention_shape *s, cudaStream_t stream) {
    TT_CHECK(tt_cuda_hopper_attention_supported(s),
             "the Hopper attention forward takes head_dim 128 and no sliding window");
    TT_CHECK(s->batch * s->seq_len <= INT32_MAX, "the Hopper attention forward addresses rows with 32 bits");
    TT_CUDA_CHECK(cudaFuncSetAttribute(hopper_forward_pipelined_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       PIPE_SHARED_BYTES));
    const int64_t rows = s->batch * s->seq_len;
    const CUtensorMap q_map = matrix_map(q, rows, s->num_heads * HEAD_DIM, 128);
    const CUtensorMap k_map = matrix_map(k, rows, s->num_kv_heads * HEAD_DIM, 128);
    const CUtensorMap v_map = matrix_map(v, rows, s->num_kv_heads * HEAD_DIM, 128);
    const dim3 grid((unsigned)(s->batch * s->num_heads), (unsigned)((s->seq_len + PIPE_BLOCK_M - 1) / PIPE_BLOCK_M));
    hopper_forward_pipelined_kernel<<<grid, PIPE_THREADS, PIPE_SHARED_BYTES, stream>>>(
        q_map, k_map, v_map, out, lse, (int)s->seq_len, (int)s->num_heads, (int)s->num_kv_heads,
        (float)(s->scale * LOG2E), s->positions);
    TT_CUDA_CHECK(cudaGetLastError());
}

extern "C" void tt_cuda_hopper_attention_backward_pipelined(tt_bf16 *dq, tt_bf16 *dk, tt_bf16 *dv, const tt_bf16 *dout,
                                                            const tt_bf16 *out, const float *lse, const tt_bf16 *q,
                                                            const tt_bf16 *k, const tt_bf16 *v,
                                                            const tt_attention_shape *s, void *scratch,
                                                            cudaStream_t stream) {
    TT_CHECK(tt_cuda_hopper_attention_supported(s),
             "the Hopper attention backward takes head_dim 128 and no sliding window");
    TT_CHECK(s->batch * s->seq_len <= INT32_MAX, "the Hopper attention backward addresses rows with 32 bits");
    TT_CUDA_CHECK(cudaFuncSetAttribute(hopper_dkdv_pipelined_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       DKDV_PIPE_SHARED_BYTES));
    TT_CUDA_CHECK(cudaFuncSetAttribute(hopper_dq_pipelined_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       DQ_PIPE_SHARED_BYTES));
    const int T = (int)s->seq_len, Hq = (int)s->num_heads, Hkv = (int)s->num_kv_heads;
    const float scale = (float)s->scale, scale_log2 = (float)(s->scale * LOG2E);
    const int64_t rows = s->batch * s->seq_len;
    float *D = (float *)scratch;
    tt_cuda_hopper_attention_dot(D, dout, out, s, stream);
    const CUtensorMap k_map = matrix_map(k, rows, Hkv * HEAD_DIM, 128), v_map = matrix_map(v, rows, Hkv * HEAD_DIM, 128);
    const CUtensorMap q_map64 = matrix_map(q, rows, Hq * HEAD_DIM, 64), do_map64 = matrix_map(dout, rows, Hq * HEAD_DIM, 64);
    const dim3 kv_grid((unsigned)(s->batch * Hkv), (unsigned)((T + 127) / 128));
    hopper_dkdv_pipelined_kernel<<<kv_grid, PIPE_THREADS, DKDV_PIPE_SHARED_BYTES, stream>>>(
        k_map, v_map, q_map64, do_map64, dk, dv, lse, D, T, Hq, Hkv, scale_log2, scale, s->positions);
    TT_CUDA_CHECK(cudaGetLastError());
    const CUtensorMap q_map = matrix_map(q, rows, Hq * HEAD_DIM, 128), do_map = matrix_map(dout, rows, Hq * HEAD_DIM, 128);
    const CUtensorMap k_map64 = matrix_map(k, rows, Hkv * HEAD_DIM, 64), v_map64 = matrix_map(v, rows, Hkv * HEAD_DIM, 64);
    const dim3 q_grid((unsigned)(s->batch * Hq), (unsigned)((T + 127) / 128));
    hopper_dq_pipelined_kernel<<<q_grid, PIPE_THREADS, DQ_PIPE_SHARED_BYTES, stream>>>(
        q_map, do_map, k_map64, v_map64, dq, lse, D, T, Hq, Hkv, scale_log2, scale, s->positions);
    TT_CUDA_CHECK(cudaGetLastError());
}
