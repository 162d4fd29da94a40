#include "core/input_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/check.h"

static const char *kind_of(mode_t mode) {
    if (S_ISDIR(mode)) return "a directory";
    if (S_ISFIFO(mode)) return "a FIFO";
    if (S_ISSOCK(mode)) return "a socket";
    if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
    return "a special file";
}

/* -1 (errno set) when path cannot be opened; tt_die when it is not a regular file. */
static int open_regular(const char *path, const char *expected, struct stat *st) {
    /* O_NONBLOCK: the open itself returns at once for a FIFO; a regular file ignores the flag,
     * and it is cleared anyway once fstat has shown that is what we have */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return -1;
    if (fstat(fd, st) != 0) {
        int error = errno;
        close(fd);
        tt_die("cannot read %s: %s", path, strerror(error));
    }
    if (!S_ISREG(st->st_mode)) {
        close(fd);
        tt_die("%s is not a regular file (%s); expected %s", path, kind_of(st->st_mode), expected);
    }
    int flags = fcntl(fd, F_GETFL);
    if (flags >= 0) fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    return fd;
}

int tt_open_regular_file(const char *path, const char *expected, struct stat *st) {
    int fd = open_regular(path, expected, st);
    if (fd < 0) tt_die("cannot open %s: %s", path, strerror(errno));
    return fd;
}

int tt_try_open_regular_file(const char *path, const char *expected, struct stat *st) {
    return open_regular(path, expected, st);
}

FILE *tt_fopen_regular_file(const char *path, const char *expected) {
    struct stat st;
    int fd = open_regular(path, expected, &st);
    if (fd < 0) return NULL;
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        int error = errno;
        close(fd);
        errno = error;
    }
    return f;
}

json_t *tt_json_load_regular_file(const char *path, size_t flags, size_t max_bytes, const char *expected,
                                  json_error_t *error) {
    struct stat st;
    int fd = open_regular(path, expected, &st);
    if (fd < 0) { /* as json_load_file reports it, so the callers' messages (and hints) stay */
        memset(error, 0, sizeof *error);
        error->line = -1;
        snprintf(error->text, sizeof error->text, "unable to open %s: %s", path, strerror(errno));
        snprintf(error->source, sizeof error->source, "%s", path);
        return NULL;
    }
    if ((unsigned long long)st.st_size > (unsigned long long)max_bytes) {
        close(fd);
        tt_die("%s: %lld bytes is more than the %zu %s may have; the file is corrupt or not what it should be", path,
               (long long)st.st_size, max_bytes, expected);
    }
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        int e = errno;
        close(fd);
        tt_die("cannot read %s: %s", path, strerror(e));
    }
    json_t *root = json_loadf(f, flags, error);
    fclose(f);
    return root;
}
