/* Training checkpoints: everything a resumed run needs to continue bit-identically.
 *
 *   <output_dir>/checkpoint-<step>/
 *     model.safetensors, config.json  Hugging Face checkpoint (transformers loads it); with LoRA instead
 *     adapter_model.safetensors,      the adapters in PEFT's format (the frozen base is base_model's)
 *     adapter_config.json
 *     optimizer.safetensors           fp32 master weights and AdamW moments of every trainable parameter (with
 *                                     optimizer: adamw_bnb_8bit its 8-bit state: train/adamw_8bit_checkpoint.h)
 *     trainer_state.json              step, data position, RNG state
 *     run.yaml                        the effective configuration
 *
 * A checkpoint is written into checkpoint-<step>.partial and renamed when complete, so a
 * crash, a full disk or Ctrl-C never leaves a half checkpoint under the final name. */
#ifndef TT_TRAIN_CHECKPOINT_H
#define TT_TRAIN_CHECKPOINT_H

#include <stdbool.h>
#include <stdint.h>

#include "config/run_config.h"
#include "core/rng.h"
#include "train/step.h"

typedef struct tt_trainer_state {
    int64_t global_step; /* optimizer steps done */
    int64_t data_epoch;  /* data position: next sequence */
    int64_t data_index;
    int64_t tokens_seen;
    tt_rng rng;
} tt_trainer_state;

/* Writes the checkpoint for trainer->global_step; returns the directory path (caller frees). writes false: this rank
 * only takes part in fetching a zero_stage 1 state from every rank (model->shards), writes nothing, returns NULL. */
char *tt_checkpoint_save(const tt_model_state *model, const tt_trainer_state *trainer, const tt_run_config *run,
                         bool writes);

/* optimizer.safetensors at path from host arrays, fp32 in the trainable layout (weights, adam_m, adam_v): master,
 * exp_avg and exp_avg_sq of every trainable parameter. Frozen parameters have no optimizer state, and their weights
 * are the run's initial ones (reloaded on resume). The gathered save's writer; tt_save_optimizer_streamed writes the
 * same bytes a tensor at a time. */
void tt_checkpoint_save_optimizer(const tt_model_state *model, const float *weights, const float *adam_m,
                                  const float *adam_v, const char *path);

/* Loads the trainable parameters' weights and optimizer state, and the trainer state, from dir;
 * frozen parameters keep the weights the model holds (load the run's initial weights first).
 * Every mismatch with the current model (a missing tensor, another shape) is an error naming
 * the file and tensor. */
void tt_checkpoint_load(tt_model_state *model, tt_trainer_state *trainer, const char *dir);

/* The dtype adapters are saved in: the run's trained precision (fp32 with a master copy or on the CPU,
 * bf16 when the GPU trains bf16 parameters). */
tt_dtype tt_adapter_dtype(const tt_model_state *model);
/* What adapter_config.json names as the base: base_model, or model_config for a random-init base. */
const char *tt_run_base_model_name(const tt_run_config *run);

/* A run that does not resume (no --resume, no resume_from_checkpoint) into an output_dir that holds a previous run
 * (checkpoints, a saved model or adapter, metrics.jsonl) is refused, naming what is there, unless overwrite_output_dir
 * (transformers' key): then the leader removes the previous checkpoints and metrics.jsonl first, so that a later
 * --resume cannot pick them and the metrics are this run's. */
void tt_output_dir_check_previous_run(const char *output_dir, bool resuming, bool overwrite, bool leader);

/* save_total_limit: deletes the checkpoint-<N> directories of output_dir but the `keep` with the largest N. */
void tt_checkpoint_keep_newest(const char *output_dir, int64_t keep);

/* The checkpoint-<N> directory in output_dir with the largest N, or NULL (caller frees). */
char *tt_checkpoint_find_latest(const char *output_dir);

/* What an interrupted run left in output_dir (killed, interrupted or out of disk space during a
 * save): checkpoint-<step>.partial directories and the .tmp files of atomic writes. Removes them,
 * saying what it found; complete checkpoints and files are never touched. */
void tt_checkpoint_remove_incomplete(const char *output_dir);

/* mkdir -p; an error names the path. */
void tt_make_directories(const char *path);

#endif
