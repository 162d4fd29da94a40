/* Free keeps. Under checkpointing every layer recomputes itself in the backward, but the top
 * layers' backward comes straight after the LM head, whose phase often needs less memory than a
 * layer's backward (at 64k tokens on Qwen3-1.7B: 1.7 GiB for the head against 4.1 GiB for a
 * layer's recomputed tensors). Keeping a top layer's attention half from the forward (the norm,
 * q, k, v, the attention output and its log-sum-exp; the MLP half is still recomputed) then
 * raises no tier's peak and spares that layer's attention recompute. Kept and recomputed tensors
 * have the same bits, so the run's bits do not change. */
#ifndef TT_MEMORY_FREE_KEEP_H
#define TT_MEMORY_FREE_KEEP_H

#include <stdint.h>

#include "memory/plan.h"
#include "memory/size_table.h"

/* From the top layer down, while the layer recomputes everything on the compute tier and keeping
 * its attention half leaves every tier's peak where it was, switches it to recompute its MLP half
 * only. Returns how many layers it switched. Each try is priced by the pricer. */
int64_t tt_plan_keep_free(tt_plan *plan, const tt_plan_pricer *pricer);

#endif
