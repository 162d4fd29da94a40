/* The CPU path's transport: MPI (Open MPI from Debian; `mpirun -np N tiertrain train run.yaml`). Only byte
 * movement, in host memory (the CPU backend's compute tier): the sums are tt_comm_sum_in_rank_order's own. Built
 * when CMake finds MPI (TT_HAVE_MPI). */
#ifdef TT_HAVE_MPI
#include <mpi.h>
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

/* MPI counts are ints: larger moves go in pieces of at most 1 GiB. */
#define MPI_PIECE ((size_t)1 << 30)

static void mpi_all_gather(void *ctx, const void *send, void *recv, size_t bytes) {
    (void)ctx;
    TT_CHECK(bytes <= MPI_PIECE, "an all-gather of %zu bytes a rank", bytes);
    check_mpi(MPI_Allgather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, MPI_COMM_WORLD), "all-gather");
}

static void mpi_all_to_all(void *ctx, const void *send, void *recv, size_t bytes) {
    (void)ctx;
    TT_CHECK(bytes <= MPI_PIECE, "an all-to-all of %zu bytes a block", bytes);
    check_mpi(MPI_Alltoall(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, MPI_COMM_WORLD), "all-to-all");
}

static void mpi_gather(void *ctx, const void *send, void *recv, size_t bytes, int root) {
    (void)ctx;
    TT_CHECK(bytes <= MPI_PIECE, "a gather of %zu bytes a rank", bytes);
    check_mpi(MPI_Gather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, root, MPI_COMM_WORLD), "gather");
}

static void mpi_barrier(void *ctx) {
    (void)ctx;
    check_mpi(MPI_Barrier(MPI_COMM_WORLD), "barrier");
}

static void mpi_abort(void *ctx, int status) {
    (void)ctx;
    MPI_Abort(MPI_COMM_WORLD, status);
}

static void mpi_destroy(void *ctx) {
    (void)ctx;
    MPI_Finalize();
}

static const tt_comm_iface mpi_iface = {
    .destroy = mpi_destroy,
    .all_gather = mpi_all_gather,
    .all_gather_host = mpi_all_gather, /* the CPU backend's memory is host memory */
    .all_to_all = mpi_all_to_all,
    .gather = mpi_gather,
    .barrier = mpi_barrier,
    .abort = mpi_abort,
};

tt_comm *tt_comm_mpi_open(void) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) check_mpi(MPI_Init(NULL, NULL), "initialisation");
    tt_comm *comm = tt_xcalloc(1, sizeof(tt_comm), "communicator");
    comm->iface = &mpi_iface;
    comm->transport = "mpi";
    MPI_Comm_rank(MPI_COMM_WORLD, &comm->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &comm->size);
    return comm;
}
#endif
