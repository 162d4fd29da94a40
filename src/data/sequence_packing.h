/* Sample packing: documents into sequences ("bins") of at most `capacity` tokens.
 *
 *  - First-fit decreasing (tt_pack_documents): the documents in order of length, longest first
 *    (equal lengths in index order), each into the first bin it fits, a new bin when none has room;
 *    each bin lists its documents in index order. The eval documents are packed so, once.
 *  - First-fit in the given order (tt_pack_in_order), as axolotl's multipack sampler packs
 *    (pack_group / pack_parallel): the documents in the order given (the trainer gives each epoch's
 *    seeded shuffle), each into the first bin with room and fewer than max_per_bin documents, in
 *    groups of group_size consecutive documents packed apart (their bins one after the other); bins
 *    in the order they were opened, each listing its documents in the order they came.
 *
 * A segment tree over the bins' free room finds the first bin with room in O(log n), so packing a
 * million documents takes a fraction of a second. Both results depend only on the lengths and their
 * order. */
#ifndef TT_DATA_SEQUENCE_PACKING_H
#define TT_DATA_SEQUENCE_PACKING_H

#include <stdint.h>

typedef struct tt_packing {
    int64_t bin_count;
    int64_t *bin_start; /* [bin_count + 1]: bin b holds members[bin_start[b] .. bin_start[b + 1]) */
    int64_t *members;   /* [document count]: document indices, bin by bin (first-fit decreasing: ascending within a
                           bin; in order: in the order they came) */
    int64_t tokens;     /* the documents' total length */
} tt_packing;

/* Packs documents 0..count-1 of lengths[count] (each in 1..capacity) into bins of capacity tokens. */
void tt_pack_documents(const int64_t *lengths, int64_t count, int64_t capacity, tt_packing *out);
/* Packs documents 0..count-1 in that order (members are those indices); max_per_bin, group_size >= 1. */
void tt_pack_in_order(const int64_t *lengths, int64_t count, int64_t capacity, int64_t max_per_bin, int64_t group_size,
                      tt_packing *out);
void tt_packing_free(tt_packing *packing);

#endif
