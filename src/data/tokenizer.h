/* A native Hugging Face tokenizer: reads a tokenizer.json and encodes text to the same ids as
 * the `tokenizers` library (Rust) for byte-level BPE (GPT-2, Llama 3, Qwen2/3) and
 * SentencePiece-style BPE with byte fallback (Llama 2, Mistral), added tokens and the
 * post-processor included. A component type it does not implement is an error at load time,
 * never silently skipped. */
#ifndef TT_DATA_TOKENIZER_H
#define TT_DATA_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct tt_tokenizer tt_tokenizer; /* immutable after load; encode is thread-safe */

/* tokenizer.json, or a directory holding it; tt_die on bad input naming the file and key. */
tt_tokenizer *tt_tokenizer_load(const char *path);
void tt_tokenizer_free(tt_tokenizer *tok);
#ifdef TT_FUZZING
/* The tokenizer tt_tokenizer_load is building (NULL between loads): after a tt_die the fuzz harness frees it. */
extern tt_tokenizer *tt_tokenizer_being_loaded;
#endif

/* Ids (and, when with_offsets is set before the first encode, the byte offset in the caller's
 * text where each token's text starts: a token that covers part of a multibyte character starts
 * at that character's start; tokens the post-processor adds start at 0). Zero-initialize, then
 * reuse across calls; tt_token_ids_free releases it. */
typedef struct tt_token_ids {
    int32_t *ids;
    int64_t *offsets; /* NULL unless with_offsets */
    int64_t count, capacity;
    bool with_offsets;
} tt_token_ids;

void tt_token_ids_free(tt_token_ids *ids);

/* Appends the ids of text[0..len) as HF `tokenizer(text, add_special_tokens=add_special)["input_ids"]`.
 * Invalid UTF-8 is read as Python's bytes.decode('utf-8', errors='replace') reads it. */
void tt_tokenizer_encode(const tt_tokenizer *tok, const char *text, size_t len, bool add_special, tt_token_ids *out);

/* The first max_ids ids of tt_tokenizer_encode's output (all of them when there are fewer, or when max_ids <= 0),
 * appended to out, without encoding the whole of a long text: time and memory follow the ids kept, not the text.
 * A text longer than two windows (TT_ENCODE_PREFIX_WINDOW bytes, or 8 bytes an id kept when that is more) is encoded
 * in growing prefixes of W and 2W bytes, and the ids on which the two agree, ids and offsets, are the text's: every
 * stage of the pipeline (normalizers, pre-tokenizer regexes with their lookahead, BPE within a pre-token) reads a
 * bounded stretch of the text after a token, so the encoding of a prefix differs from the whole text's only near
 * its end, and the agreement of two prefixes W bytes apart shows where. A text shorter than two windows, the usual
 * case, is encoded whole, as tt_tokenizer_encode encodes it. */
#define TT_ENCODE_PREFIX_WINDOW ((size_t)1 << 20)
void tt_tokenizer_encode_prefix(const tt_tokenizer *tok, const char *text, size_t len, bool add_special,
                                int64_t max_ids, tt_token_ids *out);

/* A text's encoding kept so that edited copies of it encode in time proportional to the edit (chat masks locate a
 * turn by encoding the conversation rendered with that turn replaced, once a turn): tt_tokenizer_encode_edited gives
 * tt_tokenizer_encode's ids (add_special false) of any text, reusing the base's ids for the added-token splits (the
 * stretches between special tokens, which tokenizers encodes independently) that the edit leaves alone, at the same
 * place before the first changed byte or the same distance from the end after the last one. */
typedef struct tt_encoded_base tt_encoded_base;
/* The base of text, whose ids (tt_tokenizer_encode's, add_special false) are appended to out as well: the text is
 * encoded once for both. */
tt_encoded_base *tt_tokenizer_encode_base(const tt_tokenizer *tok, const char *text, size_t len, tt_token_ids *out);
void tt_tokenizer_encode_edited(const tt_tokenizer *tok, const tt_encoded_base *base, const char *text, size_t len,
                                tt_token_ids *out);
void tt_encoded_base_free(tt_encoded_base *base);

/* The text of ids[0..count) as HF `tokenizer.decode(ids, skip_special_tokens=skip_special)`: the
 * decoder of tokenizer.json (ByteLevel, Metaspace, or Replace / ByteFallback / Fuse / Strip)
 * turns tokens back into UTF-8, invalid bytes as U+FFFD. Returns a NUL-terminated string the
 * caller frees; *len (if not NULL) gets its length. An id out of range is an error. */
char *tt_tokenizer_decode(const tt_tokenizer *tok, const int32_t *ids, int64_t count, bool skip_special, size_t *len);

int32_t tt_tokenizer_token_to_id(const tt_tokenizer *tok, const char *token); /* -1 if absent (added tokens included) */
const char *tt_tokenizer_id_to_token(const tt_tokenizer *tok, int32_t id);    /* NULL if no token has that id */
int64_t tt_tokenizer_vocab_size(const tt_tokenizer *tok); /* largest id + 1, added tokens included */

#endif
