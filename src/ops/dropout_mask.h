/* The dropout mask, shared by the CPU and CUDA backends: 32 random bits per element from
 * (seed, element index) through splitmix64's finaliser, so an element's bits are known without
 * drawing the ones before it, in any order, on either backend. The mask is therefore a function
 * of the seed alone: the backward, and a recompute under gradient checkpointing, regenerate the
 * forward's mask bit for bit without storing it. */
#ifndef TT_OPS_DROPOUT_MASK_H
#define TT_OPS_DROPOUT_MASK_H

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define TT_DROPOUT_FN static __host__ __device__ __forceinline__
#else
#define TT_DROPOUT_FN static inline
#endif

/* splitmix64's (index + 1)-th output from state `seed`, upper half. */
TT_DROPOUT_FN uint32_t tt_dropout_bits(uint64_t seed, uint64_t index) {
    uint64_t z = seed + (index + 1) * 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (uint32_t)(z >> 32);
}

/* The seed whose mask at element i is seed's at element offset + i: a slice of rows (tiled_mlp's
 * shards) draws the whole tensor's mask (index + 1 enters tt_dropout_bits times the same odd
 * constant, modulo 2^64). */
TT_DROPOUT_FN uint64_t tt_dropout_seed_at(uint64_t seed, uint64_t offset) {
    return seed + offset * 0x9e3779b97f4a7c15ull;
}

/* Uniform noise in [-magnitude, magnitude) from an element's bits (NEFTune's): 24 of them as a float in [0, 1), exact
 * in fp32 on either backend. */
TT_DROPOUT_FN float tt_uniform_noise(uint64_t seed, uint64_t index, float magnitude) {
    const float u = (float)(tt_dropout_bits(seed, index) >> 8) * (1.0f / 16777216.0f);
    return magnitude * (2.0f * u - 1.0f);
}

/* An element is dropped when its bits are below the threshold: probability threshold / 2^32. */
static inline uint32_t tt_dropout_threshold(double probability) {
    if (!(probability > 0)) return 0;
    const double t = floor(probability * 4294967296.0);
    return t >= 4294967295.0 ? 4294967295u : (uint32_t)t;
}

/* A seed for one mask from a parent seed and a counter (splitmix64's step), so that nested counters
 * (run seed, optimizer step, micro-batch, layer, module) give unrelated streams. */
static inline uint64_t tt_dropout_seed_mix(uint64_t parent, uint64_t counter) {
    uint64_t z = parent ^ (counter + 0x632be59bd9b4e019ull) * 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

#endif
