/* Shared by the libFuzzer harnesses (fuzz/fuzz_*.c, built by `make fuzz` with -DTT_FUZZING).
 *
 * - fuzz_input_path(): the input as a file. The readers under test take paths, so the bytes go
 *   into one memfd per process (no disk traffic) named by /proc/self/fd/N, a regular file for
 *   open, fstat, mmap and stat alike.
 * - FUZZ_TRY / FUZZ_CATCH: tt_die (bad input, the expected outcome for most inputs) longjmps back
 *   into the harness instead of exiting (check.c's TT_FUZZING hook). TT_CHECK still aborts: an
 *   internal invariant that fails on some input is a finding.
 * - Jansson's allocations are tracked, so a JSON tree a tt_die abandoned is freed after the
 *   catch; what else a dying reader held is the target's to release (see each harness). */
#ifndef TT_FUZZ_COMMON_H
#define TT_FUZZ_COMMON_H

#include <jansson.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

static jmp_buf fuzz_jump;

/* tt_die jumps back here: FUZZ_TRY { reader } FUZZ_CATCH { cleanup } */
#define FUZZ_TRY                   \
    tt_fuzz_die_jump = &fuzz_jump; \
    if (setjmp(fuzz_jump) == 0) {
#define FUZZ_CATCH           \
    tt_fuzz_die_jump = NULL; \
    }                        \
    else

/* ---- jansson allocation tracking ---- */

typedef struct fuzz_block {
    struct fuzz_block *prev, *next;
    _Alignas(16) unsigned char data[];
} fuzz_block;

static fuzz_block fuzz_json_live = {&fuzz_json_live, &fuzz_json_live};

static void *fuzz_json_malloc(size_t n) {
    fuzz_block *b = malloc(sizeof(fuzz_block) + n);
    if (!b) return NULL;
    b->next = fuzz_json_live.next;
    b->prev = &fuzz_json_live;
    b->next->prev = b;
    fuzz_json_live.next = b;
    return b->data;
}

static void fuzz_json_free(void *p) {
    if (!p) return;
    fuzz_block *b = (fuzz_block *)((unsigned char *)p - offsetof(fuzz_block, data));
    b->prev->next = b->next;
    b->next->prev = b->prev;
    free(b);
}

/* Frees what a tt_die left of the JSON tree being read. */
static inline void fuzz_json_release_all(void) {
    while (fuzz_json_live.next != &fuzz_json_live) fuzz_json_free(fuzz_json_live.next->data);
}

static inline void fuzz_setup(void) { json_set_alloc_funcs(fuzz_json_malloc, fuzz_json_free); }

/* ---- the input as a file ---- */

static int fuzz_fd = -1;
static char fuzz_path[64];

static inline const char *fuzz_input_path(const uint8_t *data, size_t size) {
    if (fuzz_fd < 0) {
        fuzz_fd = memfd_create("tt_fuzz_input", MFD_CLOEXEC);
        if (fuzz_fd < 0) {
            perror("memfd_create");
            abort();
        }
        snprintf(fuzz_path, sizeof fuzz_path, "/proc/self/fd/%d", fuzz_fd);
    }
    if (ftruncate(fuzz_fd, 0) != 0) abort();
    size_t done = 0;
    while (done < size) {
        ssize_t n = pwrite(fuzz_fd, data + done, size - done, (off_t)done);
        if (n <= 0) abort();
        done += (size_t)n;
    }
    return fuzz_path;
}

#endif
