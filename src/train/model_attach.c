#include "train/model_attach.h"

#include <string.h>

#include "core/check.h"
#include "train/optimizer.h"
#include "train/optimizer_offload.h"

/* cpu_offloading_weights: the offloaded layers' homes (the optimizer's host buffers for units of its host share, else
 * a host buffer of their own), their stream through the two compute-tier buffers inside the trainable weights, and
 * the weight views of every trainable element at or after the offloaded range moved to where it now lives. */
static void attach_weight_offload(tt_model_state *s) {
    const int64_t K = s->plan.offloaded_weight_layers, L = s->config.num_layers, N = s->params.trainable_numel;
    if (K <= 0) return;
    const tt_size_table *t = &s->sizes;
    const size_t elem = s->plan.weight_bytes;
    unsigned char *buffers =
        (unsigned char *)s->trainable_weights + tt_align_up((size_t)t->weight_offload_first * elem);
    tt_weight_stream_init_empty(&s->weight_offload, s->backend, L, elem, buffers, buffers + t->weight_offload_slot);
    if (t->host_weight_home) {
        s->weight_home = tt_arena_push(&s->host, t->host_weight_home, tt_trainable_weight_class(&s->params),
                                       "offloaded layer weights");
        if (!s->measuring) memset(s->weight_home, 0, t->host_weight_home);
    }
    const tt_optimizer_offload *o = s->optimizer_offload;
    for (int64_t l = 0; l < K; l++) {
        const int64_t lo = s->unit_start[l + 1], hi = s->unit_start[l + 2];
        void *home = o && lo >= o->host_start
                         ? tt_optimizer_offload_weights_home(o, lo)
                         : (unsigned char *)s->weight_home + (size_t)(lo - t->weight_offload_first) * elem;
        tt_weight_stream_add(&s->weight_offload, l, home, hi - lo);
        if (hi > lo)
            tt_model_view_bind_range(&s->w, &s->params, lo, hi, tt_weight_stream_buffer(&s->weight_offload, l), elem);
    }
    tt_model_view_bind_range(&s->w, &s->params, t->weight_offload_end, N,
                             tt_model_trainable_weights_at(s, t->weight_offload_end), elem);
    tt_model_state_add_hook(s, (tt_unit_hook){.call = tt_weight_stream_hook, .ctx = &s->weight_offload});
}

void tt_model_state_attach_optimizer(tt_model_state *s) {
    s->optimizer_offload = tt_optimizer_offload_create(s, 0);
    if (s->optimizer_offload)
        tt_model_state_add_hook(s, (tt_unit_hook){.call = tt_optimizer_offload_hook, .ctx = s->optimizer_offload});
    attach_weight_offload(s);
    tt_adamw_8bit_attach(s);
    tt_adamw_pieces_build(s);
}

void tt_model_state_detach_optimizer(tt_model_state *s) {
    tt_optimizer_offload_free(s->optimizer_offload);
    s->optimizer_offload = NULL;
    tt_weight_stream_free(&s->weight_offload);
    tt_adamw_pieces_free(s);
    s->adamw_pieces = NULL;
    tt_adamw_8bit_detach(s);
}
