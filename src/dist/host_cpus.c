/* The CPUs of a host that a run's processes there share (see host_cpus.h). */
#include "dist/host_cpus.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/check.h"
#include "core/process_cpus.h"

static int compare_places(const void *a, const void *b) {
    const tt_cpu_place *x = a, *y = b;
    if (x->package != y->package) return x->package < y->package ? -1 : 1;
    if (x->core != y->core) return x->core < y->core ? -1 : 1;
    return (x->cpu > y->cpu) - (x->cpu < y->cpu);
}

void tt_cpus_by_core(tt_cpu_place *places, int count) {
    if (count > 1) qsort(places, (size_t)count, sizeof *places, compare_places);
}

static bool same_core(const tt_cpu_place *a, const tt_cpu_place *b) {
    return a->package == b->package && a->core == b->core;
}

int tt_cpu_share(const tt_cpu_place *places, int count, int index, int group, int *share) {
    if (count <= 0 || group <= 0 || index < 0 || index >= group) return 0;
    int cores = 0;
    for (int i = 0; i < count; i++) cores += i == 0 || !same_core(&places[i], &places[i - 1]);
    if (cores < group) return 0;
    const int base = cores / group, longer = cores % group;
    const int first = index * base + (index < longer ? index : longer), length = base + (index < longer ? 1 : 0);
    int core = -1, taken = 0;
    for (int i = 0; i < count; i++) {
        core += i == 0 || !same_core(&places[i], &places[i - 1]);
        if (core >= first && core < first + length) share[taken++] = places[i].cpu;
    }
    return taken;
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

static bool same_set(const tt_host_cpu_record *a, const tt_host_cpu_record *b) {
    return a->known && b->known && strcmp(a->machine, b->machine) == 0 && memcmp(a->mask, b->mask, sizeof a->mask) == 0;
}

void tt_host_cpu_sharers(const tt_host_cpu_record *records, int size, int rank, int *index, int *sharers) {
    *index = 0;
    *sharers = 1;
    if (!records[rank].known) return;
    int count = 0, local_index = 0;
    for (int r = 0; r < size; r++) {
        /* a process of this machine whose set is unknown may run anywhere in it: nothing is split */
        if (!records[r].known && strcmp(records[r].machine, records[rank].machine) == 0) return;
        if (same_set(&records[r], &records[rank])) {
            if (r < rank) local_index++;
            count++;
        }
    }
    *index = local_index;
    *sharers = count;
}

/* One machine, one kernel: the boot id, which containers on it share (they share its CPUs too) and which no other
 * machine has; the host's name where the boot id cannot be read. */
static void machine_id(char *text, size_t size) {
    memset(text, 0, size);
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    const bool boot = f && fgets(text, (int)size, f) && text[0];
    if (f) fclose(f);
    if (!boot && gethostname(text, size - 1) != 0) snprintf(text, size, "?");
}

/* A topology file's first number for one CPU (physical_package_id; thread_siblings_list's first CPU: the core's id,
 * unique in the machine where core_id repeats across a package's dies or clusters); `fallback` where there is none. */
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

/* The OpenMP binding variable that is set, for the message (omp_get_proc_bind() decides whether OpenMP binds). */
static const char *openmp_binding_variable(void) {
    static const char *const names[] = {"OMP_PROC_BIND", "OMP_PLACES", "GOMP_CPU_AFFINITY"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (getenv(names[i])) return names[i];
    return "an OpenMP binding variable";
}

/* The parts of every sharer of `record`'s set in rank order (the same arithmetic each of them did) into text[size],
 * whole entries only, "; ..." where the rest does not fit. */
static void format_parts(const tt_host_cpu_record *all, int size, const tt_host_cpu_record *record,
                         const tt_cpu_place *places, int count, int sharers, char *text, size_t capacity) {
    int *theirs = tt_xcalloc(CPU_SETSIZE, sizeof *theirs, "a process's CPUs");
    char *entry = tt_xcalloc(4096, 1, "a CPU list");
    size_t used = 0;
    text[0] = '\0';
    for (int r = 0, at = 0; r < size; r++) {
        if (!same_set(&all[r], record)) continue;
        char list[4000];
        tt_format_cpu_list(theirs, tt_cpu_share(places, count, at++, sharers, theirs), list, sizeof list);
        const int n = snprintf(entry, 4096, "%srank %d: CPUs %s", used ? "; " : "", r, list);
        if (used + (size_t)n + 6 > capacity) { /* room for "; ..." and the terminator */
            snprintf(text + used, capacity - used, "; ...");
            break;
        }
        memcpy(text + used, entry, (size_t)n + 1);
        used += (size_t)n;
    }
    free(theirs);
    free(entry);
}

tt_cpu_binding tt_bind_host_cpu_share(const tt_comm *comm) {
    _Static_assert(TT_CPU_MASK_WORDS * 64 == CPU_SETSIZE, "a record's mask is a cpu_set_t's bits");
    tt_cpu_binding result = {.sharers = 1};
    const bool openmp_binds = tt_openmp_binds_threads();
    cpu_set_t mine;
    CPU_ZERO(&mine);
    tt_host_cpu_record record = {.known = sched_getaffinity(0, sizeof mine, &mine) == 0};
    machine_id(record.machine, sizeof record.machine);
    if (record.known)
        for (int c = 0; c < CPU_SETSIZE; c++)
            if (CPU_ISSET(c, &mine)) record.mask[c / 64] |= (uint64_t)1 << (c % 64);
    /* every rank takes part in both gathers, also one that could not read its set or does not split it */
    tt_host_cpu_record *all = tt_xcalloc((size_t)comm->size, sizeof *all, "the ranks' CPU sets");
    tt_comm_all_gather_host(comm, &record, all, sizeof record);
    int index = 0;
    tt_host_cpu_sharers(all, comm->size, comm->rank, &index, &result.sharers);
    if (!record.known)
        tt_warn("rank %d: could not read this process's CPU affinity (a machine of more than %d CPUs?); its threads "
                "are not bound to a share of the host's CPUs",
                comm->rank, CPU_SETSIZE);

    tt_cpu_place *places = tt_xcalloc(CPU_SETSIZE, sizeof *places, "the CPU set");
    int *share = tt_xcalloc(CPU_SETSIZE, sizeof *share, "a process's CPUs");
    int count = 0;
    for (int c = 0; c < CPU_SETSIZE && record.known; c++)
        if (CPU_ISSET(c, &mine))
            places[count++] = (tt_cpu_place){.cpu = c,
                                             .package = topology_value(c, "physical_package_id", 0),
                                             .core = topology_value(c, "thread_siblings_list", c)};
    tt_cpus_by_core(places, count);
    result.set_cpus = count;
    const int length = result.sharers > 1 ? tt_cpu_share(places, count, index, result.sharers, share) : 0;
    /* 1: bound to its part; 0: nothing to split or not split; -1: the system refused */
    int outcome = 0;
    if (result.sharers > 1 && openmp_binds) {
        /* libgomp pinned this thread at load: the set read is its first place, not the process's */
        snprintf(result.skipped, sizeof result.skipped, "%s is set, so OpenMP places the threads",
                 openmp_binding_variable());
    } else if (result.sharers > 1 && length == 0) {
        snprintf(result.skipped, sizeof result.skipped, "their set of %d CPUs has fewer cores than processes", count);
    } else if (result.sharers > 1) {
        cpu_set_t part, now;
        CPU_ZERO(&part);
        CPU_ZERO(&now);
        for (int i = 0; i < length; i++) CPU_SET(share[i], &part);
        const bool set = sched_setaffinity(0, sizeof part, &part) == 0;
        if (set && sched_getaffinity(0, sizeof now, &now) == 0 && CPU_EQUAL(&now, &part)) {
            outcome = 1;
        } else {
            outcome = -1;
            if (set) (void)sched_setaffinity(0, sizeof mine, &mine); /* back to the set it had, not a third one */
            tt_warn("rank %d: could not bind to its share of the host's CPUs (%d of %d); its thread pools may take "
                    "the same CPUs as the host's %d other process(es) of the run",
                    comm->rank, length, count, result.sharers - 1);
        }
    }
    /* what the sharers did, for the leader's report: a part is only reported where every sharer bound to its own */
    int *outcomes = tt_xcalloc((size_t)comm->size, sizeof *outcomes, "the ranks' bindings");
    tt_comm_all_gather_host(comm, &outcome, outcomes, sizeof outcome);
    if (outcome != 0) {
        int bound = 0, refused = -1;
        for (int r = 0; r < comm->size; r++)
            if (same_set(&all[r], &record)) {
                bound += outcomes[r] == 1;
                if (outcomes[r] != 1 && refused < 0) refused = r;
            }
        result.bound = bound == result.sharers;
        if (result.bound)
            format_parts(all, comm->size, &record, places, count, result.sharers, result.parts, sizeof result.parts);
        else
            snprintf(result.skipped, sizeof result.skipped,
                     "the system refused rank %d's binding (%d of the %d bound to their parts)", refused, bound,
                     result.sharers);
    }
    free(outcomes);
    free(all);
    free(places);
    free(share);
    return result;
}
