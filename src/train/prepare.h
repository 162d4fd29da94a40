/* Prepared datasets: a run's JSON/JSONL datasets tokenized with the model's tokenizer, masked,
 * and written as one token file version 2 (docs/token_format.md) under dataset_prepared_path,
 * named by a hash of everything that shapes it, as axolotl's last_run_prepared/<hash>:
 *   the contents of every dataset file, the entries' types and fields, tokenizer.json and
 *   tokenizer_config.json (contents), special_tokens, train_on_inputs, sequence_len,
 *   excess_length_strategy, shuffle_merged_datasets and seed; for chat_template entries also the
 *   template's text (wherever it comes from), field_messages, message_property_mappings, roles,
 *   roles_to_train, train_on_eos, drop_system_message and whether the tokenizer's path names
 *   mistral (axolotl's rule for a first system turn).
 * `tiertrain preprocess` writes it; `tiertrain train` reuses it when it exists and writes it
 * first otherwise. Documents are tokenized on num_threads threads (OpenMP), chunk by chunk,
 * and placed in input order, so the file is the same for any thread count. */
#ifndef TT_TRAIN_PREPARE_H
#define TT_TRAIN_PREPARE_H

#include <stdbool.h>
#include <stdint.h>

#include "config/run_config.h"
#include "data/chat_template.h"
#include "data/tokenizer.h"

/* True when the run's datasets are JSON datasets (not token files). */
bool tt_run_has_json_datasets(const tt_run_config *run);

/* The prepared file's path for this run (malloc'd), preparing it first unless it exists.
 * *reused (if not NULL) says which. Dies with a clear message on bad data (file, line or record,
 * field), a missing tokenizer, or a chat template that fails on a record. */
char *tt_prepare_datasets(const tt_run_config *run, bool *reused);

/* The 32-hex-digit hash that names the prepared file (exposed for tests). */
void tt_prepared_hash(const tt_run_config *run, char hex[33]);

/* The directory of the run's tokenizer files (tokenizer_config's, which may name a tokenizer.json, else
 * base_model's); false when the run names neither. */
bool tt_run_tokenizer_dir(const tt_run_config *run, char *dir, size_t size);

/* The chat format a run's chat_template entry renders with (its template, special tokens and settings), as
 * preprocessing opens it; for tiertrain inference. tok is the run's tokenizer (tt_run_tokenizer_dir). */
tt_chat_format *tt_run_chat_format(const tt_run_config *run, int entry, const tt_tokenizer *tok);
/* The id of the run's eos_token (special_tokens', else tokenizer_config.json's), or -1 with neither. */
int32_t tt_run_eos_id(const tt_run_config *run, const tt_tokenizer *tok);

#endif
