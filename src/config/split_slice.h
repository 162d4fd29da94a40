/* A dataset entry's split, as Hugging Face datasets writes a slice of one: "train", "train[:95%]", "train[95%:]",
 * "train[10:20]", "train[-100:]". A local file has one split, train; the slice picks a range of its records.
 * Percent bounds round to the closest record (datasets' default rounding, half to even as Python's round), negative
 * bounds count from the end, and bounds past the ends are clamped, as datasets reads them. */
#ifndef TT_CONFIG_SPLIT_SLICE_H
#define TT_CONFIG_SPLIT_SLICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct tt_split_slice {
    bool has_from, has_to; /* a bound left out is the start / the end */
    bool percent;          /* both bounds in percent (datasets refuses a mix) */
    int64_t from, to;      /* as written: records or percent, negative from the end */
} tt_split_slice;

/* Parses text into *slice; false with the reason in why (a sentence) when it is not "train" or a slice of it. */
bool tt_split_slice_parse(const char *text, tt_split_slice *slice, char *why, size_t why_size);

/* The records [*begin, *end) the slice takes of a file of `records` records. */
void tt_split_slice_range(const tt_split_slice *slice, int64_t records, int64_t *begin, int64_t *end);

/* True when the slice takes every record (plain "train", or "train[:]"). */
bool tt_split_slice_is_whole(const tt_split_slice *slice);

#endif
