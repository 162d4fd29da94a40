/* Data parallel across GPUs: NCCL moves the gradients' buckets between the ranks' GPU memory (a torchrun-style launch,
 * one process per GPU; the NCCL id shared over tiertrain's TCP bootstrap). Only byte movement, on the communicator's
 * own stream, each call complete when it returns: the sums are dist/comm.c's, in rank order.
 *
 * No call waits forever: each polls its stream, NCCL's own error, and the bootstrap's liveness watch (a rank that
 * ended), and gives up after ddp_timeout seconds; then this rank aborts NCCL and ends with the reason. */
#include "ops/cuda/comm_nccl.h"

#include <cuda_runtime.h>
#include <nccl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/check.h"
#include "dist/bootstrap.h"
#include "ops/cuda/cuda_check.h"

typedef struct nccl_comm {
    ncclComm_t comm;
    cudaStream_t stream;
    int device, rank, size;
    void *staging; /* GPU memory for all_gather_host: TT_COMM_HOST_GATHER_BYTES a rank from the start, grown for
                      larger gathers */
    size_t staging_bytes;
    tt_bootstrap *bootstrap; /* the open rendezvous connections: which rank has ended */
    int timeout_seconds;     /* ddp_timeout */
} nccl_comm;

static void check_nccl(ncclResult_t status, const char *what) {
    if (status == ncclSuccess) return;
    tt_die("NCCL %s failed: %s (%s); NCCL_DEBUG=WARN says more", what, ncclGetErrorString(status),
           ncclGetLastError(NULL) ? ncclGetLastError(NULL) : "");
}

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Waits for the call on the stream: spinning for the first millisecond (a bucket's collective takes about that), then
 * checking every 100 us, until it is done, NCCL reports an error, a rank has ended or ddp_timeout has passed. */
static void finish(nccl_comm *c, const char *what) {
    const double start = now_seconds();
    for (;;) {
        const cudaError_t status = cudaStreamQuery(c->stream);
        if (status == cudaSuccess) return;
        if (status != cudaErrorNotReady) tt_die("NCCL %s: the GPU reported %s", what, cudaGetErrorString(status));
        ncclResult_t async = ncclSuccess;
        if (ncclCommGetAsyncError(c->comm, &async) == ncclSuccess && async != ncclSuccess && async != ncclInProgress)
            tt_die("NCCL %s failed: %s (%s)", what, ncclGetErrorString(async),
                   ncclGetLastError(c->comm) ? ncclGetLastError(c->comm) : "");
        const int lost = tt_bootstrap_lost_rank(c->bootstrap);
        if (lost >= 0)
            tt_die("NCCL %s: rank %d has ended (killed, or stopped on an error: its log says which); the run ends",
                   what, lost);
        const double waited = now_seconds() - start;
        if (waited > c->timeout_seconds)
            tt_die("NCCL %s did not finish in %d s (ddp_timeout): another rank stopped taking part (hung, or on a "
                   "path this one is not); the run ends. Raise ddp_timeout only if a rank legitimately works that long "
                   "between collectives",
                   what, c->timeout_seconds);
        if (waited > 1e-3) usleep(100);
    }
}

static void nccl_all_gather(void *ctx, const void *send, void *recv, size_t bytes) {
    nccl_comm *c = ctx;
    TT_CUDA_CHECK(cudaSetDevice(c->device));
    check_nccl(ncclAllGather(send, recv, bytes, ncclUint8, c->comm, c->stream), "all-gather");
    finish(c, "all-gather");
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
    finish(c, "all-to-all");
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
    finish(c, "gather");
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

static void nccl_abort(void *ctx, int status) {
    nccl_comm *c = ctx;
    ncclCommAbort(c->comm); /* this rank's side; the launcher (torchrun) ends the others when a process exits */
    exit(status);
}

static void nccl_set_timeout(void *ctx, int seconds) {
    nccl_comm *c = ctx;
    c->timeout_seconds = seconds;
}

static void nccl_destroy(void *ctx) {
    nccl_comm *c = ctx;
    tt_bootstrap_close(c->bootstrap); /* an orderly end: the others' watch will not take it for a loss */
    ncclCommDestroy(c->comm);
    if (c->staging) cudaFree(c->staging);
    cudaStreamDestroy(c->stream);
    free(c);
}

static const tt_comm_iface nccl_iface = {
    .destroy = nccl_destroy,
    .all_gather = nccl_all_gather,
    .all_to_all = nccl_all_to_all,
    .gather = nccl_gather,
    .all_gather_host = nccl_all_gather_host,
    .barrier = nccl_barrier,
    .abort = nccl_abort,
    .set_timeout = nccl_set_timeout,
};

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
    c->timeout_seconds = TT_COMM_DEFAULT_TIMEOUT;
    check_nccl(ncclCommInitRank(&c->comm, launch->size, id, launch->rank), "initialisation");
    TT_CUDA_CHECK(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
    /* the host gathers of a step (its loss sums) fit from the start: no allocation inside a step */
    c->staging_bytes = TT_COMM_HOST_GATHER_BYTES * (size_t)(launch->size + 1);
    TT_CUDA_CHECK(cudaMalloc(&c->staging, c->staging_bytes));
    tt_comm *comm = tt_xcalloc(1, sizeof(tt_comm), "communicator");
    *comm = (tt_comm){.iface = &nccl_iface, .ctx = c, .rank = launch->rank, .size = launch->size, .transport = "nccl"};
    return comm;
}
