/* Token files (docs/token_format.md): ids a tokenizer produced, for a run to read without any text or
 * tokenizer. Version 1: a 32-byte little-endian header (magic "TTTOKENS", version, the tokenizer's vocab_size,
 * token count, the eos id written after every document) and the ids. Version 2: a 48-byte header (also the pad
 * id and the document count), the document starts, the ids and a label byte per token (1: a training target).
 * The writers are here; the reader is the training data loader (train/data.h). */
#ifndef TT_DATA_TOKEN_FILE_H
#define TT_DATA_TOKEN_FILE_H

#include <stdint.h>

#define TT_TOKEN_FILE_MAGIC "TTTOKENS"
#define TT_TOKEN_FILE_VERSION 1u
#define TT_TOKEN_FILE_HEADER_BYTES 32
#define TT_TOKEN_NO_EOS 0xffffffffu
#define TT_TOKEN_FILE_VERSION_DOCUMENTS 2u
#define TT_TOKEN_FILE_V2_HEADER_BYTES 48
#define TT_TOKEN_NO_PAD 0xffffffffu

typedef struct tt_token_file_header {
    uint32_t version;
    uint32_t vocab_size;
    uint64_t token_count;
    uint32_t eos_id;
} tt_token_file_header;

/* Writes a token file atomically. */
void tt_token_file_write(const char *path, const uint32_t *tokens, uint64_t count, uint32_t vocab_size,
                         uint32_t eos_id);

/* A tokenized, masked dataset of documents (token file version 2). */
typedef struct tt_token_documents {
    uint32_t *tokens; /* [token_count] */
    uint8_t *labels;  /* [token_count]: 1 the token is a training target, 0 masked */
    uint64_t *starts; /* [document_count + 1]: document d is tokens[starts[d] .. starts[d + 1]) */
    uint64_t token_count, document_count;
    uint32_t vocab_size, eos_id, pad_id;
    const int64_t *order; /* NULL, or [document_count]: the file's document i is document order[i] (a permutation) */
} tt_token_documents;

/* Writes a version 2 token file atomically, its documents in order (when given: a shuffle costs no second copy of
 * the tokens); checks that starts is 0, ascending, ends at token_count, and that order is a permutation. */
void tt_token_file_write_documents(const char *path, const tt_token_documents *docs);

#endif
