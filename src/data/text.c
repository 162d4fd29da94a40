/* The tokenizer's small containers: a string -> id hash map, text that remembers where each of
 * its bytes came from in the caller's input, and lists of splits. */
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "data/tokenizer_internal.h"

/* FNV-1a over 8-byte words then a final mix: fast on short keys (most tokens are under 16 bytes). */
uint64_t tt_hash_bytes(const void *data, size_t len) {
    const unsigned char *p = data;
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (uint64_t)len;
    while (len >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = (h ^ w) * 0x100000001B3ull;
        h ^= h >> 29;
        p += 8;
        len -= 8;
    }
    uint64_t tail = 0;
    memcpy(&tail, p, len);
    h = (h ^ tail) * 0xFF51AFD7ED558CCDull;
    h ^= h >> 32;
    h *= 0xC4CEB9FE1A85EC53ull;
    h ^= h >> 29;
    return h;
}

void tt_str_map_init(tt_str_map *map, uint64_t expected) {
    uint64_t cap = 16;
    while (cap < expected * 2) cap *= 2; /* load factor at most 1/2 */
    map->slots = tt_xcalloc(cap, sizeof(tt_str_slot), "tokenizer vocabulary map");
    map->mask = cap - 1;
    map->used = 0;
}

void tt_str_map_free(tt_str_map *map) {
    free(map->slots);
    map->slots = NULL;
}

static void str_map_grow(tt_str_map *map) {
    tt_str_map bigger;
    tt_str_map_init(&bigger, (map->mask + 1));
    for (uint64_t i = 0; i <= map->mask; i++)
        if (map->slots[i].key) tt_str_map_put(&bigger, map->slots[i].key, map->slots[i].len, map->slots[i].id);
    free(map->slots);
    *map = bigger;
}

bool tt_str_map_put(tt_str_map *map, const char *key, size_t len, int32_t id) {
    TT_CHECK(len < UINT32_MAX, "token of %zu bytes", len);
    if ((map->used + 1) * 2 > map->mask + 1) str_map_grow(map);
    uint64_t i = tt_hash_bytes(key, len) & map->mask;
    for (;; i = (i + 1) & map->mask) {
        tt_str_slot *s = &map->slots[i];
        if (!s->key) {
            s->key = key;
            s->len = (uint32_t)len;
            s->id = id;
            map->used++;
            return true;
        }
        if (s->len == len && memcmp(s->key, key, len) == 0) return false;
    }
}

int32_t tt_str_map_get(const tt_str_map *map, const char *key, size_t len) {
    uint64_t i = tt_hash_bytes(key, len) & map->mask;
    for (;; i = (i + 1) & map->mask) {
        const tt_str_slot *s = &map->slots[i];
        if (!s->key) return -1;
        if (s->len == len && memcmp(s->key, key, len) == 0) return s->id;
    }
}

void tt_text_reserve(tt_text *t, size_t cap) {
    if (cap <= t->cap) return;
    size_t n = t->cap ? t->cap : 256;
    while (n < cap) n *= 2;
    t->s = tt_xrealloc(t->s, n + 1, "tokenizer text");
    t->orig = tt_xrealloc(t->orig, tt_mul_size(n, sizeof(int64_t), "tokenizer offsets"), "tokenizer offsets");
    t->cap = n;
}

void tt_text_append(tt_text *t, const char *s, size_t len, int64_t orig) {
    if (len == 0) return;
    tt_text_reserve(t, t->len + len);
    memcpy(t->s + t->len, s, len);
    for (size_t i = 0; i < len; i++) t->orig[t->len + i] = orig;
    t->len += len;
}

void tt_text_free(tt_text *t) {
    free(t->s);
    free(t->orig);
    memset(t, 0, sizeof *t);
}

void tt_splits_push(tt_splits *s, size_t start, size_t end, int32_t id) {
    if (s->count == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 64;
        s->items = tt_xrealloc(s->items, tt_mul_size(s->cap, sizeof(tt_split), "splits"), "splits");
    }
    s->items[s->count++] = (tt_split){start, end, id};
}
