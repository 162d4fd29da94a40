/* The CPUs of a host that a run's processes there share.
 *
 * A launcher that starts several processes on a host without binding them (torchrun, or this project's own scripts with
 * torchrun's variables; mpirun --bind-to none, or oversubscribed) leaves every process the same affinity set. Each
 * process then pinned its thread pools (the CPU AdamW's) to the same first CPUs of that set and left the rest idle: on
 * two H200s of a 32-CPU host each rank of a Qwen3-8B full fine-tune with optimizer_cpu_offload updated at 54 GB/s with
 * 16 threads on the same 16 CPUs, where one process alone reached 142 GB/s on all 32. So the processes of one machine
 * (one kernel: its boot id) with an identical affinity set split it: each takes whole cores, contiguous in socket-then-
 * core order, in rank order (where the GPUs are numbered along the sockets, as on common two-socket hosts, an even
 * split puts each rank on its GPU's socket; the GPUs' own CPU lists are not read). Sets the launcher made different per
 * process (mpirun's default for two processes, numactl, Slurm's binding) are kept; processes it gave one set (mpirun's
 * default for more, by socket) split that set. Nothing is bound where an OpenMP binding variable is set (OMP_PROC_BIND,
 * OMP_PLACES, GOMP_CPU_AFFINITY: libgomp has then already pinned the thread that reads the set), or where the set has
 * fewer cores than processes (stacking processes on a core would be slower than leaving the scheduler free). */
#ifndef TT_DIST_HOST_CPUS_H
#define TT_DIST_HOST_CPUS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dist/comm.h"

/* A CPU and where it sits: its socket (physical_package_id) and its core (the first CPU of the core's
 * thread_siblings_list: unique in the machine, where core_id repeats across a package's dies or clusters). */
typedef struct tt_cpu_place {
    int cpu, package, core;
} tt_cpu_place;

/* Sorts places by socket, core, then CPU number: the hyperthreads of a core next to each other. */
void tt_cpus_by_core(tt_cpu_place *places, int count);

/* The index-th of `group` parts of places[count] (sorted by tt_cpus_by_core), its CPUs into share[]; returns their
 * count. A part is whole cores, contiguous in that order; the first (cores % group) parts are one core longer. 0 where
 * the set has fewer cores than the group, or the index is outside [0, group). */
int tt_cpu_share(const tt_cpu_place *places, int count, int index, int group, int *share);

/* cpus[count] as the kernel's list format, ascending ("0-7,16-23"), into text[size] (cut short where it does not fit,
 * ending in "..."). */
void tt_format_cpu_list(const int *cpus, int count, char *text, size_t size);

/* What one rank tells the others: its machine and its affinity set before any split (known 0 where it could not be
 * read: such a rank shares with none). */
#define TT_CPU_MASK_WORDS 16 /* 1024 CPUs: CPU_SETSIZE */
typedef struct tt_host_cpu_record {
    char machine[72]; /* the kernel's boot id (the host's name where it cannot be read) */
    uint64_t known;
    uint64_t mask[TT_CPU_MASK_WORDS];
} tt_host_cpu_record;

/* The ranks among records[size] with rank's machine and set: their count (*sharers, at least 1) and rank's place
 * among them in rank order (*index). */
void tt_host_cpu_sharers(const tt_host_cpu_record *records, int size, int rank, int *index, int *sharers);

/* What tt_bind_host_cpu_share found and did. */
typedef struct tt_cpu_binding {
    int sharers;       /* processes of this machine with this process's set (1: nothing to split) */
    int set_cpus;      /* the CPUs of that set */
    bool bound;        /* every sharer bound itself to its part */
    char parts[512];   /* (bound) every sharer's part: "rank 0: CPUs 0-15; rank 1: CPUs 16-31", "; ..." if cut */
    char skipped[160]; /* why a shared set was not split ("" where it was, or where none was shared) */
} tt_cpu_binding;

/* Every rank calls it once, before any thread pool starts (threads started later inherit the part): the records are
 * gathered over the communicator and each rank of a shared set binds itself to its part (a warning, not an end,
 * where the system refuses); a second gather tells every rank what the others did. The thread counts are not
 * changed: each process of a host still runs (cores / processes) threads unless num_threads says, which is what
 * `plan --processes` prices. */
tt_cpu_binding tt_bind_host_cpu_share(const tt_comm *comm);

#endif
