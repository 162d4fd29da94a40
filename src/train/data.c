/* Token files and the training data loader (data.h, docs/token_format.md).
 *
 * Loading is two passes: every file's header and size are checked first (so a bad last file
 * fails before gigabytes are read), then the stream is allocated once, exactly, and every file
 * is read into it with a pread loop, converted from little-endian and checked id by id. */
#include "train/data.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/check.h"
#include "core/input_file.h"
#include "data/sequence_packing.h"
#include "ops/backend.h" /* TT_IGNORE_INDEX */

/* The eval split's permutation is seeded with seed ^ this, so it never coincides with an
 * epoch's shuffle or the init. */
#define TT_EVAL_SPLIT_SEED_XOR 0x5eed5eed5eed5eedull

static uint32_t get_u32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t get_u64(const unsigned char *p) { return (uint64_t)get_u32(p) | (uint64_t)get_u32(p + 4) << 32; }
/* ---- reading ---------------------------------------------------------------------------- */

typedef struct token_file_info {
    uint32_t version;
    uint64_t count;
    uint32_t vocab_size;
    uint32_t pad_id;     /* version 2 */
    uint64_t documents;  /* version 2 */
    uint64_t ids_offset; /* byte offset of the ids in the file */
    uint32_t eos_id;     /* written after every document (TT_TOKEN_NO_EOS: none) */
} token_file_info;

static int open_token_file(const char *path) {
    struct stat st; /* a FIFO or device is refused at once (input_file.h), never waited on */
    int fd = tt_try_open_regular_file(path, "a token file (docs/token_format.md)", &st);
    if (fd < 0)
        tt_die("cannot open token file %s: %s; check the datasets list in the run config", path, strerror(errno));
    return fd;
}

/* pread of exactly `bytes` at `offset`, in pieces of at most 1 GiB. */
static void read_exact(const char *path, int fd, void *dst, size_t bytes, uint64_t offset) {
    unsigned char *raw = dst;
    size_t done = 0;
    while (done < bytes) {
        size_t want = bytes - done < ((size_t)1 << 30) ? bytes - done : ((size_t)1 << 30);
        ssize_t got = pread(fd, raw + done, want, (off_t)(offset + done));
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0)
            tt_die("cannot read token file %s: %s", path,
                   got < 0 ? strerror(errno) : "it became shorter while being read");
        done += (size_t)got;
    }
}

/* Checks one file's header and size against each other and the model; returns its shape. */
static token_file_info check_header(const char *path, int64_t model_vocab_size) {
    int fd = open_token_file(path);
    struct stat st;
    if (fstat(fd, &st) != 0) tt_die("cannot stat token file %s: %s", path, strerror(errno));
    uint64_t size = (uint64_t)st.st_size;
    unsigned char header[TT_TOKEN_FILE_V2_HEADER_BYTES];
    size_t got = 0;
    while (got < sizeof header) {
        ssize_t r = pread(fd, header + got, sizeof header - got, (off_t)got);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) tt_die("cannot read token file %s: %s", path, strerror(errno));
        if (r == 0) break;
        got += (size_t)r;
    }
    close(fd);
    if (got >= 8 && memcmp(header, TT_TOKEN_FILE_MAGIC, 8) != 0)
        tt_die("%s: not a tiertrain token file (no TTTOKENS magic); make one with `tiertrain tokenize` or "
               "`tiertrain preprocess` (docs/token_format.md)",
               path);
    if (got < TT_TOKEN_FILE_HEADER_BYTES)
        tt_die("%s: truncated: %llu bytes is shorter than the 32-byte token file header; re-create the file "
               "(docs/token_format.md)",
               path, (unsigned long long)size);
    token_file_info info = {.version = get_u32(header + 8),
                            .count = get_u64(header + 16),
                            .vocab_size = get_u32(header + 12),
                            .ids_offset = TT_TOKEN_FILE_HEADER_BYTES,
                            .eos_id = get_u32(header + 24)};
    if (info.version != TT_TOKEN_FILE_VERSION && info.version != TT_TOKEN_FILE_VERSION_DOCUMENTS)
        tt_die("%s: unsupported version %u (this tiertrain reads versions 1 and 2); re-create the file with this "
               "tiertrain's tools (docs/token_format.md)",
               path, info.version);
    /* beyond 2^56 tokens or documents no file can match anyway; the limit keeps the sums from wrapping */
    const uint64_t limit = (uint64_t)1 << 56;
    bool absurd = info.count > limit;
    uint64_t expected;
    if (info.version == TT_TOKEN_FILE_VERSION) {
        expected = absurd ? UINT64_MAX : TT_TOKEN_FILE_HEADER_BYTES + 4 * info.count;
    } else {
        if (got < TT_TOKEN_FILE_V2_HEADER_BYTES)
            tt_die("%s: truncated: %llu bytes is shorter than the 48-byte header of a version 2 token file; re-create "
                   "the file (docs/token_format.md)",
                   path, (unsigned long long)size);
        info.pad_id = get_u32(header + 28);
        info.documents = get_u64(header + 32);
        absurd = absurd || info.documents > limit;
        info.ids_offset = TT_TOKEN_FILE_V2_HEADER_BYTES + 8 * (info.documents + 1);
        expected = absurd ? UINT64_MAX : info.ids_offset + 5 * info.count;
    }
    if (size < expected)
        tt_die("%s: truncated: the header announces %llu tokens%s, %s%llu bytes with the header, but the file has "
               "%llu bytes; re-create the file",
               path, (unsigned long long)info.count, info.version == 2 ? " and their documents" : "",
               absurd ? "more than " : "", (unsigned long long)(absurd ? ((uint64_t)1 << 58) : expected),
               (unsigned long long)size);
    if (size > expected)
        tt_die("%s: %llu trailing bytes: the header announces %llu tokens, %llu bytes with the header, but the file "
               "has %llu bytes; re-create the file",
               path, (unsigned long long)(size - expected), (unsigned long long)info.count,
               (unsigned long long)expected, (unsigned long long)size);
    if ((int64_t)info.vocab_size > model_vocab_size)
        tt_die("%s: written by a tokenizer with vocab_size %u but the model's vocab_size is %lld; re-tokenize with the "
               "model's tokenizer",
               path, info.vocab_size, (long long)model_vocab_size);
    if (info.version == TT_TOKEN_FILE_VERSION_DOCUMENTS && info.pad_id != TT_TOKEN_NO_PAD &&
        (int64_t)info.pad_id >= model_vocab_size)
        tt_die("%s: pad id %u is not below the model's vocab_size %lld; re-run `tiertrain preprocess` with the "
               "model's tokenizer",
               path, info.pad_id, (long long)model_vocab_size);
    return info;
}

/* Reads the ids of one (already checked) file into dst[count] and checks each against the model. */
static void read_tokens(const char *path, const token_file_info *info, uint32_t *dst, int64_t model_vocab_size) {
    int fd = open_token_file(path);
    const uint64_t count = info->count;
    read_exact(path, fd, dst, tt_mul_size((size_t)count, 4, "token file size"), info->ids_offset);
    close(fd);
    const unsigned char *raw = (const unsigned char *)dst;
    for (uint64_t i = 0; i < count; i++) {
        uint32_t id = get_u32(raw + 4 * i); /* the file is little-endian; a no-op on little-endian hosts */
        if ((int64_t)id >= model_vocab_size)
            tt_die("%s: token %llu has id %u, not below the model's vocab_size %lld (offset counted in tokens from "
                   "0 after the header); re-tokenize with the model's tokenizer",
                   path, (unsigned long long)i, id, (long long)model_vocab_size);
        dst[i] = id;
    }
}

/* Version 2: the document starts (shifted by `base`, the file's first token in the stream) into
 * starts[0..documents] and the label bytes into labels[count]; checks both. */
static void read_documents(const char *path, const token_file_info *info, uint64_t base, uint64_t *starts,
                           uint8_t *labels, int64_t seq_len) {
    int fd = open_token_file(path);
    size_t offset_bytes = tt_mul_size((size_t)info->documents + 1, 8, "document index");
    unsigned char *raw = tt_xmalloc(offset_bytes, "the document index");
    read_exact(path, fd, raw, offset_bytes, TT_TOKEN_FILE_V2_HEADER_BYTES);
    read_exact(path, fd, labels, (size_t)info->count, info->ids_offset + 4 * info->count);
    close(fd);
    for (uint64_t d = 0; d <= info->documents; d++) {
        uint64_t start = get_u64(raw + 8 * d);
        bool bad = (d == 0 && start != 0) || (d == info->documents && start != info->count) ||
                   (d > 0 && start < starts[d - 1] - base) || start > info->count;
        if (bad) {
            free(raw); /* released before the run ends, for a caller that survives tt_die (the fuzzer) */
            tt_die("%s: document start %llu is %llu, which does not fit (starts begin at 0, ascend and end at the "
                   "token count %llu); re-create the file with `tiertrain preprocess`",
                   path, (unsigned long long)d, (unsigned long long)start, (unsigned long long)info->count);
        }
        if (d > 0 && (int64_t)(start - (starts[d - 1] - base)) > seq_len) {
            free(raw);
            tt_die("%s: document %llu has %llu tokens, more than sequence_len %lld; it was prepared for a longer "
                   "sequence_len: re-run `tiertrain preprocess` with this sequence_len",
                   path, (unsigned long long)d - 1, (unsigned long long)(start - (starts[d - 1] - base)),
                   (long long)seq_len);
        }
        starts[d] = base + start;
    }
    free(raw);
    for (uint64_t i = 0; i < info->count; i++)
        if (labels[i] > 1)
            tt_die("%s: label byte of token %llu is %u; labels are 0 (masked) or 1 (trained); re-create the file", path,
                   (unsigned long long)i, labels[i]);
}

/* Epoch e's order depends only on (seed, e), so a resumed run rebuilds it directly.
 * tt_rng_seed runs the value through splitmix64, which mixes it. */
static void build_epoch_order(tt_dataset *ds) {
    memcpy(ds->epoch_order, ds->train_order_base, sizeof(int64_t) * (size_t)ds->train_count);
    tt_rng rng;
    tt_rng_seed(&rng, ds->seed * 1000003ull + (uint64_t)ds->epoch + 1);
    tt_rng_shuffle(&rng, ds->epoch_order, ds->train_count);
}

/* Version 1 files with sample packing: the documents of the stream [first, first + count) of `path`, each ending
 * after an eos id (a last one without eos ends at the file's end), appended to ds->doc_starts. */
static void split_stream_documents(tt_dataset *ds, const char *path, const token_file_info *info, uint64_t first,
                                   uint64_t *capacity) {
    if (info->eos_id == TT_TOKEN_NO_EOS)
        tt_die("%s: sample_packing packs documents, but this token file marks none (its header has no eos id, so it "
               "is one stream); re-make it with `tiertrain tokenize`, which ends every document with eos, or turn "
               "sample_packing off",
               path);
    for (uint64_t i = 0; i < info->count; i++) {
        const bool ends = ds->tokens[first + i] == info->eos_id || i + 1 == info->count;
        if (!ends) continue;
        if ((uint64_t)ds->document_count + 2 > *capacity) {
            *capacity = *capacity ? 2 * *capacity : 1024;
            ds->doc_starts = tt_xrealloc(ds->doc_starts, tt_mul_size((size_t)*capacity, sizeof(uint64_t), "documents"),
                                         "the document index");
        }
        if (ds->document_count == 0) ds->doc_starts[0] = 0;
        ds->doc_starts[++ds->document_count] = first + i + 1;
    }
}

/* Reads and checks every file into ds (tokens; documents, labels and pad id of version 2 files; with
 * split_streams, version 1 files' documents at their eos ids) and sets sequence_count. */
static void load_files(tt_dataset *ds, char *const *paths, int path_count, int64_t model_vocab_size, int64_t seq_len,
                       double val_set_size, uint64_t seed, bool split_streams) {
    memset(ds, 0, sizeof(*ds));
    if (path_count <= 0) tt_die("no datasets given; list token files under datasets in the run config");
    if (seq_len < 1) tt_die("sequence_len %lld must be at least 1", (long long)seq_len);
    if (model_vocab_size < 1) tt_die("the model's vocab_size %lld must be at least 1", (long long)model_vocab_size);
    if (!(val_set_size >= 0) || isinf(val_set_size))
        tt_die("val_set_size %g must be a fraction in [0, 1) or a count of sequences", val_set_size);
    ds->seq_len = seq_len;
    ds->seed = seed;

    token_file_info *info = tt_xcalloc((size_t)path_count, sizeof(token_file_info), "token file list");
    ds->file_headers = info;
    uint64_t total = 0, documents = 0;
    for (int i = 0; i < path_count; i++) {
        info[i] = check_header(paths[i], model_vocab_size);
        if (info[i].version != info[0].version)
            tt_die("%s is a version %u token file but %s is version %u: version 1 files are one stream cut into "
                   "windows, version 2 files (from `tiertrain preprocess`) one document per sequence, and a run uses "
                   "one of the two; list files of one version",
                   paths[i], info[i].version, paths[0], info[0].version);
        if (info[i].count > UINT64_MAX / 8 - total) tt_die("the datasets hold more tokens than fit in memory");
        total += info[i].count;
        documents += info[i].documents;
        if (info[i].vocab_size > ds->tokenizer_vocab_size) ds->tokenizer_vocab_size = info[i].vocab_size;
    }
    ds->documents = info[0].version == TT_TOKEN_FILE_VERSION_DOCUMENTS;
    /* a stream cut into windows needs one window; packed into sequences, any document is one (padded) */
    if (!ds->documents && !split_streams && total < (uint64_t)seq_len + 1)
        tt_die("the datasets hold %llu tokens but one sequence needs sequence_len + 1 = %lld; lower sequence_len or "
               "add data",
               (unsigned long long)total, (long long)seq_len + 1);
    if (ds->documents && documents == 0) tt_die("the datasets hold no documents; add data");
    ds->tokens = tt_xmalloc(tt_mul_size((size_t)total ? (size_t)total : 1, sizeof(uint32_t), "token stream"),
                            "the token stream");
    if (ds->documents) {
        ds->labels = tt_xmalloc((size_t)total ? (size_t)total : 1, "the label mask");
        ds->doc_starts =
            tt_xmalloc(tt_mul_size((size_t)documents + 1, sizeof(uint64_t), "document index"), "the document index");
        ds->pad_id = info[0].pad_id == TT_TOKEN_NO_PAD ? 0 : info[0].pad_id;
    }
    uint64_t doc_base = 0, stream_doc_capacity = 0;
    for (int i = 0; i < path_count; i++) {
        read_tokens(paths[i], &info[i], ds->tokens + ds->token_count, model_vocab_size);
        if (ds->documents) {
            read_documents(paths[i], &info[i], ds->token_count, ds->doc_starts + doc_base, ds->labels + ds->token_count,
                           seq_len);
            doc_base += info[i].documents;
        } else if (split_streams) {
            split_stream_documents(ds, paths[i], &info[i], ds->token_count, &stream_doc_capacity);
        }
        ds->token_count += info[i].count;
    }
    free(info);
    ds->file_headers = NULL;
    if (ds->documents) ds->document_count = (int64_t)documents;
    ds->sequence_count = ds->documents ? (int64_t)documents : (int64_t)((ds->token_count - 1) / (uint64_t)seq_len);
}

/* The eval split: a seeded permutation of `count` items holds out val_set_size of them (sorted); the rest, sorted,
 * are the training items. `what` names the items for the error. */
static void split_items(int64_t count, double val_set_size, uint64_t seed, const char *what, int64_t **eval_items,
                        int64_t *eval_count_out, int64_t **train_items, int64_t *train_count_out) {

    int64_t eval_count;
    if (val_set_size < 1.0) {
        eval_count = (int64_t)floor(val_set_size * (double)count);
    } else {
        eval_count = val_set_size >= (double)count ? count : (int64_t)val_set_size;
    }
    if (eval_count >= count)
        tt_die(
            "val_set_size %g holds out %lld of the %lld %s, leaving none to train on; lower val_set_size or add data",
            val_set_size, (long long)eval_count, (long long)count, what);

    int64_t *all =
        tt_xmalloc(tt_mul_size((size_t)(count ? count : 1), sizeof(int64_t), "sequence index"), "the sequence index");
    for (int64_t i = 0; i < count; i++) all[i] = i;
    tt_rng rng;
    tt_rng_seed(&rng, seed ^ TT_EVAL_SPLIT_SEED_XOR);
    tt_rng_shuffle(&rng, all, count);
    *eval_count_out = eval_count;
    *train_count_out = count - eval_count;
    *eval_items = tt_xmalloc(sizeof(int64_t) * (size_t)(eval_count ? eval_count : 1), "the eval index");
    *train_items =
        tt_xmalloc(sizeof(int64_t) * (size_t)(count - eval_count ? count - eval_count : 1), "the train index");
    /* the first eval_count of the shuffle are the eval set; both sets in ascending order, by one
     * pass over a mark per item (linear: sorting them took seconds for a 256 MiB file) */
    uint8_t *is_eval = tt_xcalloc((size_t)(count ? count : 1), 1, "the eval split");
    for (int64_t i = 0; i < eval_count; i++) is_eval[all[i]] = 1;
    int64_t eval_at = 0, train_at = 0;
    for (int64_t i = 0; i < count; i++) {
        if (is_eval[i]) (*eval_items)[eval_at++] = i;
        else (*train_items)[train_at++] = i;
    }
    free(is_eval);
    free(all);
}

void tt_dataset_open(tt_dataset *ds, char *const *paths, int path_count, int64_t model_vocab_size, int64_t seq_len,
                     double val_set_size, uint64_t seed) {
    load_files(ds, paths, path_count, model_vocab_size, seq_len, val_set_size, seed, false);
    split_items(ds->sequence_count, val_set_size, seed, "sequences (documents, with JSON datasets)",
                &ds->eval_sequences, &ds->eval_count, &ds->train_order_base, &ds->train_count);
    ds->epoch_order = tt_xmalloc(sizeof(int64_t) * (size_t)ds->train_count, "the epoch order");
    build_epoch_order(ds);
}

void tt_dataset_evaluate_all(tt_dataset *ds) {
    TT_CHECK(!ds->packed, "every sequence as eval: an unpacked dataset");
    free(ds->eval_sequences);
    ds->eval_count = ds->sequence_count;
    ds->eval_sequences = tt_xmalloc(sizeof(int64_t) * (size_t)(ds->eval_count ? ds->eval_count : 1), "the eval index");
    for (int64_t i = 0; i < ds->eval_count; i++) ds->eval_sequences[i] = i;
}

/* Epoch e's packing, as axolotl's multipack sampler packs an epoch: the training documents in epoch e's seeded
 * order (the same (seed, e) as an unpacked epoch's order, so a resumed run packs it again directly), first-fit in
 * that order into sequences of seq_len tokens; out->members are piece indices. */
static void pack_epoch(const tt_dataset *ds, int64_t epoch, tt_packing *out) {
    const int64_t n = ds->packing.train_documents;
    int64_t *order = tt_xmalloc(sizeof(int64_t) * (size_t)(n ? n : 1), "the epoch's documents");
    int64_t *lengths = tt_xmalloc(sizeof(int64_t) * (size_t)(n ? n : 1), "document lengths");
    memcpy(order, ds->train_pieces, sizeof(int64_t) * (size_t)n);
    tt_rng rng;
    tt_rng_seed(&rng, ds->seed * 1000003ull + (uint64_t)epoch + 1);
    tt_rng_shuffle(&rng, order, n);
    for (int64_t k = 0; k < n; k++) lengths[k] = ds->piece_length[order[k]];
    tt_pack_in_order(lengths, n, ds->seq_len, ds->pack_max_per_bin, ds->pack_group_size, out);
    for (int64_t m = 0; m < n; m++) out->members[m] = order[out->members[m]];
    free(lengths);
    free(order);
}

/* The current epoch's training sequences: its packing, or its shuffle of the sequences. */
static void enter_epoch(tt_dataset *ds) {
    if (!ds->packed) {
        build_epoch_order(ds);
        return;
    }
    if (ds->packed_epoch == ds->epoch) return;
    tt_packing packing;
    pack_epoch(ds, ds->epoch, &packing);
    free(ds->bin_start);
    free(ds->bin_documents);
    ds->bin_start = packing.bin_start;
    ds->bin_documents = packing.members;
    ds->train_count = ds->packing.train_sequences = packing.bin_count;
    ds->packed_epoch = ds->epoch;
}

void tt_dataset_open_packed(tt_dataset *ds, char *const *paths, int path_count, int64_t model_vocab_size,
                            int64_t seq_len, double val_set_size, uint64_t seed, bool truncate_long,
                            int64_t max_documents_per_sequence, int64_t group_size) {
    if (max_documents_per_sequence < 1 || group_size < 1)
        tt_die("sample_packing_bin_size (%lld) and sample_packing_group_size (%lld) must be at least 1",
               (long long)max_documents_per_sequence, (long long)group_size);
    load_files(ds, paths, path_count, model_vocab_size, seq_len, val_set_size, seed, true);
    ds->packed = true;
    ds->pack_max_per_bin = max_documents_per_sequence;
    ds->pack_group_size = group_size;
    tt_packing_stats *st = &ds->packing;
    /* the documents that are packed ("pieces"): all of them, long ones of token files truncated or dropped (a
     * prepared file's were, when it was made) */
    const int64_t documents = ds->document_count;
    ds->piece_first = tt_xmalloc(sizeof(uint64_t) * (size_t)(documents ? documents : 1), "packed documents");
    ds->piece_length = tt_xmalloc(sizeof(int64_t) * (size_t)(documents ? documents : 1), "packed documents");
    int64_t pieces = 0;
    for (int64_t d = 0; d < documents; d++) {
        int64_t length = (int64_t)(ds->doc_starts[d + 1] - ds->doc_starts[d]);
        if (length == 0) continue;
        if (length > seq_len) {
            if (!truncate_long) {
                st->dropped++;
                continue;
            }
            length = seq_len;
            st->truncated++;
        }
        ds->piece_first[pieces] = ds->doc_starts[d];
        ds->piece_length[pieces++] = length;
    }
    if (pieces == 0)
        tt_die("sample_packing: no document is left to pack (%lld longer than sequence_len %lld were dropped); raise "
               "sequence_len or set excess_length_strategy: truncate",
               (long long)st->dropped, (long long)seq_len);
    ds->piece_count = pieces;
    /* the eval documents are held out once and packed once (first-fit decreasing); the training documents are
     * packed anew each epoch (enter_epoch) */
    int64_t *eval_items;
    split_items(pieces, val_set_size, seed, "documents (sample_packing holds out documents)", &eval_items,
                &st->eval_documents, &ds->train_pieces, &st->train_documents);
    for (int64_t k = 0; k < st->train_documents; k++) st->train_tokens += ds->piece_length[ds->train_pieces[k]];
    for (int64_t k = 0; k < st->eval_documents; k++) st->eval_tokens += ds->piece_length[eval_items[k]];
    int64_t *lengths = tt_xmalloc(sizeof(int64_t) * (size_t)(st->eval_documents ? st->eval_documents : 1), "lengths");
    for (int64_t k = 0; k < st->eval_documents; k++) lengths[k] = ds->piece_length[eval_items[k]];
    tt_packing eval;
    tt_pack_documents(lengths, st->eval_documents, seq_len, &eval);
    for (int64_t m = 0; m < st->eval_documents; m++) eval.members[m] = eval_items[eval.members[m]];
    free(lengths);
    free(eval_items);
    ds->eval_bin_start = eval.bin_start;
    ds->eval_bin_documents = eval.members;
    ds->eval_count = st->eval_sequences = eval.bin_count;
    ds->eval_sequences = tt_xmalloc(sizeof(int64_t) * (size_t)(ds->eval_count ? ds->eval_count : 1), "the eval index");
    for (int64_t i = 0; i < ds->eval_count; i++) ds->eval_sequences[i] = i;
    ds->packed_epoch = -1;
    enter_epoch(ds);
}

int64_t tt_dataset_epoch_sequences(const tt_dataset *ds, int64_t epoch) {
    if (!ds->packed) return ds->train_count;
    if (epoch == ds->packed_epoch) return ds->train_count;
    tt_packing packing;
    pack_epoch(ds, epoch, &packing);
    const int64_t bins = packing.bin_count;
    tt_packing_free(&packing);
    return bins;
}

double tt_dataset_sequences_in_epochs(const tt_dataset *ds, double epochs) {
    if (!ds->packed || !(epochs > 0)) return epochs * (double)ds->train_count;
    double sequences = 0;
    int64_t e = 0;
    for (; (double)(e + 1) <= epochs; e++) sequences += (double)tt_dataset_epoch_sequences(ds, e);
    if ((double)e < epochs) sequences += (epochs - (double)e) * (double)tt_dataset_epoch_sequences(ds, e);
    return sequences;
}

void tt_dataset_close(tt_dataset *ds) {
    free(ds->file_headers);
    free(ds->tokens);
    free(ds->labels);
    free(ds->doc_starts);
    free(ds->train_order_base);
    free(ds->eval_sequences);
    free(ds->epoch_order);
    free(ds->piece_first);
    free(ds->piece_length);
    free(ds->bin_start);
    free(ds->bin_documents);
    free(ds->train_pieces);
    free(ds->eval_bin_start);
    free(ds->eval_bin_documents);
    memset(ds, 0, sizeof(*ds));
}

/* A bin of packed documents (bin of the packing bin_start / bin_documents): each document's tokens with targets
 * inside it only (its last token predicts nothing, as when it is a sequence of its own) and positions from 0; then
 * padding, which is a document of its own too. */
static void fill_packed(const tt_dataset *ds, const int64_t *bin_start, const int64_t *bin_documents, int64_t bin,
                        int32_t *inputs, int32_t *targets, int32_t *positions) {
    int64_t t = 0;
    for (int64_t m = bin_start[bin]; m < bin_start[bin + 1]; m++) {
        const int64_t piece = bin_documents[m], n = ds->piece_length[piece];
        const uint64_t first = ds->piece_first[piece];
        for (int64_t k = 0; k < n; k++, t++) {
            const bool trained = k + 1 < n && (!ds->labels || ds->labels[first + (uint64_t)k + 1]);
            inputs[t] = (int32_t)ds->tokens[first + (uint64_t)k];
            targets[t] = trained ? (int32_t)ds->tokens[first + (uint64_t)k + 1] : TT_IGNORE_INDEX;
            if (positions) positions[t] = (int32_t)k;
        }
    }
    TT_CHECK(t <= ds->seq_len, "bin %lld holds %lld tokens, more than %lld", (long long)bin, (long long)t,
             (long long)ds->seq_len);
    for (int64_t k = 0; t < ds->seq_len; t++, k++) {
        inputs[t] = (int32_t)ds->pad_id;
        targets[t] = TT_IGNORE_INDEX;
        if (positions) positions[t] = (int32_t)k;
    }
}

/* Sequence `sequence` of an unpacked dataset. */
static void fill_sequence(const tt_dataset *ds, int64_t sequence, int32_t *inputs, int32_t *targets,
                          int32_t *positions) {
    TT_CHECK(sequence >= 0 && sequence < ds->sequence_count, "sequence %lld of %lld", (long long)sequence,
             (long long)ds->sequence_count);
    if (positions)
        for (int64_t t = 0; t < ds->seq_len; t++) positions[t] = (int32_t)t;
    if (ds->documents) { /* one document, padded: axolotl without sample packing */
        const uint64_t first = ds->doc_starts[sequence], n = ds->doc_starts[sequence + 1] - first;
        for (int64_t t = 0; t < ds->seq_len; t++) {
            const bool inside = (uint64_t)t < n, next_inside = (uint64_t)t + 1 < n;
            inputs[t] = inside ? (int32_t)ds->tokens[first + (uint64_t)t] : (int32_t)ds->pad_id;
            targets[t] = next_inside && ds->labels[first + (uint64_t)t + 1]
                             ? (int32_t)ds->tokens[first + (uint64_t)t + 1]
                             : TT_IGNORE_INDEX;
        }
        return;
    }
    const uint32_t *start = ds->tokens + (size_t)sequence * (size_t)ds->seq_len;
    for (int64_t t = 0; t < ds->seq_len; t++) {
        inputs[t] = (int32_t)start[t];
        targets[t] = (int32_t)start[t + 1];
    }
}

void tt_dataset_next_train(tt_dataset *ds, int32_t *inputs, int32_t *targets) {
    tt_dataset_next_train_positions(ds, inputs, targets, NULL);
}

void tt_dataset_next_train_positions(tt_dataset *ds, int32_t *inputs, int32_t *targets, int32_t *positions) {
    TT_CHECK(ds->train_count > 0 && ds->index_in_epoch >= 0 && ds->index_in_epoch < ds->train_count,
             "data position %lld of %lld", (long long)ds->index_in_epoch, (long long)ds->train_count);
    if (ds->packed) /* this epoch's packing, its sequences in the order they were opened (axolotl's) */
        fill_packed(ds, ds->bin_start, ds->bin_documents, ds->index_in_epoch, inputs, targets, positions);
    else fill_sequence(ds, ds->epoch_order[ds->index_in_epoch], inputs, targets, positions);
    if (++ds->index_in_epoch == ds->train_count) {
        ds->epoch++;
        ds->index_in_epoch = 0;
        enter_epoch(ds);
    }
}

void tt_dataset_get_eval(const tt_dataset *ds, int64_t i, int32_t *inputs, int32_t *targets) {
    tt_dataset_get_eval_positions(ds, i, inputs, targets, NULL);
}

void tt_dataset_get_eval_positions(const tt_dataset *ds, int64_t i, int32_t *inputs, int32_t *targets,
                                   int32_t *positions) {
    TT_CHECK(i >= 0 && i < ds->eval_count, "eval sequence %lld of %lld", (long long)i, (long long)ds->eval_count);
    if (ds->packed)
        fill_packed(ds, ds->eval_bin_start, ds->eval_bin_documents, ds->eval_sequences[i], inputs, targets, positions);
    else fill_sequence(ds, ds->eval_sequences[i], inputs, targets, positions);
}

void tt_dataset_get_position(const tt_dataset *ds, int64_t *epoch, int64_t *index_in_epoch) {
    *epoch = ds->epoch;
    *index_in_epoch = ds->index_in_epoch;
}

void tt_dataset_set_position(tt_dataset *ds, int64_t epoch, int64_t index_in_epoch) {
    if (epoch < 0 || index_in_epoch < 0)
        tt_die("trainer_state.json data position (epoch %lld, index %lld) is negative; the checkpoint is damaged",
               (long long)epoch, (long long)index_in_epoch);
    const bool same_epoch = epoch == ds->epoch;
    ds->epoch = epoch;
    if (!same_epoch) enter_epoch(ds); /* packed: the epoch's own packing, so its sequence count */
    if (index_in_epoch >= ds->train_count)
        tt_die("trainer_state.json data position (epoch %lld, index %lld) does not fit this dataset (%lld training "
               "sequences%s, so the index must be in [0, %lld)); resume with the same datasets, sequence_len, "
               "val_set_size, sample_packing and seed",
               (long long)epoch, (long long)index_in_epoch, (long long)ds->train_count,
               ds->packed ? " in that epoch's packing" : "", (long long)ds->train_count);
    ds->index_in_epoch = index_in_epoch;
}
