/* Sample packing: first-fit decreasing, and first-fit in a given order (sequence_packing.h). */
#include "data/sequence_packing.h"

#include <stdlib.h>
#include <string.h>

#include "core/check.h"

typedef struct length_index {
    int64_t length, index;
} length_index;

/* Longest first; equal lengths in index order (qsort is not stable, the index makes it total). */
static int longest_first(const void *a, const void *b) {
    const length_index *x = a, *y = b;
    if (x->length != y->length) return x->length > y->length ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

/* Members bin by bin from each document's bin: a counting sort by bin over the documents in index order, which
 * keeps each bin's in index order. */
static void fill_members(const int64_t *bin_of, int64_t count, tt_packing *out) {
    free(out->bin_start);
    out->bin_start = tt_xcalloc((size_t)out->bin_count + 1, sizeof(int64_t), "the packed bins");
    for (int64_t d = 0; d < count; d++) out->bin_start[bin_of[d] + 1]++;
    for (int64_t b = 0; b < out->bin_count; b++) out->bin_start[b + 1] += out->bin_start[b];
    out->members = tt_xmalloc(tt_mul_size((size_t)count, sizeof(int64_t), "packed documents"), "packed documents");
    int64_t *fill = tt_xmalloc(tt_mul_size((size_t)out->bin_count, sizeof(int64_t), "packing"), "packing");
    memcpy(fill, out->bin_start, sizeof(int64_t) * (size_t)out->bin_count);
    for (int64_t d = 0; d < count; d++) out->members[fill[bin_of[d]]++] = d;
    free(fill);
}

/* A max segment tree over `leaves` bins' free room, every bin (opened or not) starting empty, so the leftmost bin
 * with room is an opened one or the first unopened one: first fit. */
typedef struct room_tree {
    int64_t leaves;
    int64_t *room; /* [2 * leaves], node 1 the root */
} room_tree;

static void room_tree_init(room_tree *t, int64_t bins, int64_t capacity) {
    t->leaves = 1;
    while (t->leaves < bins) t->leaves *= 2;
    t->room = tt_xmalloc(tt_mul_size((size_t)(2 * t->leaves), sizeof(int64_t), "packing tree"), "packing tree");
    for (int64_t i = 0; i < 2 * t->leaves; i++) t->room[i] = capacity;
}

/* The leftmost bin with at least `want` room. */
static int64_t room_tree_first_fit(const room_tree *t, int64_t want) {
    int64_t node = 1;
    while (node < t->leaves) node = t->room[2 * node] >= want ? 2 * node : 2 * node + 1;
    return node - t->leaves;
}

static void room_tree_set(room_tree *t, int64_t bin, int64_t room) {
    int64_t node = bin + t->leaves;
    t->room[node] = room;
    for (node /= 2; node >= 1; node /= 2)
        t->room[node] = t->room[2 * node] > t->room[2 * node + 1] ? t->room[2 * node] : t->room[2 * node + 1];
}

void tt_pack_in_order(const int64_t *lengths, int64_t count, int64_t capacity, int64_t max_per_bin, int64_t group_size,
                      tt_packing *out) {
    memset(out, 0, sizeof(*out));
    TT_CHECK(count >= 0 && capacity >= 1 && max_per_bin >= 1 && group_size >= 1,
             "packing %lld documents into bins of %lld tokens, %lld documents, groups of %lld", (long long)count,
             (long long)capacity, (long long)max_per_bin, (long long)group_size);
    out->bin_start = tt_xcalloc(1, sizeof(int64_t), "the packed bins");
    if (count == 0) return;
    int64_t *bin_of = tt_xmalloc(tt_mul_size((size_t)count, sizeof(int64_t), "packing bins"), "packing bins");
    for (int64_t first = 0; first < count; first += group_size) {
        const int64_t n = count - first < group_size ? count - first : group_size;
        room_tree tree;
        room_tree_init(&tree, n, capacity);
        int64_t *held = tt_xcalloc((size_t)n, sizeof(int64_t), "packing"), opened = 0;
        for (int64_t k = first; k < first + n; k++) {
            TT_CHECK(lengths[k] >= 1 && lengths[k] <= capacity, "document %lld has %lld tokens, outside 1..%lld",
                     (long long)k, (long long)lengths[k], (long long)capacity);
            out->tokens += lengths[k];
            const int64_t bin = room_tree_first_fit(&tree, lengths[k]);
            if (bin + 1 > opened) opened = bin + 1;
            bin_of[k] = out->bin_count + bin;
            /* a bin with max_per_bin documents takes no more (axolotl's bin_size) */
            const int64_t room = tree.room[bin + tree.leaves] - lengths[k];
            room_tree_set(&tree, bin, ++held[bin] >= max_per_bin ? 0 : room);
        }
        out->bin_count += opened;
        free(held);
        free(tree.room);
    }
    fill_members(bin_of, count, out);
    free(bin_of);
}

void tt_pack_documents(const int64_t *lengths, int64_t count, int64_t capacity, tt_packing *out) {
    memset(out, 0, sizeof(*out));
    TT_CHECK(count >= 0 && capacity >= 1, "packing %lld documents into bins of %lld tokens", (long long)count,
             (long long)capacity);
    out->bin_start = tt_xcalloc(1, sizeof(int64_t), "the packed bins");
    if (count == 0) return;
    length_index *order =
        tt_xmalloc(tt_mul_size((size_t)count, sizeof(length_index), "packing order"), "packing order");
    for (int64_t d = 0; d < count; d++) {
        TT_CHECK(lengths[d] >= 1 && lengths[d] <= capacity, "document %lld has %lld tokens, outside 1..%lld",
                 (long long)d, (long long)lengths[d], (long long)capacity);
        order[d] = (length_index){lengths[d], d};
        out->tokens += lengths[d];
    }
    qsort(order, (size_t)count, sizeof(length_index), longest_first);

    room_tree tree;
    room_tree_init(&tree, count, capacity);
    int64_t *bin_of = tt_xmalloc(tt_mul_size((size_t)count, sizeof(int64_t), "packing bins"), "packing bins");
    for (int64_t k = 0; k < count; k++) {
        const int64_t want = order[k].length, bin = room_tree_first_fit(&tree, want);
        bin_of[order[k].index] = bin;
        if (bin + 1 > out->bin_count) out->bin_count = bin + 1;
        room_tree_set(&tree, bin, tree.room[bin + tree.leaves] - want);
    }
    free(tree.room);
    free(order);
    fill_members(bin_of, count, out);
    free(bin_of);
}

void tt_packing_free(tt_packing *packing) {
    free(packing->bin_start);
    free(packing->members);
    memset(packing, 0, sizeof(*packing));
}
