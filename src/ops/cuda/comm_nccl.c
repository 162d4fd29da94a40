/* Data parallel across GPUs: NCCL moves the gradients' buckets between the ranks' GPU memory (a torchrun-style launch,
 * one process per GPU; the NCCL id shared over tiertrain's TCP bootstrap). Only byte movement: the sums are
 * dist/comm.c's, in rank order. The collectives of GPU memory are issued on a stream and return at once: the
 * backend's side queue once data parallel starts (use_stream), so that they run in order with the copies and sums
 * around them and beside the compute stream; those of host memory wait for their result.
 *
 * Nothing waits forever: a watchdog thread checks every 100 ms the bootstrap's liveness watch (a rank that ended),
 * NCCL's own asynchronous error, and how long the oldest unfinished collective has been issued (ddp_timeout; each
 * issued collective records an event the watchdog polls); on any of them it ends this process with the reason,
 * wherever its main thread is blocked (a copy to pageable memory waits for the stream inside the CUDA call). The
 * other ranks see this one end through their own watch. */
#include "ops/cuda/comm_nccl.h"

#include <cuda_runtime.h>
#include <nccl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/check.h"
#include "dist/bootstrap.h"
#include "ops/cuda/cuda_check.h"

/* Groups split from the run's communicator (sequence parallel's: one). */
#define TT_NCCL_MAX_GROUPS 4
/* Issued collectives the watchdog follows at once; the main thread waits for the oldest to issue one more. */
#define TT_NCCL_PENDING 128

/* An issued collective: the event after it on its stream, when it was issued and what it is. */
typedef struct pending_call {
    cudaEvent_t done;
    long long issued_ns;
    const char *what;
} pending_call;

typedef struct nccl_comm {
    ncclComm_t comm;
    cudaStream_t stream;     /* where the collectives issue: own_stream, or the backend's side queue (use_stream) */
    cudaStream_t own_stream; /* until then */
    int device, rank, size;
    void *staging; /* GPU memory for all_gather_host: TT_COMM_HOST_GATHER_BYTES a rank from the start, grown for
                      larger gathers */
    size_t staging_bytes;
    tt_bootstrap *bootstrap; /* the open rendezvous connections: which rank has ended */
    /* the watchdog */
    atomic_int timeout_seconds;      /* ddp_timeout */
    atomic_llong busy_since_ns;      /* when a blocking call in progress (a split) started, 0: none */
    _Atomic(const char *) busy_what; /* its name */
    /* the issued collectives not seen done yet, oldest first: [first, first + count) of the ring */
    pthread_mutex_t pending_lock;
    pending_call pending[TT_NCCL_PENDING];
    int pending_first, pending_count;
    atomic_bool stop;
    pthread_t watchdog;
    struct nccl_comm *parent; /* a group split from the run's communicator: its watchdog watches this one's calls */
    /* the run's communicator: the groups split from it, whose errors its watchdog polls too */
    pthread_mutex_t groups_lock;
    ncclComm_t groups[TT_NCCL_MAX_GROUPS];
} nccl_comm;

static void check_nccl(ncclResult_t status, const char *what) {
    if (status == ncclSuccess) return;
    tt_die("NCCL %s failed: %s (%s); NCCL_DEBUG=WARN says more", what, ncclGetErrorString(status),
           ncclGetLastError(NULL) ? ncclGetLastError(NULL) : "");
}

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

/* the communicator whose watchdog watches c's calls */
static nccl_comm *watched(nccl_comm *c) { return c->parent ? c->parent : c; }

static void begin(nccl_comm *c, const char *what) {
    atomic_store(&watched(c)->busy_what, what);
    atomic_store(&watched(c)->busy_since_ns, now_ns());
}

static void end_blocking(nccl_comm *c) { atomic_store(&watched(c)->busy_since_ns, 0); }

/* Drops the collectives seen done from the front of the ring; true when the ring is empty. Under the lock. */
static bool drop_done(nccl_comm *w) {
    while (w->pending_count > 0) {
        const cudaError_t status = cudaEventQuery(w->pending[w->pending_first].done);
        if (status == cudaErrorNotReady) return false;
        if (status != cudaSuccess) return false; /* the error shows on the main thread's next CUDA call */
        w->pending_first = (w->pending_first + 1) % TT_NCCL_PENDING;
        w->pending_count--;
    }
    return true;
}

/* After a collective is issued on c->stream: the watchdog follows it until its event is done. Nothing here ends the
 * process while holding the lock (tt_die's abort joins the watchdog, which takes it). */
static void issued(nccl_comm *c, const char *what) {
    nccl_comm *w = watched(c);
    pthread_mutex_lock(&w->pending_lock);
    while (!drop_done(w) && w->pending_count == TT_NCCL_PENDING) { /* full: wait for the oldest (still watched) */
        const cudaEvent_t oldest = w->pending[w->pending_first].done;
        pthread_mutex_unlock(&w->pending_lock);
        const cudaError_t status = cudaEventSynchronize(oldest);
        if (status != cudaSuccess) tt_die("NCCL %s: the GPU reported %s", what, cudaGetErrorString(status));
        pthread_mutex_lock(&w->pending_lock);
    }
    pending_call *p = &w->pending[(w->pending_first + w->pending_count) % TT_NCCL_PENDING];
    const cudaError_t status = cudaEventRecord(p->done, c->stream);
    if (status == cudaSuccess) {
        p->issued_ns = now_ns();
        p->what = what;
        w->pending_count++;
    }
    pthread_mutex_unlock(&w->pending_lock);
    if (status != cudaSuccess) tt_die("NCCL %s: the GPU reported %s", what, cudaGetErrorString(status));
}

/* A collective of host memory: issued, then waited for (the watchdog ends the process if that takes too long). */
static void finish(nccl_comm *c, const char *what) {
    issued(c, what);
    const cudaError_t status = cudaStreamSynchronize(c->stream);
    if (status != cudaSuccess) tt_die("NCCL %s: the GPU reported %s", what, cudaGetErrorString(status));
}

/* From the watchdog thread: the main thread may be blocked inside CUDA, so no cleanup, no exit handlers. */
static void end_from_watchdog(const nccl_comm *c, const char *reason) {
    /* write(2) only: the main thread may hold stdio's locks (stdout on a full pipe) */
    char line[640];
    const int n = snprintf(line, sizeof line, "tiertrain: error: rank %d of %d: %s\n", c->rank, c->size, reason);
    if (n > 0) (void)!write(2, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
    _exit(TT_EXIT_INPUT_ERROR);
}

/* An NCCL error of the communicator or of a group split from it (under the lock: a group is destroyed under it). */
static bool async_error(nccl_comm *c, ncclResult_t *error) {
    bool failed = false;
    pthread_mutex_lock(&c->groups_lock);
    for (int i = -1; i < TT_NCCL_MAX_GROUPS && !failed; i++) {
        ncclComm_t comm = i < 0 ? c->comm : c->groups[i];
        ncclResult_t async = ncclSuccess;
        if (comm && ncclCommGetAsyncError(comm, &async) == ncclSuccess && async != ncclSuccess &&
            async != ncclInProgress) {
            *error = async;
            failed = true;
        }
    }
    pthread_mutex_unlock(&c->groups_lock);
    return failed;
}

static void *watchdog(void *arg) {
    nccl_comm *c = arg;
    char reason[512];
    (void)cudaSetDevice(c->device); /* the events it polls are the device's */
    while (!atomic_load(&c->stop)) {
        usleep(100 * 1000);
        const int lost = tt_bootstrap_lost_rank(c->bootstrap);
        if (lost >= 0) {
            snprintf(reason, sizeof reason,
                     "rank %d has ended (killed, or stopped on an error: its log says which); the run ends", lost);
            end_from_watchdog(c, reason);
        }
        ncclResult_t async = ncclSuccess;
        if (async_error(c, &async)) {
            snprintf(reason, sizeof reason, "NCCL failed: %s; NCCL_DEBUG=WARN says more", ncclGetErrorString(async));
            end_from_watchdog(c, reason);
        }
        /* the oldest unfinished call: a blocking one (a split), or the oldest issued collective not done */
        long long since = atomic_load(&c->busy_since_ns);
        const char *what = atomic_load(&c->busy_what);
        pthread_mutex_lock(&c->pending_lock);
        if (!since && !drop_done(c)) {
            since = c->pending[c->pending_first].issued_ns;
            what = c->pending[c->pending_first].what;
        }
        pthread_mutex_unlock(&c->pending_lock);
        const int timeout = atomic_load(&c->timeout_seconds);
        if (since && (double)(now_ns() - since) * 1e-9 > timeout) {
            snprintf(reason, sizeof reason,
                     "NCCL %s did not finish in %d s (ddp_timeout): another rank stopped taking part (hung, or on a "
                     "path this one is not); the run ends. Raise ddp_timeout only if a rank legitimately works that "
                     "long between collectives",
                     what, timeout);
            end_from_watchdog(c, reason);
        }
    }
    return NULL;
}

static void nccl_all_gather(void *ctx, const void *send, void *recv, size_t bytes) {
    nccl_comm *c = ctx;
    TT_CUDA_CHECK(cudaSetDevice(c->device));
    check_nccl(ncclAllGather(send, recv, bytes, ncclUint8, c->comm, c->stream), "all-gather");
    issued(c, "all-gather");
}

static void nccl_all_to_all(void *ctx, const void *send, void *recv, size_t bytes) {
    nccl_comm *c = ctx;
    TT_CUDA_CHECK(cudaSetDevice(c->device));
    check_nccl(ncclGroupStart(), "all-to-all");
    for (int peer = 0; peer < c->size; peer++) {
        check_nccl(
            ncclSend((const unsigned char *)send + (size_t)peer * bytes, bytes, ncclUint8, peer, c->comm, c->stream),
            "all-to-all send");
        check_nccl(ncclRecv((unsigned char *)recv + (size_t)peer * bytes, bytes, ncclUint8, peer, c->comm, c->stream),
                   "all-to-all receive");
    }
    check_nccl(ncclGroupEnd(), "all-to-all");
    issued(c, "all-to-all");
}

static void nccl_gather(void *ctx, const void *send, void *recv, size_t bytes, int root) {
    nccl_comm *c = ctx;
    TT_CUDA_CHECK(cudaSetDevice(c->device));
    check_nccl(ncclGroupStart(), "gather");
    if (c->rank == root) {
        for (int peer = 0; peer < c->size; peer++)
            if (peer != root)
                check_nccl(
                    ncclRecv((unsigned char *)recv + (size_t)peer * bytes, bytes, ncclUint8, peer, c->comm, c->stream),
                    "gather receive");
    } else {
        check_nccl(ncclSend(send, bytes, ncclUint8, root, c->comm, c->stream), "gather send");
    }
    check_nccl(ncclGroupEnd(), "gather");
    if (c->rank == root) /* root's own part */
        TT_CUDA_CHECK(cudaMemcpyAsync((unsigned char *)recv + (size_t)root * bytes, send, bytes,
                                      cudaMemcpyDeviceToDevice, c->stream));
    issued(c, "gather");
}

static void nccl_broadcast(void *ctx, void *data, size_t bytes, int root) {
    nccl_comm *c = ctx;
    TT_CUDA_CHECK(cudaSetDevice(c->device));
    check_nccl(ncclBroadcast(data, data, bytes, ncclUint8, root, c->comm, c->stream), "broadcast");
    issued(c, "broadcast");
}

static void nccl_all_gather_host(void *ctx, const void *send, void *recv, size_t bytes) {
    nccl_comm *c = ctx;
    TT_CUDA_CHECK(cudaSetDevice(c->device));
    const size_t need = bytes * (size_t)(c->size + 1);
    if (need > c->staging_bytes) {
        if (c->staging) TT_CUDA_CHECK(cudaFree(c->staging));
        TT_CUDA_CHECK(cudaMalloc(&c->staging, need));
        c->staging_bytes = need;
    }
    unsigned char *mine = (unsigned char *)c->staging + bytes * (size_t)c->size;
    TT_CUDA_CHECK(cudaMemcpyAsync(mine, send, bytes, cudaMemcpyHostToDevice, c->stream));
    check_nccl(ncclAllGather(mine, c->staging, bytes, ncclUint8, c->comm, c->stream), "all-gather");
    TT_CUDA_CHECK(cudaMemcpyAsync(recv, c->staging, bytes * (size_t)c->size, cudaMemcpyDeviceToHost, c->stream));
    finish(c, "all-gather");
}

static void nccl_barrier(void *ctx) {
    nccl_comm *c = ctx;
    const char token = 0;
    char *all = tt_xmalloc((size_t)c->size, "barrier");
    nccl_all_gather_host(ctx, &token, all, 1);
    free(all);
}

/* From tt_die on the main thread (the watchdog ends the process itself, without this) */
static void nccl_abort(void *ctx, int status) {
    nccl_comm *c = ctx;
    atomic_store(&c->stop, true); /* the watchdog polls the communicator: it stops first */
    pthread_join(c->watchdog, NULL);
    ncclCommAbort(c->comm); /* this rank's side; the others' watch sees this process end */
    exit(status);
}

static void nccl_use_stream(void *ctx, void *stream) {
    nccl_comm *c = ctx;
    TT_CUDA_CHECK(cudaStreamSynchronize(c->stream)); /* what was issued on the previous one is done */
    c->stream = stream ? (cudaStream_t)stream : c->own_stream;
}

static void nccl_set_timeout(void *ctx, int seconds) {
    nccl_comm *c = ctx;
    atomic_store(&c->timeout_seconds, seconds);
}

static void nccl_destroy(void *ctx) {
    nccl_comm *c = ctx;
    if (c->parent) { /* a group: no watchdog, no bootstrap of its own; the parent's stops polling it first */
        pthread_mutex_lock(&c->parent->groups_lock);
        for (int i = 0; i < TT_NCCL_MAX_GROUPS; i++)
            if (c->parent->groups[i] == c->comm) c->parent->groups[i] = NULL;
        pthread_mutex_unlock(&c->parent->groups_lock);
        cudaStreamSynchronize(c->stream);
        ncclCommDestroy(c->comm);
        if (c->staging) cudaFree(c->staging);
        cudaStreamDestroy(c->own_stream);
        free(c);
        return;
    }
    atomic_store(&c->stop, true);
    pthread_join(c->watchdog, NULL);
    cudaStreamSynchronize(c->stream);
    tt_bootstrap_close(c->bootstrap); /* an orderly end: the others' watch will not take it for a loss */
    pthread_mutex_destroy(&c->groups_lock);
    pthread_mutex_destroy(&c->pending_lock);
    for (int i = 0; i < TT_NCCL_PENDING; i++) cudaEventDestroy(c->pending[i].done);
    ncclCommDestroy(c->comm);
    if (c->staging) cudaFree(c->staging);
    cudaStreamDestroy(c->own_stream);
    free(c);
}

static tt_comm *nccl_split(void *ctx, int color, int key);
static void connect_peers(nccl_comm *c, bool rings);

static const tt_comm_iface nccl_iface = {
    .destroy = nccl_destroy,
    .all_gather = nccl_all_gather,
    .all_to_all = nccl_all_to_all,
    .gather = nccl_gather,
    .broadcast = nccl_broadcast,
    .all_gather_host = nccl_all_gather_host,
    .barrier = nccl_barrier,
    .abort = nccl_abort,
    .set_timeout = nccl_set_timeout,
    .split = nccl_split,
    .use_stream = nccl_use_stream,
};

static tt_comm *nccl_split(void *ctx, int color, int key) {
    nccl_comm *parent = ctx;
    nccl_comm *c = tt_xcalloc(1, sizeof(nccl_comm), "NCCL communicator");
    c->device = parent->device;
    c->parent = parent;
    TT_CUDA_CHECK(cudaSetDevice(c->device));
    begin(c, "communicator split");
    check_nccl(ncclCommSplit(parent->comm, color, key, &c->comm, NULL), "communicator split");
    end_blocking(c);
    pthread_mutex_lock(&parent->groups_lock);
    int slot = 0;
    while (slot < TT_NCCL_MAX_GROUPS && parent->groups[slot]) slot++;
    TT_CHECK(slot < TT_NCCL_MAX_GROUPS, "at most %d communicator groups", TT_NCCL_MAX_GROUPS);
    parent->groups[slot] = c->comm;
    pthread_mutex_unlock(&parent->groups_lock);
    check_nccl(ncclCommUserRank(c->comm, &c->rank), "communicator split");
    check_nccl(ncclCommCount(c->comm, &c->size), "communicator split");
    TT_CUDA_CHECK(cudaStreamCreateWithFlags(&c->own_stream, cudaStreamNonBlocking));
    c->stream = parent->stream == parent->own_stream ? c->own_stream : parent->stream;
    connect_peers(c, false); /* its all-to-all's peers, before the plan reads the free memory */
    tt_comm *comm = tt_xcalloc(1, sizeof(tt_comm), "communicator");
    *comm = (tt_comm){.iface = &nccl_iface, .ctx = c, .rank = c->rank, .size = c->size, .transport = "nccl"};
    return comm;
}

/* NCCL connects its peers, and allocates their buffers on the GPU, at a communicator's first collective of each kind
 * (its runtime connection), which would be after the plan has read the GPU's free memory: the buffers would then come
 * out of the room the plan priced. So every kind the run issues (ring all-gather and broadcast, the send/receive of
 * the all-to-all and gather) runs once here on a bucket's bytes, and the plan reads the free memory after them.
 * Measured on 4 x H100 before this: 1.2 GiB a rank outside the plan's arena at 4 ranks, 0.46 GiB at 2. A group split
 * from the run's communicator (sequence parallel's, made before the plan too: tt_data_parallel_sequence_group) only
 * exchanges tokens for heads, so it connects the all-to-all's peers only (rings = false). */
static void connect_peers(nccl_comm *c, bool rings) {
    const size_t each = TT_COMM_BUCKET_BYTES / (size_t)c->size; /* the data-parallel rounds' per-rank share */
    const size_t bytes = each * (size_t)c->size;
    unsigned char *send = NULL, *recv = NULL;
    TT_CUDA_CHECK(cudaMalloc((void **)&send, bytes));
    TT_CUDA_CHECK(cudaMalloc((void **)&recv, bytes));
    TT_CUDA_CHECK(cudaMemsetAsync(send, 0, bytes, c->stream));
    if (rings) {
        nccl_all_gather(c, send, recv, each);
        nccl_broadcast(c, send, bytes, 0);
    }
    nccl_all_to_all(c, send, recv, each);
    TT_CUDA_CHECK(cudaStreamSynchronize(c->stream));
    TT_CUDA_CHECK(cudaFree(send));
    TT_CUDA_CHECK(cudaFree(recv));
}

tt_comm *tt_comm_nccl_open(const tt_launch *launch, int device) {
    nccl_comm *c = tt_xcalloc(1, sizeof(nccl_comm), "NCCL communicator");
    c->device = device;
    c->rank = launch->rank;
    c->size = launch->size;
    TT_CUDA_CHECK(cudaSetDevice(device));
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    if (launch->rank == 0) check_nccl(ncclGetUniqueId(&id), "unique id");
    c->bootstrap = tt_bootstrap_share(launch, &id, sizeof id, 300);
    atomic_init(&c->timeout_seconds, TT_COMM_DEFAULT_TIMEOUT);
    atomic_init(&c->busy_since_ns, 0);
    atomic_init(&c->busy_what, "");
    atomic_init(&c->stop, false);
    pthread_mutex_init(&c->groups_lock, NULL);
    pthread_mutex_init(&c->pending_lock, NULL);
    for (int i = 0; i < TT_NCCL_PENDING; i++)
        TT_CUDA_CHECK(cudaEventCreateWithFlags(&c->pending[i].done, cudaEventDisableTiming));
    check_nccl(ncclCommInitRank(&c->comm, launch->size, id, launch->rank), "initialisation");
    TT_CUDA_CHECK(cudaStreamCreateWithFlags(&c->own_stream, cudaStreamNonBlocking));
    c->stream = c->own_stream;
    if (pthread_create(&c->watchdog, NULL, watchdog, c) != 0) tt_die("cannot start the NCCL watchdog thread");
    /* the host gathers of a step (its loss sums) fit from the start: no allocation inside a step */
    c->staging_bytes = TT_COMM_HOST_GATHER_BYTES * (size_t)(launch->size + 1);
    TT_CUDA_CHECK(cudaMalloc(&c->staging, c->staging_bytes));
    connect_peers(c, true);
    tt_comm *comm = tt_xcalloc(1, sizeof(tt_comm), "communicator");
    *comm = (tt_comm){.iface = &nccl_iface, .ctx = c, .rank = launch->rank, .size = launch->size, .transport = "nccl"};
    return comm;
}
