/* Hugging Face datasets' split slices of a local file's one split (split_slice.h). */
#include "config/split_slice.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One bound: an optional '-', digits, an optional '%'. *p moves past it; false when it is malformed. */
static bool parse_bound(const char **p, int64_t *value, bool *percent, bool *present) {
    const char *s = *p;
    *present = false;
    *percent = false;
    if (*s != '-' && !isdigit((unsigned char)*s)) return true; /* left out */
    char *end = NULL;
    errno = 0;
    const long long v = strtoll(s, &end, 10);
    if (end == s || (s[0] == '-' && end == s + 1) || errno == ERANGE) return false;
    *value = v;
    *present = true;
    if (*end == '%') {
        *percent = true;
        end++;
    }
    *p = end;
    return true;
}

bool tt_split_slice_parse(const char *text, tt_split_slice *slice, char *why, size_t why_size) {
    *slice = (tt_split_slice){0};
    if (strncmp(text, "train", 5) != 0 || (text[5] != 0 && text[5] != '[')) {
        snprintf(why, why_size, "a local JSON/JSONL file has one split, train (or a slice of it such as train[:95%%])");
        return false;
    }
    if (text[5] == 0) return true;
    const char *p = text + 6;
    bool from_percent = false, to_percent = false;
    if (!parse_bound(&p, &slice->from, &from_percent, &slice->has_from) || *p != ':') {
        snprintf(why, why_size,
                 "a slice is [from:to] with whole numbers of records or percent, e.g. train[:95%%], "
                 "train[95%%:], train[10:200]");
        return false;
    }
    p++;
    if (!parse_bound(&p, &slice->to, &to_percent, &slice->has_to) || strcmp(p, "]") != 0) {
        snprintf(why, why_size,
                 "a slice is [from:to] with whole numbers of records or percent, e.g. train[:95%%], "
                 "train[95%%:], train[10:200]; rounding options such as (pct1_dropremainder) are not "
                 "supported");
        return false;
    }
    if (slice->has_from && slice->has_to && from_percent != to_percent) {
        snprintf(why, why_size, "percent and absolute bounds cannot be mixed in one slice (as in datasets)");
        return false;
    }
    slice->percent = from_percent || to_percent;
    if (slice->percent &&
        ((slice->has_from && llabs(slice->from) > 100) || (slice->has_to && llabs(slice->to) > 100))) {
        snprintf(why, why_size, "percent bounds are between -100%% and 100%%");
        return false;
    }
    return true;
}

/* datasets' "closest" rounding: round(boundary x records / 100), Python's round (half to even). */
static int64_t percent_of(int64_t boundary, int64_t records) {
    return (int64_t)nearbyint((double)boundary * (double)records / 100.0);
}

void tt_split_slice_range(const tt_split_slice *slice, int64_t records, int64_t *begin, int64_t *end) {
    int64_t from = 0, to = records;
    if (slice->has_from) from = slice->percent ? percent_of(slice->from, records) : slice->from;
    if (slice->has_to) to = slice->percent ? percent_of(slice->to, records) : slice->to;
    if (from < 0) from = records + from > 0 ? records + from : 0;
    if (to < 0) to = records + to > 0 ? records + to : 0;
    *begin = from < records ? from : records;
    *end = to < records ? to : records;
    if (*end < *begin) *end = *begin;
}

bool tt_split_slice_is_whole(const tt_split_slice *slice) { return !slice->has_from && !slice->has_to; }
