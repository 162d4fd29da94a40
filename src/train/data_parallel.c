#include "train/data_parallel.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"

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

void tt_data_parallel_init(tt_data_parallel *dp, const tt_comm *comm, const tt_run_config *run,
                           const tt_model_state *model) {
    memset(dp, 0, sizeof(*dp));
    dp->comm = comm;
    dp->backend = model->backend;
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
    /* the buckets are the plan's (the size table prices them; the arena holds them) */
    TT_CHECK(model->data_parallel_buckets != NULL && model->plan.data_parallel_ranks == comm->size,
             "the plan prices the buckets of %d ranks", comm->size);
    dp->bucket_bytes = tt_comm_bucket_bytes(comm->size, model->sizes.gradients);
    dp->scratch = model->data_parallel_buckets;
}

void tt_data_parallel_reduce(tt_data_parallel *dp, tt_model_state *model, double *sums, int count) {
    tt_comm_sum_in_rank_order(dp->comm, model->backend, model->gradients,
                              (int64_t)(model->sizes.gradients / sizeof(float)), dp->scratch, dp->bucket_bytes);
    tt_comm_sum_doubles(dp->comm, sums, count);
}

void tt_data_parallel_free(tt_data_parallel *dp) { memset(dp, 0, sizeof(*dp)); }
