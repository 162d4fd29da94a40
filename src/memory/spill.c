#include "memory/spill.h"

#include "memory/size_table.h"

/* The tier a layer input spills to from `tier`: the GPU's goes to pinned host memory, host
 * memory's (pinned or the CPU backend's pageable arena) to disk. */
static tt_tier next_tier(tt_tier tier) { return tier == TT_TIER_GPU ? TT_TIER_PINNED : TT_TIER_DISK; }

static bool over(const tt_size_table *t, tt_tier tier, size_t budget) { return budget && t->tier_peak[tier] > budget; }

tt_spill_result tt_plan_spill(tt_plan *plan, const tt_model_config *model, const tt_param_table *params,
                              const tt_backend *backend, size_t compute_budget, size_t pinned_budget) {
    tt_spill_result result = {0};
    const tt_tier compute = plan->compute_tier;
    const int64_t L = plan->num_layers;
    tt_size_table t;
    for (;;) {
        tt_size_table_compute(&t, model, params, plan, backend);
        if (compute != TT_TIER_PINNED && over(&t, TT_TIER_PINNED, pinned_budget)) {
            /* pinned is full: its last input (needed first in the backward, so the disk has the
             * whole backward to stay ahead) goes on to disk */
            int64_t l = L - 1;
            while (l >= 0 && plan->layers[l].layer_input_tier != TT_TIER_PINNED) l--;
            if (l < 0) break;
            plan->layers[l].layer_input_tier = TT_TIER_DISK;
            result.to_disk++;
            continue;
        }
        if (over(&t, compute, compute_budget)) {
            /* the compute tier is full: its first input still there (needed last in the backward)
             * moves down a tier; the LM head's input (layer L's) never does */
            int64_t l = 0;
            while (l < L && plan->layers[l].layer_input_tier != compute) l++;
            if (l == L) break;
            plan->layers[l].layer_input_tier = next_tier(compute);
            if (next_tier(compute) == TT_TIER_PINNED)
                result.to_pinned++;
            else
                result.to_disk++;
            continue;
        }
        result.fits = true;
        break;
    }
    return result;
}
