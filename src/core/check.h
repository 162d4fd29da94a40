/* Errors and checks.
 *
 * Two kinds of failure, two macros:
 *  - tt_die(): the user's input is wrong (a file, a key, a value). Prints one
 *    "tiertrain: error: ..." line naming what was wrong and what to do, runs the
 *    atexit cleanups (temporary files, offload files) and exits with status 1.
 *    Checkpoints are written atomically, so dying never leaves a half checkpoint.
 *  - TT_CHECK(): an internal invariant. Prints file:line and aborts; a failure is
 *    a bug in tiertrain, not in the user's input. */
#ifndef TT_CORE_CHECK_H
#define TT_CORE_CHECK_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#ifndef __cplusplus
#include <stdnoreturn.h>
#endif

#ifdef __cplusplus
extern "C" { /* the CUDA sources include this header too */
#endif

#define TT_EXIT_INPUT_ERROR 1

void tt_die(const char *fmt, ...) __attribute__((__noreturn__, format(printf, 1, 2)));

/* One process of several (data parallel): tt_die's message names it ("rank 1: ...") and, instead of exiting this
 * process alone, end_all(status) ends every process of the run (the communicator's abort), so that no rank waits
 * forever in a collective. label and end_all must outlive the process; NULL, NULL: a single process again. */
void tt_set_process_group(const char *label, void (*end_all)(int status));

#ifdef TT_FUZZING
/* Fuzz builds only (fuzz/, compiled with -DTT_FUZZING; never the tiertrain binary): a clean
 * tt_die on bad input is the expected outcome for most fuzz inputs, but exit() would end the
 * fuzzer. While tt_fuzz_die_jump is set, tt_die formats its message (so a bad format argument
 * still trips the sanitizers), keeps it in tt_fuzz_die_message and longjmps there instead. */
#include <setjmp.h>
extern jmp_buf *tt_fuzz_die_jump;
extern char tt_fuzz_die_message[1024];
#endif
void tt_check_failed(const char *file, int line, const char *expr, const char *fmt, ...)
    __attribute__((__noreturn__, format(printf, 4, 5)));
void tt_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void tt_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Where tt_info writes (NULL: standard output, the default): standard error for a command whose standard output is
 * its answer (tiertrain inference). */
void tt_set_info_stream(FILE *stream);

#define TT_CHECK(cond, ...)                                                   \
    do {                                                                      \
        if (!(cond)) tt_check_failed(__FILE__, __LINE__, #cond, __VA_ARGS__); \
    } while (0)

/* Must-allocators: out of host memory is reported with the bytes asked and what for. */
void *tt_xmalloc(size_t bytes, const char *what);
void *tt_xcalloc(size_t count, size_t size, const char *what);
void *tt_xrealloc(void *ptr, size_t bytes, const char *what);
char *tt_xstrdup(const char *s);

/* Overflow-checked size arithmetic: every byte count in tiertrain is 64-bit. */
size_t tt_mul_size(size_t a, size_t b, const char *what);

/* Human-readable bytes ("1.50 GiB") into buf; returns buf. */
const char *tt_format_bytes(size_t bytes, char *buf, size_t buf_size);

#ifdef __cplusplus
}
#endif

#endif
