/* The CPUs this process's threads may run on. */
#ifndef TT_CORE_PROCESS_CPUS_H
#define TT_CORE_PROCESS_CPUS_H

#include <stdbool.h>

/* OpenMP binds its threads (OMP_PROC_BIND, OMP_PLACES or GOMP_CPU_AFFINITY make omp_get_proc_bind() other than
 * false): libgomp has then pinned the program's first thread to its first place before main, so that thread's
 * affinity is one place, not the process's CPUs. */
bool tt_openmp_binds_threads(void);

/* The process's CPUs, ascending, into cpus[capacity]; returns their count (0 where the system does not say). Where
 * OpenMP binds its threads, the union of its places; else the calling thread's affinity set (the process's, for a
 * thread nothing pinned since start: threads inherit their creator's). */
int tt_process_cpus(int *cpus, int capacity);

#endif
