#include "train/report.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include "core/check.h"
#include "model/safetensors.h"

void tt_reporter_open(tt_reporter *r, const char *output_dir, bool progress, bool use_tensorboard) {
    memset(r, 0, sizeof(*r));
    char path[4096];
    snprintf(path, sizeof path, "%s/metrics.jsonl", output_dir);
    r->metrics = fopen(path, "a");
    if (!r->metrics) tt_die("cannot open %s for writing: check output_dir", path);
    r->live = progress && isatty(STDOUT_FILENO);
    r->tensorboard_on = use_tensorboard;
    if (use_tensorboard) {
        tt_tensorboard_open(&r->tensorboard, output_dir);
        tt_info("TensorBoard: %s (tensorboard --logdir %s/runs)", r->tensorboard.path, output_dir);
    }
}

/* The step's scalars in the event file. */
static void tensorboard_step(tt_reporter *r, const tt_step_report *s, double tok_per_s, double trained_per_s) {
    tt_tensorboard_scalar v[6 + 4] = {
        {"train/loss", s->loss},
        {"train/learning_rate", s->learning_rate},
        {"train/grad_norm", s->grad_norm},
        {"train/epoch", s->epoch},
        {"train/tokens_per_second", tok_per_s},
        {"train/trained_tokens_per_second", trained_per_s},
    };
    char peak_tags[4][48];
    int count = 6;
    for (int t = 0; t < 4; t++)
        if (r->arenas[t]) {
            snprintf(peak_tags[t], sizeof peak_tags[t], "memory/%s_peak_mib", tt_tier_name((tt_tier)t));
            v[count++] = (tt_tensorboard_scalar){peak_tags[t], (double)r->arenas[t]->peak / 1048576.0};
        }
    tt_tensorboard_write(&r->tensorboard, s->step, v, count);
}

void tt_metrics_keep_steps(const char *output_dir, int64_t step) {
    char path[4096];
    snprintf(path, sizeof path, "%s/metrics.jsonl", output_dir);
    FILE *in = fopen(path, "r");
    if (!in) return; /* no rows yet: nothing to keep */
    char *kept = NULL;
    size_t kept_size = 0;
    FILE *out = open_memstream(&kept, &kept_size);
    if (!out) tt_die("out of host memory rewriting %s", path);
    char *line = NULL;
    size_t capacity = 0;
    int64_t dropped = 0;
    for (ssize_t n; (n = getline(&line, &capacity, in)) > 0;) {
        long long row_step;
        if (sscanf(line, "{\"step\": %lld", &row_step) == 1 && row_step > step) {
            dropped++;
            continue;
        }
        fwrite(line, 1, (size_t)n, out);
    }
    free(line);
    fclose(in);
    fclose(out);
    if (dropped) {
        tt_write_file_atomic(path, kept, kept_size);
        tt_info("metrics.jsonl: removed %lld row(s) after step %lld, which this run trains again", (long long)dropped,
                (long long)step);
    }
    free(kept);
}

static void format_duration(double seconds, char *buf, size_t size) {
    if (!isfinite(seconds) || seconds < 0) seconds = 0;
    long s = (long)(seconds + 0.5);
    if (s >= 3600) snprintf(buf, size, "%ld:%02ld:%02ld", s / 3600, (s / 60) % 60, s % 60);
    else snprintf(buf, size, "%02ld:%02ld", s / 60, s % 60);
}

/* A FLOP rate of one GPU over its dense bf16 peak: flops a token x the step's tokens a second shared by the GPUs;
 * 0 when the peak is not known. */
static double utilization(const tt_reporter *r, double flops_per_token, double tok_per_s) {
    if (r->peak_flops <= 0) return 0;
    return flops_per_token * tok_per_s / (double)(r->devices > 0 ? r->devices : 1) / r->peak_flops;
}

/* The step's op classes and gaps (the step's time no class covers) into its metrics row, and into the sums of the
 * table at the end: the steps after this process's first, or the first when it is the only one. */
static void write_profile(tt_reporter *r, const tt_step_report *s) {
    double gaps = s->step_seconds;
    fprintf(r->metrics, ", \"profile_seconds\": {");
    for (int c = 0; c < TT_OP_CLASS_COUNT; c++) {
        fprintf(r->metrics, "\"%s\": %.6f, ", tt_op_class_name((tt_op_class)c), s->profile_seconds[c]);
        gaps -= s->profile_seconds[c];
    }
    fprintf(r->metrics, "\"gaps\": %.6f}", gaps);
    const bool first = s->steps_this_run <= 1;
    if (first || r->profile_first_only) {
        memset(r->profile_seconds, 0, sizeof r->profile_seconds);
        r->profile_step_seconds = 0;
        r->profile_steps = 0;
        r->profile_first_only = first;
    }
    for (int c = 0; c < TT_OP_CLASS_COUNT; c++) r->profile_seconds[c] += s->profile_seconds[c];
    r->profile_seconds[TT_OP_CLASS_COUNT] += gaps;
    r->profile_step_seconds += s->step_seconds;
    r->profile_steps++;
}

/* The table of where the profiled steps' time went. */
static void print_profile(const tt_reporter *r) {
    const double n = (double)r->profile_steps, step = r->profile_step_seconds / n;
    printf("profile: where a step's time went, %s (%.4f s a step)\n",
           r->profile_first_only ? "the only step" : "the mean of the steps after the first", step);
    for (int c = 0; c <= TT_OP_CLASS_COUNT; c++)
        printf("  %-32s %10.4f s %6.1f%%\n",
               c < TT_OP_CLASS_COUNT ? tt_op_class_label((tt_op_class)c) : "gaps (host work, idle)",
               r->profile_seconds[c] / n, step > 0 ? 100.0 * r->profile_seconds[c] / n / step : 0.0);
}

void tt_reporter_step(tt_reporter *r, const tt_step_report *s, bool logged) {
    const double tok_per_s = s->step_seconds > 0 ? (double)s->tokens / s->step_seconds : 0.0;
    const double trained_per_s = s->step_seconds > 0 ? (double)s->target_tokens / s->step_seconds : 0.0;
    fprintf(r->metrics,
            "{\"step\": %lld, \"epoch\": %.9g, \"loss\": %.9g, \"lr\": %.9g, \"grad_norm\": %.9g, \"tokens\": %lld, "
            "\"target_tokens\": %lld, \"step_seconds\": %.6f, \"tok_per_s\": %.3f, \"target_tok_per_s\": %.3f, "
            "\"elapsed_seconds\": %.3f",
            (long long)s->step, s->epoch, s->loss, s->learning_rate, s->grad_norm, (long long)s->tokens,
            (long long)s->target_tokens, s->step_seconds, tok_per_s, trained_per_s, s->elapsed_seconds);
    for (int t = 0; t < 4; t++)
        if (r->arenas[t])
            fprintf(r->metrics, ", \"mem_%s_bytes\": %zu, \"mem_%s_peak_bytes\": %zu", tt_tier_name(t),
                    r->arenas[t]->used, tt_tier_name(t), r->arenas[t]->peak);
    const double mfu = utilization(r, r->model_flops_per_token, tok_per_s);
    if (r->model_flops_per_token > 0)
        fprintf(r->metrics, ", \"model_flops_per_token\": %.6g, \"hardware_flops_per_token\": %.6g",
                r->model_flops_per_token, r->hardware_flops_per_token);
    if (mfu > 0)
        fprintf(r->metrics, ", \"mfu\": %.6f, \"hfu\": %.6f", mfu,
                utilization(r, r->hardware_flops_per_token, tok_per_s));
    if (s->profile_seconds) write_profile(r, s);
    if (!isnan(s->router_aux_loss)) fprintf(r->metrics, ", \"router_aux_loss\": %.9g", s->router_aux_loss);
    fprintf(r->metrics, "}\n");
    fflush(r->metrics);
    if (r->tensorboard_on) tensorboard_step(r, s, tok_per_s, trained_per_s);
    if (!r->live && !logged) return;

    const double per_step = s->steps_this_run > 0 ? s->elapsed_seconds / (double)s->steps_this_run : 0;
    char eta[32], elapsed[32], mem[128] = "", buf[32];
    format_duration(per_step * (double)(s->total_steps - s->step), eta, sizeof eta);
    format_duration(s->elapsed_seconds, elapsed, sizeof elapsed);
    size_t used = 0;
    for (int t = 0; t < 4; t++)
        if (r->arenas[t])
            used += (size_t)snprintf(mem + used, sizeof mem - used, " | %s %s", tt_tier_name(t),
                                     tt_format_bytes(r->arenas[t]->peak, buf, sizeof buf));
    char mfu_text[32] = "";
    if (mfu > 0) snprintf(mfu_text, sizeof mfu_text, " | MFU %.1f%%", 100.0 * mfu);
    printf("%sepoch %.2f | step %lld/%lld | loss %.4f | lr %.3e | grad norm %.3f | %.0f tok/s (%.0f trained)%s%s | "
           "%s, ETA %s",
           r->live ? "\r\033[K" : "", s->epoch, (long long)s->step, (long long)s->total_steps, s->loss,
           s->learning_rate, s->grad_norm, tok_per_s, trained_per_s, mfu_text, mem, elapsed, eta);
    /* a logged step's line stays; between them the live line is rewritten in place */
    r->line_open = r->live && !logged;
    if (!r->line_open) putchar('\n');
    fflush(stdout);
}

void tt_reporter_eval(tt_reporter *r, int64_t step, double eval_loss, int64_t tokens) {
    fprintf(r->metrics, "{\"step\": %lld, \"eval_loss\": %.9g, \"eval_tokens\": %lld}\n", (long long)step, eval_loss,
            (long long)tokens);
    fflush(r->metrics);
    if (r->tensorboard_on) {
        const tt_tensorboard_scalar v[2] = {{"eval/loss", eval_loss}, {"eval/perplexity", exp(eval_loss)}};
        tt_tensorboard_write(&r->tensorboard, step, v, 2);
    }
    printf("%seval at step %lld: loss %.4f (perplexity %.4g) over %lld tokens\n", r->line_open ? "\r\033[K" : "",
           (long long)step, eval_loss, exp(eval_loss), (long long)tokens);
    r->line_open = false;
}

void tt_reporter_close(tt_reporter *r) {
    if (r->line_open) putchar('\n');
    r->line_open = false;
    if (r->profile_steps > 0) print_profile(r);
    r->profile_steps = 0; /* closed twice (a non-finite step stops the loop): printed once */
    if (r->metrics) fclose(r->metrics);
    r->metrics = NULL;
    if (r->tensorboard_on) tt_tensorboard_close(&r->tensorboard);
    r->tensorboard_on = false;
}
