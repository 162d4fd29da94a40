/* The split of a machine's CPUs among the run's processes that share one affinity set (dist/host_cpus.h): the parts
 * are disjoint, cover the set, are whole cores differing by one core at most, follow socket-then-core order; fewer
 * cores than processes binds none; which ranks share a set, and each one's place among them; the list text.
 * (tests/test_data_parallel.sh binds two MPI ranks for real.) */
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "core/process_cpus.h"
#include "dist/host_cpus.h"
#include "test_util.h"

#define MAX_CPUS 64

/* A machine of `sockets` x `cores` cores with `threads` hyperthreads each, numbered as Linux does on such machines
 * (CPU c: thread c / (sockets x cores) of core c % (sockets x cores); sockets hold consecutive cores), sorted. */
static int machine(tt_cpu_place *places, int sockets, int cores, int threads) {
    const int all = sockets * cores, count = all * threads;
    for (int c = 0; c < count; c++)
        places[c] = (tt_cpu_place){.cpu = c, .package = (c % all) / cores, .core = (c % all) % cores};
    tt_cpus_by_core(places, count);
    return count;
}

static int core_key(const tt_cpu_place *places, int count, int cpu) {
    for (int i = 0; i < count; i++)
        if (places[i].cpu == cpu) return places[i].package * 1000 + places[i].core;
    return -1;
}

/* Every part of the machine split `group` ways: disjoint, covering, whole cores, core counts within one. */
static void expect_partition(int sockets, int cores, int threads, int group) {
    tt_cpu_place places[MAX_CPUS];
    const int count = machine(places, sockets, cores, threads);
    int owner[MAX_CPUS], fewest = MAX_CPUS, most = 0;
    for (int i = 0; i < MAX_CPUS; i++) owner[i] = -1;
    bool disjoint = true, whole = true;
    for (int index = 0; index < group; index++) {
        int share[MAX_CPUS];
        const int length = tt_cpu_share(places, count, index, group, share);
        for (int i = 0; i < length; i++) {
            disjoint = disjoint && owner[share[i]] < 0;
            owner[share[i]] = index;
        }
        fewest = length < fewest ? length : fewest;
        most = length > most ? length : most;
    }
    bool covered = true;
    for (int i = 0; i < count; i++) {
        covered = covered && owner[places[i].cpu] >= 0;
        /* a core's threads all have one owner */
        for (int j = 0; j < count; j++)
            if (core_key(places, count, places[j].cpu) == core_key(places, count, places[i].cpu))
                whole = whole && owner[places[j].cpu] == owner[places[i].cpu];
    }
    TT_EXPECT(disjoint && covered, "%dx%dx%d CPUs in %d parts: each CPU in exactly one part", sockets, cores, threads,
              group);
    TT_EXPECT(whole, "%dx%dx%d CPUs in %d parts: whole cores", sockets, cores, threads, group);
    TT_EXPECT(most - fewest <= threads, "%dx%dx%d CPUs in %d parts: %d to %d CPUs (a core at most apart)", sockets,
              cores, threads, group, fewest, most);
}

static tt_host_cpu_record record(int machine_id, uint64_t mask0, bool known) {
    tt_host_cpu_record r = {.known = known, .mask = {mask0}};
    snprintf(r.machine, sizeof r.machine, "machine-%d", machine_id);
    return r;
}

int main(void) {
    for (int sockets = 1; sockets <= 2; sockets++)
        for (int cores = 1; cores <= 8; cores += 3)
            for (int threads = 1; threads <= 2; threads++)
                for (int group = 1; group <= sockets * cores; group++) expect_partition(sockets, cores, threads, group);

    tt_cpu_place places[MAX_CPUS];
    int share[MAX_CPUS];
    char text[128];
    /* two sockets of 4 cores with 2 hyperthreads: CPU c + 8 is CPU c's sibling; socket 1 holds cores 4-7 */
    int count = machine(places, 2, 4, 2);
    const int expected[16] = {0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15};
    bool ordered = true;
    for (int i = 0; i < 16; i++) ordered = ordered && places[i].cpu == expected[i];
    TT_EXPECT(ordered, "by socket and core: a core's hyperthreads side by side, socket 0's cores first");
    TT_EXPECT(tt_cpu_share(places, count, 1, 2, share) == 8, "the second of two processes: 8 CPUs");
    tt_format_cpu_list(share, 8, text, sizeof text);
    TT_EXPECT(strcmp(text, "4-7,12-15") == 0, "... socket 1, both threads of its cores (%s)", text);
    tt_format_cpu_list(share, tt_cpu_share(places, count, 0, 3, share), text, sizeof text);
    TT_EXPECT(strcmp(text, "0-2,8-10") == 0, "the first of three: 3 whole cores (%s)", text);
    tt_format_cpu_list(share, tt_cpu_share(places, count, 2, 3, share), text, sizeof text);
    TT_EXPECT(strcmp(text, "6-7,14-15") == 0, "the last of three: the last 2 cores (%s)", text);
    /* fewer cores than processes (3 ranks on a 2-core CI machine): none is bound */
    count = machine(places, 1, 2, 1);
    TT_EXPECT(tt_cpu_share(places, count, 0, 3, share) == 0 && tt_cpu_share(places, count, 2, 3, share) == 0,
              "2 cores, 3 processes: no part");
    TT_EXPECT(tt_cpu_share(places, 0, 0, 2, share) == 0 && tt_cpu_share(places, count, 2, 2, share) == 0 &&
                  tt_cpu_share(places, count, -1, 2, share) == 0 && tt_cpu_share(places, count, 0, 0, share) == 0,
              "an empty set, or an index outside the group: nothing");

    /* which ranks share: ranks 0, 2, 3 one machine and set; 1 the same machine, its own set (numactl); 4 another
     * machine with the same set */
    const tt_host_cpu_record records[5] = {record(7, 0xFF, true), record(7, 0x0F, true), record(7, 0xFF, true),
                                           record(7, 0xFF, true), record(9, 0xFF, true)};
    int index, sharers;
    tt_host_cpu_sharers(records, 5, 3, &index, &sharers);
    TT_EXPECT(sharers == 3 && index == 2, "rank 3 shares with ranks 0 and 2, third among them (%d of %d)", index,
              sharers);
    tt_host_cpu_sharers(records, 5, 0, &index, &sharers);
    TT_EXPECT(sharers == 3 && index == 0, "rank 0: first of 3");
    tt_host_cpu_sharers(records, 5, 1, &index, &sharers);
    TT_EXPECT(sharers == 1 && index == 0, "a set of its own: nothing to split");
    tt_host_cpu_sharers(records, 5, 4, &index, &sharers);
    TT_EXPECT(sharers == 1, "another machine's identical set is not shared");
    /* a process of machine 7 whose set is unknown may run anywhere on it: nothing of machine 7 is split */
    const tt_host_cpu_record unknown[4] = {record(7, 0xFF, true), record(7, 0xFF, true), record(7, 0, false),
                                           record(9, 0xFF, true)};
    tt_host_cpu_sharers(unknown, 4, 1, &index, &sharers);
    TT_EXPECT(sharers == 1 && index == 0, "a machine with an unknown set: no split");
    tt_host_cpu_sharers(unknown, 4, 2, &index, &sharers);
    TT_EXPECT(sharers == 1 && index == 0, "the unknown set itself shares with none");

    int own[1024];
    const int own_count = tt_process_cpus(own, 1024);
    bool ascending = own_count >= 1;
    for (int i = 1; i < own_count; i++) ascending = ascending && own[i] > own[i - 1];
    TT_EXPECT(ascending, "this process's CPUs: %d, ascending", own_count);

    const int scattered[5] = {9, 3, 1, 2, 7};
    tt_format_cpu_list(scattered, 5, text, sizeof text);
    TT_EXPECT(strcmp(text, "1-3,7,9") == 0, "the list text ascending, ranges joined (%s)", text);
    tt_format_cpu_list(scattered, 0, text, sizeof text);
    TT_EXPECT(text[0] == '\0', "no CPUs: an empty text");
    int alternate[32];
    for (int i = 0; i < 32; i++) alternate[i] = 2 * i;
    char small[16];
    tt_format_cpu_list(alternate, 32, small, sizeof small);
    TT_EXPECT(strlen(small) < sizeof small && strcmp(small + strlen(small) - 3, "...") == 0,
              "a list longer than its buffer ends in \"...\" (%s)", small);
    return tt_test_summary("host CPUs");
}
