/* The TCP rendezvous of a torchrun-style launch: rank 0 listens on MASTER_PORT + 1 and hands every other rank a blob
 * (NCCL's unique id), so that no other launcher (MPI) is needed. MASTER_PORT itself is torchrun's: its agent's
 * key-value store listens there. */
#ifndef TT_DIST_BOOTSTRAP_H
#define TT_DIST_BOOTSTRAP_H

#include <stddef.h>

#include "dist/comm.h"

/* Rank 0: sends blob[0 .. bytes) to each of the other size - 1 ranks as they connect. The others: connect to
 * MASTER_ADDR:MASTER_PORT + 1 (retrying while rank 0 starts) and receive it into blob. Dies naming the address after
 * timeout_seconds without every rank. */
void tt_bootstrap_share(const tt_launch *launch, void *blob, size_t bytes, int timeout_seconds);

#endif
