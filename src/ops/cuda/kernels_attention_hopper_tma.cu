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
 * the same bits as the cp.async kernel: the products and the softmax are the same, in the same order). The tensor
 * maps are [B, T, columns]: rows of a tile past T are zeros, as the cp.async kernels' zero fill. */
#include <math.h>
#include <stdint.h>

#include <cuda.h> /* CUtensorMap and cuTensorMapEncodeTiled's types; the function comes through the runtime */
#include <cuda_bf16.h>

#include "ops/cuda/attention_hopper.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/kernel_attributes.h"
#include "ops/cuda/hopper_pipeline.cuh"
#include "ops/cuda/hopper_wgmma.cuh"

#define PIPE_THREADS 384             /* a producer warpgroup, then two consumer warpgroups */
#define PIPE_BLOCK_M 128             /* queries a block: 64 a consumer */
#define PIPE_BLOCK_N 128             /* keys a tile */
#define PIPE_TILE(HD) (128 * (HD)*2) /* bytes of a 128-row tile */
#define FWD_STAGES 3
/* Q, then the K ring, then the V ring, then the barriers; 1024 bytes more to align the base */
#define PIPE_BARRIERS_OFFSET(HD) ((1 + 2 * FWD_STAGES) * PIPE_TILE(HD))
#define PIPE_SHARED_BYTES(HD) (PIPE_BARRIERS_OFFSET(HD) + (1 + 4 * FWD_STAGES) * 8 + 1024)
#define PRODUCER_REGISTERS 24
#define CONSUMER_REGISTERS 240

/* Named barrier ids (0 is __syncthreads'): consumer c waits on TURN_BARRIER + c for its turn to issue products. */
#define TURN_BARRIER 1

/* The forward block's head and query block by its place in the launch order: a kv head's query heads side by side,
 * its query blocks longest first, then the next kv head's. The blocks running at once then read the K and V of one or
 * two kv heads, not of all of them (blockIdx.x as the head had all at once): the forward measured 1-2% faster at 64k
 * and 256k (docs/benchmarks.md, tenth session), the same bits. */
static __device__ __forceinline__ void query_block_of_launch(int Hq, int Hkv, int rows, int *b, int *h, int *kv_head,
                                                             int *m0) {
    const int heads = Hq / Hkv, blocks = (int)gridDim.y;
    int at = (int)(blockIdx.x + gridDim.x * blockIdx.y);
    const int in_group = at % heads;
    at /= heads;
    *m0 = (blocks - 1 - at % blocks) * rows; /* the longest blocks start first */
    at /= blocks;
    *kv_head = at % Hkv;
    *b = at / Hkv;
    *h = *kv_head * heads + in_group;
}

template <int HD>
static __global__ void __launch_bounds__(PIPE_THREADS, 1)
    hopper_forward_pipelined_kernel(const __grid_constant__ CUtensorMap q_map,
                                    const __grid_constant__ CUtensorMap k_map,
                                    const __grid_constant__ CUtensorMap v_map, tt_bf16 *out, float *lse, int T, int Hq,
                                    int Hkv, float scale_log2, const int32_t *positions) {
    extern __shared__ unsigned char shared_raw[];
    const uint32_t base = (shared_address(shared_raw) + 1023) & ~1023u;
    const uint32_t q_tile = base, k_ring = base + PIPE_TILE(HD), v_ring = k_ring + FWD_STAGES * PIPE_TILE(HD);
    /* barriers: Q full; then for each slot s: K full, V full, K empty, V empty */
    const uint32_t barriers = base + PIPE_BARRIERS_OFFSET(HD), q_full = barriers;
#define K_FULL(s) (barriers + 8 * (1 + (s)))
#define V_FULL(s) (barriers + 8 * (1 + FWD_STAGES + (s)))
#define K_EMPTY(s) (barriers + 8 * (1 + 2 * FWD_STAGES + (s)))
#define V_EMPTY(s) (barriers + 8 * (1 + 3 * FWD_STAGES + (s)))

    const int tid = threadIdx.x, warpgroup = tid >> 7;
    int b, h, kv_head, m0;
    query_block_of_launch(Hq, Hkv, PIPE_BLOCK_M, &b, &h, &kv_head, &m0);
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
            barrier_expect_bytes(q_full, PIPE_TILE(HD));
            tma_load_tile<128, HD>(q_tile, &q_map, h * HD, m0, b, q_full);
            for (int j = 0; j < tiles; j++) {
                const int s = j % FWD_STAGES, row = n_first + j * PIPE_BLOCK_N;
                const uint32_t empty_parity = ((j / FWD_STAGES) & 1) ^ 1;
                barrier_wait(K_EMPTY(s), empty_parity);
                barrier_expect_bytes(K_FULL(s), PIPE_TILE(HD));
                tma_load_tile<128, HD>(k_ring + s * PIPE_TILE(HD), &k_map, kv_head * HD, row, b, K_FULL(s));
                barrier_wait(V_EMPTY(s), empty_parity);
                barrier_expect_bytes(V_FULL(s), PIPE_TILE(HD));
                tma_load_tile<128, HD>(v_ring + s * PIPE_TILE(HD), &v_map, kv_head * HD, row, b, V_FULL(s));
            }
        }
        return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(CONSUMER_REGISTERS));

    const int consumer = warpgroup - 1, ctid = tid - 128, warp = (ctid >> 5) & 3, lane = ctid & 31, g = lane >> 2,
              t = lane & 3;
    const bool leader = (ctid & 127) == 0; /* arrives on the empty barriers for its warpgroup */
    const int64_t q_stride = (int64_t)Hq * HD;
    const int row_g = m0 + consumer * 64 + warp * 16 + g, row_g8 = row_g + 8;
    const int start_g = document_start(positions, b, T, row_g), start_g8 = document_start(positions, b, T, row_g8);
    const int warp_first = m0 + consumer * 64 + warp * 16;
    const int warp_start_max = document_start(positions, b, T, min(warp_first + 15, T - 1));

    float o[HD / 2], s[64];
#pragma unroll
    for (int i = 0; i < HD / 2; i++) o[i] = 0.0f;
    uint32_t p[32]; /* P_{j-1}, bf16 pairs in the register A layout */
    softmax_rows rows = {-INFINITY, -INFINITY, 0.0f, 0.0f};

    if (consumer == 1) named_barrier_arrive(TURN_BARRIER, 256); /* consumer 0 issues first */
    barrier_wait(q_full, 0);
    for (int j = 0; j < tiles; j++) {
        const int slot = j % FWD_STAGES, previous = (j + FWD_STAGES - 1) % FWD_STAGES;
        const int n0 = n_first + j * PIPE_BLOCK_N;
        barrier_wait(K_FULL(slot), (j / FWD_STAGES) & 1);
        if (j > 0) barrier_wait(V_FULL(previous), ((j - 1) / FWD_STAGES) & 1);

        named_barrier_sync(TURN_BARRIER + consumer, 256); /* this consumer's turn to issue */
        const uint32_t k_tile = k_ring + slot * PIPE_TILE(HD);
        wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < HD / 16; ks++) {
            const uint32_t within = k_slice<128>(ks);
            wgmma_ss(s, descriptor(q_tile + consumer * 64 * 128 + within, 16, 1024),
                     descriptor(k_tile + within, 16, 1024), ks > 0);
        }
        wgmma_commit();
        if (j > 0) {
            const uint32_t v_tile = v_ring + previous * PIPE_TILE(HD);
            wgmma_fence(); /* P_{j-1} and the rescaled O were written since the last fence */
#pragma unroll
            for (int kb = 0; kb < PIPE_BLOCK_N / 16; kb++)
                wgmma_rs_hd<HD>(o, p + 4 * kb, descriptor(v_tile + kb * 16 * 128, 128 * 128, 1024));
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

        /* P_j in fp32 over S_j (p still feeds the product in flight: it is rewritten only after the wait) */
        float correction_g, correction_g8;
        softmax_tile(s, &rows, &correction_g, &correction_g8,
                     n0 + PIPE_BLOCK_N - 1 > warp_first || n0 + PIPE_BLOCK_N > T || n0 < warp_start_max, n0, t, T,
                     row_g, row_g8, start_g, start_g8, scale_log2);
        wgmma_wait<0>(); /* P_{j-1} V_{j-1} is in O */
        fence_accumulators_n<HD / 2>(o);
        fence_operands<32>(p);
        if (j > 0 && leader) barrier_arrive(V_EMPTY(previous));
#pragma unroll
        for (int c = 0; c < 16;
             c++) { /* O's HD / 8 column groups rescaled, P packed (one loop: head_dim 128's order) */
            if (c < HD / 8) {
                o[4 * c] *= correction_g;
                o[4 * c + 1] *= correction_g;
                o[4 * c + 2] *= correction_g8;
                o[4 * c + 3] *= correction_g8;
            }
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
            wgmma_rs_hd<HD>(o, p + 4 * kb, descriptor(v_ring + last * PIPE_TILE(HD) + kb * 16 * 128, 128 * 128, 1024));
        wgmma_commit();
        wgmma_wait<0>();
        fence_accumulators_n<HD / 2>(o);
        fence_operands<32>(p);
    }
#undef K_FULL
#undef V_FULL
#undef K_EMPTY
#undef V_EMPTY

    store_forward_rows<HD>(out, lse, o, &rows, b, h, Hq, T, row_g, t, q_stride);
}

/* ---- backward ----------------------------------------------------------------------------------------------
 * The same products, order and bits as kernels_attention_hopper.cu's dK/dV and dQ kernels, with the loads moved to
 * a producer warpgroup: TMA for the tiles, the producer's threads for the rows' lse, D and positions (plain shared
 * stores, released by their arrivals on the slot's full barrier). */

#define BWD_STAGES 3
#define PIPE_TILE64(HD) (64 * (HD)*2)     /* bytes of a 64-row tile */
#define BWD_ROW_VALUES 3                  /* lse, D, position: 64 of each a slot */
#define DQ_TILE_BYTES (64 * HEAD_DIM * 4) /* a step's dQ share, 64 queries x 128 fp32, row-major */

/* The dK/dV kernel's shared memory: K, V; the ring of (Q, dO) slots; the ring of row values; the barriers (K/V full;
 * full and empty a slot; (ORDERED) dQ full and empty a tile); (ORDERED) two dS^T tiles and two dQ tiles. Offsets from
 * the 1024-byte aligned base. */
template <int HD, bool ORDERED, int STAGES> struct dkdv_layout {
    static constexpr int ring = 2 * PIPE_TILE(HD);
    static constexpr int rows = ring + STAGES * 2 * PIPE_TILE64(HD);
    static constexpr int barriers = rows + STAGES * BWD_ROW_VALUES * 256; /* in the rows' padding to 1024 */
    static constexpr int barrier_count = 1 + 2 * STAGES + (ORDERED ? 4 : 0);
    static constexpr int ds = (barriers + barrier_count * 8 + 1023) & ~1023;
    static constexpr int dq = ds + (ORDERED ? 2 * PIPE_TILE64(HD) : 0);
    static constexpr int bytes = dq + (ORDERED ? 2 * DQ_TILE_BYTES : 0) + 1024;
    /* the ordered layout takes the whole 227 KiB: no static __shared__ or further barrier fits beside it */
    static_assert(bytes <= 227 * 1024, "the dK/dV kernel's shared memory fits a block");
};
#define DKDV_STAGES(ORDERED) ((ORDERED) ? 2 : BWD_STAGES)

/* The dQ kernel: a producer warpgroup and three consumers of 64 queries each. Its consumers fit in 160 registers
 * (ptxas spills 4 bytes; the dK/dV kernel's need 240), so a third fits beside the producer: 128 x 24 + 384 x 160 <=
 * 65536. Each K/V tile then serves 192 queries, and three warpgroups fill each other's gaps at the tensor cores. */
#define DQ_CONSUMERS 3
#define DQ_ROWS (64 * DQ_CONSUMERS)
#define DQ_THREADS (128 * (1 + DQ_CONSUMERS))
#define DQ_CONSUMER_REGISTERS 160
#define DQ_TILE(HD) (DQ_ROWS * (HD)*2)
static_assert(128 * PRODUCER_REGISTERS + 128 * DQ_CONSUMERS * DQ_CONSUMER_REGISTERS <= 65536,
              "the dQ kernel's warpgroups fit the register file");
/* dQ: Q, dO (DQ_ROWS rows each); the ring of (K, V) slots of 64 keys; the barriers (Q/dO full; full, empty a slot) */
#define DQ_PIPE_BARRIERS_OFFSET(HD) (2 * DQ_TILE(HD) + BWD_STAGES * 2 * PIPE_TILE64(HD))
#define DQ_PIPE_SHARED_BYTES(HD) (DQ_PIPE_BARRIERS_OFFSET(HD) + (1 + 2 * BWD_STAGES) * 8 + 1024)

/* A bulk reduction (the async proxy adds a contiguous block of fp32 from shared memory into global memory), and the
 * waits for this thread's bulk groups. */
static __device__ __forceinline__ void bulk_reduce_add_f32(float *dst, uint32_t src, uint32_t bytes) {
    asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(dst), "r"(src),
                 "r"(bytes)
                 : "memory");
    asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}

static __device__ __forceinline__ void bulk_wait_all(void) {
    asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
}

static __device__ __forceinline__ int load_acquire_gpu(const int *p) {
    int v;
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
    return v;
}

static __device__ __forceinline__ void store_release_gpu(int *p, int v) {
    asm volatile("st.release.gpu.global.b32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}

/* Named barrier of the two consumer warpgroups (the dS^T tile of a step is whole). */
#define DS_BARRIER 3

/* ORDERED: the block also makes its 128 keys' share of dQ for each step's 64 queries (dQ_part = dS K, dS^T through
 * shared memory as a transposed A, each consumer one half of head_dim), stages it in shared memory in fp32, and a
 * writer thread of the producer warpgroup adds it into dq_accum[B, Hq, Tpad, 128] (Tpad: T rounded up to 64) with one
 * bulk reduction when the (sequence, head, query tile)'s turn comes (turns[B, Hq, Tpad / 64], zero before the launch):
 * key blocks in key order, so every element is the same fixed-order sum each run. The consumers never wait for a
 * turn; the writer does, two dQ tiles behind at most. Blocks wait only on blocks of lower index. PACKED: the kernel
 * with the document code (positions); without it the code is compiled out and its registers free. */
template <int HD, bool ORDERED, bool PACKED>
static __global__ void __launch_bounds__(PIPE_THREADS, 1)
    hopper_dkdv_pipelined_kernel(const __grid_constant__ CUtensorMap k_map, const __grid_constant__ CUtensorMap v_map,
                                 const __grid_constant__ CUtensorMap q_map64,
                                 const __grid_constant__ CUtensorMap do_map64, tt_bf16 *dk, tt_bf16 *dv,
                                 const float *lse, const float *D, int T, int Hq, int Hkv, float scale_log2,
                                 float scale, const int32_t *positions, float *dq_accum, int *turns) {
    constexpr int STAGES = DKDV_STAGES(ORDERED);
    if (!PACKED) positions = NULL; /* no document code: with it ptxas spills 48 bytes a thread, without none */
    static_assert(!ORDERED || HD == 128, "the ordered dQ takes head_dim 128");
    typedef dkdv_layout<HD, ORDERED, STAGES> L;
    extern __shared__ unsigned char shared_raw[];
    const uint32_t raw = shared_address(shared_raw), base = (raw + 1023) & ~1023u;
    const uint32_t k_tile = base, v_tile = base + PIPE_TILE(HD), ring = base + L::ring;
    const uint32_t rows_base = base + L::rows, ds_tiles = base + L::ds, dq_tiles = base + L::dq;
    unsigned char *rows_generic = shared_raw + (rows_base - raw);
    float *dq_generic = (float *)(shared_raw + (dq_tiles - raw));
    const uint32_t barriers = base + L::barriers, kv_full = barriers;
#define FULL(s) (barriers + 8 * (1 + (s)))
#define EMPTY(s) (barriers + 8 * (1 + STAGES + (s)))
#define DQ_FULL(s) (barriers + 8 * (1 + 2 * STAGES + (s)))
#define DQ_EMPTY(s) (barriers + 8 * (3 + 2 * STAGES + (s)))

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
    const int steps =
        heads * tiles; /* step i: query head kv_head * heads + i / tiles, query tile first_tile + i % tiles */

    if (tid == 0) {
        barrier_init(kv_full, 1);
        for (int s = 0; s < STAGES; s++) {
            barrier_init(FULL(s), 64); /* the 64 row loaders, thread 0's arrival with the bytes */
            barrier_init(EMPTY(s), 8); /* lane 0 of each consumer warp: they read the rows with plain loads too */
        }
        if (ORDERED)
            for (int s = 0; s < 2; s++) {
                barrier_init(DQ_FULL(s), 256); /* every consumer thread, after its share of the dQ tile */
                barrier_init(DQ_EMPTY(s), 1);  /* the writer, once its reduction read the tile */
            }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    if (warpgroup == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(PRODUCER_REGISTERS));
        if (tid < 64) { /* the loader: TMA from thread 0, the row values from all 64 */
            if (tid == 0) {
                barrier_expect_bytes(kv_full, 2 * PIPE_TILE(HD));
                tma_load_tile<128, HD>(k_tile, &k_map, kv_head * HD, n0, b, kv_full);
                tma_load_tile<128, HD>(v_tile, &v_map, kv_head * HD, n0, b, kv_full);
            }
            /* step i's slot and phase, query head and tile kept as counters (a division a step cost the loop) */
            for (int i = 0, slot = 0, phase = 0, head = 0, tile = 0; i < steps; i++) {
                const int h = kv_head * heads + head, m0 = (first_tile + tile) * 64;
                barrier_wait(EMPTY(slot), phase ^ 1);
                const int query = m0 + tid; /* lse, D and position of query m0 + tid (zero past T) */
                float *values = (float *)(rows_generic + slot * BWD_ROW_VALUES * 256);
                const int64_t at = ((int64_t)b * Hq + h) * T + query;
                values[column_slot(tid)] = query < T ? lse[at] * LOG2E : 0.0f; /* log2 units */
                values[64 + column_slot(tid)] = query < T ? D[at] : 0.0f;
                if (positions) ((int32_t *)values)[128 + tid] = query < T ? positions[(int64_t)b * T + query] : 0;
                if (tid == 0) {
                    barrier_expect_bytes(FULL(slot), 2 * PIPE_TILE64(HD));
                    const uint32_t to = ring + slot * 2 * PIPE_TILE64(HD);
                    tma_load_tile<64, HD>(to, &q_map64, h * HD, m0, b, FULL(slot));
                    tma_load_tile<64, HD>(to + PIPE_TILE64(HD), &do_map64, h * HD, m0, b, FULL(slot));
                } else {
                    barrier_arrive(FULL(slot));
                }
                if (++tile == tiles) {
                    tile = 0;
                    head++;
                }
                if (++slot == STAGES) {
                    slot = 0;
                    phase ^= 1;
                }
            }
        } else if (ORDERED && tid == 64) { /* the dQ writer */
            const int Tpad = all_tiles * 64;
            for (int i = 0; i < steps; i++) {
                const int tile = i & 1, h = kv_head * heads + i / tiles, query_tile = first_tile + i % tiles;
                const int m0 = query_tile * 64;
                barrier_wait(DQ_FULL(tile), (i >> 1) & 1);
                /* its turn: after every key block before it whose keys reach the tile's first document */
                const int skipped = positions ? (m0 - positions[(int64_t)b * T + m0]) / 128 : 0;
                const int turn = (int)blockIdx.y - skipped;
                int *counter = turns + ((int64_t)b * Hq + h) * all_tiles + query_tile;
                while (load_acquire_gpu(counter) != turn) __nanosleep(32);
                asm volatile("fence.proxy.async.global;\n" ::: "memory"); /* the reduction after the acquire */
                bulk_reduce_add_f32(dq_accum + (((int64_t)b * Hq + h) * Tpad + m0) * HD,
                                    dq_tiles + tile * DQ_TILE_BYTES, DQ_TILE_BYTES);
                asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
                barrier_arrive(DQ_EMPTY(tile)); /* the tile is read: the consumers may fill it again */
                bulk_wait_all();                /* the adds are done in global memory */
                asm volatile("fence.proxy.async.global;\n" ::: "memory");
                __threadfence();
                store_release_gpu(counter, turn + 1);
            }
        }
        return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(CONSUMER_REGISTERS));

    const int consumer = warp_uniform(warpgroup - 1), ctid = tid - 128, warp = (ctid >> 5) & 3, lane = ctid & 31,
              g = lane >> 2, t = lane & 3;
    const int64_t kv_stride = (int64_t)Hkv * HD;
    const int64_t kv_offset = (int64_t)b * T * kv_stride + (int64_t)kv_head * HD;
    float dk_acc[HD / 2], dv_acc[HD / 2], st[32], dpt[32];
#pragma unroll
    for (int i = 0; i < HD / 2; i++) dk_acc[i] = dv_acc[i] = 0.0f;
    const int key_g = n0 + consumer * 64 + warp * 16 + g, key_g8 = key_g + 8;
    const int warp_last_key = n0 + consumer * 64 + warp * 16 + 15;
    const uint32_t k_rows = k_tile + consumer * 64 * 128, v_rows = v_tile + consumer * 64 * 128;

    barrier_wait(kv_full, 0);
    for (int i = 0, slot = 0, phase = 0, tile = 0; i < steps; i++) {
        const int m0 = (first_tile + tile) * 64;
        barrier_wait(FULL(slot), phase);
        const uint32_t q_at = ring + slot * 2 * PIPE_TILE64(HD), do_at = q_at + PIPE_TILE64(HD);
        const float *lse_rows = (const float *)(rows_generic + slot * BWD_ROW_VALUES * 256);
        const float *d_rows = lse_rows + 64;
        const int32_t *position_rows = (const int32_t *)(lse_rows + 128);

        wgmma_fence();
        product_over_head_dim<HD>(st, k_rows, q_at);
        product_over_head_dim<HD>(dpt, v_rows, do_at);
        /* the step's lse and D, loaded while the products run (the loads' latency was on the step's path); the ordered
         * dQ's registers hold only lse here (D is loaded before dP^T's wait) */
        float lse_log2[16], d_columns[16];
        load_columns(lse_log2, lse_rows, t);
        if (!ORDERED) load_columns(d_columns, d_rows, t);
        wgmma_wait<1>();
        fence_accumulators_32(st);
        /* every query of the step sees every key of this warp (causal, inside T, one document): no mask */
        const bool whole =
            warp_last_key <= m0 && m0 + 63 < T && (!positions || warp_last_key - 15 >= m0 + 63 - position_rows[63]);
        probabilities_transposed(st, whole, m0, t, T, key_g, key_g8, lse_log2, position_rows, positions, scale_log2);
        uint32_t pa[16], dsa[16];
        pack_a64(pa, st);
        if (ORDERED) load_columns(d_columns, d_rows, t);
        wgmma_wait<0>();
        fence_accumulators_32(dpt);
        wgmma_fence();
        const uint64_t do_desc = descriptor(do_at, 64 * 128, 1024);
#pragma unroll
        for (int kb = 0; kb < 4; kb++) wgmma_rs_hd<HD>(dv_acc, pa + 4 * kb, descriptor_plus(do_desc, kb * 16 * 128));
        wgmma_commit();
        score_gradient_transposed(dpt, st, d_columns);
        pack_a64(dsa, dpt);
        /* (ORDERED) dS^T into this step's tile (row = key, 64 queries = one 128-byte swizzled row), before dK's
         * product reads the same registers; the tile of two steps ago is free: both consumers passed the last step's
         * barrier, after their dQ products of that step */
        const uint32_t ds_tile = ds_tiles + (i & 1) * PIPE_TILE64(HD);
        if (ORDERED) {
            const int row = consumer * 64 + warp * 16 + g;
#pragma unroll
            for (int j = 0; j < 8; j++) {
                asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(ds_tile + row * 128 + ((j ^ (row & 7)) << 4) + 4 * t),
                             "r"(dsa[2 * j])
                             : "memory");
                asm volatile(
                    "st.shared.b32 [%0], %1;\n" ::"r"(ds_tile + (row + 8) * 128 + ((j ^ ((row + 8) & 7)) << 4) + 4 * t),
                    "r"(dsa[2 * j + 1])
                    : "memory");
            }
        }
        wgmma_fence();
        const uint64_t q_desc = descriptor(q_at, 64 * 128, 1024);
#pragma unroll
        for (int kb = 0; kb < 4; kb++) wgmma_rs_hd<HD>(dk_acc, dsa + 4 * kb, descriptor_plus(q_desc, kb * 16 * 128));
        wgmma_commit();
        if (ORDERED) {
            fence_proxy_async();
            named_barrier_sync(DS_BARRIER, 256); /* both consumers' keys are in the tile */
            float dq_part[32];
            wgmma_fence();
#pragma unroll
            for (int ks = 0; ks < 8; ks++)
                wgmma_ss_n64_transposed(dq_part, descriptor(ds_tile + ks * 16 * 128, 64 * 128, 1024),
                                        descriptor(k_tile + consumer * 128 * 128 + ks * 16 * 128, 64 * 128, 1024),
                                        ks > 0);
            wgmma_commit();
            wgmma_wait<0>();
            fence_operands<16>(pa);
            fence_operands<16>(dsa);
            fence_accumulators_n<HD / 2>(dv_acc);
            fence_accumulators_n<HD / 2>(dk_acc);
            fence_accumulators_32(dq_part);
            if (lane == 0) barrier_arrive(EMPTY(slot)); /* this warp read the slot's Q, dO and rows */
            /* this consumer's half of the step's dQ tile (rows = the 64 queries, columns consumer * 64..) */
            const int tile = i & 1;
            barrier_wait(DQ_EMPTY(tile), ((i >> 1) & 1) ^ 1);
            float *dq_tile = dq_generic + tile * (DQ_TILE_BYTES / 4);
#pragma unroll
            for (int j = 0; j < 8; j++) {
                const int col = consumer * 64 + 8 * j + 2 * t, r0 = warp * 16 + g;
                *(float2 *)(dq_tile + r0 * HD + col) = make_float2(dq_part[4 * j], dq_part[4 * j + 1]);
                *(float2 *)(dq_tile + (r0 + 8) * HD + col) = make_float2(dq_part[4 * j + 2], dq_part[4 * j + 3]);
            }
            fence_proxy_async(); /* the writer's bulk reduction reads the tile through the async proxy */
            barrier_arrive(DQ_FULL(tile));
        } else {
            wgmma_wait<0>();
            fence_operands<16>(pa);
            fence_operands<16>(dsa);
            fence_accumulators_n<HD / 2>(dv_acc);
            fence_accumulators_n<HD / 2>(dk_acc);
            if (lane == 0) barrier_arrive(EMPTY(slot)); /* this warp read the slot's Q, dO and rows */
        }
        if (++tile == tiles) tile = 0;
        if (++slot == STAGES) {
            slot = 0;
            phase ^= 1;
        }
    }
#undef FULL
#undef EMPTY
#undef DQ_FULL
#undef DQ_EMPTY

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

/* dq[B*T, Hq*128] bf16 = scale * dq_accum[B, Hq, Tpad, 128]: a thread per 4 values of the first T rows. */
static __global__ void pipelined_dq_convert_kernel(tt_bf16 *dq, const float *dq_accum, int T, int Tpad, int Hq,
                                                   float scale, int64_t count) {
    const int64_t at = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * 4; /* of B * Hq * T * 128 */
    if (at >= count) return;
    const int64_t row = at / HEAD_DIM, col = at % HEAD_DIM; /* row of [B, Hq, T] */
    const int64_t bh = row / T, t = row % T, b = bh / Hq, h = bh % Hq;
    const float4 x = *(const float4 *)(dq_accum + (bh * Tpad + t) * HEAD_DIM + col);
    uint2 packed;
    packed.x = pack_bf16(x.x * scale, x.y * scale);
    packed.y = pack_bf16(x.z * scale, x.w * scale);
    *(uint2 *)(dq + ((b * T + t) * Hq + h) * HEAD_DIM + col) = packed;
}

/* dQ for DQ_ROWS queries of one head: each consumer its 64 rows over the key tiles up to the block's last query, lse
 * and D of its rows in registers (the cp.async dQ kernel's products, order and bits). PACKED as the dK/dV kernel's. */
template <int HD, bool PACKED>
static __global__ void __launch_bounds__(DQ_THREADS, 1)
    hopper_dq_pipelined_kernel(const __grid_constant__ CUtensorMap q_map, const __grid_constant__ CUtensorMap do_map,
                               const __grid_constant__ CUtensorMap k_map64, const __grid_constant__ CUtensorMap v_map64,
                               tt_bf16 *dq, const float *lse, const float *D, int T, int Hq, int Hkv, float scale_log2,
                               float scale, const int32_t *positions) {
    if (!PACKED) positions = NULL; /* no document code to hold registers for */
    extern __shared__ unsigned char shared_raw[];
    const uint32_t base = (shared_address(shared_raw) + 1023) & ~1023u;
    const uint32_t q_tile = base, do_tile = base + DQ_TILE(HD), ring = base + 2 * DQ_TILE(HD);
    const uint32_t barriers = base + DQ_PIPE_BARRIERS_OFFSET(HD), qd_full = barriers;
#define FULL(s) (barriers + 8 * (1 + (s)))
#define EMPTY(s) (barriers + 8 * (1 + BWD_STAGES + (s)))

    const int tid = threadIdx.x, warpgroup = tid >> 7;
    const int b = blockIdx.x / Hq, h = blockIdx.x % Hq, kv_head = h / (Hq / Hkv);
    const int m0 = (gridDim.y - 1 - blockIdx.y) * DQ_ROWS; /* the longest blocks start first */
    const int first_tile = document_start(positions, b, T, m0) / 64, n_first = first_tile * 64;
    const int key_tiles = (min(m0 + DQ_ROWS, T) + 63) / 64 - first_tile;

    if (tid == 0) {
        barrier_init(qd_full, 1);
        for (int s = 0; s < BWD_STAGES; s++) {
            barrier_init(FULL(s), 1);
            barrier_init(EMPTY(s), DQ_CONSUMERS);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    if (warpgroup == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(PRODUCER_REGISTERS));
        if (tid == 0) {
            barrier_expect_bytes(qd_full, 2 * DQ_TILE(HD));
            tma_load_tile<DQ_ROWS, HD>(q_tile, &q_map, h * HD, m0, b, qd_full);
            tma_load_tile<DQ_ROWS, HD>(do_tile, &do_map, h * HD, m0, b, qd_full);
            for (int j = 0; j < key_tiles; j++) {
                const int slot = j % BWD_STAGES, row = n_first + j * 64;
                barrier_wait(EMPTY(slot), ((j / BWD_STAGES) & 1) ^ 1);
                barrier_expect_bytes(FULL(slot), 2 * PIPE_TILE64(HD));
                const uint32_t at = ring + slot * 2 * PIPE_TILE64(HD);
                tma_load_tile<64, HD>(at, &k_map64, kv_head * HD, row, b, FULL(slot));
                tma_load_tile<64, HD>(at + PIPE_TILE64(HD), &v_map64, kv_head * HD, row, b, FULL(slot));
            }
        }
        return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(DQ_CONSUMER_REGISTERS));

    const int consumer = warp_uniform(warpgroup - 1), ctid = tid - 128, warp = (ctid >> 5) & 3, lane = ctid & 31,
              g = lane >> 2, t = lane & 3;
    const bool leader = (ctid & 127) == 0;
    const int64_t q_stride = (int64_t)Hq * HD;
    const int row_g = m0 + consumer * 64 + warp * 16 + g, row_g8 = row_g + 8;
    const int start_g = document_start(positions, b, T, row_g), start_g8 = document_start(positions, b, T, row_g8);
    const int warp_first = m0 + consumer * 64 + warp * 16;
    const int warp_start_max = document_start(positions, b, T, min(warp_first + 15, T - 1));
    const float *lse_head = lse + ((int64_t)b * Hq + h) * T, *d_head = D + ((int64_t)b * Hq + h) * T;
    const float lse_g = row_g < T ? lse_head[row_g] * LOG2E : 0.0f,
                lse_g8 = row_g8 < T ? lse_head[row_g8] * LOG2E : 0.0f;
    const float d_g = row_g < T ? d_head[row_g] : 0.0f, d_g8 = row_g8 < T ? d_head[row_g8] : 0.0f;
    const uint32_t q_rows = q_tile + consumer * 64 * 128, do_rows = do_tile + consumer * 64 * 128;

    float dq_acc[HD / 2], s[32], dp[32];
#pragma unroll
    for (int i = 0; i < HD / 2; i++) dq_acc[i] = 0.0f;
    barrier_wait(qd_full, 0);
    for (int j = 0; j < key_tiles; j++) {
        const int slot = j % BWD_STAGES, n0 = n_first + j * 64;
        barrier_wait(FULL(slot), (j / BWD_STAGES) & 1);
        const uint32_t k_at = ring + slot * 2 * PIPE_TILE64(HD), v_at = k_at + PIPE_TILE64(HD);
        const uint64_t k_desc = descriptor(k_at, 64 * 128, 1024);
        wgmma_fence();
        product_over_head_dim<HD, DQ_ROWS>(s, q_rows, k_at);
        product_over_head_dim<HD, DQ_ROWS>(dp, do_rows, v_at);
        wgmma_wait<1>();
        fence_accumulators_32(s);
        /* whole: every row of this warp sees every key of the tile */
        probabilities(s, n0 + 63 <= warp_first && warp_first + 15 < T && n0 >= warp_start_max, n0, t, T, row_g, row_g8,
                      start_g, start_g8, lse_g, lse_g8, scale_log2);
        wgmma_wait<0>();
        fence_accumulators_32(dp);
        score_gradient(dp, s, d_g, d_g8);
        uint32_t dsa[16];
        pack_a64(dsa, dp);
        wgmma_fence();
#pragma unroll
        for (int kb = 0; kb < 4; kb++) wgmma_rs_hd<HD>(dq_acc, dsa + 4 * kb, descriptor_plus(k_desc, kb * 16 * 128));
        wgmma_commit();
        wgmma_wait<0>();
        fence_operands<16>(dsa);
        fence_accumulators_n<HD / 2>(dq_acc);
        if (leader) barrier_arrive(EMPTY(slot)); /* this consumer is done with the slot's K and V */
    }
#undef FULL
#undef EMPTY

    tt_bf16 *dq_g = dq + ((int64_t)b * T + row_g) * q_stride + (int64_t)h * HD;
#pragma unroll
    for (int c = 0; c < HD / 8; c++) {
        const int col = 8 * c + 2 * t;
        if (row_g < T) *(uint32_t *)(dq_g + col) = pack_bf16(dq_acc[4 * c] * scale, dq_acc[4 * c + 1] * scale);
        if (row_g8 < T)
            *(uint32_t *)(dq_g + 8 * q_stride + col) = pack_bf16(dq_acc[4 * c + 2] * scale, dq_acc[4 * c + 3] * scale);
    }
}

/* The backward's kernels as the host picks them (with or without the document code). */
typedef void (*dkdv_kernel_fn)(CUtensorMap, CUtensorMap, CUtensorMap, CUtensorMap, tt_bf16 *, tt_bf16 *, const float *,
                               const float *, int, int, int, float, float, const int32_t *, float *, int *);
typedef void (*dq_kernel_fn)(CUtensorMap, CUtensorMap, CUtensorMap, CUtensorMap, tt_bf16 *, const float *,
                             const float *, int, int, int, float, float, const int32_t *);

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
        TT_CUDA_CHECK(
            cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &at, 12000, cudaEnableDefault, &found));
        TT_CHECK(found == cudaDriverEntryPointSuccess && at,
                 "the CUDA driver has no cuTensorMapEncodeTiled (TMA needs a CUDA 12 driver or later)");
        fn = (encode_tiled_fn)at;
    }
    return fn;
}

/* The map of a row-major bf16 tensor [B, T, columns] read in boxes of 64 columns x box_rows rows of one sequence,
 * 128-byte swizzled: rows past T are zeros, never the next sequence's. */
static CUtensorMap sequence_map(const void *base, int64_t B, int64_t T, int64_t columns, int box_rows) {
    CUtensorMap map;
    const cuuint64_t dims[3] = {(cuuint64_t)columns, (cuuint64_t)T, (cuuint64_t)B};
    const cuuint64_t strides[2] = {(cuuint64_t)columns * 2, (cuuint64_t)(T * columns * 2)}; /* bytes, dims 1 and 2 */
    const cuuint32_t box[3] = {64, (cuuint32_t)box_rows, 1}, element_strides[3] = {1, 1, 1};
    const CUresult r = encode_tiled()(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, (void *)base, dims, strides, box,
                                      element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    TT_CHECK(r == CUDA_SUCCESS, "cuTensorMapEncodeTiled failed (%d) for a [%lld, %lld, %lld] bf16 tensor", (int)r,
             (long long)B, (long long)T, (long long)columns);
    return map;
}

/* The shape is one the kernels take, the grid fits (T / 128 blocks in y) and every operand is 16-byte aligned. */
static void check_pipelined_arguments(const tt_attention_shape *s, const void *const *pointers, int count) {
    TT_CHECK(tt_cuda_hopper_attention_supported(s),
             "the pipelined Hopper attention kernels take head_dim 64 or 128 and no sliding window (head_dim %lld, "
             "window %lld)",
             (long long)s->head_dim, (long long)s->sliding_window);
    TT_CHECK(s->batch > 0 && s->num_heads > 0 && (s->seq_len + 127) / 128 <= 65535 &&
                 s->batch * s->num_heads <= INT32_MAX && s->batch * ((s->seq_len + 63) / 64 * 64) <= INT32_MAX,
             "the Hopper attention kernels take at most 65535 x 128 tokens a sequence (sequence_len %lld)",
             (long long)s->seq_len);
    for (int i = 0; i < count; i++)
        TT_CHECK(((uintptr_t)pointers[i] & 15) == 0, "the Hopper attention kernels: operand %d is not 16-byte aligned",
                 i);
}

template <int HD>
static void forward_pipelined(tt_bf16 *out, float *lse, const tt_bf16 *q, const tt_bf16 *k, const tt_bf16 *v,
                              const tt_attention_shape *s, cudaStream_t stream) {
    tt_cuda_kernel_shared_bytes((const void *)hopper_forward_pipelined_kernel<HD>, (int)(PIPE_SHARED_BYTES(HD)));
    const int64_t B = s->batch, T = s->seq_len;
    const CUtensorMap q_map = sequence_map(q, B, T, s->num_heads * HD, 128);
    const CUtensorMap k_map = sequence_map(k, B, T, s->num_kv_heads * HD, 128);
    const CUtensorMap v_map = sequence_map(v, B, T, s->num_kv_heads * HD, 128);
    const dim3 grid((unsigned)(s->batch * s->num_heads), (unsigned)((s->seq_len + PIPE_BLOCK_M - 1) / PIPE_BLOCK_M));
    hopper_forward_pipelined_kernel<HD><<<grid, PIPE_THREADS, PIPE_SHARED_BYTES(HD), stream>>>(
        q_map, k_map, v_map, out, lse, (int)s->seq_len, (int)s->num_heads, (int)s->num_kv_heads,
        (float)(s->scale * LOG2E), s->positions);
    TT_CUDA_CHECK(cudaGetLastError());
}

extern "C" void tt_cuda_hopper_attention_forward_pipelined(tt_bf16 *out, float *lse, const tt_bf16 *q, const tt_bf16 *k,
                                                           const tt_bf16 *v, const tt_attention_shape *s,
                                                           cudaStream_t stream) {
    const void *pointers[] = {out, q, k, v};
    check_pipelined_arguments(s, pointers, 4);
    if (s->head_dim == 64) forward_pipelined<64>(out, lse, q, k, v, s, stream);
    else forward_pipelined<128>(out, lse, q, k, v, s, stream);
}

/* The pipelined backward's scratch: D, and with the ordered dQ dq_accum[B, Hq, Tpad, 128] and the turns after it. */
static size_t d_floats_padded(const tt_attention_shape *s) {
    return ((size_t)(s->batch * s->num_heads * s->seq_len) + 63) & ~(size_t)63; /* 256-byte aligned */
}

static int64_t padded_len(const tt_attention_shape *s) { return (s->seq_len + 63) / 64 * 64; }

extern "C" size_t tt_cuda_hopper_attention_backward_pipelined_scratch_bytes(const tt_attention_shape *s,
                                                                            bool ordered_dq) {
    if (!ordered_dq) return sizeof(float) * (size_t)(s->batch * s->num_heads * s->seq_len);
    const size_t accum = (size_t)(s->batch * s->num_heads * padded_len(s) * HEAD_DIM);
    const size_t turns = (size_t)(s->batch * s->num_heads * (padded_len(s) / 64));
    return sizeof(float) * (d_floats_padded(s) + accum) + sizeof(int) * turns;
}

/* dK, dV and then dQ in a kernel of its own (scratch: D, already made). */
template <int HD>
static void backward_pipelined_dq_kernel(tt_bf16 *dq, tt_bf16 *dk, tt_bf16 *dv, const tt_bf16 *dout, const float *lse,
                                         const float *D, const tt_bf16 *q, const tt_bf16 *k, const tt_bf16 *v,
                                         const tt_attention_shape *s, cudaStream_t stream) {
    typedef dkdv_layout<HD, false, DKDV_STAGES(false)> plain;
    /* packed documents take the kernels with the document code */
    const dkdv_kernel_fn dkdv =
        s->positions ? hopper_dkdv_pipelined_kernel<HD, false, true> : hopper_dkdv_pipelined_kernel<HD, false, false>;
    tt_cuda_kernel_shared_bytes((const void *)dkdv, (int)(plain::bytes));
    const dq_kernel_fn dq_kernel =
        s->positions ? hopper_dq_pipelined_kernel<HD, true> : hopper_dq_pipelined_kernel<HD, false>;
    tt_cuda_kernel_shared_bytes((const void *)dq_kernel, (int)(DQ_PIPE_SHARED_BYTES(HD)));
    const int T = (int)s->seq_len, Hq = (int)s->num_heads, Hkv = (int)s->num_kv_heads;
    const float scale = (float)s->scale, scale_log2 = (float)(s->scale * LOG2E);
    const int64_t B = s->batch;
    const CUtensorMap k_map = sequence_map(k, B, T, Hkv * HD, 128), v_map = sequence_map(v, B, T, Hkv * HD, 128);
    const CUtensorMap q_map64 = sequence_map(q, B, T, Hq * HD, 64), do_map64 = sequence_map(dout, B, T, Hq * HD, 64);
    const dim3 kv_grid((unsigned)(s->batch * Hkv), (unsigned)((T + 127) / 128));
    dkdv<<<kv_grid, PIPE_THREADS, plain::bytes, stream>>>(k_map, v_map, q_map64, do_map64, dk, dv, lse, D, T, Hq, Hkv,
                                                          scale_log2, scale, s->positions, NULL, NULL);
    TT_CUDA_CHECK(cudaGetLastError());
    const CUtensorMap q_map = sequence_map(q, B, T, Hq * HD, DQ_ROWS),
                      do_map = sequence_map(dout, B, T, Hq * HD, DQ_ROWS);
    const CUtensorMap k_map64 = sequence_map(k, B, T, Hkv * HD, 64), v_map64 = sequence_map(v, B, T, Hkv * HD, 64);
    const dim3 q_grid((unsigned)(s->batch * Hq), (unsigned)((T + DQ_ROWS - 1) / DQ_ROWS));
    dq_kernel<<<q_grid, DQ_THREADS, DQ_PIPE_SHARED_BYTES(HD), stream>>>(q_map, do_map, k_map64, v_map64, dq, lse, D, T,
                                                                        Hq, Hkv, scale_log2, scale, s->positions);
    TT_CUDA_CHECK(cudaGetLastError());
}

extern "C" void tt_cuda_hopper_attention_backward_pipelined(tt_bf16 *dq, tt_bf16 *dk, tt_bf16 *dv, const tt_bf16 *dout,
                                                            const tt_bf16 *out, const float *lse, const tt_bf16 *q,
                                                            const tt_bf16 *k, const tt_bf16 *v,
                                                            const tt_attention_shape *s, void *scratch,
                                                            size_t scratch_bytes, bool ordered_dq,
                                                            cudaStream_t stream) {
    const void *pointers[] = {dq, dk, dv, dout, out, q, k, v};
    check_pipelined_arguments(s, pointers, 8);
    TT_CHECK(!ordered_dq || s->head_dim == 128,
             "the pipelined backward's ordered dQ takes head_dim 128 (head_dim %lld)", (long long)s->head_dim);
    const size_t need = tt_cuda_hopper_attention_backward_pipelined_scratch_bytes(s, ordered_dq);
    TT_CHECK(scratch && scratch_bytes >= need,
             "the pipelined Hopper attention backward's scratch is %zu bytes; it "
             "needs %zu",
             scratch_bytes, need);
    float *D = (float *)scratch;
    tt_cuda_hopper_attention_dot(D, dout, out, s, stream);
    if (!ordered_dq) {
        if (s->head_dim == 64) backward_pipelined_dq_kernel<64>(dq, dk, dv, dout, lse, D, q, k, v, s, stream);
        else backward_pipelined_dq_kernel<128>(dq, dk, dv, dout, lse, D, q, k, v, s, stream);
        return;
    }
    typedef dkdv_layout<128, true, DKDV_STAGES(true)> ordered;
    /* the key-order schedule (not the one runs take) keeps the document code with or without documents */
    tt_cuda_kernel_shared_bytes((const void *)hopper_dkdv_pipelined_kernel<128, true, true>, (int)(ordered::bytes));
    const int T = (int)s->seq_len, Hq = (int)s->num_heads, Hkv = (int)s->num_kv_heads;
    const float scale = (float)s->scale, scale_log2 = (float)(s->scale * LOG2E);
    const int64_t B = s->batch;
    const CUtensorMap k_map = sequence_map(k, B, T, Hkv * HEAD_DIM, 128),
                      v_map = sequence_map(v, B, T, Hkv * HEAD_DIM, 128);
    const CUtensorMap q_map64 = sequence_map(q, B, T, Hq * HEAD_DIM, 64);
    const CUtensorMap do_map64 = sequence_map(dout, B, T, Hq * HEAD_DIM, 64);
    const dim3 kv_grid((unsigned)(s->batch * Hkv), (unsigned)((T + 127) / 128));
    float *dq_accum = D + d_floats_padded(s);
    const size_t accum = (size_t)(s->batch * Hq * padded_len(s) * HEAD_DIM);
    int *turns = (int *)(dq_accum + accum);
    /* dq_accum from zero (the bulk reductions add onto it) and the turns, contiguous */
    TT_CUDA_CHECK(cudaMemsetAsync(dq_accum, 0, need - sizeof(float) * d_floats_padded(s), stream));
    hopper_dkdv_pipelined_kernel<128, true, true><<<kv_grid, PIPE_THREADS, ordered::bytes, stream>>>(
        k_map, v_map, q_map64, do_map64, dk, dv, lse, D, T, Hq, Hkv, scale_log2, scale, s->positions, dq_accum, turns);
    TT_CUDA_CHECK(cudaGetLastError());
    const int64_t count = s->batch * Hq * (int64_t)T * HEAD_DIM;
    pipelined_dq_convert_kernel<<<(unsigned)((count / 4 + 255) / 256), 256, 0, stream>>>(
        dq, dq_accum, T, (int)padded_len(s), Hq, scale, count);
    TT_CUDA_CHECK(cudaGetLastError());
}
