/* A model state ready to train: the plan priced by the step program's dry run (measure.h), the state's memory and
 * mechanisms (step.h: tt_model_state_init_core), then the optimizer's parts (model_attach.h: optimizer offload,
 * weight offload, the compute tier's AdamW pieces). What tests and the trainer create and free. */
#ifndef TT_TRAIN_MODEL_SETUP_H
#define TT_TRAIN_MODEL_SETUP_H

#include <stddef.h>

#include "memory/plan.h"
#include "model/model_config.h"
#include "model/params.h"
#include "ops/backend.h"
#include "train/model_io.h"
#include "train/step.h"

/* Takes ownership of config and plan. Prices the plan (settling attn_workspace_limit: auto), reserves the arenas
 * from the size table (an error if the compute tier's exceeds budget_bytes; 0: no budget) and pushes the
 * persistent tensors. Weights are left zero. Every parameter trains. */
void tt_model_state_init(tt_model_state *state, tt_model_config *config, tt_plan *plan, const tt_backend *backend,
                         size_t budget_bytes);
/* The same with what trains given (NULL: everything): frozen parts and LoRA adapters. */
void tt_model_state_init_trainable(tt_model_state *state, tt_model_config *config, tt_plan *plan,
                                   const tt_trainable_spec *trainable, const tt_backend *backend, size_t budget_bytes);
void tt_model_state_free(tt_model_state *state);

#endif
