/* Bounded work on large or hostile input (issue 19, item 3): each reader is linear in its input,
 * measured on large generated files against a stated time (loose enough for the sanitizer build
 * on two busy cores; the plain build takes a fraction of it), and nesting that would make a
 * parser quadratic is refused before it runs. The safetensors tensor-count limit and its timing
 * are in test_safetensors.c; the CLI refusals of absurd sizes in test_bad_input.sh. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "config/run_config.h"
#include "data/json_records.h"
#include "data/token_file.h"
#include "test_util.h"
#include "train/data.h"

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void remove_scratch_file(const char *name) {
    char *p = tt_test_path(name);
    unlink(p);
    free(p);
}

/* ---- JSON datasets: 50 MB as JSON lines and as one JSON array ---- */

enum { RECORD_COUNT = 500000 }; /* ~100 bytes each: 50 MB */

static void write_records(const char *name, bool array) {
    char *p = tt_test_path(name);
    FILE *f = fopen(p, "wb");
    if (!f) {
        perror(p);
        exit(2);
    }
    if (array) fputs("[\n", f);
    for (int i = 0; i < RECORD_COUNT; i++)
        fprintf(
            f,
            "%s{\"text\": \"record %07d: the quick brown fox jumps over the lazy dog, caf\\u00e9 \\u65e5\\u672c\", \"n\": %d}\n",
            array && i > 0 ? "," : "", i, i);
    if (array) fputs("]\n", f);
    fclose(f);
    free(p);
}

static void read_records(const char *name, bool array) {
    write_records(name, array);
    char *p = tt_test_path(name);
    double t0 = now_seconds();
    tt_json_records *r = tt_json_records_open(p);
    int64_t count = 0, sum = 0;
    json_t *record;
    while ((record = tt_json_records_next(r)) != NULL) {
        sum += json_integer_value(json_object_get(record, "n"));
        count++;
        json_decref(record);
    }
    tt_json_records_close(r);
    double seconds = now_seconds() - t0;
    TT_EXPECT(count == RECORD_COUNT && sum == (int64_t)RECORD_COUNT * (RECORD_COUNT - 1) / 2, "%s: %lld records", name,
              (long long)count);
    TT_EXPECT(seconds < 60.0, "50 MB of %s read in %.2f s (bound 60 s)", array ? "JSON array" : "JSON lines", seconds);
    printf("limits: 50 MB of %s: %d records in %.2f s\n", array ? "JSON array" : "JSON lines", RECORD_COUNT, seconds);
    free(p);
    remove_scratch_file(name);
}

/* ---- token files: 64 MiB of zero ids ---- */

static void test_large_token_file(void) {
    const uint64_t count = (uint64_t)16 << 20; /* 64 MiB of ids */
    char *p = tt_test_path("zeros.tok");
    FILE *f = fopen(p, "wb");
    unsigned char header[TT_TOKEN_FILE_HEADER_BYTES] = {0};
    memcpy(header, TT_TOKEN_FILE_MAGIC, 8);
    const uint32_t version = TT_TOKEN_FILE_VERSION, vocab = 257, eos = TT_TOKEN_NO_EOS;
    memcpy(header + 8, &version, 4); /* little-endian hosts, as the writer */
    memcpy(header + 12, &vocab, 4);
    memcpy(header + 16, &count, 8);
    memcpy(header + 24, &eos, 4);
    fwrite(header, 1, sizeof header, f);
    static uint32_t zeros[1 << 16];
    for (uint64_t done = 0; done < count; done += 1 << 16) fwrite(zeros, sizeof zeros, 1, f);
    fclose(f);
    double t0 = now_seconds();
    tt_dataset ds;
    char *paths[1] = {p};
    tt_dataset_open(&ds, paths, 1, 257, 16, 0.01, 3);
    double seconds = now_seconds() - t0;
    TT_EXPECT(ds.sequence_count == (int64_t)((count - 1) / 16) && ds.eval_count == ds.sequence_count / 100,
              "%lld sequences, %lld eval", (long long)ds.sequence_count, (long long)ds.eval_count);
    /* the split in ascending order, disjoint and complete */
    bool ascending = true;
    for (int64_t i = 1; i < ds.train_count && ascending; i++)
        ascending = ds.train_order_base[i] > ds.train_order_base[i - 1];
    for (int64_t i = 1; i < ds.eval_count && ascending; i++)
        ascending = ds.eval_sequences[i] > ds.eval_sequences[i - 1];
    TT_EXPECT(ascending && ds.train_count + ds.eval_count == ds.sequence_count, "the split is two ascending lists");
    TT_EXPECT(seconds < 60.0, "a 64 MiB token file of zero ids opened in %.2f s (bound 60 s)", seconds);
    printf("limits: 64 MiB token file (%llu ids, %lld sequences) opened in %.2f s\n", (unsigned long long)count,
           (long long)ds.sequence_count, seconds);
    tt_dataset_close(&ds);
    free(p);
    remove_scratch_file("zeros.tok");
}

/* ---- the run YAML: nesting ---- */

static void load_config(void *name) {
    char *p = tt_test_path(name);
    tt_run_config c;
    tt_run_config_defaults(&c);
    tt_run_config_load(&c, p, 0, NULL);
}

static void load_override(void *text) {
    tt_run_config c;
    tt_run_config_defaults(&c);
    char *overrides[1] = {text};
    tt_run_config_load(&c, NULL, 1, overrides);
}

static void test_yaml_nesting(void) {
    const int depth = 100000;
    char *text = malloc(2 * (size_t)depth + 64), *at = text;
    at += sprintf(at, "seed: 1\nlora_target_modules: ");
    memset(at, '[', (size_t)depth);
    memset(at + depth, ']', (size_t)depth);
    strcpy(at + 2 * depth, "\n");
    tt_test_write_text("deep_flow.yaml", text);
    double t0 = now_seconds();
    tt_expect_die(load_config, "deep_flow.yaml", "deep_flow.yaml:2: lists and mappings nested more than 64 deep");
    double seconds = now_seconds() - t0;
    TT_EXPECT(seconds < 5.0, "a flow list nested %d deep refused in %.2f s (bound 5 s)", depth, seconds);
    /* block nesting: each level one more space of indentation */
    char *block_path = tt_test_path("deep_block.yaml");
    FILE *f = fopen(block_path, "w");
    free(block_path);
    fputs("datasets:\n", f);
    for (int i = 1; i <= 100; i++) fprintf(f, "%*s- \n", i, "");
    fclose(f);
    tt_expect_die(load_config, "deep_block.yaml", "deep_block.yaml:65: lists and mappings nested more than 64 deep");
    tt_expect_die(load_override,
                  "datasets=[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]",
                  "command-line override 'datasets=[[[[");
    /* 64 levels, the top-level mapping included, are not refused for their depth (the key then
     * says what it takes) */
    at = text + sprintf(text, "seed: 1\nlora_target_modules: ");
    memset(at, '[', 63);
    memset(at + 63, ']', 63);
    strcpy(at + 126, "\n");
    tt_test_write_text("flow64.yaml", text);
    tt_expect_die(load_config, "flow64.yaml", "lora_target_modules");
    free(text);
}

int main(int argc, char **argv) {
    (void)argc;
    (void)argv;
    tt_test_scratch_open("limits");
    read_records("large.jsonl", false);
    read_records("large.json", true);
    test_large_token_file();
    test_yaml_nesting();
    return tt_test_summary("limits");
}
