#include "train/schedule.h"

#include <math.h>

double tt_lr_at(const tt_lr_schedule *s, int64_t step) {
    if (step < s->warmup_steps) return s->peak * (double)step / (double)(s->warmup_steps > 1 ? s->warmup_steps : 1);
    int64_t decay_steps = s->total_steps - s->warmup_steps;
    double progress = (double)(step - s->warmup_steps) / (double)(decay_steps > 1 ? decay_steps : 1);
    if (progress > 1.0) progress = 1.0;
    switch (s->kind) {
    case TT_LR_CONSTANT: return s->peak;
    case TT_LR_LINEAR: return s->peak * (1.0 - progress);
    case TT_LR_COSINE:
    default: {
        double cosine = 0.5 * (1.0 + cos(M_PI * progress));
        return s->peak * (s->min_ratio + (1.0 - s->min_ratio) * cosine);
    }
    }
}
