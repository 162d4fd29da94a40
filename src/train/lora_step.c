#include "train/lora_step.h"

/* The adapter's input: x itself, or dropout(x) in the workspace. */
static const void *adapter_input(const tt_backend *b, const tt_lora_layer *lora, const void *x, int64_t N) {
    if (!lora->drop_threshold) return x;
    b->dropout_scale(lora->dropout_buffer, x, N * lora->in, lora->drop_multiplier, lora->drop_threshold,
                     lora->drop_seed);
    return lora->dropout_buffer;
}

void tt_lora_forward_down(const tt_backend *b, const tt_lora_layer *lora, const void *x, void *u, int64_t N) {
    b->linear_forward(u, adapter_input(b, lora, x, N), lora->A, NULL, NULL, N, lora->in, lora->rank);
    b->dropout_scale(u, u, N * lora->rank, lora->scaling, 0, 0);
}

void tt_lora_forward_up(const tt_backend *b, const tt_lora_layer *lora, const void *u, void *y, int64_t N) {
    b->linear_forward(y, u, lora->B, NULL, y, N, lora->rank, lora->out);
}

void tt_lora_backward_weights(const tt_backend *b, const tt_lora_layer *lora, const void *dy, const void *x,
                              void *u_then_du, int64_t N) {
    /* dB first: the same call then overwrites u (dead once dB has it) with dy B */
    b->linear_backward(u_then_du, lora->dB, NULL, dy, u_then_du, lora->B, N, lora->rank, lora->out, false);
    b->dropout_scale(u_then_du, u_then_du, N * lora->rank, lora->scaling, 0, 0);
    b->linear_backward(NULL, lora->dA, NULL, u_then_du, adapter_input(b, lora, x, N), lora->A, N, lora->in, lora->rank,
                       false);
}

void tt_lora_backward_input(const tt_backend *b, const tt_lora_layer *lora, const void *du, void *dx, int64_t N) {
    if (!lora->drop_threshold) {
        b->linear_backward(dx, NULL, NULL, du, NULL, lora->A, N, lora->in, lora->rank, true);
        return;
    }
    /* d dropout(x) / dx is the same mask and scale: the workspace gets du A, masked, then joins dx */
    b->linear_backward(lora->dropout_buffer, NULL, NULL, du, NULL, lora->A, N, lora->in, lora->rank, false);
    b->dropout_scale(lora->dropout_buffer, lora->dropout_buffer, N * lora->in, lora->drop_multiplier,
                     lora->drop_threshold, lora->drop_seed);
    b->add(dx, dx, lora->dropout_buffer, N * lora->in);
}
