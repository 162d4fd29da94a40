/* The one translation of a run configuration (its keys, validated) into what the engine takes: the memory
 * plan and number formats (src/memory/plan.h), the trainable-parameter spec (src/model/params.h), the
 * learning-rate schedule and AdamW's settings (src/train/). A new key that changes any of them is read here
 * and nowhere else. */
#ifndef TT_CONFIG_RUN_TRANSLATION_H
#define TT_CONFIG_RUN_TRANSLATION_H

#include <stdbool.h>
#include <stdint.h>

#include "config/run_config.h"
#include "memory/plan.h"
#include "model/params.h"
#include "train/optimizer.h"
#include "train/schedule.h"

/* The number formats a run gets on a backend: fp32 everywhere on the CPU; on the GPU bf16
 * compute with fp32 gradients, master weights and moments (master_weights: true) or bf16
 * for all of them (master_weights: false). */
tt_precision tt_precision_for_run(const tt_run_config *run, bool gpu);

/* Every layer's recompute set and tiers from the checkpointing and offloading keys, the rings, the
 * weight streams, optimizer offload and the MLP's tiling. Dies naming the key where a count exceeds the
 * model's layers. Free with tt_plan_free. */
void tt_plan_from_config(tt_plan *plan, const tt_run_config *run, const tt_model_config *model, tt_tier compute_tier,
                         const tt_precision *precision);

/* adapter, lora_*, the 4-bit keys and the freezing keys of a run; storage_elem: bytes per element of the compute
 * copy of the weights (the plan's weight_bytes), in which quantized weights are laid out. A base_model saved in
 * bitsandbytes' 4-bit format (model->quantization) gives its own 4-bit format (the trainer checks the rest). */
tt_trainable_spec tt_trainable_spec_for_run(const tt_run_config *run, const tt_model_config *model,
                                            size_t storage_elem);

/* lr_scheduler, learning_rate, warmup_steps (else warmup_ratio of total_steps), cosine_min_lr_ratio. */
tt_lr_schedule tt_lr_schedule_for_run(const tt_run_config *run, int64_t total_steps);

/* adam_beta1, adam_beta2, adam_epsilon, weight_decay, max_grad_norm. */
tt_adamw_settings tt_adamw_settings_for_run(const tt_run_config *run);

#endif
