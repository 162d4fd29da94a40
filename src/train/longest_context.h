/* `tiertrain plan --max-sequence-len`: the longest sequence_len whose plan fits every budget. The
 * plan of each length tried is the one `tiertrain train` would make (keys, spill down the tiers,
 * free keeps), priced by the step program's dry run, so the length found is one a run reaches
 * with the same peaks. */
#ifndef TT_TRAIN_LONGEST_CONTEXT_H
#define TT_TRAIN_LONGEST_CONTEXT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "config/run_config.h"
#include "core/tier.h"
#include "model/model_config.h"
#include "train/trainer.h"

/* One length priced against the budgets. */
typedef struct tt_context_fit {
    int64_t sequence_len;
    bool fits;
    size_t peak[TT_TIER_COUNT];   /* the dry run's peak of each tier */
    size_t budget[TT_TIER_COUNT]; /* where budgeted: the bytes (0 on a full disk) */
    bool budgeted[TT_TIER_COUNT]; /* a budget is checked there (false: unlimited, or the disk's size unknown) */
    tt_tier over;                 /* the first tier over its budget; TT_TIER_COUNT when it fits */
} tt_context_fit;

/* Prices run at sequence_len (everything else as given). */
tt_context_fit tt_context_fit_at(const tt_run_config *run, const tt_model_config *model, const tt_device *device,
                                 int64_t sequence_len);

/* The longest multiple of step that fits, found by doubling from step then bisecting (a longer
 * sequence never needs fewer bytes on any tier). Writes one line per length tried to log (may be
 * NULL). *longest_fit gets the fitting length's prices and *shortest_over those of the first
 * multiple that does not fit (sequence_len 0 when the search stopped at its ceiling). Returns the
 * length, 0 when not even step fits. */
int64_t tt_longest_sequence_len(const tt_run_config *run, const tt_device *device, int64_t step, FILE *log,
                                tt_context_fit *longest_fit, tt_context_fit *shortest_over);

/* The search's lines, then the plan at the longest length (tiertrain plan's output). */
void tt_print_longest_context(const tt_run_config *run, const tt_device *device, int64_t step, FILE *out);

#endif
