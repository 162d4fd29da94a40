/* How much of the machine's memory a run may plan for when host_memory_budget is 0. */
#ifndef TT_CORE_HOST_MEMORY_H
#define TT_CORE_HOST_MEMORY_H

#include <stddef.h>

/* The machine's physical memory less what the system keeps (a sixteenth of it, at least 4 GiB and at most half on
 * a machine of 8 GiB or less: the kernel, the GPU
 * driver's page arrays for pinned memory, the process's own pageable buffers), shared evenly by `processes` processes
 * on the host. A plan that pinned all of the physical memory was killed by the kernel's OOM killer on the H100
 * machine (123.3 GiB pinned of 125.9). 0 where the system does not say. */
size_t tt_host_memory_default_budget(int processes);

/* The machine's memory for runs: the physical memory, or less where the process's cgroup limits it (a Slurm job's, a
 * container's: cgroup v2's memory.max or v1's memory.limit_in_bytes, the tightest from the process's group up to the
 * root); 0 where the system does not say. */
size_t tt_host_memory_physical(void);

/* A cgroup memory limit file's text: bytes, or 0 for none ("max", v1's near-2^63 "unlimited", or not a number). */
size_t tt_cgroup_limit_from_text(const char *text);

#endif
