#include "memory/offload_store.h"

#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "memory/disk_store.h"

void tt_offload_store_init(tt_offload_store *st, const tt_backend *backend, int64_t L, const tt_tier *tiers,
                           tt_tier compute_tier, const size_t *bytes, int64_t ring_count, bool streamed,
                           bool head_shares_ring, tt_arena *host, tt_class cls, const char *disk_dir,
                           size_t disk_buffer_bytes) {
    memset(st, 0, sizeof(*st));
    st->backend = backend;
    st->streamed = streamed;
    st->num_layers = L;
    st->ring_count = ring_count;
    st->bytes = tt_xcalloc((size_t)L + 1, sizeof(size_t), "offloaded blocks");
    st->home = tt_xcalloc((size_t)L + 1, sizeof(void *), "offloaded blocks");
    st->ring_slot = tt_xcalloc((size_t)L + 1, sizeof(int64_t), "offloaded blocks");
    st->disk_slot = tt_xcalloc((size_t)L + 1, sizeof(int64_t), "offloaded blocks");
    st->copied_out = tt_xcalloc((size_t)L + 1, sizeof(uint64_t), "offload copies");
    st->copied_back = tt_xcalloc((size_t)L + 1, sizeof(uint64_t), "offload copies");
    st->ring = tt_xcalloc((size_t)ring_count + 1, sizeof(void *), "staging ring");
    st->ring_copy_out = tt_xcalloc((size_t)ring_count + 1, sizeof(uint64_t), "staging ring");
    int64_t rank = 0, on_disk = 0;
    for (int64_t l = 0; l < L; l++) {
        const bool offloaded = tiers[l] != compute_tier && bytes[l] > 0;
        st->bytes[l] = offloaded ? bytes[l] : 0;
        st->ring_slot[l] = offloaded ? rank++ % ring_count : -1;
        /* the file holds the disk tier's blocks only (a slot per layer reserved, at 512k tokens, 144 GiB for 13
         * layer inputs of 4 GiB on disk) */
        st->disk_slot[l] = offloaded && tiers[l] == TT_TIER_DISK ? on_disk++ : -1;
    }
    st->disk_slot[L] = -1;
    st->ring_slot[L] = head_shares_ring && L > 0 && st->ring_slot[L - 1] >= 0 ? rank % ring_count : -1;
    st->holds_layer_inputs = head_shares_ring;
    /* the disk buffers first: whole pages, as O_DIRECT wants, from a page boundary (the caller
     * pushes every store's disk buffers before any home) */
    if (on_disk)
        for (int i = 0; i < 2; i++) st->disk_buffer[i] = tt_arena_push(host, disk_buffer_bytes, cls, "disk buffer");
    size_t largest_on_disk = 0;
    for (int64_t l = 0; l < L; l++)
        if (st->bytes[l] && tiers[l] == TT_TIER_DISK && st->bytes[l] > largest_on_disk) largest_on_disk = st->bytes[l];
    TT_CHECK(largest_on_disk <= disk_buffer_bytes, "disk buffers of %zu bytes for blocks of %zu", disk_buffer_bytes,
             largest_on_disk);
    /* on a measuring arena (the step program's dry run) the disk is measured, not written */
    if (on_disk)
        st->disk = host->measuring ? tt_disk_store_open_measure(on_disk, largest_on_disk)
                                   : tt_disk_store_open(disk_dir, on_disk, largest_on_disk);
    st->disk_holds[0] = st->disk_holds[1] = -1;
}

void tt_offload_store_place_homes(tt_offload_store *st, const tt_tier *tiers, tt_arena *host, tt_class cls) {
    for (int64_t l = 0; l < st->num_layers; l++)
        if (st->bytes[l] && tiers[l] != TT_TIER_DISK)
            st->home[l] = tt_arena_push(host, st->bytes[l], cls, "offloaded block");
}

size_t tt_offload_store_disk_bytes(const tt_offload_store *st) { return tt_disk_store_bytes_written(st->disk); }

size_t tt_offload_store_disk_reserved_bytes(const tt_offload_store *st) {
    return tt_disk_store_reserved_bytes(st->disk);
}

void tt_offload_store_free(tt_offload_store *st) {
    if (st->backend) tt_backend_synchronize(st->backend); /* no copy may still touch the host memory */
    tt_disk_store_close(st->disk);
    free(st->bytes);
    free(st->home);
    free(st->ring_slot);
    free(st->disk_slot);
    free(st->copied_out);
    free(st->copied_back);
    free(st->ring);
    free(st->ring_copy_out);
    memset(st, 0, sizeof(*st));
}

static void finish_if_unstreamed(const tt_offload_store *st, uint64_t ticket) {
    if (!st->streamed) tt_backend_copy_host_wait(st->backend, ticket);
}

void tt_offload_store_before_write(tt_offload_store *st, int64_t l) {
    tt_backend_copy_wait(st->backend, st->ring_copy_out[st->ring_slot[l]]);
}

void tt_offload_store_offload(tt_offload_store *st, int64_t l) {
    const tt_backend *b = st->backend;
    const int64_t slot = st->ring_slot[l];
    uint64_t ticket;
    if (st->home[l]) {
        ticket = tt_backend_copy_async(b, st->home[l], st->ring[slot], st->bytes[l], true, 0);
    } else {
        /* to disk through buffer j, once its last job is done; the IO thread writes it out as soon
         * as the copy has landed */
        const int j = st->disk_next;
        st->disk_next ^= 1;
        tt_disk_store_wait(st->disk, st->disk_job[j]);
        ticket = tt_backend_copy_async(b, st->disk_buffer[j], st->ring[slot], st->bytes[l], true, 0);
        st->disk_copy[j] = ticket;
        st->disk_holds[j] = -1;
        st->disk_job[j] = tt_disk_store_write(st->disk, st->disk_slot[l], st->disk_buffer[j], st->bytes[l],
                                              b->iface->copy_host_wait, b->ctx, ticket);
    }
    st->ring_copy_out[slot] = ticket;
    st->copied_out[l] = ticket;
    finish_if_unstreamed(st, ticket);
}

static int64_t offloaded_below(const tt_offload_store *st, int64_t above) {
    for (int64_t l = above - 1; l >= 0; l--)
        if (st->ring_slot[l] >= 0) return l;
    return -1;
}

static int64_t on_disk_below(const tt_offload_store *st, int64_t above) {
    for (int64_t l = above - 1; l >= 0; l--)
        if (st->ring_slot[l] >= 0 && !st->home[l]) return l;
    return -1;
}

/* Queues the disk read of block l into the next read buffer, once the GPU copy out of that
 * buffer (its previous block on the way back) is done. */
static void queue_disk_read(tt_offload_store *st, int64_t l) {
    const int j = st->disk_reading;
    st->disk_reading ^= 1;
    st->disk_job[j] = tt_disk_store_read(st->disk, st->disk_slot[l], st->disk_buffer[j], st->bytes[l],
                                         st->backend->iface->copy_host_wait, st->backend->ctx, st->disk_copy[j]);
    st->disk_holds[j] = l;
}

static void start_copy_back(tt_offload_store *st, int64_t l) {
    const tt_backend *b = st->backend;
    void *dst = st->ring[st->ring_slot[l]];
    uint64_t ticket;
    if (st->home[l]) {
        ticket = tt_backend_copy_async(b, dst, st->home[l], st->bytes[l], false, st->copied_out[l]);
    } else {
        int j = st->disk_holds[0] == l ? 0 : st->disk_holds[1] == l ? 1 : -1;
        if (j < 0) {
            j = st->disk_reading;
            queue_disk_read(st, l);
        }
        tt_disk_store_wait(st->disk, st->disk_job[j]);
        ticket = tt_backend_copy_async(b, dst, st->disk_buffer[j], st->bytes[l], false, 0);
        st->disk_copy[j] = ticket;
        st->disk_holds[j] = -1;
        /* the next disk block below comes off the disk while this layer computes */
        const int64_t next = on_disk_below(st, l);
        if (next >= 0) queue_disk_read(st, next);
    }
    st->copied_back[l] = ticket;
    finish_if_unstreamed(st, ticket);
}

void tt_offload_store_start_restores(tt_offload_store *st) {
    const int64_t top = offloaded_below(st, st->num_layers);
    if (top >= 0) start_copy_back(st, top);
}

void tt_offload_store_restore(tt_offload_store *st, int64_t l) {
    tt_backend_copy_wait(st->backend, st->copied_back[l]);
    /* with one staging buffer the next block must wait until this layer is done (release) */
    const int64_t below = offloaded_below(st, l);
    if (below >= 0 && st->ring_slot[below] != st->ring_slot[l]) start_copy_back(st, below);
}

void tt_offload_store_release(tt_offload_store *st, int64_t l) {
    const int64_t below = offloaded_below(st, l);
    if (below >= 0 && st->ring_slot[below] == st->ring_slot[l]) start_copy_back(st, below);
}

bool tt_offload_store_any(const tt_offload_store *st) {
    for (int64_t l = 0; l < st->num_layers; l++)
        if (st->ring_slot[l] >= 0) return true;
    return false;
}

void tt_offload_store_hook(void *ctx, tt_hook_point point, int64_t unit, bool train) {
    tt_offload_store *st = ctx;
    const int64_t L = st->num_layers;
    const int64_t written = st->holds_layer_inputs ? unit : unit - 1; /* the block unit's forward writes */
    const int64_t read = unit - 1;                                    /* the block unit's backward reads */
    switch (point) {
    case TT_HOOK_BEFORE_FORWARD:
        if (unit == L + 1) { /* the head: its backward follows at once */
            if (train) tt_offload_store_start_restores(st);
        } else if (written >= 0 && written <= L && tt_offload_store_in_ring(st, written)) {
            tt_offload_store_before_write(st, written);
        }
        return;
    case TT_HOOK_AFTER_FORWARD:
        if (train && written >= 0 && tt_offload_store_offloaded(st, written)) tt_offload_store_offload(st, written);
        return;
    case TT_HOOK_BEFORE_BACKWARD:
        if (read >= 0 && tt_offload_store_offloaded(st, read)) tt_offload_store_restore(st, read);
        return;
    case TT_HOOK_AFTER_BACKWARD:
        if (read >= 0 && tt_offload_store_offloaded(st, read)) tt_offload_store_release(st, read);
        return;
    case TT_HOOK_BEFORE_GRADIENTS: return;
    }
}
