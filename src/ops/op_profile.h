/* Where a step's time goes, by op class: each op the step program runs through the backend's wrappers (backend.h)
 * is a span between two marks on the backend's timeline (device events on the compute stream of a GPU, the host
 * clock on the CPU), added to its class. What no op covers (the step's time less every class) is the compute
 * stream's gaps: host work between launches, the host waiting (an offloaded optimizer's update, a collective the
 * compute stream does not wait for). Only the thread that enabled it is timed. Off unless a run asks for it (profile:
 * true): then each op costs two marks, and the host reads the marks of old spans every TT_OP_PROFILE_PENDING spans,
 * so it runs at most that many ops ahead of the device. */
#ifndef TT_OPS_OP_PROFILE_H
#define TT_OPS_OP_PROFILE_H

#include <stdint.h>

#include "ops/backend.h"

/* The name of a class in tables and metrics.jsonl ("gemm", "attention_forward", ...). */
const char *tt_op_class_name(tt_op_class op_class);
/* Its label in tables ("GEMMs", "attention forward", ...). */
const char *tt_op_class_label(tt_op_class op_class);

/* Starts profiling a backend's ops (allocates its tt_op_profile, which tt_backend_destroy frees; nothing if it already
 * has one). */
void tt_op_profile_enable(tt_backend *backend);
void tt_op_profile_disable(tt_backend *backend);
/* Reads every pending span (waiting for the device to pass them), gives the seconds and calls of each class since
 * the last take and starts counting again. */
void tt_op_profile_take(const tt_backend *backend, double seconds[TT_OP_CLASS_COUNT], int64_t calls[TT_OP_CLASS_COUNT]);

#endif
