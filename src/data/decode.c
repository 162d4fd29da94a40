/* ids -> text: tokenizers' Tokenizer::decode. Each id becomes its token string, then the
 * decoder steps rewrite the list of strings in order (ByteLevel maps the GPT-2 alphabet back to
 * bytes; ByteFallback turns runs of <0xNN> into their bytes; Replace, Strip, Fuse, Metaspace as
 * named), and the concatenation is read as UTF-8 with invalid bytes as U+FFFD. Not a hot path:
 * plain allocations. */
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "data/tokenizer_internal.h"

typedef struct piece {
    char *s;
    size_t len;
} piece;

typedef struct pieces {
    piece *items;
    size_t count, cap;
} pieces;

static void pieces_push(pieces *p, const char *s, size_t len) {
    if (p->count == p->cap) {
        p->cap = p->cap ? 2 * p->cap : 64;
        p->items = tt_xrealloc(p->items, tt_mul_size(p->cap, sizeof(piece), "decode"), "decode");
    }
    char *copy = tt_xmalloc(len + 1, "decode");
    if (len) memcpy(copy, s, len);
    copy[len] = 0;
    p->items[p->count++] = (piece){copy, len};
}

static void pieces_free(pieces *p) {
    for (size_t i = 0; i < p->count; i++) free(p->items[i].s);
    free(p->items);
    memset(p, 0, sizeof *p);
}

/* A growing byte buffer. */
typedef struct bytes {
    char *s;
    size_t len, cap;
} bytes;
static void bytes_add(bytes *b, const char *s, size_t len) {
    if (b->len + len + 1 > b->cap) {
        b->cap = 2 * (b->len + len + 1);
        b->s = tt_xrealloc(b->s, b->cap, "decode");
    }
    if (len) memcpy(b->s + b->len, s, len);
    b->len += len;
    b->s[b->len] = 0;
}

static bool is_valid_utf8(const char *s, size_t len) {
    tt_text t = {0};
    tt_utf8_sanitize(s, len, &t);
    bool same = t.len == len && memcmp(t.s, s, len) == 0;
    tt_text_free(&t);
    return same;
}

static bool printable_byte(int b) { return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255); }

/* The byte a character of GPT-2's byte alphabet stands for; -1 if it is not in the alphabet. */
static int byte_of_char(int32_t cp) {
    if (cp < 256) return printable_byte(cp) ? cp : -1;
    int n = cp - 256;
    for (int b = 0; b < 256; b++)
        if (!printable_byte(b) && n-- == 0) return b;
    return -1;
}

static void byte_level(pieces *p) {
    bytes all = {0};
    for (size_t i = 0; i < p->count; i++) {
        /* a token whose characters are all in the byte alphabet is those bytes; any other (an
         * added token such as <|im_end|>) is its own text */
        bytes mapped = {0};
        bool all_mapped = true;
        for (size_t k = 0; k < p->items[i].len && all_mapped;) {
            int len;
            int b = byte_of_char(tt_utf8_decode(p->items[i].s + k, &len));
            if (b < 0) all_mapped = false;
            else {
                char byte = (char)b;
                bytes_add(&mapped, &byte, 1);
            }
            k += (size_t)len;
        }
        if (all_mapped) bytes_add(&all, mapped.s ? mapped.s : "", mapped.len);
        else bytes_add(&all, p->items[i].s, p->items[i].len);
        free(mapped.s);
    }
    pieces_free(p);
    pieces_push(p, all.s ? all.s : "", all.len);
    free(all.s);
}

static int byte_token(const piece *t) {
    if (t->len != 6 || memcmp(t->s, "<0x", 3) != 0 || t->s[5] != '>') return -1;
    char hex[3] = {t->s[3], t->s[4], 0};
    char *end;
    long v = strtol(hex, &end, 16);
    return *end == 0 ? (int)v : -1;
}

static void byte_fallback(pieces *p) {
    pieces out = {0};
    bytes run = {0};
    size_t run_tokens = 0;
    for (size_t i = 0; i <= p->count; i++) {
        int b = i < p->count ? byte_token(&p->items[i]) : -1;
        if (b >= 0) {
            char byte = (char)b;
            bytes_add(&run, &byte, 1);
            run_tokens++;
            continue;
        }
        if (run_tokens > 0) { /* valid UTF-8: one string; else one U+FFFD per byte token */
            if (is_valid_utf8(run.s, run.len)) pieces_push(&out, run.s, run.len);
            else
                for (size_t k = 0; k < run_tokens; k++) pieces_push(&out, "\xef\xbf\xbd", 3);
            run.len = 0;
            run_tokens = 0;
        }
        if (i < p->count) pieces_push(&out, p->items[i].s, p->items[i].len);
    }
    free(run.s);
    pieces_free(p);
    *p = out;
}

static void replace(pieces *p, const char *pattern, const char *content) {
    size_t plen = strlen(pattern), clen = strlen(content);
    for (size_t i = 0; i < p->count; i++) {
        bytes b = {0};
        const char *s = p->items[i].s, *end = s + p->items[i].len;
        while (s < end) {
            const char *hit = memmem(s, (size_t)(end - s), pattern, plen);
            size_t stop = hit ? (size_t)(hit - s) : (size_t)(end - s);
            bytes_add(&b, s, stop);
            if (!hit) break;
            bytes_add(&b, content, clen);
            s = hit + plen;
        }
        free(p->items[i].s);
        p->items[i] = (piece){b.s ? b.s : tt_xstrdup(""), b.len};
    }
}

static void fuse(pieces *p) {
    bytes all = {0};
    for (size_t i = 0; i < p->count; i++) bytes_add(&all, p->items[i].s, p->items[i].len);
    pieces_free(p);
    pieces_push(p, all.s ? all.s : "", all.len);
    free(all.s);
}

static void strip(pieces *p, const char *content, int start, int stop) {
    size_t clen = strlen(content);
    for (size_t i = 0; i < p->count; i++) {
        piece *t = &p->items[i];
        size_t from = 0, to = t->len;
        for (int k = 0; k < start && to - from >= clen && clen && memcmp(t->s + from, content, clen) == 0; k++)
            from += clen;
        for (int k = 0; k < stop && to - from >= clen && clen && memcmp(t->s + to - clen, content, clen) == 0; k++)
            to -= clen;
        memmove(t->s, t->s + from, to - from);
        t->len = to - from;
        t->s[t->len] = 0;
    }
}

/* The replacement becomes a space, except in the first token when a prefix was prepended. */
static void metaspace(pieces *p, const char *replacement, bool prepend) {
    for (size_t i = 0; i < p->count; i++) {
        const char *content = i == 0 && prepend ? "" : " ";
        pieces one = {&p->items[i], 1, 1};
        replace(&one, replacement, content);
    }
}

char *tt_tokenizer_decode(const tt_tokenizer *tok, const int32_t *ids, int64_t count, bool skip_special, size_t *len) {
    if (tok->dec_error) tt_die("tokenizer: cannot decode: %s", tok->dec_error);
    pieces p = {0};
    for (int64_t i = 0; i < count; i++) {
        const char *t = tt_tokenizer_id_to_token(tok, ids[i]);
        if (!t) tt_die("tokenizer: cannot decode id %d: %s has no token with that id", ids[i], tok->path);
        if (skip_special && tok->is_special[ids[i]]) continue;
        pieces_push(&p, t, strlen(t));
    }
    for (int k = 0; k < tok->dec_count; k++) {
        const tt_dec_step *d = &tok->dec[k];
        switch (d->kind) {
        case TT_DEC_BYTE_LEVEL: byte_level(&p); break;
        case TT_DEC_BYTE_FALLBACK: byte_fallback(&p); break;
        case TT_DEC_REPLACE: replace(&p, d->pattern, d->content); break;
        case TT_DEC_FUSE: fuse(&p); break;
        case TT_DEC_STRIP: strip(&p, d->content, d->start, d->stop); break;
        case TT_DEC_METASPACE: metaspace(&p, d->content, d->prepend); break;
        }
    }
    bytes all = {0};
    for (size_t i = 0; i < p.count; i++) bytes_add(&all, p.items[i].s, p.items[i].len);
    bytes_add(&all, "", 0);
    pieces_free(&p);
    tt_text clean = {0};
    tt_utf8_sanitize(all.s, all.len, &clean);
    free(all.s);
    char *out = tt_xmalloc(clean.len + 1, "decoded text");
    memcpy(out, clean.s, clean.len);
    out[clean.len] = 0;
    if (len) *len = clean.len;
    tt_text_free(&clean);
    return out;
}
