/* JSON datasets for fine-tuning: the JSONL / JSON readers, each type's ids and label masks (worked
 * out by hand with tests/fixtures/data/bytes_tokenizer, where a token's id is its byte, <|endoftext|>
 * 256 is eos, <s> 257 the BOS its post-processor adds, <pad> 258), token file version 2 and the
 * padded one-document batches, bad data (every message), and prepared files: hash, reuse,
 * drop / truncate, and the same bytes from 1 and 2 threads. */
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/python_format.h"
#include "config/run_config.h"
#include "data/json_records.h"
#include "data/sft_examples.h"
#include "data/tokenizer.h"
#include "test_util.h"
#include "train/data.h"
#include "train/prepare.h"

static const char *source_dir;
static char tokenizer_dir[4096];
static const tt_sft_ids special = {.bos = 257, .eos = 256};

static char *write_text(const char *name, const char *text) {
    char *p = tt_test_path(name);
    FILE *f = fopen(p, "wb");
    fwrite(text, 1, strlen(text), f);
    fclose(f);
    return p;
}

/* The ids and labels of the first record of `text` as a dataset of `type`. */
typedef struct encoded {
    int32_t ids[1024];
    uint8_t labels[1024];
    int64_t count;
} encoded;

static void encode_record(const tt_tokenizer *tok, tt_dataset_type type, bool train_on_inputs, const char *json,
                          encoded *out) {
    tt_dataset_spec spec = {.type = type,
                            .field = "text",
                            .field_instruction = "instruction",
                            .field_input = "input",
                            .field_output = "output"};
    json_error_t error;
    json_t *record = json_loads(json, 0, &error);
    TT_CHECK(record != NULL, "test record %s", json);
    tt_sft_example ex;
    tt_sft_record_segments(&spec, train_on_inputs, record, "test:1", &ex);
    json_decref(record);
    tt_token_ids ids = {0};
    uint8_t *labels = NULL;
    int64_t capacity = 0;
    tt_sft_tokenize_example(tok, &special, &ex, 0, &ids, &labels, &capacity);
    out->count = ids.count;
    for (int64_t i = 0; i < ids.count && i < 1024; i++) {
        out->ids[i] = ids.ids[i];
        out->labels[i] = labels[i];
    }
    tt_token_ids_free(&ids);
    free(labels);
    tt_sft_example_free(&ex);
}

/* Expected ids: bytes of text appended to ids[at..], with label; returns the new end. */
static int64_t put_text(int32_t *ids, uint8_t *labels, int64_t at, const char *text, uint8_t label) {
    for (const unsigned char *p = (const unsigned char *)text; *p; p++) {
        ids[at] = *p;
        labels[at++] = label;
    }
    return at;
}

static bool same_encoding(const encoded *got, const int32_t *ids, const uint8_t *labels, int64_t n) {
    if (got->count != n) {
        fprintf(stderr, "  count %lld, expected %lld\n", (long long)got->count, (long long)n);
        return false;
    }
    for (int64_t i = 0; i < n; i++)
        if (got->ids[i] != ids[i] || got->labels[i] != labels[i]) {
            fprintf(stderr, "  at %lld: id %d label %d, expected id %d label %d\n", (long long)i, got->ids[i],
                    got->labels[i], ids[i], labels[i]);
            return false;
        }
    return true;
}

static const char alpaca_system[] = "Below is an instruction that describes a task, paired with an input that provides "
                                    "further context. Write a response that appropriately completes the request.\n\n";
static const char alpaca_no_input[] =
    "Below is an instruction that describes a task. Write a response that appropriately completes the request.\n\n";

static void test_types(const tt_tokenizer *tok) {
    encoded got;
    int32_t ids[1024];
    uint8_t labels[1024];
    int64_t n;

    /* completion: BOS from the post-processor, the text's bytes, EOS; everything trains */
    encode_record(tok, TT_DATASET_COMPLETION, false, "{\"text\": \"hi\"}", &got);
    TT_EXPECT(same_encoding(&got, (int32_t[]){257, 104, 105, 256}, (uint8_t[]){1, 1, 1, 1}, 4), "completion");
    /* an EOS the text ends with already is not doubled (axolotl checks the last id) */
    encode_record(tok, TT_DATASET_COMPLETION, false, "{\"text\": \"hi<|endoftext|>\"}", &got);
    TT_EXPECT(same_encoding(&got, (int32_t[]){257, 104, 105, 256}, (uint8_t[]){1, 1, 1, 1}, 4),
              "completion ending in eos");
    /* non-ASCII: the UTF-8 bytes (é is c3 a9) */
    encode_record(tok, TT_DATASET_COMPLETION, false, "{\"text\": \"\\u00e9\"}", &got);
    TT_EXPECT(same_encoding(&got, (int32_t[]){257, 0xc3, 0xa9, 256}, (uint8_t[]){1, 1, 1, 1}, 4), "completion UTF-8");

    /* alpaca with an input: [BOS] prompt masked, then the output tokenized alone (its BOS stripped), EOS */
    encode_record(tok, TT_DATASET_ALPACA, false, "{\"instruction\": \"Do\", \"input\": \"x\", \"output\": \"ok\"}",
                  &got);
    ids[0] = 257;
    labels[0] = 0;
    n = put_text(ids, labels, 1, alpaca_system, 0);
    n = put_text(ids, labels, n, "### Instruction:\nDo\n\n### Input:\nx\n\n### Response:\n", 0);
    n = put_text(ids, labels, n, "ok", 1);
    ids[n] = 256;
    labels[n++] = 1;
    TT_EXPECT(same_encoding(&got, ids, labels, n), "alpaca with input: prompt masked");
    /* train_on_inputs: the same ids, every label 1 */
    encode_record(tok, TT_DATASET_ALPACA, true, "{\"instruction\": \"Do\", \"input\": \"x\", \"output\": \"ok\"}",
                  &got);
    memset(labels, 1, (size_t)n);
    TT_EXPECT(same_encoding(&got, ids, labels, n), "alpaca train_on_inputs");
    /* no input field, and an empty one: the no-input prompt */
    const char *no_input[] = {"{\"instruction\": \"Do\", \"output\": \"ok\"}",
                              "{\"instruction\": \"Do\", \"input\": \"\", \"output\": \"ok\"}"};
    ids[0] = 257;
    labels[0] = 0;
    n = put_text(ids, labels, 1, alpaca_no_input, 0);
    n = put_text(ids, labels, n, "### Instruction:\nDo\n\n### Response:\n", 0);
    n = put_text(ids, labels, n, "ok", 1);
    ids[n] = 256;
    labels[n++] = 1;
    for (int i = 0; i < 2; i++) {
        encode_record(tok, TT_DATASET_ALPACA, false, no_input[i], &got);
        TT_EXPECT(same_encoding(&got, ids, labels, n), "alpaca without input (%d)", i);
    }

    /* input_output: no special tokens; label false masked unless train_on_inputs */
    const char *io = "{\"segments\": [{\"text\": \"ab\", \"label\": false}, {\"text\": \"c\", \"label\": true}, "
                     "{\"text\": \"d\", \"label\": false}]}";
    encode_record(tok, TT_DATASET_INPUT_OUTPUT, false, io, &got);
    TT_EXPECT(same_encoding(&got, (int32_t[]){97, 98, 99, 100}, (uint8_t[]){0, 0, 1, 0}, 4), "input_output");
    encode_record(tok, TT_DATASET_INPUT_OUTPUT, true, io, &got);
    TT_EXPECT(same_encoding(&got, (int32_t[]){97, 98, 99, 100}, (uint8_t[]){1, 1, 1, 1}, 4),
              "input_output train_on_inputs");
    /* special tokens written in the text are tokens (HF's added tokens) */
    encode_record(
        tok, TT_DATASET_INPUT_OUTPUT, false,
        "{\"segments\": [{\"text\": \"<s>a\", \"label\": false}, {\"text\": \"b<|endoftext|>\", \"label\": true}]}",
        &got);
    TT_EXPECT(same_encoding(&got, (int32_t[]){257, 97, 98, 256}, (uint8_t[]){0, 0, 1, 1}, 4), "input_output specials");
}

/* ---- readers ---- */

static int count_records(const char *path, char *last_where, size_t size) {
    tt_json_records *r = tt_json_records_open(path);
    int n = 0;
    json_t *v;
    while ((v = tt_json_records_next(r)) != NULL) {
        n++;
        snprintf(last_where, size, "%s", tt_json_records_where(r));
        json_decref(v);
    }
    tt_json_records_close(r);
    return n;
}

static void read_all_records(void *path) {
    char where[4400];
    count_records(path, where, sizeof where);
}

typedef struct bad_record {
    const char *type;
    const char *json;
} bad_record;

static void encode_bad(void *arg) {
    const bad_record *b = arg;
    tt_dataset_type type = strcmp(b->type, "alpaca") == 0       ? TT_DATASET_ALPACA
                           : strcmp(b->type, "completion") == 0 ? TT_DATASET_COMPLETION
                                                                : TT_DATASET_INPUT_OUTPUT;
    tt_dataset_spec spec = {.type = type,
                            .field = "text",
                            .field_instruction = "instruction",
                            .field_input = "input",
                            .field_output = "output"};
    json_t *record = json_loads(b->json, 0, NULL);
    tt_sft_example ex;
    tt_sft_record_segments(&spec, false, record, "data.jsonl:7", &ex);
}

static void test_readers(void) {
    char where[4400];
    char *p = write_text("a.jsonl", "{\"text\": \"a\"}\n\n   \n{\"text\": \"b\"}\r\n{\"text\": \"c\"}");
    TT_EXPECT(count_records(p, where, sizeof where) == 3, "JSONL: blank lines skipped, CRLF and no final newline");
    TT_EXPECT(strstr(where, "a.jsonl:5") != NULL, "JSONL: line numbers count blank lines: %s", where);
    free(p);
    p = write_text("a.json", " [\n {\"text\": \"a, ]}\"},\n {\"text\": [1, {\"b\": 2}]},\n{\"text\": \"c\"}\n]\n");
    TT_EXPECT(count_records(p, where, sizeof where) == 3, "JSON array: three records");
    TT_EXPECT(strstr(where, "a.json: record 3 (line 4)") != NULL, "JSON array: record number and line: %s", where);
    free(p);
    p = write_text("empty_array.json", "[]");
    TT_EXPECT(count_records(p, where, sizeof where) == 0, "an empty array has no records");
    free(p);
    p = write_text("lines.json", "{\"text\": \"a\"}\n{\"text\": \"b\"}\n");
    TT_EXPECT(count_records(p, where, sizeof where) == 2, "JSON lines in a .json file (as HF's json loader)");
    free(p);

    /* bad files: each error names the file and the line or record */
    p = write_text("malformed.jsonl", "{\"text\": \"a\"}\n{\"text\": \"b\"\n");
    tt_expect_die(read_all_records, p, "malformed.jsonl:2: malformed JSON");
    free(p);
    p = write_text("malformed.json", "[{\"text\": \"a\"}, {\"text\" \"b\"}]");
    tt_expect_die(read_all_records, p, "malformed.json: record 2 (line 1): malformed JSON");
    free(p);
    p = write_text("unclosed.json", "[{\"text\": \"a\"},\n {\"text\": \"b\"}");
    tt_expect_die(read_all_records, p, "unclosed.json: record 2 (line 2): the file ends inside it");
    free(p);
    p = write_text("notobject.jsonl", "{\"text\": \"a\"}\n[1, 2]\n");
    tt_expect_die(read_all_records, p,
                  "notobject.jsonl:2: expected a JSON object (a record with named fields), got an array");
    free(p);
    p = write_text("utf8.jsonl", "{\"text\": \"a\"}\n\n{\"text\": \"b\xff\"}\n");
    tt_expect_die(read_all_records, p, "utf8.jsonl:3: invalid UTF-8 (byte 0xff at byte 12 of the line)");
    free(p);
    p = write_text("surrogate.jsonl", "{\"text\": \"\xed\xa0\x80\"}\n");
    tt_expect_die(read_all_records, p, "surrogate.jsonl:1: invalid UTF-8");
    free(p);
    p = write_text("blank.jsonl", "\n  \n");
    tt_expect_die(read_all_records, p, "dataset");
    free(p);
    tt_expect_die(read_all_records, "/nonexistent/x.jsonl", "cannot open dataset /nonexistent/x.jsonl");
    TT_EXPECT(tt_utf8_first_invalid("a\xc3\xa9\xf0\x9f\x98\x80", 7) == -1, "valid UTF-8");
    TT_EXPECT(tt_utf8_first_invalid("ab\xc0\x80", 4) == 2, "overlong");
    TT_EXPECT(tt_utf8_first_invalid("ab\xe2\x82", 4) == 2, "truncated sequence");

    /* bad records: each message names where, the field and what is wrong */
    bad_record cases[][1] = {
        {{"completion", "{\"body\": \"x\"}"}},
        {{"completion", "{\"text\": 5}"}},
        {{"completion", "{\"text\": \"\"}"}},
        {{"alpaca", "{\"instruction\": \"a\"}"}},
        {{"alpaca", "{\"instruction\": \"a\", \"output\": \"\"}"}},
        {{"alpaca", "{\"instruction\": [\"a\"], \"output\": \"b\"}"}},
        {{"alpaca", "{\"instruction\": \"a\", \"input\": 3, \"output\": \"b\"}"}},
        {{"input_output", "{\"text\": \"a\"}"}},
        {{"input_output", "{\"segments\": [{\"text\": \"a\"}]}"}},
        {{"input_output", "{\"segments\": [{\"text\": \"a\", \"label\": \"yes\"}]}"}},
        {{"input_output", "{\"segments\": [{\"text\": \"\", \"label\": true}]}"}},
        {{"input_output", "{\"segments\": \"a\"}"}},
    };
    const char *messages[] = {
        "data.jsonl:7: the record has no field 'text', which a completion dataset reads",
        "data.jsonl:7: field 'text' is a number; a completion dataset needs a string there",
        "data.jsonl:7: empty document: field 'text' is \"\"",
        "data.jsonl:7: the record has no field 'output', which a alpaca dataset reads",
        "data.jsonl:7: field 'output' is empty",
        "data.jsonl:7: field 'instruction' is a list; a alpaca dataset needs a string there",
        "data.jsonl:7: field 'input' is a number",
        "data.jsonl:7: the record has no field 'segments'",
        "data.jsonl:7: segments[0] has no field 'label'",
        "data.jsonl:7: segments[0].label is a string; it must be true or false",
        "data.jsonl:7: empty document: the segments hold no text",
        "data.jsonl:7: field 'segments' is a string",
    };
    for (size_t i = 0; i < sizeof messages / sizeof messages[0]; i++) tt_expect_die(encode_bad, cases[i], messages[i]);
}

/* ---- token file version 2 and the padded batches ---- */

static void open_v2(void *path) {
    tt_dataset ds;
    char *paths[1] = {path};
    tt_dataset_open(&ds, paths, 1, 300, 4, 0.0, 1);
}

static void open_mixed(void *arg) {
    char **paths = arg;
    tt_dataset ds;
    tt_dataset_open(&ds, paths, 2, 300, 4, 0.0, 1);
}

static void test_v2(void) {
    /* three documents: [10 11 12] labels [0 1 1], [20 21] labels [0 1], [30 31 32 33] labels [1 0 1 1] */
    uint32_t tokens[] = {10, 11, 12, 20, 21, 30, 31, 32, 33};
    uint8_t labels[] = {0, 1, 1, 0, 1, 1, 0, 1, 1};
    uint64_t starts[] = {0, 3, 5, 9};
    tt_token_documents docs = {.tokens = tokens,
                               .labels = labels,
                               .starts = starts,
                               .token_count = 9,
                               .document_count = 3,
                               .vocab_size = 300,
                               .eos_id = 33,
                               .pad_id = 299};
    char *p = tt_test_path("docs.tok");
    tt_token_file_write_documents(p, &docs);
    FILE *f = fopen(p, "rb");
    unsigned char header[48];
    TT_EXPECT(fread(header, 1, 48, f) == 48, "read header");
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fclose(f);
    TT_EXPECT(memcmp(header, "TTTOKENS", 8) == 0 && header[8] == 2 && header[28] == 43 && header[29] == 1 &&
                  header[32] == 3,
              "v2 header: magic, version 2, pad 299, 3 documents");
    TT_EXPECT(size == 48 + 8 * 4 + 4 * 9 + 9, "v2 size: header, 4 offsets, 9 ids, 9 label bytes (got %ld)", size);

    tt_dataset ds;
    char *paths[1] = {p};
    tt_dataset_open(&ds, paths, 1, 300, 4, 0.0, 7);
    TT_EXPECT(ds.documents && ds.sequence_count == 3 && ds.train_count == 3 && ds.pad_id == 299,
              "v2 opens as three documents");
    /* every training sequence of one epoch, by its first input */
    int32_t in[4], tg[4];
    bool seen[3] = {false, false, false};
    for (int i = 0; i < 3; i++) {
        tt_dataset_next_train(&ds, in, tg);
        if (in[0] == 10) {
            seen[0] = true;
            TT_EXPECT(in[1] == 11 && in[2] == 12 && in[3] == 299 && tg[0] == 11 && tg[1] == 12 && tg[2] == -100 &&
                          tg[3] == -100,
                      "document 0: inputs padded with the pad id, targets shifted, the end and padding -100");
        } else if (in[0] == 20) {
            seen[1] = true;
            TT_EXPECT(in[1] == 21 && in[2] == 299 && tg[0] == 21 && tg[1] == -100 && tg[2] == -100, "document 1");
        } else if (in[0] == 30) {
            seen[2] = true;
            TT_EXPECT(in[3] == 33 && tg[0] == -100 && tg[1] == 32 && tg[2] == 33 && tg[3] == -100,
                      "document 2: a masked token is no target");
        }
    }
    TT_EXPECT(seen[0] && seen[1] && seen[2], "an epoch visits every document once");
    tt_dataset_close(&ds);

    /* written in an order: the same bytes as the documents permuted in memory */
    const int64_t order[3] = {2, 0, 1};
    uint32_t permuted_tokens[] = {30, 31, 32, 33, 10, 11, 12, 20, 21};
    uint8_t permuted_labels[] = {1, 0, 1, 1, 0, 1, 1, 0, 1};
    uint64_t permuted_starts[] = {0, 4, 7, 9};
    tt_token_documents permuted = docs;
    permuted.tokens = permuted_tokens;
    permuted.labels = permuted_labels;
    permuted.starts = permuted_starts;
    char *by_order = tt_test_path("ordered.tok"), *by_copy = tt_test_path("permuted.tok");
    tt_token_documents ordered = docs;
    ordered.order = order;
    tt_token_file_write_documents(by_order, &ordered);
    tt_token_file_write_documents(by_copy, &permuted);
    char a[256], b[256];
    FILE *fa = fopen(by_order, "rb"), *fb = fopen(by_copy, "rb");
    size_t order_len = fread(a, 1, sizeof a, fa), copy_len = fread(b, 1, sizeof b, fb);
    fclose(fa);
    fclose(fb);
    TT_EXPECT(order_len == copy_len && order_len == 48 + 8 * 4 + 4 * 9 + 9 && memcmp(a, b, order_len) == 0,
              "documents written in order 2 0 1: the bytes of the permuted arrays (%zu and %zu bytes)", order_len,
              copy_len);
    free(by_order);
    free(by_copy);

    /* mixing a version 1 file with a version 2 file */
    char *v1 = tt_test_path("v1.tok");
    tt_token_file_write(v1, tokens, 9, 300, TT_TOKEN_NO_EOS);
    char *mixed[2] = {v1, p};
    tt_expect_die(open_mixed, mixed, "is a version 2 token file but");
    /* version 1 still opens as a stream */
    paths[0] = v1;
    tt_dataset_open(&ds, paths, 1, 300, 4, 0.0, 7);
    TT_EXPECT(!ds.documents && ds.sequence_count == 2, "version 1 still reads as one stream cut into windows");
    tt_dataset_close(&ds);
    /* a truncated v2 file */
    char *t = tt_test_path("trunc.tok");
    tt_token_file_write_documents(t, &docs);
    TT_EXPECT(truncate(t, 48 + 8 * 4 + 4 * 9) == 0, "truncate");
    tt_expect_die(open_v2, t, "truncated");
    free(t);
    free(v1);
    free(p);
}

/* open_v2 uses sequence_len 4; this one 3, to see the long-document error */
static void open_v2_len3(void *path) {
    tt_dataset ds;
    char *paths[1] = {path};
    tt_dataset_open(&ds, paths, 1, 300, 3, 0.0, 1);
}

/* ---- prepared files ---- */

static void load_run(tt_run_config *run, const char *datasets, const char *extra1, const char *extra2,
                     const char *prepared_dir) {
    char ds[8192], tok[4200], prep[4200];
    snprintf(ds, sizeof ds, "datasets=%s", datasets);
    snprintf(tok, sizeof tok, "tokenizer_config=%s", tokenizer_dir);
    snprintf(prep, sizeof prep, "dataset_prepared_path=%s", prepared_dir);
    char *overrides[] = {"model_config=m", ds, tok, prep, "sequence_len=64", (char *)extra1, (char *)extra2};
    tt_run_config_defaults(run);
    tt_run_config_load(run, NULL, 5 + (extra1 != NULL) + (extra2 != NULL), overrides);
}

static unsigned char *slurp(const char *path, long *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *size = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)*size + 1);
    if (fread(b, 1, (size_t)*size, f) != (size_t)*size) *size = -1;
    fclose(f);
    return b;
}

static void prepare_chat(void *arg) {
    tt_run_config *run = arg;
    tt_prepare_datasets(run, NULL);
}

static void test_prepare(void) {
    /* 2500 records: several chunks of 1024, documents of different lengths, some too long */
    char *jsonl = tt_test_path("many.jsonl");
    FILE *f = fopen(jsonl, "w");
    for (int i = 0; i < 2500; i++) {
        fprintf(f, "{\"instruction\": \"Record %d\", \"input\": \"%.*s\", \"output\": \"%d\"}\n", i, i % 7, "abcdefg",
                i * 31);
    }
    fclose(f);
    char datasets[4400];
    snprintf(datasets, sizeof datasets, "[{path: %s, type: alpaca}]", jsonl);
    char *dir1 = tt_test_path("prep1"), *dir2 = tt_test_path("prep2");
    tt_run_config run;
    char hex1[33], hex2[33];

    /* sequence_len 64 is shorter than every alpaca prompt here: all dropped */
    load_run(&run, datasets, "num_threads=1", NULL, dir1);
    tt_expect_die(prepare_chat, &run, "no document is left to train on (2500 longer than sequence_len 64");
    tt_run_config_free(&run);

    load_run(&run, datasets, "sequence_len=256", NULL, dir1);
    tt_prepared_hash(&run, hex1);
    omp_set_num_threads(1);
    bool reused = true;
    char *a = tt_prepare_datasets(&run, &reused);
    TT_EXPECT(!reused, "the first preprocess writes the file");
    char *again = tt_prepare_datasets(&run, &reused);
    TT_EXPECT(reused && strcmp(a, again) == 0, "the same run reuses it");
    free(again);
    TT_EXPECT(strstr(a, hex1) != NULL, "named by the hash: %s", a);
    tt_run_config_free(&run);

    load_run(&run, datasets, "sequence_len=256", NULL, dir2);
    tt_prepared_hash(&run, hex2);
    TT_EXPECT(strcmp(hex1, hex2) == 0, "the hash does not depend on dataset_prepared_path");
    omp_set_num_threads(2);
    char *b = tt_prepare_datasets(&run, &reused);
    TT_EXPECT(!reused, "a fresh directory: written again");
    tt_run_config_free(&run);
    long sa = 0, sb = 0;
    unsigned char *ba = slurp(a, &sa), *bb = slurp(b, &sb);
    TT_EXPECT(ba && bb && sa == sb && sa > 48 && memcmp(ba, bb, (size_t)sa) == 0,
              "1 and 2 threads write identical files (%ld and %ld bytes)", sa, sb);
    free(ba);
    free(bb);

    /* what changes the hash */
    const char *changes[] = {"train_on_inputs=true",          "sequence_len=257", "excess_length_strategy=truncate",
                             "shuffle_merged_datasets=false", "seed=3",           "special_tokens={eos_token: <pad>}"};
    for (size_t i = 0; i < sizeof changes / sizeof changes[0]; i++) {
        char hex[33];
        load_run(&run, datasets, "sequence_len=256", changes[i], dir1);
        tt_prepared_hash(&run, hex);
        TT_EXPECT(strcmp(hex, hex1) != 0, "%s changes the hash", changes[i]);
        tt_run_config_free(&run);
    }

    /* truncate keeps every document, cut to sequence_len tokens; drop keeps the short ones.
     * input_output documents of 1..300 bytes are 1..300 tokens; at sequence_len 100, 2..100 fit (a
     * one-token document has no target and is dropped either way). */
    char *texts = tt_test_path("texts.jsonl");
    f = fopen(texts, "w");
    for (int i = 1; i <= 300; i++) {
        fputs("{\"segments\": [{\"label\": true, \"text\": \"", f);
        for (int k = 0; k < i; k++) fputc('a' + k % 26, f);
        fputs("\"}]}\n", f);
    }
    fclose(f);
    char completion[4400];
    snprintf(completion, sizeof completion, "[{path: %s, type: input_output}]", texts);
    tt_dataset ds;
    load_run(&run, completion, "sequence_len=100", "excess_length_strategy=truncate", dir1);
    char *t = tt_prepare_datasets(&run, NULL);
    tt_run_config_free(&run);
    char *paths[1] = {t};
    tt_dataset_open(&ds, paths, 1, 300, 100, 0.0, 1);
    int64_t longest = 0, at_limit = 0;
    for (int64_t d = 0; d < ds.sequence_count; d++) {
        int64_t n = (int64_t)(ds.doc_starts[d + 1] - ds.doc_starts[d]);
        longest = n > longest ? n : longest;
        at_limit += n == 100;
    }
    TT_EXPECT(ds.sequence_count == 299 && longest == 100 && at_limit == 201,
              "truncate keeps 299, 201 of them at 100 tokens (%lld, longest %lld, %lld at 100)",
              (long long)ds.sequence_count, (long long)longest, (long long)at_limit);
    tt_dataset_close(&ds);
    free(t);
    load_run(&run, completion, "sequence_len=100", NULL, dir1);
    t = tt_prepare_datasets(&run, NULL);
    tt_run_config_free(&run);
    paths[0] = t;
    tt_dataset_open(&ds, paths, 1, 300, 100, 0.0, 1);
    TT_EXPECT(ds.sequence_count == 99, "drop keeps the 99 that fit (%lld)", (long long)ds.sequence_count);
    tt_dataset_close(&ds);
    free(t);
    /* completion splits long texts into pieces of sequence_len, as axolotl: 250 bytes are 252
     * tokens with BOS and EOS, pieces of 100, 100 and 52; a 98-byte text is one piece of 100 */
    f = fopen(texts, "w");
    fputs("{\"text\": \"", f);
    for (int k = 0; k < 250; k++) fputc('a' + k % 26, f);
    fputs("\"}\n{\"text\": \"", f);
    for (int k = 0; k < 98; k++) fputc('a' + k % 26, f);
    fputs("\"}\n", f);
    fclose(f);
    snprintf(completion, sizeof completion, "[{path: %s, type: completion}]", texts);
    load_run(&run, completion, "sequence_len=100", "shuffle_merged_datasets=false", dir1);
    t = tt_prepare_datasets(&run, NULL);
    tt_run_config_free(&run);
    paths[0] = t;
    tt_dataset_open(&ds, paths, 1, 300, 100, 0.0, 1);
    TT_EXPECT(ds.sequence_count == 4 && ds.doc_starts[1] == 100 && ds.doc_starts[2] == 200 && ds.doc_starts[3] == 252 &&
                  ds.doc_starts[4] == 352 && ds.tokens[0] == 257 && ds.tokens[100] == 'a' + 99 % 26 &&
                  ds.tokens[251] == 256 && ds.tokens[252] == 257,
              "completion pieces in input order: BOS only in the first, EOS only in the last");
    tt_dataset_close(&ds);
    free(t);
    free(texts);

    /* chat_template: conversations through a template; the content of each assistant turn and its
     * EOS train. 300 records (more than one chunk is not needed: the chunking is shared with the
     * other types), the even ones ShareGPT-like through a second entry's mappings. */
    char *chats = tt_test_path("chats.jsonl"), *sharegpt = tt_test_path("sharegpt.jsonl");
    f = fopen(chats, "w");
    FILE *g = fopen(sharegpt, "w");
    int64_t expected_trained = 0;
    for (int i = 0; i < 300; i++) {
        if (i % 2)
            fprintf(f,
                    "{\"messages\": [{\"role\": \"user\", \"content\": \"q%d\"}, {\"role\": \"assistant\", "
                    "\"content\": \"a%d\"}]}\n",
                    i, i * 7);
        else
            fprintf(g,
                    "{\"conversations\": [{\"from\": \"human\", \"value\": \"q%d\"}, {\"from\": \"gpt\", "
                    "\"value\": \"a%d\"}]}\n",
                    i, i * 7);
        expected_trained += (int64_t)snprintf(NULL, 0, "a%d", i * 7) + 1; /* the answer's bytes and its EOS */
    }
    fclose(f);
    fclose(g);
    char chat[9000];
    snprintf(chat, sizeof chat,
             "[{path: %s, type: chat_template}, {path: %s, type: chat_template, field_messages: conversations, "
             "message_property_mappings: {role: from, content: value}}]",
             chats, sharegpt);
    const char *jinja = "chat_template_jinja=\"{% for m in messages %}<{{ m.role }}>{{ m.content }}"
                        "{% if m.role == 'assistant' %}{{ eos_token }}{% endif %}{% endfor %}\"";
    load_run(&run, chat, jinja, "shuffle_merged_datasets=false", dir1);
    char chat_hex[33];
    tt_prepared_hash(&run, chat_hex);
    t = tt_prepare_datasets(&run, NULL);
    tt_run_config_free(&run);
    paths[0] = t;
    tt_dataset_open(&ds, paths, 1, 300, 64, 0.0, 1);
    int64_t trained = 0;
    for (uint64_t k = 0; k < ds.token_count; k++) trained += ds.labels[k];
    /* the first document: "<user>q1<assistant>a7" + EOS, with "a7" and the EOS trained */
    const char first[] = "<user>q1<assistant>a7";
    bool first_ok = ds.doc_starts[1] == sizeof first && ds.tokens[sizeof first - 1] == 256 &&
                    ds.labels[sizeof first - 3] && ds.labels[sizeof first - 2] && ds.labels[sizeof first - 1] &&
                    !ds.labels[sizeof first - 4];
    for (size_t k = 0; first_ok && k + 1 < sizeof first; k++) first_ok = ds.tokens[k] == (uint32_t)first[k];
    TT_EXPECT(ds.sequence_count == 300 && trained == expected_trained && first_ok,
              "chat documents: %lld of 300, %lld trained tokens (expected %lld), first document as rendered",
              (long long)ds.sequence_count, (long long)trained, (long long)expected_trained);
    tt_dataset_close(&ds);
    free(t);
    /* everything that shapes a chat dataset changes the hash */
    const char *chat_changes[][2] = {
        {"chat_template_jinja=\"{% for m in messages %}{{ m.content }}{% endfor %}\"", NULL},
        {"train_on_eos=none", NULL},
        {"train_on_inputs=true", NULL},
        {"chat_template_kwargs={enable_thinking: false}", NULL},
        {"eot_tokens=[\"<pad>\"]", NULL},
        {"eot_tokens=[]", NULL},
    };
    for (size_t i = 0; i < sizeof chat_changes / sizeof chat_changes[0]; i++) {
        load_run(&run, chat, i == 0 ? chat_changes[i][0] : jinja,
                 i == 0 ? "shuffle_merged_datasets=false" : chat_changes[i][0], dir1);
        char hex[33];
        tt_prepared_hash(&run, hex);
        TT_EXPECT(strcmp(hex, chat_hex) != 0, "%s changes the chat hash", chat_changes[i][0]);
        tt_run_config_free(&run);
    }
    const char *entry_changes[] = {"roles_to_train: [user]",
                                   "train_on_eos: all",
                                   "drop_system_message: true",
                                   "roles: {assistant: [gpt]}",
                                   "message_property_mappings: {content: text}",
                                   "field_messages: turns",
                                   "train_on_eot: all",
                                   "message_field_training: t",
                                   "message_field_training_detail: d",
                                   "split_thinking: true",
                                   "chat_template: chatml"};
    for (size_t i = 0; i < sizeof entry_changes / sizeof entry_changes[0]; i++) {
        char changed[9200];
        snprintf(changed, sizeof changed,
                 "[{path: %s, type: chat_template, %s}, {path: %s, type: chat_template, field_messages: conversations, "
                 "message_property_mappings: {role: from, content: value}}]",
                 chats, entry_changes[i], sharegpt);
        bool last = i + 1 == sizeof entry_changes / sizeof entry_changes[0]; /* chatml, the other qwen3 */
        load_run(&run, changed, last ? "chat_template=qwen3" : jinja, "shuffle_merged_datasets=false", dir1);
        char hex[33];
        tt_prepared_hash(&run, hex);
        TT_EXPECT(strcmp(hex, chat_hex) != 0, "%s changes the chat hash", entry_changes[i]);
        tt_run_config_free(&run);
    }
    /* the keys reach the prepared documents: chat_template_kwargs in the render, split_thinking, a message's
     * training field and spans, and <pad> as end-of-turn token trained by train_on_eot (train_on_eos none) */
    char *keyed = tt_test_path("keyed.jsonl");
    tt_test_write_text("keyed.jsonl",
                       "{\"messages\": [{\"role\": \"user\", \"content\": \"q\", \"t\": true}, {\"role\": "
                       "\"assistant\", \"content\": \"<think>r</think>abcd\", \"d\": [{\"begin_offset\": 1, "
                       "\"end_offset\": 2, \"train\": true}]}]}\n");
    char keyed_entry[4400];
    snprintf(keyed_entry, sizeof keyed_entry,
             "[{path: %s, type: chat_template, train_on_eos: none, train_on_eot: turn, message_field_training: t, "
             "message_field_training_detail: d, split_thinking: true}]",
             keyed);
    const char *keyed_template =
        "chat_template_jinja=\"{{ tag }}{% for m in messages %}<{{ m.role }}>{% if m.reasoning_content %}({{ "
        "m.reasoning_content }}){% endif %}{{ m.content }}<pad>{% endfor %}\"";
    char keyed_kwargs[] = "chat_template_kwargs={tag: T}";
    load_run(&run, keyed_entry, keyed_template, keyed_kwargs, dir1);
    char *eot_pad[] = {"eot_tokens=[\"<pad>\"]"};
    tt_run_config_load(&run, NULL, 1, eot_pad);
    t = tt_prepare_datasets(&run, NULL);
    tt_run_config_free(&run);
    paths[0] = t;
    tt_dataset_open(&ds, paths, 1, 300, 64, 0.0, 1);
    /* "T<user>q#<assistant>(r)abcd#": the user's q (its own field) and its <pad>, the spans' "bc" and the
     * assistant's <pad> train */
    const char keyed_text[] = "T<user>q#<assistant>(r)abcd#";
    const char keyed_labels[] = "0000000110000000000000001101";
    bool keyed_ok = ds.document_count == 1 && ds.doc_starts[1] == sizeof keyed_text - 1;
    for (size_t k = 0; keyed_ok && k + 1 < sizeof keyed_text; k++)
        keyed_ok = ds.tokens[k] == (keyed_text[k] == '#' ? 258u : (uint32_t)keyed_text[k]) &&
                   ds.labels[k] == (uint8_t)(keyed_labels[k] - '0');
    TT_EXPECT(keyed_ok, "the chat keys through preprocess: %lld documents", (long long)ds.document_count);
    tt_dataset_close(&ds);
    free(t);
    free(keyed);
    /* a conversation longer than sequence_len: dropped (counted), or truncated */
    load_run(&run, chat, jinja, "sequence_len=24", dir2);
    t = tt_prepare_datasets(&run, NULL);
    tt_run_config_free(&run);
    paths[0] = t;
    tt_dataset_open(&ds, paths, 1, 300, 24, 0.0, 1);
    TT_EXPECT(ds.sequence_count == 15,
              "24 tokens hold 18 of template and EOS and 6 of question and answer: records "
              "0..14, got %lld",
              (long long)ds.sequence_count);
    tt_dataset_close(&ds);
    free(t);
    /* a template that raises stops preprocess, naming the record (after the parallel region: one
     * thread, since libgomp's pool does not survive the fork of tt_expect_die) */
    omp_set_num_threads(1);
    load_run(&run, chat, "chat_template_jinja=\"{{ raise_exception('no ' + messages[1].content) }}\"", NULL, dir1);
    tt_expect_die(prepare_chat, &run,
                  "chats.jsonl:1: the chat template (chat_template_jinja) fails on this "
                  "conversation: no a7");
    tt_run_config_free(&run);
    omp_set_num_threads(2);
    /* the byte tokenizer has no chat template of its own */
    load_run(&run, chat, NULL, NULL, dir1);
    tt_expect_die(prepare_chat, &run, "chat_template is tokenizer_default, but the tokenizer in");
    tt_run_config_free(&run);
    free(chats);
    free(sharegpt);
    /* a special token that is not in the tokenizer */
    load_run(&run, datasets, "special_tokens={eos_token: \"<|im_end|>\"}", NULL, dir1);
    tt_expect_die(prepare_chat, &run, "eos_token '<|im_end|>' (special_tokens) is not a token of the tokenizer");
    tt_run_config_free(&run);
    /* no tokenizer: a model_config run without tokenizer_config */
    snprintf(chat, sizeof chat, "datasets=[{path: %s, type: completion}]", jsonl);
    char *no_tok[] = {"model_config=m", chat};
    tt_run_config_defaults(&run);
    tt_run_config_load(&run, NULL, 2, no_tok);
    tt_expect_die(prepare_chat, &run, "set tokenizer_config");
    tt_run_config_free(&run);

    free(a);
    free(b);
    free(dir1);
    free(dir2);
    free(jsonl);
}

/* axolotl's user-defined type: the record's system field where it has one (null: None, no system text), else
 * system_prompt, through system_format, before format (with an input) or no_input_format. */
static void test_user_defined_prompt(void) {
    tt_dataset_spec spec = {.type = TT_DATASET_ALPACA,
                            .user_defined = true,
                            .field_instruction = "q",
                            .field_input = "input",
                            .field_output = "a",
                            .field_system = "system",
                            .system_prompt = "Be brief.",
                            .format = "[{instruction}|{input}]",
                            .no_input_format = "[{instruction}]",
                            .system_format = "<{system}>"};
    const char *records[] = {"{\"q\": \"hi\", \"a\": \"yo\"}", "{\"q\": \"hi\", \"input\": \"x\", \"a\": \"yo\"}",
                             "{\"q\": \"hi\", \"system\": null, \"a\": \"yo\"}",
                             "{\"q\": \"hi\", \"system\": \"S\", \"a\": \"yo\"}"};
    const char *prompts[] = {"<Be brief.>[hi]", "<Be brief.>[hi|x]", "[hi]", "<S>[hi]"};
    for (int i = 0; i < 4; i++) {
        json_error_t error;
        json_t *record = json_loads(records[i], 0, &error);
        tt_sft_example ex = {0};
        tt_sft_record_segments(&spec, false, record, "ud.jsonl:1", &ex);
        TT_EXPECT(ex.count == 2 && strcmp(ex.segments[0].text, prompts[i]) == 0 &&
                      strcmp(ex.segments[1].text, "yo") == 0 && !ex.segments[0].trained && ex.segments[1].trained,
                  "user-defined record %d: prompt '%s', want '%s'", i, ex.count ? ex.segments[0].text : "", prompts[i]);
        tt_sft_example_free(&ex);
        json_decref(record);
    }
}

/* The user-defined type's formats are filled as Python's str.format fills named fields. */
static void test_python_format(void) {
    static const char *const names[] = {"instruction", "input"};
    static const char *const values[] = {"say {hi}", "x"};
    static const size_t lens[] = {8, 1};
    char *out = NULL, err[256];
    size_t len = 0;
    TT_EXPECT(
        tt_python_format("[{{ {instruction} }}] {input}{input}", names, values, lens, 2, &out, &len, err, sizeof err) &&
            strcmp(out, "[{ say {hi} }] xx") == 0 && len == strlen(out),
        "named fields and escaped braces: '%s'", out ? out : err);
    free(out);
    const char *bad[] = {"{output}",         "{0}",       "{}",    "{instruction!r}",
                         "{instruction:>9}", "{input.x}", "a } b", "{instruction"};
    const char *why[] = {"the field {output} is not one",
                         "the field {0} is not one",
                         "a field other than a plain name",
                         "a field other than a plain name",
                         "a field other than a plain name",
                         "a field other than a plain name",
                         "a single '}'",
                         "a single '{'"};
    for (int i = 0; i < 8; i++)
        TT_EXPECT(!tt_python_format(bad[i], names, values, lens, 2, &out, &len, err, sizeof err) && strstr(err, why[i]),
                  "'%s' is refused as Python would: %s", bad[i], err);
}

int main(int argc, char **argv) {
    source_dir = argc > 1 ? argv[1] : getenv("TT_SOURCE_DIR");
    if (!source_dir) source_dir = ".";
    snprintf(tokenizer_dir, sizeof tokenizer_dir, "%s/tests/fixtures/data/bytes_tokenizer", source_dir);
    test_python_format();
    test_user_defined_prompt();
    tt_test_scratch_open("sft");
    tt_tokenizer *tok = tt_tokenizer_load(tokenizer_dir);
    test_types(tok);
    tt_tokenizer_free(tok);
    test_readers();
    test_v2();
    char *p = tt_test_path("docs.tok");
    tt_expect_die(open_v2_len3, p, "document 2 has 4 tokens, more than sequence_len 3; it was prepared for a longer");
    free(p);
    test_prepare();
    int status = tt_test_summary("sft_data");
    tt_test_scratch_close();
    return status;
}
