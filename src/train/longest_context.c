#include "train/longest_context.h"

#include "core/check.h"
#include "config/run_translation.h"
#include "memory/disk_store.h"
#include "memory/size_table.h"
#include "model/params.h"
#include "train/measure.h"

/* Tokens of one micro-batch stay below 2^31: token ids, positions and offsets are 32-bit on the device. */
#define LONGEST_CONTEXT_CEILING ((int64_t)1 << 30)

/* The budgets train checks at start: the compute tier against the device's (the GPU's, or host memory for the
 * CPU backend, which computes in pageable memory), pinned host memory against host_memory_budget (the machine's
 * memory less the system's reserve when 0, tt_host_memory_default_budget), and the disk tier against offload_dir's free
 * space shared by the host's processes (tt_disk_budget; a full disk is a budget of 0, not none). */
static void set_budgets(tt_context_fit *fit, const tt_plan *plan, const tt_device *device) {
    const tt_tier compute = device->backend->compute_tier;
    fit->budget[compute] = device->memory_budget;
    fit->budgeted[compute] = device->memory_budget > 0;
    if (compute != TT_TIER_PINNED) {
        fit->budget[TT_TIER_PINNED] = plan->pinned_budget;
        fit->budgeted[TT_TIER_PINNED] = plan->pinned_budget > 0;
    }
    size_t free_bytes = 0; /* a directory that cannot be asked is left to train, which says why at start */
    if (fit->peak[TT_TIER_DISK] && tt_disk_free_bytes(plan->offload_dir ? plan->offload_dir : ".", &free_bytes)) {
        fit->budget[TT_TIER_DISK] = tt_disk_budget(free_bytes, plan->offload_dir_processes);
        fit->budgeted[TT_TIER_DISK] = true;
    }
}

tt_context_fit tt_context_fit_at(const tt_run_config *run, const tt_model_config *model, const tt_device *device,
                                 int64_t sequence_len) {
    tt_run_config at = *run; /* a shallow copy: only sequence_len differs, nothing is freed through it */
    at.sequence_len = sequence_len;
    tt_plan plan;
    tt_plan_for_run(&plan, &at, model, device, false);
    tt_param_table params;
    const tt_trainable_spec trainable = tt_trainable_spec_for_run(&at, model, plan.weight_bytes);
    tt_param_table_build_trainable(model, &trainable, &params);
    tt_size_table sizes;
    tt_size_table_configure(&sizes, model, &params, &plan, device->backend);
    tt_context_fit fit = {.sequence_len = sequence_len, .fits = true, .over = TT_TIER_COUNT};
    for (int t = 0; t < TT_TIER_COUNT; t++) fit.peak[t] = sizes.tier_peak[t];
    set_budgets(&fit, &plan, device);
    for (int t = 0; t < TT_TIER_COUNT && fit.fits; t++)
        if (fit.budgeted[t] && fit.peak[t] > fit.budget[t]) {
            fit.fits = false;
            fit.over = (tt_tier)t;
        }
    tt_param_table_free(&params);
    tt_plan_free(&plan);
    return fit;
}

static void print_try(const tt_context_fit *fit, FILE *log) {
    if (!log) return;
    char need[32], budget[32];
    fprintf(log, "  sequence_len %10lld: ", (long long)fit->sequence_len);
    for (int t = 0; t < TT_TIER_COUNT; t++) {
        if (!fit->peak[t]) continue;
        fprintf(log, "%s %s", tt_tier_name((tt_tier)t), tt_format_bytes(fit->peak[t], need, sizeof need));
        if (fit->budgeted[t]) fprintf(log, " of %s", tt_format_bytes(fit->budget[t], budget, sizeof budget));
        fputs("; ", log);
    }
    fprintf(log, "%s\n", fit->fits ? "fits" : "does not fit");
    fflush(log); /* each length can take seconds on the GPU (cuDNN builds its attention graphs to size them) */
}

/* The lengths' step: with sequence parallel a multiple of the degree too (each process an equal share). */
static int64_t length_step(const tt_run_config *run, int64_t step) {
    const int64_t sp = run->sequence_parallel_degree > 1 ? run->sequence_parallel_degree : 1;
    int64_t multiple = step;
    while (multiple % sp != 0) multiple += step;
    return multiple;
}

int64_t tt_longest_sequence_len(const tt_run_config *run, const tt_device *device, int64_t step, FILE *log,
                                tt_context_fit *longest_fit, tt_context_fit *shortest_over) {
    TT_CHECK(step > 0, "a positive step");
    step = length_step(run, step);
    tt_model_config model;
    tt_load_model_config_for_run(run, &model);
    tt_context_fit fit_lo = {0}, fit_hi = {0};
    /* Doubling: lo fits (or is 0), hi does not (or is 0 while none failed yet). */
    int64_t lo = 0, hi = 0;
    for (int64_t len = step; len <= LONGEST_CONTEXT_CEILING; len *= 2) {
        const tt_context_fit fit = tt_context_fit_at(run, &model, device, len);
        print_try(&fit, log);
        if (!fit.fits) {
            hi = len;
            fit_hi = fit;
            break;
        }
        lo = len;
        fit_lo = fit;
    }
    /* Bisecting in multiples of step between lo and hi. */
    while (hi && hi - lo > step) {
        const int64_t mid = lo + (hi - lo) / step / 2 * step;
        const tt_context_fit fit = tt_context_fit_at(run, &model, device, mid);
        print_try(&fit, log);
        if (fit.fits) {
            lo = mid;
            fit_lo = fit;
        } else {
            hi = mid;
            fit_hi = fit;
        }
    }
    tt_model_config_free(&model);
    if (longest_fit) *longest_fit = fit_lo;
    if (shortest_over) *shortest_over = fit_hi;
    return lo;
}

void tt_print_longest_context(const tt_run_config *run, const tt_device *device, int64_t step, FILE *out) {
    step = length_step(run, step);
    fprintf(out,
            "longest sequence_len that fits the budgets (multiples of %lld, micro_batch_size %lld; the plan of "
            "each length as train makes it):\n",
            (long long)step, (long long)run->micro_batch_size);
    tt_context_fit longest, over;
    const int64_t length = tt_longest_sequence_len(run, device, step, out, &longest, &over);
    if (length == 0) {
        char need[32], budget[32];
        tt_die("plan --max-sequence-len: not even sequence_len %lld fits: the %s tier needs %s of its %s budget. "
               "Lower micro_batch_size, choose a memory mode that offloads more, or raise the budget",
               (long long)step, tt_tier_name(over.over), tt_format_bytes(over.peak[over.over], need, sizeof need),
               tt_format_bytes(over.budget[over.over], budget, sizeof budget));
    }
    if (over.sequence_len) {
        char need[32], budget[32];
        fprintf(out, "longest: sequence_len %lld (%lld needs %s on the %s tier, over its %s budget)\n\n",
                (long long)length, (long long)over.sequence_len,
                tt_format_bytes(over.peak[over.over], need, sizeof need), tt_tier_name(over.over),
                tt_format_bytes(over.budget[over.over], budget, sizeof budget));
    } else {
        fprintf(out, "longest: sequence_len %lld (the search's ceiling; every length up to it fits)\n\n",
                (long long)length);
    }
    tt_run_config at = *run;
    at.sequence_len = length;
    tt_print_run_plan(&at, device, out);
}
