#include "memory/attention_offload.h"

#include <stdlib.h>

#include "core/check.h"
#include "model/saved_slots.h"

/* Whether the first `count` layers of `order` switched fit the budgets (the plan is left with exactly them
 * switched). */
static bool fits_switched(tt_plan *plan, const tt_plan_pricer *pricer, const int64_t *order, int64_t eligible,
                          int64_t count, size_t gpu_budget, size_t pinned_budget) {
    for (int64_t i = 0; i < eligible; i++) {
        tt_layer_plan *lp = &plan->layers[order[i]];
        const bool on = i < count;
        lp->recompute = on ? TT_RECOMPUTE_ALL_BUT_ATTENTION : TT_RECOMPUTE_EVERYTHING;
        lp->offloaded = on ? TT_ATTENTION_SLOTS : 0;
        lp->saved_activation_tier = on ? TT_TIER_PINNED : plan->compute_tier;
    }
    tt_size_table t;
    pricer->price(pricer, &t, plan);
    return (!gpu_budget || t.tier_peak[TT_TIER_GPU] <= gpu_budget) &&
           (!pinned_budget || t.tier_peak[TT_TIER_PINNED] <= pinned_budget);
}

int64_t tt_plan_offload_attention(tt_plan *plan, const tt_plan_pricer *pricer, size_t gpu_budget, size_t pinned_budget,
                                  int64_t attention_span) {
    if (plan->compute_tier != TT_TIER_GPU || plan->packed_documents || attention_span < TT_ATTENTION_OFFLOAD_MIN_TOKENS)
        return 0;
    for (int64_t l = 0; l < plan->num_layers; l++)
        if (plan->layers[l].layer_input_tier == TT_TIER_DISK || plan->layers[l].saved_activation_tier == TT_TIER_DISK)
            return 0;
    int64_t *order = tt_xcalloc((size_t)plan->num_layers, sizeof(int64_t), "attention offload layers");
    int64_t eligible = 0;
    for (int64_t l = plan->num_layers - 1; l >= 0; l--) {
        const tt_layer_plan *lp = &plan->layers[l];
        if (lp->recompute == TT_RECOMPUTE_EVERYTHING && !lp->offloaded &&
            lp->saved_activation_tier == plan->compute_tier)
            order[eligible++] = l;
    }
    if (eligible == 0) {
        free(order);
        return 0;
    }
    const bool was_streamed = plan->offload_streamed;
    plan->offload_streamed = true; /* the kept slots' copies run beside compute */
    /* the most layers that fit: the GPU adds its staging buffers once, the pinned tier each layer's slots, so fitting
     * is monotone in the count */
    int64_t lo = 0, hi = eligible;
    if (!fits_switched(plan, pricer, order, eligible, hi, gpu_budget, pinned_budget)) {
        while (hi - lo > 1) {
            const int64_t mid = lo + (hi - lo) / 2;
            if (fits_switched(plan, pricer, order, eligible, mid, gpu_budget, pinned_budget)) lo = mid;
            else hi = mid;
        }
        hi = lo;
        (void)fits_switched(plan, pricer, order, eligible, hi, gpu_budget, pinned_budget);
    }
    if (hi == 0) plan->offload_streamed = was_streamed;
    free(order);
    return hi;
}

int64_t tt_attention_span(const tt_plan *plan, int64_t sliding_window) {
    const int64_t sequence = tt_plan_sequence_len(plan);
    return sliding_window > 0 && sliding_window < sequence ? sliding_window : sequence;
}
