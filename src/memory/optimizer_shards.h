/* ZeRO stage 1 (zero_stage: 1): the data-parallel ranks share out the optimizer's work and state by whole optimizer
 * units (the embedding, each decoder layer, the final norm with the LM head): rank r keeps the fp32 master weights
 * and AdamW moments of the units in its shard, receives the summed gradients of those units only and updates them,
 * then hands their new weights to the other ranks. Whole units keep each unit's gradient norm partial on one rank,
 * so the norm and every update are the bits of the unsharded run. */
#ifndef TT_MEMORY_OPTIMIZER_SHARDS_H
#define TT_MEMORY_OPTIMIZER_SHARDS_H

#include <stddef.h>
#include <stdint.h>

/* bounds[ranks + 1]: rank r's shard is the trainable elements [bounds[r], bounds[r + 1]), each bound a unit start
 * (unit_start[units + 1], tt_optimizer_unit_starts), the cut nearest to an equal share of the elements; a rank may
 * get no unit when there are fewer units than ranks. */
void tt_optimizer_shard_bounds(const int64_t *unit_start, int64_t units, int ranks, int64_t *bounds);

/* The units of the shard [shard_start, shard_end): [*first_unit, *end_unit) (the whole model: [0, units)). */
void tt_optimizer_shard_units(const int64_t *unit_start, int64_t units, int64_t shard_start, int64_t shard_end,
                              int64_t *first_unit, int64_t *end_unit);

/* ZeRO stage 2 (zero_stage: 2) also shards the gradients: a decoder layer outside this rank's shard computes its
 * gradients in one of two ring slots and, as soon as its backward is done, every rank sends them to the layer's
 * owner, which adds them in rank order into its own place; the embedding and the final norm with the LM head keep
 * their place on every rank (the LM head writes a tied embedding's gradient first, the embedding's backward adds
 * to it last), and are reduced to their owner the same way.
 *
 * ZeRO stage 3 (zero_stage: 3) shards the trainable weights the same way: a decoder layer outside this rank's shard
 * lives only on its owner, which sends it (a broadcast) into every rank's ring slot before the layer's forward and
 * again before its backward; the embedding and the final norm with the LM head stay on every rank (their owner sends
 * their new weights after each update).
 *
 * The buffer (gradients, or with stage 3 the trainable weights) of a rank whose shard is [shard_start, shard_end):
 * [the embedding unless in the shard | the shard | the final norm and LM head unless in the shard | slot 0 | slot 1],
 * each part aligned. Fills offset[u] (bytes into the buffer) and slot[u] (0 or 1 for a ringed layer, unit u in slot
 * u % 2; -1: its own place) for units 0 .. num_layers + 1, and *slot_bytes (the largest ringed layer); returns the
 * buffer's bytes. */
size_t tt_sharded_unit_layout(const int64_t *unit_start, int64_t num_layers, int64_t shard_start, int64_t shard_end,
                              size_t element_bytes, size_t *offset, int *slot, size_t *slot_bytes);

#endif
