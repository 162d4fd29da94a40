/* Token files and the data loader: header round trip, packing, multi-file streams, the eval
 * split, deterministic per-epoch shuffles, resume from a saved position, bad inputs, and the
 * built-in byte tokenizer. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test_util.h"
#include "train/byte_tokenizer.h"
#include "train/data.h"

static unsigned char *read_all(const char *path, size_t *bytes) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        exit(2);
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc((size_t)n + 1);
    if (fread(buf, 1, (size_t)n, f) != (size_t)n) exit(2);
    fclose(f);
    *bytes = (size_t)n;
    return buf;
}

static uint32_t le32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* A token file of `count` ids base, base + 1, ... */
static char *write_ramp(const char *name, uint32_t base, uint64_t count, uint32_t vocab) {
    uint32_t *tokens = malloc(sizeof(uint32_t) * (count ? count : 1));
    for (uint64_t i = 0; i < count; i++) tokens[i] = base + (uint32_t)i;
    char *p = tt_test_path(name);
    tt_token_file_write(p, tokens, count, vocab, TT_TOKEN_NO_EOS);
    free(tokens);
    return p;
}

static bool is_permutation_of(const int64_t *a, const int64_t *b, int64_t n) {
    int64_t *x = malloc(sizeof(int64_t) * (size_t)(n ? n : 1)), *y = malloc(sizeof(int64_t) * (size_t)(n ? n : 1));
    memcpy(x, a, sizeof(int64_t) * (size_t)n);
    memcpy(y, b, sizeof(int64_t) * (size_t)n);
    /* small n: selection sort both */
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = i + 1; j < n; j++) {
            if (x[j] < x[i]) {
                int64_t t = x[i];
                x[i] = x[j];
                x[j] = t;
            }
            if (y[j] < y[i]) {
                int64_t t = y[i];
                y[i] = y[j];
                y[j] = t;
            }
        }
    bool same = memcmp(x, y, sizeof(int64_t) * (size_t)n) == 0;
    free(x);
    free(y);
    return same;
}

static void test_header_round_trip(void) {
    uint32_t tokens[5] = {0, 1, 0x01020304u, 299, 7};
    char *p = tt_test_path("header.tok");
    tt_token_file_write(p, tokens, 5, 300, 299);
    size_t bytes;
    unsigned char *b = read_all(p, &bytes);
    TT_EXPECT(bytes == 32 + 4 * 5, "file size %zu", bytes);
    TT_EXPECT(memcmp(b, "TTTOKENS", 8) == 0, "magic");
    TT_EXPECT(le32(b + 8) == 1, "version %u", le32(b + 8));
    TT_EXPECT(le32(b + 12) == 300, "vocab_size %u", le32(b + 12));
    TT_EXPECT(le32(b + 16) == 5 && le32(b + 20) == 0, "token_count");
    TT_EXPECT(le32(b + 24) == 299, "eos %u", le32(b + 24));
    TT_EXPECT(le32(b + 28) == 0, "reserved");
    bool ids = true;
    for (int i = 0; i < 5; i++) ids = ids && le32(b + 32 + 4 * i) == tokens[i];
    TT_EXPECT(ids, "ids little-endian after the header");
    TT_EXPECT(b[32 + 8] == 0x04 && b[32 + 11] == 0x01, "byte order of an id");
    free(b);
    char *tmp = tt_test_path("header.tok.tmp");
    TT_EXPECT(access(tmp, F_OK) != 0, "no temporary file left behind");
    free(tmp);

    /* and the loader reads it back */
    tt_dataset ds;
    char *paths[1] = {p};
    tt_dataset_open(&ds, paths, 1, 0x01020305, 4, 0.0, 1);
    TT_EXPECT(ds.token_count == 5 && memcmp(ds.tokens, tokens, sizeof tokens) == 0, "round trip of the ids");
    TT_EXPECT(ds.sequence_count == 1, "one sequence of 4 from 5 tokens");
    tt_dataset_close(&ds);

    /* an empty file is valid; rewriting replaces */
    tt_token_file_write(p, NULL, 0, 300, TT_TOKEN_NO_EOS);
    b = read_all(p, &bytes);
    TT_EXPECT(bytes == 32 && le32(b + 16) == 0 && le32(b + 24) == 0xffffffffu, "empty token file");
    free(b);
    free(p);
}

static void test_packing(void) {
    /* 21 tokens 100..120, T = 4: (21 - 1) / 4 = 5 sequences; sequence s is tokens [4s, 4s + 4] */
    char *p = write_ramp("pack.tok", 100, 21, 200);
    char *paths[1] = {p};
    tt_dataset ds;
    tt_dataset_open(&ds, paths, 1, 200, 4, 0.0, 3);
    TT_EXPECT(ds.sequence_count == 5 && ds.train_count == 5 && ds.eval_count == 0, "%lld sequences",
              (long long)ds.sequence_count);
    bool seen[5] = {false}, exact = true;
    for (int k = 0; k < 5; k++) {
        int32_t in[4], tg[4];
        int64_t s = ds.epoch_order[ds.index_in_epoch];
        tt_dataset_next_train(&ds, in, tg);
        TT_EXPECT(s >= 0 && s < 5 && !seen[s], "sequence %lld once per epoch", (long long)s);
        if (s >= 0 && s < 5) seen[s] = true;
        for (int t = 0; t < 4; t++) {
            exact = exact && in[t] == 100 + 4 * (int32_t)s + t && tg[t] == 100 + 4 * (int32_t)s + t + 1;
        }
    }
    TT_EXPECT(exact, "inputs are tokens[sT .. sT+T-1], targets tokens[sT+1 .. sT+T]");
    TT_EXPECT(ds.epoch == 1 && ds.index_in_epoch == 0, "epoch advanced after 5 sequences");
    tt_dataset_close(&ds);

    /* stride T: T = 5 on 21 tokens gives 4 sequences, using every token (20 + 1) */
    tt_dataset_open(&ds, paths, 1, 200, 5, 0.0, 3);
    TT_EXPECT(ds.sequence_count == 4, "21 tokens, T = 5: %lld", (long long)ds.sequence_count);
    tt_dataset_close(&ds);
    /* 20 tokens, T = 4: (20 - 1) / 4 = 4, the last 3 tokens only partly used */
    char *q = write_ramp("pack20.tok", 100, 20, 200);
    paths[0] = q;
    tt_dataset_open(&ds, paths, 1, 200, 4, 0.0, 3);
    TT_EXPECT(ds.sequence_count == 4, "20 tokens, T = 4: %lld", (long long)ds.sequence_count);
    tt_dataset_close(&ds);
    /* exactly T + 1 tokens: one sequence; T = 1 works */
    paths[0] = p;
    tt_dataset_open(&ds, paths, 1, 200, 20, 0.0, 3);
    TT_EXPECT(ds.sequence_count == 1, "T + 1 tokens is one sequence");
    tt_dataset_close(&ds);
    tt_dataset_open(&ds, paths, 1, 200, 1, 0.0, 3);
    TT_EXPECT(ds.sequence_count == 20, "T = 1: %lld", (long long)ds.sequence_count);
    int32_t in1, tg1;
    int64_t s = ds.epoch_order[0];
    tt_dataset_next_train(&ds, &in1, &tg1);
    TT_EXPECT(in1 == 100 + s && tg1 == 101 + s, "T = 1 pair");
    tt_dataset_close(&ds);
    free(p);
    free(q);
}

static void test_multi_file(void) {
    char *a = write_ramp("a.tok", 0, 3, 50);  /* 0 1 2 */
    char *b = write_ramp("b.tok", 10, 7, 50); /* 10..16 */
    char *c = write_ramp("c.tok", 30, 0, 50); /* empty */
    char *d = write_ramp("d.tok", 40, 2, 50); /* 40 41 */
    char *paths[4] = {a, b, c, d};
    tt_dataset ds;
    tt_dataset_open(&ds, paths, 4, 50, 3, 0.0, 11);
    uint32_t expected[12] = {0, 1, 2, 10, 11, 12, 13, 14, 15, 16, 40, 41};
    TT_EXPECT(ds.token_count == 12 && memcmp(ds.tokens, expected, sizeof expected) == 0, "files concatenated in order");
    TT_EXPECT(ds.sequence_count == 3, "(12 - 1) / 3 = 3: %lld", (long long)ds.sequence_count);
    /* sequence 2 spans the last two files: tokens 6..9 = 13 14 15 16; sequence 0 spans a and b */
    for (int k = 0; k < 3; k++) {
        int32_t in[3], tg[3];
        int64_t s = ds.epoch_order[ds.index_in_epoch];
        tt_dataset_next_train(&ds, in, tg);
        if (s == 0) TT_EXPECT(in[0] == 0 && in[2] == 2 && tg[2] == 10, "sequence 0 crosses a file boundary");
        if (s == 2) TT_EXPECT(in[0] == 13 && tg[2] == 16, "sequence 2");
    }
    tt_dataset_close(&ds);
    /* the same file twice */
    char *twice[2] = {b, b};
    tt_dataset_open(&ds, twice, 2, 50, 3, 0.0, 11);
    TT_EXPECT(ds.token_count == 14 && ds.tokens[7] == 10 && ds.tokens[13] == 16, "a file listed twice");
    tt_dataset_close(&ds);
    free(a);
    free(b);
    free(c);
    free(d);
}

static void check_split(const tt_dataset *ds, const char *what) {
    bool *seen = calloc((size_t)ds->sequence_count, 1);
    bool ok = true, sorted = true;
    for (int64_t i = 0; i < ds->eval_count; i++) {
        int64_t s = ds->eval_sequences[i];
        ok = ok && s >= 0 && s < ds->sequence_count && !seen[s];
        if (ok) seen[s] = true;
        if (i > 0) sorted = sorted && ds->eval_sequences[i - 1] < s;
    }
    for (int64_t i = 0; ok && i < ds->train_count; i++) {
        int64_t s = ds->train_order_base[i];
        ok = ok && s >= 0 && s < ds->sequence_count && !seen[s];
        if (ok) seen[s] = true;
        if (i > 0) sorted = sorted && ds->train_order_base[i - 1] < s;
    }
    for (int64_t i = 0; ok && i < ds->sequence_count; i++) ok = seen[i];
    TT_EXPECT(ok && ds->eval_count + ds->train_count == ds->sequence_count,
              "%s: eval and train are disjoint and cover "
              "every sequence",
              what);
    TT_EXPECT(sorted, "%s: eval and train base are sorted ascending", what);
    TT_EXPECT(is_permutation_of(ds->epoch_order, ds->train_order_base, ds->train_count),
              "%s: the epoch order is a permutation of the training sequences", what);
    free(seen);
}

static void test_eval_split(void) {
    char *p = write_ramp("split.tok", 0, 401, 1000); /* T = 10: 40 sequences */
    char *paths[1] = {p};
    tt_dataset ds;
    tt_dataset_open(&ds, paths, 1, 1000, 10, 0.25, 5);
    TT_EXPECT(ds.sequence_count == 40 && ds.eval_count == 10 && ds.train_count == 30, "fraction 0.25: %lld eval",
              (long long)ds.eval_count);
    check_split(&ds, "fraction");
    /* eval sequence i is the i-th held-out sequence */
    int32_t in[10], tg[10];
    tt_dataset_get_eval(&ds, 3, in, tg);
    int64_t s = ds.eval_sequences[3];
    TT_EXPECT(in[0] == 10 * s && in[9] == 10 * s + 9 && tg[9] == 10 * s + 10, "get_eval");
    tt_dataset_close(&ds);

    tt_dataset_open(&ds, paths, 1, 1000, 10, 0.33, 5); /* floor(13.2) */
    TT_EXPECT(ds.eval_count == 13, "fraction floors: %lld", (long long)ds.eval_count);
    check_split(&ds, "fraction 0.33");
    tt_dataset_close(&ds);
    tt_dataset_open(&ds, paths, 1, 1000, 10, 7, 5);
    TT_EXPECT(ds.eval_count == 7 && ds.train_count == 33, "count 7: %lld", (long long)ds.eval_count);
    check_split(&ds, "count");
    tt_dataset_close(&ds);
    tt_dataset_open(&ds, paths, 1, 1000, 10, 0.0, 5);
    TT_EXPECT(ds.eval_count == 0 && ds.train_count == 40, "no eval");
    check_split(&ds, "none");
    tt_dataset_close(&ds);
    tt_dataset_open(&ds, paths, 1, 1000, 10, 39, 5);
    TT_EXPECT(ds.eval_count == 39 && ds.train_count == 1, "all but one held out");
    check_split(&ds, "39 of 40");
    tt_dataset_close(&ds);
    free(p);
}

static void test_determinism(void) {
    char *p = write_ramp("det.tok", 0, 1001, 2000); /* T = 10: 100 sequences */
    char *paths[1] = {p};
    tt_dataset a, b, c;
    tt_dataset_open(&a, paths, 1, 2000, 10, 0.1, 42);
    tt_dataset_open(&b, paths, 1, 2000, 10, 0.1, 42);
    tt_dataset_open(&c, paths, 1, 2000, 10, 0.1, 43);
    TT_EXPECT(memcmp(a.eval_sequences, b.eval_sequences, sizeof(int64_t) * 10) == 0, "same seed, same eval split");
    TT_EXPECT(memcmp(a.epoch_order, b.epoch_order, sizeof(int64_t) * 90) == 0, "same seed, same order");
    TT_EXPECT(memcmp(a.eval_sequences, c.eval_sequences, sizeof(int64_t) * 10) != 0, "another seed, another split");
    TT_EXPECT(memcmp(a.epoch_order, c.epoch_order, sizeof(int64_t) * 90) != 0, "another seed, another order");
    bool identity = true;
    for (int64_t i = 0; i < a.train_count; i++) identity = identity && a.epoch_order[i] == a.train_order_base[i];
    TT_EXPECT(!identity, "the epoch order is shuffled");

    /* the same stream through next_train, over three epochs */
    bool same = true;
    for (int k = 0; k < 3 * 90; k++) {
        int32_t ia[10], ta[10], ib[10], tb[10];
        tt_dataset_next_train(&a, ia, ta);
        tt_dataset_next_train(&b, ib, tb);
        same = same && memcmp(ia, ib, sizeof ia) == 0 && memcmp(ta, tb, sizeof ta) == 0;
    }
    TT_EXPECT(same, "same seed, same stream");
    TT_EXPECT(a.epoch == 3 && a.index_in_epoch == 0, "three epochs: %lld", (long long)a.epoch);
    tt_dataset_close(&a);
    tt_dataset_close(&b);
    tt_dataset_close(&c);
    free(p);
}

static void test_epochs_reshuffle(void) {
    char *p = write_ramp("epochs.tok", 0, 501, 1000); /* T = 10: 50 sequences */
    char *paths[1] = {p};
    tt_dataset ds;
    tt_dataset_open(&ds, paths, 1, 1000, 10, 5, 9);
    int64_t orders[3][45];
    for (int e = 0; e < 3; e++) {
        TT_EXPECT(ds.epoch == e && ds.index_in_epoch == 0, "epoch %d starts", e);
        for (int k = 0; k < 45; k++) {
            int32_t in[10], tg[10];
            tt_dataset_next_train(&ds, in, tg);
            orders[e][k] = in[0] / 10;
        }
        TT_EXPECT(is_permutation_of(orders[e], ds.train_order_base, 45),
                  "epoch %d visits every training sequence "
                  "once",
                  e);
    }
    TT_EXPECT(memcmp(orders[0], orders[1], sizeof orders[0]) != 0 &&
                  memcmp(orders[1], orders[2], sizeof orders[0]) != 0,
              "each epoch has its own order");
    /* eval sequences are never drawn for training */
    bool disjoint = true;
    for (int e = 0; e < 3; e++)
        for (int k = 0; k < 45; k++)
            for (int64_t i = 0; i < ds.eval_count; i++) disjoint = disjoint && orders[e][k] != ds.eval_sequences[i];
    TT_EXPECT(disjoint, "training never draws an eval sequence");
    tt_dataset_close(&ds);
    free(p);
}

static void test_resume(void) {
    char *p = write_ramp("resume1.tok", 0, 150, 1000);
    char *q = write_ramp("resume2.tok", 500, 93, 1000); /* 243 tokens, T = 8: 30 sequences */
    char *paths[2] = {p, q};
    const int k_values[3] = {0, 7, 25};
    for (int v = 0; v < 3; v++) {
        int k = k_values[v], m = 70; /* 70 more crosses two epoch boundaries (28 training sequences each) */
        tt_dataset ds;
        tt_dataset_open(&ds, paths, 2, 1000, 8, 2, 123);
        int32_t in[8], tg[8];
        for (int i = 0; i < k; i++) tt_dataset_next_train(&ds, in, tg);
        int64_t epoch, index;
        tt_dataset_get_position(&ds, &epoch, &index);
        TT_EXPECT(epoch == 0 && index == k, "position after %d: %lld %lld", k, (long long)epoch, (long long)index);
        int32_t(*exp_in)[8] = malloc(sizeof(int32_t[8]) * (size_t)m),
        (*exp_tg)[8] = malloc(sizeof(int32_t[8]) * (size_t)m);
        for (int i = 0; i < m; i++) tt_dataset_next_train(&ds, exp_in[i], exp_tg[i]);
        int64_t end_epoch, end_index;
        tt_dataset_get_position(&ds, &end_epoch, &end_index);

        tt_dataset resumed;
        tt_dataset_open(&resumed, paths, 2, 1000, 8, 2, 123);
        tt_dataset_set_position(&resumed, epoch, index);
        bool same = true;
        for (int i = 0; i < m; i++) {
            tt_dataset_next_train(&resumed, in, tg);
            same = same && memcmp(in, exp_in[i], sizeof in) == 0 && memcmp(tg, exp_tg[i], sizeof tg) == 0;
        }
        TT_EXPECT(same, "resumed after %d sequences: the next %d are identical", k, m);
        int64_t r_epoch, r_index;
        tt_dataset_get_position(&resumed, &r_epoch, &r_index);
        TT_EXPECT(r_epoch == end_epoch && r_index == end_index && end_epoch * ds.train_count + end_index == k + m,
                  "same end position");
        tt_dataset_close(&resumed);

        /* jumping straight into a later epoch equals walking there */
        tt_dataset jump;
        tt_dataset_open(&jump, paths, 2, 1000, 8, 2, 123);
        tt_dataset_set_position(&jump, end_epoch, end_index);
        TT_EXPECT(memcmp(jump.epoch_order, ds.epoch_order, sizeof(int64_t) * (size_t)ds.train_count) == 0,
                  "epoch %lld's order rebuilt directly", (long long)end_epoch);
        tt_dataset_close(&jump);
        free(exp_in);
        free(exp_tg);
        tt_dataset_close(&ds);
    }
    free(p);
    free(q);
}

/* ---- bad inputs ---- */

typedef struct open_args {
    const char *name;
    int64_t vocab, seq_len;
    double val;
} open_args;

static void open_one(void *arg) {
    const open_args *a = arg;
    char *p = tt_test_path(a->name);
    char *paths[1] = {p};
    tt_dataset ds;
    tt_dataset_open(&ds, paths, 1, a->vocab, a->seq_len, a->val, 1);
}

static void bad_position(void *arg) {
    (void)arg;
    char *p = tt_test_path("good.tok");
    char *paths[1] = {p};
    tt_dataset ds;
    tt_dataset_open(&ds, paths, 1, 300, 4, 0.0, 1);
    tt_dataset_set_position(&ds, 0, ds.train_count);
}

static void negative_epoch(void *arg) {
    (void)arg;
    char *p = tt_test_path("good.tok");
    char *paths[1] = {p};
    tt_dataset ds;
    tt_dataset_open(&ds, paths, 1, 300, 4, 0.0, 1);
    tt_dataset_set_position(&ds, -1, 0);
}

static void patch_u32(const char *name, long offset, uint32_t v) {
    char *p = tt_test_path(name);
    FILE *f = fopen(p, "r+b");
    unsigned char b[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16),
                          (unsigned char)(v >> 24)};
    fseek(f, offset, SEEK_SET);
    fwrite(b, 1, 4, f);
    fclose(f);
    free(p);
}

static void test_bad_inputs(void) {
    uint32_t tokens[13];
    for (int i = 0; i < 13; i++) tokens[i] = (uint32_t)(10 + i);
    char *good = tt_test_path("good.tok");
    tt_token_file_write(good, tokens, 13, 300, 299);

    open_args a = {"good.tok", 300, 4, 0.0}; /* each case below changes one thing of this good setup */

    tt_test_write_bytes("magic.tok", "NOTTOKENS_______________________________", 40);
    a.name = "magic.tok";
    tt_expect_die(open_one, &a, "not a tiertrain token file");
    tt_expect_die(open_one, &a, "magic.tok");

    tt_test_write_bytes("short.tok", "TTTOK", 5);
    a.name = "short.tok";
    tt_expect_die(open_one, &a, "truncated");

    char *p = tt_test_path("version.tok");
    tt_token_file_write(p, tokens, 13, 300, 299);
    free(p);
    patch_u32("version.tok", 8, 3);
    a.name = "version.tok";
    tt_expect_die(open_one, &a, "unsupported version 3 (this tiertrain reads versions 1 and 2)");

    p = tt_test_path("truncated.tok");
    tt_token_file_write(p, tokens, 13, 300, 299);
    TT_EXPECT(truncate(p, 32 + 4 * 10) == 0, "truncate");
    free(p);
    a.name = "truncated.tok";
    tt_expect_die(open_one, &a, "truncated");
    tt_expect_die(open_one, &a, "84 bytes"); /* expected size, 32 + 4 * 13 */
    tt_expect_die(open_one, &a, "has 72 bytes");

    p = tt_test_path("trailing.tok");
    tt_token_file_write(p, tokens, 13, 300, 299);
    free(p);
    patch_u32("trailing.tok", 16, 12); /* announce one token fewer than there are */
    a.name = "trailing.tok";
    tt_expect_die(open_one, &a, "trailing bytes");
    tt_expect_die(open_one, &a, "has 84 bytes");

    patch_u32("trailing.tok", 16, 0); /* announce an absurd count: no overflow, still an error */
    patch_u32("trailing.tok", 20, 0x80000000u);
    tt_expect_die(open_one, &a, "truncated");

    tokens[5] = 300;
    p = tt_test_path("badid.tok");
    tt_token_file_write(p, tokens, 13, 300, 299);
    free(p);
    a.name = "badid.tok";
    tt_expect_die(open_one, &a, "token 5 has id 300");
    tt_expect_die(open_one, &a, "vocab_size 300");
    tt_expect_die(open_one, &a, "badid.tok");
    tt_expect_die(open_one, &a, "re-tokenize");
    tokens[5] = 15;

    a.name = "good.tok";
    a.vocab = 200; /* the file's header says 300 */
    tt_expect_die(open_one, &a, "vocab_size 300 but the model's vocab_size is 200");
    a.vocab = 300;

    a.seq_len = 13; /* 13 tokens, needs 14 */
    tt_expect_die(open_one, &a, "hold 13 tokens but one sequence needs sequence_len + 1 = 14");
    a.seq_len = 12;
    a.val = 1; /* one sequence, all held out */
    tt_expect_die(open_one, &a, "val_set_size");
    a.seq_len = 4; /* 3 sequences */
    a.val = 3;
    tt_expect_die(open_one, &a, "leaving none to train on");
    a.val = 1e9;
    tt_expect_die(open_one, &a, "val_set_size");
    a.val = -0.5;
    tt_expect_die(open_one, &a, "val_set_size");
    a.val = 0.0;

    a.name = "missing.tok";
    tt_expect_die(open_one, &a, "missing.tok");

    tt_expect_die(bad_position, NULL, "trainer_state.json data position");
    tt_expect_die(negative_epoch, NULL, "trainer_state.json data position");
    free(good);
}

/* ---- byte tokenizer ---- */

static void tokenize_missing(void *arg) {
    char *out = tt_test_path("never.tok");
    char *inputs[2] = {tt_test_path("in_a.txt"), tt_test_path("no_such_file.txt")};
    (void)arg;
    tt_tokenize_bytes(inputs, 2, out);
}

static void tokenize_all_empty(void *arg) {
    char *out = tt_test_path("never.tok");
    char *inputs[1] = {tt_test_path("in_empty.txt")};
    (void)arg;
    tt_tokenize_bytes(inputs, 1, out);
}

static void test_byte_tokenizer(void) {
    tt_test_write_bytes("in_a.txt", "hi\n", 3);
    tt_test_write_bytes("in_empty.txt", "", 0);
    const unsigned char b_bytes[4] = {0x00, 0xff, 'x', 0x80};
    tt_test_write_bytes("in_b.bin", b_bytes, 4);
    char *out = tt_test_path("bytes.tok");
    char *inputs[3] = {tt_test_path("in_a.txt"), tt_test_path("in_empty.txt"), tt_test_path("in_b.bin")};
    tt_tokenize_bytes(inputs, 3, out);
    size_t bytes;
    unsigned char *b = read_all(out, &bytes);
    uint32_t expected[9] = {'h', 'i', '\n', 256, 0x00, 0xff, 'x', 0x80, 256};
    TT_EXPECT(bytes == 32 + 4 * 9 && memcmp(b, "TTTOKENS", 8) == 0, "byte token file size %zu", bytes);
    TT_EXPECT(le32(b + 12) == TT_BYTE_TOKENIZER_VOCAB && TT_BYTE_TOKENIZER_VOCAB == 257, "vocab 257");
    TT_EXPECT(le32(b + 16) == 9 && le32(b + 24) == TT_BYTE_TOKENIZER_EOS && TT_BYTE_TOKENIZER_EOS == 256,
              "count and eos");
    bool ids = bytes == 32 + 4 * 9;
    for (int i = 0; ids && i < 9; i++) ids = le32(b + 32 + 4 * i) == expected[i];
    TT_EXPECT(ids, "bytes then eos per document; the empty file skipped");
    free(b);
    /* and it loads against a model with vocab 257 */
    tt_dataset ds;
    char *paths[1] = {out};
    tt_dataset_open(&ds, paths, 1, TT_BYTE_TOKENIZER_VOCAB, 4, 0.0, 1);
    TT_EXPECT(ds.token_count == 9 && ds.tokens[3] == 256 && ds.tokens[8] == 256, "byte tokens load");
    tt_dataset_close(&ds);
    tt_expect_die(tokenize_missing, NULL, "no_such_file.txt: No such file or directory");
    tt_expect_die(tokenize_all_empty, NULL, "empty");
    char *never = tt_test_path("never.tok");
    TT_EXPECT(access(never, F_OK) != 0, "a failed tokenize writes no file");
    free(never);
    for (int i = 0; i < 3; i++) free(inputs[i]);
    free(out);
}

int main(int argc, char **argv) {
    (void)argc;
    (void)argv;
    tt_test_scratch_open("data");
    test_header_round_trip();
    test_packing();
    test_multi_file();
    test_eval_split();
    test_determinism();
    test_epochs_reshuffle();
    test_resume();
    test_bad_inputs();
    test_byte_tokenizer();
    tt_test_scratch_close();
    return tt_test_summary("data");
}
