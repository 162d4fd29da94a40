/* The CPUs of a host that a run's processes there share.
 *
 * A launcher that starts several processes on a host without binding them (torchrun, or this project's own scripts
 * with torchrun's variables; mpirun --bind-to none) leaves every process the same affinity set: the whole machine.
 * Each process then pinned its thread pools (the CPU AdamW's) to the same first CPUs of that set and left the rest
 * idle: on two H200s of a 32-core host each rank of a Qwen3-8B full fine-tune with optimizer_cpu_offload updated at
 * 54 GB/s with 16 threads on the same 16 CPUs, where one process alone reached 142 GB/s on all 32. So the processes
 * of a host that share one affinity set split it, each taking a contiguous part in rank order of the set's CPUs
 * ordered by socket and core (a process takes whole cores, and one socket where its part fits in one); a set the
 * launcher already made different per process (mpirun's --bind-to core or socket, numactl, Slurm's binding) is kept. */
#ifndef TT_DIST_HOST_CPUS_H
#define TT_DIST_HOST_CPUS_H

#include <stddef.h>

#include "dist/comm.h"

/* A CPU and where it sits: its socket (physical_package_id) and its core (core_id) in that socket. */
typedef struct tt_cpu_place {
    int cpu, package, core;
} tt_cpu_place;

/* Sorts places by socket, core, then CPU number: the hyperthreads of a core next to each other. */
void tt_cpus_by_core(tt_cpu_place *places, int count);

/* The index-th of `group` contiguous parts of cpus[count], into share[]; returns its length. The first
 * count % group parts are one CPU longer; with fewer CPUs than processes, each takes CPU index % count. 0 for an
 * empty set or an index outside [0, group). */
int tt_cpu_share(const int *cpus, int count, int index, int group, int *share);

/* cpus[count] as the kernel's list format, ascending ("0-7,16-23"), into text[size] (cut short where it does not fit,
 * ending in "..."). */
void tt_format_cpu_list(const int *cpus, int count, char *text, size_t size);

/* What tt_bind_host_cpu_share found and did. */
typedef struct tt_cpu_binding {
    int cpus;       /* CPUs this process may run on afterwards */
    int sharers;    /* processes of this host that had this process's affinity set (1: nothing was split) */
    int set_cpus;   /* the CPUs of that set */
    char list[128]; /* this process's CPUs afterwards, tt_format_cpu_list's text ("" where the system did not say) */
} tt_cpu_binding;

/* Every rank calls it once, before any thread pool starts: the affinity sets are gathered over the communicator,
 * ranks with this host's name and an identical set split it (each binding itself to its part, which it then reads
 * back). Where the system refuses (no affinity calls), it warns and binds nothing. */
tt_cpu_binding tt_bind_host_cpu_share(const tt_comm *comm);

#endif
