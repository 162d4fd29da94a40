/* Weights, AdamW moments and the batch between host memory and a model state (model_io.c): the host side sees
 * fp32 in the flat parameter layout whatever the compute tier keeps, and the optimizer offload's host share is read
 * and written where it lives. */
#ifndef TT_TRAIN_MODEL_IO_H
#define TT_TRAIN_MODEL_IO_H

#include <stdint.h>

#include "train/step.h"

/* Host weights
 * are fp32 in the flat parameter layout ([params.total_numel]); host moments fp32 in the
 * trainable layout ([params.trainable_numel]). Without a master copy, set_weights rounds the
 * weights to the compute precision. */
void tt_model_set_weights(tt_model_state *state, const float *host);
void tt_model_get_weights(const tt_model_state *state, float *host);
void tt_model_set_moments(tt_model_state *state, const float *host_m, const float *host_v);
void tt_model_get_moments(const tt_model_state *state, float *host_m, float *host_v);
/* inputs/targets[micro_batch * seq_len] token ids from the host */
void tt_model_set_batch(tt_model_state *state, const int32_t *inputs, const int32_t *targets);
/* Packed documents (plan.packed_documents): each token's position in its document, positions[B*T] (host; 0 where a
 * document starts, then +1 per token; a sequence starts a document), for the batch set last; it gives the
 * attention its document mask and RoPE its angles. Call after tt_model_set_batch, before the step. */
void tt_model_set_positions(tt_model_state *state, const int32_t *positions);

#endif
