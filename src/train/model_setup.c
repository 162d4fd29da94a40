#include "train/model_setup.h"

#include <string.h>

#include "train/measure.h"
#include "train/model_attach.h"

void tt_model_state_init(tt_model_state *s, tt_model_config *config, tt_plan *plan, const tt_backend *backend,
                         size_t budget_bytes) {
    tt_model_state_init_trainable(s, config, plan, NULL, backend, budget_bytes);
}

void tt_model_state_init_trainable(tt_model_state *s, tt_model_config *config, tt_plan *plan,
                                   const tt_trainable_spec *trainable, const tt_backend *backend, size_t budget_bytes) {
    tt_param_table params;
    tt_param_table_build_trainable(config, trainable, &params);
    tt_size_table sizes;
    tt_size_table_configure(&sizes, config, &params, plan, backend);
    tt_model_state_init_core(s, config, plan, &params, &sizes, backend, budget_bytes);
    tt_model_state_attach_optimizer(s);
}

void tt_model_state_free(tt_model_state *s) {
    tt_model_state_detach_optimizer(s);
    tt_model_state_release(s);
}
