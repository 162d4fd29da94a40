#include "core/trace.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/check.h"

/* Track names become thread ids: the viewer draws one row per (pid, tid). */
#define MAX_TRACKS 16

struct tt_trace {
    FILE *out;
    char path[4096], partial[4200];
    double origin;
    const char *tracks[MAX_TRACKS];
    int track_count;
    long events;
};

double tt_monotonic_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

tt_trace *tt_trace_open(const char *path) {
    if (!path) return NULL;
    tt_trace *t = tt_xcalloc(1, sizeof *t, "the trace");
    snprintf(t->path, sizeof t->path, "%s", path);
    snprintf(t->partial, sizeof t->partial, "%s.partial", path);
    t->out = fopen(t->partial, "w");
    if (!t->out) tt_die("trace: cannot write '%s': %s; pick a writable path for trace", t->partial, strerror(errno));
    t->origin = tt_monotonic_seconds();
    fputs("{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n", t->out);
    return t;
}

static int track_id(tt_trace *t, const char *track) {
    for (int i = 0; i < t->track_count; i++)
        if (strcmp(t->tracks[i], track) == 0) return i + 1;
    TT_CHECK(t->track_count < MAX_TRACKS, "more than %d trace tracks", MAX_TRACKS);
    t->tracks[t->track_count++] = track;
    /* name the row once */
    fprintf(t->out,
            "%s{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": 1, \"tid\": %d, \"args\": {\"name\": \"%s\"}}",
            t->events++ ? ",\n" : "", t->track_count, track);
    return t->track_count;
}

void tt_trace_span(tt_trace *t, const char *track, const char *name, double start, double end) {
    if (!t) return;
    const int tid = track_id(t, track);
    fprintf(t->out, "%s{\"ph\": \"X\", \"name\": \"%s\", \"pid\": 1, \"tid\": %d, \"ts\": %.3f, \"dur\": %.3f}",
            t->events++ ? ",\n" : "", name, tid, (start - t->origin) * 1e6, (end - start) * 1e6);
}

void tt_trace_counter(tt_trace *t, const char *name, double time, const char *const *series, const double *values,
                      int count) {
    if (!t) return;
    fprintf(t->out, "%s{\"ph\": \"C\", \"name\": \"%s\", \"pid\": 1, \"ts\": %.3f, \"args\": {",
            t->events++ ? ",\n" : "", name, (time - t->origin) * 1e6);
    for (int i = 0; i < count; i++) fprintf(t->out, "%s\"%s\": %.0f", i ? ", " : "", series[i], values[i]);
    fputs("}}", t->out);
}

void tt_trace_close(tt_trace *t) {
    if (!t) return;
    fputs("\n]}\n", t->out);
    if (fclose(t->out) != 0) tt_die("trace: cannot finish '%s': %s", t->partial, strerror(errno));
    if (rename(t->partial, t->path) != 0)
        tt_die("trace: cannot rename '%s' to '%s': %s", t->partial, t->path, strerror(errno));
    free(t);
}
