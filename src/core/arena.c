#include "core/arena.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "core/check.h"

void tt_arena_init(tt_arena *arena, tt_tier tier, void *base, size_t capacity, size_t budget,
                   void (*release_block)(void *owner, void *base), void *owner) {
    memset(arena, 0, sizeof(*arena));
    arena->tier = tier;
    arena->base = base;
    arena->capacity = capacity;
    arena->budget = budget;
    arena->release_block = release_block;
    arena->owner = owner;
    TT_CHECK(((uintptr_t)base % TT_ALIGNMENT) == 0, "arena block for tier %s is not aligned", tt_tier_name(tier));
}

/* Far from any real mapping and different per tier, so that a measuring address is never mistaken
 * for memory; page-aligned like a host block, as the disk buffers want. */
#define TT_MEASURE_BASE ((uintptr_t)1 << 44)

void tt_arena_init_measure(tt_arena *arena, tt_tier tier) {
    tt_arena_init(arena, tier, NULL, SIZE_MAX / 4, SIZE_MAX / 4, NULL, NULL);
    arena->measuring = true;
}

void tt_arena_destroy(tt_arena *arena) {
    if (arena->base && arena->release_block) arena->release_block(arena->owner, arena->base);
    free(arena->records);
    memset(arena, 0, sizeof(*arena));
}

void *tt_arena_push(tt_arena *arena, size_t bytes, tt_class cls, const char *what) {
    size_t aligned = tt_align_up(bytes);
    if (aligned > arena->capacity - arena->used) {
        char asked[32], used[32], cap[32], budget[32];
        tt_die("the %s tier is full: %s asked for %s with %s of %s in use (budget %s); "
               "raise the %s budget, lower sequence_len or micro_batch_size, or enable "
               "gradient_checkpointing",
               tt_tier_name(arena->tier), what, tt_format_bytes(aligned, asked, sizeof asked),
               tt_format_bytes(arena->used, used, sizeof used), tt_format_bytes(arena->capacity, cap, sizeof cap),
               tt_format_bytes(arena->budget, budget, sizeof budget), tt_tier_name(arena->tier));
    }
    if (arena->record_count == arena->record_capacity) {
        arena->record_capacity = arena->record_capacity ? 2 * arena->record_capacity : 256;
        arena->records =
            tt_xrealloc(arena->records, sizeof(tt_arena_record) * (size_t)arena->record_capacity, "arena records");
    }
    tt_arena_record *r = &arena->records[arena->record_count++];
    r->offset = arena->used;
    r->bytes = aligned;
    r->cls = cls;
    void *p = arena->measuring ? (void *)(TT_MEASURE_BASE * (uintptr_t)(arena->tier + 1) + arena->used)
                               : arena->base + arena->used;
    arena->used += aligned;
    if (arena->used > arena->peak) arena->peak = arena->used;
    arena->class_now[cls] += aligned;
    if (arena->class_now[cls] > arena->class_peak[cls]) arena->class_peak[cls] = arena->class_now[cls];
    return p;
}

tt_arena_mark tt_arena_get_mark(const tt_arena *arena) { return arena->record_count; }

void tt_arena_pop_to(tt_arena *arena, tt_arena_mark mark) {
    TT_CHECK(mark >= 0 && mark <= arena->record_count, "bad arena mark %d (have %d records)", mark,
             arena->record_count);
    while (arena->record_count > mark) {
        tt_arena_record *r = &arena->records[--arena->record_count];
        arena->class_now[r->cls] -= r->bytes;
        arena->used = r->offset;
    }
}

void tt_arena_reset_peaks(tt_arena *arena) {
    arena->peak = arena->used;
    memcpy(arena->class_peak, arena->class_now, sizeof(arena->class_peak));
}

void *tt_host_block_alloc(size_t bytes) {
    if (bytes == 0) return NULL;
    /* page-aligned: O_DIRECT disk IO and page-locking want whole pages. Large blocks (offloaded
     * activations, optimizer offload's master weights and moments, streamed here by the CPU AdamW and
     * the copy engine) are asked for in 2 MiB huge pages: the CPU's prefetchers stop at page
     * boundaries, and fewer TLB misses on a sweep over tens of GB */
    const size_t page = bytes >= ((size_t)64 << 20) ? (size_t)2 << 20 : 4096;
    const size_t whole = (bytes + page - 1) / page * page;
    void *p = aligned_alloc(page, whole);
#ifdef MADV_HUGEPAGE
    if (p && page > 4096) (void)madvise(p, whole, MADV_HUGEPAGE); /* a hint: without it, plain pages */
#endif
    if (!p) {
        char b[32];
        tt_die("out of host memory: could not reserve the host arena of %s; lower sequence_len, "
               "micro_batch_size or the model size",
               tt_format_bytes(bytes, b, sizeof b));
    }
    return p;
}

void tt_host_block_free(void *base) { free(base); }

void tt_host_block_release(void *owner, void *base) {
    (void)owner;
    tt_host_block_free(base);
}
