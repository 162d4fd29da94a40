#include "train/lora_step.h"

/* The adapter's input: x itself, or dropout(x) in the workspace. */
static const void *adapter_input(const tt_backend *b, const tt_lora_layer *lora, const void *x, int64_t N) {
    if (!lora->drop_threshold) return x;
    tt_backend_dropout_scale(b, lora->dropout_buffer, x, N * lora->in, lora->drop_multiplier, lora->drop_threshold,
                             lora->drop_seed);
    return lora->dropout_buffer;
}

void tt_lora_forward_down(const tt_backend *b, const tt_lora_layer *lora, const void *x, void *u, int64_t N) {
    tt_backend_linear_forward(b, u, adapter_input(b, lora, x, N), lora->A, NULL, NULL, N, lora->in, lora->rank);
    tt_backend_dropout_scale(b, u, u, N * lora->rank, lora->scaling, 0, 0);
}

void tt_lora_forward_up(const tt_backend *b, const tt_lora_layer *lora, const void *u, void *y, int64_t N) {
    tt_backend_linear_forward(b, y, u, lora->B, NULL, y, N, lora->rank, lora->out);
}

void tt_lora_backward_weights(const tt_backend *b, const tt_lora_layer *lora, const void *dy, const void *x,
                              void *u_then_du, int64_t N) {
    /* dB first: the same call then overwrites u (dead once dB has it) with dy B */
    tt_backend_linear_backward(b, u_then_du, lora->dB, NULL, dy, u_then_du, lora->B, N, lora->rank, lora->out, false);
    tt_backend_dropout_scale(b, u_then_du, u_then_du, N * lora->rank, lora->scaling, 0, 0);
    tt_backend_linear_backward(b, NULL, lora->dA, NULL, u_then_du, adapter_input(b, lora, x, N), lora->A, N, lora->in,
                               lora->rank, false);
}

void tt_lora_backward_weights_parts(const tt_backend *b, const tt_lora_layer *parts, const void *const *dys, int count,
                                    const void *x, void *u_then_du, int64_t N) {
    /* every part's dB while u is intact, then du = sum of the parts' dy B, u's memory taking it */
    for (int p = 0; p < count; p++)
        tt_backend_linear_backward(b, NULL, parts[p].dB, NULL, dys[p], u_then_du, parts[p].B, N, parts[p].rank,
                                   parts[p].out, false);
    for (int p = 0; p < count; p++)
        tt_backend_linear_backward(b, u_then_du, NULL, NULL, dys[p], NULL, parts[p].B, N, parts[p].rank, parts[p].out,
                                   p > 0);
    const tt_lora_layer *lora = &parts[0];
    tt_backend_dropout_scale(b, u_then_du, u_then_du, N * lora->rank, lora->scaling, 0, 0);
    tt_backend_linear_backward(b, NULL, lora->dA, NULL, u_then_du, adapter_input(b, lora, x, N), lora->A, N, lora->in,
                               lora->rank, false);
}

void tt_lora_backward_input(const tt_backend *b, const tt_lora_layer *lora, const void *du, void *dx, int64_t N) {
    if (!lora->drop_threshold) {
        tt_backend_linear_backward(b, dx, NULL, NULL, du, NULL, lora->A, N, lora->in, lora->rank, true);
        return;
    }
    /* d dropout(x) / dx is the same mask and scale: the workspace gets du A, masked, then joins dx */
    tt_backend_linear_backward(b, lora->dropout_buffer, NULL, NULL, du, NULL, lora->A, N, lora->in, lora->rank, false);
    tt_backend_dropout_scale(b, lora->dropout_buffer, lora->dropout_buffer, N * lora->in, lora->drop_multiplier,
                             lora->drop_threshold, lora->drop_seed);
    tt_backend_add(b, dx, dx, lora->dropout_buffer, N * lora->in);
}
