/* The next token from a forward's logits, as transformers' generate picks it: greedy (do_sample false: the largest
 * logit, the first of equal ones as torch.argmax), or a draw from the softmax after its logits processors in their
 * order: temperature (logits / T), top-k (the k largest, ties with the k-th kept), top-p (the smallest set of the most
 * likely tokens whose probability reaches p, at least one). The draws come from tiertrain's own generator (core/rng.h),
 * so a seed repeats a sampled answer here but is not torch's. */
#ifndef TT_TRAIN_SAMPLING_H
#define TT_TRAIN_SAMPLING_H

#include <stdint.h>

#include "core/rng.h"

typedef struct tt_sampling {
    double temperature; /* 0: greedy */
    int64_t top_k;      /* 0: no top-k */
    double top_p;       /* 1: no top-p */
} tt_sampling;

/* A token and its scaled logit. */
typedef struct tt_scored_token {
    float logit;
    int32_t id;
} tt_scored_token;

/* Scratch of a vocabulary's size for tt_sample_token. */
typedef struct tt_sampling_scratch {
    int64_t vocab;
    tt_scored_token *ranked; /* [vocab] */
} tt_sampling_scratch;

void tt_sampling_scratch_init(tt_sampling_scratch *scratch, int64_t vocab);
void tt_sampling_scratch_free(tt_sampling_scratch *scratch);

/* The index of the largest of logits[V] (the first where several are equal; NaN never wins). */
int32_t tt_argmax(const float *logits, int64_t V);

/* The next token of logits[scratch->vocab] (not changed) under s, drawing from rng where s samples. */
int32_t tt_sample_token(const float *logits, const tt_sampling *s, tt_sampling_scratch *scratch, tt_rng *rng);

#endif
