#include "memory/input_store.h"

#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "memory/disk_store.h"

void tt_input_store_init(tt_input_store *st, const tt_plan *plan, const tt_size_table *sizes,
                         const tt_backend *backend, size_t input_bytes) {
    memset(st, 0, sizeof(*st));
    st->backend = backend;
    st->plan = plan;
    st->num_layers = plan->num_layers;
    st->bytes = input_bytes;
    const int64_t L = plan->num_layers;
    st->home = tt_xcalloc((size_t)L, sizeof(void *), "offloaded layer inputs");
    st->ring_slot = tt_xcalloc((size_t)L + 1, sizeof(int64_t), "offloaded layer inputs");
    st->copied_out = tt_xcalloc((size_t)L, sizeof(uint64_t), "offload copies");
    st->copied_back = tt_xcalloc((size_t)L, sizeof(uint64_t), "offload copies");
    st->ring = tt_xcalloc((size_t)plan->offload_ring, sizeof(void *), "staging ring");
    st->ring_copy_out = tt_xcalloc((size_t)plan->offload_ring, sizeof(uint64_t), "staging ring");
    int64_t rank = 0;
    for (int64_t l = 0; l < L; l++)
        st->ring_slot[l] = plan->layers[l].layer_input_tier != plan->compute_tier ? rank++ % plan->offload_ring : -1;
    st->ring_slot[L] = L > 0 && st->ring_slot[L - 1] >= 0 ? rank % plan->offload_ring : -1;

    const tt_tier tier = sizes->host_tier;
    const size_t host = sizes->tier_peak[tier];
    if (host && tier != plan->compute_tier) {
        if (plan->pinned_budget && host > plan->pinned_budget) {
            char need[32], have[32];
            tt_die("activation offloading needs %s of %s host memory for the layer inputs but host_memory_budget "
                   "allows %s; raise host_memory_budget, lower sequence_len, or set activation_offloading: false",
                   tt_format_bytes(host, need, sizeof need), tt_tier_name(tier),
                   tt_format_bytes(plan->pinned_budget, have, sizeof have));
        }
        const bool pinned = tier == TT_TIER_PINNED;
        tt_arena_init(&st->host, tier, pinned ? backend->pinned_alloc(host) : tt_host_block_alloc(host), host,
                      plan->pinned_budget ? plan->pinned_budget : host,
                      pinned ? backend->pinned_free : tt_host_block_free);
        /* the disk buffers first: whole pages from the page-aligned base, as O_DIRECT wants */
        if (sizes->disk_slot)
            for (int i = 0; i < 2; i++)
                st->disk_buffer[i] = tt_arena_push(&st->host, sizes->disk_slot, TT_CLASS_LAYER_INPUT, "disk buffer");
        for (int64_t l = 0; l < L; l++)
            if (plan->layers[l].layer_input_tier == tier)
                st->home[l] = tt_arena_push(&st->host, sizes->layer_input, TT_CLASS_LAYER_INPUT, "offloaded layer input");
    }
    if (sizes->disk_slot) st->disk = tt_disk_store_open(plan->offload_dir, L, sizes->layer_input);
    st->disk_holds[0] = st->disk_holds[1] = -1;
    backend->copy_set_delay(plan->copy_delay_us);
}

void tt_input_store_free(tt_input_store *st) {
    if (st->backend) st->backend->synchronize(); /* no copy may still touch the host arena */
    tt_disk_store_close(st->disk);
    tt_arena_destroy(&st->host);
    free(st->home);
    free(st->ring_slot);
    free(st->copied_out);
    free(st->copied_back);
    free(st->ring);
    free(st->ring_copy_out);
    memset(st, 0, sizeof(*st));
}

static void finish_if_unstreamed(const tt_input_store *st, uint64_t ticket) {
    if (!st->plan->offload_streamed) st->backend->copy_host_wait(ticket);
}

void tt_input_store_before_write(tt_input_store *st, int64_t l) {
    st->backend->copy_wait(st->ring_copy_out[st->ring_slot[l]]);
}

void tt_input_store_offload(tt_input_store *st, int64_t l) {
    const tt_backend *b = st->backend;
    const int64_t slot = st->ring_slot[l];
    uint64_t ticket;
    if (st->home[l]) {
        ticket = b->copy_async(st->home[l], st->ring[slot], st->bytes, true, 0);
    } else {
        /* to disk through buffer j, once its last job is done; the IO thread writes it out as soon
         * as the copy has landed */
        const int j = st->disk_next;
        st->disk_next ^= 1;
        tt_disk_store_wait(st->disk, st->disk_job[j]);
        ticket = b->copy_async(st->disk_buffer[j], st->ring[slot], st->bytes, true, 0);
        st->disk_copy[j] = ticket;
        st->disk_holds[j] = -1;
        st->disk_job[j] = tt_disk_store_write(st->disk, l, st->disk_buffer[j], st->bytes, b->copy_host_wait, ticket);
    }
    st->ring_copy_out[slot] = ticket;
    st->copied_out[l] = ticket;
    finish_if_unstreamed(st, ticket);
}

static int64_t offloaded_below(const tt_input_store *st, int64_t above) {
    for (int64_t l = above - 1; l >= 0; l--)
        if (st->ring_slot[l] >= 0) return l;
    return -1;
}

static int64_t on_disk_below(const tt_input_store *st, int64_t above) {
    for (int64_t l = above - 1; l >= 0; l--)
        if (st->ring_slot[l] >= 0 && !st->home[l]) return l;
    return -1;
}

/* Queues the disk read of input l into the next read buffer, once the GPU copy out of that
 * buffer (its previous input on the way back) is done. */
static void queue_disk_read(tt_input_store *st, int64_t l) {
    const int j = st->disk_reading;
    st->disk_reading ^= 1;
    st->disk_job[j] = tt_disk_store_read(st->disk, l, st->disk_buffer[j], st->bytes, st->backend->copy_host_wait,
                                         st->disk_copy[j]);
    st->disk_holds[j] = l;
}

static void start_copy_back(tt_input_store *st, int64_t l) {
    const tt_backend *b = st->backend;
    void *dst = st->ring[st->ring_slot[l]];
    uint64_t ticket;
    if (st->home[l]) {
        ticket = b->copy_async(dst, st->home[l], st->bytes, false, st->copied_out[l]);
    } else {
        int j = st->disk_holds[0] == l ? 0 : st->disk_holds[1] == l ? 1 : -1;
        if (j < 0) {
            j = st->disk_reading;
            queue_disk_read(st, l);
        }
        tt_disk_store_wait(st->disk, st->disk_job[j]);
        ticket = b->copy_async(dst, st->disk_buffer[j], st->bytes, false, 0);
        st->disk_copy[j] = ticket;
        st->disk_holds[j] = -1;
        /* the next disk input below comes off the disk while this layer computes */
        const int64_t next = on_disk_below(st, l);
        if (next >= 0) queue_disk_read(st, next);
    }
    st->copied_back[l] = ticket;
    finish_if_unstreamed(st, ticket);
}

void tt_input_store_start_restores(tt_input_store *st) {
    const int64_t top = offloaded_below(st, st->num_layers);
    if (top >= 0) start_copy_back(st, top);
}

void tt_input_store_restore(tt_input_store *st, int64_t l) {
    st->backend->copy_wait(st->copied_back[l]);
    const int64_t below = offloaded_below(st, l);
    if (below >= 0) start_copy_back(st, below);
}
