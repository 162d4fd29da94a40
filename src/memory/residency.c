#include "memory/residency.h"

#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "memory/optimizer_shards.h"

void tt_residency_build(tt_residency_map *map, const tt_param_table *params, const tt_plan *plan,
                        const tt_size_table *t) {
    const int64_t L = plan->num_layers, units = L + 2;
    int64_t *start = tt_xcalloc((size_t)units + 1, sizeof(int64_t), "optimizer units");
    tt_optimizer_unit_starts(params, L, start);
    map->units = units;
    map->unit = tt_xcalloc((size_t)units, sizeof(tt_unit_residency), "residency map");
    const tt_tier compute = plan->compute_tier;
    const size_t weight = plan->weight_bytes, gradient = plan->gradient_bytes;
    /* the trainable weights: [before | buffer 0 | buffer 1 | after] with weight offload (size_table.h) */
    const bool weight_offload = t->weight_offload_first < t->weight_offload_end;
    const size_t buffers = tt_align_up((size_t)t->weight_offload_first * weight);
    int64_t streamed = 0; /* weight-offloaded layers so far: their buffer alternates */
    /* zero_stage 2: the sharded gradients' layout (optimizer_shards.h) */
    size_t *sharded_offset = NULL, *weight_offset = NULL, slot_bytes = 0;
    int *sharded_slot = NULL, *weight_slot = NULL;
    if (tt_plan_shards_gradients(plan)) {
        sharded_offset = tt_xcalloc((size_t)units, sizeof(size_t), "gradient layout");
        sharded_slot = tt_xcalloc((size_t)units, sizeof(int), "gradient layout");
        tt_sharded_unit_layout(start, L, t->optimizer_shard_start, t->optimizer_shard_end, gradient, sharded_offset,
                               sharded_slot, &slot_bytes);
    }
    if (tt_plan_shards_weights(plan)) { /* zero_stage 3: the weights' layout too */
        weight_offset = tt_xcalloc((size_t)units, sizeof(size_t), "weight layout");
        weight_slot = tt_xcalloc((size_t)units, sizeof(int), "weight layout");
        tt_sharded_unit_layout(start, L, t->optimizer_shard_start, t->optimizer_shard_end, weight, weight_offset,
                               weight_slot, &slot_bytes);
    }
    for (int64_t u = 0; u < units; u++) {
        tt_unit_residency *r = &map->unit[u];
        r->start = start[u];
        r->end = start[u + 1];
        r->weights_tier = compute;
        r->weights_buffer = -1;
        r->weights_slot = -1;
        if (weight_offset) { /* zero_stage 3 (data parallel refuses weight offload with it) */
            r->weights_offset = weight_offset[u];
            r->weights_slot = weight_slot[u];
        } else if (!weight_offload || r->end <= t->weight_offload_first || r->start == r->end) {
            r->weights_offset = (size_t)r->start * weight;
        } else if (r->start >= t->weight_offload_end) {
            r->weights_offset =
                buffers + 2 * t->weight_offload_slot + (size_t)(r->start - t->weight_offload_end) * weight;
        } else { /* a weight-offloaded layer: its home in host memory, its compute copy in a stream buffer */
            r->weights_tier = t->host_tier;
            r->weights_buffer = (int)(streamed++ % 2);
            r->weights_offset = buffers + (size_t)r->weights_buffer * t->weight_offload_slot;
        }
        /* gradients: flat, or [units before the ring | slot 0 | slot 1 | unit L + 1] (size_table.h) */
        r->gradient_slot = -1;
        const int64_t first = t->gradient_ring_first;
        if (sharded_offset) {
            r->gradients_offset = sharded_offset[u];
            r->gradient_slot = sharded_slot[u];
        } else if (u < first || first > L) {
            r->gradients_offset = (size_t)r->start * gradient;
        } else {
            const size_t before = tt_align_up((size_t)start[first] * gradient);
            if (u <= L) {
                r->gradient_slot = (int)(u % 2);
                r->gradients_offset = before + (size_t)r->gradient_slot * t->gradient_ring_slot;
            } else {
                r->gradients_offset = before + 2 * t->gradient_ring_slot;
            }
        }
        const bool host_share =
            r->start >= t->optimizer_host_start && r->start < t->optimizer_shard_end && r->end > r->start;
        r->optimizer_tier = host_share ? t->host_tier : compute;
        r->optimizer_element = host_share ? r->start - t->optimizer_host_start : r->start - t->optimizer_shard_start;
        r->optimizer_on_other_rank =
            r->end > r->start && (r->start < t->optimizer_shard_start || r->start >= t->optimizer_shard_end);
    }
    free(sharded_offset);
    free(sharded_slot);
    free(weight_offset);
    free(weight_slot);
    free(start);
}

void tt_residency_free(tt_residency_map *map) {
    free(map->unit);
    memset(map, 0, sizeof(*map));
}

/* What a line says of a unit: units print together when this is equal. */
static void describe(const tt_unit_residency *r, const tt_plan *plan, const tt_size_table *t, char *buf, size_t size) {
    if (r->end == r->start) {
        snprintf(buf, size, "nothing trains");
        return;
    }
    const char *compute = tt_tier_name(plan->compute_tier);
    char weights[96], gradients[96];
    if (r->weights_buffer >= 0)
        snprintf(weights, sizeof weights, "%s, streamed through 2 %s buffers", tt_tier_name(r->weights_tier), compute);
    else if (r->weights_slot >= 0)
        snprintf(weights, sizeof weights, "%s ring slot, from their rank (zero_stage 3)", compute);
    else snprintf(weights, sizeof weights, "%s", compute);
    if (r->gradient_slot >= 0 && r->optimizer_on_other_rank)
        snprintf(gradients, sizeof gradients, "%s ring slot, then summed on their rank (zero_stage 2)", compute);
    else if (r->gradient_slot >= 0)
        snprintf(gradients, sizeof gradients, "%s ring slot, then %s", compute, tt_tier_name(t->host_tier));
    else if (r->optimizer_tier != plan->compute_tier)
        snprintf(gradients, sizeof gradients, "%s, then %s", compute, tt_tier_name(t->host_tier));
    else snprintf(gradients, sizeof gradients, "%s", compute);
    snprintf(buf, size, "weights %s; gradients %s; %s %s", weights, gradients,
             plan->precision.master ? "master and moments" : "moments",
             r->optimizer_on_other_rank ? "on another rank (zero_stage)" : tt_tier_name(r->optimizer_tier));
}

static void unit_names(int64_t first, int64_t last, int64_t L, char *buf, size_t size) {
    const char *head = "final norm and LM head";
    if (first == 0 && last == 0) snprintf(buf, size, "embedding");
    else if (first == L + 1) snprintf(buf, size, "%s", head);
    else {
        const int64_t a = first == 0 ? 0 : first - 1, b = last > L ? L - 1 : last - 1;
        char layers[64];
        if (a == b) snprintf(layers, sizeof layers, "layer %lld", (long long)a);
        else snprintf(layers, sizeof layers, "layers %lld-%lld", (long long)a, (long long)b);
        snprintf(buf, size, "%s%s%s%s", first == 0 ? "embedding, " : "", layers, last > L ? ", " : "",
                 last > L ? head : "");
    }
}

void tt_residency_print(const tt_residency_map *map, const tt_plan *plan, const tt_size_table *t, FILE *out) {
    const int64_t L = map->units - 2;
    int64_t u = 0;
    while (u < map->units) {
        char what[320], next[320], names[160];
        describe(&map->unit[u], plan, t, what, sizeof what);
        int64_t last = u;
        while (last + 1 < map->units) {
            describe(&map->unit[last + 1], plan, t, next, sizeof next);
            if (strcmp(next, what) != 0) break;
            last++;
        }
        unit_names(u, last, L, names, sizeof names);
        if (last == u) fprintf(out, "  unit %lld (%s): %s\n", (long long)u, names, what);
        else fprintf(out, "  units %lld-%lld (%s): %s\n", (long long)u, (long long)last, names, what);
        u = last + 1;
    }
}
