/* The optimizer's parts of a model state, attached once its memory and mechanisms exist (step.h): optimizer
 * offload (the host share's master weights and moments, the CPU AdamW) and its hook; cpu_offloading_weights' homes
 * (in the optimizer offload's host buffers for units of its host share, else a host buffer of their own) and stream,
 * and its hook; the compute tier's AdamW pieces, which depend on where weight offload put the weights. A measuring
 * state (the dry run) gets the same buffers and hooks, with no threads and nothing written. */
#ifndef TT_TRAIN_MODEL_ATTACH_H
#define TT_TRAIN_MODEL_ATTACH_H

#include "train/step.h"

void tt_model_state_attach_optimizer(tt_model_state *state);
void tt_model_state_detach_optimizer(tt_model_state *state);

#endif
