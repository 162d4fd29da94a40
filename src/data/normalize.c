/* Normalizers: Unicode normalization forms (utf8proc), Prepend and Replace, applied in order,
 * each byte of the result keeping the origin of the character it came from. */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "core/check.h"
#include "data/tokenizer_internal.h"

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
        tt_text_reserve(out, out->len + n);
        memcpy(out->s + out->len, in->s + start, n);
        memcpy(out->orig + out->len, in->orig + start, n * sizeof(int64_t));
        out->len += n;
        return;
    }
    utf8proc_uint8_t *result = NULL;
    utf8proc_ssize_t got =
        utf8proc_map((const utf8proc_uint8_t *)in->s + start, (utf8proc_ssize_t)n, &result, form_options(kind));
    TT_CHECK(got >= 0, "utf8proc_map failed on valid UTF-8: %s", utf8proc_errmsg(got));
    if ((size_t)got == n && memcmp(result, in->s + start, n) == 0) {
        tt_text_reserve(out, out->len + n);
        memcpy(out->s + out->len, in->s + start, n);
        memcpy(out->orig + out->len, in->orig + start, n * sizeof(int64_t));
        out->len += n;
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
        tt_text_reserve(out, out->len + (stop - i));
        memcpy(out->s + out->len, in->s + i, stop - i);
        memcpy(out->orig + out->len, in->orig + i, (stop - i) * sizeof(int64_t));
        out->len += stop - i;
        if (!hit) break;
        tt_text_append(out, content, clen, in->orig[stop]);
        i = stop + plen;
    }
}

/* A Regex Replace (tokenizers' Replace normalizer with {"Regex": ...}): every leftmost non-overlapping match replaced by
 * content. The loader refuses patterns that can match the empty string, so every match moves on. */
static void replace_regex(const pcre2_code *regex, const char *content, const tt_text *in, tt_text *out) {
    pcre2_match_data *match = pcre2_match_data_create_from_pattern(regex, NULL);
    TT_CHECK(match != NULL, "PCRE2 match data");
    const size_t clen = strlen(content);
    size_t i = 0; /* in[0 .. i) is in out */
    while (i < in->len && pcre2_match(regex, (PCRE2_SPTR)in->s, in->len, i, 0, match, NULL) >= 0) {
        const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(match);
        const size_t start = ov[0], end = ov[1];
        TT_CHECK(end > start, "a Replace pattern matched the empty string at byte %zu", start);
        tt_text_reserve(out, out->len + (start - i));
        memcpy(out->s + out->len, in->s + i, start - i);
        memcpy(out->orig + out->len, in->orig + i, (start - i) * sizeof(int64_t));
        out->len += start - i;
        tt_text_append(out, content, clen, in->orig[start]);
        i = end;
    }
    tt_text_reserve(out, out->len + (in->len - i));
    memcpy(out->s + out->len, in->s + i, in->len - i);
    memcpy(out->orig + out->len, in->orig + i, (in->len - i) * sizeof(int64_t));
    out->len += in->len - i;
    pcre2_match_data_free(match);
}

void tt_normalize(const tt_norm_step *steps, int count, const tt_text *in, tt_text *out, tt_text *scratch) {
    /* ping-pong between out and scratch, ending in out */
    out->len = 0;
    tt_text_reserve(out, in->len + 1);
    if (in->len > 0) memcpy(out->s, in->s, in->len);
    if (in->len > 0) memcpy(out->orig, in->orig, in->len * sizeof(int64_t));
    out->len = in->len;
    for (int k = 0; k < count; k++) {
        const tt_norm_step *step = &steps[k];
        scratch->len = 0;
        switch (step->kind) {
        case TT_NORM_PREPEND:
            /* tokenizers prepends to non-empty text only; the prefix starts where the text does */
            if (out->len == 0) continue;
            tt_text_append(scratch, step->content, strlen(step->content), out->orig[0]);
            tt_text_reserve(scratch, scratch->len + out->len);
            memcpy(scratch->s + scratch->len, out->s, out->len);
            memcpy(scratch->orig + scratch->len, out->orig, out->len * sizeof(int64_t));
            scratch->len += out->len;
            break;
        case TT_NORM_REPLACE:
            if (step->regex) replace_regex(step->regex, step->content, out, scratch);
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
