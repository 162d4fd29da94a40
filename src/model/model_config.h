/* The model's shape, read from a Hugging Face config.json of a family tiertrain trains (model/arch.h lists them).
 * transformers 4.x (rope_theta, rope_scaling, torch_dtype) and 5.x (rope_parameters, dtype) spellings are both
 * accepted; a family's own keys are read by its description. */
#ifndef TT_MODEL_MODEL_CONFIG_H
#define TT_MODEL_MODEL_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "model/model_config_fields.h"

/* Reads and validates path (a config.json). Every missing or wrong key is an error naming
 * the file, the key and the expected value. */
void tt_model_config_load(const char *path, tt_model_config *out);

/* Checks the derived invariants (divisibility, positive sizes); `source` names the file. */
void tt_model_config_validate(const tt_model_config *config, const char *source);

/* Writes config.json for a saved checkpoint: the original text when there was one, else a
 * fresh one from the fields. Atomic (temporary file, fsync, rename). */
void tt_model_config_save(const tt_model_config *config, const char *path);

void tt_model_config_free(tt_model_config *config);

/* Dies unless tiertrain reads the weights the config describes: no quantization_config, or bitsandbytes 4-bit
 * (bnb_checkpoint.h; a module llm_int8_skip_modules kept in a float dtype loads as one). `source` names the config.json. */
void tt_model_config_check_quantization(const tt_model_config *config, const char *source);

/* Total number of parameters (embedding counted once when tied). */
int64_t tt_model_config_param_count(const tt_model_config *config);

#endif
