/* A test hook for the fault tests (tests/test_faults.sh): a full disk without root or a tmpfs.
 *
 * TT_FAULT_ENOSPC_AFTER_BYTES=N in the environment makes the writers of files tiertrain owns
 * (checkpoints and the final model through safetensors.c's atomic writes, the disk tier's
 * reservation and writes) fail with ENOSPC once N bytes in all have been written by the process,
 * as a disk that fills up would, and the free space a start-up check asks for is what is left of N.
 *
 * TT_FAULT_HOST_MEMORY_BYTES=N makes the machine's memory read as N bytes (core/host_memory.h).
 *
 * TT_FAULT_SAVE_PAUSE_MS=N makes every checkpoint save pause N ms after its files are written
 * and before checkpoint-<step>.partial is renamed to its final name, so a test can interrupt a
 * save at that moment. Unset (always, outside tests) neither changes anything. */
#ifndef TT_CORE_FAULT_INJECT_H
#define TT_CORE_FAULT_INJECT_H

#include <stddef.h>

/* Counts `bytes` about to be written; 0 to go ahead, or ENOSPC once the budget is spent. */
int tt_fault_before_write(size_t bytes);

/* The free bytes a file system reports, or less under TT_FAULT_ENOSPC_AFTER_BYTES: what its budget has left. */
size_t tt_fault_free_bytes(size_t reported);

/* The machine's physical memory as the system reports it, or TT_FAULT_HOST_MEMORY_BYTES when set (a test hook: a
 * small machine's checks on any machine). */
size_t tt_fault_physical_memory(size_t reported);

/* Sleeps TT_FAULT_SAVE_PAUSE_MS milliseconds, if set. */
void tt_fault_pause_in_save(void);

#endif
