#include "core/rng.h"

#include <math.h>

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void tt_rng_seed(tt_rng *rng, uint64_t seed) {
    for (int i = 0; i < 4; i++) rng->s[i] = splitmix64(&seed);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t tt_rng_next(tt_rng *rng) {
    uint64_t *s = rng->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double tt_rng_uniform(tt_rng *rng) { return (double)(tt_rng_next(rng) >> 11) * 0x1.0p-53; }

double tt_rng_normal(tt_rng *rng) {
    double u1 = tt_rng_uniform(rng);
    double u2 = tt_rng_uniform(rng);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

void tt_rng_normal_pair(tt_rng *rng, double out[2]) {
    double u1 = tt_rng_uniform(rng);
    double u2 = tt_rng_uniform(rng);
    if (u1 < 1e-300) u1 = 1e-300;
    const double r = sqrt(-2.0 * log(u1)), angle = 6.283185307179586 * u2;
    out[0] = r * cos(angle);
    out[1] = r * sin(angle);
}

void tt_rng_shuffle(tt_rng *rng, int64_t *values, int64_t n) {
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)(tt_rng_next(rng) % (uint64_t)(i + 1));
        int64_t t = values[i];
        values[i] = values[j];
        values[j] = t;
    }
}
