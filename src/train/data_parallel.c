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

void tt_data_parallel_init(tt_data_parallel *dp, const tt_comm *comm, const tt_run_config *run,
                           const tt_model_state *model) {
    memset(dp, 0, sizeof(*dp));
    dp->comm = comm;
    uint64_t *hashes = tt_xmalloc(sizeof(uint64_t) * (size_t)comm->size, "configuration hashes");
    const uint64_t mine = config_hash(run);
    tt_comm_all_gather(comm, &mine, hashes, sizeof mine);
    for (int r = 1; r < comm->size; r++)
        if (hashes[r] != hashes[0])
            tt_die("rank %d was started with another configuration than rank 0 (the run YAML and overrides differ); "
                   "start every rank with the same run.yaml and key=value overrides",
                   r);
    free(hashes);
    if (model->plan.compute_tier != TT_TIER_HOST)
        tt_die("%d processes on the %s: data parallel across GPUs (NCCL) is not available yet; use device: cpu with "
               "mpirun, or one process",
               comm->size, tt_tier_name(model->plan.compute_tier));
    if (run->optimizer_cpu_offload)
        tt_die("optimizer_cpu_offload with %d data-parallel processes is not available yet (its gradients leave during "
               "the backward, before the ranks have summed them); remove optimizer_cpu_offload or run one process",
               comm->size);
    TT_CHECK(model->plan.gradient_bytes == sizeof(float), "fp32 gradients on the CPU backend");
    const size_t gradient_bytes = model->sizes.gradients;
    dp->bucket_bytes = gradient_bytes < TT_DATA_PARALLEL_BUCKET_BYTES ? gradient_bytes : TT_DATA_PARALLEL_BUCKET_BYTES;
    if (dp->bucket_bytes < sizeof(float) * (size_t)comm->size) dp->bucket_bytes = sizeof(float) * (size_t)comm->size;
    dp->scratch =
        tt_xmalloc(sizeof(float) * tt_comm_sum_scratch_floats(comm->size, dp->bucket_bytes), "data-parallel buckets");
}

void tt_data_parallel_reduce(tt_data_parallel *dp, tt_model_state *model, double *sums, int count) {
    tt_backend_synchronize(model->backend);
    tt_comm_sum_in_rank_order(dp->comm, model->gradients, (int64_t)(model->sizes.gradients / sizeof(float)),
                              dp->scratch, dp->bucket_bytes);
    tt_comm_sum_doubles(dp->comm, sums, count);
}

void tt_data_parallel_free(tt_data_parallel *dp) {
    free(dp->scratch);
    memset(dp, 0, sizeof(*dp));
}
