#include "memory/spill.h"

#include "memory/size_table.h"

/* The tier a layer input spills to from `tier`: the GPU's goes to pinned host memory, host
 * memory's (pinned or the CPU backend's pageable arena) to disk. */
static tt_tier next_tier(tt_tier tier) { return tier == TT_TIER_GPU ? TT_TIER_PINNED : TT_TIER_DISK; }

static bool over(const tt_size_table *t, tt_tier tier, size_t budget) { return budget && t->tier_peak[tier] > budget; }

/* Layer l keeps saved activations on the compute tier that could leave it as one block: some kept
 * slot at least min_offload_bytes, none offloaded yet. */
static bool kept_on_compute(const tt_plan *plan, const tt_size_table *t, int64_t l) {
    const tt_layer_plan *lp = &plan->layers[l];
    if (lp->saved_activation_tier != plan->compute_tier) return false;
    for (int i = 0; i < TT_SAVED_SLOT_COUNT; i++)
        if (!((lp->recompute >> i) & 1u) && t->saved_slot[i] && t->saved_slot[i] >= plan->min_offload_bytes)
            return true;
    return false;
}

tt_spill_result tt_plan_spill(tt_plan *plan, const tt_plan_pricer *pricer, size_t compute_budget,
                              size_t pinned_budget) {
    tt_spill_result result = {0};
    const tt_tier compute = plan->compute_tier;
    const int64_t L = plan->num_layers;
    tt_size_table t;
    for (;;) {
        pricer->price(pricer, &t, plan);
        if (compute != TT_TIER_PINNED && over(&t, TT_TIER_PINNED, pinned_budget)) {
            /* pinned is full: its last input (needed first in the backward, so the disk has the
             * whole backward to stay ahead) goes on to disk, then its last kept block */
            int64_t l = L - 1;
            while (l >= 0 && plan->layers[l].layer_input_tier != TT_TIER_PINNED) l--;
            if (l >= 0) {
                plan->layers[l].layer_input_tier = TT_TIER_DISK;
                result.to_disk++;
                continue;
            }
            l = L - 1;
            while (l >= 0 && !(plan->layers[l].offloaded && plan->layers[l].saved_activation_tier == TT_TIER_PINNED))
                l--;
            if (l < 0) break;
            plan->layers[l].saved_activation_tier = TT_TIER_DISK;
            result.kept_to_disk++;
            continue;
        }
        if (over(&t, compute, compute_budget)) {
            /* the compute tier is full: its first input still there (needed last in the backward)
             * moves down a tier; the LM head's input (layer L's) never does; when no input is left,
             * the first layer's kept activations go, as one block */
            int64_t l = 0;
            while (l < L && plan->layers[l].layer_input_tier != compute) l++;
            if (l < L) {
                plan->layers[l].layer_input_tier = next_tier(compute);
                if (next_tier(compute) == TT_TIER_PINNED) result.to_pinned++;
                else result.to_disk++;
                continue;
            }
            l = 0;
            while (l < L && !kept_on_compute(plan, &t, l)) l++;
            if (l == L) break;
            tt_layer_plan *lp = &plan->layers[l];
            lp->offloaded = TT_ALL_SLOTS & ~lp->recompute;
            lp->saved_activation_tier = next_tier(compute);
            if (next_tier(compute) == TT_TIER_PINNED) result.kept_to_pinned++;
            else result.kept_to_disk++;
            continue;
        }
        result.fits = true;
        break;
    }
    return result;
}
