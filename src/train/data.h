/* Token files and the training data loader.
 *
 * Token file version 1 (docs/token_format.md): a 32-byte little-endian header
 *   bytes 0-7   magic "TTTOKENS"
 *   bytes 8-11  uint32 version (1)
 *   bytes 12-15 uint32 vocab_size of the tokenizer that wrote it
 *   bytes 16-23 uint64 number of tokens that follow
 *   bytes 24-27 uint32 eos token id written after every document (0xffffffff: none)
 *   bytes 28-31 uint32 reserved, 0
 * then that many uint32 token ids. Documents are concatenated, each followed by eos.
 *
 * Version 2 (what `tiertrain preprocess` writes from JSON/JSONL datasets): a 48-byte header, the
 * same first 28 bytes with version 2, then
 *   bytes 28-31 uint32 pad token id (0xffffffff: none; rows are padded with 0 then)
 *   bytes 32-39 uint64 number of documents D
 *   bytes 40-47 uint64 reserved, 0
 * then D + 1 uint64 document start offsets (in tokens; the first 0, the last token_count),
 * token_count uint32 ids, and token_count label bytes (1: the token is a training target, 0:
 * masked, HF's label -100).
 *
 * The loader reads either. Version 1 files: all files are concatenated into one stream and cut
 * into sequences of sequence_len + 1 tokens with stride sequence_len (inputs are the first
 * sequence_len, targets the last sequence_len), so every token is predicted exactly once.
 * Version 2 files: a sequence is one document, padded to sequence_len (as axolotl without
 * sample packing): inputs are its ids then the pad id, targets the next id where that token's
 * label byte is 1, else TT_IGNORE_INDEX (-100; also the last token and the padding). The two
 * versions cannot be mixed in one run.
 *
 * A seeded
 * permutation holds out the eval sequences; each epoch visits the training sequences in its own seeded order.
 * With sample_packing (tt_dataset_open_packed) the items are documents: the eval documents are held out once and
 * packed once (first-fit decreasing); the training documents are packed anew each epoch, as axolotl's multipack
 * sampler packs them: in the epoch's seeded order, first-fit (src/data/sequence_packing.h), the sequences then
 * visited in the order they were opened. An epoch's order and packing depend only on (seed, epoch), so a resumed
 * run rebuilds them directly. Every id is checked against the model's vocab_size at load. */
#ifndef TT_TRAIN_DATA_H
#define TT_TRAIN_DATA_H

#include <stdbool.h>
#include <stdint.h>

#include "core/rng.h"
#include "data/token_file.h"

/* What sample packing made of the documents (tt_dataset_open_packed). */
typedef struct tt_packing_stats {
    int64_t train_documents, eval_documents; /* documents packed, each split's */
    int64_t train_sequences, eval_sequences; /* the sequences they fill (training: the current epoch's packing) */
    int64_t train_tokens, eval_tokens;       /* their tokens (padding not counted) */
    int64_t dropped, truncated;              /* token files: documents longer than sequence_len */
} tt_packing_stats;

typedef struct tt_dataset {
    uint32_t *tokens; /* the concatenated stream [token_count] */
    uint64_t token_count;
    /* version 2 files: one document per sequence (NULL / 0 for version 1 streams) */
    bool documents;
    uint8_t *labels;      /* [token_count], 1: a training target */
    uint64_t *doc_starts; /* [document_count + 1] offsets in tokens (version 1 files: when packed) */
    int64_t document_count;
    uint32_t pad_id;               /* input id of padding positions */
    uint32_t tokenizer_vocab_size; /* the largest vocab_size the files' headers name (their tokenizer's) */
    int64_t seq_len;
    int64_t sequence_count;    /* (token_count - 1) / seq_len; documents: their count */
    int64_t *train_order_base; /* training sequence indices [train_count], before per-epoch shuffle (not packed) */
    int64_t train_count;       /* packed: the current epoch's packed sequences */
    int64_t *eval_sequences;   /* [eval_count] */
    int64_t eval_count;
    uint64_t seed;
    /* position: the next training sequence is epoch_order[index_in_epoch] of epoch `epoch` */
    int64_t epoch;
    int64_t index_in_epoch;
    int64_t *epoch_order; /* [train_count], the current epoch's permutation */
    /* sample_packing (tt_dataset_open_packed): a sequence is a bin of documents ("pieces": documents as packed, a
     * long one of a token file truncated) */
    bool packed;
    uint64_t *piece_first; /* [piece_count] each piece's first token in the stream */
    int64_t *piece_length; /* [piece_count] its tokens, 1..seq_len */
    int64_t piece_count;
    int64_t *train_pieces;    /* [packing.train_documents] the training pieces, ascending */
    int64_t pack_max_per_bin; /* sample_packing_bin_size: documents a sequence holds at most */
    int64_t pack_group_size;  /* sample_packing_group_size: documents packed together */
    int64_t packed_epoch;     /* the epoch bin_start and bin_documents hold the packing of */
    int64_t *bin_start;       /* [train_count + 1] training sequence s: pieces bin_documents[bin_start[s]..[s+1]) */
    int64_t *bin_documents;   /* [packing.train_documents] piece indices, sequence by sequence */
    int64_t *eval_bin_start;  /* [eval_count + 1] the same for the eval sequences, packed once */
    int64_t *eval_bin_documents;
    tt_packing_stats packing;
    void *file_headers; /* the per-file headers while a load runs: one that dies leaves them to tt_dataset_close */
} tt_dataset;

/* Loads the files, checks every header and every id < model_vocab_size (an error names the
 * file, the token offset, the id and the vocab size), splits and shuffles. val_set_size < 1 is a
 * fraction of sequences, >= 1 a count. */
void tt_dataset_open(tt_dataset *ds, char *const *paths, int path_count, int64_t model_vocab_size, int64_t seq_len,
                     double val_set_size, uint64_t seed);
/* The same with sample_packing: the documents (version 2: the file's; version 1: runs of tokens ending in the
 * header's eos id, which must be set) are split into training and eval documents (val_set_size counts documents),
 * and each part is packed into sequences of seq_len tokens (src/data/sequence_packing.h): the eval documents once,
 * the training documents each epoch, at most max_documents_per_sequence to a sequence, in groups of group_size
 * (axolotl's sample_packing_bin_size and sample_packing_group_size); a token file's document longer than seq_len is
 * truncated to its first seq_len tokens (truncate_long) or dropped, and counted. */
void tt_dataset_open_packed(tt_dataset *ds, char *const *paths, int path_count, int64_t model_vocab_size,
                            int64_t seq_len, double val_set_size, uint64_t seed, bool truncate_long,
                            int64_t max_documents_per_sequence, int64_t group_size);
/* The training sequences of epoch `epoch` (packed: its packing's, made for the count if it is not the current
 * epoch's; else train_count), and of `epochs` epochs from the first (a fraction of the last one's). */
int64_t tt_dataset_epoch_sequences(const tt_dataset *ds, int64_t epoch);
double tt_dataset_sequences_in_epochs(const tt_dataset *ds, double epochs);
/* Every sequence of an unpacked dataset becomes an eval sequence (tiertrain evaluate --dataset), in file order. */
void tt_dataset_evaluate_all(tt_dataset *ds);
void tt_dataset_close(tt_dataset *ds);

/* Fills inputs[seq_len] and targets[seq_len] (int32) with the next training sequence,
 * advancing the position (and the epoch, reshuffling, at the end of an epoch). */
void tt_dataset_next_train(tt_dataset *ds, int32_t *inputs, int32_t *targets);
/* Eval sequence i (0 <= i < eval_count). */
void tt_dataset_get_eval(const tt_dataset *ds, int64_t i, int32_t *inputs, int32_t *targets);
/* The same, with each token's position in its document into positions[seq_len]: 0, 1, 2, ... restarting at every
 * packed document (and for the padding after them); 0..seq_len-1 when not packed. */
void tt_dataset_next_train_positions(tt_dataset *ds, int32_t *inputs, int32_t *targets, int32_t *positions);
void tt_dataset_get_eval_positions(const tt_dataset *ds, int64_t i, int32_t *inputs, int32_t *targets,
                                   int32_t *positions);

/* Position for checkpoints; restoring it makes the stream continue bit-identically. */
void tt_dataset_get_position(const tt_dataset *ds, int64_t *epoch, int64_t *index_in_epoch);
void tt_dataset_set_position(tt_dataset *ds, int64_t epoch, int64_t index_in_epoch);

#endif
