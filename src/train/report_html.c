#include "train/report_html.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/check.h"
#include "model/arch.h"
#include "model/safetensors.h"

/* ---- metrics.jsonl as series ---- */

typedef struct series {
    const char *name;  /* the metrics.jsonl field */
    const char *label; /* the legend's */
    double *x, *y;
    int64_t count, capacity;
} series;

static void series_add(series *s, double x, double y) {
    if (s->count == s->capacity) {
        s->capacity = s->capacity ? 2 * s->capacity : 256;
        s->x = tt_xrealloc(s->x, sizeof(double) * (size_t)s->capacity, "report series");
        s->y = tt_xrealloc(s->y, sizeof(double) * (size_t)s->capacity, "report series");
    }
    s->x[s->count] = x;
    s->y[s->count++] = y;
}

enum {
    S_LOSS,
    S_EVAL_LOSS,
    S_LR,
    S_GRAD_NORM,
    S_TOK,
    S_TARGET_TOK,
    S_MEM_FIRST, /* mem_<tier>_peak_bytes, a series per tier, in MiB */
    S_COUNT = S_MEM_FIRST + TT_TIER_COUNT
};

static void read_metrics(const char *output_dir, series *s) {
    static const char *const names[S_MEM_FIRST] = {"loss",      "eval_loss", "lr",
                                                   "grad_norm", "tok_per_s", "target_tok_per_s"};
    static const char *const labels[S_MEM_FIRST] = {"loss",
                                                    "eval loss",
                                                    "learning rate",
                                                    "gradient norm",
                                                    "tokens/s (every position)",
                                                    "tokens/s (trained targets)"};
    static char mem_names[TT_TIER_COUNT][32], mem_labels[TT_TIER_COUNT][32];
    for (int i = 0; i < S_MEM_FIRST; i++) s[i] = (series){.name = names[i], .label = labels[i]};
    for (int t = 0; t < TT_TIER_COUNT; t++) {
        snprintf(mem_names[t], sizeof mem_names[t], "mem_%s_peak_bytes", tt_tier_name((tt_tier)t));
        snprintf(mem_labels[t], sizeof mem_labels[t], "%s peak (MiB)", tt_tier_name((tt_tier)t));
        s[S_MEM_FIRST + t] = (series){.name = mem_names[t], .label = mem_labels[t]};
    }
    char path[4200];
    snprintf(path, sizeof path, "%s/metrics.jsonl", output_dir);
    FILE *f = fopen(path, "r");
    if (!f) return;
    char *line = NULL;
    size_t capacity = 0;
    while (getline(&line, &capacity, f) > 0) {
        json_t *row = json_loads(line, 0, NULL);
        if (!json_is_object(row)) {
            json_decref(row);
            continue;
        }
        const double step = (double)json_integer_value(json_object_get(row, "step"));
        for (int i = 0; i < S_COUNT; i++) {
            json_t *v = json_object_get(row, s[i].name);
            if (!json_is_number(v)) continue;
            const double y = json_number_value(v);
            series_add(&s[i], step, i >= S_MEM_FIRST ? y / 1048576.0 : y);
        }
        json_decref(row);
    }
    free(line);
    fclose(f);
}

/* ---- HTML ---- */

static void put_escaped(FILE *out, const char *text) {
    for (const char *p = text ? text : ""; *p; p++) {
        switch (*p) {
        case '&': fputs("&amp;", out); break;
        case '<': fputs("&lt;", out); break;
        case '>': fputs("&gt;", out); break;
        case '"': fputs("&quot;", out); break;
        default: fputc(*p, out);
        }
    }
}

static const char *const palette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                      "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
#define PALETTE_SIZE ((int)(sizeof palette / sizeof palette[0]))

/* A chart's geometry: the plot area inside the SVG, and the data ranges it maps. */
typedef struct plot {
    double left, top, width, height;
    double x0, x1, y0, y1;
} plot;

static double px(const plot *p, double x) { return p->left + (x - p->x0) / (p->x1 - p->x0) * p->width; }
static double py(const plot *p, double y) { return p->top + p->height - (y - p->y0) / (p->y1 - p->y0) * p->height; }

/* A line chart of some series over the steps: axes with five ticks each, both labelled, a polyline a series (a dot a
 * point where there are few, as evals), a legend, and the points as JSON beside it. */
static void write_chart(FILE *out, const char *id, const char *title, const char *y_label, series *const *s,
                        int count) {
    int64_t points = 0;
    plot p = {.left = 72,
              .top = 12,
              .width = 560,
              .height = 200,
              .x0 = INFINITY,
              .x1 = -INFINITY,
              .y0 = INFINITY,
              .y1 = -INFINITY};
    for (int k = 0; k < count; k++)
        for (int64_t i = 0; i < s[k]->count; i++) {
            if (!isfinite(s[k]->y[i])) continue;
            p.x0 = fmin(p.x0, s[k]->x[i]), p.x1 = fmax(p.x1, s[k]->x[i]);
            p.y0 = fmin(p.y0, s[k]->y[i]), p.y1 = fmax(p.y1, s[k]->y[i]);
            points++;
        }
    if (points == 0) return;
    if (!(p.x1 > p.x0)) p.x0 -= 1, p.x1 += 1;
    if (!(p.y1 > p.y0)) p.y0 -= fabs(p.y0) * 0.1 + 1e-12, p.y1 += fabs(p.y1) * 0.1 + 1e-12;
    const double pad = (p.y1 - p.y0) * 0.05;
    p.y0 = p.y0 >= 0 && p.y0 - pad < 0 ? 0 : p.y0 - pad; /* a quantity that is never negative keeps its axis at 0 */
    p.y1 += pad;
    fprintf(out, "<figure class=\"chart\" id=\"%s\">\n<figcaption>%s</figcaption>\n", id, title);
    fprintf(out,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"660\" height=\"260\" viewBox=\"0 0 660 260\" "
            "role=\"img\" aria-label=\"%s\">\n",
            title);
    fprintf(out, "<rect class=\"plot-area\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\"/>\n", p.left, p.top,
            p.width, p.height);
    for (int t = 0; t <= 4; t++) { /* ticks and grid */
        const double xv = p.x0 + (p.x1 - p.x0) * t / 4, yv = p.y0 + (p.y1 - p.y0) * t / 4;
        fprintf(out,
                "<line class=\"grid\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/><text class=\"tick x-tick\" "
                "x=\"%.1f\" y=\"%.1f\">%.6g</text>\n",
                px(&p, xv), p.top, px(&p, xv), p.top + p.height, px(&p, xv), p.top + p.height + 16, round(xv));
        fprintf(out,
                "<line class=\"grid\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/><text class=\"tick y-tick\" "
                "x=\"%.1f\" y=\"%.1f\">%.4g</text>\n",
                p.left, py(&p, yv), p.left + p.width, py(&p, yv), p.left - 6, py(&p, yv) + 4, yv);
    }
    fprintf(out, "<text class=\"axis-label x-label\" x=\"%.1f\" y=\"252\">step</text>\n", p.left + p.width / 2);
    fprintf(out, "<text class=\"axis-label y-label\" x=\"14\" y=\"%.1f\" transform=\"rotate(-90 14 %.1f)\">%s</text>\n",
            p.top + p.height / 2, p.top + p.height / 2, y_label);
    for (int k = 0; k < count; k++) {
        const char *color = palette[k % PALETTE_SIZE];
        fprintf(out, "<polyline class=\"series\" data-series=\"%s\" stroke=\"%s\" points=\"", s[k]->name, color);
        for (int64_t i = 0; i < s[k]->count; i++)
            if (isfinite(s[k]->y[i])) fprintf(out, "%s%.1f,%.1f", i ? " " : "", px(&p, s[k]->x[i]), py(&p, s[k]->y[i]));
        fputs("\"/>\n", out);
        if (s[k]->count <= 64)
            for (int64_t i = 0; i < s[k]->count; i++)
                if (isfinite(s[k]->y[i]))
                    fprintf(out, "<circle class=\"point\" cx=\"%.1f\" cy=\"%.1f\" r=\"2.5\" fill=\"%s\"/>\n",
                            px(&p, s[k]->x[i]), py(&p, s[k]->y[i]), color);
        fprintf(out,
                "<rect class=\"legend-key\" x=\"%.1f\" y=\"%.1f\" width=\"10\" height=\"10\" fill=\"%s\"/><text "
                "class=\"legend\" x=\"%.1f\" y=\"%.1f\">%s</text>\n",
                p.left + 10, p.top + 8 + 16 * k, color, p.left + 26, p.top + 17 + 16 * k, s[k]->label);
    }
    fputs("</svg>\n<script type=\"application/json\" class=\"chart-data\">{\"x\": \"step\", \"series\": [", out);
    for (int k = 0; k < count; k++) {
        fprintf(out, "%s{\"name\": \"%s\", \"points\": [", k ? ", " : "", s[k]->name);
        for (int64_t i = 0; i < s[k]->count; i++)
            fprintf(out, "%s[%.0f, %.9g]", i ? ", " : "", s[k]->x[i],
                    /* the memory series as metrics.jsonl has them, in bytes */
                    strncmp(s[k]->name, "mem_", 4) == 0 ? s[k]->y[i] * 1048576.0 : s[k]->y[i]);
        fputs("]}", out);
    }
    fputs("]}</script>\n</figure>\n", out);
}

/* Per tier: the estimate's and the measured classes as stacked bars, each total marked. */
static void write_memory(FILE *out, const tt_run_report *r) {
    fputs("<section id=\"memory\">\n<h2>Memory plan</h2>\n<p>Per tier, the size table's estimate (each class's "
          "peak) and the arena's measured class peaks, stacked; the black mark is the tier's peak (the classes "
          "peak at different times, so the stack may pass it).</p>\n",
          out);
    char a[32], b[32];
    for (int t = 0; t < TT_TIER_COUNT; t++) {
        const tt_arena *m = r->measured[t];
        const size_t estimate = r->sizes ? r->sizes->tier_peak[t] : 0, measured = m ? m->peak : 0;
        if (!estimate && !measured) continue;
        size_t widest = estimate > measured ? estimate : measured;
        for (int pass = 0; pass < 2; pass++) {
            size_t stacked = 0;
            for (int c = 0; c < TT_CLASS_COUNT; c++)
                stacked += pass == 0 ? (r->sizes ? r->sizes->class_peak[c][t] : 0) : (m ? m->class_peak[c] : 0);
            if (stacked > widest) widest = stacked;
        }
        fprintf(
            out,
            "<figure class=\"memory-tier\" id=\"memory-%s\">\n<figcaption>%s: estimate %s, measured %s</figcaption>\n",
            tt_tier_name((tt_tier)t), tt_tier_name((tt_tier)t), tt_format_bytes(estimate, a, sizeof a),
            m ? tt_format_bytes(measured, b, sizeof b) : "not measured");
        fputs("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"660\" height=\"84\" viewBox=\"0 0 660 84\">\n", out);
        for (int pass = 0; pass < 2; pass++) {
            if (pass == 1 && !m) continue;
            const double y = 8 + 36 * pass, scale = 540.0 / (double)widest;
            double x = 100;
            fprintf(out, "<text class=\"bar-label\" x=\"4\" y=\"%.0f\">%s</text>\n", y + 15,
                    pass == 0 ? "estimate" : "measured");
            for (int c = 0; c < TT_CLASS_COUNT; c++) {
                const size_t bytes = pass == 0 ? r->sizes->class_peak[c][t] : m->class_peak[c];
                if (!bytes) continue;
                const double w = (double)bytes * scale;
                fprintf(out,
                        "<rect class=\"class-bar\" data-class=\"%s\" data-bytes=\"%zu\" x=\"%.1f\" y=\"%.0f\" "
                        "width=\"%.1f\" height=\"22\" fill=\"%s\"><title>%s: %s</title></rect>\n",
                        tt_class_name((tt_class)c), bytes, x, y, w, palette[c % PALETTE_SIZE],
                        tt_class_name((tt_class)c), tt_format_bytes(bytes, a, sizeof a));
                x += w;
            }
            const double peak_x = 100 + (double)(pass == 0 ? estimate : measured) * scale;
            fprintf(out, "<line class=\"peak\" x1=\"%.1f\" y1=\"%.0f\" x2=\"%.1f\" y2=\"%.0f\"/>\n", peak_x, y - 3,
                    peak_x, y + 25);
        }
        fputs("</svg>\n</figure>\n", out);
    }
    fputs("<p class=\"legend-row\">", out);
    for (int c = 0; c < TT_CLASS_COUNT; c++)
        fprintf(out, "<span class=\"swatch\" style=\"background:%s\"></span>%s ", palette[c % PALETTE_SIZE],
                tt_class_name((tt_class)c));
    fputs("</p>\n</section>\n", out);
}

/* The slots of a set, by name ("q, k, v"), or "-". */
static void put_slot_names(FILE *out, const tt_model_config *model, tt_slot_set set) {
    const tt_layer_slots *slots = tt_layer_slots_for(model);
    bool any = false;
    for (int i = 0; i < TT_SAVED_SLOT_COUNT; i++)
        if ((set >> i) & 1u && slots->slot[i].present) {
            fprintf(out, "%s%s", any ? ", " : "", slots->slot[i].name);
            any = true;
        }
    if (!any) fputs("-", out);
}

static bool same_layer_plan(const tt_layer_plan *a, const tt_layer_plan *b) {
    return a->recompute == b->recompute && a->offloaded == b->offloaded && a->layer_input_tier == b->layer_input_tier &&
           a->saved_activation_tier == b->saved_activation_tier;
}

static void write_residency(FILE *out, const tt_run_report *r) {
    if (!r->plan || !r->model) return;
    const tt_plan *plan = r->plan;
    fputs("<section id=\"residency\">\n<h2>Per-layer residency</h2>\n<table class=\"residency\">\n<tr><th>layers</th>"
          "<th>layer input</th><th>kept on the compute tier</th><th>offloaded</th><th>recomputed in the backward</th>"
          "</tr>\n",
          out);
    const tt_slot_set present = TT_ALL_SLOTS;
    for (int64_t l = 0; l < plan->num_layers;) {
        int64_t last = l;
        while (last + 1 < plan->num_layers && same_layer_plan(&plan->layers[l], &plan->layers[last + 1])) last++;
        const tt_layer_plan *p = &plan->layers[l];
        const tt_slot_set kept = present & ~p->recompute & ~p->offloaded;
        fprintf(out, "<tr class=\"layer-row\" data-first=\"%lld\" data-last=\"%lld\"><td>%lld", (long long)l,
                (long long)last, (long long)l);
        if (last > l) fprintf(out, "-%lld", (long long)last);
        fprintf(out, "</td><td class=\"tier-%s\">%s</td><td class=\"tier-%s\">", tt_tier_name(p->layer_input_tier),
                tt_tier_name(p->layer_input_tier), tt_tier_name(plan->compute_tier));
        put_slot_names(out, r->model, kept);
        fprintf(out, "</td><td class=\"tier-%s\">", tt_tier_name(p->saved_activation_tier));
        if (p->offloaded) fprintf(out, "%s: ", tt_tier_name(p->saved_activation_tier));
        put_slot_names(out, r->model, p->offloaded);
        fputs("</td><td>", out);
        put_slot_names(out, r->model, p->recompute);
        fputs("</td></tr>\n", out);
        l = last + 1;
    }
    fputs("</table>\n</section>\n", out);
}

/* The trace's spans of its last training micro-step (from the last "forward 0" on the compute track to the end of the
 * "backward 0" after it) on three rows: compute, copies to host, copies to the compute tier. */
static void write_timeline(FILE *out, const char *trace_path) {
    json_error_t error;
    json_t *root = json_load_file(trace_path, 0, &error);
    json_t *events = json_object_get(root, "traceEvents");
    if (!json_is_array(events)) {
        fprintf(out, "<p>The trace %s could not be read (%s).</p>\n", trace_path, error.text);
        json_decref(root);
        return;
    }
    static const char *const rows[3] = {"compute", "copies to host", "copies to the compute tier"};
    json_int_t row_tid[3] = {-1, -1, -1};
    size_t i;
    json_t *e;
    json_array_foreach(events, i, e) {
        const char *ph = json_string_value(json_object_get(e, "ph"));
        if (!ph || strcmp(ph, "M") != 0) continue;
        const char *name = json_string_value(json_object_get(json_object_get(e, "args"), "name"));
        for (int k = 0; k < 3; k++)
            if (name && strcmp(name, rows[k]) == 0) row_tid[k] = json_integer_value(json_object_get(e, "tid"));
    }
    /* the window: the last training forward of layer 0 to the end of the backward of layer 0 after it */
    double start = -1, end = -1;
    json_array_foreach(events, i, e) {
        const char *name = json_string_value(json_object_get(e, "name"));
        if (json_integer_value(json_object_get(e, "tid")) == row_tid[0] && name && strcmp(name, "forward 0") == 0)
            start = fmax(start, json_number_value(json_object_get(e, "ts")));
    }
    json_array_foreach(events, i, e) {
        const char *name = json_string_value(json_object_get(e, "name"));
        const double ts = json_number_value(json_object_get(e, "ts")),
                     dur = json_number_value(json_object_get(e, "dur"));
        if (json_integer_value(json_object_get(e, "tid")) == row_tid[0] && name && strcmp(name, "backward 0") == 0 &&
            ts >= start && (end < 0 || ts + dur < end))
            end = ts + dur;
    }
    if (start < 0 || !(end > start)) {
        fputs("<p>The trace holds no training step to draw.</p>\n", out);
        json_decref(root);
        return;
    }
    fprintf(out,
            "<figure class=\"timeline\" id=\"timeline\">\n<figcaption>The last micro-step of the trace (%.2f ms), "
            "from %s</figcaption>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"760\" height=\"110\" "
            "viewBox=\"0 0 760 110\">\n",
            (end - start) / 1000.0, trace_path);
    const double left = 180, width = 570, scale = width / (end - start);
    for (int k = 0; k < 3; k++)
        fprintf(out, "<text class=\"bar-label\" x=\"4\" y=\"%d\">%s</text>\n", 20 + 30 * k, rows[k]);
    int spans = 0;
    json_array_foreach(events, i, e) {
        const char *ph = json_string_value(json_object_get(e, "ph")),
                   *name = json_string_value(json_object_get(e, "name"));
        if (!ph || strcmp(ph, "X") != 0) continue;
        const double ts = json_number_value(json_object_get(e, "ts")),
                     dur = json_number_value(json_object_get(e, "dur"));
        if (ts < start || ts > end) continue;
        const json_int_t tid = json_integer_value(json_object_get(e, "tid"));
        for (int k = 0; k < 3; k++)
            if (tid == row_tid[k]) {
                fprintf(out,
                        "<rect class=\"span span-%d\" x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"20\" fill=\"%s\">"
                        "<title>",
                        k, left + (ts - start) * scale, 6 + 30 * k, fmax(dur * scale, 0.5), palette[k]);
                put_escaped(out, name);
                fprintf(out, ": %.3f ms</title></rect>\n", dur / 1000.0);
                spans++;
            }
    }
    fprintf(out, "</svg>\n<p>%d spans.</p>\n</figure>\n", spans);
    json_decref(root);
}

static void write_copies(FILE *out, const tt_run_report *r) {
    fputs("<section id=\"copies\">\n<h2>Copies between tiers</h2>\n", out);
    char a[32], b[32];
    if (r->copied_to_host == 0 && r->copied_to_device == 0) {
        fputs("<p>No copies: every tensor of the step stayed on the compute tier.</p>\n", out);
    } else {
        /* the waits are measured apart from the copies: with copies of microseconds they may pass the copy time */
        const double hidden = r->copy_seconds > 0 ? fmax(0.0, 1.0 - r->exposed_seconds / r->copy_seconds) : 1.0;
        fprintf(
            out,
            "<p class=\"copy-summary\" data-hidden=\"%.6f\">%s to host, %s back; the copy streams were busy %.3f s, "
            "of which compute hid <strong>%.1f%%</strong> (it waited %.3f s for copies).</p>\n",
            hidden, tt_format_bytes(r->copied_to_host, a, sizeof a), tt_format_bytes(r->copied_to_device, b, sizeof b),
            r->copy_seconds, 100.0 * hidden, r->exposed_seconds);
    }
    if (r->trace_path) write_timeline(out, r->trace_path);
    else fputs("<p>Set <code>trace: FILE</code> to see the last micro-step's copies on a timeline here.</p>\n", out);
    fputs("</section>\n", out);
}

static const char style[] =
    "body{font-family:system-ui,sans-serif;margin:24px;color:#222;max-width:1400px}"
    "h1{font-size:22px}h2{font-size:18px;margin-top:28px}"
    "figure{display:inline-block;margin:8px 12px 8px 0;vertical-align:top}figcaption{font-weight:600;margin-bottom:4px}"
    ".plot-area{fill:#fafafa;stroke:#999}.grid{stroke:#e4e4e4}.tick{font-size:11px;fill:#555}"
    ".x-tick{text-anchor:middle}.y-tick{text-anchor:end}.axis-label{font-size:12px;fill:#222;text-anchor:middle}"
    ".series{fill:none;stroke-width:1.6}.legend{font-size:11px}.peak{stroke:#000;stroke-width:2}"
    ".bar-label{font-size:12px}.swatch{display:inline-block;width:10px;height:10px;margin:0 4px 0 12px}"
    "table.residency{border-collapse:collapse;font-size:13px}table.residency td,table.residency th{border:1px solid "
    "#ccc;padding:3px 8px;text-align:left}.tier-gpu{background:#e8f1fb}.tier-pinned{background:#fff1e0}"
    ".tier-host{background:#eaf7ea}.tier-disk{background:#f6e8f6}";

void tt_write_run_report(const tt_run_report *r) {
    series s[S_COUNT];
    read_metrics(r->output_dir, s);
    char *page = NULL;
    size_t page_size = 0;
    FILE *out = open_memstream(&page, &page_size);
    if (!out) tt_die("out of host memory writing the run report");
    time_t now = time(NULL);
    char when[64];
    strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", localtime(&now));
    fputs("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>tiertrain: ", out);
    put_escaped(out, r->output_dir);
    fprintf(out, "</title>\n<style>%s</style>\n</head>\n<body>\n<h1>tiertrain run <code>", style);
    put_escaped(out, r->output_dir);
    fputs("</code></h1>\n<p class=\"summary\">", out);
    put_escaped(out, r->description);
    const int64_t steps = s[S_LOSS].count;
    fprintf(out, "<br>%lld steps logged", (long long)steps);
    if (steps) fprintf(out, "; last loss %.4f at step %.0f", s[S_LOSS].y[steps - 1], s[S_LOSS].x[steps - 1]);
    if (s[S_EVAL_LOSS].count) fprintf(out, "; last eval loss %.4f", s[S_EVAL_LOSS].y[s[S_EVAL_LOSS].count - 1]);
    fprintf(out, ". %s at %s.</p>\n", r->final ? "Written at the end of the run" : "Written during the run", when);

    fputs("<section id=\"training\">\n<h2>Training</h2>\n", out);
    series *loss[2] = {&s[S_LOSS], &s[S_EVAL_LOSS]}, *lr[1] = {&s[S_LR]}, *norm[1] = {&s[S_GRAD_NORM]};
    series *rate[2] = {&s[S_TOK], &s[S_TARGET_TOK]}, *memory[TT_TIER_COUNT];
    int memory_count = 0;
    for (int t = 0; t < TT_TIER_COUNT; t++)
        if (s[S_MEM_FIRST + t].count) memory[memory_count++] = &s[S_MEM_FIRST + t];
    write_chart(out, "chart-loss", "Loss", "loss", loss, s[S_EVAL_LOSS].count ? 2 : 1);
    write_chart(out, "chart-lr", "Learning rate", "learning rate", lr, 1);
    write_chart(out, "chart-grad-norm", "Gradient norm", "gradient norm", norm, 1);
    write_chart(out, "chart-tokens", "Tokens per second", "tokens/s", rate, 2);
    if (memory_count) write_chart(out, "chart-memory", "Memory peaks", "MiB", memory, memory_count);
    fputs("</section>\n", out);
    if (r->sizes) write_memory(out, r);
    write_residency(out, r);
    write_copies(out, r);
    fputs("</body>\n</html>\n", out);
    fclose(out);
    char path[4200];
    snprintf(path, sizeof path, "%s/report.html", r->output_dir);
    tt_write_file_atomic(path, page, page_size);
    free(page);
    for (int i = 0; i < S_COUNT; i++) {
        free(s[i].x);
        free(s[i].y);
    }
}
