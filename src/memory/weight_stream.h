/* Decoder layers' weights that live in host memory and are streamed to the compute tier one layer
 * at a time through two staging buffers, so the compute tier holds at most two of those layers.
 * Two uses: layer_offloading (the frozen weights of frozen layers; the frozen parameters outside
 * streamed layers, such as the embedding, final norm, LM head and frozen parts of layers that
 * also train, stay resident) and Megatron's cpu_offloading_weights (the trainable weights of the
 * first layers, whose updates go back to their host copy: tt_weight_stream_store).
 *
 * Each streamed layer's weights are one block, in the compute precision, at a host address of
 * their own (their home). Schedule: need(l, next) makes the compute stream wait for layer l
 * (copying it first if its buffer holds another layer) and starts copying `next` (the layer after
 * l in the forward, before it in the backward) into the other buffer, which the layer before l
 * used: every op issued so far, so the copy engine orders the copy after it. A buffer that still
 * holds the wanted layer is not copied again (the forward's last two layers are the backward's
 * first two). A copy into a buffer, or from a home, waits for the last store (a buffer back to
 * its home), so neither overtakes it. */
#ifndef TT_MEMORY_WEIGHT_STREAM_H
#define TT_MEMORY_WEIGHT_STREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "memory/unit_hooks.h"
#include "model/params.h"
#include "ops/backend.h"

typedef struct tt_weight_stream {
    const tt_backend *backend;
    int64_t num_layers;      /* L */
    size_t elem;             /* bytes per element of the compute copy */
    void **block_home;       /* [L] layer l's block in host memory, NULL when l is not streamed */
    int64_t *block_numel;    /* [L] */
    int64_t *ring_slot;      /* [L] staging buffer of a streamed layer (its rank among streamed layers % 2), or -1 */
    int64_t streamed;        /* how many layers are */
    void *ring[2];           /* compute tier, each the largest block */
    int64_t ring_holds[2];   /* the layer each buffer holds, -1 when none */
    uint64_t ring_loaded[2]; /* the copy that filled each buffer */
    uint64_t last_store;     /* the latest copy of a buffer back to a home, 0 when none */
    void *resident;          /* layer_offloading: the compute tier's frozen parameters outside streamed layers */
    void *frozen_host;       /* layer_offloading: the frozen part of the flat layout in host memory */
    size_t loaded_bytes, stored_bytes; /* copied so far, each way */
} tt_weight_stream;

/* The layers whose every base parameter is frozen (LoRA: all), which layer_offloading streams. */
bool tt_weight_stream_layer_streamed(const tt_param_table *params, int64_t layer);
/* Bytes of layer l's frozen block (0 when not streamed) and of the frozen parameters that stay
 * resident, in elements of elem bytes, rounded as the arena rounds. */
size_t tt_weight_stream_block_bytes(const tt_param_table *params, int64_t layer, size_t elem);
size_t tt_weight_stream_resident_bytes(const tt_param_table *params, int64_t num_layers, size_t elem);

/* layer_offloading's stream. host: the pinned copy (params->trainable_start elements); ring and resident:
 * compute-tier buffers sized by the functions above. Points the frozen entries of view at the ring and the
 * resident buffer (a tied LM head follows the embedding: tt_model_view_set). */
void tt_weight_stream_init(tt_weight_stream *stream, const tt_backend *backend, const tt_param_table *params,
                           int64_t num_layers, size_t elem, void *host, void *ring0, void *ring1, void *resident,
                           tt_model_view *view);
/* A stream of no layers yet, with its two compute-tier buffers; tt_weight_stream_add adds layers in increasing
 * order, each with its home and size (numel 0: not streamed). */
void tt_weight_stream_init_empty(tt_weight_stream *stream, const tt_backend *backend, int64_t num_layers, size_t elem,
                                 void *ring0, void *ring1);
void tt_weight_stream_add(tt_weight_stream *stream, int64_t layer, void *home, int64_t numel);
/* The compute-tier buffer layer l is streamed into (valid after tt_weight_stream_need(l, ...)). */
void *tt_weight_stream_buffer(const tt_weight_stream *stream, int64_t layer);
bool tt_weight_stream_has(const tt_weight_stream *stream, int64_t layer);
void tt_weight_stream_free(tt_weight_stream *stream);
/* layer_offloading, after the host copy changed (weights loaded): refresh the resident parameters and
 * forget what the buffers hold. */
void tt_weight_stream_reload(tt_weight_stream *stream, const tt_param_table *params);
/* The homes changed (an update written there, weights loaded): what the buffers hold is stale. */
void tt_weight_stream_forget(tt_weight_stream *stream);
/* Before layer l's compute: see above. next < 0 or a layer not streamed: no prefetch. */
void tt_weight_stream_need(tt_weight_stream *stream, int64_t l, int64_t next);
/* The stream's part in a step (unit_hooks.h): before decoder layer l's forward need(l, l + 1), before its backward
 * need(l, l - 1). ctx: the stream. */
void tt_weight_stream_hook(void *ctx, tt_hook_point point, int64_t unit, bool train);
/* Layer l's buffer (changed by the ops issued so far: an update) goes back to its home, after those ops. */
void tt_weight_stream_store(tt_weight_stream *stream, int64_t l);
/* Blocks the calling thread until the stores issued so far are in their homes (the host reads them). */
void tt_weight_stream_wait_stored(const tt_weight_stream *stream);

#endif
