/* output_dir/report.html: the run as a page to look at, one self-contained file (inline SVG and CSS, no script runs,
 * nothing fetched), written during the run (at each eval and checkpoint) and at its end:
 *  - charts over the steps of metrics.jsonl: loss with the eval loss, learning rate, gradient norm, tokens per second
 *    (every position and the trained targets) and each tier's memory peak; each chart holds its points as JSON
 *    (<script type="application/json" class="chart-data">, data only) beside the drawing, values as metrics.jsonl
 *    has them;
 *  - the memory plan: per tier, the size table's estimate and the arenas' measured peaks as bars of the tensor
 *    classes stacked, each tier's peak marked;
 *  - the per-layer residency: where each layer's input lives, which of its saved slots are kept on the compute tier,
 *    offloaded (to which tier) or recomputed;
 *  - the copies: bytes each way, the copy streams' busy time and the share of it compute hid; with a trace
 *    (trace: FILE) the last micro-step's compute and copy spans on a timeline. */
#ifndef TT_TRAIN_REPORT_HTML_H
#define TT_TRAIN_REPORT_HTML_H

#include <stdbool.h>
#include <stddef.h>

#include "core/arena.h"
#include "memory/plan.h"
#include "memory/size_table.h"
#include "model/model_config.h"

typedef struct tt_run_report {
    const char *output_dir;  /* report.html goes here; metrics.jsonl is read from here */
    const char *description; /* the run in a line: model, device, what trains */
    const tt_model_config *model;
    const tt_plan *plan;
    const tt_size_table *sizes;
    const tt_arena *measured[TT_TIER_COUNT]; /* the arenas (NULL where a tier has none) */
    /* copies so far (the backend's copy_stats) */
    size_t copied_to_host, copied_to_device;
    double copy_seconds, exposed_seconds;
    const char *trace_path; /* a closed trace file to draw the timeline from, or NULL */
    bool final;             /* the run ended (else: written during it) */
} tt_run_report;

/* Writes output_dir/report.html (whole: a temporary file renamed into place). */
void tt_write_run_report(const tt_run_report *report);

#endif
