/* A mixture of experts on the CPU (backend.h: moe_forward, moe_backward), fp32. */
#ifndef TT_OPS_CPU_MOE_CPU_H
#define TT_OPS_CPU_MOE_CPU_H

#include "ops/backend.h"
#include "ops/cpu/ops_cpu.h"

/* The activation part of moe_backward's scratch (N*k*D elements of elem bytes), rounded up to 256 bytes: the fp32
 * part starts there. */
static inline size_t tt_moe_activation_scratch_bytes(const tt_moe_shape *s, size_t elem) {
    return ((size_t)(s->tokens * s->top_k * s->hidden) * elem + 255) / 256 * 256;
}

void tt_cpu_moe_forward_f32(tt_cpu_scratch *scratch, float *y, const float *residual, const float *x,
                            const float *router, const float *w_gate, const float *w_up, const float *w_down,
                            const tt_moe_shape *shape, const tt_moe_saved *saved);
void tt_cpu_moe_backward_f32(tt_cpu_scratch *scratch, float *dx, float *d_router, float *d_gate, float *d_up,
                             float *d_down, const float *dy, const float *x, const float *router, const float *w_gate,
                             const float *w_up, const float *w_down, const tt_moe_shape *shape,
                             const tt_moe_saved *saved, void *workspace);

#endif
