#include "memory/free_keep.h"

#include "memory/size_table.h"

int64_t tt_plan_keep_free(tt_plan *plan, const tt_plan_pricer *pricer) {
    tt_size_table t;
    pricer->price(pricer, &t, plan);
    size_t peak[TT_TIER_COUNT];
    for (int tier = 0; tier < TT_TIER_COUNT; tier++) peak[tier] = t.tier_peak[tier];
    int64_t switched = 0;
    for (int64_t l = plan->num_layers - 1; l >= 0; l--) {
        tt_layer_plan *lp = &plan->layers[l];
        if (lp->recompute != TT_RECOMPUTE_EVERYTHING || lp->offloaded ||
            lp->saved_activation_tier != plan->compute_tier)
            break;
        lp->recompute = TT_MLP_SLOTS;
        pricer->price(pricer, &t, plan);
        bool raised = false;
        for (int tier = 0; tier < TT_TIER_COUNT; tier++) raised |= t.tier_peak[tier] > peak[tier];
        if (raised) {
            lp->recompute = TT_RECOMPUTE_EVERYTHING;
            break;
        }
        switched++;
    }
    return switched;
}
