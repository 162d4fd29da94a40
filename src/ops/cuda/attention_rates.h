/* The attention kernels' measured rates, by cell, for attn_implementation: auto: which forward and which backward a
 * shape runs is read from this table (attention_rates.c), measured by the speed tests on the device, not from one
 * threshold by length. Cells: query heads (16 or 32; Hkv 8, head_dim 128, batch 1) by sequence length (4k to 128k);
 * a shape takes the cell of its nearest head count and the longest length not above its own (4k below it). */
#ifndef TT_OPS_CUDA_ATTENTION_RATES_H
#define TT_OPS_CUDA_ATTENTION_RATES_H

#include <stdbool.h>

#include "ops/backend.h"

/* TFLOP/s of one cell (forward: 4 x visible pairs x hd x Hq; backward counted as 2.5 forwards). */
typedef struct tt_attention_rates {
    long long seq_len, num_heads;
    double own_forward;           /* tiertrain's pipelined forward */
    double cudnn_forward;         /* cuDNN's fused forward */
    double own_backward;          /* tiertrain's pipelined backward, dQ in its own kernel (deterministic) */
    double cudnn_atomic_backward; /* cuDNN's backward adding dQ with atomics (deterministic: false) */
} tt_attention_rates;

/* The cell a shape takes. */
const tt_attention_rates *tt_attention_rates_for(const tt_attention_shape *shape);
/* Whether tiertrain's pipelined forward is faster than cuDNN's at the shape's cell. */
bool tt_attention_own_forward_faster(const tt_attention_shape *shape);
/* Whether, with deterministic: false, tiertrain's pipelined backward (with the faster forward of the cell) takes less
 * time than cuDNN's forward and atomic backward: only at the shortest lengths. */
bool tt_attention_own_backward_faster_than_atomic(const tt_attention_shape *shape);

#endif
