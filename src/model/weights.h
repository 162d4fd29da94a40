/* Model weights in and out of Hugging Face checkpoints, and random init. All functions work
 * on the flat fp32 parameter buffer laid out by the parameter table. */
#ifndef TT_MODEL_WEIGHTS_H
#define TT_MODEL_WEIGHTS_H

#include <stdint.h>

#include "core/dtype.h"
#include "model/model_config.h"
#include "model/params.h"

/* Loads every base-model parameter (not the LoRA adapters) from dir (model.safetensors or its sharded index), converting bf16,
 * fp16 or fp32 to fp32. A missing tensor or a shape that differs from config.json is an error
 * naming the tensor, the file, the expected and the actual shape. */
void tt_weights_load_hf(float *flat, const tt_param_table *table, const char *dir);

/* Matrices ~ N(0, std), norm weights 1, biases 0, LoRA adapters as tt_weights_init_lora;
 * deterministic in seed. */
void tt_weights_init_random(float *flat, const tt_param_table *table, double std, uint64_t seed);

/* The LoRA adapters only, as PEFT initialises them: A uniform in [-1/sqrt(in), 1/sqrt(in)), B zero
 * (so the adapted model starts as the base model); deterministic in seed. */
void tt_weights_init_lora(float *flat, const tt_param_table *table, uint64_t seed);

/* The base model's parameters (adapters are saved by src/model/lora.c), like transformers' save_pretrained: models up to max_shard_bytes go to dir/model.safetensors;
 * larger ones to model-0000i-of-0000n.safetensors shards plus model.safetensors.index.json.
 * Hugging Face names, in dtype; config.json beside them; every file written atomically. */
#define TT_DEFAULT_MAX_SHARD_BYTES ((size_t)5000000000) /* transformers' "5GB" */
void tt_weights_save_hf(const float *flat, const tt_param_table *table, const tt_model_config *config,
                        tt_dtype dtype, const char *dir, size_t max_shard_bytes);

#endif
