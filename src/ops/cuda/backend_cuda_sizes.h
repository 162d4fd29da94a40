/* What the CUDA backend's size queries are made of, shared by the backend (backend_cuda.c) and its offline size model
 * (backend_cuda_offline.c), so that both price a run with the same arithmetic. */
#ifndef TT_OPS_CUDA_BACKEND_CUDA_SIZES_H
#define TT_OPS_CUDA_BACKEND_CUDA_SIZES_H

#include <stdbool.h>
#include <stddef.h>

#include "ops/backend.h"

/* attn_implementation auto takes tiertrain's pipelined backward where those kernels run at head_dim 128 (the shape
 * they were measured at against cuDNN's), with deterministic: false only where its cell of the measured table
 * (attention_rates.h) beats cuDNN's atomic backward; and its pipelined forward too where the cell says it is the
 * faster (else cuDNN's). backend_cuda.c: resolve_attention. */
bool tt_cuda_auto_takes_own_backward(tt_attention_kind requested, bool nondeterministic,
                                     const tt_attention_shape *shape);
bool tt_cuda_auto_takes_own_forward(tt_attention_kind requested, bool nondeterministic,
                                    const tt_attention_shape *shape);

/* The per-op scratch after the GEMM workspace: the largest any one op needs, given the attention forward's own. */
size_t tt_cuda_op_scratch_bytes(const tt_scratch_shape *shape, size_t attention_forward_workspace);
/* The workspace of tiertrain's own attention backward (the pipelined kernels where they run, else the flash ones). */
size_t tt_cuda_own_attention_backward_bytes(const tt_attention_shape *shape);

#endif
