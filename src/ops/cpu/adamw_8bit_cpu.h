/* The CPU backend's 8-bit AdamW (ops/adamw_8bit.h): bitsandbytes' AdamW8bit step over fp32 weights, element for
 * element the operations of its CUDA kernels (kOptimizerStatic8bit2StateBlockwise for the 8-bit tensors,
 * kOptimizer32bit2State for the small ones) in their order, each rounded once. Deterministic: blocks are
 * independent, so the thread count changes nothing. */
#ifndef TT_OPS_CPU_ADAMW_8BIT_CPU_H
#define TT_OPS_CPU_ADAMW_8BIT_CPU_H

#include "ops/adamw_8bit.h"
#include "ops/dynamic_map.h"

/* One step of tensors[count] (their elements relative to weights and g) on the calling thread's OpenMP team. */
void tt_cpu_adamw_8bit_update(const tt_adamw_8bit_maps *maps, float *weights, const float *g,
                              const tt_adamw_8bit_moment *m, const tt_adamw_8bit_moment *v,
                              const tt_adamw_8bit_tensor *tensors, int count, const tt_adamw_8bit_scalars *k);

#endif
