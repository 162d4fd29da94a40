/* bitsandbytes' 8-bit AdamW (optimizer: adamw_bnb_8bit; bnb.optim.AdamW8bit with its defaults, Dettmers et al.
 * 2021, "8-bit Optimizers via Block-wise Quantization"), what every implementation shares: the tensor descriptor
 * the backends' adamw_8bit_update takes, where a moment's state lives, and the per-step scalars.
 *
 * A tensor of at least TT_ADAMW_8BIT_MIN_NUMEL elements (bitsandbytes' min_8bit_size) keeps each moment as one
 * 8-bit code per element and one fp32 absmax per block of TT_ADAMW_8BIT_BLOCK elements of that tensor (its last
 * block may be short): a moment's value is map[code] * absmax, the signed dynamic map (ops/dynamic_map.h) for the
 * first moment and the unsigned one for the second. A step dequantizes a block, updates it in fp32, takes the new
 * absmax of each moment over the block and requantizes every value to the nearest code of value / absmax.
 * A smaller tensor keeps fp32 moments and takes bitsandbytes' 32-bit Adam step. Both are bitsandbytes' arithmetic,
 * not torch.optim.AdamW's: the weight decays after the Adam step, and eps is scaled by sqrt(1 - beta2^t). */
#ifndef TT_OPS_ADAMW_8BIT_H
#define TT_OPS_ADAMW_8BIT_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/check.h"
#include "ops/dynamic_map.h"

#define TT_ADAMW_8BIT_BLOCK 256
#define TT_ADAMW_8BIT_MIN_NUMEL 4096

/* One tensor of an update. */
typedef struct tt_adamw_8bit_tensor {
    int64_t element; /* its first element in the weights and gradients the update is given */
    int64_t numel;
    bool decays;    /* in a weight-decay group (matrices: the Hugging Face Trainer's rule) */
    bool quantized; /* 8-bit moments; else fp32 moments */
    /* quantized: its first code in the moments' codes and its first block in their absmax; else its first element
     * in their fp32 moments */
    int64_t state, block;
} tt_adamw_8bit_tensor;

static inline int64_t tt_adamw_8bit_blocks(int64_t numel) {
    return (numel + TT_ADAMW_8BIT_BLOCK - 1) / TT_ADAMW_8BIT_BLOCK;
}

/* One moment's state, on the compute tier. */
typedef struct tt_adamw_8bit_moment {
    unsigned char *codes; /* the 8-bit tensors' codes */
    float *absmax;        /* their blocks' absmax */
    float *fp32;          /* the small tensors' moments */
} tt_adamw_8bit_moment;

/* The maps an update quantizes with: the signed one for the first moment, the unsigned one for the second. */
typedef struct tt_adamw_8bit_maps {
    float first[TT_DYNAMIC_MAP_CODES], second[TT_DYNAMIC_MAP_CODES];
} tt_adamw_8bit_maps;

void tt_adamw_8bit_maps_build(tt_adamw_8bit_maps *maps);

/* The per-step scalars, as bitsandbytes' kernels derive them in fp32 (1 - beta^t from a correctly rounded power;
 * its CUDA kernels' __powf and __fdividef are approximations of these). */
typedef struct tt_adamw_8bit_scalars {
    float beta1, beta2, one_minus_beta1, one_minus_beta2;
    float step_size;    /* -lr * sqrt(1 - beta2^t) / (1 - beta1^t) */
    float scaled_eps;   /* sqrt(1 - beta2^t) * eps */
    float grad_scale;   /* the clipping factor the gradient is multiplied by first */
    float decay;        /* 1 - lr * weight_decay */
    bool weight_decays; /* weight_decay > 0: decaying tensors are multiplied by decay after the step */
} tt_adamw_8bit_scalars;

static inline tt_adamw_8bit_scalars tt_adamw_8bit_scalars_for(float lr, float beta1, float beta2, float eps,
                                                              float weight_decay, int64_t step, float grad_scale) {
    TT_CHECK(step >= 1, "adamw step %lld must be >= 1", (long long)step);
    const float correction1 = 1.0f - (float)pow((double)beta1, (double)step);
    const float correction2 = sqrtf(1.0f - (float)pow((double)beta2, (double)step));
    tt_adamw_8bit_scalars k;
    k.beta1 = beta1;
    k.beta2 = beta2;
    k.one_minus_beta1 = 1.0f - beta1;
    k.one_minus_beta2 = 1.0f - beta2;
    k.step_size = -lr * correction2 / correction1;
    k.scaled_eps = correction2 * eps;
    k.grad_scale = grad_scale;
    const float lr_times_decay = lr * weight_decay; /* rounded on its own (one statement: never a fused op) */
    k.decay = 1.0f - lr_times_decay;
    k.weight_decays = weight_decay > 0.0f;
    return k;
}

#endif
