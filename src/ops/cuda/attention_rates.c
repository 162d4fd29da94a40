/* The measured cells of attention_rates.h.
 *
 * One NVIDIA H200, 2026-11-29, one call at 12e8839: `test_gpu_attention . --speed T:Hq,...` (the pipelined kernels)
 * and `test_gpu_cudnn_attention --speed T:0:1:Hq,...` (cuDNN 9.14's forward and atomic backward), B 1, Hkv 8,
 * hd 128, causal, median of 10 calls after 2 warm-ups (4 after 1 at 128k); docs/benchmarks.md has the table. Where
 * cuDNN's deterministic backward would run instead, tiertrain's pipelined one is faster at every cell (issue 15), so
 * deterministic: true always takes the own backward at these shapes; the cells decide its forward, and with
 * deterministic: false the backward too. */
#include "ops/cuda/attention_rates.h"

#include <stdlib.h>

/* clang-format off */
static const tt_attention_rates cells[] = {
    /*    T   Hq  own fwd  cuDNN fwd  own bwd  cuDNN atomic bwd */
    {  4096, 16,  455.0,   444.0,     452.8,   375.0},
    {  8192, 16,  629.9,   566.6,     529.7,   490.5},
    { 16384, 16,  662.9,   638.5,     504.7,   583.4},
    { 32768, 16,  618.0,   643.3,     510.7,   543.4},
    { 65536, 16,  608.2,   617.5,     506.6,   547.3},
    {131072, 16,  615.3,   590.1,     507.0,   546.7},
    {  4096, 32,  566.5,   520.4,     488.3,   425.6},
    {  8192, 32,  636.6,   620.6,     507.1,   520.7},
    { 16384, 32,  627.9,   665.2,     499.9,   521.4},
    { 32768, 32,  599.4,   617.6,     510.3,   540.9},
    { 65536, 32,  613.6,   622.8,     507.1,   547.7},
    {131072, 32,  617.3,   585.3,     507.3,   545.1},
};
/* clang-format on */

const tt_attention_rates *tt_attention_rates_for(const tt_attention_shape *shape) {
    const long long heads = shape->num_heads < 24 ? 16 : 32;
    const tt_attention_rates *best = NULL;
    for (size_t i = 0; i < sizeof cells / sizeof cells[0]; i++) {
        const tt_attention_rates *c = &cells[i];
        if (c->num_heads != heads) continue;
        if (!best || (c->seq_len <= shape->seq_len && c->seq_len > best->seq_len)) best = c;
    }
    return best;
}

bool tt_attention_own_forward_faster(const tt_attention_shape *shape) {
    const tt_attention_rates *c = tt_attention_rates_for(shape);
    return c->own_forward > c->cudnn_forward;
}

bool tt_attention_own_backward_faster_than_atomic(const tt_attention_shape *shape) {
    const tt_attention_rates *c = tt_attention_rates_for(shape);
    const double forward = c->own_forward > c->cudnn_forward ? c->own_forward : c->cudnn_forward;
    /* time per forward FLOP: one forward and a backward of 2.5 forwards */
    const double own = 1.0 / forward + 2.5 / c->own_backward;
    const double cudnn = 1.0 / c->cudnn_forward + 2.5 / c->cudnn_atomic_backward;
    return own <= cudnn;
}
