/* A Chrome / Perfetto trace (the JSON "traceEvents" format; open it in ui.perfetto.dev or
 * chrome://tracing): spans on named tracks (compute, copies) and counters (bytes per tier over
 * time). Written to path.partial and renamed when closed, so a trace file is always whole. */
#ifndef TT_CORE_TRACE_H
#define TT_CORE_TRACE_H

typedef struct tt_trace tt_trace;

/* NULL path: no trace (every call below accepts a NULL trace and does nothing). */
tt_trace *tt_trace_open(const char *path);
void tt_trace_close(tt_trace *trace);

/* Times are CLOCK_MONOTONIC seconds (the backends' timelines convert device events to it); the
 * file counts from the trace's opening. */
double tt_monotonic_seconds(void);

/* A span [start, end) named name on track (one row per track in the viewer). */
void tt_trace_span(tt_trace *trace, const char *track, const char *name, double start, double end);

/* Counter series at time t: name is the counter, series[i] its lines, values[i] their values. */
void tt_trace_counter(tt_trace *trace, const char *name, double t, const char *const *series, const double *values,
                      int count);

#endif
