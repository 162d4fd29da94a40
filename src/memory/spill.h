/* Tiers spill in order: when the compute tier's budget is full, layer inputs (the checkpoints)
 * move to the next tier (GPU -> pinned host memory, host memory -> disk), and when the pinned
 * tier's budget is full its inputs move on to disk, one layer at a time, until every tier fits
 * or nothing is left to move. The plan records where each input went; the size table prices it. */
#ifndef TT_MEMORY_SPILL_H
#define TT_MEMORY_SPILL_H

#include <stdbool.h>
#include <stddef.h>

#include "memory/plan.h"
#include "model/params.h"
#include "ops/backend.h"

typedef struct tt_spill_result {
    bool fits;         /* every tier within its budget after the moves */
    int64_t to_pinned; /* layer inputs moved from the GPU to pinned host memory */
    int64_t to_disk;   /* layer inputs moved to disk */
} tt_spill_result;

/* Budgets of 0 are unlimited. The backend must be configured (its scratch is priced). */
tt_spill_result tt_plan_spill(tt_plan *plan, const tt_model_config *model, const tt_param_table *params,
                              const tt_backend *backend, size_t compute_budget, size_t pinned_budget);

#endif
