/* What a finished run leaves in output_dir beside the weights or the adapter, as axolotl does, so that transformers,
 * peft and vLLM load output_dir as it is: the base model's tokenizer and generation files (tokenizer.json,
 * tokenizer_config.json, special_tokens_map.json, generation_config.json, ...; tokenizer_config's directory's where it
 * is set) and a README.md model card naming the base, what trained and the run's effective configuration. */
#ifndef TT_TRAIN_MODEL_CARD_H
#define TT_TRAIN_MODEL_CARD_H

#include <stdbool.h>

#include "config/run_config.h"

/* lora: the run trained adapters (adapter_model.safetensors) rather than the whole model. */
void tt_write_output_companions(const tt_run_config *run, bool lora, int64_t steps);

#endif
