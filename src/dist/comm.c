#include "dist/comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"

static int64_t env_int(const char *name) {
    const char *v = getenv(name);
    if (!v || !*v) return -1;
    char *end = NULL;
    const long long x = strtoll(v, &end, 10);
    return end && *end == 0 ? x : -1;
}

/* tt_die on any rank ends them all (set once, when the run's communicator opens) */
static tt_comm *open_comm;
static char rank_label[32];

static void end_all_ranks(int status) { open_comm->iface->abort(open_comm->ctx, status); }

static tt_comm *joined(tt_comm *comm) {
    open_comm = comm;
    snprintf(rank_label, sizeof rank_label, "rank %d of %d", comm->rank, comm->size);
    tt_set_process_group(rank_label, end_all_ranks);
    return comm;
}

tt_comm *tt_comm_open_from_environment(void) {
    int64_t mpi_size = env_int("OMPI_COMM_WORLD_SIZE");
    if (mpi_size < 0) mpi_size = env_int("PMI_SIZE");
    if (mpi_size > 1) {
#ifdef TT_HAVE_MPI
        return joined(tt_comm_mpi_open());
#else
        tt_die("started by mpirun with %lld processes, but this tiertrain was built without MPI; install Open MPI "
               "(apt-get install libopenmpi-dev openmpi-bin) and rebuild, or run one process",
               (long long)mpi_size);
#endif
    }
    const int64_t world = env_int("WORLD_SIZE");
    if (world > 1)
        tt_die("WORLD_SIZE is %lld (a torchrun-style launch): several GPUs through NCCL are not available yet; run "
               "`mpirun -np %lld tiertrain train ...` on the CPU backend, or one process",
               (long long)world, (long long)world);
    return NULL;
}

void tt_comm_close(tt_comm *comm) {
    if (!comm) return;
    if (comm == open_comm) {
        tt_set_process_group(NULL, NULL);
        open_comm = NULL;
    }
    comm->iface->destroy(comm->ctx);
    free(comm);
}

void tt_comm_all_gather(const tt_comm *comm, const void *send, void *recv, size_t bytes) {
    comm->iface->all_gather(comm->ctx, send, recv, bytes);
}

void tt_comm_barrier(const tt_comm *comm) { comm->iface->barrier(comm->ctx); }

size_t tt_comm_sum_scratch_floats(int size, size_t bucket_bytes) {
    const size_t chunk = bucket_bytes / sizeof(float) / (size_t)size;
    return (2 * (size_t)size + 1) * chunk; /* received parts, this rank's sums, the parts sent */
}

void tt_comm_sum_in_rank_order(const tt_comm *comm, float *data, int64_t count, float *scratch, size_t bucket_bytes) {
    const int size = comm->size;
    const int64_t chunk = (int64_t)(bucket_bytes / sizeof(float)) / size; /* elements each rank sums per bucket */
    TT_CHECK(chunk > 0, "a bucket of %zu bytes for %d ranks", bucket_bytes, size);
    float *mine = scratch + (size_t)size * (size_t)chunk; /* [chunk]: this rank's summed part */
    for (int64_t start = 0; start < count; start += chunk * size) {
        const int64_t bucket = count - start < chunk * size ? count - start : chunk * size;
        const int64_t part = (bucket + size - 1) / size; /* this bucket's part per rank; the last may be short */
        /* the send blocks are data's own parts: rank b sums part b; the last parts are padded through scratch */
        float *send = mine + chunk; /* [size x part] */
        for (int b = 0; b < size; b++) {
            const int64_t lo = (int64_t)b * part, n = lo >= bucket ? 0 : (bucket - lo < part ? bucket - lo : part);
            if (n) memcpy(send + (size_t)b * (size_t)part, data + start + lo, sizeof(float) * (size_t)n);
            if (n < part) memset(send + (size_t)b * (size_t)part + n, 0, sizeof(float) * (size_t)(part - n));
        }
        comm->iface->all_to_all(comm->ctx, send, scratch, sizeof(float) * (size_t)part);
        for (int64_t i = 0; i < part; i++) {
            float sum = scratch[i];
            for (int r = 1; r < size; r++) sum += scratch[(size_t)r * (size_t)part + (size_t)i];
            mine[i] = sum;
        }
        comm->iface->all_gather(comm->ctx, mine, send, sizeof(float) * (size_t)part);
        for (int b = 0; b < size; b++) {
            const int64_t lo = (int64_t)b * part, n = lo >= bucket ? 0 : (bucket - lo < part ? bucket - lo : part);
            if (n) memcpy(data + start + lo, send + (size_t)b * (size_t)part, sizeof(float) * (size_t)n);
        }
    }
}

void tt_comm_sum_doubles(const tt_comm *comm, double *values, int count) {
    double *all = tt_xmalloc(sizeof(double) * (size_t)count * (size_t)comm->size, "rank sums");
    comm->iface->all_gather(comm->ctx, values, all, sizeof(double) * (size_t)count);
    for (int i = 0; i < count; i++) {
        double sum = all[i];
        for (int r = 1; r < comm->size; r++) sum += all[(size_t)r * (size_t)count + (size_t)i];
        values[i] = sum;
    }
    free(all);
}
