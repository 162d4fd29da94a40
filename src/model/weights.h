/* Model weights in and out of Hugging Face checkpoints, and random init, in the layouts of the parameter table. */
#ifndef TT_MODEL_WEIGHTS_H
#define TT_MODEL_WEIGHTS_H

#include <stdint.h>

#include "core/dtype.h"
#include "model/model_config.h"
#include "model/params.h"

/* Where loaded or initialised parameters go: each parameter in table order, from the calling thread, either as fp32
 * values in pieces that cover it in order (values[count] are its elements [first, first + count)), or, for a 4-bit
 * weight (tt_param_info.quantized), as its bytes in tiertrain's layout (tt_quant4_layout_of(numel, the table's
 * format).bytes), whole. The pointers are valid during the call. So a model is loaded or initialised one piece at a
 * time straight into where it lives (model_io.h: tt_model_loader): the whole model never exists in 32 or 16 bits on
 * the host. */
typedef struct tt_weight_sink {
    void (*values)(void *ctx, const tt_param_info *p, int64_t first, int64_t count, const float *values);
    void (*quantized)(void *ctx, const tt_param_info *p, const void *bytes);
    void *ctx;
} tt_weight_sink;

/* Every base-model parameter (not the LoRA adapters) of dir (model.safetensors or its sharded index), BF16, F16 or F32
 * converted to fp32, quantized where the table quantizes; a checkpoint saved in bitsandbytes' 4-bit format
 * (bnb_checkpoint.h) gives its 4-bit weights as they are (dequantized to fp32 where the table does not quantize). A
 * missing tensor or a shape that differs from config.json is an error naming the tensor, the file, the expected and
 * the actual shape. Threads (OpenMP) convert and quantize; the same bytes whatever their count. */
void tt_weights_load_hf_to(const tt_param_table *table, const char *dir, const tt_weight_sink *sink);
/* A checkpoint saved in bitsandbytes' 4-bit format (config->quantization, checked): which of its decoder layers' linear
 * weights it keeps in its float dtype (llm_int8_skip_modules), read from the tensors themselves, into
 * config->quantization.float_linear (left NULL when every one is 4-bit). */
void tt_weights_find_float_linear(tt_model_config *config, const char *dir);
/* Matrices ~ N(0, std), norm weights 1, biases 0, LoRA adapters as tt_weights_init_lora; deterministic in seed and
 * the same whatever the thread count (each block of 65536 values of a matrix draws from its own stream); a 4-bit
 * weight is drawn and quantized block by block. */
void tt_weights_init_random_to(const tt_param_table *table, double std, uint64_t seed, const tt_weight_sink *sink);

/* The same into flat, the fp32 flat parameter layout [table->total_numel] (a 4-bit weight's bytes at its offset):
 * for tests and small models. */
void tt_weights_load_hf(float *flat, const tt_param_table *table, const char *dir);
void tt_weights_init_random(float *flat, const tt_param_table *table, double std, uint64_t seed);

/* The LoRA adapters only, as PEFT initialises them: A uniform in [-1/sqrt(in), 1/sqrt(in)), B zero (so the adapted
 * model starts as the base model); deterministic in seed. trainable: fp32 in the trainable layout
 * [table->trainable_numel] (parameter p at p->offset - table->trainable_start). */
void tt_weights_init_lora(float *trainable, const tt_param_table *table, uint64_t seed);

/* The base model's parameters (adapters are saved by src/model/lora.c), like transformers' save_pretrained: models up to max_shard_bytes go to dir/model.safetensors;
 * larger ones to model-0000i-of-0000n.safetensors shards plus model.safetensors.index.json.
 * Hugging Face names, in dtype; config.json beside them; every file written atomically.
 * base_dir (NULL: none): the checkpoint the model was loaded from; its tensors beside the language model (whose
 * first name component no parameter has: a Gemma 3 checkpoint's vision_tower and multi_modal_projector) are written
 * after the parameters as they are, so that the saved model is the whole checkpoint again. */
#define TT_DEFAULT_MAX_SHARD_BYTES ((size_t)5000000000) /* transformers' "5GB" */
void tt_weights_save_hf(const float *flat, const tt_param_table *table, const tt_model_config *config, tt_dtype dtype,
                        const char *dir, size_t max_shard_bytes, const char *base_dir);

/* The same written a piece at a time, so that the whole model never sits in host memory (tiertrain dequantize):
 * tt_hf_writer_values takes every base-model parameter's values in table order (adapters skipped), each in pieces
 * that cover it in order (a loader's tt_weight_sink values); close writes the index when sharded and config.json.
 * Each file is in place once its last tensor is written (path.tmp until then). */
typedef struct tt_hf_writer tt_hf_writer;
tt_hf_writer *tt_hf_writer_open(const tt_param_table *table, tt_dtype dtype, const char *dir, size_t max_shard_bytes,
                                const char *base_dir);
void tt_hf_writer_values(tt_hf_writer *w, const tt_param_info *p, int64_t first, int64_t count, const float *values);
void tt_hf_writer_close(tt_hf_writer *w, const tt_model_config *config);

/* The tokenizer and generation files of a model directory (those present) copied beside a model written from it. */
void tt_weights_copy_companion_files(const char *from_dir, const char *to_dir);

#endif
