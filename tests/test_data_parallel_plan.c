/* Sequence parallel's one recompute plan (tt_data_parallel_agree_plan): each rank's plan fits its own budgets, but a
 * recomputed attention is an exchange every rank of the group must make, so every layer recomputes what any rank's
 * plan recomputes, and a slot no longer kept is no longer offloaded. Two ranks through a stand-in communicator whose
 * all-gather returns this rank's values and a given other rank's. */
#include <string.h>

#include "train/data_parallel.h"
#include "test_util.h"

static tt_slot_set other_rank[3];

static void fake_all_gather_host(void *ctx, const void *send, void *recv, size_t bytes) {
    (void)ctx;
    memcpy(recv, send, bytes); /* rank 0: this one */
    memcpy((unsigned char *)recv + bytes, other_rank, bytes);
}

static const tt_comm_iface fake_iface = {.all_gather_host = fake_all_gather_host};

int main(void) {
    tt_layer_plan layers[3] = {
        {.recompute = TT_SLOT(TT_SAVED_Q), .offloaded = TT_SLOT(TT_SAVED_ATTN_OUT)},
        {.recompute = 0, .offloaded = TT_SLOT(TT_SAVED_Q) | TT_SLOT(TT_SAVED_V)},
        {.recompute = TT_SLOT(TT_SAVED_V), .offloaded = 0},
    };
    other_rank[0] = TT_SLOT(TT_SAVED_Q);
    other_rank[1] = TT_SLOT(TT_SAVED_Q) | TT_SLOT(TT_SAVED_ATTN_OUT);
    other_rank[2] = 0;
    tt_plan plan = {.num_layers = 3, .layers = layers, .sequence_parallel = 2};
    const tt_comm comm = {.iface = &fake_iface, .rank = 0, .size = 2, .transport = "test"};
    tt_data_parallel_agree_plan(&comm, &plan);
    TT_EXPECT(layers[0].recompute == TT_SLOT(TT_SAVED_Q), "layer 0: both recompute q, nothing more");
    TT_EXPECT(layers[0].offloaded == TT_SLOT(TT_SAVED_ATTN_OUT), "layer 0: its offloaded kept slot stays");
    TT_EXPECT(layers[1].recompute == (TT_SLOT(TT_SAVED_Q) | TT_SLOT(TT_SAVED_ATTN_OUT)),
              "layer 1: recomputes what the other rank does");
    TT_EXPECT(layers[1].offloaded == TT_SLOT(TT_SAVED_V), "layer 1: q, now recomputed, is no longer offloaded");
    TT_EXPECT(layers[2].recompute == TT_SLOT(TT_SAVED_V), "layer 2: its own recompute stays");
    /* without sequence parallel the plans are each rank's own */
    tt_layer_plan alone[3] = {{0}, {0}, {0}};
    tt_plan plain = {.num_layers = 3, .layers = alone, .sequence_parallel = 1};
    tt_data_parallel_agree_plan(&comm, &plain);
    TT_EXPECT(alone[1].recompute == 0, "no sequence parallel: nothing changes");
    return tt_test_summary("data parallel plan");
}
