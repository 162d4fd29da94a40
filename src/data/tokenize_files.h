/* `tiertrain tokenize --tokenizer`: text files -> a token file with the model's own tokenizer. */
#ifndef TT_DATA_TOKENIZE_FILES_H
#define TT_DATA_TOKENIZE_FILES_H

#include <stdbool.h>

typedef struct tt_tokenize_options {
    const char *tokenizer_path; /* tokenizer.json or its directory */
    const char *output_path;
    const char *eos_token; /* NULL: tokenizer_config.json's eos_token */
    bool no_eos;           /* documents without a separator */
    bool ids_text;         /* write each file's ids as one text line, special tokens added (HF's
                                   add_special_tokens=True), instead of a token file */
} tt_tokenize_options;

/* tokenizer_config.json's special token `key` ("eos_token", "bos_token", "pad_token") beside the
 * tokenizer (what transformers' eos_token_id etc. read): a string or {"content": ...}; NULL if there
 * is none. Caller frees. */
char *tt_tokenizer_config_token(const char *tokenizer_path, const char *key);

/* One document per input file, as tools/tokenize_hf.py: ids without special tokens, then eos. */
void tt_tokenize_files(const tt_tokenize_options *opt, char *const *inputs, int count);

#endif
