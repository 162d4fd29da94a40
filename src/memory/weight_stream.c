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
        if (p->offset + p->storage_numel > *end) *end = p->offset + p->storage_numel;
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
        if (resident(t, &t->params[i])) bytes += tt_align_up((size_t)t->params[i].storage_numel * elem);
    return bytes;
}

void tt_weight_stream_init_empty(tt_weight_stream *st, const tt_backend *backend, int64_t L, size_t elem, void *ring0,
                                 void *ring1) {
    memset(st, 0, sizeof(*st));
    st->backend = backend;
    st->num_layers = L;
    st->elem = elem;
    st->ring[0] = ring0;
    st->ring[1] = ring1;
    st->block_home = tt_xcalloc((size_t)L, sizeof(void *), "weight stream");
    st->block_numel = tt_xcalloc((size_t)L, sizeof(int64_t), "weight stream");
    st->ring_slot = tt_xcalloc((size_t)L, sizeof(int64_t), "weight stream");
    for (int64_t l = 0; l < L; l++) st->ring_slot[l] = -1;
    st->ring_holds[0] = st->ring_holds[1] = -1;
}

void tt_weight_stream_add(tt_weight_stream *st, int64_t l, void *home, int64_t numel) {
    TT_CHECK(l >= 0 && l < st->num_layers && st->ring_slot[l] < 0, "layer %lld streamed once", (long long)l);
    if (numel <= 0) return;
    st->block_home[l] = home;
    st->block_numel[l] = numel;
    st->ring_slot[l] = st->streamed++ % 2;
}

void *tt_weight_stream_buffer(const tt_weight_stream *st, int64_t l) {
    TT_CHECK(tt_weight_stream_has(st, l), "layer %lld is not streamed", (long long)l);
    return st->ring[st->ring_slot[l]];
}

bool tt_weight_stream_has(const tt_weight_stream *st, int64_t l) {
    return st->ring_slot && l >= 0 && l < st->num_layers && st->ring_slot[l] >= 0;
}

void tt_weight_stream_init(tt_weight_stream *st, const tt_backend *backend, const tt_param_table *t, int64_t L,
                           size_t elem, void *host, void *ring0, void *ring1, void *resident_buffer,
                           tt_model_view *view) {
    tt_weight_stream_init_empty(st, backend, L, elem, ring0, ring1);
    st->frozen_host = host;
    st->resident = resident_buffer;
    int64_t *block_start = tt_xcalloc((size_t)L, sizeof(int64_t), "weight stream");
    for (int64_t l = 0; l < L; l++) {
        block_start[l] = -1;
        if (!tt_weight_stream_layer_streamed(t, l)) continue;
        int64_t first, end;
        block_range(t, l, &first, &end);
        block_start[l] = first;
        tt_weight_stream_add(st, l, (unsigned char *)host + (size_t)first * elem, end - first);
    }
    unsigned char *next_resident = resident_buffer;
    for (int i = 0; i < t->count; i++) {
        const tt_param_info *p = &t->params[i];
        if (p->trainable) continue;
        if (resident(t, p)) {
            tt_model_view_set(view, p, next_resident);
            next_resident += tt_align_up((size_t)p->storage_numel * elem);
        } else {
            const int64_t l = p->layer;
            tt_model_view_set(
                view, p, (unsigned char *)tt_weight_stream_buffer(st, l) + (size_t)(p->offset - block_start[l]) * elem);
        }
    }
    free(block_start);
}

void tt_weight_stream_free(tt_weight_stream *st) {
    free(st->block_home);
    free(st->block_numel);
    free(st->ring_slot);
    memset(st, 0, sizeof(*st));
}

void tt_weight_stream_reload(tt_weight_stream *st, const tt_param_table *t) {
    unsigned char *next_resident = st->resident;
    for (int i = 0; i < t->count; i++) {
        const tt_param_info *p = &t->params[i];
        if (!resident(t, p)) continue;
        tt_backend_upload(st->backend, next_resident, (unsigned char *)st->frozen_host + (size_t)p->offset * st->elem,
                          (size_t)p->storage_numel * st->elem);
        next_resident += tt_align_up((size_t)p->storage_numel * st->elem);
    }
    tt_backend_synchronize(st->backend);
    tt_weight_stream_forget(st);
}

void tt_weight_stream_forget(tt_weight_stream *st) { st->ring_holds[0] = st->ring_holds[1] = -1; }

static void load(tt_weight_stream *st, int64_t l) {
    const int64_t slot = st->ring_slot[l];
    const size_t bytes = (size_t)st->block_numel[l] * st->elem;
    st->ring_loaded[slot] =
        tt_backend_copy_async(st->backend, st->ring[slot], st->block_home[l], bytes, false, st->last_store);
    st->ring_holds[slot] = l;
    st->loaded_bytes += bytes;
}

void tt_weight_stream_need(tt_weight_stream *st, int64_t l, int64_t next) {
    if (!tt_weight_stream_has(st, l)) return;
    const int64_t slot = st->ring_slot[l];
    if (st->ring_holds[slot] != l) load(st, l);
    tt_backend_copy_wait(st->backend, st->ring_loaded[slot]);
    if (tt_weight_stream_has(st, next) && st->ring_slot[next] != slot && st->ring_holds[st->ring_slot[next]] != next)
        load(st, next);
}

void tt_weight_stream_store(tt_weight_stream *st, int64_t l) {
    const int64_t slot = st->ring_slot[l];
    TT_CHECK(tt_weight_stream_has(st, l) && st->ring_holds[slot] == l, "layer %lld is in its buffer", (long long)l);
    const size_t bytes = (size_t)st->block_numel[l] * st->elem;
    st->last_store = tt_backend_copy_async(st->backend, st->block_home[l], st->ring[slot], bytes, true, 0);
    st->stored_bytes += bytes;
}

void tt_weight_stream_hook(void *ctx, tt_hook_point point, int64_t unit, bool train) {
    tt_weight_stream *st = ctx;
    const int64_t l = unit - 1; /* decoder layer l is unit l + 1 */
    if (l < 0 || l >= st->num_layers) return;
    if (point == TT_HOOK_BEFORE_FORWARD) tt_weight_stream_need(st, l, l + 1);
    if (point == TT_HOOK_BEFORE_BACKWARD) tt_weight_stream_need(st, l, l - 1);
}

void tt_weight_stream_wait_stored(const tt_weight_stream *stream) {
    if (stream->last_store) tt_backend_copy_host_wait(stream->backend, stream->last_store);
}
