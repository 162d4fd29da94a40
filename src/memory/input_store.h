/* The layer-input store: where the checkpoints (decoder layer inputs) that the plan offloads
 * live between their forward and their backward, and the copies that move them.
 *
 * On the compute tier an offloaded input only ever occupies one of a ring of staging buffers
 * (plan.offload_ring of them, pushed by the step program each micro-step); its home is a slot of
 * the host arena (pinned, or pageable with use_pin_memory: false) or of the disk store.
 *
 * The schedule, with the orderings it relies on (copies through the backend's copy engine):
 *   forward:  layer l-1 writes input l into ring buffer k % R (k: l's rank among offloaded
 *             layers) only after the copy out of that buffer's previous input is done
 *             (before_write: the compute stream waits, the host does not); as soon as input l
 *             is written, its copy out starts (offload) and runs beside layer l's forward.
 *   backward: the input of the topmost offloaded layer is copied back while the LM head runs
 *             (start_restores); restore(l) makes the compute stream wait for input l and starts
 *             copying back the next offloaded input below, so it arrives during layer l's
 *             recompute and backward. A copy back starts after the copy out it reads (its
 *             `after` ticket) and after every op issued before it, so the buffer's previous
 *             user is done.
 *   disk:     the copy out lands in one of two pinned page-aligned buffers that the IO thread
 *             writes to the file once the copy is done (it waits for it); reads come back one
 *             offloaded layer ahead through the same two buffers.
 * Streamed (true, hidden_states, disk) copies overlap compute; unstreamed ones (legacy,
 * use_streams: false) block the host until they are done. */
#ifndef TT_MEMORY_INPUT_STORE_H
#define TT_MEMORY_INPUT_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/arena.h"
#include "memory/plan.h"
#include "memory/size_table.h"
#include "ops/backend.h"

struct tt_disk_store;

typedef struct tt_input_store {
    const tt_backend *backend;
    const tt_plan *plan;       /* borrowed */
    int64_t num_layers;        /* L */
    size_t bytes;              /* one layer input [B*T, D] in the compute precision */
    tt_arena host;             /* offloaded inputs and disk staging buffers (pinned or pageable), or empty */
    void **home;               /* [L] an input's slot in host memory, NULL when not there */
    int64_t *ring_slot;        /* [L+1] the staging buffer of an input in the ring, -1 for the others */
    void **ring;               /* [plan.offload_ring] staging buffers of the current micro-step */
    uint64_t *ring_copy_out;   /* [ring] the last copy out of each staging buffer (0: none) */
    uint64_t *copied_out;      /* [L] ticket of input l's copy out this micro-step */
    uint64_t *copied_back;     /* [L] ticket of input l's copy back this micro-step */
    struct tt_disk_store *disk;/* the disk tier, or NULL */
    void *disk_buffer[2];      /* pinned, page-aligned */
    int64_t disk_job[2];       /* the last disk job on each buffer */
    uint64_t disk_copy[2];     /* the last GPU copy into or out of each buffer */
    int disk_next;             /* the buffer the next forward write takes */
    int disk_reading;          /* the buffer the next disk read lands in */
    int64_t disk_holds[2];     /* the input a disk read brought into each buffer, -1 when none */
} tt_input_store;

/* Reserves the host arena and opens the disk store as the size table says; dies with a clear
 * message when host_memory_budget is too small. */
void tt_input_store_init(tt_input_store *store, const tt_plan *plan, const tt_size_table *sizes,
                         const tt_backend *backend, size_t input_bytes);
void tt_input_store_free(tt_input_store *store);

static inline bool tt_input_store_offloaded(const tt_input_store *store, int64_t l) {
    return l < store->num_layers && store->ring_slot[l] >= 0;
}
/* Whether input l lives in a staging buffer: the offloaded ones, and the LM head's input when the
 * last layer's input is offloaded (it is dead by the time that buffer is wanted back, so it costs
 * no buffer of its own). */
static inline bool tt_input_store_in_ring(const tt_input_store *store, int64_t l) {
    return store->ring_slot[l] >= 0;
}
/* The staging buffer input l uses on the compute tier this micro-step (inputs in the ring only). */
static inline void *tt_input_store_buffer(const tt_input_store *store, int64_t l) {
    return store->ring[store->ring_slot[l]];
}
/* The compute stream may overwrite input l's staging buffer from here on. */
void tt_input_store_before_write(tt_input_store *store, int64_t l);
/* Input l has just been written: start its copy out. */
void tt_input_store_offload(tt_input_store *store, int64_t l);
/* Before the LM head: start copying back the topmost offloaded input. */
void tt_input_store_start_restores(tt_input_store *store);
/* Before layer l's backward: ops issued from here on see input l; the next one below is on its way. */
void tt_input_store_restore(tt_input_store *store, int64_t l);

#endif
