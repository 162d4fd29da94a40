/* The split of a host's CPUs among the run's processes that share one affinity set (dist/host_cpus.h): the parts are
 * disjoint, cover the set, differ in length by one at most, keep a core's hyperthreads together and a socket's cores
 * together; fewer CPUs than processes; the list text. (tests/test_data_parallel.sh binds two MPI ranks for real.) */
#include <stdbool.h>
#include <string.h>

#include "dist/host_cpus.h"
#include "test_util.h"

#define MAX_CPUS 64

/* Every part of cpus[count] split `group` ways: disjoint, covering, lengths within one of each other, in order. */
static void expect_partition(const int *cpus, int count, int group) {
    int seen[MAX_CPUS] = {0}, shortest = MAX_CPUS, longest = 0, next = 0;
    bool in_order = true;
    for (int index = 0; index < group; index++) {
        int share[MAX_CPUS];
        const int length = tt_cpu_share(cpus, count, index, group, share);
        shortest = length < shortest ? length : shortest;
        longest = length > longest ? length : longest;
        for (int i = 0; i < length; i++) {
            seen[share[i]]++;
            in_order = in_order && share[i] == cpus[next++];
        }
    }
    bool once = true;
    for (int i = 0; i < count; i++) once = once && seen[cpus[i]] == 1;
    TT_EXPECT(once && next == count, "%d CPUs in %d parts: each CPU in exactly one part", count, group);
    TT_EXPECT(longest - shortest <= 1 && shortest >= 1, "%d CPUs in %d parts: lengths %d to %d", count, group, shortest,
              longest);
    TT_EXPECT(in_order, "%d CPUs in %d parts: contiguous parts in rank order", count, group);
}

int main(void) {
    int cpus[MAX_CPUS];
    for (int i = 0; i < MAX_CPUS; i++) cpus[i] = i;
    for (int count = 1; count <= 33; count += 4)
        for (int group = 1; group <= count && group <= 8; group++) expect_partition(cpus, count, group);

    int share[MAX_CPUS];
    TT_EXPECT(tt_cpu_share(cpus, 32, 1, 2, share) == 16 && share[0] == 16 && share[15] == 31,
              "32 CPUs, the second of two processes: CPUs 16-31");
    TT_EXPECT(tt_cpu_share(cpus, 10, 0, 3, share) == 4 && tt_cpu_share(cpus, 10, 2, 3, share) == 3 && share[0] == 7,
              "10 CPUs in 3 parts: 4, 3, 3 (the last from CPU 7)");
    /* fewer CPUs than processes (a 2-core CI machine, 3 ranks): one CPU each, round the set */
    const int two[2] = {4, 5};
    TT_EXPECT(tt_cpu_share(two, 2, 2, 3, share) == 1 && share[0] == 4, "2 CPUs, the third of 3 processes: CPU 4");
    TT_EXPECT(tt_cpu_share(cpus, 0, 0, 2, share) == 0 && tt_cpu_share(cpus, 8, 2, 2, share) == 0 &&
                  tt_cpu_share(cpus, 8, -1, 2, share) == 0 && tt_cpu_share(cpus, 8, 0, 0, share) == 0,
              "an empty set, or an index outside the group: nothing");

    /* two sockets of 4 cores with 2 hyperthreads each, numbered as Linux does on such machines: CPU c is thread 0 of
     * core c % 8, CPU c + 8 its sibling; socket 0 holds cores 0-3. Two processes take one socket each, whole cores. */
    tt_cpu_place places[16];
    for (int c = 0; c < 16; c++) places[c] = (tt_cpu_place){.cpu = c, .package = (c % 8) / 4, .core = c % 4};
    tt_cpus_by_core(places, 16);
    int ordered[16];
    for (int i = 0; i < 16; i++) ordered[i] = places[i].cpu;
    const int expected[16] = {0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15};
    TT_EXPECT(memcmp(ordered, expected, sizeof expected) == 0,
              "by socket and core: a core's hyperthreads side by side, socket 0's cores first");
    char text[128];
    tt_cpu_share(ordered, 16, 1, 2, share);
    tt_format_cpu_list(share, 8, text, sizeof text);
    TT_EXPECT(strcmp(text, "4-7,12-15") == 0, "the second of two processes: socket 1, both threads of its cores (%s)",
              text);
    tt_cpu_share(ordered, 16, 0, 4, share);
    tt_format_cpu_list(share, 4, text, sizeof text);
    TT_EXPECT(strcmp(text, "0-1,8-9") == 0, "the first of four: cores 0 and 1 with their siblings (%s)", text);

    const int scattered[5] = {9, 3, 1, 2, 7};
    tt_format_cpu_list(scattered, 5, text, sizeof text);
    TT_EXPECT(strcmp(text, "1-3,7,9") == 0, "the list text ascending, ranges joined (%s)", text);
    tt_format_cpu_list(cpus, 0, text, sizeof text);
    TT_EXPECT(text[0] == '\0', "no CPUs: an empty text");
    int alternate[32];
    for (int i = 0; i < 32; i++) alternate[i] = 2 * i;
    char small[16];
    tt_format_cpu_list(alternate, 32, small, sizeof small);
    TT_EXPECT(strlen(small) < sizeof small && strcmp(small + strlen(small) - 3, "...") == 0,
              "a list longer than its buffer ends in \"...\" (%s)", small);
    return tt_test_summary("host CPUs");
}
