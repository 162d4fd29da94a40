/* The CPU ops' scratch area: a stack inside a block the step program reserved in the arena, one
 * per backend context. */
#include <stdlib.h>

#include "core/check.h"
#include "ops/cpu/gemm_cpu.h"
#include "ops/cpu/ops_cpu.h"

#define SCRATCH_ALIGN ((size_t)64)
/* Mirrors TT_CPU_SUMSQ_BLOCK in ops_cpu_impl.h. */
#define SUM_SQUARES_BLOCK 4096

void tt_cpu_scratch_set(tt_cpu_scratch *area, void *base, size_t bytes) {
    area->base = base;
    area->bytes = bytes;
    area->used = 0;
}

void *tt_cpu_scratch_take(tt_cpu_scratch *area, size_t bytes, const char *what) {
    if (!area || !area->base) return tt_xmalloc(bytes, what);
    size_t aligned = (bytes + SCRATCH_ALIGN - 1) & ~(SCRATCH_ALIGN - 1);
    TT_CHECK(aligned <= area->bytes - area->used,
             "CPU op scratch too small for %s: %zu bytes asked, %zu of %zu in use (tt_cpu_scratch_bytes is wrong)",
             what, aligned, area->used, area->bytes);
    void *p = area->base + area->used;
    area->used += aligned;
    return p;
}

void tt_cpu_scratch_give(tt_cpu_scratch *area, void *pointer) {
    unsigned char *p = pointer;
    if (area && area->base && p >= area->base && p < area->base + area->bytes) {
        area->used = (size_t)(p - area->base);
        return;
    }
    free(pointer);
}

static size_t aligned_bytes(int64_t count, size_t element) {
    if (count < 1) count = 1;
    return ((size_t)count * element + SCRATCH_ALIGN - 1) & ~(SCRATCH_ALIGN - 1);
}

static size_t max_size(size_t a, size_t b) { return a > b ? a : b; }

size_t tt_cpu_scratch_bytes(const tt_scratch_shape *s, int threads) {
    const tt_attention_shape *a = &s->attention;
    /* attention forward: one row of scores per thread; backward: D[B, Hq, T] */
    size_t need = aligned_bytes((int64_t)threads * a->seq_len, sizeof(float));
    need = max_size(need, aligned_bytes(a->batch * a->num_heads * a->seq_len, sizeof(float)));
    /* sum of squares: one per block */
    need =
        max_size(need, aligned_bytes((s->gradient_numel + SUM_SQUARES_BLOCK - 1) / SUM_SQUARES_BLOCK, sizeof(double)));
    /* the LM head's GEMMs run while it holds one loss per row of a chunk; the linear layers' with nothing else */
    need = max_size(need, aligned_bytes(s->loss_chunk, sizeof(double)) + tt_cpu_gemm_scratch_bytes(threads));
    return need;
}
