/* The arithmetic of a training step, counted the way the field counts it (PaLM's appendix B, Megatron, torchtitan),
 * for MFU and HFU.
 *
 * Model FLOPs (MFU's numerator) are those of the model, whatever the run does to fit it: per token, 2 x the elements
 * of every matrix the token passes through in the forward (the decoder layers' linear weights, LoRA's A and B, the LM
 * head), 2 x again for the gradient of its input, 2 x again for its own gradient where it trains (6N for a full fine
 * tune, 4N for a frozen base: LoRA, QLoRA), and the attention's score and value products: 4 x visible keys x head_dim
 * x Hq in the forward (causal: half the sequence on average; a sliding layer's window), 2 x that in the backward.
 * Hardware FLOPs (HFU's) add what this run's plan computes again: each layer's recomputed slots (their GEMMs and
 * attention forwards) and the score product the attention backward recomputes from the log-sum-exp (half a forward:
 * FlashAttention's backward of 2.5 forwards, the field's convention; tiertrain's deterministic backward with dQ in a
 * kernel of its own computes 3.5, which this count leaves out, so its HFU is a lower bound).
 * Element-wise ops (norms, RoPE, SwiGLU, the loss's softmax) are not counted, as the field does not count them. */
#ifndef TT_TRAIN_FLOPS_H
#define TT_TRAIN_FLOPS_H

#include "memory/plan.h"
#include "model/params.h"

typedef struct tt_step_flops {
    double model_per_token;    /* model FLOPs a trained token costs (MFU) */
    double hardware_per_token; /* what this plan runs for it, recompute included (HFU) */
} tt_step_flops;

/* The FLOPs per token of a training step of a model as planned (the parameter table says what trains; sequences of
 * plan.seq_len x plan.sequence_parallel tokens, each one document). */
tt_step_flops tt_step_flops_of(const tt_model_config *model, const tt_param_table *params, const tt_plan *plan);

/* The dense bf16 tensor peak of the GPU a backend's device description names ("cuda: NVIDIA H200, ..."), in FLOP/s,
 * from the vendor's data sheets (without sparsity); 0 for a GPU not in the table and for the CPU. */
double tt_dense_bf16_peak_flops(const char *device_description);

#endif
