/* The CPU path's transport: MPI (Open MPI from Debian; `mpirun -np N tiertrain train run.yaml`). Only byte
 * movement, in host memory (the CPU backend's compute tier): the sums are tt_comm_sum_in_rank_order's own. Built
 * when CMake finds MPI (TT_HAVE_MPI). */
#ifdef TT_HAVE_MPI
#include <mpi.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/check.h"
#include "dist/comm.h"

static void check_mpi(int status, const char *what) {
    if (status == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING];
    int length = 0;
    MPI_Error_string(status, text, &length);
    tt_die("MPI %s failed: %s", what, text);
}

/* The communicator a tt_comm's ctx holds: MPI_COMM_WORLD, or a group split from it. */
typedef struct mpi_ctx {
    MPI_Comm comm;
    bool owned; /* split from the world: freed with the tt_comm */
} mpi_ctx;

static MPI_Comm comm_of(void *ctx) { return ((mpi_ctx *)ctx)->comm; }

/* MPI counts are ints: larger moves go in pieces of at most 1 GiB. */
#define MPI_PIECE ((size_t)1 << 30)

static void mpi_all_gather(void *ctx, const void *send, void *recv, size_t bytes) {
    TT_CHECK(bytes <= MPI_PIECE, "an all-gather of %zu bytes a rank", bytes);
    check_mpi(MPI_Allgather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, comm_of(ctx)), "all-gather");
}

static void mpi_all_to_all(void *ctx, const void *send, void *recv, size_t bytes) {
    TT_CHECK(bytes <= MPI_PIECE, "an all-to-all of %zu bytes a block", bytes);
    check_mpi(MPI_Alltoall(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, comm_of(ctx)), "all-to-all");
}

static void mpi_gather(void *ctx, const void *send, void *recv, size_t bytes, int root) {
    TT_CHECK(bytes <= MPI_PIECE, "a gather of %zu bytes a rank", bytes);
    check_mpi(MPI_Gather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, root, comm_of(ctx)), "gather");
}

static void mpi_broadcast(void *ctx, void *data, size_t bytes, int root) {
    for (size_t at = 0; at < bytes; at += MPI_PIECE) {
        const size_t n = bytes - at < MPI_PIECE ? bytes - at : MPI_PIECE;
        check_mpi(MPI_Bcast((unsigned char *)data + at, (int)n, MPI_BYTE, root, comm_of(ctx)), "broadcast");
    }
}

static void mpi_barrier(void *ctx) { check_mpi(MPI_Barrier(comm_of(ctx)), "barrier"); }

static void mpi_abort(void *ctx, int status) {
    (void)ctx;
    MPI_Abort(MPI_COMM_WORLD, status);
}

static void mpi_destroy(void *ctx) {
    mpi_ctx *c = ctx;
    if (c->owned) MPI_Comm_free(&c->comm);
    else MPI_Finalize();
    free(c);
}

static tt_comm *mpi_split(void *ctx, int color, int key);

static const tt_comm_iface mpi_iface = {
    .destroy = mpi_destroy,
    .all_gather = mpi_all_gather,
    .all_gather_host = mpi_all_gather, /* the CPU backend's memory is host memory */
    .all_to_all = mpi_all_to_all,
    .gather = mpi_gather,
    .broadcast = mpi_broadcast,
    .barrier = mpi_barrier,
    .abort = mpi_abort,
    .split = mpi_split,
};

static tt_comm *comm_for(MPI_Comm handle, bool owned) {
    mpi_ctx *c = tt_xcalloc(1, sizeof(mpi_ctx), "MPI communicator");
    c->comm = handle;
    c->owned = owned;
    tt_comm *comm = tt_xcalloc(1, sizeof(tt_comm), "communicator");
    comm->iface = &mpi_iface;
    comm->ctx = c;
    comm->transport = "mpi";
    MPI_Comm_rank(handle, &comm->rank);
    MPI_Comm_size(handle, &comm->size);
    return comm;
}

static tt_comm *mpi_split(void *ctx, int color, int key) {
    MPI_Comm group;
    check_mpi(MPI_Comm_split(comm_of(ctx), color, key, &group), "communicator split");
    return comm_for(group, true);
}

tt_comm *tt_comm_mpi_open(void) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) check_mpi(MPI_Init(NULL, NULL), "initialisation");
    return comm_for(MPI_COMM_WORLD, false);
}
#endif
