/* Weights, AdamW moments and the batch between host memory and a model state (model_io.c): the host side sees
 * fp32 in the flat parameter layout whatever the compute tier keeps, and the optimizer offload's host share is read
 * and written where it lives. */
#ifndef TT_TRAIN_MODEL_IO_H
#define TT_TRAIN_MODEL_IO_H

#include <stdint.h>

#include "model/weights.h"
#include "train/step.h"

/* Host weights
 * are fp32 in the flat parameter layout ([params.total_numel]); host moments fp32 in the
 * trainable layout ([params.trainable_numel]). Without a master copy, set_weights rounds the
 * weights to the compute precision. */
void tt_model_set_weights(tt_model_state *state, const float *host);
void tt_model_get_weights(const tt_model_state *state, float *host);
/* The frozen part of host ([params.trainable_start]) alone. */
void tt_model_get_frozen_weights(const tt_model_state *state, float *host);
/* The trainable parameters alone, fp32 in the trainable layout ([params.trainable_numel]): their compute copy, master
 * copy and optimizer offload share; the frozen part is left as it is. What checkpoints and LoRA adapters move.
 * With zero_stage 1 over several ranks the getters (of weights and of moments) are collectives: every rank calls
 * them at the same point and each fills in the others' shards (state->shards). */
void tt_model_set_trainable_weights(tt_model_state *state, const float *host);
void tt_model_get_trainable_weights(const tt_model_state *state, float *host);

/* Loading a model piece by piece (model/weights.h: the loaders and random init write into the sink this returns):
 * a frozen parameter goes straight where it lives, converted to the compute format (a 4-bit weight as its bytes),
 * onto the compute tier or into layer_offloading's pinned copy, a piece at a time; a trainable one into `trainable`
 * (fp32, the trainable layout, for tt_model_set_trainable_weights). The host never holds the frozen model in another
 * form: a 70B QLoRA base costs its 4-bit bytes where they live and a piece of staging. end: after the last
 * parameter (layer_offloading's resident part goes up; waits for the copies). */
typedef struct tt_model_loader {
    tt_model_state *state;
    float *trainable; /* [params.trainable_numel] */
    void *staging;    /* a piece of frozen values in the compute format */
    size_t staging_bytes;
} tt_model_loader;
tt_weight_sink tt_model_loader_begin(tt_model_loader *loader, tt_model_state *state, float *trainable);
void tt_model_loader_end(tt_model_loader *loader);
void tt_model_set_moments(tt_model_state *state, const float *host_m, const float *host_v);
void tt_model_get_moments(const tt_model_state *state, float *host_m, float *host_v);

/* Elements [first, first + count) of the trainable layout in fp32, the values the whole-layout getters give there
 * (weights: the master copy where there is one, else the compute copy; or AdamW's first or second moment), read from
 * where they live: what a save streams a tensor at a time (train/streamed_save.h). With zero_stage sharding
 * (state->shards) a collective: every rank asks for the same range at the same point, the owner of the range's unit
 * (a tensor lies within one unit) reads it and every rank gets it. Not for zero_stage 3's compute copy without a
 * master copy (tt_model_reads_trainable_ranges false: gathered whole). */
typedef enum tt_trainable_values {
    TT_TRAINABLE_WEIGHTS,
    TT_TRAINABLE_MOMENT_M,
    TT_TRAINABLE_MOMENT_V
} tt_trainable_values;
bool tt_model_reads_trainable_ranges(const tt_model_state *state);
/* Elements [first, first + count) of the frozen part ([params.trainable_start]) in fp32, as
 * tt_model_get_frozen_weights gives them there; not for a 4-bit base. */
void tt_model_get_frozen_range(const tt_model_state *state, int64_t first, int64_t count, float *out);
void tt_model_get_trainable_range(const tt_model_state *state, tt_trainable_values what, int64_t first, int64_t count,
                                  float *out);
/* inputs/targets[micro_batch * the whole sequence] token ids from the host (with sequence parallel, this rank takes
 * its share of each sequence) */
void tt_model_set_batch(tt_model_state *state, const int32_t *inputs, const int32_t *targets);
/* Packed documents (plan.packed_documents): each token's position in its document, positions[B*T] (host; 0 where a
 * document starts, then +1 per token; a sequence starts a document), for the batch set last; it gives the
 * attention its document mask and RoPE its angles. Call after tt_model_set_batch, before the step. */
void tt_model_set_positions(tt_model_state *state, const int32_t *positions);

#endif
