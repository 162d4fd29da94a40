/* Generation's forward (tiertrain inference): the model run over the new tokens of one sequence at a time, each layer's
 * keys and values kept on the compute tier so that later tokens attend to them instead of recomputing them. The
 * layers run the step program's blocks (train/block.h) with every slot computed, so a prompt's forward (its prefill,
 * one pass over all its tokens) has the arithmetic of training's forward, except that the attention appends the new
 * keys and values to the cache and reads them from there (the backend's attention_cached) and RoPE takes the tokens'
 * positions in the sequence. Decoding is the same forward over one token.
 *
 * The model state it runs on is one built for generation (micro_batch 1, sequence_len = the cache's capacity, no
 * packing, sequence parallel, tiled MLP or activation offload): its arena holds a forward of up to capacity tokens. */
#ifndef TT_TRAIN_KV_CACHE_H
#define TT_TRAIN_KV_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "train/step.h"

typedef struct tt_kv_cache {
    int64_t capacity; /* positions it holds: the state's sequence_len */
    int64_t length;   /* positions filled; the next token's position */
    int64_t kv_width; /* Hkv * hd: a position's keys (or values) in one layer */
    size_t row_bytes; /* kv_width elements of the compute precision */
    /* compute tier, one block: layer l's keys [capacity, kv_width] at 2 l, its values at 2 l + 1 */
    void *block;
    /* LongRoPE whose long factors the context reaches (else NULL, and the state's tables, made for the whole context,
     * are the ones every forward takes): the host tables of every position [capacity, rotary_dim / 2], by table and by
     * factors (short [0], long [1]), from which a forward puts its tokens' rows of the ones transformers takes for them
     * into the state's tables (long ones once a position passes original_max_position_embeddings) */
    float *host_cos[TT_ROPE_TABLES][2], *host_sin[TT_ROPE_TABLES][2];
    int rope_tables;
    int32_t *history;       /* [capacity] the ids of the positions filled (a LongRoPE switch runs them again) */
    float *host_logits;     /* [V] */
    uint16_t *host_staging; /* [V] the logits as the compute tier holds them (bf16), or NULL on an fp32 backend */
} tt_kv_cache;

/* A cache of the state's sequence_len positions, empty. Checks that the state is one for generation. */
void tt_kv_cache_init(tt_kv_cache *cache, const tt_model_state *state);
void tt_kv_cache_free(tt_kv_cache *cache, const tt_model_state *state);
/* Empties it (a new sequence). */
static inline void tt_kv_cache_reset(tt_kv_cache *cache) { cache->length = 0; }

/* Runs the model over ids[0 .. n) (host) at positions length .. length + n - 1, appends their keys and values, and
 * returns the logits of the last one, fp32 on the host ([vocab_size], owned by the cache, valid until the next call):
 * z = x W^T, as the compute tier rounds it, times the logit scale (Granite), soft-capped (Gemma 2). n >= 1 and
 * length + n <= capacity. LongRoPE (Phi-3): the forward whose positions first pass original_max_position_embeddings
 * runs the whole sequence again with the long factors, as transformers' Phi-3 drops its cache there. */
const float *tt_kv_forward(tt_model_state *state, tt_kv_cache *cache, const int32_t *ids, int64_t n);

/* For the blocks: the position of the first token of the forward running (0 outside generation), and the attention of
 * layer l over the cache: the new keys k and values v [n, kv_width] appended, out [n, Hq*hd] from q. */
int64_t tt_kv_cache_first_position(const tt_model_state *state);
void tt_kv_cache_attend(tt_model_state *state, int64_t layer, void *out, const void *q, const void *k, const void *v,
                        const tt_attention_shape *shape);

#endif
