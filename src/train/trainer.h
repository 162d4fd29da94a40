/* The training loop: data, gradient accumulation, clipping, AdamW, schedule, evaluation,
 * checkpoints, resume, and the reports around them. */
#ifndef TT_TRAIN_TRAINER_H
#define TT_TRAIN_TRAINER_H

#include <stdbool.h>

#include "core/config.h"
#include "memory/plan.h"
#include "model/model_config.h"

/* Reads the model's config.json from base_model or model_config (a file or a directory). */
void tt_load_model_config_for_run(const tt_run_config *run, tt_model_config *model);

/* `tiertrain plan`: the plan per layer and the size table, without training. */
void tt_print_run_plan(const tt_run_config *run, FILE *out);

/* `tiertrain train`. resume_latest: continue from the newest checkpoint in output_dir.
 * Returns the process exit status. */
int tt_train(const tt_run_config *run, bool resume_latest);

#endif
