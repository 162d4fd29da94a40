/* The backend's side queue (ops/backend.h) on the CPU backend, and the collectives of dist/comm.h that run in it:
 *  - tickets count from 1, a section nests in nothing, waits come from the compute side for issued tickets only;
 *  - a collective of the compute tier's memory outside a section is an error (on the GPU it would race the compute
 *    stream);
 *  - inside one, the ordered sums give rank 0's values plus the other rank's, added in rank order (a stand-in
 *    communicator of two ranks: this one is rank 0, the other's values are fixed). */
#include <string.h>

#include "dist/comm.h"
#include "ops/backend.h"
#include "test_util.h"

#define COUNT 10

static float other_rank[COUNT]; /* what rank 1 holds */
static int64_t round_first;     /* the element the collective's next round starts at (rank 0's range starts at 0) */

/* rank 1's values of this round (zeros past the end, as the reduce-scatter pads) after rank 0's own part */
static void other_part(unsigned char *to, size_t bytes) {
    memset(to, 0, bytes);
    for (size_t i = 0; i < bytes / sizeof(float) && round_first + (int64_t)i < COUNT; i++)
        ((float *)to)[i] = other_rank[round_first + (int64_t)i];
    round_first += (int64_t)(bytes / sizeof(float));
}

/* rank 0's gather (root 0): its own part, then rank 1's */
static void fake_gather(void *ctx, const void *send, void *recv, size_t bytes, int root) {
    (void)ctx;
    (void)root;
    memcpy(recv, send, bytes);
    other_part((unsigned char *)recv + bytes, bytes);
}

/* rank 0's all-to-all: block 0 of its own send, and block 0 of what rank 1 sends (rank 1's values in rank 0's
 * range) */
static void fake_all_to_all(void *ctx, const void *send, void *recv, size_t bytes) {
    (void)ctx;
    memcpy(recv, send, bytes);
    other_part((unsigned char *)recv + bytes, bytes);
}

static void fake_broadcast(void *ctx, void *data, size_t bytes, int root) {
    (void)ctx;
    (void)data;
    (void)bytes;
    (void)root;
}

static const tt_comm_iface fake_iface = {
    .gather = fake_gather, .all_to_all = fake_all_to_all, .broadcast = fake_broadcast};

static tt_backend *backend;

static void nested_begin(void *arg) {
    (void)arg;
    tt_backend_side_begin(backend);
    tt_backend_side_begin(backend);
}

static void end_without_begin(void *arg) {
    (void)arg;
    (void)tt_backend_side_end(backend);
}

static void wait_inside(void *arg) {
    (void)arg;
    tt_backend_side_begin(backend);
    tt_backend_side_wait(backend, 1);
}

static void wait_unissued(void *arg) {
    (void)arg;
    tt_backend_side_wait(backend, 1000);
}

static void broadcast_outside(void *arg) {
    const tt_comm *comm = arg;
    float x[4] = {0};
    tt_comm_broadcast(comm, backend, x, sizeof x, 0);
}

static void reduce_outside(void *arg) {
    const tt_comm *comm = arg;
    float x[4] = {0}, scratch[64];
    tt_comm_reduce_in_rank_order(comm, backend, x, 4, 0, scratch, sizeof(float) * 8);
}

int main(void) {
    backend = tt_backend_cpu_create(1);
    TT_EXPECT(!tt_backend_side_active(backend), "the compute side to start with");
    TT_EXPECT(tt_backend_side_stream(backend) == NULL, "the CPU backend has no stream for the transport");
    tt_backend_side_begin(backend);
    TT_EXPECT(tt_backend_side_active(backend), "side_begin enters the side queue");
    const uint64_t first = tt_backend_side_end(backend);
    TT_EXPECT(first == 1 && !tt_backend_side_active(backend), "the first ticket is 1, and side_end leaves");
    tt_backend_side_begin(backend);
    const uint64_t second = tt_backend_side_end(backend);
    TT_EXPECT(second == 2, "tickets count up");
    tt_backend_side_wait(backend, 0);
    tt_backend_side_wait(backend, second);
    tt_expect_abort(nested_begin, NULL, "side_begin inside the side queue");
    tt_expect_abort(end_without_begin, NULL, "side_end without side_begin");
    tt_expect_abort(wait_inside, NULL, "inside the side queue");
    tt_expect_abort(wait_unissued, NULL, "side_wait for ticket 1000 (2 issued)");

    const tt_comm comm = {.iface = &fake_iface, .rank = 0, .size = 2, .transport = "test"};
    tt_expect_abort(broadcast_outside, (void *)&comm, "a broadcast outside a section of the backend's side queue");
    tt_expect_abort(reduce_outside, (void *)&comm, "a reduce outside a section of the backend's side queue");

    /* the ordered sums: rank 0's value plus rank 1's (the second term added second) */
    float mine[COUNT], want[COUNT], scratch[5 * COUNT];
    for (int i = 0; i < COUNT; i++) {
        mine[i] = 1.0f + 0.25f * (float)i;
        other_rank[i] = 1e-8f * (float)(i + 1) - 0.5f * (float)i;
        want[i] = mine[i] + other_rank[i];
    }
    round_first = 0;
    tt_backend_side_begin(backend);
    /* buckets of 8 floats: rounds of 4 elements a rank, three of them */
    tt_comm_reduce_in_rank_order(&comm, backend, mine, COUNT, 0, scratch, sizeof(float) * 8);
    (void)tt_backend_side_end(backend);
    TT_EXPECT(memcmp(mine, want, sizeof mine) == 0, "reduce onto rank 0: each element its own plus rank 1's");

    /* reduce-scatter: rank 0 owns the first 6 elements, rank 1 the last 4 (left as they were here) */
    float data[COUNT];
    for (int i = 0; i < COUNT; i++) data[i] = 2.0f - 0.125f * (float)i;
    const int64_t bounds[3] = {0, 6, COUNT};
    float expect[COUNT];
    for (int i = 0; i < COUNT; i++) expect[i] = i < 6 ? data[i] + other_rank[i] : data[i];
    round_first = 0;
    tt_backend_side_begin(backend);
    tt_comm_reduce_scatter_in_rank_order(&comm, backend, data, bounds, scratch, sizeof(float) * 8);
    (void)tt_backend_side_end(backend);
    TT_EXPECT(memcmp(data, expect, sizeof data) == 0, "reduce-scatter: rank 0's range summed, the rest untouched");

    tt_backend_destroy(backend);
    return tt_test_summary("side queue");
}
