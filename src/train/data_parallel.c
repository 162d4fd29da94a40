#include "train/data_parallel.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "memory/optimizer_shards.h"

/* FNV-1a over the run's effective configuration as YAML: ranks started with other keys or values differ. */
static uint64_t config_hash(const tt_run_config *run) {
    char *text = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&text, &size);
    TT_CHECK(f != NULL, "a memory stream");
    tt_run_config_write_yaml(run, f);
    fclose(f);
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < size; i++) h = (h ^ (unsigned char)text[i]) * 1099511628211ull;
    free(text);
    return h;
}

void tt_data_parallel_check_config(const tt_comm *comm, const tt_run_config *run) {
    uint64_t *hashes = tt_xmalloc(sizeof(uint64_t) * (size_t)comm->size, "configuration hashes");
    const uint64_t mine = config_hash(run);
    tt_comm_all_gather_host(comm, &mine, hashes, sizeof mine);
    for (int r = 1; r < comm->size; r++)
        if (hashes[r] != hashes[0])
            tt_die("rank %d was started with another configuration than rank 0 (the run YAML and overrides differ); "
                   "start every rank with the same run.yaml and key=value overrides",
                   r);
    free(hashes);
}

/* What data parallel does not compose with yet: dies naming it. */
static void refuse_unavailable(const tt_comm *comm, const tt_run_config *run, const tt_model_state *model) {
    const bool gpu = model->plan.compute_tier == TT_TIER_GPU, nccl = strcmp(comm->transport, "nccl") == 0;
    if (gpu && !nccl)
        tt_die("%d processes started by mpirun train on the GPU: GPUs move their gradients through NCCL; start one "
               "process a GPU with torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), "
               "or set device: cpu",
               comm->size);
    if (!gpu && nccl)
        tt_die("a torchrun-style launch of %d processes on the CPU backend: the CPU path runs through MPI; use "
               "mpirun -np %d, or device: cuda",
               comm->size, comm->size);
    if (model->plan.gradient_bytes != sizeof(float))
        tt_die("master_weights: false (bf16 gradients) with %d data-parallel processes is not available yet; the "
               "ranks sum fp32 gradients: remove master_weights: false",
               comm->size);
    /* without overlap the host share's update waits for the step's gradients, which the ranks have summed by then;
     * with it, gradients leave during the backward, before the sum */
    if (run->optimizer_cpu_offload && run->overlap_cpu_optimizer_d2h_h2d)
        tt_die("optimizer_cpu_offload with overlap_cpu_optimizer_d2h_h2d and %d data-parallel processes is not "
               "available yet (its gradients leave during the backward, before the ranks have summed them); set "
               "overlap_cpu_optimizer_d2h_h2d: false, or run one process",
               comm->size);
    if (run->zero_stage >= 1 && model->plan.offloaded_weight_layers > 0 &&
        (run->zero_stage >= 3 || run->optimizer_cpu_offload))
        tt_die("zero_stage %d with cpu_offloading_weights%s is not available yet (%s); use zero_stage 1 or 2 without "
               "optimizer_cpu_offload, or cpu_offloading_weights: false",
               (int)run->zero_stage, run->zero_stage >= 3 ? "" : " and optimizer_cpu_offload",
               run->zero_stage >= 3 ? "stage 3's weights are sent between the GPUs, not streamed from the host"
                                    : "the offloaded layers' homes would be split between two owners");
}

static void sequence_all_to_all(void *ctx, const void *send, void *recv, size_t bytes) {
    const tt_comm *comm = ctx;
    comm->iface->all_to_all(comm->ctx, send, recv, bytes);
}

static void gather_host(void *ctx, float *host) {
    tt_data_parallel *dp = ctx;
    tt_backend_side_begin(dp->backend);
    tt_comm_all_gather_ranges(dp->comm, dp->backend, host, sizeof(float), true, dp->bounds, dp->scratch,
                              dp->bucket_bytes);
    tt_backend_side_wait(dp->backend, dp->last_ticket = tt_backend_side_end(dp->backend));
}

/* The rank whose shard (whole units) holds trainable element e. */
static int owner_of(const tt_data_parallel *dp, int64_t e) {
    int r = 0;
    while (r + 1 < dp->comm->size && e >= dp->bounds[r + 1]) r++;
    return r;
}

static bool owns(void *ctx, int64_t element) {
    const tt_data_parallel *dp = ctx;
    return owner_of(dp, element) == dp->comm->rank;
}

static void share_host_range(void *ctx, float *data, int64_t element, int64_t count) {
    tt_data_parallel *dp = ctx;
    const int owner = owner_of(dp, element);
    TT_CHECK(count == 0 || owner_of(dp, element + count - 1) == owner, "trainable elements [%lld, %lld) across shards",
             (long long)element, (long long)(element + count));
    tt_backend_side_begin(dp->backend);
    tt_comm_broadcast_host(dp->comm, dp->backend, data, (size_t)count * sizeof(float), owner, dp->scratch,
                           dp->bucket_bytes);
    tt_backend_side_wait(dp->backend, dp->last_ticket = tt_backend_side_end(dp->backend));
}

static void gather_norm_partials(void *ctx, double *partials) {
    tt_data_parallel *dp = ctx;
    tt_comm_all_gather_host(dp->comm, partials, dp->gathered_partials, sizeof(double) * (size_t)dp->units);
    for (int64_t u = 0; u < dp->units; u++) partials[u] = dp->gathered_partials[dp->unit_owner[u] * dp->units + u];
}

/* Unit u's gradients summed over the ranks in rank order, issued on the side queue (the compute stream goes on with
 * the next unit's backward): onto their owner with zero_stage 1 and 2, else onto every rank (a reduce-scatter within
 * the unit, then an all-gather). Each element's sum is its rank-order sum whichever rank adds it, so the bits are
 * those of the whole gradient array's reduce-scatter. */
static uint64_t reduce_unit(tt_data_parallel *dp, tt_model_state *model, int64_t u) {
    const tt_unit_residency *r = &model->residency.unit[u];
    float *gradients = tt_model_unit_gradients(model, u);
    tt_backend_side_begin(model->backend);
    if (dp->sharded) {
        tt_comm_reduce_in_rank_order(dp->comm, model->backend, gradients, r->end - r->start, dp->unit_owner[u],
                                     dp->scratch, dp->bucket_bytes);
    } else {
        tt_comm_equal_bounds(dp->comm->size, r->end - r->start, dp->unit_bounds);
        tt_comm_reduce_scatter_in_rank_order(dp->comm, model->backend, gradients, dp->unit_bounds, dp->scratch,
                                             dp->bucket_bytes);
        tt_comm_all_gather_ranges(dp->comm, model->backend, gradients, sizeof(float), false, dp->unit_bounds,
                                  dp->scratch, dp->bucket_bytes);
    }
    return dp->last_ticket = tt_backend_side_end(model->backend);
}

/* The gradients' sums, unit by unit as each unit's backward is done (the last micro-batch of a step; with
 * zero_stage 2 and 3 every micro-batch, each onto the owner's running sum). The gradient ring of stages 2 and 3: a
 * layer of another rank's shard starts its backward in a slot at zero, once the slot's previous layer has left for
 * its owner. */
static void gradients_hook(void *ctx, tt_hook_point point, int64_t unit, bool train) {
    tt_data_parallel *dp = ctx;
    tt_model_state *model = dp->model;
    if (!train) return;
    const int64_t head = model->config.num_layers + 1;
    if (point == TT_HOOK_BEFORE_GRADIENTS && unit == head) {   /* a micro-batch's backward begins */
        tt_backend_side_wait(model->backend, dp->last_ticket); /* the previous one's sums have left its buffers */
        for (int64_t u = 0; u <= head && dp->gradients_sharded; u += head) {
            /* another rank's embedding or head, kept in its own place here: its previous micro-batch's gradients
             * went to its owner already (with one micro-batch a step they are zero from the step's start) */
            const tt_unit_residency *other = &model->residency.unit[u];
            if (other->end > other->start && dp->unit_owner[u] != dp->comm->rank)
                tt_backend_zero(model->backend, tt_model_unit_gradients(model, u),
                                (size_t)(other->end - other->start) * model->plan.gradient_bytes);
        }
    }
    const tt_unit_residency *r = &model->residency.unit[unit];
    if (r->end == r->start) {
        if (point == TT_HOOK_AFTER_BACKWARD && unit == 0) dp->reducing = false; /* the backward's last unit */
        return;
    }
    if (point == TT_HOOK_BEFORE_GRADIENTS && r->gradient_slot >= 0) {
        tt_backend_side_wait(model->backend, dp->slot_ticket[r->gradient_slot]);
        tt_backend_zero(model->backend, tt_model_unit_gradients(model, unit),
                        (size_t)(r->end - r->start) * model->plan.gradient_bytes);
    }
    if (point == TT_HOOK_AFTER_BACKWARD && (dp->gradients_sharded || dp->reducing)) {
        const uint64_t ticket = reduce_unit(dp, model, unit);
        if (r->gradient_slot >= 0) dp->slot_ticket[r->gradient_slot] = ticket;
    }
    if (point == TT_HOOK_AFTER_BACKWARD && unit == 0) dp->reducing = false; /* the backward's last unit */
}

/* Unit u's weights from its owner into every rank's copy: where the compute tier keeps them (its place, or with
 * zero_stage 3 a ring slot), or a weight-offloaded layer's home in host memory. Returns the side queue's ticket. */
static uint64_t broadcast_unit_weights(tt_data_parallel *dp, tt_model_state *model, int64_t u) {
    const tt_unit_residency *r = &model->residency.unit[u];
    if (r->end == r->start) return 0;
    const size_t bytes = (size_t)(r->end - r->start) * model->plan.weight_bytes;
    if (r->weights_buffer >= 0) /* the owner's update is in its home (a copy engine's copy: not the backend's queues) */
        tt_weight_stream_wait_stored(&model->weight_offload);
    tt_backend_side_begin(model->backend);
    if (r->weights_buffer < 0)
        tt_comm_broadcast(dp->comm, model->backend, tt_model_trainable_weights_at(model, r->start), bytes,
                          dp->unit_owner[u]);
    else
        tt_comm_broadcast_host(dp->comm, model->backend, model->weight_offload.block_home[u - 1], bytes,
                               dp->unit_owner[u], dp->scratch, dp->bucket_bytes);
    return dp->last_ticket = tt_backend_side_end(model->backend);
}

/* zero_stage 3's layer u into the ring slot u % 2 of every rank that does not own it; the slot's layer noted. */
static uint64_t send_layer(tt_data_parallel *dp, tt_model_state *model, int64_t u) {
    dp->slot_layer[u % 2] = u;
    return broadcast_unit_weights(dp, model, u);
}

/* zero_stage 3: before a decoder layer's forward and again before its backward (recompute included) its owner sends
 * its weights into every other rank's ring slot (unit parity), in evaluation too, unless the slot still holds them
 * (the last two layers of a forward, for the backward that follows). The next layer's are sent while this one
 * computes: slot (u + 1) % 2 was last read by the layer before this one (u - 1 in the forward, u + 1 in the
 * backward), issued before. The choices depend on the unit order only, so every rank issues the same broadcasts. */
static void sharded_weights_hook(void *ctx, tt_hook_point point, int64_t unit, bool train) {
    (void)train;
    tt_data_parallel *dp = ctx;
    tt_model_state *model = dp->model;
    const int64_t L = model->config.num_layers;
    if (unit < 1 || unit > L || (point != TT_HOOK_BEFORE_FORWARD && point != TT_HOOK_BEFORE_BACKWARD)) return;
    uint64_t ticket = 0; /* 0: already there, its sending waited for when it was first used */
    if (dp->prefetched_unit == unit) ticket = dp->prefetched_ticket;
    else if (dp->slot_layer[unit % 2] != unit) ticket = send_layer(dp, model, unit);
    const int64_t next = point == TT_HOOK_BEFORE_FORWARD ? unit + 1 : unit - 1;
    dp->prefetched_unit = -1;
    if (next >= 1 && next <= L && dp->slot_layer[next % 2] != next) {
        dp->prefetched_ticket = send_layer(dp, model, next);
        dp->prefetched_unit = next;
    }
    tt_backend_side_wait(model->backend, ticket);
}

/* zero_stage 1 and 2 (weights on the GPU): a unit's forward, or its backward's recompute, waits for the broadcast
 * of its new weights that tt_data_parallel_share_weights issued after the update, so unit u + 1's broadcast runs
 * while unit u computes. Evaluation's forward waits the same way. */
static void shared_weights_hook(void *ctx, tt_hook_point point, int64_t unit, bool train) {
    (void)train;
    tt_data_parallel *dp = ctx;
    if ((point != TT_HOOK_BEFORE_FORWARD && point != TT_HOOK_BEFORE_BACKWARD) || unit < 0 || unit >= dp->units) return;
    /* a tied head reads the embedding's weights: unit 0 is waited for before any other unit's forward */
    tt_backend_side_wait(dp->model->backend, dp->weight_ticket[unit]);
    dp->weight_ticket[unit] = 0;
}

/* zero_stage 1: the shards of whole units, and the exchange the model's getters and norm call */
static void shard_optimizer(tt_data_parallel *dp, tt_model_state *model) {
    const int size = dp->comm->size;
    dp->sharded = true;
    dp->units = model->config.num_layers + 2;
    tt_optimizer_shard_bounds(model->unit_start, dp->units, size, dp->bounds);
    TT_CHECK(dp->bounds[dp->comm->rank] == model->sizes.optimizer_shard_start &&
                 dp->bounds[dp->comm->rank + 1] == model->sizes.optimizer_shard_end,
             "the size table priced this rank's optimizer shard");
    TT_CHECK(sizeof(double) * (size_t)dp->units <= TT_COMM_HOST_GATHER_BYTES, "%lld norm partials a gather",
             (long long)dp->units);
    dp->unit_owner = tt_xcalloc((size_t)dp->units, sizeof(int), "unit owners");
    for (int64_t u = 0; u < dp->units; u++)
        while (dp->unit_owner[u] + 1 < size && model->unit_start[u] >= dp->bounds[dp->unit_owner[u] + 1])
            dp->unit_owner[u]++;
    dp->gathered_partials = tt_xcalloc((size_t)size * (size_t)dp->units, sizeof(double), "gathered norm partials");
    dp->exchange = (tt_shard_exchange){.gather_host = gather_host,
                                       .gather_norm_partials = gather_norm_partials,
                                       .owns = owns,
                                       .share_host_range = share_host_range,
                                       .ctx = dp};
    model->shards = &dp->exchange;
    dp->gradients_sharded = tt_plan_shards_gradients(&model->plan);
    if (tt_plan_shards_weights(&model->plan)) {
        dp->weights_sharded = true;
        tt_model_state_add_hook(
            model, (tt_unit_hook){.name = "zero_stage 3 weights", .call = sharded_weights_hook, .ctx = dp});
    } else if (model->plan.offloaded_weight_layers == 0) {
        dp->weight_ticket = tt_xcalloc((size_t)dp->units, sizeof(uint64_t), "weight broadcast tickets");
        tt_model_state_add_hook(model,
                                (tt_unit_hook){.name = "zero_stage 1 weights", .call = shared_weights_hook, .ctx = dp});
    }
    char shard[32];
    tt_info("zero_stage %d: this rank keeps the master weights and moments%s of %lld of %lld trainable parameters (%s)",
            model->plan.zero_stage, dp->gradients_sharded ? " and gradients" : "",
            (long long)(dp->bounds[dp->comm->rank + 1] - dp->bounds[dp->comm->rank]),
            (long long)model->params.trainable_numel,
            tt_format_bytes(model->sizes.master + model->sizes.optimizer_state +
                                (dp->gradients_sharded ? model->sizes.gradients : 0),
                            shard, sizeof shard));
}

void tt_data_parallel_agree_plan(const tt_comm *comm, tt_plan *plan) {
    if (plan->sequence_parallel <= 1) return;
    const int64_t L = plan->num_layers;
    tt_slot_set *mine = tt_xcalloc((size_t)L, sizeof(tt_slot_set), "recompute sets");
    tt_slot_set *all = tt_xcalloc((size_t)L * (size_t)comm->size, sizeof(tt_slot_set), "recompute sets");
    for (int64_t l = 0; l < L; l++) mine[l] = plan->layers[l].recompute;
    tt_comm_all_gather_host(comm, mine, all, sizeof(tt_slot_set) * (size_t)L);
    int64_t changed = 0;
    for (int64_t l = 0; l < L; l++) {
        tt_slot_set any = 0;
        for (int r = 0; r < comm->size; r++) any |= all[(size_t)r * (size_t)L + (size_t)l];
        changed += any != plan->layers[l].recompute;
        plan->layers[l].recompute = any;
        plan->layers[l].offloaded &= ~any; /* a recomputed slot is not kept, so not offloaded */
        /* nothing offloaded keeps nothing off the compute tier (the spill, the free keeps and selective auto read the
         * tier as "offloaded") */
        if (!plan->layers[l].offloaded) plan->layers[l].saved_activation_tier = plan->compute_tier;
    }
    if (changed)
        tt_info("sequence parallel: %lld layer(s) recompute more than this rank's plan asked, as another rank's does "
                "(the plan's lines above counted this rank's own choices, before this agreement)",
                (long long)changed);
    free(mine);
    free(all);
}

tt_comm *tt_data_parallel_sequence_group(const tt_comm *comm, const tt_run_config *run) {
    const int64_t sp = run->sequence_parallel_degree;
    if (!comm || sp <= 1 || sp >= comm->size || comm->size % sp != 0) return NULL;
    return tt_comm_split(comm, comm->rank / (int)sp, comm->rank % (int)sp);
}

void tt_data_parallel_init(tt_data_parallel *dp, const tt_comm *comm, tt_comm *sequence_group, const tt_run_config *run,
                           tt_model_state *model) {
    memset(dp, 0, sizeof(*dp));
    dp->comm = comm;
    dp->backend = model->backend;
    refuse_unavailable(comm, run, model);
    /* the buckets are the plan's (the size table prices them; the arena holds them) */
    TT_CHECK(model->data_parallel_buckets != NULL && model->plan.data_parallel_ranks == comm->size &&
                 model->plan.data_parallel_rank == comm->rank,
             "the plan prices the buckets of rank %d of %d", comm->rank, comm->size);
    /* the same on every rank (zero_stage 2's gradient buffers differ): of the whole model's gradients */
    dp->bucket_bytes = tt_comm_bucket_bytes(comm->size, tt_data_parallel_gradient_bytes(&model->params, &model->plan));
    dp->scratch = model->data_parallel_buckets;
    dp->model = model;
    dp->prefetched_unit = -1;
    dp->slot_layer[0] = dp->slot_layer[1] = -1;
    dp->bounds = tt_xcalloc((size_t)comm->size + 1, sizeof(int64_t), "rank ranges");
    dp->unit_bounds = tt_xcalloc((size_t)comm->size + 1, sizeof(int64_t), "rank ranges of a unit");
    tt_comm_use_side_queue(comm,
                           model->backend);  /* the collectives run in order with the copies and sums around them */
    if (model->plan.sequence_parallel > 1) { /* Ulysses: the attention's all-to-all within the rank's group */
        const int sp = (int)model->plan.sequence_parallel; /* trainer.c checked that it divides the ranks */
        TT_CHECK((sequence_group != NULL) == (sp < comm->size), "a sequence-parallel group of %d of %d ranks is given",
                 sp, comm->size);
        dp->sequence_group = sequence_group;
        if (dp->sequence_group) tt_comm_use_side_queue(dp->sequence_group, model->backend);
        const tt_comm *group = dp->sequence_group ? dp->sequence_group : comm;
        TT_CHECK(group->size == sp && group->rank == model->plan.sequence_parallel_rank,
                 "rank %d is rank %lld of its sequence-parallel group", comm->rank,
                 (long long)model->plan.sequence_parallel_rank);
        dp->sequence = (tt_sequence_exchange){.all_to_all = sequence_all_to_all, .ctx = (void *)group};
        model->sequence_exchange = &dp->sequence;
    }
    if (tt_plan_shards_optimizer(&model->plan)) shard_optimizer(dp, model);
    else tt_comm_equal_bounds(comm->size, model->params.trainable_numel, dp->bounds);
    tt_model_state_add_hook(model, (tt_unit_hook){.name = "gradient sums", .call = gradients_hook, .ctx = dp});
}

void tt_data_parallel_expect_gradients(tt_data_parallel *dp) {
    if (dp) dp->reducing = true;
}

void tt_data_parallel_reduce(tt_data_parallel *dp, tt_model_state *model, double *sums, int count) {
    TT_CHECK(!dp->reducing, "the step's last backward summed every unit's gradients (tt_data_parallel_expect_gradients "
                            "before its micro-batch)");
    tt_backend_side_wait(model->backend, dp->last_ticket); /* the update reads the sums */
    tt_comm_sum_doubles(dp->comm, sums, count);
}

void tt_data_parallel_share_weights(tt_data_parallel *dp, tt_model_state *model) {
    if (!dp->sharded) return;
    if (model->plan.offloaded_weight_layers > 0) { /* zero_stage 1 or 2: each unit, the offloaded into their homes */
        for (int64_t u = 0; u < dp->units; u++) broadcast_unit_weights(dp, model, u);
        tt_backend_side_wait(model->backend, dp->last_ticket);
        tt_weight_stream_forget(&model->weight_offload); /* the stream buffers' copies are stale */
        return;
    }
    if (dp->weights_sharded) { /* zero_stage 3: only the embedding and the head live on every rank */
        dp->slot_layer[0] = dp->slot_layer[1] = -1; /* the ring slots' copies are the old weights */
        broadcast_unit_weights(dp, model, 0);
        broadcast_unit_weights(dp, model, dp->units - 1);
        tt_backend_side_wait(model->backend, dp->last_ticket); /* the next forward reads them */
        return;
    }
    /* zero_stage 1 and 2: unit by unit from its owner, in the forward's order; shared_weights_hook makes each unit's
     * next use wait for its own */
    for (int64_t u = 0; u < dp->units; u++) dp->weight_ticket[u] = broadcast_unit_weights(dp, model, u);
}

void tt_data_parallel_weights_ready(tt_data_parallel *dp, tt_model_state *model) {
    if (!dp || !dp->weight_ticket) return;
    for (int64_t u = 0; u < dp->units; u++) {
        tt_backend_side_wait(model->backend, dp->weight_ticket[u]);
        dp->weight_ticket[u] = 0;
    }
}

void tt_data_parallel_free(tt_data_parallel *dp, tt_model_state *model) {
    if (model->shards == &dp->exchange) model->shards = NULL;
    if (model->sequence_exchange == &dp->sequence) model->sequence_exchange = NULL;
    tt_backend_synchronize(model->backend); /* nothing of the side queue left in flight */
    /* the backend (and its side queue) ends before the run's communicators */
    if (dp->sequence_group) tt_comm_use_own_queue(dp->sequence_group);
    tt_comm_use_own_queue(dp->comm);
    free(dp->bounds);
    free(dp->unit_bounds);
    free(dp->unit_owner);
    free(dp->gathered_partials);
    free(dp->weight_ticket);
    memset(dp, 0, sizeof(*dp));
}
