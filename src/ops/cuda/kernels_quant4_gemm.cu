/* The fused 4-bit GEMM (sm_90a): y[M,N] = x[M,K] W^T with W[N,K] a 4-bit frozen weight (ops/quant4.h) read as stored
 * and dequantized a tile at a time into shared memory, next to the warpgroup MMAs that consume it; no bf16 copy of W
 * in global memory. The alternative to tt_cuda_dequantize_4bit + cuBLASLt (the path the model uses today): which of
 * the two is faster is measured by `test_gpu_quant4 --speed`, and nothing calls this yet.
 *
 * The numbers: every W operand value is bf16(code value x block absmax) with the dequantization kernel's arithmetic
 * (quant4_device.cuh: the same functions, the same tables), so the products are those of the two-step path; the
 * sums are fp32 in the tensor cores' order (not cuBLASLt's: the outputs agree to rounding, not bit for bit), and each
 * output is rounded once to bf16 (round to nearest even).
 *
 * Shapes: K % 64 == 0 (a K tile of 64 is one absmax block of every W row, since the blocks of 64 run along the
 * flattened rows of K values) and N % 128 == 0 (whole N tiles: no masking of W rows); any M >= 0 (rows past M are
 * zero-filled and not stored). Other shapes are refused with a message. The Qwen3 / Llama linear layers meet both.
 *
 * A block computes a 256 (M) x 128 (N) tile of y with 256 threads, two warpgroups of 128 M rows each (two
 * m64n128k16 accumulators a thread: 128 fp32 registers). Per K tile of 64:
 *   - x [256 x 64 bf16] arrives by cp.async into a ring of GEMM_STAGES slots, 128-byte swizzled (the layout and the
 *     descriptors of kernels_attention_hopper.cu, a K-major A); each warpgroup loads only its own 128 rows, so its
 *     own wait on its products frees its rows of a slot;
 *   - W's codes [128 rows x 32 bytes] and the rows' absmax data (the fp32 absmax, or the nested absmax and the
 *     4-byte word holding the 8-bit absmax code) arrive by cp.async into the same ring;
 *   - one K tile ahead of the products, all 256 threads dequantize the codes from the ring into a bf16 W tile
 *     [128 x 64], 128-byte swizzled (a K-major B: the rows of W are N), one of GEMM_W_SLOTS;
 *   - each warpgroup issues 2 x 4 wgmma m64n128k16 (both operands from shared memory) and keeps one K tile's
 *     products in flight while it loads and dequantizes the next ones (wgmma_wait<1>).
 * The dequantization is CUDA-core work of ~32 values a thread per K tile, against 16 MMAs a block: a 256-row M tile
 * halves how often each W value is dequantized compared with 128 (every W tile is dequantized ceil(M / 256) times).
 *
 * Iteration kt (the barrier at its top orders everything):
 *   wait (own cp.async) for tile kt + 1's group; fence.proxy.async (own generic writes of W tile kt); __syncthreads;
 *   issue the products of tile kt (x slot kt % STAGES, W slot kt % W_SLOTS); wait until only they are in flight;
 *   the group's named barrier (its four warps are past that wait: its x rows of slot (kt - 1) % STAGES are free);
 *   cp.async tile kt + STAGES - 1 into ring slot (kt - 1) % STAGES (its codes were dequantized in iteration kt - 2);
 *   dequantize tile kt + 1 into W slot (kt + 1) % W_SLOTS (last read by the products of tile kt - 2, which every
 *   warpgroup waited for before this iteration's barrier).
 * Loads run STAGES - 2 = 2 iterations ahead of the dequantization that reads them.
 *
 * Shared memory (1024-byte aligned base): x ring 4 x 32 KiB, W tiles 3 x 16 KiB, codes ring 4 x 4 KiB, absmax ring
 * 4 x 1 KiB, the 16 code values and the 256-entry dynamic map (fp32): 197 KiB. One block an SM. */
#include <stdint.h>

#include <cuda_bf16.h>

#include "ops/cuda/cuda_check.h"
#include "ops/cuda/kernel_attributes.h"
#include "ops/cuda/hopper_pipeline.cuh" /* named_barrier_sync */
#include "ops/cuda/hopper_wgmma.cuh"    /* wgmma, descriptors, tile offsets; cp.async and pack_bf16 */
#include "ops/cuda/ops_cuda.h"
#include "ops/cuda/quant4_device.cuh"
#include "ops/quant4.h"

#define GEMM_BLOCK_M 256
#define GEMM_BLOCK_N 128
#define GEMM_BLOCK_K 64 /* one absmax block of a W row; 128 bytes of bf16: one swizzle row */
#define GEMM_THREADS 256
#define GEMM_STAGES 4  /* the cp.async ring: x, codes, absmax */
#define GEMM_W_SLOTS 3 /* bf16 W tiles: one being written, one being read, one still read by products in flight */

#define X_TILE_BYTES (GEMM_BLOCK_M * GEMM_BLOCK_K * 2)     /* 32 KiB */
#define W_TILE_BYTES (GEMM_BLOCK_N * GEMM_BLOCK_K * 2)     /* 16 KiB */
#define CODES_TILE_BYTES (GEMM_BLOCK_N * GEMM_BLOCK_K / 2) /* 4 KiB: 32 bytes a row */
/* per W row: fp32 absmax (plain) or nested absmax (double), then (double) the 4-byte word holding its absmax code */
#define ABSMAX_TILE_BYTES (GEMM_BLOCK_N * 8)
#define X_RING_AT 0
#define W_TILES_AT (X_RING_AT + GEMM_STAGES * X_TILE_BYTES)
#define CODES_RING_AT (W_TILES_AT + GEMM_W_SLOTS * W_TILE_BYTES)
#define ABSMAX_RING_AT (CODES_RING_AT + GEMM_STAGES * CODES_TILE_BYTES)
#define CODE_TABLE_AT (ABSMAX_RING_AT + GEMM_STAGES * ABSMAX_TILE_BYTES)
#define MAP_TABLE_AT (CODE_TABLE_AT + 16 * 4)
#define GEMM_SHARED_BYTES (MAP_TABLE_AT + 256 * 4 + 1024) /* + the alignment of the base */

/* Where a tile's parts go, the pointers and sizes of one launch. */
typedef struct gemm_4bit_args {
    tt_bf16 *y;             /* [M, N] */
    const tt_bf16 *x;       /* [M, K] */
    const unsigned char *q; /* W [N, K], 4-bit (tt_quant4_layout l) */
    tt_quant4_layout l;
    int M, N, K, k_tiles; /* k_tiles = K / 64: also the absmax blocks of a W row */
    bool nf4, double_quant;
} gemm_4bit_args;

/* K tile kt into ring slot `slot`: the warpgroup's 128 rows of x (8 cp.async a thread; rows past M zero-filled), W
 * rows n0.. n0 + 127's 32 code bytes (one 16-byte cp.async a thread) and their absmax data (one 4-byte cp.async for
 * half the threads each). */
static __device__ __forceinline__ void load_stage(const gemm_4bit_args *a, uint32_t ring_base, int slot, int kt, int m0,
                                                  int n0) {
    const int tid = threadIdx.x, group = tid >> 7, group_tid = tid & 127;
    const int k0 = kt * GEMM_BLOCK_K;
    const uint32_t x_slot = ring_base + X_RING_AT + slot * X_TILE_BYTES;
#pragma unroll
    for (int it = 0; it < 128 * 8 / 128; it++) {
        const int row = group * 128 + it * 16 + (group_tid >> 3), chunk = group_tid & 7;
        const int m = m0 + row;
        const bool valid = m < a->M;
        cp_async_16(x_slot + tile_offset<GEMM_BLOCK_M>(row, chunk),
                    valid ? (const void *)(a->x + (int64_t)m * a->K + k0 + chunk * 8) : (const void *)a->x, valid);
    }
    {
        const int row = tid >> 1, piece = tid & 1;
        const int64_t byte = ((int64_t)(n0 + row) * a->K + k0) / 2 + piece * 16;
        cp_async_16(ring_base + CODES_RING_AT + slot * CODES_TILE_BYTES + row * 32 + piece * 16, a->q + byte, true);
    }
    const int row = tid & 127;
    const int64_t block = (int64_t)(n0 + row) * a->k_tiles + kt; /* this row's absmax block of the tile */
    const uint32_t absmax_slot = ring_base + ABSMAX_RING_AT + slot * ABSMAX_TILE_BYTES;
    if (!a->double_quant) {
        if (tid < 128) cp_async_4(absmax_slot + row * 4, a->q + a->l.absmax + block * 4, true);
    } else if (tid < 128) {
        cp_async_4(absmax_slot + row * 4, a->q + a->l.nested_absmax + block / TT_QUANT4_NESTED_BLOCK * 4, true);
    } else {
        /* the aligned word around the code byte: a 4-byte copy must be 4-byte aligned (absmax_codes is, and the
         * tensor's bytes are padded to 16, so the word never runs past them) */
        cp_async_4(absmax_slot + GEMM_BLOCK_N * 4 + row * 4, a->q + a->l.absmax_codes + (block & ~(int64_t)3), true);
    }
}

/* K tile kt's codes (ring slot) into the bf16 W tile at w_tile: thread tid dequantizes 8-value chunks tid, tid + 256,
 * ... of the 128 x 8 (row-major), so 8 consecutive threads write one whole swizzled row of 128 bytes (no bank
 * conflicts) and read its 32 code bytes. Each value is bf16(code value x absmax) as in kernels_quant4.cu. */
static __device__ __forceinline__ void dequantize_tile(const gemm_4bit_args *a, unsigned char *shared, int slot,
                                                       unsigned char *w_tile, int kt, int n0, float offset) {
    const unsigned char *codes = shared + CODES_RING_AT + slot * CODES_TILE_BYTES;
    const unsigned char *absmax_data = shared + ABSMAX_RING_AT + slot * ABSMAX_TILE_BYTES;
    const float *code_table = (const float *)(shared + CODE_TABLE_AT);
    const float *map_table = (const float *)(shared + MAP_TABLE_AT);
#pragma unroll
    for (int it = 0; it < GEMM_BLOCK_N * 8 / GEMM_THREADS; it++) {
        const int index = it * GEMM_THREADS + (int)threadIdx.x, row = index >> 3, chunk = index & 7;
        float absmax = ((const float *)absmax_data)[row];
        if (a->double_quant) {
            const uint32_t word = ((const uint32_t *)(absmax_data + GEMM_BLOCK_N * 4))[row];
            const int64_t block = (int64_t)(n0 + row) * a->k_tiles + kt;
            const unsigned code = (word >> (8 * (unsigned)(block & 3))) & 0xffu; /* little-endian bytes */
            absmax = double_quant_absmax(map_table[code], absmax, offset);
        }
        /* 4 bytes: values 8 chunk .. 8 chunk + 7 of the row, the first of each pair in the high nibble */
        const uint32_t packed_codes = *(const uint32_t *)(codes + row * 32 + chunk * 4);
        uint4 values;
        uint32_t *pairs = (uint32_t *)&values;
#pragma unroll
        for (int b = 0; b < 4; b++) {
            const unsigned byte = (packed_codes >> (8 * b)) & 0xffu;
            pairs[b] = pack_bf16(dequantized_value(code_table[byte >> 4], absmax),
                                 dequantized_value(code_table[byte & 15u], absmax));
        }
        *(uint4 *)(w_tile + row * 128 + ((chunk ^ (row & 7)) << 4)) = values;
    }
}

static __global__ void __launch_bounds__(GEMM_THREADS, 1) gemm_4bit_nt_kernel(gemm_4bit_args a) {
    extern __shared__ unsigned char shared_raw[];
    const uint32_t raw = shared_address(shared_raw);
    const uint32_t base = (raw + 1023) & ~1023u;
    unsigned char *shared = shared_raw + (base - raw);

    const int tid = threadIdx.x, group = tid >> 7, warp = (tid >> 5) & 3, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int n0 = blockIdx.x * GEMM_BLOCK_N, m0 = blockIdx.y * GEMM_BLOCK_M; /* neighbours share x, not W */
    const int k_tiles = a.k_tiles;

    /* the code values (made by code_value itself: the same fp32 as the dequantization kernel's) and the dynamic map,
     * looked up from shared memory: constant memory serializes a warp's different addresses */
    if (tid < 16) ((float *)(shared + CODE_TABLE_AT))[tid] = code_value((unsigned)tid, a.nf4);
    if (a.double_quant) ((float *)(shared + MAP_TABLE_AT))[tid] = dynamic_map[tid];
    const float offset = a.double_quant ? *(const float *)(a.q + a.l.offset) : 0.0f;

#pragma unroll
    for (int s = 0; s < GEMM_STAGES - 1; s++) {
        if (s < k_tiles) load_stage(&a, base, s, s, m0, n0);
        cp_async_commit(); /* one group a tile, empty past the last: the waits count groups */
    }
    cp_async_wait<GEMM_STAGES - 2>(); /* tile 0 */
    __syncthreads();                  /* ...every thread's, and the tables */
    dequantize_tile(&a, shared, 0, shared + W_TILES_AT, 0, n0, offset);

    float acc[2][64]; /* the warpgroup's rows 0..63 and 64..127: the m64n128 accumulator layout */
#pragma unroll
    for (int h = 0; h < 2; h++)
#pragma unroll
        for (int i = 0; i < 64; i++) acc[h][i] = 0.0f;

    for (int kt = 0; kt < k_tiles; kt++) {
        cp_async_wait<GEMM_STAGES - 3>(); /* this thread's copies of tile kt + 1 (and so of tile kt) have landed */
        fence_proxy_async();              /* this thread's W tile kt stores and x copies -> the MMAs' reads */
        __syncthreads();
        const uint32_t x_tile = base + X_RING_AT + (kt % GEMM_STAGES) * X_TILE_BYTES + group * 128 * 128;
        const uint32_t w_tile = base + W_TILES_AT + (kt % GEMM_W_SLOTS) * W_TILE_BYTES;
        wgmma_fence();
        fence_accumulators(acc[0]);
        fence_accumulators(acc[1]);
#pragma unroll
        for (int ks = 0; ks < GEMM_BLOCK_K / 16; ks++) {
            const uint64_t w_desc = descriptor(w_tile + k_slice<GEMM_BLOCK_N>(ks), 16, 1024);
            wgmma_ss(acc[0], descriptor(x_tile + k_slice<GEMM_BLOCK_M>(ks), 16, 1024), w_desc, 1);
            wgmma_ss(acc[1], descriptor(x_tile + 64 * 128 + k_slice<GEMM_BLOCK_M>(ks), 16, 1024), w_desc, 1);
        }
        wgmma_commit();
        wgmma_wait<1>(); /* the products of tile kt - 1 are done; tile kt's run on */
        fence_accumulators(acc[0]);
        fence_accumulators(acc[1]);
        named_barrier_sync(1 + group, 128); /* ...in all four warps of the group: its rows of x slot kt - 1 are free */
        if (kt + GEMM_STAGES - 1 < k_tiles)
            load_stage(&a, base, (kt + GEMM_STAGES - 1) % GEMM_STAGES, kt + GEMM_STAGES - 1, m0, n0);
        cp_async_commit();
        if (kt + 1 < k_tiles)
            dequantize_tile(&a, shared, (kt + 1) % GEMM_STAGES,
                            shared + W_TILES_AT + ((kt + 1) % GEMM_W_SLOTS) * W_TILE_BYTES, kt + 1, n0, offset);
    }
    wgmma_wait<0>();
    fence_accumulators(acc[0]);
    fence_accumulators(acc[1]);
    cp_async_wait<0>(); /* nothing in flight at exit (the last groups are empty) */

    /* d[4c + 0..1]: row g, columns 8c + 2t and + 1; d[4c + 2..3]: the same columns of row g + 8 (of the warp's 16) */
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int row_g = m0 + group * 128 + h * 64 + warp * 16 + g, row_g8 = row_g + 8;
        tt_bf16 *y_g = a.y + (int64_t)row_g * a.N + n0 + 2 * t, *y_g8 = y_g + (int64_t)8 * a.N;
#pragma unroll
        for (int c = 0; c < 16; c++) {
            if (row_g < a.M) *(uint32_t *)(y_g + 8 * c) = pack_bf16(acc[h][4 * c], acc[h][4 * c + 1]);
            if (row_g8 < a.M) *(uint32_t *)(y_g8 + 8 * c) = pack_bf16(acc[h][4 * c + 2], acc[h][4 * c + 3]);
        }
    }
}

extern "C" void tt_cuda_quant4_gemm_set_dynamic_map(const float *map) {
    TT_CUDA_CHECK(cudaMemcpyToSymbol(dynamic_map, map, 256 * sizeof(float)));
}

extern "C" void tt_cuda_gemm_4bit_nt(tt_bf16 *y, const tt_bf16 *x, const void *quantized, int64_t M, int64_t N,
                                     int64_t K, const tt_quant4_format *format, cudaStream_t stream) {
    TT_CHECK(format->type != TT_QUANT_INT8, "the fused GEMM reads 4-bit weights; an 8-bit one is dequantized first");
    TT_CHECK(K > 0 && K % GEMM_BLOCK_K == 0 && N > 0 && N % GEMM_BLOCK_N == 0 && M >= 0,
             "the fused 4-bit GEMM takes K a multiple of %d and N a multiple of %d, not M %lld, N %lld, K %lld",
             GEMM_BLOCK_K, GEMM_BLOCK_N, (long long)M, (long long)N, (long long)K);
    TT_CHECK(M <= (int64_t)GEMM_BLOCK_M * 65535 && N <= (int64_t)GEMM_BLOCK_N * 65535 && K <= (1 << 30),
             "the fused 4-bit GEMM's grid or indices cannot hold M %lld, N %lld, K %lld", (long long)M, (long long)N,
             (long long)K);
    TT_CHECK(((uintptr_t)x & 15) == 0 && ((uintptr_t)quantized & 15) == 0 && ((uintptr_t)y & 3) == 0,
             "the fused 4-bit GEMM needs x and the quantized weight 16-byte aligned and y 4-byte aligned");
    if (M == 0) return;
    gemm_4bit_args a;
    memset(&a, 0, sizeof a);
    a.y = y;
    a.x = x;
    a.q = (const unsigned char *)quantized;
    a.l = tt_quant4_layout_of(N * K, format);
    a.M = (int)M;
    a.N = (int)N;
    a.K = (int)K;
    a.k_tiles = (int)(K / GEMM_BLOCK_K);
    a.nf4 = format->type == TT_QUANT4_NF4;
    a.double_quant = format->double_quant;
    tt_cuda_kernel_shared_bytes((const void *)gemm_4bit_nt_kernel, (int)(GEMM_SHARED_BYTES));
    const dim3 grid((unsigned)(N / GEMM_BLOCK_N), (unsigned)((M + GEMM_BLOCK_M - 1) / GEMM_BLOCK_M));
    gemm_4bit_nt_kernel<<<grid, GEMM_THREADS, GEMM_SHARED_BYTES, stream>>>(a);
    TT_CUDA_CHECK(cudaGetLastError());
}
