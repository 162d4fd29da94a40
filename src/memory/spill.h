/* Tiers spill in order: when the compute tier's budget is full, layer inputs (the checkpoints)
 * move to the next tier (GPU -> pinned host memory, host memory -> disk), from the first layer
 * on, and once none is left there the kept saved activations of layers follow, a layer's as one
 * block; when the pinned tier's budget is full its inputs, then its kept blocks, move on to disk
 * from the last layer down (needed first in the backward: the disk has the whole backward to
 * stay ahead). One move at a time, until every tier fits or nothing is left to move. The plan
 * records where everything went; the size table prices it. */
#ifndef TT_MEMORY_SPILL_H
#define TT_MEMORY_SPILL_H

#include <stdbool.h>
#include <stddef.h>

#include "memory/plan.h"
#include "memory/size_table.h"

typedef struct tt_spill_result {
    bool fits;                            /* every tier within its budget after the moves */
    int64_t to_pinned;                    /* layer inputs moved from the GPU to pinned host memory */
    int64_t to_disk;                      /* layer inputs moved to disk */
    int64_t kept_to_pinned, kept_to_disk; /* layers whose kept saved activations moved there */
} tt_spill_result;

/* Budgets of 0 are unlimited. Each move is priced by the pricer. */
tt_spill_result tt_plan_spill(tt_plan *plan, const tt_plan_pricer *pricer, size_t compute_budget, size_t pinned_budget);

#endif
