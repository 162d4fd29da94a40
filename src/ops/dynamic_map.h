/* bitsandbytes' dynamic quantization maps (functional.create_dynamic_map with its defaults: 8 bits, up to 7
 * exponent bits), which its 8-bit optimizers quantize their moments with: 256 sorted codes in [-1, 1] (signed) or
 * [0, 1] (unsigned). Decade e = 0 .. 6 contributes 10^(e-6) times the midpoints of an fp32 linspace(0.1, 1) of
 * 2^e + 1 points (signed, and their negatives) or 2^(e+1) + 1 points (unsigned); then 0 and 1. The signed map has
 * 127 negative codes, 0 at code 127 and 128 positive codes up to 1; the unsigned one 0 at code 0 and 1 at code 255.
 * Built in fp32 as torch builds it (linspace's element formula, the product with the decade rounded to fp32). */
#ifndef TT_OPS_DYNAMIC_MAP_H
#define TT_OPS_DYNAMIC_MAP_H

#include <stdbool.h>

#define TT_DYNAMIC_MAP_CODES 256

void tt_dynamic_map_build(float map[TT_DYNAMIC_MAP_CODES], bool is_signed);

/* The code of x (a value over its block's absmax, in [-1, 1]) as bitsandbytes' optimizer kernels choose it: a binary
 * search to an even code, then the nearer of it and its neighbour on x's side, by comparing x with their fp32
 * midpoint; x on the midpoint takes the even code. A NaN (0 / 0: a block of zeros) gives code 0. */
unsigned char tt_dynamic_map_nearest(const float map[TT_DYNAMIC_MAP_CODES], float x, bool is_signed);

/* The search itself, for the host and the GPU kernel alike (ops/cuda/kernels_adamw_8bit.cu, a map in shared memory):
 * its only arithmetic, a sum then a halving, cannot be contracted, so both take the same code. Seven halvings from
 * code 127 end on an even code c, with x above the last code passed on the way up (or below everything: the lower
 * bound -1 or 0) and at most the last one passed on the way down (or 1). */
#ifdef __CUDACC__
#define TT_HOST_DEVICE __host__ __device__
#else
#define TT_HOST_DEVICE
#endif
static inline TT_HOST_DEVICE unsigned char tt_dynamic_map_nearest_in(const float *map, float x, bool is_signed) {
    int code = 127, below = 0, above = 255;
    float below_value = is_signed ? -1.0f : 0.0f, above_value = 1.0f, value = map[code];
    for (int half = 64; half > 0; half /= 2) {
        if (x > value) {
            below = code;
            below_value = value;
            code += half;
        } else {
            above = code;
            above_value = value;
            code -= half;
        }
        value = map[code];
    }
    if (x > value) return (unsigned char)(x > (above_value + value) * 0.5f ? above : code);
    return (unsigned char)(x < (below_value + value) * 0.5f ? below : code);
}

#endif
