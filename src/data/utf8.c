/* UTF-8: decoding, encoding, and reading invalid input the way Python's
 * bytes.decode('utf-8', errors='replace') does, since that is how a Python user hands such
 * bytes to tokenizers: each maximal subpart of an ill-formed sequence (the longest prefix of a
 * valid sequence, or one byte) becomes one U+FFFD (Unicode's "substitution of maximal subparts"). */
#include <string.h>

#include "data/tokenizer_internal.h"

int32_t tt_utf8_decode(const char *s, int *len) {
    const unsigned char *p = (const unsigned char *)s;
    if (p[0] < 0x80) {
        *len = 1;
        return p[0];
    }
    if (p[0] < 0xE0) {
        *len = 2;
        return (int32_t)(p[0] & 0x1F) << 6 | (p[1] & 0x3F);
    }
    if (p[0] < 0xF0) {
        *len = 3;
        return (int32_t)(p[0] & 0x0F) << 12 | (int32_t)(p[1] & 0x3F) << 6 | (p[2] & 0x3F);
    }
    *len = 4;
    return (int32_t)(p[0] & 0x07) << 18 | (int32_t)(p[1] & 0x3F) << 12 | (int32_t)(p[2] & 0x3F) << 6 | (p[3] & 0x3F);
}

int tt_utf8_encode(int32_t cp, char *out) {
    unsigned char *o = (unsigned char *)out;
    if (cp < 0x80) {
        o[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xC0 | cp >> 6);
        o[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | cp >> 12);
        o[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | cp >> 18);
    o[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3F));
    o[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
    o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

/* How many bytes of a well-formed sequence start at p[0..avail) (0: p[0] starts none), after
 * Unicode's table 3-7: the second byte's range depends on the lead (no overlongs, no
 * surrogates, nothing above U+10FFFF). *valid gets the length of the valid prefix when the
 * sequence is cut short or broken. */
static int well_formed_length(const unsigned char *p, size_t avail, int *valid) {
    unsigned char c = p[0];
    int need;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) need = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        need = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else {
        *valid = 1; /* C0, C1, F5-FF, a lone continuation byte: one replacement each */
        return 0;
    }
    int got = 1;
    for (; got < need; got++) {
        if ((size_t)got >= avail) break;
        unsigned char b = p[got];
        unsigned char l = got == 1 ? lo : 0x80, h = got == 1 ? hi : 0xBF;
        if (b < l || b > h) break;
    }
    if (got == need) return need;
    *valid = got;
    return 0;
}

void tt_utf8_sanitize(const char *text, size_t len, tt_text *out) {
    static const char replacement[3] = {(char)0xEF, (char)0xBF, (char)0xBD};
    out->len = 0;
    tt_text_reserve(out, len + 16);
    const unsigned char *p = (const unsigned char *)text;
    size_t i = 0;
    while (i < len) {
        /* ASCII runs: the common case, copied with each byte its own origin */
        if (p[i] < 0x80) {
            tt_text_reserve(out, out->len + 1);
            out->s[out->len] = (char)p[i];
            out->orig[out->len++] = (int64_t)i;
            i++;
            continue;
        }
        int valid = 1;
        int n = well_formed_length(p + i, len - i, &valid);
        if (n > 0) {
            tt_text_append(out, text + i, (size_t)n, (int64_t)i);
            i += (size_t)n;
        } else {
            tt_text_append(out, replacement, 3, (int64_t)i);
            i += (size_t)valid;
        }
    }
    out->s[out->len] = 0;
}
