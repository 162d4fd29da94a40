#include "memory/weight_stream.h"

#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/tier.h"

bool tt_weight_stream_layer_streamed(const tt_param_table *t, int64_t layer) {
    bool any = false;
    for (int i = 0; i < t->count; i++) {
        const tt_param_info *p = &t->params[i];
        if (p->layer != layer || p->kind == TT_PARAM_LORA_A || p->kind == TT_PARAM_LORA_B) continue;
        if (p->trainable) return false;
        any = true;
    }
    return any;
}

/* The element range [first, end) of layer l's frozen parameters in the frozen part. */
static void block_range(const tt_param_table *t, int64_t layer, int64_t *first, int64_t *end) {
    *first = -1;
    *end = -1;
    for (int i = 0; i < t->count; i++) {
        const tt_param_info *p = &t->params[i];
        if (p->layer != layer || p->trainable) continue;
        if (*first < 0 || p->offset < *first) *first = p->offset;
        if (p->offset + p->numel > *end) *end = p->offset + p->numel;
    }
}

size_t tt_weight_stream_block_bytes(const tt_param_table *t, int64_t layer, size_t elem) {
    if (!tt_weight_stream_layer_streamed(t, layer)) return 0;
    int64_t first, end;
    block_range(t, layer, &first, &end);
    return tt_align_up((size_t)(end - first) * elem);
}

static bool resident(const tt_param_table *t, const tt_param_info *p) {
    return !p->trainable && (p->layer < 0 || !tt_weight_stream_layer_streamed(t, p->layer));
}

size_t tt_weight_stream_resident_bytes(const tt_param_table *t, int64_t num_layers, size_t elem) {
    (void)num_layers;
    size_t bytes = 0;
    for (int i = 0; i < t->count; i++)
        if (resident(t, &t->params[i])) bytes += tt_align_up((size_t)t->params[i].numel * elem);
    return bytes;
}

void tt_weight_stream_init(tt_weight_stream *st, const tt_backend *backend, const tt_param_table *t, int64_t L,
                           size_t elem, void *host, void *ring0, void *ring1, void *resident_buffer,
                           bool tied_embeddings, tt_model_view *view) {
    memset(st, 0, sizeof(*st));
    st->backend = backend;
    st->num_layers = L;
    st->elem = elem;
    st->host = host;
    st->ring[0] = ring0;
    st->ring[1] = ring1;
    st->resident = resident_buffer;
    st->block_start = tt_xcalloc((size_t)L, sizeof(int64_t), "weight stream");
    st->block_numel = tt_xcalloc((size_t)L, sizeof(int64_t), "weight stream");
    st->ring_slot = tt_xcalloc((size_t)L, sizeof(int64_t), "weight stream");
    int64_t rank = 0;
    for (int64_t l = 0; l < L; l++) {
        st->block_start[l] = -1;
        st->ring_slot[l] = -1;
        if (!tt_weight_stream_layer_streamed(t, l)) continue;
        int64_t first, end;
        block_range(t, l, &first, &end);
        st->block_start[l] = first;
        st->block_numel[l] = end - first;
        st->ring_slot[l] = rank++ % 2;
    }
    st->ring_holds[0] = st->ring_holds[1] = -1;
    unsigned char *next_resident = resident_buffer;
    for (int i = 0; i < t->count; i++) {
        const tt_param_info *p = &t->params[i];
        if (p->trainable) continue;
        if (resident(t, p)) {
            tt_model_view_set(view, p, next_resident);
            next_resident += tt_align_up((size_t)p->numel * elem);
        } else {
            const int64_t l = p->layer;
            tt_model_view_set(view, p, (unsigned char *)st->ring[st->ring_slot[l]] + (size_t)(p->offset - st->block_start[l]) * elem);
        }
    }
    if (tied_embeddings) view->lm_head = view->embed;
}

void tt_weight_stream_free(tt_weight_stream *st) {
    free(st->block_start);
    free(st->block_numel);
    free(st->ring_slot);
    memset(st, 0, sizeof(*st));
}

void tt_weight_stream_reload(tt_weight_stream *st, const tt_param_table *t) {
    unsigned char *next_resident = st->resident;
    for (int i = 0; i < t->count; i++) {
        const tt_param_info *p = &t->params[i];
        if (!resident(t, p)) continue;
        st->backend->upload(next_resident, (unsigned char *)st->host + (size_t)p->offset * st->elem,
                            (size_t)p->numel * st->elem);
        next_resident += tt_align_up((size_t)p->numel * st->elem);
    }
    st->backend->synchronize();
    st->ring_holds[0] = st->ring_holds[1] = -1;
}

static void load(tt_weight_stream *st, int64_t l) {
    const int64_t slot = st->ring_slot[l];
    const size_t bytes = (size_t)st->block_numel[l] * st->elem;
    st->ring_loaded[slot] = st->backend->copy_async(st->ring[slot], (unsigned char *)st->host + (size_t)st->block_start[l] * st->elem,
                                                    bytes, false, 0);
    st->ring_holds[slot] = l;
    st->loaded_bytes += bytes;
}

void tt_weight_stream_need(tt_weight_stream *st, int64_t l, int64_t next) {
    if (l < 0 || l >= st->num_layers || st->ring_slot[l] < 0) return;
    const int64_t slot = st->ring_slot[l];
    if (st->ring_holds[slot] != l) load(st, l);
    st->backend->copy_wait(st->ring_loaded[slot]);
    if (next >= 0 && next < st->num_layers && st->ring_slot[next] >= 0 && st->ring_slot[next] != slot &&
        st->ring_holds[st->ring_slot[next]] != next)
        load(st, next);
}
