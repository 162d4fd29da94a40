/* Saves that stream: a whole model's Hugging Face files and a checkpoint's optimizer.safetensors written a tensor at a
 * time, each read from where the model state keeps it (tt_model_get_trainable_range), so a save holds one tensor in
 * host memory, not the model: 16 bytes a parameter of a full fine-tune's weights and moments gathered at once would
 * not fit beside the pinned memory of a Qwen3-8B run with optimizer offload. The files are the same bytes as the
 * gathered saves'. With zero_stage sharding every rank takes part (each tensor comes from its unit's owner: writes is
 * true on the leader alone, the others only hand theirs over); where tt_model_reads_trainable_ranges is false (stage
 * 3's compute copy without a master copy) the saves gather the values whole instead (checkpoint.c, trainer.c). */
#ifndef TT_TRAIN_STREAMED_SAVE_H
#define TT_TRAIN_STREAMED_SAVE_H

#include <stdbool.h>
#include <stddef.h>

#include "train/step.h"

/* The base model (every parameter but adapters) as Hugging Face safetensors shards under dir, with config.json, and
 * base_dir's tensors beside the language model (tt_weights_save_hf; NULL: none). */
void tt_save_model_streamed(const tt_model_state *state, const char *dir, size_t max_shard_bytes, const char *base_dir,
                            bool writes);

/* A checkpoint's optimizer state at path: master.<name>, exp_avg.<name>, exp_avg_sq.<name> in fp32 for every
 * trainable parameter, in table order. */
void tt_save_optimizer_streamed(const tt_model_state *state, const char *path, bool writes);

/* Host bytes a streamed save of this state holds at most: the largest tensor in fp32 and in the compute format it
 * is converted from, and the model writer's converted piece. */
size_t tt_streamed_save_host_bytes(const tt_model_state *state);

#endif
