/* First-fit decreasing sample packing (sequence_packing.h). */
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

void tt_pack_documents(const int64_t *lengths, int64_t count, int64_t capacity, tt_packing *out) {
    memset(out, 0, sizeof(*out));
    TT_CHECK(count >= 0 && capacity >= 1, "packing %lld documents into bins of %lld tokens", (long long)count,
             (long long)capacity);
    out->bin_start = tt_xcalloc(1, sizeof(int64_t), "the packed bins");
    if (count == 0) return;
    length_index *order = tt_xmalloc(tt_mul_size((size_t)count, sizeof(length_index), "packing order"), "packing order");
    for (int64_t d = 0; d < count; d++) {
        TT_CHECK(lengths[d] >= 1 && lengths[d] <= capacity, "document %lld has %lld tokens, outside 1..%lld",
                 (long long)d, (long long)lengths[d], (long long)capacity);
        order[d] = (length_index){lengths[d], d};
        out->tokens += lengths[d];
    }
    qsort(order, (size_t)count, sizeof(length_index), longest_first);

    /* A max segment tree over `leaves` bins' free room (every bin, opened or not, starts empty, so the
     * leftmost bin with room is an opened one or the first unopened one: first fit). */
    int64_t leaves = 1;
    while (leaves < count) leaves *= 2;
    int64_t *room = tt_xmalloc(tt_mul_size((size_t)(2 * leaves), sizeof(int64_t), "packing tree"), "packing tree");
    for (int64_t i = 0; i < 2 * leaves; i++) room[i] = capacity;
    int64_t *bin_of = tt_xmalloc(tt_mul_size((size_t)count, sizeof(int64_t), "packing bins"), "packing bins");
    for (int64_t k = 0; k < count; k++) {
        const int64_t want = order[k].length;
        int64_t node = 1;
        while (node < leaves) node = room[2 * node] >= want ? 2 * node : 2 * node + 1;
        const int64_t bin = node - leaves;
        bin_of[order[k].index] = bin;
        if (bin + 1 > out->bin_count) out->bin_count = bin + 1;
        room[node] -= want;
        for (node /= 2; node >= 1; node /= 2)
            room[node] = room[2 * node] > room[2 * node + 1] ? room[2 * node] : room[2 * node + 1];
    }
    free(room);
    free(order);

    /* Members bin by bin: a counting sort by bin, over the documents in index order, keeps each bin's in it. */
    free(out->bin_start);
    out->bin_start = tt_xcalloc((size_t)out->bin_count + 1, sizeof(int64_t), "the packed bins");
    for (int64_t d = 0; d < count; d++) out->bin_start[bin_of[d] + 1]++;
    for (int64_t b = 0; b < out->bin_count; b++) out->bin_start[b + 1] += out->bin_start[b];
    out->members = tt_xmalloc(tt_mul_size((size_t)count, sizeof(int64_t), "packed documents"), "packed documents");
    int64_t *fill = tt_xmalloc(tt_mul_size((size_t)out->bin_count, sizeof(int64_t), "packing"), "packing");
    memcpy(fill, out->bin_start, sizeof(int64_t) * (size_t)out->bin_count);
    for (int64_t d = 0; d < count; d++) out->members[fill[bin_of[d]]++] = d;
    free(fill);
    free(bin_of);
}

void tt_packing_free(tt_packing *packing) {
    free(packing->bin_start);
    free(packing->members);
    memset(packing, 0, sizeof(*packing));
}
