/* The CPU AdamW of optimizer offload: torch.optim.AdamW over fp32 master weights and fp32
 * moments in host memory, vectorised (AVX-512 or AVX2, chosen at run time, with a scalar
 * fallback) and spread over a pool of pinned threads.
 *
 * Every element goes through exactly the operations of the CPU backend's scalar
 * tt_cpu_adamw_update_f32, in its order, each rounded once (no FMA: the file is compiled with
 * -ffp-contract=off, and the vector paths use separate multiply and add instructions; vector
 * sqrt and divide are correctly rounded like sqrtf and '/'), so every path and every thread
 * count gives the bits of the CPU backend, and of the CUDA kernel with fp32 moments, which
 * rounds the same operations the same way (__fmul_rn and friends).
 *
 * Threads: the pool's threads are started once and pinned one per CPU of the process's
 * (core/process_cpus.h: OpenMP's places where OpenMP binds its threads, else the affinity set);
 * a call hands each thread one contiguous share of the elements (whole 64-element blocks) and
 * returns when all are done. The calling thread computes the first share. One caller at a time
 * per pool. */
#ifndef TT_TRAIN_CPU_ADAMW_H
#define TT_TRAIN_CPU_ADAMW_H

#include <stdbool.h>
#include <stdint.h>

#include "ops/adamw_scalars.h"

typedef enum tt_cpu_adamw_isa {
    TT_CPU_ADAMW_SCALAR,
    TT_CPU_ADAMW_AVX2,
    TT_CPU_ADAMW_AVX512,
} tt_cpu_adamw_isa;

/* The widest vector path this CPU runs (asked once). */
tt_cpu_adamw_isa tt_cpu_adamw_best_isa(void);
const char *tt_cpu_adamw_isa_name(tt_cpu_adamw_isa isa);
/* false when this CPU cannot run it */
bool tt_cpu_adamw_isa_supported(tt_cpu_adamw_isa isa);

/* The per-step scalars are ops/adamw_scalars.h's: the same derivation as the CPU backend and the
 * CUDA kernel. */

/* One range on the calling thread: master, m, v updated in place from the fp32 gradient g;
 * when weight_bf16 is not NULL the new master weights are also written there rounded to bf16
 * (to nearest even, as the GPU does). decay: scalars->decay or 1. */
void tt_cpu_adamw_range(tt_cpu_adamw_isa isa, float *master, float *m, float *v, const float *g, uint16_t *weight_bf16,
                        int64_t n, const tt_adamw_scalars *scalars, float decay);

typedef struct tt_cpu_adamw_pool tt_cpu_adamw_pool;

/* threads >= 1 (the caller counts as one, so threads - 1 are started); isa must be supported. */
tt_cpu_adamw_pool *tt_cpu_adamw_pool_create(int threads, tt_cpu_adamw_isa isa);
void tt_cpu_adamw_pool_free(tt_cpu_adamw_pool *pool);
int tt_cpu_adamw_pool_threads(const tt_cpu_adamw_pool *pool);
tt_cpu_adamw_isa tt_cpu_adamw_pool_isa(const tt_cpu_adamw_pool *pool);

/* AdamW over segments (elements [segment_start[s], segment_start[s+1]) of every array, decaying
 * when segment_decays[s]), as the backend's adamw_update with a master copy. */
void tt_cpu_adamw_pool_update(tt_cpu_adamw_pool *pool, float *master, float *m, float *v, const float *g,
                              uint16_t *weight_bf16, const int64_t *segment_start, const unsigned char *segment_decays,
                              int segments, const tt_adamw_scalars *scalars);

#endif
