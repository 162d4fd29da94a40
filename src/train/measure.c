#include "train/measure.h"

#include <stdlib.h>

#include "core/check.h"
#include "train/model_attach.h"
#include "train/step.h"

void tt_size_table_measure(tt_size_table *t, const tt_model_config *model, const tt_param_table *params,
                           const tt_plan *plan, const tt_backend *backend) {
    tt_size_table_tensors(t, model, params, plan, backend);
    tt_backend measure_backend;
    tt_backend_measure_init(&measure_backend, backend);
    tt_model_state s;
    tt_model_state_init_measure(&s, model, plan, params, t, &measure_backend);
    tt_model_state_attach_optimizer(&s);
    int64_t count;
    (void)tt_step_forward_backward(&s, 1.0, &count);
    (void)tt_step_forward_loss(&s, &count);

    const tt_tier compute = plan->compute_tier;
    for (int cls = 0; cls < TT_CLASS_COUNT; cls++) t->class_peak[cls][compute] = s.arena.class_peak[cls];
    t->tier_peak[compute] = s.arena.peak;
    if (s.host.measuring) {
        for (int cls = 0; cls < TT_CLASS_COUNT; cls++) t->class_peak[cls][s.host.tier] = s.host.class_peak[cls];
        t->tier_peak[s.host.tier] = s.host.peak;
    }
    /* the disk tier: the slots each offload store wrote */
    const size_t inputs_on_disk = tt_offload_store_disk_bytes(&s.inputs);
    const size_t saved_on_disk = tt_offload_store_disk_bytes(&s.saved);
    t->class_peak[TT_CLASS_LAYER_INPUT][TT_TIER_DISK] = inputs_on_disk;
    t->class_peak[TT_CLASS_SAVED_ACTIVATION][TT_TIER_DISK] = saved_on_disk;
    t->tier_peak[TT_TIER_DISK] = inputs_on_disk + saved_on_disk;
    t->attention_room = s.attention_phase_used ? s.arena.peak - s.attention_phase_used : 0;
    tt_model_state_detach_optimizer(&s);
    tt_model_state_release(&s);
}

void tt_size_table_configure(tt_size_table *t, const tt_model_config *m, const tt_param_table *params, tt_plan *plan,
                             const tt_backend *backend) {
    if (plan->attention_workspace_limit == 0) {
        /* auto: the least, plus the room full checkpointing leaves above the attention backward (the
         * MLP's tensors of one layer, gone by then). The limit decides how cuDNN's backward splits the
         * work, and so its bits: it comes from that one reference plan, not from this plan's memory
         * mode, so that every mode gives the same bits. The workspace around the dP (cuDNN's sums)
         * grows a little with the limit, so a second try gives back what the first overshot. */
        tt_plan reference = *plan;
        reference.layers = tt_xcalloc((size_t)plan->num_layers, sizeof(tt_layer_plan), "reference plan");
        for (int64_t l = 0; l < plan->num_layers; l++)
            reference.layers[l] = (tt_layer_plan){.recompute = TT_RECOMPUTE_EVERYTHING,
                                                  .saved_activation_tier = plan->compute_tier,
                                                  .layer_input_tier = plan->compute_tier};
        const size_t least = TT_ATTENTION_WORKSPACE_LEAST;
        reference.attention_workspace_limit = least;
        tt_size_table_measure(t, m, params, &reference, backend);
        const size_t peak = t->tier_peak[plan->compute_tier];
        size_t limit = least + t->attention_room;
        for (int attempt = 0; attempt < 2 && limit > least; attempt++) {
            reference.attention_workspace_limit = limit;
            tt_size_table_measure(t, m, params, &reference, backend);
            if (t->tier_peak[plan->compute_tier] <= peak) break;
            const size_t over = t->tier_peak[plan->compute_tier] - peak;
            limit = limit - least > over ? limit - over : least;
        }
        free(reference.layers);
        plan->attention_workspace_limit = limit;
    }
    tt_size_table_measure(t, m, params, plan, backend);
}

static void price_by_measuring(const tt_plan_pricer *self, tt_size_table *t, const tt_plan *plan) {
    tt_size_table_measure(t, self->model, self->params, plan, self->backend);
}

tt_plan_pricer tt_step_pricer(const tt_model_config *model, const tt_param_table *params, const tt_backend *backend) {
    return (tt_plan_pricer){.price = price_by_measuring, .model = model, .params = params, .backend = backend};
}
