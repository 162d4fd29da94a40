#include "dist/comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"

/* -1: unset; dies on a value that is not a whole number */
static int64_t env_int(const char *name) {
    const char *v = getenv(name);
    if (!v || !*v) return -1;
    char *end = NULL;
    const long long x = strtoll(v, &end, 10);
    if (!end || *end != 0 || x < 0) tt_die("environment variable %s is '%s'; expected a whole number", name, v);
    return x;
}

static int64_t need_env_int(const char *name, const char *launch) {
    const int64_t v = env_int(name);
    if (v < 0)
        tt_die("%s: %s is not set; a torchrun-style launch sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and "
               "MASTER_PORT for every process",
               launch, name);
    return v;
}

tt_launch tt_launch_from_environment(void) {
    tt_launch l = {.kind = TT_LAUNCH_SINGLE, .rank = 0, .size = 1, .local_rank = -1, .local_size = 1};
    int64_t mpi_size = env_int("OMPI_COMM_WORLD_SIZE");
    if (mpi_size < 0) mpi_size = env_int("PMI_SIZE");
    if (mpi_size > 1) {
        l.kind = TT_LAUNCH_MPI;
        l.size = (int)mpi_size;
        int64_t local = env_int("OMPI_COMM_WORLD_LOCAL_SIZE");
        if (local < 0) local = env_int("MPI_LOCALNRANKS");
        l.local_size = local > 0 ? (int)local : l.size;
        return l;
    }
    const int64_t world = env_int("WORLD_SIZE");
    if (world <= 1) return l;
    char launch[64];
    snprintf(launch, sizeof launch, "WORLD_SIZE %lld", (long long)world);
    l.kind = TT_LAUNCH_TORCHRUN;
    l.size = (int)world;
    l.rank = (int)need_env_int("RANK", launch);
    l.local_rank = (int)need_env_int("LOCAL_RANK", launch);
    l.master_port = (int)need_env_int("MASTER_PORT", launch);
    const int64_t local = env_int("LOCAL_WORLD_SIZE");
    l.local_size = local > 0 ? (int)local : l.size;
    const char *addr = getenv("MASTER_ADDR");
    if (!addr || !*addr) tt_die("%s: MASTER_ADDR is not set (rank 0's host name or address)", launch);
    snprintf(l.master_addr, sizeof l.master_addr, "%s", addr);
    if (l.rank >= l.size) tt_die("RANK is %d but WORLD_SIZE is %d; ranks are 0 .. %d", l.rank, l.size, l.size - 1);
    if (l.master_port < 1 || l.master_port > 65534)
        tt_die("MASTER_PORT is %d; use a port from 1 to 65534 (tiertrain's rendezvous takes the next one)",
               l.master_port);
    return l;
}

/* tt_die on any rank ends them all (set once, when the run's communicator opens) */
static tt_comm *open_comm;
static char rank_label[32];

static void end_all_ranks(int status) { open_comm->iface->abort(open_comm->ctx, status); }

tt_comm *tt_comm_join(tt_comm *comm) {
    comm->gathered_sums = tt_xmalloc(sizeof(double) * TT_COMM_MAX_SUMS * (size_t)comm->size, "rank sums");
    open_comm = comm;
    snprintf(rank_label, sizeof rank_label, "rank %d of %d", comm->rank, comm->size);
    tt_set_process_group(rank_label, end_all_ranks);
    return comm;
}

void tt_comm_close(tt_comm *comm) {
    if (!comm) return;
    if (comm == open_comm) {
        tt_set_process_group(NULL, NULL);
        open_comm = NULL;
    }
    comm->iface->destroy(comm->ctx);
    free(comm->gathered_sums);
    free(comm);
}

void tt_comm_all_gather_host(const tt_comm *comm, const void *send, void *recv, size_t bytes) {
    comm->iface->all_gather_host(comm->ctx, send, recv, bytes);
}

void tt_comm_barrier(const tt_comm *comm) { comm->iface->barrier(comm->ctx); }

size_t tt_comm_sum_scratch_floats(int size, size_t bucket_bytes) {
    const size_t chunk = bucket_bytes / sizeof(float) / (size_t)size;
    return (2 * (size_t)size + 1) * chunk; /* received parts, this rank's sums, the parts sent */
}

size_t tt_comm_bucket_bytes(int size, size_t data_bytes) {
    size_t bucket = data_bytes < TT_COMM_BUCKET_BYTES ? data_bytes : TT_COMM_BUCKET_BYTES;
    if (bucket < sizeof(float) * (size_t)size) bucket = sizeof(float) * (size_t)size;
    return bucket;
}

size_t tt_comm_sum_scratch_bytes(int size, size_t data_bytes) {
    return sizeof(float) * tt_comm_sum_scratch_floats(size, tt_comm_bucket_bytes(size, data_bytes));
}

void tt_comm_sum_in_rank_order(const tt_comm *comm, const tt_backend *backend, float *data, int64_t count,
                               float *scratch, size_t bucket_bytes) {
    const int size = comm->size;
    const int64_t chunk = (int64_t)(bucket_bytes / sizeof(float)) / size; /* elements each rank sums per bucket */
    TT_CHECK(chunk > 0, "a bucket of %zu bytes for %d ranks", bucket_bytes, size);
    float *mine = scratch + (size_t)size * (size_t)chunk; /* [chunk]: this rank's summed part */
    float *send = mine + chunk;                           /* [size x chunk] */
    for (int64_t start = 0; start < count; start += chunk * size) {
        const int64_t bucket = count - start < chunk * size ? count - start : chunk * size;
        const int64_t part = (bucket + size - 1) / size; /* this bucket's part per rank; the last may be short */
        for (int b = 0; b < size; b++) {                 /* block b: the part rank b sums, padded with zeros */
            const int64_t lo = (int64_t)b * part, n = lo >= bucket ? 0 : (bucket - lo < part ? bucket - lo : part);
            if (n)
                tt_backend_copy(backend, send + (size_t)b * (size_t)part, data + start + lo, sizeof(float) * (size_t)n);
            if (n < part)
                tt_backend_zero(backend, send + (size_t)b * (size_t)part + n, sizeof(float) * (size_t)(part - n));
        }
        tt_backend_synchronize(backend); /* the transport reads what the backend's stream wrote */
        comm->iface->all_to_all(comm->ctx, send, scratch, sizeof(float) * (size_t)part);
        tt_backend_sum_parts(backend, mine, scratch, size, part);
        tt_backend_synchronize(backend);
        comm->iface->all_gather(comm->ctx, mine, send, sizeof(float) * (size_t)part);
        for (int b = 0; b < size; b++) {
            const int64_t lo = (int64_t)b * part, n = lo >= bucket ? 0 : (bucket - lo < part ? bucket - lo : part);
            if (n)
                tt_backend_copy(backend, data + start + lo, send + (size_t)b * (size_t)part, sizeof(float) * (size_t)n);
        }
    }
    tt_backend_synchronize(backend);
}

void tt_comm_sum_doubles(const tt_comm *comm, double *values, int count) {
    TT_CHECK(count > 0 && count <= TT_COMM_MAX_SUMS && comm->gathered_sums, "%d sums through a joined communicator",
             count);
    double *all = comm->gathered_sums;
    comm->iface->all_gather_host(comm->ctx, values, all, sizeof(double) * (size_t)count);
    for (int i = 0; i < count; i++) {
        double sum = all[i];
        for (int r = 1; r < comm->size; r++) sum += all[(size_t)r * (size_t)count + (size_t)i];
        values[i] = sum;
    }
}
