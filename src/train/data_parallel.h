/* Data parallel (MPI on the CPU backend, NCCL across GPUs): every rank holds the whole model, trains its share of
 * each step's micro-batches and, before the optimizer step, the ranks sum their gradients and loss sums in rank
 * order (dist/comm.h), so that every rank applies the same update to the same bits, run after run.
 *
 * zero_stage 1 (memory/optimizer_shards.h) shards the optimizer: each rank keeps the master weights and moments of
 * its units, receives only their summed gradients (a reduce-scatter instead of the sum everywhere), updates them and
 * all-gathers their new weights. The sums, the norm and the updates are the unsharded run's bits.
 *
 * zero_stage 2 also shards the gradients (memory/optimizer_shards.h): the other ranks' decoder layers are computed in
 * two ring slots, and each unit's gradients are summed on their owner as soon as its backward is done (a gather and
 * the ordered add: the same bits again with one micro-batch a step on each rank; with several, each micro-batch's
 * are summed onto the owner's running sum as they come, a grouping of their own: the same bits run after run,
 * zero_stage 0's to rounding).
 *
 * The sums run on the backend's side queue (ops/backend.h) as each unit's backward ends, in the step's last
 * micro-batch at every stage (zero_stage 2: every micro-batch), beside the next unit's backward; the compute stream
 * waits for them only where it reads what they write. */
#ifndef TT_TRAIN_DATA_PARALLEL_H
#define TT_TRAIN_DATA_PARALLEL_H

#include <stddef.h>

#include "config/run_config.h"
#include "dist/comm.h"
#include "train/step.h"

typedef struct tt_data_parallel {
    const tt_comm *comm;
    const tt_backend *backend;
    float *scratch; /* the model state's data_parallel_buckets (in the arena, priced by the size table) */
    size_t bucket_bytes;
    bool sharded;           /* zero_stage 1 or 2 */
    bool gradients_sharded; /* zero_stage 2: each unit's gradients summed on their owner during the backward */
    bool weights_sharded;   /* zero_stage 3: each decoder layer's weights sent by their owner before each use */
    tt_model_state *model;  /* the hooks' */
    int64_t *bounds;        /* [ranks + 1]: each rank's range of the trainable layout (its shard, or an equal share) */
    int64_t *unit_bounds;   /* [ranks + 1]: zero_stage 0's equal shares of one unit's gradients */
    /* The side queue (ops/backend.h): the sums and broadcasts run beside the compute stream, which waits for them
     * where it reads what they write. */
    bool reducing;           /* this backward sums each unit's gradients as it is done (the step's last) */
    uint64_t last_ticket;    /* the latest side-queue section */
    uint64_t slot_ticket[2]; /* zero_stage 2 and 3: the sum that last read each gradient ring slot */
    int64_t prefetched_unit; /* zero_stage 3: the layer whose weights were sent ahead (-1: none), and its ticket */
    uint64_t prefetched_ticket;
    int64_t slot_layer[2]; /* zero_stage 3: the layer last sent into each ring slot since the update (-1: none) */
    /* zero_stage 1: each unit's owner, the gathered norm partials and the model's exchange */
    int64_t units;
    int *unit_owner;           /* [units] */
    double *gathered_partials; /* [ranks x units] host */
    uint64_t *weight_ticket;   /* [units] zero_stage 1 and 2, weights on the GPU: each unit's pending broadcast (0:
                                * none), waited for before the unit's next forward (NULL otherwise) */
    tt_shard_exchange exchange;
    tt_sequence_exchange sequence; /* sequence parallel's all-to-all */
    tt_comm *sequence_group;       /* its ranks, when fewer than all of them (a split the caller made), else NULL */
} tt_data_parallel;

/* Every rank started with the same configuration (its YAML as written, hashed): dies naming the first rank that
 * differs. Called before anything derived per host (num_threads) is set. */
void tt_data_parallel_check_config(const tt_comm *comm, const tt_run_config *run);
/* Sequence parallel: a layer that recomputes its attention exchanges tokens again, so every rank must recompute the
 * same layers; each rank's plan fits its own budgets (the ZeRO shards differ), so each layer recomputes what any
 * rank's plan recomputes (more recompute never needs more memory). Nothing without sequence parallel. */
void tt_data_parallel_agree_plan(const tt_comm *comm, tt_plan *plan);
/* Checks that the ranks can train together (what data parallel composes with today) and takes the buckets; dies
 * naming what is not available yet. sequence_group: with sequence parallel over fewer than all the ranks, this
 * rank's group (tt_data_parallel_sequence_group; borrowed, closed by the caller after tt_data_parallel_free), else
 * NULL. */
void tt_data_parallel_init(tt_data_parallel *dp, const tt_comm *comm, tt_comm *sequence_group, const tt_run_config *run,
                           tt_model_state *model);
/* Sequence parallel over fewer than all the ranks: this rank's group (ranks r / degree together, by r % degree), made
 * before the device's free memory is read so that the transport's buffers for it are outside the room the plan
 * prices (every rank calls it); NULL otherwise (also where the degree does not divide the ranks: tt_train then says
 * so). */
tt_comm *tt_data_parallel_sequence_group(const tt_comm *comm, const tt_run_config *run);
/* Before the step's last micro-batch: its backward sums each unit's gradients over the ranks as the unit is done
 * (zero_stage 2 does so in every micro-batch). NULL: nothing (one process). */
void tt_data_parallel_expect_gradients(tt_data_parallel *dp);
/* After the step's backward on every rank: the compute stream waits for the gradients' sums (zero_stage 1 and 2: of
 * this rank's shard), and sums[0 .. count) are summed over the ranks in rank order. */
void tt_data_parallel_reduce(tt_data_parallel *dp, tt_model_state *model, double *sums, int count);
/* After the optimizer step: zero_stage 1 and 2 hand every rank the new weights of the others' shards (else nothing).
 * With the weights on the GPU, each unit's broadcast is only issued: the unit's next forward waits for it (so the
 * later units' arrive while the first compute), and so does tt_data_parallel_weights_ready. */
void tt_data_parallel_share_weights(tt_data_parallel *dp, tt_model_state *model);
/* The compute stream's later ops see every unit's new weights (before a save reads them). NULL: nothing. */
void tt_data_parallel_weights_ready(tt_data_parallel *dp, tt_model_state *model);
void tt_data_parallel_free(tt_data_parallel *dp, tt_model_state *model);

#endif
