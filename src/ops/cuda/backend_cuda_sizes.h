/* What the CUDA backend's size queries are made of, shared by the backend (backend_cuda.c) and its offline size model
 * (backend_cuda_offline.c), so that both price a run with the same arithmetic. */
#ifndef TT_OPS_CUDA_BACKEND_CUDA_SIZES_H
#define TT_OPS_CUDA_BACKEND_CUDA_SIZES_H

#include <stddef.h>

#include "ops/backend.h"

/* The per-op scratch after the GEMM workspace: the largest any one op needs, given the attention forward's own. */
size_t tt_cuda_op_scratch_bytes(const tt_scratch_shape *shape, size_t attention_forward_workspace);
/* The workspace of tiertrain's own attention backward (the pipelined kernels where they run, else the flash ones). */
size_t tt_cuda_own_attention_backward_bytes(const tt_attention_shape *shape);

#endif
