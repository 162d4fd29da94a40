/* zero_stage 1's shards (src/memory/optimizer_shards.c): every bound is a unit start, the shards cover the trainable
 * layout in rank order, each is within one unit of an equal share, and fewer units than ranks leave some ranks
 * empty rather than cutting a unit. */
#include <stdlib.h>

#include "memory/optimizer_shards.h"
#include "test_util.h"

/* unit_start[units + 1] from unit sizes */
static int64_t *starts_of(const int64_t *sizes, int64_t units) {
    int64_t *start = calloc((size_t)units + 1, sizeof(int64_t));
    for (int64_t u = 0; u < units; u++) start[u + 1] = start[u] + sizes[u];
    return start;
}

static void check_shards(const char *what, const int64_t *sizes, int64_t units, int ranks) {
    int64_t *start = starts_of(sizes, units), *bounds = calloc((size_t)ranks + 1, sizeof(int64_t));
    tt_optimizer_shard_bounds(start, units, ranks, bounds);
    int64_t largest = 0;
    for (int64_t u = 0; u < units; u++) largest = sizes[u] > largest ? sizes[u] : largest;
    TT_EXPECT(bounds[0] == 0 && bounds[ranks] == start[units], "%s, %d ranks: the shards cover every element", what,
              ranks);
    for (int r = 0; r < ranks; r++) {
        TT_EXPECT(bounds[r] <= bounds[r + 1], "%s, %d ranks: rank %d's shard is in order", what, ranks, r);
        bool at_unit = false;
        for (int64_t u = 0; u <= units; u++) at_unit |= start[u] == bounds[r];
        TT_EXPECT(at_unit, "%s, %d ranks: rank %d's shard starts at a unit", what, ranks, r);
        const double ideal = (double)start[units] / ranks, size = (double)(bounds[r + 1] - bounds[r]);
        TT_EXPECT(size <= ideal + 2.0 * (double)largest && size >= ideal - 2.0 * (double)largest,
                  "%s, %d ranks: rank %d's shard (%.0f) is within two units of an equal share (%.0f)", what, ranks, r,
                  size, ideal);
    }
    free(start);
    free(bounds);
}

int main(void) {
    /* a Qwen3-8B-like layout: embedding, 36 equal layers, final norm and an untied LM head */
    int64_t qwen[38];
    qwen[0] = 622329856;
    for (int u = 1; u <= 36; u++) qwen[u] = 201342976;
    qwen[37] = 622334 * 1000 + 4096;
    for (int ranks = 1; ranks <= 8; ranks++) check_shards("Qwen3-8B units", qwen, 38, ranks);
    /* a tied head (no unit L + 1 elements) and frozen layers (LoRA on some layers only) */
    const int64_t lora[6] = {0, 4096, 0, 4096, 4096, 0};
    for (int ranks = 1; ranks <= 4; ranks++) check_shards("LoRA units", lora, 6, ranks);
    /* fewer units than ranks: whole units, the rest empty */
    const int64_t tiny[4] = {100, 50, 50, 100};
    check_shards("four units", tiny, 4, 6);
    int64_t *start = starts_of(tiny, 4), bounds[7];
    tt_optimizer_shard_bounds(start, 4, 2, bounds);
    TT_EXPECT(bounds[1] == 150, "two ranks of 100+50 | 50+100 cut at 150 (got %lld)", (long long)bounds[1]);
    free(start);
    return tt_test_summary("optimizer shards");
}
