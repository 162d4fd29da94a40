/* Deterministic RNG for shuffles and init: splitmix64 seeds a xoshiro256** state.
 * The whole state is 32 bytes, saved in checkpoints so a resumed run draws the same. */
#ifndef TT_CORE_RNG_H
#define TT_CORE_RNG_H

#include <stdint.h>

typedef struct tt_rng {
    uint64_t s[4];
} tt_rng;

void tt_rng_seed(tt_rng *rng, uint64_t seed);
uint64_t tt_rng_next(tt_rng *rng);
double tt_rng_uniform(tt_rng *rng);                           /* [0, 1), 53 random bits */
double tt_rng_normal(tt_rng *rng);                            /* standard normal, Box-Muller without a cached pair */
void tt_rng_normal_pair(tt_rng *rng, double out[2]);          /* both values of one Box-Muller draw */
void tt_rng_shuffle(tt_rng *rng, int64_t *values, int64_t n); /* Fisher-Yates */

#endif
