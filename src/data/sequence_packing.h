/* Sample packing: documents into sequences ("bins") of at most `capacity` tokens, by first-fit
 * decreasing: the documents in order of length, longest first (equal lengths in index order), each
 * into the first bin it fits, a new bin when none has room. A segment tree over the bins' free room
 * finds that bin in O(log n), so packing a million documents takes a fraction of a second. The
 * result depends only on the lengths and their order; each bin lists its documents in index order.
 * (axolotl's multipack sampler packs with first-fit decreasing too, per epoch and in parallel
 * groups; here the packing is done once and the bins are shuffled per epoch.) */
#ifndef TT_DATA_SEQUENCE_PACKING_H
#define TT_DATA_SEQUENCE_PACKING_H

#include <stdint.h>

typedef struct tt_packing {
    int64_t bin_count;
    int64_t *bin_start; /* [bin_count + 1]: bin b holds members[bin_start[b] .. bin_start[b + 1]) */
    int64_t *members;   /* [document count]: document indices, bin by bin, ascending within a bin */
    int64_t tokens;     /* the documents' total length */
} tt_packing;

/* Packs documents 0..count-1 of lengths[count] (each in 1..capacity) into bins of capacity tokens. */
void tt_pack_documents(const int64_t *lengths, int64_t count, int64_t capacity, tt_packing *out);
void tt_packing_free(tt_packing *packing);

#endif
