/* The processes of one data-parallel run: each trains a replica of the model on its share of every step's
 * sequences, and they meet only in the collectives below. A handle as the backend's, {iface, ctx}: the CPU path
 * runs on MPI (`mpirun -np N tiertrain train run.yaml`), a single process has no communicator at all (NULL).
 *
 * Every collective here is blocking and moves host memory; ranks call them in the same order. Sums are never
 * done by the transport (whose reduction order is its own): tt_comm_sum_in_rank_order gathers each element's
 * values from every rank and adds them in rank order, so every rank holds the same bits, run after run. */
#ifndef TT_DIST_COMM_H
#define TT_DIST_COMM_H

#include <stddef.h>
#include <stdint.h>

typedef struct tt_comm_iface {
    void (*destroy)(void *ctx);
    /* recv[r * bytes ..] = rank r's send, for every r (recv: size x bytes). */
    void (*all_gather)(void *ctx, const void *send, void *recv, size_t bytes);
    /* Rank r's block b of send (send: size x bytes) lands in rank b's recv at block r. */
    void (*all_to_all)(void *ctx, const void *send, void *recv, size_t bytes);
    void (*barrier)(void *ctx);
    /* Ends every rank of the run at once with this status (after a tt_die on any of them). */
    void (*abort)(void *ctx, int status);
} tt_comm_iface;

typedef struct tt_comm {
    const tt_comm_iface *iface;
    void *ctx;
    int rank, size;
    const char *transport; /* "mpi" */
} tt_comm;

/* The run's communicator from the launcher's environment: MPI's (OMPI_COMM_WORLD_SIZE, PMI_SIZE) when more than
 * one process was started; torchrun's (WORLD_SIZE > 1) is refused as not available yet (the NCCL path). NULL for a
 * single process. Installs an exit hook so that a tt_die on one rank ends them all. */
tt_comm *tt_comm_open_from_environment(void);
/* MPI's communicator (comm_mpi.c, built with TT_HAVE_MPI): MPI_Init, then MPI_COMM_WORLD's rank and size. */
tt_comm *tt_comm_mpi_open(void);
void tt_comm_close(tt_comm *comm);

void tt_comm_all_gather(const tt_comm *comm, const void *send, void *recv, size_t bytes);
void tt_comm_barrier(const tt_comm *comm);

/* data[0 .. count) summed over the ranks, every element's terms added in rank order (rank 0's first), into every
 * rank's data (fp32 gradients). It goes in buckets of bucket_bytes: each rank sums its part of a bucket from every
 * rank's copy (all-to-all) and gathers the others' sums (all-gather). scratch holds
 * tt_comm_sum_scratch_floats(size, bucket_bytes) floats. */
size_t tt_comm_sum_scratch_floats(int size, size_t bucket_bytes);
void tt_comm_sum_in_rank_order(const tt_comm *comm, float *data, int64_t count, float *scratch, size_t bucket_bytes);
/* The same for a few doubles (the step's loss sums, token counts). */
void tt_comm_sum_doubles(const tt_comm *comm, double *values, int count);

#endif
