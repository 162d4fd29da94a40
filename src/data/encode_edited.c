/* Encoding an edited copy of an encoded text (tokenizer.h, tt_tokenizer_encode_edited): tokenizers cuts the raw
 * text at its added tokens and encodes each stretch between them on its own (tt_encode_stretch), so the ids of a
 * stretch the edit left alone, same bytes and same start-of-text or not, are the base's ids. The splits themselves
 * are found again in the edited text (the added-token scan reads single_word's and lstrip/rstrip's neighbours), and
 * only the splits that are the base's, in place before the first changed byte or at the same distance from the end
 * after the last one, are reused: the result is tt_tokenizer_encode's by construction, not by a heuristic. */
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "data/tokenizer_internal.h"

struct tt_encoded_base {
    char *text; /* [len] the text as encoded; NULL when it was not valid UTF-8 (then nothing is reused) */
    size_t len;
    tt_split *splits; /* [split_count] its added-token splits */
    size_t split_count;
    int64_t *first_id; /* [split_count + 1] the index of each split's first id in ids; the last: ids.count */
    tt_token_ids ids;  /* with offsets */
};

/* st->clean holds text unchanged: valid UTF-8, nothing replaced. */
static bool clean_is_text(const tt_encode_state *st, const char *text, size_t len) {
    return st->clean.len == len && memcmp(st->clean.s, text, len) == 0;
}

static void find_splits(const tt_tokenizer *tok, tt_encode_state *st) {
    st->raw_splits.count = 0;
    tt_added_find(tok->added, &tok->added_raw, st->clean.s, st->clean.len, &st->raw_splits);
}

tt_encoded_base *tt_tokenizer_encode_base(const tt_tokenizer *tok, const char *text, size_t len, tt_token_ids *out) {
    tt_encoded_base *base = tt_xcalloc(1, sizeof *base, "an encoding");
    base->ids.with_offsets = true;
    tt_encode_state *st = tt_encode_state_get(tok);
    tt_utf8_sanitize(text, len, &st->clean);
    if (tok->added_raw.count == 0 || !clean_is_text(st, text, len)) { /* no splits to reuse: encode it plainly */
        tt_tokenizer_encode(tok, text, len, false, out);
        return base;
    }
    tt_regex_document_begin(&st->matcher);
    find_splits(tok, st);
    base->text = tt_xmalloc(len + 1, "an encoding");
    memcpy(base->text, text, len);
    base->len = len;
    base->split_count = st->raw_splits.count;
    base->splits = tt_xmalloc(sizeof(tt_split) * (base->split_count + 1), "an encoding");
    memcpy(base->splits, st->raw_splits.items, sizeof(tt_split) * base->split_count);
    base->first_id = tt_xmalloc(sizeof(int64_t) * (base->split_count + 1), "an encoding");
    for (size_t k = 0; k < base->split_count; k++) {
        base->first_id[k] = base->ids.count;
        tt_encode_split(tok, st, base->splits[k], &base->ids);
    }
    base->first_id[base->split_count] = base->ids.count;
    for (int64_t i = 0; i < base->ids.count; i++) tt_token_ids_push(out, base->ids.ids[i], base->ids.offsets[i]);
    return base;
}

static bool same_split(tt_split a, tt_split b) { return a.start == b.start && a.end == b.end && a.id == b.id; }

void tt_tokenizer_encode_edited(const tt_tokenizer *tok, const tt_encoded_base *base, const char *text, size_t len,
                                tt_token_ids *out) {
    if (!base->text) {
        tt_tokenizer_encode(tok, text, len, false, out);
        return;
    }
    tt_encode_state *st = tt_encode_state_get(tok);
    tt_utf8_sanitize(text, len, &st->clean);
    if (!clean_is_text(st, text, len)) {
        tt_tokenizer_encode(tok, text, len, false, out);
        return;
    }
    tt_regex_document_begin(&st->matcher);
    find_splits(tok, st);
    /* the bytes the edit left alone: [0, prefix) of both, and the last `suffix` bytes of both */
    const size_t shorter = len < base->len ? len : base->len;
    size_t prefix = 0, suffix = 0;
    while (prefix < shorter && text[prefix] == base->text[prefix]) prefix++;
    while (suffix < shorter - prefix && text[len - 1 - suffix] == base->text[base->len - 1 - suffix]) suffix++;
    const tt_split *mine = st->raw_splits.items, *theirs = base->splits;
    const size_t n_mine = st->raw_splits.count, n_theirs = base->split_count;
    size_t head = 0; /* leading splits that are the base's, in unchanged bytes */
    while (head < n_mine && head < n_theirs && mine[head].end <= prefix && same_split(mine[head], theirs[head])) head++;
    size_t tail = 0; /* trailing splits that are the base's, as far from the end, in unchanged bytes, not at 0 */
    while (tail < n_mine - head && tail < n_theirs - head) {
        tt_split a = mine[n_mine - 1 - tail], b = theirs[n_theirs - 1 - tail];
        if (a.id != b.id || a.start < len - suffix || b.start == 0 || a.start == 0 ||
            len - a.start != base->len - b.start || len - a.end != base->len - b.end)
            break;
        tail++;
    }
    const tt_token_ids *ids = &base->ids;
    for (int64_t i = 0; i < base->first_id[head]; i++) tt_token_ids_push(out, ids->ids[i], ids->offsets[i]);
    for (size_t k = head; k < n_mine - tail; k++) tt_encode_split(tok, st, mine[k], out);
    const int64_t shift = (int64_t)len - (int64_t)base->len;
    for (int64_t i = base->first_id[n_theirs - tail]; i < ids->count; i++)
        tt_token_ids_push(out, ids->ids[i], ids->offsets[i] + shift);
}

void tt_encoded_base_free(tt_encoded_base *base) {
    if (!base) return;
    free(base->text);
    free(base->splits);
    free(base->first_id);
    tt_token_ids_free(&base->ids);
    free(base);
}
