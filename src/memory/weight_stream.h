/* layer_offloading: the frozen weights of decoder layers live in pinned host memory and are
 * streamed to the compute tier one layer at a time through two staging buffers, so the GPU
 * holds at most two layers of frozen weights. The frozen parameters outside streamed layers
 * (embedding, final norm, LM head, frozen parts of layers that also train) stay resident.
 *
 * The host copy is the frozen part of the flat parameter layout, in the compute precision; a
 * streamed layer's frozen parameters are neighbours there (the table orders them by layer), so a
 * layer moves in one copy. Schedule: need(l, next) makes the compute stream wait for layer l
 * (copying it first if its buffer holds another layer) and starts copying `next` (the layer after
 * l in the forward, before it in the backward) into the other buffer, which the layer before l
 * used: every op issued so far, so the copy engine orders the copy after it. A buffer that still
 * holds the wanted layer is not copied again (the forward's last two layers are the backward's
 * first two). */
#ifndef TT_MEMORY_WEIGHT_STREAM_H
#define TT_MEMORY_WEIGHT_STREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/params.h"
#include "ops/backend.h"

typedef struct tt_weight_stream {
    const tt_backend *backend;
    int64_t num_layers;      /* L */
    size_t elem;             /* bytes per element of the compute copy */
    void *host;              /* [params.trainable_start] the frozen weights, pinned: the canonical copy */
    int64_t *block_start;    /* [L] first element of layer l's frozen block in the host copy, -1 when not streamed */
    int64_t *block_numel;    /* [L] */
    int64_t *ring_slot;      /* [L] staging buffer of a streamed layer (its rank among streamed layers % 2) */
    void *ring[2];           /* compute tier, each the largest block */
    int64_t ring_holds[2];   /* the layer each buffer holds, -1 when none */
    uint64_t ring_loaded[2]; /* the copy that filled each buffer */
    void *resident;          /* compute tier: the other frozen parameters, compact in table order */
    size_t loaded_bytes;     /* copied so far */
} tt_weight_stream;

/* The layers whose every base parameter is frozen (LoRA: all), which layer_offloading streams. */
bool tt_weight_stream_layer_streamed(const tt_param_table *params, int64_t layer);
/* Bytes of layer l's frozen block (0 when not streamed) and of the frozen parameters that stay
 * resident, in elements of elem bytes, rounded as the arena rounds. */
size_t tt_weight_stream_block_bytes(const tt_param_table *params, int64_t layer, size_t elem);
size_t tt_weight_stream_resident_bytes(const tt_param_table *params, int64_t num_layers, size_t elem);

/* host: the pinned copy (params->trainable_start elements); ring and resident: compute-tier
 * buffers sized by the functions above. Points the frozen entries of view at the ring and the
 * resident buffer. */
void tt_weight_stream_init(tt_weight_stream *stream, const tt_backend *backend, const tt_param_table *params,
                           int64_t num_layers, size_t elem, void *host, void *ring0, void *ring1, void *resident,
                           bool tied_embeddings, tt_model_view *view);
void tt_weight_stream_free(tt_weight_stream *stream);
/* After the host copy changed (weights loaded): refresh the resident parameters and forget what
 * the buffers hold. */
void tt_weight_stream_reload(tt_weight_stream *stream, const tt_param_table *params);
/* Before layer l's compute: see above. next < 0 or a layer not streamed: no prefetch. */
void tt_weight_stream_need(tt_weight_stream *stream, int64_t l, int64_t next);

#endif
