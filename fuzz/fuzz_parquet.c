/* Fuzzes the Parquet reader (src/data/parquet.h): the footer's Thrift (schema, row groups, column chunks), then every
 * row: page headers, decompression (Snappy, gzip, Zstandard), definition levels, PLAIN, dictionary and run-length
 * values, UTF-8 of the text. Input: a whole .parquet file (seeds: tests/fixtures/parquet's, both writers). A reader
 * that dies frees itself first, so leaks are findings. */
#include "data/parquet.h"
#include "fuzz_common.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    fuzz_setup();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_input_path(data, size);
    FUZZ_TRY {
        tt_parquet *p = tt_parquet_open(path);
        for (json_t *row; (row = tt_parquet_next(p)) != NULL;) json_decref(row);
        tt_parquet_close(p);
    }
    FUZZ_CATCH {} /* (a dying reader has freed itself) */
    fuzz_json_release_all();
    return 0;
}
