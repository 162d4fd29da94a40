/* LoRA adapters in PEFT's file format, and merging them into their base model.
 *
 *   <dir>/adapter_model.safetensors  base_model.model.model.layers.<l>.<self_attn|mlp>.<module>.lora_A.weight
 *                                    [r, in] and ...lora_B.weight [out, r], for every adapted layer
 *   <dir>/adapter_config.json        peft_type LORA, r, lora_alpha, lora_dropout, target_modules, ...
 *
 * which PeftModel.from_pretrained(base, dir) loads. Every file is written whole (temporary file,
 * fsync, rename), never half. */
#ifndef TT_MODEL_LORA_H
#define TT_MODEL_LORA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/dtype.h"
#include "model/params.h"

/* Writes the adapters of trainable (fp32, the trainable layout [table->trainable_numel]: adapter p at p->offset -
 * table->trainable_start) into dir, stored as dtype (F32 or BF16). base_model names the base in adapter_config.json
 * (base_model_name_or_path). */
void tt_lora_save_peft(const float *trainable, const tt_param_table *table, tt_dtype dtype, const char *base_model,
                       const char *dir);

/* Reads the adapters of table from dir's adapter_model.safetensors (F32, BF16 or F16) into trainable (the trainable
 * layout). A missing adapter, one of another shape, or a tensor of dir the table has no place for is an error naming
 * the file. */
void tt_lora_load_peft(float *trainable, const tt_param_table *table, const char *dir);
/* What adapter_config.json says of the adapters: r, lora_alpha, use_rslora and target_modules (a list of module names,
 * or a regex: the module names it names, and the regex itself). Missing or malformed fields are an error naming the
 * file. */
typedef struct tt_peft_settings {
    char path[4200]; /* the file read, for messages */
    int64_t rank;
    double alpha;
    bool rslora;
    unsigned modules_to_save; /* set of tt_saved_module (params.h) */
    unsigned targets;         /* set of tt_lora_module */
    bool targets_regex;
    char regex[512];
} tt_peft_settings;
void tt_lora_read_peft_settings(const char *dir, tt_peft_settings *out);

/* Checks dir's adapter_config.json against table's adapters (r, lora_alpha, target_modules); a difference is an
 * error naming the file and the run's key to change. */
void tt_lora_check_peft_config(const tt_param_table *table, const char *dir);

/* `tiertrain merge`: W' = W + scaling B A for every adapter in adapter_dir, in fp32, into a copy of the
 * Hugging Face model in base_dir, written to out_dir (which exists) in the base's dtype (with its config.json and its
 * tokenizer and generation files). Adapters the base has no layer for, LoRA variants tiertrain does not
 * train (fan_in_fan_out, DoRA, biases, modules_to_save) and shape mismatches are errors naming the file. */
void tt_lora_merge(const char *base_dir, const char *adapter_dir, const char *out_dir, size_t max_shard_bytes);

#endif
