/* File names' suffixes (file_names.h). */
#include "core/file_names.h"

#include <string.h>
#include <strings.h>

bool tt_ends_with(const char *s, const char *suffix) {
    const size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

bool tt_is_parquet_file(const char *name) { return tt_ends_with(name, ".parquet"); }

bool tt_is_records_file(const char *name) {
    if (tt_is_parquet_file(name)) return true;
    size_t n = strlen(name);
    if (tt_ends_with(name, ".gz")) n -= 3; /* data.jsonl.gz, data.json.zst: what is inside */
    else if (tt_ends_with(name, ".zst")) n -= 4;
    static const char *const kinds[] = {".json", ".jsonl", ".ndjson"};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        const size_t k = strlen(kinds[i]);
        if (n >= k && strncasecmp(name + n - k, kinds[i], k) == 0) return true;
    }
    return false;
}
