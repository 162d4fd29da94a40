/* A LoRA adapter in the step program: the arithmetic of one adapted linear layer, through the
 * backend table (so both backends run it), in four pieces the step calls around the base
 * layer's own forward and backward:
 *
 *   forward   u = scaling * A dropout(x)          [N, r]  (a saved slot: kept or recomputed)
 *             y += u B^T                           (after the base y = x W^T + b)
 *   backward  dB += dy^T u;  du = scaling * dy B (into u's memory);  dA += du^T dropout(x)
 *             dx += dropout'(du A)                 (after the base dx = dy W)
 *
 * which is PEFT's y = W x + b + scaling * B(A(dropout(x))). The base weight W gets no gradient
 * (it is frozen). dropout(x) = x * mask / (1 - p) with the counter-based mask of
 * src/ops/dropout_mask.h, so the backward regenerates the forward's mask instead of storing it. */
#ifndef TT_TRAIN_LORA_STEP_H
#define TT_TRAIN_LORA_STEP_H

#include <stdbool.h>
#include <stdint.h>

#include "ops/backend.h"

typedef struct tt_lora_layer {
    const void *A, *B; /* [r, in], [out, r] in the compute precision */
    void *dA, *dB;     /* their gradients, "+=" */
    int64_t in, out, rank;
    float scaling; /* lora_alpha / lora_r */
    /* Dropout of the adapter's input; drop_threshold 0: none. */
    uint32_t drop_threshold;
    float drop_multiplier; /* 1 / (1 - p) */
    uint64_t drop_seed;    /* this layer's and module's mask in this micro-step */
    void *dropout_buffer;  /* [N, in] workspace, needed only with dropout */
} tt_lora_layer;

/* u[N, r] = scaling * A dropout(x[N, in]) */
void tt_lora_forward_down(const tt_backend *b, const tt_lora_layer *lora, const void *x, void *u, int64_t N);
/* y[N, out] += u B^T */
void tt_lora_forward_up(const tt_backend *b, const tt_lora_layer *lora, const void *u, void *y, int64_t N);
/* dB += dy^T u, then u is overwritten with du = scaling * dy B, then dA += du^T dropout(x). x must still hold
 * the layer input (call before the base backward overwrites it). */
void tt_lora_backward_weights(const tt_backend *b, const tt_lora_layer *lora, const void *dy, const void *x,
                              void *u_then_du, int64_t N);
/* The same for an adapter over a fused layer's parts (Phi-3's qkv_proj: q's, k's and v's rows of B, each part's
 * lora_layer holding its rows of B and dB and its out): dB_p += dy_p^T u for every part, then u is overwritten with
 * du = scaling * sum_p dy_p B_p, then dA += du^T dropout(x). */
void tt_lora_backward_weights_parts(const tt_backend *b, const tt_lora_layer *parts, const void *const *dys, int count,
                                    const void *x, void *u_then_du, int64_t N);
/* dx[N, in] += dropout'(du A): the adapter's share of the input gradient. */
void tt_lora_backward_input(const tt_backend *b, const tt_lora_layer *lora, const void *du, void *dx, int64_t N);

#endif
