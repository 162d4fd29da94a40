/* The disk tier: one file of fixed-size slots under a directory, written and read by a worker
 * thread so that the IO runs while the caller computes. The file is unlinked as soon as it is
 * created, so it disappears when the process ends, however it ends (error, Ctrl-C, crash).
 * Reads and writes use O_DIRECT (no page cache) when the filesystem allows it; buffers, slot
 * sizes and offsets are then multiples of TT_DISK_ALIGNMENT. */
#ifndef TT_MEMORY_DISK_STORE_H
#define TT_MEMORY_DISK_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TT_DISK_ALIGNMENT ((size_t)4096)

typedef struct tt_disk_store tt_disk_store;

/* The free bytes of the file system holding dir (as an unprivileged writer may use them); false when it cannot be
 * asked (the directory is missing: creating the file then says why). */
bool tt_disk_free_bytes(const char *dir, size_t *free_bytes);

/* The disk bytes one of `processes` processes sharing the file system may plan for: an equal share of free_bytes,
 * less a thousandth for the file system's own blocks (the extents of a large reserved file). */
size_t tt_disk_budget(size_t free_bytes, int processes);

/* slots of slot_bytes (rounded up to TT_DISK_ALIGNMENT) in a new file under dir. */
tt_disk_store *tt_disk_store_open(const char *dir, int64_t slots, size_t slot_bytes);
void tt_disk_store_close(tt_disk_store *store);
/* A store with no file and no thread, for the step program's dry run (train/measure.h): jobs are done
 * at once and move nothing; tt_disk_store_bytes_written gives the bytes of the slots written, what the
 * real store's file holds after the same jobs. */
tt_disk_store *tt_disk_store_open_measure(int64_t slots, size_t slot_bytes);
size_t tt_disk_store_bytes_written(const tt_disk_store *store);
/* The file's size: slots times the rounded slot size (0 for a measuring store or NULL). */
size_t tt_disk_store_reserved_bytes(const tt_disk_store *store);

/* Queues a write of bytes from buf (TT_DISK_ALIGNMENT-aligned) into slot, or a read of slot into
 * buf; buf must stay untouched until tt_disk_store_wait returns for the returned ticket. Jobs run
 * in submission order. When ready is not NULL the worker first calls ready(ready_ctx, ready_ticket),
 * which returns once buf may be used (a GPU copy into or out of it is done: the backend's
 * copy_host_wait, with its context). */
int64_t tt_disk_store_write(tt_disk_store *store, int64_t slot, const void *buf, size_t bytes,
                            void (*ready)(void *ready_ctx, uint64_t ticket), void *ready_ctx, uint64_t ready_ticket);
int64_t tt_disk_store_read(tt_disk_store *store, int64_t slot, void *buf, size_t bytes,
                           void (*ready)(void *ready_ctx, uint64_t ticket), void *ready_ctx, uint64_t ready_ticket);
/* Waits until the job of ticket (and every job before it) is done; an IO error stops the run
 * with the file, the slot and the system's reason. */
void tt_disk_store_wait(tt_disk_store *store, int64_t ticket);

/* Bytes written and read, and seconds the worker spent in IO, since open. */
void tt_disk_store_stats(const tt_disk_store *store, size_t *written, size_t *read, double *io_seconds);

#endif
