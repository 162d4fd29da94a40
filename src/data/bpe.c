/* The BPE model: a pre-token's characters (or bytes, for byte-level models) become symbols, then
 * the pair with the lowest merge rank is merged, leftmost first among equal ranks, until no pair
 * merges: a doubly linked list of symbols and a binary heap keyed by (rank, position), as
 * tokenizers' Word::merge_all does, so a pre-token of n symbols costs O(n log n). A per-thread
 * cache maps pre-tokens already seen to their ids. */
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "data/tokenizer_internal.h"

typedef struct tt_symbol {
    int32_t id, prev, next;
    uint32_t start, len; /* bytes of the pre-token; len 0: merged away */
} tt_symbol;

typedef struct tt_heap_item {
    int32_t rank, pos, merged;
} tt_heap_item;

typedef struct tt_cache_slot {
    uint64_t hash;
    uint32_t key_off, key_len, val_off, count; /* key_len 0: empty */
} tt_cache_slot;

enum {
    CACHE_SLOTS = 1 << 17,       /* slots; cleared when half full */
    CACHE_MAX_KEY = 256,         /* longer pre-tokens are not cached */
    CACHE_POOL_BYTES = 32 << 20, /* keys and values; cleared when full */
};

void tt_token_ids_push(tt_token_ids *out, int32_t id, int64_t offset) {
    if (out->with_offsets && !out->offsets && out->capacity > 0) { /* offsets asked for late: earlier ones are 0 */
        out->offsets = tt_xcalloc((size_t)out->capacity, sizeof(int64_t), "token offsets");
    }
    if (out->count == out->capacity) {
        out->capacity = out->capacity ? 2 * out->capacity : 1024;
        out->ids = tt_xrealloc(out->ids, tt_mul_size((size_t)out->capacity, sizeof(int32_t), "token ids"), "token ids");
        if (out->with_offsets)
            out->offsets = tt_xrealloc(
                out->offsets, tt_mul_size((size_t)out->capacity, sizeof(int64_t), "token offsets"), "token offsets");
    }
    out->ids[out->count] = id;
    if (out->with_offsets) out->offsets[out->count] = offset;
    out->count++;
}

void tt_token_ids_free(tt_token_ids *ids) {
    free(ids->ids);
    free(ids->offsets);
    ids->ids = NULL;
    ids->offsets = NULL;
    ids->count = ids->capacity = 0;
}

/* The calling thread's state, made on its first encode; every state is registered with the
 * tokenizer and freed with it (a thread's exit leaves its state until then). */
tt_encode_state *tt_encode_state_get(const tt_tokenizer *ctok) {
    tt_tokenizer *tok = (tt_tokenizer *)ctok; /* only the state registry changes, under its lock */
    tt_encode_state *st = pthread_getspecific(tok->state_key);
    if (st) return st;
    st = tt_xcalloc(1, sizeof *st, "tokenizer thread state");
    tt_regex_matcher_init(&st->matcher);
    st->cache_slots = tt_xcalloc(CACHE_SLOTS, sizeof(tt_cache_slot), "tokenizer cache");
    st->cache_mask = CACHE_SLOTS - 1;
    st->cache_pool_cap = CACHE_POOL_BYTES;
    st->cache_pool = tt_xmalloc(st->cache_pool_cap, "tokenizer cache");
    pthread_mutex_lock(&tok->states_lock);
    if (tok->state_count == tok->state_cap) {
        tok->state_cap = tok->state_cap ? 2 * tok->state_cap : 8;
        tok->states = tt_xrealloc(tok->states, sizeof(*tok->states) * (size_t)tok->state_cap, "tokenizer states");
    }
    tok->states[tok->state_count++] = st;
    pthread_mutex_unlock(&tok->states_lock);
    pthread_setspecific(tok->state_key, st);
    return st;
}

void tt_encode_state_free(tt_encode_state *st) {
    tt_text_free(&st->clean);
    tt_text_free(&st->norm);
    tt_text_free(&st->scratch);
    tt_text_free(&st->work);
    free(st->raw_splits.items);
    free(st->norm_splits.items);
    free(st->ranges.items);
    free(st->ranges2.items);
    tt_regex_matcher_free(&st->matcher);
    free(st->symbols);
    free(st->heap);
    free(st->mapped);
    free(st->segments);
    free(st->cache_slots);
    free(st->cache_pool);
    free(st);
}

/* ---- cache ---- */

static const tt_cache_slot *cache_find(const tt_encode_state *st, const char *key, size_t len, uint64_t hash) {
    for (uint64_t i = hash & st->cache_mask;; i = (i + 1) & st->cache_mask) {
        const tt_cache_slot *s = &st->cache_slots[i];
        if (s->key_len == 0) return NULL;
        if (s->hash == hash && s->key_len == len && memcmp(st->cache_pool + s->key_off, key, len) == 0) return s;
    }
}

static void cache_put(tt_encode_state *st, const char *key, size_t len, uint64_t hash, const int32_t *ids,
                      const uint32_t *starts, uint32_t count) {
    size_t key_off = (st->cache_pool_used + 3) & ~(size_t)3;
    size_t val_off = (key_off + len + 3) & ~(size_t)3;
    size_t end = val_off + (size_t)count * 8;
    if (end > st->cache_pool_cap || (st->cache_used + 1) * 2 > st->cache_mask + 1) { /* full: start over */
        memset(st->cache_slots, 0, (st->cache_mask + 1) * sizeof(tt_cache_slot));
        st->cache_used = 0;
        st->cache_pool_used = 0;
        key_off = 0;
        val_off = (len + 3) & ~(size_t)3;
        end = val_off + (size_t)count * 8;
        if (end > st->cache_pool_cap) return;
    }
    memcpy(st->cache_pool + key_off, key, len);
    if (count > 0) { /* with no ids, ids may be NULL, and memcpy from NULL is undefined even for 0 bytes */
        memcpy(st->cache_pool + val_off, ids, (size_t)count * 4);
        memcpy(st->cache_pool + val_off + (size_t)count * 4, starts, (size_t)count * 4);
    }
    st->cache_pool_used = end;
    uint64_t i = hash & st->cache_mask;
    while (st->cache_slots[i].key_len != 0) i = (i + 1) & st->cache_mask;
    st->cache_slots[i] = (tt_cache_slot){hash, (uint32_t)key_off, (uint32_t)len, (uint32_t)val_off, count};
    st->cache_used++;
}

/* ---- merges ---- */

static const tt_merge_slot *merge_find(const tt_tokenizer *tok, int32_t left, int32_t right) {
    uint64_t pair = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
    for (uint64_t i = tt_hash_bytes(&pair, 8) & tok->merges_mask;; i = (i + 1) & tok->merges_mask) {
        const tt_merge_slot *s = &tok->merges[i];
        if (s->pair == pair) return s;
        if (s->pair == UINT64_MAX) return NULL;
    }
}

static bool heap_less(const tt_heap_item *a, const tt_heap_item *b) {
    return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

static void heap_push(tt_encode_state *st, size_t *n, tt_heap_item item) {
    if (*n == st->heap_cap) {
        st->heap_cap = st->heap_cap ? 2 * st->heap_cap : 256;
        st->heap = tt_xrealloc(st->heap, tt_mul_size(st->heap_cap, sizeof(tt_heap_item), "BPE heap"), "BPE heap");
    }
    size_t i = (*n)++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!heap_less(&item, &st->heap[parent])) break;
        st->heap[i] = st->heap[parent];
        i = parent;
    }
    st->heap[i] = item;
}

static tt_heap_item heap_pop(tt_encode_state *st, size_t *n) {
    tt_heap_item top = st->heap[0], last = st->heap[--*n];
    size_t i = 0;
    for (;;) {
        size_t child = 2 * i + 1;
        if (child >= *n) break;
        if (child + 1 < *n && heap_less(&st->heap[child + 1], &st->heap[child])) child++;
        if (!heap_less(&st->heap[child], &last)) break;
        st->heap[i] = st->heap[child];
        i = child;
    }
    if (*n > 0) st->heap[i] = last;
    return top;
}

static void push_pair(const tt_tokenizer *tok, tt_encode_state *st, size_t *heap_n, int32_t pos) {
    tt_symbol *sym = st->symbols;
    int32_t next = sym[pos].next;
    if (next < 0) return;
    const tt_merge_slot *m = merge_find(tok, sym[pos].id, sym[next].id);
    if (m) heap_push(st, heap_n, (tt_heap_item){m->rank, pos, m->merged});
}

static void add_symbol(tt_encode_state *st, size_t *n, int32_t id, size_t start, size_t len) {
    if (*n == st->symbols_cap) {
        st->symbols_cap = st->symbols_cap ? 2 * st->symbols_cap : 256;
        st->symbols =
            tt_xrealloc(st->symbols, tt_mul_size(st->symbols_cap, sizeof(tt_symbol), "BPE symbols"), "BPE symbols");
    }
    st->symbols[*n] = (tt_symbol){id, (int32_t)*n - 1, -1, (uint32_t)start, (uint32_t)len};
    if (*n > 0) st->symbols[*n - 1].next = (int32_t)*n;
    (*n)++;
}

/* The initial symbols of a pre-token, as tokenizers' BPE::merge_word makes them: a character in
 * the vocabulary is one symbol; one that is not becomes its <0xNN> byte tokens (byte_fallback)
 * or the unknown token (consecutive unknowns fused into one with fuse_unk) or nothing. */
static size_t initial_symbols(const tt_tokenizer *tok, tt_encode_state *st, const char *s, size_t len) {
    size_t n = 0;
    int32_t unk_pending = -1;
    size_t unk_start = 0, unk_len = 0;
    for (size_t i = 0; i < len;) {
        size_t clen = tok->byte_level ? 1 : (size_t)tt_utf8_char_len((unsigned char)s[i]);
        int32_t id = tok->byte_level ? tok->byte_to_id[(unsigned char)s[i]] : tt_str_map_get(&tok->vocab, s + i, clen);
        if (id >= 0) {
            if (unk_pending >= 0) add_symbol(st, &n, unk_pending, unk_start, unk_len);
            unk_pending = -1;
            add_symbol(st, &n, id, i, clen);
            i += clen;
            continue;
        }
        if (tok->byte_fallback && !tok->byte_level) {
            bool all = true;
            for (size_t b = 0; b < clen; b++) all = all && tok->byte_fallback_ids[(unsigned char)s[i + b]] >= 0;
            if (all) { /* tokenizers adds these before a pending unknown (it has none in practice) */
                for (size_t b = 0; b < clen; b++)
                    add_symbol(st, &n, tok->byte_fallback_ids[(unsigned char)s[i + b]], i + b, 1);
                i += clen;
                continue;
            }
        }
        if (tok->unk_id >= 0) {
            if (unk_pending >= 0 && tok->fuse_unk) {
                unk_len += clen;
            } else {
                if (unk_pending >= 0) add_symbol(st, &n, unk_pending, unk_start, unk_len);
                unk_pending = tok->unk_id;
                unk_start = i;
                unk_len = clen;
            }
        }
        i += clen;
    }
    if (unk_pending >= 0) add_symbol(st, &n, unk_pending, unk_start, unk_len);
    return n;
}

static void merge_all(const tt_tokenizer *tok, tt_encode_state *st, size_t n) {
    size_t heap_n = 0;
    for (size_t i = 0; i + 1 < n; i++) push_pair(tok, st, &heap_n, (int32_t)i);
    tt_symbol *sym = st->symbols;
    while (heap_n > 0) {
        tt_heap_item top = heap_pop(st, &heap_n);
        tt_symbol *left = &sym[top.pos];
        if (left->len == 0 || left->next < 0) continue;
        tt_symbol *right = &sym[left->next];
        /* stale entry: the pair changed since it was pushed */
        const tt_merge_slot *m = merge_find(tok, left->id, right->id);
        if (!m || m->merged != top.merged) continue;
        left->id = top.merged;
        left->len += right->len;
        left->next = right->next;
        right->len = 0;
        if (left->next >= 0) sym[left->next].prev = top.pos;
        if (left->prev >= 0) push_pair(tok, st, &heap_n, left->prev);
        push_pair(tok, st, &heap_n, top.pos);
    }
}

/* The pre-token's bytes in the GPT-2 byte alphabet (the form its vocabulary is written in). */
static const char *byte_level_string(const tt_tokenizer *tok, tt_encode_state *st, const char *s, size_t len,
                                     size_t *out_len) {
    if (st->mapped_cap < 2 * len + 1) {
        st->mapped_cap = 2 * len + 64;
        st->mapped = tt_xrealloc(st->mapped, st->mapped_cap, "byte-level text");
    }
    size_t m = 0;
    for (size_t i = 0; i < len; i++) {
        const char *c = tok->byte_char[(unsigned char)s[i]];
        st->mapped[m++] = c[0];
        if (c[1]) st->mapped[m++] = c[1];
    }
    *out_len = m;
    return st->mapped;
}

void tt_bpe_encode(const tt_tokenizer *tok, tt_encode_state *st, const char *s, const int64_t *orig, size_t len,
                   tt_token_ids *out) {
    uint64_t hash = 0;
    bool cacheable = len <= CACHE_MAX_KEY;
    if (cacheable) {
        hash = tt_hash_bytes(s, len);
        const tt_cache_slot *hit = cache_find(st, s, len, hash);
        if (hit) {
            const char *val = st->cache_pool + hit->val_off;
            for (uint32_t k = 0; k < hit->count; k++) {
                int32_t id;
                uint32_t start;
                memcpy(&id, val + 4 * (size_t)k, 4);
                memcpy(&start, val + 4 * ((size_t)hit->count + k), 4);
                tt_token_ids_push(out, id, orig[start]);
            }
            return;
        }
    }
    int64_t first = out->count;
    int32_t whole = -1;
    if (tok->ignore_merges) { /* a pre-token in the vocabulary is emitted whole, unmerged */
        size_t key_len = len;
        const char *key = tok->byte_level ? byte_level_string(tok, st, s, len, &key_len) : s;
        whole = tt_str_map_get(&tok->vocab, key, key_len);
    }
    uint32_t starts_small[64];
    uint32_t *starts = starts_small;
    if (whole >= 0) {
        tt_token_ids_push(out, whole, orig[0]);
        starts[0] = 0;
    } else {
        size_t n = initial_symbols(tok, st, s, len);
        merge_all(tok, st, n);
        size_t count = 0;
        for (int32_t i = n > 0 ? 0 : -1; i >= 0; i = st->symbols[i].next) count++;
        if (count > 64) starts = tt_xmalloc(count * sizeof(uint32_t), "BPE offsets");
        size_t k = 0;
        for (int32_t i = n > 0 ? 0 : -1; i >= 0; i = st->symbols[i].next) {
            tt_token_ids_push(out, st->symbols[i].id, orig[st->symbols[i].start]);
            starts[k++] = st->symbols[i].start;
        }
    }
    if (cacheable) /* out->ids is NULL while nothing was pushed: no pointer arithmetic on it */
        cache_put(st, s, len, hash, out->count > first ? out->ids + first : NULL, starts,
                  (uint32_t)(out->count - first));
    if (starts != starts_small) free(starts);
}
