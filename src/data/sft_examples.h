/* One JSON record of a dataset -> token ids and a label mask, by the entry's type, as axolotl's
 * prompt strategies build them (src/axolotl/prompt_strategies/ and prompt_tokenizers.py):
 *
 *  completion    the record's `field` (default "text"), tokenized with the tokenizer's special
 *                tokens (its post-processor: BOS for Llama), EOS appended unless it is already
 *                last; every token trains. (Long texts are split into pieces of sequence_len
 *                by src/train/prepare.c, as axolotl's completion strategy does.)
 *  alpaca        axolotl's AlpacaPrompter, prompt style "instruct": the prompt is
 *                  "Below is an instruction that describes a task, paired with an input that
 *                  provides further context. Write a response that appropriately completes the
 *                  request.\n\n### Instruction:\n{instruction}\n\n### Input:\n{input}\n\n### Response:\n"
 *                (without an input, or an empty one: "Below is an instruction that describes a
 *                task. Write a response that appropriately completes the request.\n\n### Instruction:
 *                \n{instruction}\n\n### Response:\n"), tokenized with special tokens; the output is
 *                tokenized on its own (so no BPE merge crosses the boundary), its leading BOS
 *                stripped, EOS appended unless already last. The prompt's tokens are masked unless
 *                train_on_inputs; the output and its EOS train.
 *  input_output  {"segments": [{"text": ..., "label": true|false}, ...]}: each segment tokenized
 *                without special tokens (axolotl adds no BOS/EOS here: write them in the text),
 *                concatenated; a segment with label false is masked unless train_on_inputs.
 *
 * Splitting a record into texts (sft_record_segments) checks the record and dies naming the file,
 * line or record, and field; tokenizing them (sft_tokenize_example) touches no shared state, so
 * documents can be tokenized on several threads. */
#ifndef TT_DATA_SFT_EXAMPLES_H
#define TT_DATA_SFT_EXAMPLES_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "config/run_config.h"
#include "data/tokenizer.h"

typedef struct tt_sft_segment {
    char *text; /* owned, UTF-8 */
    size_t len;
    bool trained;     /* its tokens are training targets */
    bool add_special; /* tokenized with the post-processor's special tokens (HF add_special_tokens=True) */
    bool strip_bos;   /* a leading BOS is removed (axolotl's strip_bos_token) */
} tt_sft_segment;

typedef struct tt_sft_example {
    tt_sft_segment *segments;
    int count, capacity;
    bool append_eos; /* EOS appended (trained) unless the last token is EOS already */
} tt_sft_example;

/* The special ids tokenization uses; -1 where the tokenizer has none. */
typedef struct tt_sft_ids {
    int32_t bos, eos;
} tt_sft_ids;

/* A record's texts by spec's type; where names the record ("data.jsonl:12") in errors. */
void tt_sft_record_segments(const tt_dataset_spec *spec, bool train_on_inputs, json_t *record, const char *where,
                            tt_sft_example *out);
void tt_sft_example_free(tt_sft_example *ex);

/* The example's ids (appended to ids, reused between calls) and labels[ids->count] (1: trains),
 * *labels grown as needed (its capacity in *label_capacity). segment_max_ids > 0: each segment's text is encoded
 * only as far as its first segment_max_ids ids (tt_tokenizer_encode_prefix), for a caller that keeps at most
 * segment_max_ids - 2 ids of an example (one more says the example is longer, one more for a stripped BOS); 0: whole. */
void tt_sft_tokenize_example(const tt_tokenizer *tok, const tt_sft_ids *special, const tt_sft_example *ex,
                             int64_t segment_max_ids, tt_token_ids *ids, uint8_t **labels, int64_t *label_capacity);

#endif
