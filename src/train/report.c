#include "train/report.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include "core/check.h"
#include "model/safetensors.h"

void tt_reporter_open(tt_reporter *r, const char *output_dir, bool progress) {
    memset(r, 0, sizeof(*r));
    char path[4096];
    snprintf(path, sizeof path, "%s/metrics.jsonl", output_dir);
    r->metrics = fopen(path, "a");
    if (!r->metrics) tt_die("cannot open %s for writing: check output_dir", path);
    r->enabled = progress;
    r->live = progress && isatty(STDOUT_FILENO);
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

void tt_reporter_step(tt_reporter *r, const tt_step_report *s, bool print_line) {
    double tok_per_s = s->step_seconds > 0 ? (double)s->tokens / s->step_seconds : 0.0;
    fprintf(r->metrics,
            "{\"step\": %lld, \"loss\": %.9g, \"lr\": %.9g, \"grad_norm\": %.9g, \"tokens\": %lld, "
            "\"target_tokens\": %lld, \"step_seconds\": %.6f, \"tok_per_s\": %.3f",
            (long long)s->step, s->loss, s->learning_rate, s->grad_norm, (long long)s->tokens,
            (long long)s->target_tokens, s->step_seconds, tok_per_s);
    for (int t = 0; t < 4; t++)
        if (r->arenas[t])
            fprintf(r->metrics, ", \"mem_%s_bytes\": %zu, \"mem_%s_peak_bytes\": %zu", tt_tier_name(t),
                    r->arenas[t]->used, tt_tier_name(t), r->arenas[t]->peak);
    fprintf(r->metrics, "}\n");
    fflush(r->metrics);
    if (!r->enabled || !print_line) return;

    double per_step = s->steps_this_run > 0 ? s->elapsed_seconds / (double)s->steps_this_run : 0;
    char eta[32], mem[128] = "", buf[32];
    format_duration(per_step * (double)(s->total_steps - s->step), eta, sizeof eta);
    size_t used = 0;
    for (int t = 0; t < 4; t++)
        if (r->arenas[t])
            used += (size_t)snprintf(mem + used, sizeof mem - used, " | %s %s", tt_tier_name(t),
                                     tt_format_bytes(r->arenas[t]->peak, buf, sizeof buf));
    printf("%sstep %lld/%lld | loss %.4f | lr %.3e | grad norm %.3f | %.0f tok/s%s | ETA %s%s",
           r->live ? "\r\033[K" : "", (long long)s->step, (long long)s->total_steps, s->loss, s->learning_rate,
           s->grad_norm, tok_per_s, mem, eta, r->live ? "" : "\n");
    fflush(stdout);
}

void tt_reporter_eval(tt_reporter *r, int64_t step, double eval_loss, int64_t tokens) {
    fprintf(r->metrics, "{\"step\": %lld, \"eval_loss\": %.9g, \"eval_tokens\": %lld}\n", (long long)step, eval_loss,
            (long long)tokens);
    fflush(r->metrics);
    if (r->enabled)
        printf("%seval at step %lld: loss %.4f over %lld tokens\n", r->live ? "\r\033[K" : "", (long long)step,
               eval_loss, (long long)tokens);
}

void tt_reporter_close(tt_reporter *r) {
    if (r->live && r->enabled) putchar('\n');
    if (r->metrics) fclose(r->metrics);
    r->metrics = NULL;
}
