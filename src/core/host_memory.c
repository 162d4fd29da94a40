#include "core/host_memory.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/fault_inject.h"

#define SYSTEM_RESERVE_LEAST ((size_t)4 << 30)

size_t tt_cgroup_limit_from_text(const char *text) {
    if (!text) return 0;
    while (*text == ' ' || *text == '\t') text++;
    if (*text < '0' || *text > '9') return 0; /* "max", or nothing to read */
    char *end = NULL;
    errno = 0;
    const unsigned long long value = strtoull(text, &end, 10);
    if (errno || (*end && *end != '\n')) return 0;
    return value >= (1ull << 62) ? 0 : (size_t)value; /* v1 writes "unlimited" as about 2^63 */
}

/* The limit in `file` under the group directory base + path and each of its parents up to base, the smallest set
 * (0: none). */
static size_t tightest_limit(const char *base, const char *path, const char *file) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s%s", base, path);
    size_t tightest = 0;
    for (;;) {
        char name[4200], text[64] = "";
        snprintf(name, sizeof name, "%s/%s", dir, file);
        FILE *f = fopen(name, "r");
        if (f) {
            if (!fgets(text, sizeof text, f)) text[0] = 0;
            fclose(f);
            const size_t limit = tt_cgroup_limit_from_text(text);
            if (limit && (!tightest || limit < tightest)) tightest = limit;
        }
        char *slash = strrchr(dir, '/');
        if (!slash || (size_t)(slash - dir) < strlen(base)) break; /* at base: done */
        *slash = 0;
    }
    return tightest;
}

/* The process's cgroup memory limit, 0 when none: /proc/self/cgroup names its group, v2 ("0::/path") under
 * /sys/fs/cgroup, v1 (a "memory" hierarchy) under /sys/fs/cgroup/memory. */
static size_t cgroup_memory_limit(void) {
    FILE *f = fopen("/proc/self/cgroup", "r");
    if (!f) return 0;
    char line[4096];
    size_t tightest = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        char *controllers = strchr(line, ':');
        char *path = controllers ? strchr(controllers + 1, ':') : NULL;
        if (!path) continue;
        *path++ = 0;
        controllers++;
        size_t limit = 0;
        if (strcmp(line, "0") == 0 && controllers[0] == 0) limit = tightest_limit("/sys/fs/cgroup", path, "memory.max");
        else if (strstr(controllers, "memory"))
            limit = tightest_limit("/sys/fs/cgroup/memory", path, "memory.limit_in_bytes");
        if (limit && (!tightest || limit < tightest)) tightest = limit;
    }
    fclose(f);
    return tightest;
}

size_t tt_host_memory_physical(void) {
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    size_t physical = pages > 0 && page > 0 ? (size_t)pages * (size_t)page : 0;
    const size_t limit = cgroup_memory_limit();
    if (limit && (!physical || limit < physical)) physical = limit;
    return tt_fault_physical_memory(physical);
}

size_t tt_host_memory_default_budget(int processes) {
    const size_t physical = tt_host_memory_physical();
    if (!physical) return 0;
    size_t reserve = physical / 16;
    if (reserve < SYSTEM_RESERVE_LEAST) reserve = SYSTEM_RESERVE_LEAST;
    if (physical <= 2 * reserve) reserve = physical / 2; /* a small machine: keep half for the run */
    return (physical - reserve) / (size_t)(processes > 1 ? processes : 1);
}
