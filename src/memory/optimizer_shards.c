#include "memory/optimizer_shards.h"

#include <stdbool.h>

#include "core/tier.h"

void tt_optimizer_shard_bounds(const int64_t *unit_start, int64_t units, int ranks, int64_t *bounds) {
    const int64_t total = unit_start[units];
    bounds[0] = 0;
    int64_t u = 0; /* the unit the last cut was made before */
    for (int r = 1; r < ranks; r++) {
        const double target = (double)total * r / ranks;
        /* the first unit start at or past the target, or the one before it when that is nearer */
        while (u < units && (double)unit_start[u] < target) u++;
        int64_t cut = u;
        if (cut > 0 && target - (double)unit_start[cut - 1] < (double)unit_start[cut] - target) cut--;
        bounds[r] = unit_start[cut] > bounds[r - 1] ? unit_start[cut] : bounds[r - 1];
    }
    bounds[ranks] = total;
}

void tt_optimizer_shard_units(const int64_t *start, int64_t units, int64_t shard_start, int64_t shard_end,
                              int64_t *first_unit, int64_t *end_unit) {
    int64_t first = 0, end = units;
    if (shard_start > 0)
        while (first < units && start[first] < shard_start) first++;
    if (shard_end < start[units]) {
        end = first;
        while (end < units && start[end] < shard_end) end++;
    }
    *first_unit = first;
    *end_unit = end;
}

size_t tt_sharded_unit_layout(const int64_t *start, int64_t L, int64_t shard_start, int64_t shard_end,
                              size_t element_bytes, size_t *offset, int *slot, size_t *slot_bytes) {
    const int64_t units = L + 2;
    size_t at = 0, largest = 0;
    /* each unit's part, in the buffer's order: the embedding, the shard, the head, the slots */
    for (int64_t u = 0; u < units; u++) {
        const int64_t n = start[u + 1] - start[u];
        const bool mine = n > 0 && start[u] >= shard_start && start[u] < shard_end;
        slot[u] = -1;
        offset[u] = 0;
        if (n == 0) continue;
        if (!mine && u >= 1 && u <= L) { /* a ringed layer: placed below */
            slot[u] = (int)(u % 2);
            if ((size_t)n * element_bytes > largest) largest = (size_t)n * element_bytes;
        }
    }
    if (start[1] > start[0] && !(start[0] >= shard_start && start[0] < shard_end)) { /* the embedding's own place */
        offset[0] = at;
        at = tt_align_up(at + (size_t)(start[1] - start[0]) * element_bytes);
    }
    const size_t shard_at = at; /* the shard: contiguous, as in the trainable layout */
    for (int64_t u = 0; u < units; u++)
        if (start[u + 1] > start[u] && start[u] >= shard_start && start[u] < shard_end)
            offset[u] = shard_at + (size_t)(start[u] - shard_start) * element_bytes;
    at = tt_align_up(shard_at + (size_t)(shard_end - shard_start) * element_bytes);
    if (start[L + 2] > start[L + 1] && !(start[L + 1] >= shard_start && start[L + 1] < shard_end)) {
        offset[L + 1] = at;
        at = tt_align_up(at + (size_t)(start[L + 2] - start[L + 1]) * element_bytes);
    }
    *slot_bytes = tt_align_up(largest);
    for (int64_t u = 1; u <= L; u++)
        if (slot[u] >= 0) offset[u] = at + (size_t)slot[u] * *slot_bytes;
    return at + 2 * *slot_bytes;
}
