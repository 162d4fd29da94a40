/* What a run tells its user: the live progress line on the terminal and one JSON object per
 * logged step in <output_dir>/metrics.jsonl. */
#ifndef TT_TRAIN_REPORT_H
#define TT_TRAIN_REPORT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "core/arena.h"

typedef struct tt_step_report {
    int64_t step; /* optimizer steps done (1-based after the first) */
    int64_t total_steps;
    double loss;
    double learning_rate;
    double grad_norm;
    int64_t tokens;        /* tokens this step (input positions, padding included) */
    int64_t target_tokens; /* targets the loss counted this step: not masked (-100), not padding */
    double step_seconds;
    double elapsed_seconds; /* since training started (this process) */
    int64_t steps_this_run; /* steps done since this process started */
} tt_step_report;

typedef struct tt_reporter {
    FILE *metrics; /* metrics.jsonl, appended */
    bool live;     /* progress on a terminal: rewrite one line */
    bool enabled;  /* the progress key */
    const tt_arena *arenas[4];
} tt_reporter;

void tt_reporter_open(tt_reporter *r, const char *output_dir, bool progress);
/* A resumed run: output_dir/metrics.jsonl keeps only the rows of steps up to `step` (the checkpoint's), so that the
 * steps the run replays are in it once. Rewritten whole and renamed into place. */
void tt_metrics_keep_steps(const char *output_dir, int64_t step);
void tt_reporter_step(tt_reporter *r, const tt_step_report *s, bool print_line);
void tt_reporter_eval(tt_reporter *r, int64_t step, double eval_loss, int64_t tokens);
void tt_reporter_close(tt_reporter *r);

#endif
