/* The GPUs' transport of data parallel (NCCL), built with the CUDA backend. */
#ifndef TT_OPS_CUDA_COMM_NCCL_H
#define TT_OPS_CUDA_COMM_NCCL_H

#include "dist/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One process of a torchrun-style launch on GPU `device`: rank 0 makes NCCL's id and hands it to the others over
 * the TCP bootstrap (MASTER_ADDR:MASTER_PORT), then every rank joins the NCCL communicator. */
tt_comm *tt_comm_nccl_open(const tt_launch *launch, int device);

#ifdef __cplusplus
}
#endif

#endif
