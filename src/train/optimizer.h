/* AdamW over the parameter table, with global-norm gradient clipping, as the Hugging Face
 * Trainer runs torch.optim.AdamW: matrices decay, biases and norm weights do not. */
#ifndef TT_TRAIN_OPTIMIZER_H
#define TT_TRAIN_OPTIMIZER_H

#include <stdint.h>

#include "train/step.h"

typedef struct tt_adamw_settings {
    float beta1, beta2, epsilon, weight_decay;
    float max_grad_norm; /* 0: no clipping */
} tt_adamw_settings;

/* sqrt(sum of squared gradients), summed parameter by parameter in table order. */
double tt_gradient_norm(const tt_model_state *state);

/* The factor torch.nn.utils.clip_grad_norm_ multiplies gradients by: min(1, max / (norm + 1e-6)). */
float tt_clip_scale(double grad_norm, float max_grad_norm);

/* One AdamW step (step counts from 1) on every trainable parameter with the given learning rate. */
void tt_adamw_step(tt_model_state *state, const tt_adamw_settings *settings, float learning_rate, int64_t step,
                   float grad_scale);

#endif
