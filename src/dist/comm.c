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

/* The collectives that move the compute tier's memory are issued in a section of the side queue (comm.h). */
static void check_side_queue(const tt_backend *backend, const char *what) {
    TT_CHECK(tt_backend_side_active(backend), "%s outside a section of the backend's side queue", what);
}

void tt_comm_broadcast(const tt_comm *comm, const tt_backend *backend, void *data, size_t bytes, int root) {
    check_side_queue(backend, "a broadcast");
    comm->iface->broadcast(comm->ctx, data, bytes, root);
}

void tt_comm_broadcast_host(const tt_comm *comm, const tt_backend *backend, void *host, size_t bytes, int root,
                            float *scratch, size_t bucket_bytes) {
    check_side_queue(backend, "a broadcast");
    for (size_t at = 0; at < bytes; at += bucket_bytes) {
        const size_t n = bytes - at < bucket_bytes ? bytes - at : bucket_bytes;
        if (comm->rank == root) tt_backend_upload(backend, scratch, (unsigned char *)host + at, n);
        comm->iface->broadcast(comm->ctx, scratch, n, root);
        if (comm->rank != root) tt_backend_download(backend, (unsigned char *)host + at, scratch, n);
    }
}

void tt_comm_use_side_queue(const tt_comm *comm, const tt_backend *backend) {
    if (comm->iface->use_stream) comm->iface->use_stream(comm->ctx, tt_backend_side_stream(backend));
}

void tt_comm_use_own_queue(const tt_comm *comm) {
    if (comm->iface->use_stream) comm->iface->use_stream(comm->ctx, NULL);
}

tt_comm *tt_comm_split(const tt_comm *comm, int color, int key) { return comm->iface->split(comm->ctx, color, key); }

void tt_comm_set_timeout(const tt_comm *comm, int seconds) {
    if (comm->iface->set_timeout) comm->iface->set_timeout(comm->ctx, seconds);
}

size_t tt_comm_scratch_floats(int size, size_t bucket_bytes) {
    const size_t chunk = bucket_bytes / sizeof(float) / (size_t)size;
    return (2 * (size_t)size + 1) * chunk; /* received parts, this rank's sums, the parts sent */
}

size_t tt_comm_bucket_bytes(int size, size_t data_bytes) {
    size_t bucket = data_bytes < TT_COMM_BUCKET_BYTES ? data_bytes : TT_COMM_BUCKET_BYTES;
    if (bucket < sizeof(float) * (size_t)size) bucket = sizeof(float) * (size_t)size;
    return bucket;
}

size_t tt_comm_scratch_bytes(int size, size_t data_bytes) {
    return sizeof(float) * tt_comm_scratch_floats(size, tt_comm_bucket_bytes(size, data_bytes));
}

void tt_comm_equal_bounds(int size, int64_t count, int64_t *bounds) {
    const int64_t per = (count + size - 1) / size;
    for (int r = 0; r <= size; r++) bounds[r] = (int64_t)r * per < count ? (int64_t)r * per : count;
}

/* The rounds: round `first` moves elements [first, first + chunk) of every rank's range. */
static int64_t chunk_of(const tt_comm *comm, size_t bucket_bytes) {
    const int64_t chunk = (int64_t)(bucket_bytes / sizeof(float)) / comm->size;
    TT_CHECK(chunk > 0, "a bucket of %zu bytes for %d ranks", bucket_bytes, comm->size);
    return chunk;
}

static int64_t longest_range(const int64_t *bounds, int size) {
    int64_t longest = 0;
    for (int r = 0; r < size; r++) {
        TT_CHECK(bounds[r + 1] >= bounds[r], "rank %d's range [%lld, %lld)", r, (long long)bounds[r],
                 (long long)bounds[r + 1]);
        if (bounds[r + 1] - bounds[r] > longest) longest = bounds[r + 1] - bounds[r];
    }
    return longest;
}

/* Elements of rank r's range in the round from `first`, at most part. */
static int64_t round_piece(const int64_t *bounds, int r, int64_t first, int64_t part) {
    const int64_t left = bounds[r + 1] - bounds[r] - first;
    return left <= 0 ? 0 : left < part ? left : part;
}

void tt_comm_reduce_scatter_in_rank_order(const tt_comm *comm, const tt_backend *backend, float *data,
                                          const int64_t *bounds, float *scratch, size_t bucket_bytes) {
    const int size = comm->size, me = comm->rank;
    check_side_queue(backend, "a reduce-scatter");
    const int64_t chunk = chunk_of(comm, bucket_bytes), longest = longest_range(bounds, size);
    float *mine = scratch + (size_t)size * (size_t)chunk; /* [chunk]: this rank's sums of the round */
    float *send = mine + chunk;                           /* [size x part] */
    for (int64_t first = 0; first < longest; first += chunk) {
        const int64_t part = longest - first < chunk ? longest - first : chunk;
        for (int b = 0; b < size; b++) { /* block b: this rank's values in rank b's range, padded with zeros */
            const int64_t n = round_piece(bounds, b, first, part);
            float *block = send + (size_t)b * (size_t)part;
            if (n) tt_backend_copy(backend, block, data + bounds[b] + first, sizeof(float) * (size_t)n);
            if (n < part) tt_backend_zero(backend, block + n, sizeof(float) * (size_t)(part - n));
        }
        comm->iface->all_to_all(comm->ctx, send, scratch, sizeof(float) * (size_t)part);
        tt_backend_sum_parts(backend, mine, scratch, size, part);
        const int64_t n = round_piece(bounds, me, first, part);
        if (n) tt_backend_copy(backend, data + bounds[me] + first, mine, sizeof(float) * (size_t)n);
    }
}

void tt_comm_reduce_in_rank_order(const tt_comm *comm, const tt_backend *backend, float *data, int64_t count, int root,
                                  float *scratch, size_t bucket_bytes) {
    const int size = comm->size;
    check_side_queue(backend, "a reduce");
    const int64_t chunk = chunk_of(comm, bucket_bytes);
    float *mine = scratch + (size_t)size * (size_t)chunk; /* [chunk]: root's sums of the round */
    for (int64_t first = 0; first < count; first += chunk) {
        const int64_t part = count - first < chunk ? count - first : chunk;
        comm->iface->gather(comm->ctx, data + first, scratch, sizeof(float) * (size_t)part, root);
        if (comm->rank != root) continue;
        tt_backend_sum_parts(backend, mine, scratch, size, part);
        tt_backend_copy(backend, data + first, mine, sizeof(float) * (size_t)part);
    }
}

void tt_comm_all_gather_ranges(const tt_comm *comm, const tt_backend *backend, void *data, size_t element_bytes,
                               bool on_host, const int64_t *bounds, float *scratch, size_t bucket_bytes) {
    const int size = comm->size, me = comm->rank;
    check_side_queue(backend, "an all-gather");
    TT_CHECK(element_bytes >= 1 && element_bytes <= sizeof(float), "elements of %zu bytes", element_bytes);
    const int64_t chunk = chunk_of(comm, bucket_bytes), longest = longest_range(bounds, size);
    unsigned char *bytes = data, *recv = (unsigned char *)scratch;                         /* [size x part] */
    unsigned char *send = (unsigned char *)(scratch + (size_t)(size + 1) * (size_t)chunk); /* [part] */
    for (int64_t first = 0; first < longest; first += chunk) {
        const int64_t part = longest - first < chunk ? longest - first : chunk;
        const int64_t n = round_piece(bounds, me, first, part);
        unsigned char *at = bytes + (size_t)(bounds[me] + first) * element_bytes;
        if (n && on_host) tt_backend_upload(backend, send, at, (size_t)n * element_bytes);
        else if (n) tt_backend_copy(backend, send, at, (size_t)n * element_bytes);
        if (n < part) tt_backend_zero(backend, send + (size_t)n * element_bytes, (size_t)(part - n) * element_bytes);
        comm->iface->all_gather(comm->ctx, send, recv, (size_t)part * element_bytes);
        for (int b = 0; b < size; b++) {
            const int64_t got = round_piece(bounds, b, first, part);
            if (b == me || !got) continue;
            unsigned char *to = bytes + (size_t)(bounds[b] + first) * element_bytes;
            const unsigned char *from = recv + (size_t)b * (size_t)part * element_bytes;
            if (on_host) tt_backend_download(backend, to, from, (size_t)got * element_bytes);
            else tt_backend_copy(backend, to, from, (size_t)got * element_bytes);
        }
    }
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
