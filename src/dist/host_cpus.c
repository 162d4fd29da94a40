/* The CPUs of a host that a run's processes there share (see host_cpus.h). */
#include "dist/host_cpus.h"

#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/check.h"

static int compare_places(const void *a, const void *b) {
    const tt_cpu_place *x = a, *y = b;
    if (x->package != y->package) return x->package < y->package ? -1 : 1;
    if (x->core != y->core) return x->core < y->core ? -1 : 1;
    return (x->cpu > y->cpu) - (x->cpu < y->cpu);
}

void tt_cpus_by_core(tt_cpu_place *places, int count) {
    if (count > 1) qsort(places, (size_t)count, sizeof *places, compare_places);
}

int tt_cpu_share(const int *cpus, int count, int index, int group, int *share) {
    if (count <= 0 || group <= 0 || index < 0 || index >= group) return 0;
    if (count < group) {
        share[0] = cpus[index % count];
        return 1;
    }
    const int base = count / group, longer = count % group;
    const int first = index * base + (index < longer ? index : longer), length = base + (index < longer ? 1 : 0);
    for (int i = 0; i < length; i++) share[i] = cpus[first + i];
    return length;
}

static int compare_ints(const void *a, const void *b) {
    const int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

void tt_format_cpu_list(const int *cpus, int count, char *text, size_t size) {
    if (size == 0) return;
    text[0] = '\0';
    if (count <= 0) return;
    int *sorted = tt_xcalloc((size_t)count, sizeof *sorted, "a CPU list");
    memcpy(sorted, cpus, sizeof *sorted * (size_t)count);
    qsort(sorted, (size_t)count, sizeof *sorted, compare_ints);
    size_t used = 0;
    for (int i = 0; i < count;) {
        int j = i;
        while (j + 1 < count && sorted[j + 1] == sorted[j] + 1) j++;
        char range[32];
        if (j > i) snprintf(range, sizeof range, "%s%d-%d", i ? "," : "", sorted[i], sorted[j]);
        else snprintf(range, sizeof range, "%s%d", i ? "," : "", sorted[i]);
        const size_t n = strlen(range);
        if (used + n + 4 > size) { /* room for "..." and the terminator */
            snprintf(text + used, size - used, "...");
            break;
        }
        memcpy(text + used, range, n + 1);
        used += n;
        i = j + 1;
    }
    free(sorted);
}

#define MASK_WORDS (CPU_SETSIZE / 64)

/* What each rank sends: its host, and its affinity set before binding (known 0 where it could not be read: such a
 * rank matches no other). */
typedef struct host_cpus_record {
    uint64_t host; /* FNV-1a of the host's name */
    uint64_t known;
    uint64_t mask[MASK_WORDS];
} host_cpus_record;

static uint64_t host_name_hash(void) {
    char name[256] = {0};
    if (gethostname(name, sizeof name - 1) != 0) strcpy(name, "?");
    uint64_t h = 1469598103934665603ull;
    for (const char *c = name; *c; c++) h = (h ^ (unsigned char)*c) * 1099511628211ull;
    return h;
}

/* A topology file's number (physical_package_id, core_id) for one CPU; `fallback` where there is none. */
static int topology_value(int cpu, const char *what, int fallback) {
    char path[96];
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/%s", cpu, what);
    FILE *f = fopen(path, "r");
    int value = fallback;
    if (f) {
        if (fscanf(f, "%d", &value) != 1) value = fallback;
        fclose(f);
    }
    return value;
}

tt_cpu_binding tt_bind_host_cpu_share(const tt_comm *comm) {
    tt_cpu_binding result = {.cpus = (int)sysconf(_SC_NPROCESSORS_ONLN), .sharers = 1};
    if (result.cpus < 1) result.cpus = 1;
    cpu_set_t mine;
    CPU_ZERO(&mine);
    host_cpus_record record = {.host = host_name_hash(), .known = sched_getaffinity(0, sizeof mine, &mine) == 0};
    if (record.known)
        for (int c = 0; c < CPU_SETSIZE; c++)
            if (CPU_ISSET(c, &mine)) record.mask[c / 64] |= (uint64_t)1 << (c % 64);
    /* every rank takes part in the gather, also one that could not read its set */
    host_cpus_record *all = tt_xcalloc((size_t)comm->size, sizeof *all, "the ranks' CPU sets");
    tt_comm_all_gather_host(comm, &record, all, sizeof record);
    int index = 0, sharers = 0;
    for (int r = 0; r < comm->size; r++)
        if (all[r].known && record.known && all[r].host == record.host &&
            memcmp(all[r].mask, record.mask, sizeof record.mask) == 0) {
            sharers++;
            if (r < comm->rank) index++;
        }
    free(all);
    if (!record.known) {
        tt_warn("rank %d: could not read this process's CPU affinity; its threads are not bound to a share of the "
                "host's CPUs",
                comm->rank);
        return result;
    }

    tt_cpu_place *places = tt_xcalloc(CPU_SETSIZE, sizeof *places, "the CPU set");
    int *cpus = tt_xcalloc(CPU_SETSIZE, sizeof *cpus, "the CPU set");
    int *share = tt_xcalloc(CPU_SETSIZE, sizeof *share, "this process's CPUs");
    int count = 0;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &mine))
            places[count++] = (tt_cpu_place){.cpu = c,
                                             .package = topology_value(c, "physical_package_id", 0),
                                             .core = topology_value(c, "core_id", c)};
    tt_cpus_by_core(places, count);
    for (int i = 0; i < count; i++) cpus[i] = places[i].cpu;
    result.sharers = sharers;
    result.set_cpus = count;
    int length = count;
    memcpy(share, cpus, sizeof *cpus * (size_t)count);
    if (sharers > 1) {
        length = tt_cpu_share(cpus, count, index, sharers, share);
        cpu_set_t part;
        CPU_ZERO(&part);
        for (int i = 0; i < length; i++) CPU_SET(share[i], &part);
        if (sched_setaffinity(0, sizeof part, &part) != 0) {
            tt_warn("rank %d: could not bind to its share of the host's CPUs (%d of %d); its thread pools may take "
                    "the same CPUs as the host's %d other process(es) of the run",
                    comm->rank, length, count, sharers - 1);
            length = count;
            memcpy(share, cpus, sizeof *cpus * (size_t)count);
        } else {
            cpu_set_t now;
            CPU_ZERO(&now);
            TT_CHECK(sched_getaffinity(0, sizeof now, &now) == 0 && CPU_EQUAL(&now, &part),
                     "rank %d: the CPU affinity read back is not the share it set", comm->rank);
        }
    }
    result.cpus = length > 0 ? length : 1;
    tt_format_cpu_list(share, length, result.list, sizeof result.list);
    free(places);
    free(cpus);
    free(share);
    return result;
}
