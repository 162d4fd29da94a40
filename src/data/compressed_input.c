/* gzip and Zstandard dataset files as FILE streams (compressed_input.h), through fopencookie. */
#include "data/compressed_input.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <zlib.h>
#include <zstd.h>

#include "core/check.h"

#define IN_BYTES (1 << 16)

/* Why the last read of a decompressing stream on this thread failed (compressed_input.h). */
static _Thread_local char last_error[512];

const char *tt_decompress_error(void) { return last_error; }

typedef struct compressed {
    FILE *raw;
    char *path;
    bool zstd;
    bool ended; /* the last stream ended at the end of the file */
    z_stream gz;
    ZSTD_DStream *zs;
    ZSTD_inBuffer zin;
    unsigned char in[IN_BYTES];
} compressed;

/* A read that cannot go on: the reason kept for the reader's message, the stream's error flag set (-1). A tt_die here
 * would leave the reader half-open above the FILE call it is inside. */
static ssize_t fail(compressed *c, const char *why, const char *detail) {
    snprintf(last_error, sizeof last_error, "dataset %s: %s%s%s", c->path, why, detail ? ": " : "",
             detail ? detail : "");
    errno = EIO;
    return -1;
}

/* More compressed bytes into in[]; 0 at the end of the file, -1 on a read error. */
static ssize_t refill(compressed *c) {
    const size_t n = fread(c->in, 1, IN_BYTES, c->raw);
    if (n == 0 && ferror(c->raw)) return fail(c, "a read error", NULL);
    return (ssize_t)n;
}

static ssize_t read_gzip(compressed *c, char *out, size_t size) {
    c->gz.next_out = (Bytef *)out;
    c->gz.avail_out = (uInt)(size > (1u << 30) ? (1u << 30) : size);
    while (c->gz.avail_out > 0 && !c->ended) {
        if (c->gz.avail_in == 0) {
            const ssize_t n = refill(c);
            if (n < 0) return -1;
            if (n == 0)
                return fail(c, "the gzip stream is truncated (the file ends inside it); the file is incomplete", NULL);
            c->gz.avail_in = (uInt)n;
            c->gz.next_in = c->in;
        }
        const int rc = inflate(&c->gz, Z_NO_FLUSH);
        if (rc == Z_STREAM_END) {
            /* gzip members may follow one another (as `cat a.gz b.gz`): go on if bytes remain */
            if (c->gz.avail_in == 0) {
                const ssize_t n = refill(c);
                if (n < 0) return -1;
                c->gz.avail_in = (uInt)n;
                c->gz.next_in = c->in;
            }
            if (c->gz.avail_in == 0) c->ended = true;
            else if (inflateReset(&c->gz) != Z_OK) return fail(c, "zlib could not start the next gzip member", NULL);
        } else if (rc != Z_OK && !(rc == Z_BUF_ERROR && c->gz.avail_out == 0)) {
            return fail(c, "the gzip data is corrupt; the file is damaged or not gzip (zlib)",
                        c->gz.msg ? c->gz.msg : "error");
        }
    }
    return (ssize_t)((char *)c->gz.next_out - out);
}

static ssize_t read_zstd(compressed *c, char *out, size_t size) {
    ZSTD_outBuffer o = {out, size, 0};
    while (o.pos < o.size && !c->ended) {
        if (c->zin.pos == c->zin.size) {
            const ssize_t n = refill(c);
            if (n < 0) return -1;
            if (n == 0)
                return fail(c,
                            "the Zstandard stream is truncated (the file ends inside a frame); the file is incomplete",
                            NULL);
            c->zin.size = (size_t)n;
            c->zin.pos = 0;
        }
        const size_t rc = ZSTD_decompressStream(c->zs, &o, &c->zin);
        if (ZSTD_isError(rc))
            return fail(c, "the Zstandard data is corrupt; the file is damaged or not Zstandard (libzstd)",
                        ZSTD_getErrorName(rc));
        if (rc == 0 && c->zin.pos == c->zin.size) { /* a frame ended: another may follow */
            const ssize_t n = refill(c);
            if (n < 0) return -1;
            c->zin.size = (size_t)n;
            c->zin.pos = 0;
            if (n == 0) c->ended = true;
        }
    }
    return (ssize_t)o.pos;
}

static ssize_t read_decompressed(void *cookie, char *out, size_t size) {
    compressed *c = cookie;
    return c->zstd ? read_zstd(c, out, size) : read_gzip(c, out, size);
}

static int close_decompressed(void *cookie) {
    compressed *c = cookie;
    if (c->zstd) ZSTD_freeDStream(c->zs);
    else inflateEnd(&c->gz);
    const int rc = fclose(c->raw);
    free(c->path);
    free(c);
    return rc;
}

FILE *tt_decompressing(FILE *f, const char *path) {
    last_error[0] = 0; /* a later read error of this file is its own */
    unsigned char magic[4] = {0};
    const size_t n = fread(magic, 1, sizeof magic, f);
    rewind(f);
    const bool gzip = n >= 2 && magic[0] == 0x1f && magic[1] == 0x8b;
    const bool zstd = n == 4 && magic[0] == 0x28 && magic[1] == 0xb5 && magic[2] == 0x2f && magic[3] == 0xfd;
    if (!gzip && !zstd) return f;
    compressed *c = tt_xcalloc(1, sizeof *c, "a decompressing reader");
    c->raw = f;
    c->path = tt_xstrdup(path);
    c->zstd = zstd;
    if (zstd) {
        c->zs = ZSTD_createDStream();
        if (!c->zs || ZSTD_isError(ZSTD_initDStream(c->zs)))
            tt_die("dataset %s: libzstd could not start a stream", path);
        c->zin = (ZSTD_inBuffer){c->in, 0, 0};
    } else if (inflateInit2(&c->gz, 15 + 16) != Z_OK) { /* 15 + 16: a gzip header, the largest window */
        tt_die("dataset %s: zlib could not start a gzip stream", path);
    }
    const cookie_io_functions_t io = {.read = read_decompressed, .close = close_decompressed};
    FILE *out = fopencookie(c, "r", io);
    if (!out) tt_die("dataset %s: cannot open a decompressing stream", path);
    return out;
}
