/* Dataset split slices as Hugging Face datasets reads them (train[:95%], train[10:20], train[-5:]): the parse, the
 * refusals, and the records each takes, with percent bounds rounded to the closest record half to even (Python's
 * round, datasets' default), negative bounds from the end and clamping at the ends. */
#include <stdio.h>
#include <string.h>

#include "config/split_slice.h"
#include "test_util.h"

static void expect_range(const char *text, int64_t records, int64_t begin, int64_t end) {
    tt_split_slice slice;
    char why[256] = "";
    const bool parsed = tt_split_slice_parse(text, &slice, why, sizeof why);
    TT_EXPECT(parsed, "%s parses (%s)", text, why);
    if (!parsed) return;
    int64_t b = -1, e = -1;
    tt_split_slice_range(&slice, records, &b, &e);
    TT_EXPECT(b == begin && e == end, "%s of %lld records: [%lld, %lld), expected [%lld, %lld)", text,
              (long long)records, (long long)b, (long long)e, (long long)begin, (long long)end);
}

static void expect_refused(const char *text, const char *needle) {
    tt_split_slice slice;
    char why[256] = "";
    const bool parsed = tt_split_slice_parse(text, &slice, why, sizeof why);
    TT_EXPECT(!parsed && strstr(why, needle) != NULL, "%s refused with \"%s\" (got \"%s\")", text, needle, why);
}

int main(void) {
    expect_range("train", 10, 0, 10);
    expect_range("train[:]", 10, 0, 10);
    expect_range("train[:95%]", 10, 0, 10); /* round(9.5) = 10: half to even */
    expect_range("train[95%:]", 10, 10, 10);
    expect_range("train[:50%]", 7, 0, 4); /* round(3.5) = 4 */
    expect_range("train[50%:]", 7, 4, 7);
    expect_range("train[:50%]", 5, 0, 2); /* round(2.5) = 2 */
    expect_range("train[:20%]", 1000, 0, 200);
    expect_range("train[10%:20%]", 1000, 100, 200);
    expect_range("train[-10%:]", 1000, 900, 1000);
    expect_range("train[-2:]", 10, 8, 10);
    expect_range("train[:-3]", 10, 0, 7);
    expect_range("train[3:100]", 10, 3, 10);
    expect_range("train[-20:]", 10, 0, 10);
    expect_range("train[5:2]", 10, 5, 5);
    expect_range("train[:1000]", 10, 0, 10);
    tt_split_slice whole;
    char why[256];
    TT_EXPECT(tt_split_slice_parse("train", &whole, why, sizeof why) && tt_split_slice_is_whole(&whole),
              "train is the whole file");
    expect_refused("test", "a local JSON/JSONL file has one split, train");
    expect_refused("validation[:10%]", "one split, train");
    expect_refused("trainer", "one split, train");
    expect_refused("train[1:2", "a slice is [from:to]");
    expect_refused("train[a:]", "a slice is [from:to]");
    expect_refused("train[-:]", "a slice is [from:to]");
    expect_refused("train[1%:5]", "percent and absolute bounds cannot be mixed");
    expect_refused("train[:150%]", "between -100% and 100%");
    expect_refused("train[:5%](pct1_dropremainder)", "rounding options");
    expect_refused("train[:99999999999999999999]", "a slice is [from:to]");
    return tt_test_summary("split_slice");
}
