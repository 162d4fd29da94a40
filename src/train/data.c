#include "train/data.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/check.h"
#include "model/safetensors.h"

static void put_u32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void put_u64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static uint32_t get_u32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t get_u64(const unsigned char *p) { return (uint64_t)get_u32(p) | (uint64_t)get_u32(p + 4) << 32; }

void tt_token_file_write(const char *path, const uint32_t *tokens, uint64_t count, uint32_t vocab_size,
                         uint32_t eos_id) {
    size_t bytes = TT_TOKEN_FILE_HEADER_BYTES + tt_mul_size((size_t)count, 4, "token file size");
    unsigned char *buf = tt_xmalloc(bytes, "token file");
    memset(buf, 0, TT_TOKEN_FILE_HEADER_BYTES);
    memcpy(buf, TT_TOKEN_FILE_MAGIC, 8);
    put_u32(buf + 8, TT_TOKEN_FILE_VERSION);
    put_u32(buf + 12, vocab_size);
    put_u64(buf + 16, count);
    put_u32(buf + 24, eos_id);
    for (uint64_t i = 0; i < count; i++) put_u32(buf + TT_TOKEN_FILE_HEADER_BYTES + 4 * i, tokens[i]);
    tt_write_file_atomic(path, buf, bytes);
    free(buf);
}

/* Reads one token file, checks it, and appends its ids to the stream. */
static void append_file(tt_dataset *ds, const char *path, int64_t model_vocab_size, uint64_t *capacity) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) tt_die("cannot open token file %s: %s (check datasets in the config)", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) tt_die("cannot stat %s: %s", path, strerror(errno));
    unsigned char header[TT_TOKEN_FILE_HEADER_BYTES];
    if ((size_t)st.st_size < TT_TOKEN_FILE_HEADER_BYTES || pread(fd, header, sizeof header, 0) != (ssize_t)sizeof header)
        tt_die("%s: %lld bytes is too short for a token file (32-byte header); see docs/token_format.md", path,
               (long long)st.st_size);
    if (memcmp(header, TT_TOKEN_FILE_MAGIC, 8) != 0)
        tt_die("%s: not a tiertrain token file (no TTTOKENS magic); make one with `tiertrain tokenize` or "
               "tools/tokenize_hf.py (docs/token_format.md)",
               path);
    uint32_t version = get_u32(header + 8), vocab = get_u32(header + 12);
    uint64_t count = get_u64(header + 16);
    if (version != TT_TOKEN_FILE_VERSION)
        tt_die("%s: token file version %u is not supported (this tiertrain reads version %u)", path, version,
               TT_TOKEN_FILE_VERSION);
    uint64_t expected = TT_TOKEN_FILE_HEADER_BYTES + 4 * count;
    if (count > ((uint64_t)1 << 60) || (uint64_t)st.st_size != expected)
        tt_die("%s: the header announces %llu tokens (%llu bytes) but the file has %lld bytes; it is %s", path,
               (unsigned long long)count, (unsigned long long)expected, (long long)st.st_size,
               (uint64_t)st.st_size < expected ? "truncated" : "followed by trailing bytes");
    if ((int64_t)vocab > model_vocab_size)
        tt_die("%s: written by a tokenizer with %u tokens but the model's vocab_size is %lld; re-tokenize with the "
               "model's tokenizer",
               path, vocab, (long long)model_vocab_size);
    if (ds->token_count + count > *capacity) {
        while (ds->token_count + count > *capacity) *capacity = *capacity ? 2 * *capacity : 1 << 20;
        ds->tokens = tt_xrealloc(ds->tokens, tt_mul_size((size_t)*capacity, 4, "token stream"), "token stream");
    }
    uint32_t *dst = ds->tokens + ds->token_count;
    size_t bytes = (size_t)count * 4, done = 0;
    while (done < bytes) {
        ssize_t got = pread(fd, (unsigned char *)dst + done, bytes - done, (off_t)(TT_TOKEN_FILE_HEADER_BYTES + done));
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) tt_die("cannot read %s: %s", path, got < 0 ? strerror(errno) : "unexpected end of file");
        done += (size_t)got;
    }
    close(fd);
    for (uint64_t i = 0; i < count; i++) {
        uint32_t id = get_u32((const unsigned char *)&dst[i]); /* the file is little-endian */
        if ((int64_t)id >= model_vocab_size)
            tt_die("%s: token %llu has id %u, not below the model's vocab_size %lld; re-tokenize with the model's "
                   "tokenizer",
                   path, (unsigned long long)i, id, (long long)model_vocab_size);
        dst[i] = id;
    }
    ds->token_count += count;
}

static int compare_int64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* Epoch e's order depends only on (seed, e), so a resumed run rebuilds it directly. */
static void build_epoch_order(tt_dataset *ds) {
    memcpy(ds->epoch_order, ds->train_order_base, sizeof(int64_t) * (size_t)ds->train_count);
    tt_rng rng;
    tt_rng_seed(&rng, ds->seed * 1000003ull + (uint64_t)ds->epoch + 1);
    tt_rng_shuffle(&rng, ds->epoch_order, ds->train_count);
}

void tt_dataset_open(tt_dataset *ds, char *const *paths, int path_count, int64_t model_vocab_size, int64_t seq_len,
                     double val_set_size, uint64_t seed) {
    memset(ds, 0, sizeof(*ds));
    ds->seq_len = seq_len;
    ds->seed = seed;
    uint64_t capacity = 0;
    for (int i = 0; i < path_count; i++) append_file(ds, paths[i], model_vocab_size, &capacity);
    if (ds->token_count < (uint64_t)seq_len + 1)
        tt_die("the datasets hold %llu tokens but one sequence needs sequence_len + 1 = %lld; lower sequence_len or "
               "add data",
               (unsigned long long)ds->token_count, (long long)seq_len + 1);
    ds->sequence_count = (int64_t)((ds->token_count - 1) / (uint64_t)seq_len);

    int64_t eval_count = val_set_size < 1.0 ? (int64_t)(val_set_size * (double)ds->sequence_count)
                                            : (int64_t)val_set_size;
    if (eval_count >= ds->sequence_count)
        tt_die("val_set_size %g holds out %lld of the %lld sequences, leaving none to train on; lower val_set_size",
               val_set_size, (long long)eval_count, (long long)ds->sequence_count);
    int64_t *all = tt_xmalloc(sizeof(int64_t) * (size_t)ds->sequence_count, "sequence index");
    for (int64_t i = 0; i < ds->sequence_count; i++) all[i] = i;
    tt_rng rng;
    tt_rng_seed(&rng, seed ^ 0x5eed5eed5eed5eedull);
    tt_rng_shuffle(&rng, all, ds->sequence_count);
    ds->eval_count = eval_count;
    ds->train_count = ds->sequence_count - eval_count;
    ds->eval_sequences = tt_xmalloc(sizeof(int64_t) * (size_t)(eval_count ? eval_count : 1), "eval index");
    ds->train_order_base = tt_xmalloc(sizeof(int64_t) * (size_t)ds->train_count, "train index");
    ds->epoch_order = tt_xmalloc(sizeof(int64_t) * (size_t)ds->train_count, "epoch order");
    memcpy(ds->eval_sequences, all, sizeof(int64_t) * (size_t)eval_count);
    memcpy(ds->train_order_base, all + eval_count, sizeof(int64_t) * (size_t)ds->train_count);
    qsort(ds->eval_sequences, (size_t)eval_count, sizeof(int64_t), compare_int64);
    qsort(ds->train_order_base, (size_t)ds->train_count, sizeof(int64_t), compare_int64);
    free(all);
    build_epoch_order(ds);
}

void tt_dataset_close(tt_dataset *ds) {
    free(ds->tokens);
    free(ds->train_order_base);
    free(ds->eval_sequences);
    free(ds->epoch_order);
    memset(ds, 0, sizeof(*ds));
}

static void fill_sequence(const tt_dataset *ds, int64_t sequence, int32_t *inputs, int32_t *targets) {
    const uint32_t *start = ds->tokens + (size_t)sequence * (size_t)ds->seq_len;
    for (int64_t t = 0; t < ds->seq_len; t++) {
        inputs[t] = (int32_t)start[t];
        targets[t] = (int32_t)start[t + 1];
    }
}

void tt_dataset_next_train(tt_dataset *ds, int32_t *inputs, int32_t *targets) {
    fill_sequence(ds, ds->epoch_order[ds->index_in_epoch], inputs, targets);
    if (++ds->index_in_epoch == ds->train_count) {
        ds->epoch++;
        ds->index_in_epoch = 0;
        build_epoch_order(ds);
    }
}

void tt_dataset_get_eval(const tt_dataset *ds, int64_t i, int32_t *inputs, int32_t *targets) {
    TT_CHECK(i >= 0 && i < ds->eval_count, "eval sequence %lld of %lld", (long long)i, (long long)ds->eval_count);
    fill_sequence(ds, ds->eval_sequences[i], inputs, targets);
}

void tt_dataset_get_position(const tt_dataset *ds, int64_t *epoch, int64_t *index_in_epoch) {
    *epoch = ds->epoch;
    *index_in_epoch = ds->index_in_epoch;
}

void tt_dataset_set_position(tt_dataset *ds, int64_t epoch, int64_t index_in_epoch) {
    if (epoch < 0 || index_in_epoch < 0 || index_in_epoch >= ds->train_count)
        tt_die("trainer_state.json data position (epoch %lld, index %lld) does not fit this dataset (%lld training "
               "sequences); resume with the same datasets, sequence_len, val_set_size and seed",
               (long long)epoch, (long long)index_in_epoch, (long long)ds->train_count);
    ds->epoch = epoch;
    ds->index_in_epoch = index_in_epoch;
    build_epoch_order(ds);
}
