#include "core/check.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* set once at start by a run of several processes (tt_set_process_group), read by tt_die */
static const char *process_label;
static void (*process_end_all)(int status);

void tt_set_process_group(const char *label, void (*end_all)(int status)) {
    process_label = label;
    process_end_all = end_all;
}

#ifdef TT_FUZZING
jmp_buf *tt_fuzz_die_jump;
char tt_fuzz_die_message[1024];
#endif

void tt_die(const char *fmt, ...) {
    va_list ap;
#ifdef TT_FUZZING
    /* see check.h: the fuzz harness catches a clean error; users' builds never compile this */
    if (tt_fuzz_die_jump) {
        va_start(ap, fmt);
        vsnprintf(tt_fuzz_die_message, sizeof tt_fuzz_die_message, fmt, ap);
        va_end(ap);
        jmp_buf *jump = tt_fuzz_die_jump;
        tt_fuzz_die_jump = NULL; /* one catch per arming: a die inside the cleanup would exit */
        longjmp(*jump, 1);
    }
#endif
    fflush(stdout);
    fputs("tiertrain: error: ", stderr);
    if (process_label) fprintf(stderr, "%s: ", process_label);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    fflush(stderr);
    if (process_end_all) process_end_all(TT_EXIT_INPUT_ERROR);
    exit(TT_EXIT_INPUT_ERROR);
}

void tt_check_failed(const char *file, int line, const char *expr, const char *fmt, ...) {
    va_list ap;
    fflush(stdout);
    fprintf(stderr, "tiertrain: internal error at %s:%d: check `%s` failed: ", file, line, expr);
    if (process_label) fprintf(stderr, "%s: ", process_label);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    fflush(stderr);
    if (process_end_all) process_end_all(134); /* as abort's SIGABRT: ends every rank */
    abort();
}

void tt_warn(const char *fmt, ...) {
    va_list ap;
    fflush(stdout);
    fputs("tiertrain: warning: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

/* NULL: standard output */
static FILE *info_stream;

void tt_set_info_stream(FILE *stream) { info_stream = stream; }

void tt_info(const char *fmt, ...) {
    FILE *out = info_stream ? info_stream : stdout;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(out, fmt, ap);
    va_end(ap);
    fputc('\n', out);
    fflush(out);
}

void *tt_xmalloc(size_t bytes, const char *what) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) tt_die("out of host memory: %zu bytes for %s", bytes, what);
    return p;
}

void *tt_xcalloc(size_t count, size_t size, const char *what) {
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p) tt_die("out of host memory: %zu x %zu bytes for %s", count, size, what);
    return p;
}

void *tt_xrealloc(void *ptr, size_t bytes, const char *what) {
    void *p = realloc(ptr, bytes ? bytes : 1);
    if (!p) tt_die("out of host memory: %zu bytes for %s", bytes, what);
    return p;
}

char *tt_xstrdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = tt_xmalloc(n, "a string");
    memcpy(p, s, n);
    return p;
}

size_t tt_mul_size(size_t a, size_t b, const char *what) {
    if (a != 0 && b > SIZE_MAX / a) tt_die("size overflow computing %s (%zu x %zu)", what, a, b);
    return a * b;
}

const char *tt_format_bytes(size_t bytes, char *buf, size_t buf_size) {
    static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024.0 && u < 4) {
        v /= 1024.0;
        u++;
    }
    if (u == 0) snprintf(buf, buf_size, "%zu B", bytes);
    else snprintf(buf, buf_size, "%.2f %s", v, units[u]);
    return buf;
}
