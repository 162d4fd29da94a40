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

static void encode_stretch(const tt_tokenizer *tok, tt_encode_state *st, size_t start, size_t end, tt_token_ids *out) {
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
    for (size_t k = 0; k < st->raw_splits.count; k++) {
        tt_split sp = st->raw_splits.items[k];
        if (sp.id >= 0) tt_token_ids_push(out, sp.id, st->clean.orig[sp.start]);
        else encode_stretch(tok, st, sp.start, sp.end, out);
    }
    if (add_special)
        for (int32_t k = 0; k < tok->suffix_count; k++) tt_token_ids_push(out, tok->suffix_ids[k], 0);
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
