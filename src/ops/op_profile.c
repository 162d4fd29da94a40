/* Op classes timed on the backend's timeline (op_profile.h). */
#include "ops/op_profile.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "ops/backend.h"

_Static_assert(2 * TT_OP_PROFILE_PENDING <= TT_TIMELINE_WINDOW / 2,
               "pending spans leave half the timeline's window to the trace's marks");

/* Each class's name in metrics.jsonl and its label in tables. */
static const char *const class_names[TT_OP_CLASS_COUNT][2] = {
    [TT_OP_GEMM] = {"gemm", "GEMMs"},
    [TT_OP_ATTENTION_FORWARD] = {"attention_forward", "attention forward"},
    [TT_OP_ATTENTION_BACKWARD] = {"attention_backward", "attention backward"},
    [TT_OP_LM_HEAD_LOSS] = {"lm_head_loss", "LM head and loss"},
    [TT_OP_ELEMENTWISE] = {"norms_elementwise", "norms and element-wise"},
    [TT_OP_OPTIMIZER] = {"optimizer", "optimizer"},
    [TT_OP_COPY_WAIT] = {"copies_waited", "copies and collectives waited for"},
};

const char *tt_op_class_name(tt_op_class op_class) { return class_names[op_class][0]; }
const char *tt_op_class_label(tt_op_class op_class) { return class_names[op_class][1]; }

void tt_op_profile_enable(tt_backend *backend) {
    if (backend->profile) return;
    backend->profile = tt_xcalloc(1, sizeof(tt_op_profile), "op profile");
    backend->profile->owner = pthread_self();
}

void tt_op_profile_disable(tt_backend *backend) {
    free(backend->profile);
    backend->profile = NULL;
}

/* 0 (not timed) on another thread than the one that enabled the profile: the spans are its stream's */
uint64_t tt_op_profile_begin(const tt_backend *backend) {
    if (!backend->profile || !pthread_equal(pthread_self(), backend->profile->owner)) return 0;
    return tt_backend_timestamp(backend);
}

/* Reads the oldest `count` pending spans into the sums. */
static void read_spans(const tt_backend *backend, int count) {
    tt_op_profile *p = backend->profile;
    for (int i = 0; i < count; i++) {
        const double start = tt_backend_timestamp_seconds(backend, p->start[i]);
        const double end = tt_backend_timestamp_seconds(backend, p->end[i]);
        if (isfinite(start) && isfinite(end) && end > start) p->seconds[p->op_class[i]] += end - start;
        p->calls[p->op_class[i]]++;
    }
    p->pending -= count;
    memmove(p->start, p->start + count, (size_t)p->pending * sizeof p->start[0]);
    memmove(p->end, p->end + count, (size_t)p->pending * sizeof p->end[0]);
    memmove(p->op_class, p->op_class + count, (size_t)p->pending);
}

void tt_op_profile_end(const tt_backend *backend, tt_op_class op_class, uint64_t start_mark) {
    tt_op_profile *p = backend->profile;
    if (!p || !start_mark) return;
    /* full: read the older half, whose ops the device has most likely finished */
    if (p->pending == TT_OP_PROFILE_PENDING) read_spans(backend, TT_OP_PROFILE_PENDING / 2);
    p->start[p->pending] = start_mark;
    p->end[p->pending] = tt_backend_timestamp(backend);
    p->op_class[p->pending] = (unsigned char)op_class;
    p->pending++;
}

void tt_op_profile_take(const tt_backend *backend, double seconds[TT_OP_CLASS_COUNT],
                        int64_t calls[TT_OP_CLASS_COUNT]) {
    tt_op_profile *p = backend->profile;
    if (!p) {
        memset(seconds, 0, TT_OP_CLASS_COUNT * sizeof seconds[0]);
        memset(calls, 0, TT_OP_CLASS_COUNT * sizeof calls[0]);
        return;
    }
    read_spans(backend, p->pending);
    memcpy(seconds, p->seconds, sizeof p->seconds);
    memcpy(calls, p->calls, sizeof p->calls);
    memset(p->seconds, 0, sizeof p->seconds);
    memset(p->calls, 0, sizeof p->calls);
}
