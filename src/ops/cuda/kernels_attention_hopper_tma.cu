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
#include "ops/cuda/hopper_wgmma.cuh"

#define PIPE_THREADS 384 /* a producer warpgroup, then two consumer warpgroups */
#define PIPE_BLOCK_M 128 /* queries a block: 64 a consumer */
#define PIPE_BLOCK_N 128 /* keys a tile */
#define PIPE_TILE_BYTES (128 * HEAD_DIM * 2)
#define FWD_STAGES 3
/* Q, then the K ring, then the V ring, then the barriers; 1024 bytes more to align the base */
#define PIPE_BARRIERS_OFFSET ((1 + 2 * FWD_STAGES) * PIPE_TILE_BYTES)
#define PIPE_SHARED_BYTES (PIPE_BARRIERS_OFFSET + (1 + 4 * FWD_STAGES) * 8 + 1024)
#define PRODUCER_REGISTERS 40
#define CONSUMER_REGISTERS 232

/* ---- mbarriers, TMA and named barriers (PTX ISA: "Parallel Synchronization and Communication Instructions") ---- */

static __device__ __forceinline__ void barrier_init(uint32_t bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

/* One arrival that also announces `bytes` the copies signalling this barrier will bring. */
static __device__ __forceinline__ void barrier_expect_bytes(uint32_t bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}

static __device__ __forceinline__ void barrier_arrive(uint32_t bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

/* Waits until the barrier's phase of this parity completed (a fresh barrier counts its phase before 0 as complete,
 * so a wait for parity 1 passes at once). */
static __device__ __forceinline__ void barrier_wait(uint32_t bar, uint32_t parity) {
    uint32_t done = 0;
    while (!done)
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done)
                     : "r"(bar), "r"(parity)
                     : "memory");
}

/* The box of 64 columns x 128 rows at (column, row) of the map's matrix into shared memory, 128-byte swizzled;
 * completion counted in bytes on `bar`. Rows past the matrix are zeros. */
static __device__ __forceinline__ void tma_load(uint32_t dst, const CUtensorMap *map, int column, int row,
                                                uint32_t bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], "
                 "[%4];\n" ::"r"(dst),
                 "l"((uint64_t)map), "r"(column), "r"(row), "r"(bar)
                 : "memory");
}

/* A tile of 128 rows x 128 columns: its two 64-column halves, 128 x 128 bytes apart. */
static __device__ __forceinline__ void tma_load_tile(uint32_t dst, const CUtensorMap *map, int column, int row,
                                                     uint32_t bar) {
    tma_load(dst, map, column, row, bar);
    tma_load(dst + 128 * 128, map, column + 64, row, bar);
}

static __device__ __forceinline__ void named_barrier_sync(uint32_t id, uint32_t threads) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

static __device__ __forceinline__ void named_barrier_arrive(uint32_t id, uint32_t threads) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

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
            tma_load_tile(q_tile, &q_map, h * HEAD_DIM, b * T + m0, q_full);
            for (int j = 0; j < tiles; j++) {
                const int s = j % FWD_STAGES, row = b * T + n_first + j * PIPE_BLOCK_N;
                const uint32_t empty_parity = ((j / FWD_STAGES) & 1) ^ 1;
                barrier_wait(K_EMPTY(s), empty_parity);
                barrier_expect_bytes(K_FULL(s), PIPE_TILE_BYTES);
                tma_load_tile(k_ring + s * PIPE_TILE_BYTES, &k_map, kv_head * HEAD_DIM, row, K_FULL(s));
                barrier_wait(V_EMPTY(s), empty_parity);
                barrier_expect_bytes(V_FULL(s), PIPE_TILE_BYTES);
                tma_load_tile(v_ring + s * PIPE_TILE_BYTES, &v_map, kv_head * HEAD_DIM, row, V_FULL(s));
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

/* The map of a row-major bf16 matrix [rows, columns] read in boxes of 64 columns x 128 rows, 128-byte swizzled. */
static CUtensorMap matrix_map(const void *base, int64_t rows, int64_t columns) {
    CUtensorMap map;
    const cuuint64_t dims[2] = {(cuuint64_t)columns, (cuuint64_t)rows};
    const cuuint64_t strides[1] = {(cuuint64_t)columns * 2};
    const cuuint32_t box[2] = {64, 128}, element_strides[2] = {1, 1};
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
    static bool configured = false;
    if (!configured) {
        TT_CUDA_CHECK(cudaFuncSetAttribute(hopper_forward_pipelined_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           PIPE_SHARED_BYTES));
        configured = true;
    }
    const int64_t rows = s->batch * s->seq_len;
    const CUtensorMap q_map = matrix_map(q, rows, s->num_heads * HEAD_DIM);
    const CUtensorMap k_map = matrix_map(k, rows, s->num_kv_heads * HEAD_DIM);
    const CUtensorMap v_map = matrix_map(v, rows, s->num_kv_heads * HEAD_DIM);
    const dim3 grid((unsigned)(s->batch * s->num_heads), (unsigned)((s->seq_len + PIPE_BLOCK_M - 1) / PIPE_BLOCK_M));
    hopper_forward_pipelined_kernel<<<grid, PIPE_THREADS, PIPE_SHARED_BYTES, stream>>>(
        q_map, k_map, v_map, out, lse, (int)s->seq_len, (int)s->num_heads, (int)s->num_kv_heads,
        (float)(s->scale * LOG2E), s->positions);
    TT_CUDA_CHECK(cudaGetLastError());
}
