/* The processes of one data-parallel run: each trains a replica of the model on its share of every step's
 * sequences, and they meet only in the collectives below. A handle as the backend's, {iface, ctx}: MPI on the CPU
 * backend (`mpirun -np N tiertrain train run.yaml`), NCCL on GPUs (a torchrun-style launch: RANK, WORLD_SIZE,
 * LOCAL_RANK, MASTER_ADDR, MASTER_PORT); a single process has no communicator at all (NULL).
 *
 * all_gather, all_to_all, gather and broadcast move the compute tier's memory (host memory on the CPU path, GPU
 * memory under NCCL); all_gather_host and barrier move host memory on either. Ranks call them in the same order.
 * Those of host memory are done when they return; those of the compute tier are issued in the order of the
 * backend's side queue (ops/backend.h: MPI's are done at once, NCCL's run on the side stream, use_stream): the
 * functions below that take a backend are called between tt_backend_side_begin and tt_backend_side_end, and the
 * compute stream sees their results after tt_backend_side_wait for the section's ticket.
 * Sums are never done by the transport (whose reduction order is its own): tt_comm_reduce_scatter_in_rank_order
 * brings each element's values from every rank to one rank and adds them in rank order, so the sums are the same
 * bits whichever rank adds them, run after run. */
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
    /* recv[r * bytes ..] on rank root = rank r's send, for every r (recv: size x bytes, on root only), in the compute
     * tier's memory. */
    void (*gather)(void *ctx, const void *send, void *recv, size_t bytes, int root);
    /* data[0 .. bytes) of rank root into every rank's data, in the compute tier's memory. */
    void (*broadcast)(void *ctx, void *data, size_t bytes, int root);
    /* all_gather of host memory. */
    void (*all_gather_host)(void *ctx, const void *send, void *recv, size_t bytes);
    void (*barrier)(void *ctx);
    /* Ends every rank of the run at once with this status (after a tt_die on any of them). */
    void (*abort)(void *ctx, int status);
    /* How long a collective may wait for the other ranks before this rank ends the run (ddp_timeout); NULL where the
     * launcher ends every rank when one dies (mpirun). */
    void (*set_timeout)(void *ctx, int seconds);
    /* A communicator of the ranks that pass the same color, ranked by key (every rank calls it); closed with
     * tt_comm_close, before its parent. */
    struct tt_comm *(*split)(void *ctx, int color, int key);
    /* The stream the compute tier's collectives issue on from now (the backend's side queue, a cudaStream_t); NULL
     * where they are done when they return (MPI). */
    void (*use_stream)(void *ctx, void *stream);
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
/* all_gather_host moves this many bytes a rank without allocating (a step's sums, zero_stage 1's norm partials). */
#define TT_COMM_HOST_GATHER_BYTES ((size_t)4096)
/* ddp_timeout's default, as torch.distributed's: 30 minutes. */
#define TT_COMM_DEFAULT_TIMEOUT 1800

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
/* data (compute tier) of rank root into every rank's (zero_stage 3's weights of a unit). */
void tt_comm_broadcast(const tt_comm *comm, const tt_backend *backend, void *data, size_t bytes, int root);
/* host[0 .. bytes) of rank root into every rank's host, through the compute tier's scratch (bucket_bytes a round;
 * the copies to and from the host wait for the side queue, so the other ranks' hosts hold it when this returns). */
void tt_comm_broadcast_host(const tt_comm *comm, const tt_backend *backend, void *host, size_t bytes, int root,
                            float *scratch, size_t bucket_bytes);
/* The group of ranks that pass the same color (sequence parallel's), ranked by key; every rank calls it. */
tt_comm *tt_comm_split(const tt_comm *comm, int color, int key);
/* The compute tier's collectives from now issue on the backend's side queue (tt_backend_side_stream). */
void tt_comm_use_side_queue(const tt_comm *comm, const tt_backend *backend);
/* ... and from now on the transport's own stream again (before the backend ends). */
void tt_comm_use_own_queue(const tt_comm *comm);
/* ddp_timeout: a collective that waits longer for the other ranks ends the run (where the transport can tell). */
void tt_comm_set_timeout(const tt_comm *comm, int seconds);

/* Ranges: rank r's part of a flat array is [bounds[r], bounds[r + 1]) (bounds: size + 1 increasing element indices;
 * a range may be empty). Both collectives run in rounds of at most `chunk` elements of every rank's range
 * (chunk = bucket_bytes / 4 / size), through scratch: tt_comm_scratch_floats(size, bucket_bytes) floats in the
 * compute tier. */
size_t tt_comm_scratch_floats(int size, size_t bucket_bytes);
/* The bucket data parallel moves data_bytes of gradients in: 16 MiB, or all of them when fewer (at least a float a
 * rank); and the scratch that takes, in bytes. */
#define TT_COMM_BUCKET_BYTES ((size_t)16 << 20)
size_t tt_comm_bucket_bytes(int size, size_t data_bytes);
size_t tt_comm_scratch_bytes(int size, size_t data_bytes);
/* data (fp32 gradients in the compute tier, the whole flat array on every rank) summed over the ranks within this
 * rank's range, each element's terms added in rank order (rank 0's first): each rank sends every other rank its
 * values in that rank's range (all-to-all) and adds what it receives (the backend's sum_parts). The rest of data is
 * left as it was. */
void tt_comm_reduce_scatter_in_rank_order(const tt_comm *comm, const tt_backend *backend, float *data,
                                          const int64_t *bounds, float *scratch, size_t bucket_bytes);
/* data[0 .. count) (fp32 gradients in the compute tier) summed over the ranks into rank root's data, each element's
 * terms added in rank order (the same bits as the reduce-scatter's); the other ranks' data is left as it was. */
void tt_comm_reduce_in_rank_order(const tt_comm *comm, const tt_backend *backend, float *data, int64_t count, int root,
                                  float *scratch, size_t bucket_bytes);
/* Every rank's range of data (elements of element_bytes <= 4) copied into every other rank's data (all-gather).
 * data is in the compute tier, or host memory when on_host (it then passes through the compute tier's scratch). */
void tt_comm_all_gather_ranges(const tt_comm *comm, const tt_backend *backend, void *data, size_t element_bytes,
                               bool on_host, const int64_t *bounds, float *scratch, size_t bucket_bytes);
/* bounds[size + 1] splitting count elements into equal ranges (the last may be short). */
void tt_comm_equal_bounds(int size, int64_t count, int64_t *bounds);
/* The same for count (at most TT_COMM_MAX_SUMS) host doubles: the step's loss sums and token counts. */
void tt_comm_sum_doubles(const tt_comm *comm, double *values, int count);

#endif
