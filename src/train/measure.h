/* The size table's peaks, measured: the step program runs a plan against arenas that only count
 * (tt_arena_init_measure) and a backend whose ops do nothing (tt_backend_measure_init), as ggml's
 * allocator reserves by running a measure graph. The step program is then the only description of
 * what is pushed when: the dry run and the real run push and pop the same buffers in the same order,
 * so the arenas reserved from the dry run are exactly what the real run reaches. The closed-form sum
 * the size table used to be is a test oracle now (tests/size_oracle.h). */
#ifndef TT_TRAIN_MEASURE_H
#define TT_TRAIN_MEASURE_H

#include "memory/plan.h"
#include "memory/size_table.h"
#include "model/model_config.h"
#include "model/params.h"
#include "ops/backend.h"

/* The whole size table of plan: tt_size_table_tensors, then the peak of every class and tier over the
 * persistent tensors, one training micro-step and one evaluation forward run on measuring arenas, and
 * attention_room. Only the backend's pure size queries are called, with the plan's settings
 * (tt_plan_backend_settings): measuring never changes what the backend's ops do. */
void tt_size_table_measure(tt_size_table *table, const tt_model_config *model, const tt_param_table *params,
                           const tt_plan *plan, const tt_backend *backend);

/* Measures the table of the plan. With attention_workspace_limit 0 (attn_workspace_limit: auto) it first
 * settles the limit, and writes it into the plan: TT_ATTENTION_WORKSPACE_LEAST plus the room full checkpointing leaves
 * above the attention backward, so that the larger, faster calls cost no peak memory there. The limit
 * shapes cuDNN's backward and so its bits: it depends on the model, the micro-batch, tiled_mlp and the
 * number formats, never on the memory mode. The backend is only asked (pure size queries), never changed. */
void tt_size_table_configure(tt_size_table *table, const tt_model_config *model, const tt_param_table *params,
                             tt_plan *plan, const tt_backend *backend);

/* A pricer for the planners (spill, free keeps) that measures each plan they try. model, params and backend are
 * borrowed. */
tt_plan_pricer tt_step_pricer(const tt_model_config *model, const tt_param_table *params, const tt_backend *backend);

#endif
