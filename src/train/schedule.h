/* Learning-rate schedules, as transformers' get_*_schedule_with_warmup: the rate used by
 * optimizer step k (0-based) is peak * factor(k). */
#ifndef TT_TRAIN_SCHEDULE_H
#define TT_TRAIN_SCHEDULE_H

#include <stdint.h>

#include "config/run_config.h"

typedef struct tt_lr_schedule {
    tt_lr_scheduler kind;
    double peak;
    int64_t warmup_steps;
    int64_t total_steps;
    double min_ratio; /* cosine floor as a fraction of peak (axolotl's cosine_min_lr_ratio) */
} tt_lr_schedule;

double tt_lr_at(const tt_lr_schedule *schedule, int64_t step);

#endif
