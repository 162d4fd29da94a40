/* A small test harness: each tests/test_*.c is one ctest executable. TT_EXPECT records a
 * failure and continues; tt_test_summary() prints "N passed, N failed" and returns the exit
 * status. tt_expect_die() runs a function in a child process and checks that it exits with
 * status 1 and a message containing `needle` (bad input must end in a clear error, never a
 * crash). */
#ifndef TT_TESTS_TEST_UTIL_H
#define TT_TESTS_TEST_UTIL_H

#include <ftw.h>
#include <signal.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static int tt_test_passed_count = 0;
static int tt_test_failed_count = 0;

#define TT_EXPECT(cond, ...)                                                \
    do {                                                                    \
        if (cond) {                                                         \
            tt_test_passed_count++;                                         \
        } else {                                                            \
            tt_test_failed_count++;                                         \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                   \
            fputc('\n', stderr);                                            \
        }                                                                   \
    } while (0)

static inline int tt_test_summary(const char *suite) {
    printf("%s: %d passed, %d failed\n", suite, tt_test_passed_count, tt_test_failed_count);
    return tt_test_failed_count == 0 && tt_test_passed_count > 0 ? 0 : 1;
}

/* Under LeakSanitizer, a child that dies on bad input would report what it had not freed yet
 * (a dying process frees nothing, by design) and change its exit status; the child turns leak
 * tracking off. The symbol exists only in sanitized builds. */
extern void __lsan_disable(void) __attribute__((weak));

/* Runs fn(arg) in a child; expects exit status 1 (an error of the input) or, with `abort`, SIGABRT (a failed internal
 * check: a misuse by the program), and `needle` in its stderr. */
static inline bool tt_expect_end_impl(void (*fn)(void *), void *arg, const char *needle, bool abort, const char *file,
                                      int line) {
    int fds[2];
    if (pipe(fds) != 0) return false;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        dup2(fds[1], 2);
        if (__lsan_disable) __lsan_disable();
        fn(arg);
        _exit(0); /* returned: no error raised */
    }
    close(fds[1]);
    char buf[8192];
    size_t got = 0;
    ssize_t r;
    char discard[4096];
    for (;;) { /* read to the end, keeping the first 8 KiB, so the child never blocks or gets SIGPIPE */
        if (got < sizeof(buf) - 1) r = read(fds[0], buf + got, sizeof(buf) - 1 - got);
        else r = read(fds[0], discard, sizeof discard);
        if (r <= 0) break;
        if (got < sizeof(buf) - 1) got += (size_t)r;
    }
    buf[got] = 0;
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    const bool ended =
        abort ? WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT : WIFEXITED(status) && WEXITSTATUS(status) == 1;
    bool ok = ended && strstr(buf, needle) != NULL;
    if (ok) {
        tt_test_passed_count++;
    } else {
        tt_test_failed_count++;
        fprintf(stderr, "FAIL %s:%d: expected %s with \"%s\"; got %s %d, stderr: %s\n", file, line,
                abort ? "SIGABRT" : "exit 1", needle, WIFEXITED(status) ? "exit" : "signal",
                WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status), buf);
    }
    return ok;
}
#define tt_expect_die(fn, arg, needle) tt_expect_end_impl((fn), (arg), (needle), false, __FILE__, __LINE__)
/* A failed internal check (TT_CHECK) ends the process with SIGABRT. */
#define tt_expect_abort(fn, arg, needle) tt_expect_end_impl((fn), (arg), (needle), true, __FILE__, __LINE__)

/* Relative error of two arrays: max|a-b| / max(max|b|, tiny). */
static inline double tt_max_rel_error_f32(const float *a, const float *b, size_t n) {
    double max_diff = 0, max_ref = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (d > max_diff || isnan(d)) max_diff = isnan(d) ? INFINITY : d;
        if (fabs((double)b[i]) > max_ref) max_ref = fabs((double)b[i]);
    }
    return max_diff / (max_ref > 1e-30 ? max_ref : 1e-30);
}

/* A fresh temporary directory under TMPDIR (or /tmp); caller owns the string. */
static inline char *tt_test_tempdir(const char *tag) {
    const char *base = getenv("TMPDIR");
    char *path = malloc(4096);
    snprintf(path, 4096, "%s/tiertrain-%s-XXXXXX", base && *base ? base : "/tmp", tag);
    if (!mkdtemp(path)) {
        perror("mkdtemp");
        exit(2);
    }
    return path;
}

/* The test's scratch directory: files are written by name into it, and it is removed at the end
 * when every check passed (kept for inspection when one failed). */
static char *tt_test_scratch_dir;

static inline void tt_test_scratch_open(const char *tag) { tt_test_scratch_dir = tt_test_tempdir(tag); }

/* scratch/name, malloc'd. */
static inline char *tt_test_path(const char *name) {
    size_t n = strlen(tt_test_scratch_dir) + strlen(name) + 2;
    char *p = malloc(n);
    snprintf(p, n, "%s/%s", tt_test_scratch_dir, name);
    return p;
}

static inline void tt_test_write_bytes(const char *name, const void *data, size_t bytes) {
    char *p = tt_test_path(name);
    FILE *f = fopen(p, "wb");
    if (!f || fwrite(data, 1, bytes, f) != bytes) {
        perror(p);
        exit(2);
    }
    fclose(f);
    free(p);
}

static inline void tt_test_write_text(const char *name, const char *text) {
    tt_test_write_bytes(name, text, strlen(text));
}

static inline int tt_test_remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static inline void tt_test_scratch_close(void) {
    if (tt_test_failed_count == 0) nftw(tt_test_scratch_dir, tt_test_remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    free(tt_test_scratch_dir);
    tt_test_scratch_dir = NULL;
}

#endif
