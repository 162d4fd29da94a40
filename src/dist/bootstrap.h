/* The TCP rendezvous of a torchrun-style launch: rank 0 listens on MASTER_PORT + 1 and hands every other rank a blob
 * (NCCL's unique id), so that no other launcher (MPI) is needed. MASTER_PORT itself is torchrun's: its agent's
 * key-value store listens there.
 *
 * The connections then stay open as the run's liveness watch: a rank that ends without saying goodbye (killed, or
 * dead on an error) closes them, and its peer sees it at once (rank 0 sees every rank; the others see rank 0, which
 * ends when it learns of a loss, so the news reaches every rank). NCCL itself would wait for the dead rank until the
 * timeout. */
#ifndef TT_DIST_BOOTSTRAP_H
#define TT_DIST_BOOTSTRAP_H

#include <stddef.h>

#include "dist/comm.h"

typedef struct tt_bootstrap tt_bootstrap;

/* Rank 0: sends blob[0 .. bytes) to each of the other size - 1 ranks as they connect. The others: connect to
 * MASTER_ADDR:MASTER_PORT + 1 (retrying while rank 0 starts) and receive it into blob. Dies naming the address after
 * timeout_seconds without every rank. Returns the open connections, watched from then on by a thread. */
tt_bootstrap *tt_bootstrap_share(const tt_launch *launch, void *blob, size_t bytes, int timeout_seconds);
/* The rank whose connection closed without a goodbye (rank 0 for the others), or -1 while every rank is there. */
int tt_bootstrap_lost_rank(const tt_bootstrap *bootstrap);
/* Says goodbye on every connection (an orderly end), stops the watch and closes them. */
void tt_bootstrap_close(tt_bootstrap *bootstrap);

#endif
