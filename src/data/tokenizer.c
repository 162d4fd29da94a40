/* The encode pipeline, as tokenizers' Tokenizer::encode runs it: invalid UTF-8 replaced, added
 * tokens cut out of the raw text, each remaining stretch normalized (then cut at the added
 * tokens that match normalized text), pre-tokenized and BPE-encoded; the post-processor's
 * special tokens around the whole when add_special is set. Also the vocabulary queries. */
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "data/tokenizer_internal.h"

static void encode_piece(const tt_tokenizer *tok, tt_encode_state *st, tt_text *work, tt_token_ids *out) {
    tt_pretokenize(tok, st, work, &st->ranges);
    for (size_t r = 0; r < st->ranges.count; r++) {
        size_t s = st->ranges.items[r].start, e = st->ranges.items[r].end;
        tt_bpe_encode(tok, st, work->s + s, work->orig + s, e - s, out);
    }
}

void tt_encode_stretch(const tt_tokenizer *tok, tt_encode_state *st, size_t start, size_t end, tt_token_ids *out) {
    tt_text view = {st->clean.s + start, st->clean.orig + start, end - start, 0};
    tt_normalize(tok, &st->matcher, &view, &st->norm, &st->scratch);
    if (tok->added_normalized.count == 0) {
        if (st->norm.len > 0) encode_piece(tok, st, &st->norm, out);
        return;
    }
    st->norm_splits.count = 0;
    tt_added_find(tok->added, &tok->added_normalized, st->norm.s, st->norm.len, &st->norm_splits);
    for (size_t k = 0; k < st->norm_splits.count; k++) {
        tt_split sp = st->norm_splits.items[k];
        if (sp.id >= 0) {
            tt_token_ids_push(out, sp.id, st->norm.orig[sp.start]);
            continue;
        }
        st->work.len = 0;
        tt_text_reserve(&st->work, sp.end - sp.start + 1);
        memcpy(st->work.s, st->norm.s + sp.start, sp.end - sp.start);
        memcpy(st->work.orig, st->norm.orig + sp.start, (sp.end - sp.start) * sizeof(int64_t));
        st->work.len = sp.end - sp.start;
        encode_piece(tok, st, &st->work, out);
    }
}

void tt_encode_split(const tt_tokenizer *tok, tt_encode_state *st, tt_split split, tt_token_ids *out) {
    if (split.id >= 0) tt_token_ids_push(out, split.id, st->clean.orig[split.start]);
    else tt_encode_stretch(tok, st, split.start, split.end, out);
}

void tt_tokenizer_encode(const tt_tokenizer *tok, const char *text, size_t len, bool add_special, tt_token_ids *out) {
    tt_encode_state *st = tt_encode_state_get(tok);
    tt_regex_document_begin(&st->matcher);
    if (add_special)
        for (int32_t k = 0; k < tok->prefix_count; k++) tt_token_ids_push(out, tok->prefix_ids[k], 0);
    tt_utf8_sanitize(text, len, &st->clean);
    st->raw_splits.count = 0;
    if (tok->added_raw.count > 0)
        tt_added_find(tok->added, &tok->added_raw, st->clean.s, st->clean.len, &st->raw_splits);
    else if (st->clean.len > 0) tt_splits_push(&st->raw_splits, 0, st->clean.len, -1);
    for (size_t k = 0; k < st->raw_splits.count; k++) tt_encode_split(tok, st, st->raw_splits.items[k], out);
    if (add_special)
        for (int32_t k = 0; k < tok->suffix_count; k++) tt_token_ids_push(out, tok->suffix_ids[k], 0);
}

/* The start of the UTF-8 character at or before text[at] (a prefix cut there splits no character). */
static size_t char_start(const char *text, size_t at) {
    /* a character's bytes after its first are at most 3; past that the bytes are invalid UTF-8 and any cut is one */
    for (int back = 0; back < 3 && at > 0 && ((unsigned char)text[at] & 0xC0) == 0x80; back++) at--;
    return at;
}

/* How many leading ids a and b share, offsets included. */
static int64_t agreeing_ids(const tt_token_ids *a, const tt_token_ids *b) {
    int64_t n = a->count < b->count ? a->count : b->count, i = 0;
    while (i < n && a->ids[i] == b->ids[i] && (!a->with_offsets || a->offsets[i] == b->offsets[i])) i++;
    return i;
}

static void append_ids(tt_token_ids *out, const tt_token_ids *from, int64_t count) {
    for (int64_t i = 0; i < count; i++) tt_token_ids_push(out, from->ids[i], from->with_offsets ? from->offsets[i] : 0);
}

/* The whole text's ids, the first max_ids of them kept (all when max_ids <= 0). */
static void encode_whole_keep(const tt_tokenizer *tok, const char *text, size_t len, bool add_special, int64_t max_ids,
                              tt_token_ids *out) {
    const int64_t first = out->count;
    tt_tokenizer_encode(tok, text, len, add_special, out);
    if (max_ids > 0 && out->count - first > max_ids) out->count = first + max_ids;
}

void tt_tokenizer_encode_prefix(const tt_tokenizer *tok, const char *text, size_t len, bool add_special,
                                int64_t max_ids, tt_token_ids *out) {
    size_t window = TT_ENCODE_PREFIX_WINDOW;
    if (max_ids > 0 && (uint64_t)max_ids > window / 8) window = (size_t)max_ids * 8;
    if (max_ids <= 0 || len / 2 <= window) {
        encode_whole_keep(tok, text, len, add_special, max_ids, out);
        return;
    }
    tt_token_ids shorter = {.with_offsets = out->with_offsets}, longer = {.with_offsets = out->with_offsets};
    tt_tokenizer_encode(tok, text, char_start(text, window), add_special, &shorter);
    for (;;) {
        if (len / 2 <= window) { /* the next prefix would be most of the text: encode it whole */
            encode_whole_keep(tok, text, len, add_special, max_ids, out);
            break;
        }
        window *= 2;
        longer.count = 0;
        tt_tokenizer_encode(tok, text, char_start(text, window), add_special, &longer);
        if (agreeing_ids(&shorter, &longer) >= max_ids) {
            append_ids(out, &longer, max_ids);
            break;
        }
        tt_token_ids swap = shorter;
        shorter = longer;
        longer = swap;
    }
    tt_token_ids_free(&shorter);
    tt_token_ids_free(&longer);
}

int32_t tt_tokenizer_token_to_id(const tt_tokenizer *tok, const char *token) {
    size_t len = strlen(token);
    int32_t id = tt_str_map_get(&tok->added_map, token, len);
    return id >= 0 ? id : tt_str_map_get(&tok->vocab, token, len);
}

const char *tt_tokenizer_id_to_token(const tt_tokenizer *tok, int32_t id) {
    if (id < 0 || id >= tok->vocab_size) return NULL;
    return tok->id_to_token[id];
}

int64_t tt_tokenizer_vocab_size(const tt_tokenizer *tok) { return tok->vocab_size; }
