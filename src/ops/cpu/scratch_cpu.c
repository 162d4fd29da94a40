/* The CPU ops' scratch area: a stack inside a block the step program reserved in the arena, one
 * per backend context. */
#include <stdlib.h>

#include "core/check.h"
#include "ops/cpu/ops_cpu.h"

#define SCRATCH_ALIGN ((size_t)64)
/* Mirrors TT_CPU_ROW_BLOCK and TT_CPU_SUMSQ_BLOCK in ops_cpu_impl.h. */
#define COLUMN_SUM_ROWS 128
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
    const int64_t N = s->tokens, hd = a->head_dim;
    const int64_t q_dim = a->num_heads * hd, kv_dim = a->num_kv_heads * hd;
    int64_t widest = s->hidden;
    if (q_dim > widest) widest = q_dim;
    if (kv_dim > widest) widest = kv_dim;
    if (s->intermediate > widest) widest = s->intermediate;
    /* column sums (norm weight and bias gradients): [ceil(rows / 128), columns] doubles */
    size_t need = aligned_bytes((N + COLUMN_SUM_ROWS - 1) / COLUMN_SUM_ROWS * widest, sizeof(double));
    need = max_size(need, aligned_bytes((N * a->num_heads + COLUMN_SUM_ROWS - 1) / COLUMN_SUM_ROWS * hd, sizeof(double)));
    /* attention forward: one row of scores per thread; backward: D[B, Hq, T] */
    need = max_size(need, aligned_bytes((int64_t)threads * a->seq_len, sizeof(float)));
    need = max_size(need, aligned_bytes(a->batch * a->num_heads * a->seq_len, sizeof(float)));
    /* LM head: one loss per row of a chunk; sum of squares: one per block */
    need = max_size(need, aligned_bytes(s->loss_chunk, sizeof(double)));
    need = max_size(need, aligned_bytes((s->gradient_numel + SUM_SQUARES_BLOCK - 1) / SUM_SQUARES_BLOCK, sizeof(double)));
    return need;
}
