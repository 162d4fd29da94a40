/* Normalizers: Unicode normalization forms (utf8proc), Prepend and Replace, applied in order,
 * each byte of the result keeping the origin of the character it came from. */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "core/check.h"
#include "data/tokenizer_internal.h"

/* Appends in[from, to) with the origins of its bytes. An empty span copies nothing: out may have no buffer yet (its
 * s NULL), and memcpy to or from NULL is undefined even for zero bytes. */
static void append_span(tt_text *out, const tt_text *in, size_t from, size_t to) {
    if (to <= from) return;
    tt_text_reserve(out, out->len + (to - from));
    memcpy(out->s + out->len, in->s + from, to - from);
    memcpy(out->orig + out->len, in->orig + from, (to - from) * sizeof(int64_t));
    out->len += to - from;
}

/* A character before which normalization can cut the text: nothing before it can compose with
 * it or be reordered after it. ASCII characters qualify; so do other starters that are not the
 * second half of any canonical composition. The scripts whose starters can be second halves
 * (Indic vowel signs, Hangul jamo, Balinese, Brahmi-derived scripts beyond the BMP) are left
 * out wholesale: a bigger chunk is still normalized right, only its offsets are coarser. */
static bool is_cut_point(int32_t cp) {
    if (cp < 0x80) return true;
    if ((cp >= 0x0900 && cp <= 0x0DFF) || (cp >= 0x1000 && cp <= 0x109F) || (cp >= 0x1100 && cp <= 0x11FF) ||
        (cp >= 0x1B00 && cp <= 0x1B7F) || (cp >= 0xAC00 && cp <= 0xD7A3) || cp >= 0x11000)
        return false;
    return utf8proc_get_property(cp)->combining_class == 0;
}

static utf8proc_option_t form_options(tt_norm_kind kind) {
    switch (kind) {
    case TT_NORM_NFC: return UTF8PROC_STABLE | UTF8PROC_COMPOSE;
    case TT_NORM_NFD: return UTF8PROC_STABLE | UTF8PROC_DECOMPOSE;
    case TT_NORM_NFKC: return UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
    default: return UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
    }
}

/* Normalizes one chunk in[start, end). Unchanged text keeps its offsets byte for byte; changed
 * text takes the chunk's first offset (a composed character starts where its first part did). */
static void normalize_chunk(tt_norm_kind kind, const tt_text *in, size_t start, size_t end, tt_text *out) {
    size_t n = end - start;
    if (n == 1) { /* an ASCII character is its own normal form */
        tt_text_append(out, in->s + start, 1, in->orig[start]);
        return;
    }
    int char_len;
    int32_t cp = tt_utf8_decode(in->s + start, &char_len);
    bool decomposes_hangul = (kind == TT_NORM_NFD || kind == TT_NORM_NFKD) && cp >= 0xAC00 && cp <= 0xD7A3;
    if ((size_t)char_len == n && utf8proc_get_property(cp)->decomp_seqindex == UINT16_MAX && !decomposes_hangul) {
        append_span(out, in, start, end);
        return;
    }
    utf8proc_uint8_t *result = NULL;
    utf8proc_ssize_t got =
        utf8proc_map((const utf8proc_uint8_t *)in->s + start, (utf8proc_ssize_t)n, &result, form_options(kind));
    TT_CHECK(got >= 0, "utf8proc_map failed on valid UTF-8: %s", utf8proc_errmsg(got));
    if ((size_t)got == n && memcmp(result, in->s + start, n) == 0) {
        append_span(out, in, start, end);
    } else {
        tt_text_append(out, (const char *)result, (size_t)got, in->orig[start]);
    }
    free(result);
}

static void normalize_form(tt_norm_kind kind, const tt_text *in, tt_text *out) {
    size_t chunk = 0, i = 0;
    while (i < in->len) {
        int len;
        int32_t cp = tt_utf8_decode(in->s + i, &len);
        if (i > chunk && is_cut_point(cp)) {
            normalize_chunk(kind, in, chunk, i, out);
            chunk = i;
        }
        i += (size_t)len;
    }
    if (i > chunk) normalize_chunk(kind, in, chunk, i, out);
}

static void replace_all(const char *pattern, const char *content, const tt_text *in, tt_text *out) {
    size_t plen = strlen(pattern), clen = strlen(content);
    size_t i = 0;
    while (i < in->len) {
        const char *hit = plen ? memmem(in->s + i, in->len - i, pattern, plen) : NULL;
        size_t stop = hit ? (size_t)(hit - in->s) : in->len;
        append_span(out, in, i, stop);
        if (!hit) break;
        tt_text_append(out, content, clen, in->orig[stop]);
        i = stop + plen;
    }
}

/* A Regex Replace (tokenizers' Replace normalizer with {"Regex": ...}): every leftmost non-overlapping match replaced
 * by content. Every PCRE2 error ends the encode (a Replace that stopped part way would hand on text half replaced,
 * to be tokenized to wrong ids without a word). */
static void replace_regex(const tt_tokenizer *tok, const tt_norm_step *step, tt_regex_matcher *matcher,
                          const tt_text *in, tt_text *out) {
    tt_regex_scan scan;
    tt_regex_scan_begin(&scan, &step->regex, tok->path, matcher, in->len);
    const size_t clen = strlen(step->content);
    size_t i = 0; /* in[0 .. i) is in out */
    size_t start, end;
    while (i < in->len && tt_regex_find(&scan, in->s, in->len, i, &start, &end)) {
        /* the loader refuses a pattern whose shortest match is empty, but \K can still end a match where it starts */
        if (end <= start)
            tt_die("%s: %s: the Replace pattern /%s/ matched the empty string at byte %zu; tokenizers would insert "
                   "the content there, which tiertrain does not reproduce: use a pattern that matches at least one "
                   "character (without \\K)",
                   tok->path, step->regex.where, step->regex.pattern, start);
        append_span(out, in, i, start);
        tt_text_append(out, step->content, clen, in->orig[start]);
        i = end;
    }
    append_span(out, in, i, in->len);
}

void tt_normalize(const tt_tokenizer *tok, tt_regex_matcher *matcher, const tt_text *in, tt_text *out,
                  tt_text *scratch) {
    /* ping-pong between out and scratch, ending in out */
    out->len = 0;
    tt_text_reserve(out, in->len + 1);
    append_span(out, in, 0, in->len);
    for (int k = 0; k < tok->norm_count; k++) {
        const tt_norm_step *step = &tok->norm[k];
        scratch->len = 0;
        switch (step->kind) {
        case TT_NORM_PREPEND:
            /* tokenizers prepends to non-empty text only; the prefix starts where the text does */
            if (out->len == 0) continue;
            tt_text_append(scratch, step->content, strlen(step->content), out->orig[0]);
            append_span(scratch, out, 0, out->len);
            break;
        case TT_NORM_REPLACE:
            if (step->regex.code) replace_regex(tok, step, matcher, out, scratch);
            else replace_all(step->pattern, step->content, out, scratch);
            break;
        default: normalize_form(step->kind, out, scratch); break;
        }
        tt_text t = *out;
        *out = *scratch;
        *scratch = t;
    }
    tt_text_reserve(out, out->len + 1);
    out->s[out->len] = 0;
}
