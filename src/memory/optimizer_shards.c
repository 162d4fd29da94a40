#include "memory/optimizer_shards.h"

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
