#include "core/fault_inject.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "core/check.h"

/* UINT64_MAX - 1: not read yet; UINT64_MAX: no limit. Read at the first write, then only counted. */
static _Atomic uint64_t fault_limit = UINT64_MAX - 1;
static _Atomic uint64_t fault_written;

static uint64_t limit_from_environment(void) {
    const char *text = getenv("TT_FAULT_ENOSPC_AFTER_BYTES");
    if (!text || !*text) return UINT64_MAX;
    char *end = NULL;
    const unsigned long long n = strtoull(text, &end, 10);
    if (*end) tt_die("TT_FAULT_ENOSPC_AFTER_BYTES='%s' is not a byte count (a test hook; unset it)", text);
    return (uint64_t)n;
}

static uint64_t current_limit(void) {
    uint64_t limit = atomic_load(&fault_limit);
    if (limit == UINT64_MAX - 1) {
        limit = limit_from_environment();
        atomic_store(&fault_limit, limit);
    }
    return limit;
}

int tt_fault_before_write(size_t bytes) {
    const uint64_t limit = current_limit();
    if (limit == UINT64_MAX) return 0;
    const uint64_t before = atomic_fetch_add(&fault_written, (uint64_t)bytes);
    return before + bytes > limit ? ENOSPC : 0;
}

size_t tt_fault_free_bytes(size_t reported) {
    const uint64_t limit = current_limit();
    if (limit == UINT64_MAX) return reported;
    const uint64_t written = atomic_load(&fault_written);
    const uint64_t left = written < limit ? limit - written : 0;
    return left < (uint64_t)reported ? (size_t)left : reported;
}

size_t tt_fault_physical_memory(size_t reported) {
    const char *text = getenv("TT_FAULT_HOST_MEMORY_BYTES");
    if (!text || !*text) return reported;
    char *end = NULL;
    const unsigned long long n = strtoull(text, &end, 10);
    if (*end || n == 0) tt_die("TT_FAULT_HOST_MEMORY_BYTES='%s' is not a byte count (a test hook; unset it)", text);
    return (size_t)n;
}

void tt_fault_pause_in_save(void) {
    const char *text = getenv("TT_FAULT_SAVE_PAUSE_MS");
    if (!text || !*text) return;
    char *end = NULL;
    const long ms = strtol(text, &end, 10);
    if (*end || ms < 0)
        tt_die("TT_FAULT_SAVE_PAUSE_MS='%s' is not a count of milliseconds (a test hook; unset it)", text);
    struct timespec pause = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
    while (nanosleep(&pause, &pause) != 0) {
    }
}
