/* ZeRO stage 1 (zero_stage: 1): the data-parallel ranks share out the optimizer's work and state by whole optimizer
 * units (the embedding, each decoder layer, the final norm with the LM head): rank r keeps the fp32 master weights
 * and AdamW moments of the units in its shard, receives the summed gradients of those units only and updates them,
 * then hands their new weights to the other ranks. Whole units keep each unit's gradient norm partial on one rank,
 * so the norm and every update are the bits of the unsharded run. */
#ifndef TT_MEMORY_OPTIMIZER_SHARDS_H
#define TT_MEMORY_OPTIMIZER_SHARDS_H

#include <stdint.h>

/* bounds[ranks + 1]: rank r's shard is the trainable elements [bounds[r], bounds[r + 1]), each bound a unit start
 * (unit_start[units + 1], tt_optimizer_unit_starts), the cut nearest to an equal share of the elements; a rank may
 * get no unit when there are fewer units than ranks. */
void tt_optimizer_shard_bounds(const int64_t *unit_start, int64_t units, int ranks, int64_t *bounds);

#endif
