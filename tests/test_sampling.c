/* The next-token choice of tiertrain inference (train/sampling.h): greedy is torch.argmax (the first of equal logits);
 * a temperature draws from softmax(logits / T) (the frequencies of 200000 draws within 4 standard deviations of each
 * probability); top-k keeps the k largest and the ties of the k-th; top-p the most likely tokens until their
 * probability reaches p; the same seed draws the same tokens. */
#include <math.h>

#include "core/rng.h"
#include "test_util.h"
#include "train/sampling.h"

#define V 6
#define DRAWS 200000

static void frequencies(const float *logits, const tt_sampling *s, uint64_t seed, double *freq) {
    tt_sampling_scratch scratch;
    tt_sampling_scratch_init(&scratch, V);
    tt_rng rng;
    tt_rng_seed(&rng, seed);
    for (int i = 0; i < V; i++) freq[i] = 0;
    for (int d = 0; d < DRAWS; d++) freq[tt_sample_token(logits, s, &scratch, &rng)] += 1.0 / DRAWS;
    tt_sampling_scratch_free(&scratch);
}

/* Each frequency within 4 standard deviations of its probability (p: the expected distribution). */
static bool close_to(const double *freq, const double *p) {
    for (int i = 0; i < V; i++)
        if (fabs(freq[i] - p[i]) > 4 * sqrt(p[i] * (1 - p[i]) / DRAWS) + 1e-12) return false;
    return true;
}

static void softmax_of(const float *logits, double temperature, const bool *kept, double *p) {
    double sum = 0;
    for (int i = 0; i < V; i++) sum += kept[i] ? exp(logits[i] / temperature) : 0;
    for (int i = 0; i < V; i++) p[i] = kept[i] ? exp(logits[i] / temperature) / sum : 0;
}

int main(void) {
    const float logits[V] = {1.0f, 3.0f, 2.0f, 3.0f, -1.0f, 0.5f};
    TT_EXPECT(tt_argmax(logits, V) == 1, "the first of two equal largest logits");
    const float with_nan[3] = {NAN, 0.5f, 0.25f};
    TT_EXPECT(tt_argmax(with_nan, 3) == 1, "NaN never wins");

    tt_sampling_scratch scratch;
    tt_sampling_scratch_init(&scratch, V);
    tt_rng rng;
    tt_rng_seed(&rng, 1);
    const tt_sampling greedy = {.temperature = 0, .top_p = 1};
    TT_EXPECT(tt_sample_token(logits, &greedy, &scratch, &rng) == 1, "temperature 0 is greedy");
    tt_sampling_scratch_free(&scratch);

    double freq[V], p[V];
    const bool all[V] = {true, true, true, true, true, true};
    const tt_sampling t07 = {.temperature = 0.7, .top_p = 1};
    frequencies(logits, &t07, 5, freq);
    softmax_of(logits, 0.7, all, p);
    TT_EXPECT(close_to(freq, p), "temperature 0.7: softmax(logits / 0.7) (%.4f %.4f %.4f vs %.4f %.4f %.4f)", freq[0],
              freq[1], freq[2], p[0], p[1], p[2]);

    /* top-k 2: the two 3.0s; top-k 3: and the 2.0; top-k 2 of {3, 3, 3, ...} keeps every tie of the 2nd */
    const tt_sampling k2 = {.temperature = 1, .top_k = 2, .top_p = 1};
    frequencies(logits, &k2, 6, freq);
    const bool top2[V] = {false, true, false, true, false, false};
    softmax_of(logits, 1, top2, p);
    TT_EXPECT(close_to(freq, p), "top-k 2 keeps the two largest");
    const float ties[V] = {3.0f, 3.0f, 3.0f, 1.0f, 0.0f, 0.0f};
    frequencies(ties, &k2, 7, freq);
    const bool three[V] = {true, true, true, false, false, false};
    softmax_of(ties, 1, three, p);
    TT_EXPECT(close_to(freq, p), "top-k keeps the ties of the k-th");

    /* top-p: probabilities at T 1 are about .052 .384 .141 .384 .007 .032: p 0.5 keeps the two 3.0s (.768 >= .5),
     * p 0.8 the 2.0 too (.909) */
    const tt_sampling p05 = {.temperature = 1, .top_p = 0.5};
    frequencies(logits, &p05, 8, freq);
    softmax_of(logits, 1, top2, p);
    TT_EXPECT(close_to(freq, p), "top-p 0.5: the smallest set reaching 0.5");
    const tt_sampling p08 = {.temperature = 1, .top_p = 0.8};
    frequencies(logits, &p08, 9, freq);
    const bool top3[V] = {false, true, true, true, false, false};
    softmax_of(logits, 1, top3, p);
    TT_EXPECT(close_to(freq, p), "top-p 0.8: and the next");

    /* a seed repeats its draws */
    tt_sampling_scratch a, b;
    tt_sampling_scratch_init(&a, V);
    tt_sampling_scratch_init(&b, V);
    tt_rng ra, rb;
    tt_rng_seed(&ra, 42);
    tt_rng_seed(&rb, 42);
    bool same = true;
    for (int d = 0; d < 1000; d++)
        same &= tt_sample_token(logits, &t07, &a, &ra) == tt_sample_token(logits, &t07, &b, &rb);
    TT_EXPECT(same, "the same seed draws the same tokens");
    tt_sampling_scratch_free(&a);
    tt_sampling_scratch_free(&b);
    return tt_test_summary("sampling");
}
