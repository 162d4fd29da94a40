/* The per-step scalars of torch.optim.AdamW, derived once for every implementation (the CPU
 * backend, the CUDA kernel, the CPU AdamW of optimizer offload): the python-float quantities
 * (bias corrections, step size, 1 - lr * wd, 1 - beta) are computed in double, as torch does,
 * and used as float. Sharing the derivation is what lets the three give the same bits. */
#ifndef TT_OPS_ADAMW_SCALARS_H
#define TT_OPS_ADAMW_SCALARS_H

#include <math.h>
#include <stdint.h>

#include "core/check.h"

typedef struct tt_adamw_scalars {
    float beta1, one_minus_beta1, beta2, one_minus_beta2, eps;
    float neg_step_size;         /* -lr / (1 - beta1^step) */
    float bias_correction2_sqrt; /* sqrt(1 - beta2^step) */
    float grad_scale;            /* the clipping factor the gradient is multiplied by first */
    float decay;                 /* 1 - lr * weight_decay: decaying segments; the others use 1 */
} tt_adamw_scalars;

static inline tt_adamw_scalars tt_adamw_scalars_for(float lr, float beta1, float beta2, float eps, float weight_decay,
                                                    int64_t step, float grad_scale) {
    TT_CHECK(step >= 1, "adamw step %lld must be >= 1", (long long)step);
    const double bias_correction1 = 1.0 - pow((double)beta1, (double)step);
    const double bias_correction2 = 1.0 - pow((double)beta2, (double)step);
    tt_adamw_scalars k;
    k.beta1 = beta1;
    k.one_minus_beta1 = (float)(1.0 - (double)beta1);
    k.beta2 = beta2;
    k.one_minus_beta2 = (float)(1.0 - (double)beta2);
    k.eps = eps;
    k.neg_step_size = (float)(-((double)lr / bias_correction1));
    k.bias_correction2_sqrt = (float)sqrt(bias_correction2);
    k.grad_scale = grad_scale;
    k.decay = (float)(1.0 - (double)lr * (double)weight_decay);
    return k;
}

#endif
