/* The training loop: data, gradient accumulation, clipping, AdamW, schedule, evaluation,
 * checkpoints, resume, and the reports around them. */
#ifndef TT_TRAIN_TRAINER_H
#define TT_TRAIN_TRAINER_H

#include <stdbool.h>

#include "config/run_config.h"
#include "dist/comm.h"
#include "memory/plan.h"
#include "model/model_config.h"
#include "ops/backend.h"

/* Reads the model's config.json from base_model or model_config (a file or a directory). */
void tt_load_model_config_for_run(const tt_run_config *run, tt_model_config *model);

/* Where a run computes: the backend (owned), and the budget of its compute tier. */
typedef struct tt_device {
    tt_backend *backend;
    size_t memory_budget;    /* bytes of the compute tier the plan may use */
    int data_parallel_ranks; /* the run's processes (the plan prices the gradient sum's buckets); 0 or 1: one */
    int data_parallel_rank;  /* this process's rank among them (its zero_stage 1 shard) */
    int host_processes;      /* the run's processes on this host: without host_memory_budget each plans for 1/N of its
                                memory (0 or 1: all of it) */
    char description[160];
} tt_device;

/* Resolves `device`, `bf16`, `master_weights` and `attn_implementation` into a device (GPU `gpu`; host_processes: the
 * run's processes on this host, which share its memory); dies with
 * the key and the fix when they do not fit together or the device is not there. Lives with the
 * command line (src/cli/device_select.c), which is the part built with or without CUDA. */
void tt_select_device(const tt_run_config *run, int gpu, int host_processes, tt_device *device);
/* Destroys the device's backend. */
void tt_release_device(tt_device *device);

/* The plan of a run: from the config keys, then spilled down the tiers where a budget is full, the top
 * checkpointed layers' free keeps, and selective_checkpointing: auto's attention outputs kept in pinned memory
 * (tt_selective_auto_applies). report: say what the spill and the free keeps did (off while
 * tiertrain plan --max-sequence-len tries lengths). */
void tt_plan_for_run(tt_plan *plan, const tt_run_config *run, const tt_model_config *model, const tt_device *device,
                     bool report);

/* Whether selective_checkpointing: auto's pass (memory/attention_offload.h) runs for this run's keys: auto set, and
 * the activations left to the plan or offloaded as hidden_states (activation_offloading true, legacy and disk, and
 * Megatron's cpu_offloading of activations, have their own rule for what leaves the GPU). */
bool tt_selective_auto_applies(const tt_run_config *run);

/* `tiertrain plan`: the plan per layer and the size table, without training. Returns whether the plan fits the
 * compute tier's budget (else it also says so on stderr: `tiertrain plan` then exits with status 1). */
bool tt_print_run_plan(const tt_run_config *run, const tt_device *device, FILE *out);

/* The model's weights at a run's start: base_model's (or drawn at random from the seed with model_config), LoRA
 * adapters from lora_model_dir where it is set. The frozen part is loaded a piece at a time straight into where it
 * lives, in its stored form (tt_model_loader); the trainable part through an fp32 host buffer of its own (with LoRA,
 * the adapters alone), which the compute tier gets in its formats. */
struct tt_model_state;
void tt_load_run_weights(struct tt_model_state *model, const tt_run_config *run);

/* `tiertrain train`. resume_latest: continue from the newest checkpoint in output_dir. comm: the run's other
 * processes (data parallel, train/data_parallel.h), or NULL for one process; sequence_group: this rank's
 * sequence-parallel group where it is fewer than all ranks (tt_data_parallel_sequence_group), else NULL. Returns the
 * process exit status. */
int tt_train(const tt_run_config *run, const tt_device *device, const tt_comm *comm, tt_comm *sequence_group,
             bool resume_latest);

/* `tiertrain evaluate`: the eval loss and perplexity of a run's model on its eval split (val_set_size of its
 * datasets, masked and batched as training evaluates), or on every document of `dataset` (a file in the format of the
 * run's first dataset; NULL: the eval split): the checkpoint's weights (NULL: the run's final model or adapter in
 * output_dir, else its newest checkpoint). Prints one line; returns the exit status. */
int tt_evaluate_run(const tt_run_config *run, const tt_device *device, const char *checkpoint, const char *dataset);

#endif
