/* What a run tells its user: the progress line on the console, one JSON object per step and per eval in
 * <output_dir>/metrics.jsonl, and with use_tensorboard the same figures as TensorBoard scalars (train/tensorboard.h):
 * train/loss, train/learning_rate, train/grad_norm, train/epoch, train/tokens_per_second (every position, padding
 * included), train/trained_tokens_per_second (the targets the loss counts), memory/<tier>_peak_mib, eval/loss and
 * eval/perplexity. */
#ifndef TT_TRAIN_REPORT_H
#define TT_TRAIN_REPORT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "core/arena.h"
#include "ops/op_profile.h"
#include "train/tensorboard.h"

typedef struct tt_step_report {
    int64_t step; /* optimizer steps done (1-based after the first) */
    int64_t total_steps;
    double loss;
    double learning_rate;
    double grad_norm;
    int64_t tokens;        /* tokens this step (input positions, padding included) */
    int64_t target_tokens; /* targets the loss counted this step: not masked (-100), not padding */
    double step_seconds;
    double elapsed_seconds;        /* since training started (this process) */
    int64_t steps_this_run;        /* steps done since this process started */
    double epoch;                  /* epochs of training data done: whole epochs plus the fraction of this one */
    const double *profile_seconds; /* [TT_OP_CLASS_COUNT] the step's seconds by op class (profile: true), or NULL */
    double router_aux_loss; /* a mixture of experts' auxiliary loss this step (before router_aux_loss_coef), NaN: none */
} tt_step_report;

typedef struct tt_reporter {
    FILE *metrics; /* metrics.jsonl, appended */
    /* the progress key on a terminal: one line rewritten at every step (a logged step's line stays); else (progress:
     * false, or standard output not a terminal: CI, a pipe, a file) a plain line per logged step */
    bool live;
    bool line_open; /* the live line was written and not ended */
    const tt_arena *arenas[4];
    bool tensorboard_on; /* use_tensorboard: every row also goes to the event file */
    /* MFU and HFU (train/flops.h): FLOPs a token of the model and of this run's plan, the dense bf16 peak of one GPU
     * (0: not known, no MFU), and the GPUs the step's tokens are shared by */
    double model_flops_per_token, hardware_flops_per_token, peak_flops;
    int devices;
    /* profile: true: the op classes' seconds (then the gaps) summed over the steps after this process's first (the
     * first warms up: plans, caches, allocations), and the steps summed */
    double profile_seconds[TT_OP_CLASS_COUNT + 1], profile_step_seconds;
    int64_t profile_steps;
    bool profile_first_only; /* the sums hold the first step alone so far */
    tt_tensorboard tensorboard;
} tt_reporter;

void tt_reporter_open(tt_reporter *r, const char *output_dir, bool progress, bool use_tensorboard);
/* A resumed run: output_dir/metrics.jsonl keeps only the rows of steps up to `step` (the checkpoint's), so that the
 * steps the run replays are in it once. Rewritten whole and renamed into place. */
void tt_metrics_keep_steps(const char *output_dir, int64_t step);
/* Every step: its metrics.jsonl row, and the console's line (logged: the step is a logging step). */
void tt_reporter_step(tt_reporter *r, const tt_step_report *s, bool logged);
void tt_reporter_eval(tt_reporter *r, int64_t step, double eval_loss, int64_t tokens);
void tt_reporter_close(tt_reporter *r);

#endif
