/* The processes of one data-parallel run: each trains a replica of the model on its share of every step's
 * sequences, and they meet only in the collectives below. A handle as the backend's, {iface, ctx}: MPI on the CPU
 * backend (`mpirun -np N tiertrain train run.yaml`), NCCL on GPUs (a torchrun-style launch: RANK, WORLD_SIZE,
 * LOCAL_RANK, MASTER_ADDR, MASTER_PORT); a single process has no communicator at all (NULL).
 *
 * Every collective is blocking. all_gather and all_to_all move the compute tier's memory (host memory on the CPU
 * path, GPU memory under NCCL); all_gather_host moves host memory on either. Ranks call them in the same order.
 * Sums are never done by the transport (whose reduction order is its own): tt_comm_sum_in_rank_order gathers each
 * element's values from every rank and adds them in rank order, so every rank holds the same bits, run after run. */
#ifndef TT_DIST_COMM_H
#define TT_DIST_COMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ops/backend.h"

typedef struct tt_comm_iface {
    void (*destroy)(void *ctx);
    /* recv[r * bytes ..] = rank r's send, for every r (recv: size x bytes), in the compute tier's memory. */
    void (*all_gather)(void *ctx, const void *send, void *recv, size_t bytes);
    /* Rank r's block b of send (send: size x bytes) lands in rank b's recv at block r (compute tier's memory). */
    void (*all_to_all)(void *ctx, const void *send, void *recv, size_t bytes);
    /* all_gather of host memory. */
    void (*all_gather_host)(void *ctx, const void *send, void *recv, size_t bytes);
    void (*barrier)(void *ctx);
    /* Ends every rank of the run at once with this status (after a tt_die on any of them). */
    void (*abort)(void *ctx, int status);
} tt_comm_iface;

typedef struct tt_comm {
    const tt_comm_iface *iface;
    void *ctx;
    int rank, size;
    const char *transport; /* "mpi", "nccl" */
    double *gathered_sums; /* [size x TT_COMM_MAX_SUMS] tt_comm_sum_doubles' gather, taken by tt_comm_join */
} tt_comm;

/* tt_comm_sum_doubles sums at most this many values a call. */
#define TT_COMM_MAX_SUMS 8

/* How this process was started. */
typedef enum tt_launch_kind {
    TT_LAUNCH_SINGLE,   /* one process */
    TT_LAUNCH_MPI,      /* mpirun: OMPI_COMM_WORLD_SIZE or PMI_SIZE > 1 */
    TT_LAUNCH_TORCHRUN, /* WORLD_SIZE > 1 with RANK, LOCAL_RANK, MASTER_ADDR, MASTER_PORT */
} tt_launch_kind;

typedef struct tt_launch {
    tt_launch_kind kind;
    int rank, size, local_rank; /* torchrun's; local_rank: the GPU this process takes */
    int local_size;             /* processes of the run on this host (they share its memory and cores) */
    char master_addr[256];
    int master_port;
} tt_launch;

/* The launch from the environment; dies naming the variable that is missing or malformed. */
tt_launch tt_launch_from_environment(void);

/* MPI's communicator (comm_mpi.c, built with TT_HAVE_MPI): MPI_Init, then MPI_COMM_WORLD's rank and size. */
tt_comm *tt_comm_mpi_open(void);
/* The run's communicator joins the process group: a tt_die on any rank then ends every rank (abort). */
tt_comm *tt_comm_join(tt_comm *comm);
void tt_comm_close(tt_comm *comm);

void tt_comm_all_gather_host(const tt_comm *comm, const void *send, void *recv, size_t bytes);
void tt_comm_barrier(const tt_comm *comm);

/* data[0 .. count) (fp32 gradients in the compute tier) summed over the ranks into every rank's data, each element's
 * terms added in rank order (rank 0's first). In buckets of bucket_bytes: each rank sums its part of a bucket from
 * every rank's copy (all-to-all, then the backend's sum_parts) and gathers the others' sums (all-gather). scratch:
 * tt_comm_sum_scratch_floats(size, bucket_bytes) floats in the compute tier. */
size_t tt_comm_sum_scratch_floats(int size, size_t bucket_bytes);
/* The bucket data parallel sums data_bytes of gradients in: 16 MiB, or all of them when fewer (at least a float a
 * rank); and the scratch that takes, in bytes. */
#define TT_COMM_BUCKET_BYTES ((size_t)16 << 20)
size_t tt_comm_bucket_bytes(int size, size_t data_bytes);
size_t tt_comm_sum_scratch_bytes(int size, size_t data_bytes);
void tt_comm_sum_in_rank_order(const tt_comm *comm, const tt_backend *backend, float *data, int64_t count,
                               float *scratch, size_t bucket_bytes);
/* The same for count (at most TT_COMM_MAX_SUMS) host doubles: the step's loss sums and token counts. */
void tt_comm_sum_doubles(const tt_comm *comm, double *values, int count);

#endif
