/* The compute tier's AdamW over the parameter table (in pieces), as the Hugging Face Trainer runs
 * torch.optim.AdamW: matrices decay, biases and norm weights do not; the clipping factor. The whole optimizer
 * step, optimizer offload's share included, is optimizer_step.h. */
#ifndef TT_TRAIN_OPTIMIZER_H
#define TT_TRAIN_OPTIMIZER_H

#include <stdint.h>

#include "ops/adamw_8bit.h"
#include "train/step.h"

typedef struct tt_adamw_settings {
    float beta1, beta2, epsilon, weight_decay;
    float max_grad_norm; /* 0: no clipping */
} tt_adamw_settings;

/* The factor torch.nn.utils.clip_grad_norm_ multiplies gradients by: min(1, max / (norm + 1e-6)). */
float tt_clip_scale(double grad_norm, float max_grad_norm);

/* A piece of the compute tier's AdamW: the trainable elements [lo, hi), whose weights are in one place. */
typedef struct tt_adamw_piece {
    int64_t lo, hi;
    int64_t layer;                 /* a weight-offloaded layer (updated in its stream buffer, then stored), or -1 */
    void *weights;                 /* the compute tier's weights of element lo (layer -1) */
    int segments;                  /* the param table's decay segments clipped to [lo, hi), rebased to lo */
    int64_t *segment_start;        /* [segments + 1] */
    unsigned char *segment_decays; /* [segments] */
    /* optimizer: adamw_bnb_8bit: the parameters in [lo, hi), their elements counted from lo (else none) */
    int tensor_count;
    tt_adamw_8bit_tensor *tensors;
} tt_adamw_piece;

/* The 8-bit AdamW's state layout of a state whose plan has moments_8bit (state->adamw_8bit), built once its
 * parameter table exists; freed with it. Nothing without moments_8bit. */
void tt_adamw_8bit_attach(tt_model_state *state);
void tt_adamw_8bit_detach(tt_model_state *state);

/* Splits the compute tier's share of the update ([0, optimizer offload's host start), or everything) into
 * state->adamw_pieces (step.h). Called once the optimizer offload and the weight offload exist. */
void tt_adamw_pieces_build(tt_model_state *state);
void tt_adamw_pieces_free(tt_model_state *state);
/* AdamW over the compute tier's share, piece by piece: each element's arithmetic is the same whatever the split. */
void tt_compute_tier_adamw(tt_model_state *state, const tt_adamw_settings *settings, float learning_rate, int64_t step,
                           float grad_scale);

/* The segments (start[count + 1], decays[count]) clipped to [lo, hi) and rebased to lo, into freshly allocated
 * arrays; returns how many. */
int tt_clip_segments(const int64_t *start, const unsigned char *decays, int count, int64_t lo, int64_t hi,
                     int64_t **out_start, unsigned char **out_decays);

#endif
