/* Unit hooks: how the memory mechanisms (offload stores, weight streams, optimizer offload) take part in a
 * step without the step program naming them. A step is a fixed walk over the optimizer units (the embedding,
 * unit 0; decoder layer l, unit l + 1; the final norm with the LM head, unit L + 1): forward 0..L+1, then
 * backward L+1..0. At each point below the step program calls every hook of the run, in the order they were
 * added for the BEFORE points and in reverse order for the AFTER points (as destructors unwind), so that a
 * mechanism added later is nested inside the ones added before it.
 *
 *   BEFORE_FORWARD(u)    unit u's forward is about to be issued: its weights and the buffers it writes
 *                        must be ready (the head's forward and backward are one: u = L + 1 gets BEFORE_FORWARD,
 *                        BEFORE_GRADIENTS and AFTER_BACKWARD, no AFTER_FORWARD or BEFORE_BACKWARD).
 *   AFTER_FORWARD(u)     unit u's forward has been issued: what it wrote may leave.
 *   BEFORE_BACKWARD(u)   unit u's backward, its recompute included, is about to be issued: what it reads
 *                        must come back.
 *   BEFORE_GRADIENTS(u)  the first op that adds into unit u's gradients is about to be issued.
 *   AFTER_BACKWARD(u)    unit u's backward has been issued: its gradients are final for this micro-batch.
 * `train` is false in an evaluation forward (nothing is kept or offloaded then). A hook issues work on the
 * backend's streams and copy engine, ordered by events; it allocates nothing. */
#ifndef TT_MEMORY_UNIT_HOOKS_H
#define TT_MEMORY_UNIT_HOOKS_H

#include <stdbool.h>
#include <stdint.h>

typedef enum tt_hook_point {
    TT_HOOK_BEFORE_FORWARD,
    TT_HOOK_AFTER_FORWARD,
    TT_HOOK_BEFORE_BACKWARD,
    TT_HOOK_BEFORE_GRADIENTS,
    TT_HOOK_AFTER_BACKWARD,
} tt_hook_point;

typedef struct tt_unit_hook {
    const char *name; /* for the trace: a BEFORE_BACKWARD call shows as "<name> <layer>" (waits for copies) */
    void (*call)(void *ctx, tt_hook_point point, int64_t unit, bool train);
    void *ctx;
} tt_unit_hook;

/* The most hooks a run has: two offload stores, optimizer offload, a weight stream, data parallel's gradient sums and
 * zero_stage 3's weights (7), with room for one more. */
#define TT_MAX_UNIT_HOOKS 8

#endif
