/* What the families' descriptions (arch_*.c) share of model_config.c's reading. */
#ifndef TT_MODEL_MODEL_CONFIG_INTERNAL_H
#define TT_MODEL_MODEL_CONFIG_INTERNAL_H

#include "model/config_reader.h"
#include "model/model_config.h"

/* One set of RoPE settings (source: an object of config.json, NULL for none; prefix names it in messages) into the
 * model's global RoPE fields and rotary_dim: default, llama3, linear or LongRoPE. rope_theta is kept where the object
 * gives none. */
void tt_model_config_read_rope(const tt_config_reader *top, json_t *source, const char *prefix, tt_model_config *model);

#endif
