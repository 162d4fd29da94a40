/* The optimizer step of a model state: the global gradient norm and one AdamW update, the compute tier's share
 * (optimizer.h) and optimizer offload's host share (optimizer_offload.h) alike. */
#ifndef TT_TRAIN_OPTIMIZER_STEP_H
#define TT_TRAIN_OPTIMIZER_STEP_H

#include <stdint.h>

#include "train/optimizer.h"
#include "train/step.h"

/* sqrt(sum of squared gradients): each optimizer unit's fixed-order sum of squares, added in unit order (the same
 * bits whether a unit's gradients stay on the compute tier or stream out during the backward). */
double tt_gradient_norm(const tt_model_state *state);

/* One AdamW step (step counts from 1) on every trainable parameter with the given learning rate. */
void tt_adamw_step(tt_model_state *state, const tt_adamw_settings *settings, float learning_rate, int64_t step,
                   float grad_scale);

#endif
