/* The CPUs this process's threads may run on (see process_cpus.h). */
#include "core/process_cpus.h"

#include <omp.h>
#include <sched.h>
#include <stdlib.h>

#include "core/check.h"

bool tt_openmp_binds_threads(void) { return omp_get_proc_bind() != omp_proc_bind_false; }

int tt_process_cpus(int *cpus, int capacity) {
    int count = 0;
    if (tt_openmp_binds_threads() && omp_get_num_places() > 0) {
        cpu_set_t seen;
        CPU_ZERO(&seen);
        for (int p = 0; p < omp_get_num_places(); p++) {
            const int n = omp_get_place_num_procs(p);
            if (n <= 0) continue;
            int *ids = tt_xcalloc((size_t)n, sizeof *ids, "an OpenMP place's CPUs");
            omp_get_place_proc_ids(p, ids);
            for (int i = 0; i < n; i++)
                if (ids[i] >= 0 && ids[i] < CPU_SETSIZE) CPU_SET(ids[i], &seen);
            free(ids);
        }
        for (int c = 0; c < CPU_SETSIZE && count < capacity; c++)
            if (CPU_ISSET(c, &seen)) cpus[count++] = c;
        if (count > 0) return count;
    }
    cpu_set_t mine;
    CPU_ZERO(&mine);
    if (sched_getaffinity(0, sizeof mine, &mine) != 0) return 0;
    for (int c = 0; c < CPU_SETSIZE && count < capacity; c++)
        if (CPU_ISSET(c, &mine)) cpus[count++] = c;
    return count;
}
