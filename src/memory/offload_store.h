/* The offload store: per-layer blocks that the plan sends off the compute tier between their
 * forward and their backward, and the copies that move them. A run has two: the layer inputs
 * (the checkpoints) and the kept saved activations of layers whose saved slots are offloaded
 * (selective_checkpointing offload, activation_offloading: true without recompute, Megatron's
 * cpu_offloading, and blocks the planner spills, tt_plan_spill). A block lives in host memory
 * (pinned, or pageable with use_pin_memory: false) or on disk; on the compute tier it only ever occupies one of a ring
 * of staging buffers that the step program pushes each micro-step.
 *
 * The schedule, with the orderings it relies on (copies through the backend's copy engine):
 *   forward:  layer l's block goes into ring buffer k % R (k: l's rank among offloaded layers)
 *             only after the copy out of that buffer's previous block is done (before_write: the
 *             compute stream waits, the host does not); once the block is written its copy out
 *             starts (offload) and runs beside the next layer's forward.
 *   backward: the topmost block is copied back while the LM head runs (start_restores);
 *             restore(l) makes the compute stream wait for block l and starts copying back the
 *             next block below, so it arrives during layer l's recompute and backward. A copy
 *             back starts after the copy out it reads (its `after` ticket) and after every op
 *             issued before it, so the buffer's previous user is done.
 *   disk:     the copy out lands in one of two pinned page-aligned buffers that the IO thread
 *             writes to the file once the copy is done (it waits for it); reads come back one
 *             offloaded layer ahead through the same two buffers.
 * Streamed copies (true, hidden_states, disk, cpu_offloading) overlap compute; unstreamed ones
 * (legacy, use_streams: false) block the host until they are done. */
#ifndef TT_MEMORY_OFFLOAD_STORE_H
#define TT_MEMORY_OFFLOAD_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/arena.h"
#include "memory/plan.h"
#include "memory/unit_hooks.h"
#include "ops/backend.h"

struct tt_disk_store;

typedef struct tt_offload_store {
    const tt_backend *backend;
    bool streamed;              /* copies overlap compute (else the host waits for each) */
    int64_t num_layers;         /* L */
    size_t *bytes;              /* [L] bytes of layer l's block (0: the layer offloads nothing) */
    void **home;                /* [L] a block's place in host memory, NULL when on disk or not offloaded */
    int64_t *ring_slot;         /* [L+1] the staging buffer of a block in the ring, -1 for the others */
    int64_t *disk_slot;         /* [L+1] a block's slot in the disk file (the blocks on disk numbered in layer order; the
                                   file holds only those), -1 for the others */
    int64_t ring_count;         /* staging buffers */
    void **ring;                /* [ring_count] staging buffers of the current micro-step */
    uint64_t *ring_copy_out;    /* [ring_count] the last copy out of each staging buffer (0: none) */
    uint64_t *copied_out;       /* [L] ticket of block l's copy out this micro-step */
    uint64_t *copied_back;      /* [L] ticket of block l's copy back this micro-step */
    struct tt_disk_store *disk; /* the disk tier, or NULL */
    void *disk_buffer[2];       /* pinned, page-aligned */
    int64_t disk_job[2];        /* the last disk job on each buffer */
    uint64_t disk_copy[2];      /* the last GPU copy into or out of each buffer */
    int disk_next;              /* the buffer the next forward write takes */
    int disk_reading;           /* the buffer the next disk read lands in */
    int64_t disk_holds[2];      /* the block a disk read brought into each buffer, -1 when none */
    bool holds_layer_inputs;    /* block u is what unit u's forward writes (layer inputs: the embedding writes x[0],
                                  layer l x[l + 1]); else block l is layer l's (unit l + 1's) own */
} tt_offload_store;

/* tiers[l]: where layer l's block lives (the compute tier: not offloaded); bytes[l] its size.
 * Blocks on disk go to a store under disk_dir with two `disk_buffer_bytes` buffers (whole pages)
 * pushed onto `host` (class `cls`) here: the arena's next push must be on a page boundary, so
 * every store's disk buffers go first. head_shares_ring: the LM head's input (index L) takes the
 * ring buffer after the last layer's when that layer is offloaded (layer inputs). */
void tt_offload_store_init(tt_offload_store *store, const tt_backend *backend, int64_t num_layers, const tt_tier *tiers,
                           tt_tier compute_tier, const size_t *bytes, int64_t ring_count, bool streamed,
                           bool head_shares_ring, tt_arena *host, tt_class cls, const char *disk_dir,
                           size_t disk_buffer_bytes);
/* Pushes the homes of the blocks that live in host memory onto `host` (after every store's init). */
void tt_offload_store_place_homes(tt_offload_store *store, const tt_tier *tiers, tt_arena *host, tt_class cls);
void tt_offload_store_free(tt_offload_store *store);
/* Whether any block leaves the compute tier (else the store needs no hook). */
bool tt_offload_store_any(const tt_offload_store *store);
/* The store's part in a step (unit_hooks.h): before a unit's forward, the block it writes may take its staging
 * buffer (before_write); after it, the block leaves (offload, training only); before the head, the topmost block
 * starts back (start_restores, training only); before unit l + 1's backward block l comes back (restore), after it
 * its buffer may take the next (release). ctx: the store. */
void tt_offload_store_hook(void *ctx, tt_hook_point point, int64_t unit, bool train);
/* Bytes on the disk tier, measured: the slots of the blocks a measuring store (the step program's dry run) saw
 * written; 0 for a store with a real file (tt_offload_store_disk_reserved_bytes gives its size). */
size_t tt_offload_store_disk_bytes(const tt_offload_store *store);
/* The disk file's size: one slot per block on the disk tier. */
size_t tt_offload_store_disk_reserved_bytes(const tt_offload_store *store);

static inline bool tt_offload_store_offloaded(const tt_offload_store *store, int64_t l) {
    return l < store->num_layers && store->ring_slot[l] >= 0;
}
/* Whether block l lives in a staging buffer (the offloaded ones, and the head's input when it
 * shares the ring). */
static inline bool tt_offload_store_in_ring(const tt_offload_store *store, int64_t l) {
    return store->ring_slot[l] >= 0;
}
/* The staging buffer block l uses on the compute tier this micro-step (blocks in the ring only). */
static inline void *tt_offload_store_buffer(const tt_offload_store *store, int64_t l) {
    return store->ring[store->ring_slot[l]];
}
/* The compute stream may overwrite block l's staging buffer from here on. */
void tt_offload_store_before_write(tt_offload_store *store, int64_t l);
/* Block l has just been written: start its copy out. */
void tt_offload_store_offload(tt_offload_store *store, int64_t l);
/* Before the LM head: start copying back the topmost offloaded block. */
void tt_offload_store_start_restores(tt_offload_store *store);
/* Before layer l's backward: ops issued from here on see block l; the next one below is on its way
 * (unless it needs the same staging buffer: then release starts it). */
void tt_offload_store_restore(tt_offload_store *store, int64_t l);
/* After layer l's backward has been issued: its staging buffer may take the next block. */
void tt_offload_store_release(tt_offload_store *store, int64_t l);

#endif
