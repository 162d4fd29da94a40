/* Device helpers of tiertrain's pipelined Hopper attention kernels (sm_90a; included by .cu files only): mbarriers,
 * TMA tensor loads and named barriers (PTX ISA, "Parallel Synchronization and Communication Instructions" and
 * "cp.async.bulk.tensor"). */
#ifndef TT_OPS_CUDA_HOPPER_PIPELINE_CUH
#define TT_OPS_CUDA_HOPPER_PIPELINE_CUH

#include <stdint.h>

#include <cuda.h> /* CUtensorMap */

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
        asm volatile(
            "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
            : "=r"(done)
            : "r"(bar), "r"(parity)
            : "memory");
}

/* The map's box (64 columns x its rows of one sequence) at (column, row, sequence) of the map's [B, T, columns] tensor
 * into shared memory, 128-byte swizzled; completion counted in bytes on `bar`. Rows past T are zeros (not the next
 * sequence's), as the cp.async kernels' zero fill. */
static __device__ __forceinline__ void tma_load(uint32_t dst, const CUtensorMap *map, int column, int row, int sequence,
                                                uint32_t bar) {
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, "
                 "%4}], [%5];\n" ::"r"(dst),
                 "l"((uint64_t)map), "r"(column), "r"(row), "r"(sequence), "r"(bar)
                 : "memory");
}

/* A tile of ROWS rows x HD columns, HD 64 or 128 (a map whose box has ROWS rows): its 64-column halves, ROWS x 128
 * bytes apart, the layout of the cp.async tiles. */
template <int ROWS, int HD>
static __device__ __forceinline__ void tma_load_tile(uint32_t dst, const CUtensorMap *map, int column, int row,
                                                     int sequence, uint32_t bar) {
    static_assert(HD == 64 || HD == 128, "a tile is one or two 64-column halves");
    tma_load(dst, map, column, row, sequence, bar);
    if (HD == 128) tma_load(dst + ROWS * 128, map, column + 64, row, sequence, bar);
}

static __device__ __forceinline__ void named_barrier_sync(uint32_t id, uint32_t threads) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

static __device__ __forceinline__ void named_barrier_arrive(uint32_t id, uint32_t threads) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

#endif
