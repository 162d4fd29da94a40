/* The Jinja interpreter's arena (jinja_value.h): a render allocates thousands of small values and frees them all at
 * its end. Values are bump-allocated from 64 KiB chunks; a freed arena's chunks wait in a pool (up to 64 MiB) for the
 * next render, so that chat masks, which render a conversation once a turn, do not fault fresh pages in each time.
 * Memory handed out is zeroed, as calloc's. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "data/jinja_value.h"

enum { CHUNK_BYTES = 64 << 10, ALIGN = 16, POOL_CHUNKS = 1024 };

/* Under AddressSanitizer (the fuzz targets, the sanitizer CI build) each value is its own block, so that a value
 * overrun hits a redzone instead of its neighbour in a chunk. */
#if defined(__SANITIZE_ADDRESS__)
#define VALUE_BLOCKS 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define VALUE_BLOCKS 1
#endif
#endif
#ifndef VALUE_BLOCKS
#define VALUE_BLOCKS 0
#endif

static struct {
    pthread_mutex_t lock;
    void *chunks[POOL_CHUNKS];
    int count;
} pool = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void *take_chunk(void) {
    void *chunk = NULL;
    pthread_mutex_lock(&pool.lock);
    if (pool.count > 0) chunk = pool.chunks[--pool.count];
    pthread_mutex_unlock(&pool.lock);
    if (chunk) memset(chunk, 0, CHUNK_BYTES);
    else chunk = tt_xcalloc(1, CHUNK_BYTES, "jinja values");
    return chunk;
}

static void give_chunk(void *chunk) {
    pthread_mutex_lock(&pool.lock);
    if (pool.count < POOL_CHUNKS) {
        pool.chunks[pool.count++] = chunk;
        chunk = NULL;
    }
    pthread_mutex_unlock(&pool.lock);
    free(chunk);
}

static void remember(void ***list, size_t *count, size_t *cap, void *p) {
    if (*count == *cap) {
        *cap = *cap ? *cap * 2 : 64;
        *list = tt_xrealloc(*list, tt_mul_size(*cap, sizeof(void *), "jinja arena"), "jinja arena");
    }
    (*list)[(*count)++] = p;
}

void *tt_jarena_alloc(tt_jarena *a, size_t bytes) {
    a->bytes += bytes;
    if (a->limit && a->bytes > a->limit) a->over = true; /* the evaluator checks and stops */
    if (VALUE_BLOCKS || bytes > CHUNK_BYTES / 4) {
        void *p = tt_xcalloc(1, bytes, "jinja values");
        remember(&a->large, &a->large_count, &a->large_cap, p);
        return p;
    }
    const size_t need = bytes ? (bytes + ALIGN - 1) & ~(size_t)(ALIGN - 1) : ALIGN;
    if (a->chunk_count == 0 || a->chunk_used + need > CHUNK_BYTES) {
        remember(&a->chunks, &a->chunk_count, &a->chunk_cap, take_chunk());
        a->chunk_used = 0;
    }
    void *p = (char *)a->chunks[a->chunk_count - 1] + a->chunk_used;
    a->chunk_used += need;
    return p;
}

void tt_jarena_free(tt_jarena *a) {
    for (size_t i = 0; i < a->chunk_count; i++) give_chunk(a->chunks[i]);
    for (size_t i = 0; i < a->large_count; i++) free(a->large[i]);
    free(a->chunks);
    free(a->large);
    memset(a, 0, sizeof(*a));
}
