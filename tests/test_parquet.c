/* The Parquet reader (src/data/parquet.h) against files two independent writers made (tests/fixtures/parquet/, written
 * by make_fixtures.mjs with npm's hyparquet-writer and @dsnp/parquetjs): Snappy, gzip, Zstandard and uncompressed
 * pages, data pages v1 and v2, dictionary and PLAIN pages, several row groups and pages a chunk, null and empty
 * strings, non-ASCII text, integers, doubles and nullable booleans; every row equals the same row of rows.jsonl. A
 * nested column is left out (its flat neighbour read). Then damaged files: truncations of three fixtures and every
 * byte of their footers changed are clean errors (in a child process each), never a crash. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/check.h"
#include "data/parquet.h"
#include "test_util.h"

static const char *source_dir;

static char *fixture(const char *name) {
    static char path[4096];
    snprintf(path, sizeof path, "%s/tests/fixtures/parquet/%s", source_dir, name);
    return path;
}

/* JSON values equal, a number compared by its value (JSON.stringify writes -1.0 as -1). */
static bool same_value(json_t *a, json_t *b) {
    if (json_is_number(a) && json_is_number(b)) return json_number_value(a) == json_number_value(b);
    return json_equal(a, b);
}

static bool same_row(json_t *got, json_t *want) {
    if (json_object_size(got) != json_object_size(want)) return false;
    const char *key;
    json_t *value;
    json_object_foreach(want, key, value) {
        json_t *other = json_object_get(got, key);
        if (!other || !same_value(other, value)) return false;
    }
    return true;
}

static void test_fixtures(void) {
    const char *files[] = {"hyparquet_snappy.parquet", "hyparquet_dictionary.parquet",   "hyparquet_gzip.parquet",
                           "hyparquet_zstd.parquet",   "hyparquet_uncompressed.parquet", "parquetjs_v1_snappy.parquet",
                           "parquetjs_v2_gzip.parquet"};
    json_t *expected[64];
    int expected_count = 0;
    FILE *f = fopen(fixture("rows.jsonl"), "r");
    TT_CHECK(f != NULL, "rows.jsonl");
    char line[8192];
    while (expected_count < 64 && fgets(line, sizeof line, f)) expected[expected_count++] = json_loads(line, 0, NULL);
    fclose(f);
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        tt_parquet *p = tt_parquet_open(fixture(files[i]));
        int rows = 0, same = 0;
        char first_bad[512] = "";
        for (json_t *row; (row = tt_parquet_next(p)) != NULL; rows++) {
            bool ok = rows < expected_count && same_row(row, expected[rows]);
            same += ok;
            if (!ok && !first_bad[0]) {
                char *text = json_dumps(row, JSON_COMPACT | JSON_SORT_KEYS);
                snprintf(first_bad, sizeof first_bad, "row %d: %.400s", rows + 1, text);
                free(text);
            }
            json_decref(row);
        }
        TT_EXPECT(rows == expected_count && same == rows, "%s: %d of %d rows as rows.jsonl has them (%d read) %s",
                  files[i], same, expected_count, rows, first_bad);
        tt_parquet_close(p);
    }
    for (int i = 0; i < expected_count; i++) json_decref(expected[i]);

    /* lists: the older two levels (a repeated group, parquetjs), and the standard three (hyparquet-writer) of structs
     * and of strings with empty and null lists, null entries and fields; a struct column left out */
    tt_parquet *p = tt_parquet_open(fixture("nested_messages.parquet"));
    json_t *row = tt_parquet_next(p);
    json_t *want = json_loads("{\"text\": \"one\", \"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}, "
                              "{\"role\": \"assistant\", \"content\": \"Hello\"}]}",
                              0, NULL);
    TT_EXPECT(row && json_equal(row, want), "a repeated group reads as a list of objects");
    json_decref(row);
    json_decref(want);
    row = tt_parquet_next(p);
    want = json_loads("{\"text\": \"two\", \"messages\": []}", 0, NULL);
    TT_EXPECT(row && json_equal(row, want) && !tt_parquet_next(p), "... an empty one as [], then the end");
    json_decref(row);
    json_decref(want);
    tt_parquet_close(p);

    f = fopen(fixture("list_rows.jsonl"), "r");
    TT_CHECK(f != NULL, "list_rows.jsonl");
    p = tt_parquet_open(fixture("list_columns.parquet"));
    int rows = 0, same = 0;
    while (fgets(line, sizeof line, f)) {
        want = json_loads(line, 0, NULL);
        row = tt_parquet_next(p);
        same += row && json_equal(row, want);
        if (row && !json_equal(row, want)) {
            char *text = json_dumps(row, JSON_COMPACT);
            fprintf(stderr, "list row %d: %s\n", rows + 1, text);
            free(text);
        }
        rows++;
        json_decref(row);
        json_decref(want);
    }
    fclose(f);
    TT_EXPECT(rows == 4 && same == rows && !tt_parquet_next(p),
              "three-level lists of structs and of strings: %d of %d rows as list_rows.jsonl has them", same, rows);
    tt_parquet_close(p);
}

/* Reads every row of path in a child; its exit status (0: read, 1: tt_die, else a crash). */
static int read_in_child(const char *path) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        if (!freopen("/dev/null", "w", stderr)) _exit(3);
        tt_parquet *p = tt_parquet_open(path);
        for (json_t *row; (row = tt_parquet_next(p)) != NULL;) json_decref(row);
        tt_parquet_close(p);
        _exit(0);
    }
    int status;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static void test_damaged(const char *name, size_t step, int changes) {
    FILE *f = fopen(fixture(name), "rb");
    static unsigned char bytes[1 << 16];
    size_t size = fread(bytes, 1, sizeof bytes, f);
    fclose(f);
    char *path = tt_test_path("damaged.parquet");
    int crashes = 0, read_whole = 0, cases = 0;
    char first_crash[128] = "";
    /* every truncation (a step of 7 bytes), then every byte flipped from the footer's start to the end */
    const uint32_t footer = (uint32_t)bytes[size - 8] | (uint32_t)bytes[size - 7] << 8 |
                            (uint32_t)bytes[size - 6] << 16 | (uint32_t)bytes[size - 5] << 24;
    for (size_t cut = 0; cut < size; cut += step) {
        tt_test_write_bytes("damaged.parquet", bytes, cut);
        int status = read_in_child(path);
        cases++;
        if (status > 1 && !first_crash[0])
            snprintf(first_crash, sizeof first_crash, "cut at %zu: exit %d", cut, status);
        crashes += status > 1;
        read_whole += status == 0;
    }
    for (size_t at = size - 8 - footer; at < size; at++) {
        for (int flip = 2 - changes; flip < 2; flip++) {
            unsigned char saved = bytes[at];
            bytes[at] = flip ? (unsigned char)(saved ^ 0xff) : (unsigned char)(saved + 1);
            tt_test_write_bytes("damaged.parquet", bytes, size);
            int status = read_in_child(path);
            bytes[at] = saved;
            cases++;
            if (status > 1 && !first_crash[0])
                snprintf(first_crash, sizeof first_crash, "byte %zu changed: exit %d", at, status);
            crashes += status > 1;
        }
    }
    TT_EXPECT(crashes == 0 && read_whole == 0, "%s: %d damaged files: %d crashes (%s), %d truncations read whole", name,
              cases, crashes, first_crash, read_whole);
    free(path);
}

int main(int argc, char **argv) {
    source_dir = argc > 1 ? argv[1] : getenv("TT_SOURCE_DIR");
    if (!source_dir) source_dir = ".";
    tt_test_scratch_open("parquet");
    test_fixtures();
    test_damaged("hyparquet_snappy.parquet", 7, 2);
    test_damaged("hyparquet_dictionary.parquet", 17, 1);
    test_damaged("parquetjs_v2_gzip.parquet", 41, 1);
    tt_test_scratch_close();
    return tt_test_summary("parquet");
}
