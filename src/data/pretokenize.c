/* Pre-tokenizers: the Split regex (regex.c), ByteLevel's prefix space and Metaspace, cutting
 * one normalized stretch of text into pre-tokens as tokenizers' PreTokenizedString::split does.
 * ByteLevel's byte -> character mapping happens in bpe.c, on each pre-token's bytes. */
#include <string.h>

#include "core/check.h"
#include "data/tokenizer_internal.h"

static void ranges_push(tt_ranges *r, size_t start, size_t end) {
    if (start >= end) return; /* tokenizers drops empty splits */
    if (r->count == r->cap) {
        r->cap = r->cap ? 2 * r->cap : 256;
        r->items = tt_xrealloc(r->items, tt_mul_size(r->cap, sizeof(tt_range), "pre-tokens"), "pre-tokens");
    }
    r->items[r->count++] = (tt_range){start, end};
}

/* A segment of one range: a delimiter (what the pattern matched, unless inverted) or not. */
typedef struct segment {
    size_t start, end;
    bool delim;
} segment;

/* Applies a split behavior to the segments of one range (tokenizers' SplitDelimiterBehavior). */
static void apply_behavior(tt_split_behavior behavior, segment *seg, size_t n, tt_ranges *out) {
    switch (behavior) {
    case TT_SPLIT_ISOLATED:
        for (size_t i = 0; i < n; i++) ranges_push(out, seg[i].start, seg[i].end);
        break;
    case TT_SPLIT_REMOVED:
        for (size_t i = 0; i < n; i++)
            if (!seg[i].delim) ranges_push(out, seg[i].start, seg[i].end);
        break;
    case TT_SPLIT_MERGED_PREV: {
        size_t first = out->count;
        bool previous_delim = false;
        for (size_t i = 0; i < n; i++) {
            if (seg[i].delim && !previous_delim && out->count > first) out->items[out->count - 1].end = seg[i].end;
            else ranges_push(out, seg[i].start, seg[i].end);
            previous_delim = seg[i].delim;
        }
        break;
    }
    case TT_SPLIT_MERGED_NEXT: {
        /* walk backwards, as tokenizers does: a delimiter joins the piece after it unless that
         * piece is itself a delimiter */
        bool next_delim = false;
        size_t keep = 0; /* segments kept, merged in place from the back */
        for (size_t i = n; i-- > 0;) {
            if (seg[i].delim && !next_delim && keep > 0) seg[n - keep].start = seg[i].start;
            else seg[n - ++keep] = (segment){seg[i].start, seg[i].end, false};
            next_delim = seg[i].delim;
        }
        for (size_t i = n - keep; i < n; i++) ranges_push(out, seg[i].start, seg[i].end);
        break;
    }
    case TT_SPLIT_CONTIGUOUS: {
        size_t first = out->count;
        bool previous_delim = false;
        for (size_t i = 0; i < n; i++) {
            if (seg[i].delim && previous_delim && out->count > first) out->items[out->count - 1].end = seg[i].end;
            else ranges_push(out, seg[i].start, seg[i].end);
            previous_delim = seg[i].delim;
        }
        break;
    }
    }
}

static segment *segments_buffer(tt_encode_state *st, size_t need) {
    if (need > st->segments_cap) {
        st->segments_cap = need * 2;
        st->segments = tt_xrealloc(st->segments, tt_mul_size(st->segments_cap, sizeof(segment), "pre-token segments"),
                                   "pre-token segments");
    }
    return st->segments;
}

static void split_regex(const tt_tokenizer *tok, const tt_pre_step *step, tt_encode_state *st, const tt_text *work,
                        const tt_ranges *in, tt_ranges *out) {
    tt_regex_scan scan; /* the ranges of one step cover the text once: the text earns its budget once */
    tt_regex_scan_begin(&scan, &step->regex, tok->path, &st->matcher, work->len);
    for (size_t r = 0; r < in->count; r++) {
        const char *subject = work->s + in->items[r].start;
        size_t len = in->items[r].end - in->items[r].start, base = in->items[r].start;
        size_t n = 0, pos = 0, gap = 0, ms, me;
        segment *seg = segments_buffer(st, 16);
        while (pos <= len && tt_regex_find(&scan, subject, len, pos, &ms, &me)) {
            if (me == ms) { /* an empty match splits nothing; step over one character */
                if (ms >= len) break;
                pos = ms + (size_t)tt_utf8_char_len((unsigned char)subject[ms]);
                continue;
            }
            seg = segments_buffer(st, n + 2);
            if (ms > gap) seg[n++] = (segment){base + gap, base + ms, step->invert};
            seg[n++] = (segment){base + ms, base + me, !step->invert};
            gap = pos = me;
        }
        seg = segments_buffer(st, n + 1);
        if (gap < len) seg[n++] = (segment){base + gap, base + len, step->invert};
        apply_behavior(step->behavior, seg, n, out);
    }
}

/* ByteLevel's add_prefix_space: a space before every pre-token that does not start with one
 * (work is rewritten; the space takes the pre-token's first offset). */
static void byte_level_prefix(tt_encode_state *st, tt_text *work, const tt_ranges *in, tt_ranges *out) {
    tt_text *next = &st->scratch;
    next->len = 0;
    for (size_t r = 0; r < in->count; r++) {
        size_t s = in->items[r].start, e = in->items[r].end, start = next->len;
        if (work->s[s] != ' ') tt_text_append(next, " ", 1, work->orig[s]);
        tt_text_reserve(next, next->len + (e - s));
        memcpy(next->s + next->len, work->s + s, e - s);
        memcpy(next->orig + next->len, work->orig + s, (e - s) * sizeof(int64_t));
        next->len += e - s;
        ranges_push(out, start, next->len);
    }
    tt_text t = *work;
    *work = *next;
    *next = t;
}

static void metaspace(const tt_pre_step *step, tt_encode_state *st, tt_text *work, const tt_ranges *in,
                      tt_ranges *out) {
    tt_text *next = &st->scratch;
    next->len = 0;
    size_t rlen = strlen(step->replacement);
    for (size_t r = 0; r < in->count; r++) {
        size_t s = in->items[r].start, e = in->items[r].end, start = next->len;
        bool starts_with_replacement = e - s >= rlen && memcmp(work->s + s, step->replacement, rlen) == 0;
        bool prepend = step->prepend == TT_PREPEND_ALWAYS || (step->prepend == TT_PREPEND_FIRST && work->orig[s] == 0);
        /* tokenizers replaces the spaces first, then looks at the first character */
        bool starts_with_space = work->s[s] == ' ';
        if (prepend && !starts_with_replacement && !starts_with_space)
            tt_text_append(next, step->replacement, rlen, work->orig[s]);
        for (size_t i = s; i < e; i++) {
            if (work->s[i] == ' ') tt_text_append(next, step->replacement, rlen, work->orig[i]);
            else tt_text_append(next, work->s + i, 1, work->orig[i]);
        }
        if (!step->split) {
            ranges_push(out, start, next->len);
            continue;
        }
        /* split before every replacement character, each joining the text after it */
        size_t n = 0, gap = start;
        segment *seg = segments_buffer(st, 16);
        for (size_t i = start; i < next->len;) {
            if (next->len - i >= rlen && memcmp(next->s + i, step->replacement, rlen) == 0) {
                seg = segments_buffer(st, n + 2);
                if (i > gap) seg[n++] = (segment){gap, i, false};
                seg[n++] = (segment){i, i + rlen, true};
                i += rlen;
                gap = i;
            } else {
                i++;
            }
        }
        seg = segments_buffer(st, n + 1);
        if (gap < next->len) seg[n++] = (segment){gap, next->len, false};
        apply_behavior(TT_SPLIT_MERGED_NEXT, seg, n, out);
    }
    tt_text t = *work;
    *work = *next;
    *next = t;
}

void tt_pretokenize(const tt_tokenizer *tok, tt_encode_state *st, tt_text *work, tt_ranges *out) {
    tt_ranges *cur = out, *next = &st->ranges2;
    cur->count = 0;
    ranges_push(cur, 0, work->len);
    for (int k = 0; k < tok->pre_count; k++) {
        const tt_pre_step *step = &tok->pre[k];
        next->count = 0;
        switch (step->kind) {
        case TT_PRE_SPLIT: split_regex(tok, step, st, work, cur, next); break;
        case TT_PRE_BYTE_LEVEL_PREFIX: byte_level_prefix(st, work, cur, next); break;
        case TT_PRE_METASPACE: metaspace(step, st, work, cur, next); break;
        }
        tt_ranges t = *cur;
        *cur = *next;
        *next = t;
    }
    if (cur != out) *out = *cur;
}
