/* The tokenizer's tables and the pieces of its pipeline, shared by the files that implement it:
 * tokenizer_load.c (JSON -> tables), utf8.c, normalize.c, added_tokens.c, pretokenize.c, bpe.c,
 * tokenizer.c (the encode pipeline and the post-processor). */
#ifndef TT_DATA_TOKENIZER_INTERNAL_H
#define TT_DATA_TOKENIZER_INTERNAL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "data/tokenizer.h"

/* ---- string -> id hash map (open addressing; keys are owned elsewhere) ---- */
typedef struct tt_str_slot {
    const char *key;
    uint32_t len;
    int32_t id;
} tt_str_slot;
typedef struct tt_str_map {
    tt_str_slot *slots;
    uint64_t mask, used;
} tt_str_map;
uint64_t tt_hash_bytes(const void *data, size_t len);
void tt_str_map_init(tt_str_map *map, uint64_t expected);
void tt_str_map_free(tt_str_map *map);
/* Returns false when the key was there already (its id is left as it was). */
bool tt_str_map_put(tt_str_map *map, const char *key, size_t len, int32_t id);
int32_t tt_str_map_get(const tt_str_map *map, const char *key, size_t len); /* -1 if absent */

/* ---- text with its origin: every byte knows where its character started in the caller's bytes ---- */
typedef struct tt_text {
    char *s;
    int64_t *orig; /* [len] */
    size_t len, cap;
} tt_text;
void tt_text_reserve(tt_text *t, size_t cap);
void tt_text_append(tt_text *t, const char *s, size_t len, int64_t orig); /* every byte gets `orig` */
void tt_text_free(tt_text *t);

/* utf8.c: invalid UTF-8 becomes U+FFFD, one per maximal subpart (Python's errors='replace'). */
void tt_utf8_sanitize(const char *text, size_t len, tt_text *out);
/* Length of the UTF-8 character starting at s[0] (s is valid UTF-8). */
static inline int tt_utf8_char_len(unsigned char c) { return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4; }
int32_t tt_utf8_decode(const char *s, int *len); /* s is valid UTF-8 */
int tt_utf8_encode(int32_t cp, char *out);       /* returns 1-4 */

/* ---- regexes (regex.c): Split and Replace patterns, matched within a work budget ---- */
typedef struct tt_regex {
    pcre2_code *code;
    char *pattern; /* as tokenizer.json writes it, for messages */
    char *where;   /* its key in tokenizer.json ("pre_tokenizer.pretokenizers[0].pattern"), for messages */
    bool jit;      /* PCRE2's JIT compiled it: matched by pcre2_jit_match, else by the interpreter */
} tt_regex;
/* Compiles an Oniguruma pattern (tokenizers' syntax, translated to PCRE2's) or, with literal, a String pattern;
 * tt_die naming file and where when it does not compile. */
void tt_regex_compile(tt_regex *regex, const char *file, const char *where, const char *pattern, bool literal);
void tt_regex_free(tt_regex *regex);
/* What matching needs besides the pattern (one per thread): match data, the JIT stack, the limits, and the work
 * budget of the document being encoded, which every scan of it adds to and every match draws on (regex.c). */
typedef struct tt_regex_matcher {
    pcre2_match_data *match;
    pcre2_match_context *context;
    pcre2_jit_stack *jit_stack;
    uint64_t budget, work_left, scanned_bytes;
} tt_regex_matcher;
void tt_regex_matcher_init(tt_regex_matcher *matcher); /* ready for a document */
void tt_regex_matcher_free(tt_regex_matcher *matcher);
/* A new document: the budget starts again. */
void tt_regex_document_begin(tt_regex_matcher *matcher);
/* One scan of a text by one pattern: it adds the text's share to the document's budget. */
typedef struct tt_regex_scan {
    const tt_regex *regex;
    const char *file; /* the tokenizer.json, for messages */
    tt_regex_matcher *matcher;
    size_t text_bytes;
} tt_regex_scan;
void tt_regex_scan_begin(tt_regex_scan *scan, const tt_regex *regex, const char *file, tt_regex_matcher *matcher,
                         size_t text_bytes);
/* The leftmost match in subject[from, len) (valid UTF-8): true with it in [*start, *end), false when there is none.
 * Any PCRE2 error, the budget's end included, is a tt_die naming the file, the pattern and what to do. */
bool tt_regex_find(tt_regex_scan *scan, const char *subject, size_t len, size_t from, size_t *start, size_t *end);

/* ---- normalizers ---- */
typedef enum tt_norm_kind {
    TT_NORM_NFC,
    TT_NORM_NFD,
    TT_NORM_NFKC,
    TT_NORM_NFKD,
    TT_NORM_PREPEND,
    TT_NORM_REPLACE
} tt_norm_kind;
typedef struct tt_norm_step {
    tt_norm_kind kind;
    char *pattern;  /* Replace: the string replaced (a String pattern) */
    tt_regex regex; /* Replace: the matches replaced (a Regex pattern); its code is NULL for a String pattern */
    char *content;  /* Prepend: the prefix; Replace: the replacement */
} tt_norm_step;
/* Applies the tokenizer's normalizers to in, writing out (out is reset first); a Replace regex runs on matcher. */
void tt_normalize(const tt_tokenizer *tok, tt_regex_matcher *matcher, const tt_text *in, tt_text *out,
                  tt_text *scratch);

/* ---- added tokens ---- */
typedef struct tt_added_token {
    char *content;
    size_t len;
    int32_t id;
    bool single_word, lstrip, rstrip, normalized, special;
} tt_added_token;
typedef struct tt_added_set {    /* the tokens matched on raw (or on normalized) text */
    int32_t *by_first_byte[256]; /* indices into the tokenizer's added tokens, longest first */
    int32_t count_first_byte[256];
    int32_t count;
} tt_added_set;
/* One split of a text: an added token (id >= 0) or a stretch of text (id -1), [start, end). */
typedef struct tt_split {
    size_t start, end;
    int32_t id;
} tt_split;
typedef struct tt_splits {
    tt_split *items;
    size_t count, cap;
} tt_splits;
void tt_splits_push(tt_splits *s, size_t start, size_t end, int32_t id);
/* Splits s[0..len) as tokenizers' AddedVocabulary::find_matches does (leftmost-longest,
 * non-overlapping; single_word, lstrip, rstrip), appending to out. */
void tt_added_find(const tt_added_token *tokens, const tt_added_set *set, const char *s, size_t len, tt_splits *out);
void tt_added_set_build(tt_added_set *set, const tt_added_token *tokens, int32_t count, bool normalized);
void tt_added_set_free(tt_added_set *set);

/* ---- pre-tokenizers ---- */
typedef enum tt_split_behavior {
    TT_SPLIT_ISOLATED,
    TT_SPLIT_REMOVED,
    TT_SPLIT_MERGED_PREV,
    TT_SPLIT_MERGED_NEXT,
    TT_SPLIT_CONTIGUOUS
} tt_split_behavior;
typedef enum tt_pre_kind { TT_PRE_SPLIT, TT_PRE_BYTE_LEVEL_PREFIX, TT_PRE_METASPACE } tt_pre_kind;
typedef enum tt_prepend_scheme { TT_PREPEND_ALWAYS, TT_PREPEND_FIRST, TT_PREPEND_NEVER } tt_prepend_scheme;
typedef struct tt_pre_step {
    tt_pre_kind kind;
    tt_regex regex; /* Split (a String pattern is compiled as a literal) */
    tt_split_behavior behavior;
    bool invert;
    char replacement[8]; /* Metaspace */
    tt_prepend_scheme prepend;
    bool split;
} tt_pre_step;

/* ---- decoders (ids -> text) ---- */
typedef enum tt_dec_kind {
    TT_DEC_BYTE_LEVEL,
    TT_DEC_REPLACE,
    TT_DEC_BYTE_FALLBACK,
    TT_DEC_FUSE,
    TT_DEC_STRIP,
    TT_DEC_METASPACE
} tt_dec_kind;
typedef struct tt_dec_step {
    tt_dec_kind kind;
    char *pattern, *content; /* Replace; Strip: content; Metaspace: content is the replacement */
    int start, stop;         /* Strip: characters taken from each end */
    bool prepend;            /* Metaspace: a prepend scheme other than never (the first space is dropped) */
} tt_dec_step;

/* ---- BPE ---- */
typedef struct tt_merge_slot {
    uint64_t pair; /* left id << 32 | right id; UINT64_MAX when empty */
    int32_t rank, merged;
} tt_merge_slot;

/* Per-thread scratch and the pre-token cache (pretokens -> ids), so that encode is thread-safe
 * with no lock on the hot path. */
typedef struct tt_encode_state tt_encode_state;

struct tt_tokenizer {
    char *path;
    /* vocabulary */
    tt_str_map vocab;     /* the model's vocabulary */
    tt_str_map added_map; /* added tokens' contents (looked up before the model's, as tokenizers does) */
    char **id_to_token;   /* [vocab_size] (NULL holes allowed) */
    int64_t vocab_size;
    /* model: BPE */
    tt_merge_slot *merges;
    uint64_t merges_mask;
    int32_t unk_id;
    bool fuse_unk, byte_fallback, ignore_merges;
    int32_t byte_fallback_ids[256]; /* <0xNN> */
    /* normalizer */
    tt_norm_step *norm;
    int norm_count;
    /* added tokens */
    tt_added_token *added;
    int32_t added_count;
    tt_added_set added_raw, added_normalized;
    /* pre-tokenizer */
    tt_pre_step *pre;
    int pre_count;
    bool byte_level;         /* pieces are mapped to the GPT-2 byte alphabet before BPE */
    int32_t byte_to_id[256]; /* byte-level: the vocab id of each byte's character */
    char byte_char[256][3];  /* byte-level: each byte's character (UTF-8, NUL-terminated) */
    /* decoder: steps, or why there are none (decode dies with it; encode needs no decoder) */
    uint8_t *is_special; /* [vocab_size]: an added token marked special (skipped by decode on request) */
    tt_dec_step *dec;
    int dec_count;
    char *dec_error;
    /* post-processor (add_special_tokens) */
    int32_t *prefix_ids, *suffix_ids;
    int32_t prefix_count, suffix_count;
    /* per-thread states */
    pthread_key_t state_key;
    pthread_mutex_t states_lock;
    bool thread_state_ready; /* state_key and states_lock exist (the end of a load) */
    tt_encode_state **states;
    int state_count, state_cap;
};

/* pretokenize.c: splits text into pre-tokens (ranges of `work`, which may be rewritten). */
typedef struct tt_range {
    size_t start, end;
} tt_range;
typedef struct tt_ranges {
    tt_range *items;
    size_t count, cap;
} tt_ranges;
void tt_pretokenize(const tt_tokenizer *tok, tt_encode_state *st, tt_text *work, tt_ranges *out);

/* bpe.c */
tt_encode_state *tt_encode_state_get(const tt_tokenizer *tok);
void tt_encode_state_free(tt_encode_state *st);
/* Encodes one pre-token s[0..len) whose bytes start at orig[0..len), appending to out. */
void tt_bpe_encode(const tt_tokenizer *tok, tt_encode_state *st, const char *s, const int64_t *orig, size_t len,
                   tt_token_ids *out);
void tt_token_ids_push(tt_token_ids *out, int32_t id, int64_t offset);
/* tokenizer.c: the ids of st->clean[start, end), a stretch between added tokens (normalized, its normalized added
 * tokens cut out, pre-tokenized, BPE), appended to out. A function of the stretch's bytes and of whether it starts the
 * text (Metaspace's prepend_scheme first), nothing else: encode_edited.c reuses stretches on that ground. */
void tt_encode_stretch(const tt_tokenizer *tok, tt_encode_state *st, size_t start, size_t end, tt_token_ids *out);
/* One split of st->clean: an added token's id, or its stretch encoded (tt_encode_stretch). */
void tt_encode_split(const tt_tokenizer *tok, tt_encode_state *st, tt_split split, tt_token_ids *out);

/* State the pipeline stages share, owned by the thread. */
struct tt_encode_state {
    tt_text clean, norm, scratch, work;
    tt_splits raw_splits, norm_splits;
    tt_ranges ranges, ranges2;
    tt_regex_matcher matcher;
    /* BPE scratch */
    struct tt_symbol *symbols;
    size_t symbols_cap;
    struct tt_heap_item *heap;
    size_t heap_cap;
    char *mapped;
    void *segments;
    size_t segments_cap;
    size_t mapped_cap;
    /* pre-token cache */
    struct tt_cache_slot *cache_slots;
    uint64_t cache_mask, cache_used;
    char *cache_pool;
    size_t cache_pool_used, cache_pool_cap;
};

#endif
