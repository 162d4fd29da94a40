/* Token files (docs/token_format.md): the writers. Version 1 holds one stream of ids; version 2 adds document
 * starts, a label byte per token and a pad id (tokenized, masked datasets: tiertrain preprocess). Files are
 * written under a temporary name and renamed when complete, so a crash never leaves half a file. The reader is
 * the training data loader (train/data.c). */
#include "data/token_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/check.h"

static void put_u32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void put_u64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* ---- writing ---------------------------------------------------------------------------- */

/* An atomic file being written: path.tmp, renamed over path on commit. Its own small copy of
 * tt_write_file_atomic's contract, streaming so a large token file needs no second buffer. */
typedef struct atomic_file {
    const char *path;
    char *tmp_path;
    int fd;
} atomic_file;

static void atomic_fail(atomic_file *f, const char *what) {
    int saved = errno;
    if (f->fd >= 0) close(f->fd);
    unlink(f->tmp_path);
    tt_die("cannot write %s (%s %s): %s; check that the directory exists, is writable and has space", f->path, what,
           f->tmp_path, strerror(saved));
}

static void atomic_open(atomic_file *f, const char *path) {
    size_t n = strlen(path);
    f->path = path;
    f->tmp_path = tt_xmalloc(n + 5, "a temporary file name");
    memcpy(f->tmp_path, path, n);
    memcpy(f->tmp_path + n, ".tmp", 5);
    f->fd = open(f->tmp_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (f->fd < 0) atomic_fail(f, "creating");
}

static void atomic_write(atomic_file *f, const void *data, size_t bytes) {
    const unsigned char *p = data;
    while (bytes > 0) {
        ssize_t put = write(f->fd, p, bytes);
        if (put < 0 && errno == EINTR) continue;
        if (put <= 0) {
            if (put == 0) errno = EIO;
            atomic_fail(f, "writing");
        }
        p += put;
        bytes -= (size_t)put;
    }
}

static void atomic_commit(atomic_file *f) {
    if (fsync(f->fd) != 0) atomic_fail(f, "syncing");
    if (close(f->fd) != 0) {
        f->fd = -1;
        atomic_fail(f, "closing");
    }
    f->fd = -1;
    if (rename(f->tmp_path, f->path) != 0) atomic_fail(f, "renaming");
    /* make the rename durable: fsync the directory that holds path */
    const char *slash = strrchr(f->path, '/');
    char *dir;
    if (!slash) {
        dir = tt_xstrdup(".");
    } else {
        size_t len = slash == f->path ? 1 : (size_t)(slash - f->path);
        dir = tt_xmalloc(len + 1, "a directory name");
        memcpy(dir, f->path, len);
        dir[len] = 0;
    }
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0 || (fsync(dfd) != 0 && errno != EINVAL))
        tt_warn("wrote %s but could not sync its directory %s: %s", f->path, dir, strerror(errno));
    if (dfd >= 0) close(dfd);
    free(dir);
    free(f->tmp_path);
    f->tmp_path = NULL;
}

/* Bytes gathered into writes of a chunk each. */
typedef struct chunked_writer {
    atomic_file *f;
    unsigned char buf[1 << 16];
    size_t used;
} chunked_writer;

static chunked_writer *chunked_new(atomic_file *f) {
    chunked_writer *w = tt_xmalloc(sizeof *w, "token file buffer");
    w->f = f;
    w->used = 0;
    return w;
}

static void chunked_flush(chunked_writer *w) {
    atomic_write(w->f, w->buf, w->used);
    w->used = 0;
}

static void chunked_u32(chunked_writer *w, uint32_t v) {
    if (w->used + 4 > sizeof w->buf) chunked_flush(w);
    put_u32(w->buf + w->used, v);
    w->used += 4;
}

static void chunked_u64(chunked_writer *w, uint64_t v) {
    if (w->used + 8 > sizeof w->buf) chunked_flush(w);
    put_u64(w->buf + w->used, v);
    w->used += 8;
}

static void chunked_bytes(chunked_writer *w, const uint8_t *v, uint64_t n) {
    for (uint64_t done = 0; done < n;) {
        if (w->used == sizeof w->buf) chunked_flush(w);
        size_t k = sizeof w->buf - w->used;
        if (n - done < k) k = (size_t)(n - done);
        memcpy(w->buf + w->used, v + done, k);
        w->used += k;
        done += k;
    }
}

void tt_token_file_write(const char *path, const uint32_t *tokens, uint64_t count, uint32_t vocab_size,
                         uint32_t eos_id) {
    TT_CHECK(tokens != NULL || count == 0, "token file %s: no tokens given for count %llu", path,
             (unsigned long long)count);
    unsigned char header[TT_TOKEN_FILE_HEADER_BYTES];
    memset(header, 0, sizeof header);
    memcpy(header, TT_TOKEN_FILE_MAGIC, 8);
    put_u32(header + 8, TT_TOKEN_FILE_VERSION);
    put_u32(header + 12, vocab_size);
    put_u64(header + 16, count);
    put_u32(header + 24, eos_id);
    /* bytes 28-31 reserved, 0 */
    atomic_file f;
    atomic_open(&f, path);
    atomic_write(&f, header, sizeof header);
    chunked_writer *w = chunked_new(&f);
    for (uint64_t i = 0; i < count; i++) chunked_u32(w, tokens[i]);
    chunked_flush(w);
    free(w);
    atomic_commit(&f);
}

static uint64_t document_at(const tt_token_documents *d, uint64_t i) { return d->order ? (uint64_t)d->order[i] : i; }

void tt_token_file_write_documents(const char *path, const tt_token_documents *d) {
    TT_CHECK(d->starts != NULL && d->starts[0] == 0 && d->starts[d->document_count] == d->token_count,
             "token file %s: document starts do not cover the %llu tokens", path, (unsigned long long)d->token_count);
    for (uint64_t i = 0; i < d->document_count; i++)
        TT_CHECK(d->starts[i] <= d->starts[i + 1], "token file %s: document %llu starts after the next one", path,
                 (unsigned long long)i);
    for (uint64_t i = 0; i < d->token_count; i++)
        TT_CHECK(d->labels[i] <= 1, "token file %s: label byte %u at token %llu", path, d->labels[i],
                 (unsigned long long)i);
    if (d->order) {
        uint8_t *seen = tt_xcalloc((size_t)d->document_count + 1, 1, "document order");
        for (uint64_t i = 0; i < d->document_count; i++) {
            int64_t doc = d->order[i];
            TT_CHECK(doc >= 0 && (uint64_t)doc < d->document_count && !seen[doc],
                     "token file %s: the document order is no permutation (%lld at %llu)", path, (long long)doc,
                     (unsigned long long)i);
            seen[doc] = 1;
        }
        free(seen);
    }
    unsigned char header[TT_TOKEN_FILE_V2_HEADER_BYTES];
    memset(header, 0, sizeof header);
    memcpy(header, TT_TOKEN_FILE_MAGIC, 8);
    put_u32(header + 8, TT_TOKEN_FILE_VERSION_DOCUMENTS);
    put_u32(header + 12, d->vocab_size);
    put_u64(header + 16, d->token_count);
    put_u32(header + 24, d->eos_id);
    put_u32(header + 28, d->pad_id);
    put_u64(header + 32, d->document_count);
    /* bytes 40-47 reserved, 0 */
    atomic_file f;
    atomic_open(&f, path);
    atomic_write(&f, header, sizeof header);
    chunked_writer *w = chunked_new(&f);
    uint64_t at = 0;
    chunked_u64(w, 0);
    for (uint64_t i = 0; i < d->document_count; i++) {
        uint64_t doc = document_at(d, i);
        at += d->starts[doc + 1] - d->starts[doc];
        chunked_u64(w, at);
    }
    for (uint64_t i = 0; i < d->document_count; i++) {
        uint64_t doc = document_at(d, i);
        for (uint64_t t = d->starts[doc]; t < d->starts[doc + 1]; t++) chunked_u32(w, d->tokens[t]);
    }
    for (uint64_t i = 0; i < d->document_count; i++) {
        uint64_t doc = document_at(d, i);
        chunked_bytes(w, d->labels + d->starts[doc], d->starts[doc + 1] - d->starts[doc]);
    }
    chunked_flush(w);
    free(w);
    atomic_commit(&f);
}
