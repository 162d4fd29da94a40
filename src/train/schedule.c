#include "train/schedule.h"

#include <math.h>

/* transformers' get_polynomial_decay_schedule_with_warmup's defaults (lr_end, power) and get_inverse_sqrt_schedule's
 * timescale without a warmup */
#define POLYNOMIAL_LR_END 1e-7
#define POLYNOMIAL_POWER 1.0
#define INVERSE_SQRT_TIMESCALE 10000

double tt_lr_at(const tt_lr_schedule *s, int64_t step) {
    if (s->kind == TT_LR_CONSTANT) return s->peak; /* transformers' constant schedule takes no warmup */
    if (step < s->warmup_steps) return s->peak * (double)step / (double)(s->warmup_steps > 1 ? s->warmup_steps : 1);
    if (s->kind == TT_LR_INVERSE_SQRT) {
        const int64_t timescale = s->warmup_steps > 0 ? s->warmup_steps : INVERSE_SQRT_TIMESCALE;
        return s->peak / sqrt((double)(step + timescale - s->warmup_steps) / (double)timescale);
    }
    if (s->kind == TT_LR_POLYNOMIAL) {
        if (step > s->total_steps || s->peak <= POLYNOMIAL_LR_END) return POLYNOMIAL_LR_END;
        const double remaining = 1.0 - (double)(step - s->warmup_steps) / (double)(s->total_steps - s->warmup_steps);
        return (s->peak - POLYNOMIAL_LR_END) * pow(remaining, POLYNOMIAL_POWER) + POLYNOMIAL_LR_END;
    }
    int64_t decay_steps = s->total_steps - s->warmup_steps;
    double progress = (double)(step - s->warmup_steps) / (double)(decay_steps > 1 ? decay_steps : 1);
    if (progress > 1.0) progress = 1.0;
    switch (s->kind) {
    case TT_LR_CONSTANT_WITH_WARMUP: return s->peak;
    case TT_LR_LINEAR: return s->peak * (1.0 - progress);
    case TT_LR_COSINE:
    case TT_LR_COSINE_WITH_MIN_LR:
    default: {
        double cosine = 0.5 * (1.0 + cos(M_PI * progress));
        return s->peak * (s->min_ratio + (1.0 - s->min_ratio) * cosine);
    }
    }
}
