#include "train/sampling.h"

#include <math.h>
#include <stdlib.h>

#include "core/check.h"

void tt_sampling_scratch_init(tt_sampling_scratch *scratch, int64_t vocab) {
    scratch->vocab = vocab;
    scratch->ranked = tt_xmalloc(tt_mul_size(sizeof(tt_scored_token), (size_t)vocab, "sampling"), "sampling");
}

void tt_sampling_scratch_free(tt_sampling_scratch *scratch) {
    free(scratch->ranked);
    scratch->ranked = NULL;
}

int32_t tt_argmax(const float *logits, int64_t V) {
    int32_t best = 0;
    for (int64_t i = 1; i < V; i++)
        if (logits[i] > logits[best] || (isnan(logits[best]) && !isnan(logits[i]))) best = (int32_t)i;
    return best;
}

/* Largest logit first, equal ones by id (a stable descending order). */
static int by_logit_descending(const void *a, const void *b) {
    const tt_scored_token *x = a, *y = b;
    if (x->logit > y->logit) return -1;
    if (x->logit < y->logit) return 1;
    return (x->id > y->id) - (x->id < y->id);
}

int32_t tt_sample_token(const float *logits, const tt_sampling *s, tt_sampling_scratch *scratch, tt_rng *rng) {
    const int64_t V = scratch->vocab;
    if (!(s->temperature > 0)) return tt_argmax(logits, V);
    tt_scored_token *ranked = scratch->ranked;
    for (int64_t i = 0; i < V; i++) ranked[i] = (tt_scored_token){(float)(logits[i] / s->temperature), (int32_t)i};
    qsort(ranked, (size_t)V, sizeof *ranked, by_logit_descending);
    /* top-k: the k largest and every token equal to the k-th (transformers keeps logits >= the k-th value) */
    int64_t kept = V;
    if (s->top_k > 0 && s->top_k < V) {
        kept = s->top_k;
        while (kept < V && ranked[kept].logit == ranked[s->top_k - 1].logit) kept++;
    }
    /* softmax over the kept tokens, in double, largest first */
    const double top = ranked[0].logit;
    double sum = 0;
    for (int64_t r = 0; r < kept; r++) sum += exp((double)ranked[r].logit - top);
    /* top-p: the most likely tokens until their probability reaches p (transformers drops those whose ascending
     * cumulative probability is <= 1 - p, which keeps this prefix) */
    if (s->top_p < 1.0) {
        double cumulative = 0;
        int64_t r = 0;
        while (r < kept) {
            cumulative += exp((double)ranked[r].logit - top) / sum;
            r++;
            if (cumulative >= s->top_p) break;
        }
        kept = r;
        sum = 0;
        for (int64_t i = 0; i < kept; i++) sum += exp((double)ranked[i].logit - top);
    }
    const double u = tt_rng_uniform(rng) * sum;
    double cumulative = 0;
    for (int64_t r = 0; r < kept; r++) {
        cumulative += exp((double)ranked[r].logit - top);
        if (u < cumulative) return ranked[r].id;
    }
    return ranked[kept - 1].id;
}
