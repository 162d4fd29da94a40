/* The residency map: for each optimizer unit (the embedding, unit 0; decoder layer l, unit l + 1; the final
 * norm with the LM head, unit L + 1), where its trainable weights, gradients, fp32 master copy and AdamW moments
 * live, as a tier and a byte offset into that tier's buffer of the class. It is built from the plan and the size
 * table alone (before any memory exists), so `tiertrain plan` prints it and the model state turns its offsets into
 * addresses: the one answer to "where does unit u's X live?". */
#ifndef TT_MEMORY_RESIDENCY_H
#define TT_MEMORY_RESIDENCY_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "core/tier.h"
#include "memory/plan.h"
#include "memory/size_table.h"
#include "model/params.h"

typedef struct tt_unit_residency {
    int64_t start, end; /* its trainable elements [start, end) in the trainable layout (end == start: none) */
    /* Weights (compute precision): between uses in weights_tier. On the compute tier at weights_offset into the
     * trainable weights buffer; weight-offloaded units (cpu_offloading_weights) live in host memory and pass
     * through stream buffer weights_buffer (0 or 1) at weights_offset. */
    tt_tier weights_tier;
    size_t weights_offset;
    int weights_buffer; /* -1 unless weight-offloaded */
    /* ZeRO stage 3: a decoder layer of another rank's shard, whose weights pass through ring slot weights_slot (0 or
     * 1, at weights_offset) from their owner before each use; -1: they live here */
    int weights_slot;
    /* Gradients (gradient precision): always written on the compute tier, at gradients_offset into the gradient
     * buffer: the unit's own place, or one of the gradient ring's two slots (gradient_slot 0/1, shared with the
     * units two apart), from which they stream to the optimizer's host staging after the unit's backward. */
    size_t gradients_offset;
    int gradient_slot; /* -1 outside the ring */
    /* Master weights and moments (fp32 master; moments in their precision): optimizer_tier is the compute tier
     * (at optimizer_element, an element index into the master and moment buffers) or, for optimizer offload's
     * host share, host memory (at optimizer_element into the host share's buffers). */
    tt_tier optimizer_tier;
    int64_t optimizer_element;
    /* ZeRO stage 1: the unit is in another rank's shard (optimizer_shards.h); this rank keeps no master weights or
     * moments for it and its gradients are summed on that rank */
    bool optimizer_on_other_rank;
} tt_unit_residency;

typedef struct tt_residency_map {
    int64_t units;           /* L + 2 */
    tt_unit_residency *unit; /* [units] */
} tt_residency_map;

/* The map of a plan whose size table is computed (tensor sizes suffice). */
void tt_residency_build(tt_residency_map *map, const tt_param_table *params, const tt_plan *plan,
                        const tt_size_table *sizes);
void tt_residency_free(tt_residency_map *map);

/* Runs of units placed alike, one line each ("units 1-18 (layers 0-17): weights gpu, gradients gpu, ..."). */
void tt_residency_print(const tt_residency_map *map, const tt_plan *plan, const tt_size_table *sizes, FILE *out);

#endif
