/* Arenas: one per tier, one allocation at start, tensors carved out of it.
 *
 * An arena is a stack. Persistent tensors (weights, optimizer state) are pushed
 * first; per-step tensors are pushed and popped in the step program's order,
 * which is known before the step starts (forward 0..L-1, backward L-1..0), so a
 * stack is exact and never fragments. Every push is tagged with a tensor class so
 * the arena keeps per-class "now" and "peak" byte counts: the measured side of
 * the size table. Nothing allocates from the system inside a step. */
#ifndef TT_CORE_ARENA_H
#define TT_CORE_ARENA_H

#include <stdbool.h>
#include <stddef.h>

#include "core/tier.h"

typedef struct tt_arena_record {
    size_t offset; /* where the allocation starts */
    size_t bytes;  /* aligned size */
    tt_class cls;
} tt_arena_record;

typedef struct tt_arena {
    tt_tier tier;
    unsigned char *base; /* the one block, TT_ALIGNMENT-aligned */
    size_t capacity;     /* bytes reserved at start (from the size table) */
    size_t budget;       /* the user's limit for this tier; capacity <= budget */
    size_t used;         /* top of the stack */
    size_t peak;         /* high-water mark of used */
    size_t class_now[TT_CLASS_COUNT];
    size_t class_peak[TT_CLASS_COUNT];
    tt_arena_record *records; /* one per live allocation, in push order */
    int record_count, record_capacity;
    void (*release_block)(void *owner, void *base); /* how base is returned to the system */
    void *owner;                                    /* release_block's first argument (a backend's context) */
    bool measuring; /* tt_arena_init_measure: no memory behind base, pushes only count */
} tt_arena;

/* Takes a block that the backend allocated for this tier (may be NULL when capacity is 0), and how
 * to give it back: release_block(owner, base). */
void tt_arena_init(tt_arena *arena, tt_tier tier, void *base, size_t capacity, size_t budget,
                   void (*release_block)(void *owner, void *base), void *owner);
void tt_arena_destroy(tt_arena *arena);

/* An arena with no memory behind it: pushes and pops keep the same accounting (now, peak, per
 * class) and hand out addresses at the same offsets from a fake, page-aligned base that is never
 * dereferenced. The step program's dry run (train/measure.h) runs on such arenas to find the peaks
 * that the real arenas are then reserved with. No capacity: the dry run finds the need. */
void tt_arena_init_measure(tt_arena *arena, tt_tier tier);

/* Pushes `bytes` (rounded up to TT_ALIGNMENT). Running out is a user-facing error that names
 * the tier, the bytes asked, what for, and the budget. */
void *tt_arena_push(tt_arena *arena, size_t bytes, tt_class cls, const char *what);

/* Marks and pops: everything pushed after the mark is released. */
typedef int tt_arena_mark;
tt_arena_mark tt_arena_get_mark(const tt_arena *arena);
void tt_arena_pop_to(tt_arena *arena, tt_arena_mark mark);

/* Forgets the peaks (kept: now) so a later phase can be measured on its own. */
void tt_arena_reset_peaks(tt_arena *arena);

/* Host arena blocks: aligned malloc. tt_host_block_release is tt_host_block_free as an arena's
 * release_block (owner unused). */
void *tt_host_block_alloc(size_t bytes);
void tt_host_block_free(void *base);
void tt_host_block_release(void *owner, void *base);

#endif
