/* bitsandbytes' 4-bit quantization, written from its published algorithm (csrc/kernels.cu:
 * kQuantizeBlockwise, dQuantizeNF4, dQuantizeFP4, dQuantize; functional.py: quantize_4bit,
 * quantize_blockwise, create_dynamic_map) and checked bit for bit against the fixture of
 * tools/make_nf4_fixture.py. Compiled with -ffp-contract=off: every product and sum is rounded to
 * fp32 on its own, as the CUDA kernels round it. */
#include "model/quant4.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"

static const float nf4_values[16] = TT_NF4_VALUES;
static const float fp4_magnitudes[8] = TT_FP4_MAGNITUDES;

float tt_quant4_code_value(tt_quant4_type type, unsigned code) {
    if (type == TT_QUANT_INT8) return (float)(signed char)(code & 255u) * TT_INT8_STEP;
    if (type == TT_QUANT4_NF4) return nf4_values[code & 15u];
    const float sign = 1.0f - (float)(2 * ((code & 8u) >> 3));
    return fp4_magnitudes[code & 7u] * sign;
}

/* The midpoints between neighbouring NF4 values, as a binary tree (bitsandbytes' thresholds: a
 * value equal to a midpoint goes down). */
static inline unsigned nf4_code_of(float x) {
    if (x > 0.03979014977812767f) {
        if (x > 0.3893125355243683f) {
            if (x > 0.6427869200706482f) return x > 0.8614784181118011f ? 15u : 14u;
            return x > 0.5016634166240692f ? 13u : 12u;
        }
        if (x > 0.2035212516784668f) return x > 0.2920137718319893f ? 11u : 10u;
        return x > 0.1202552504837513f ? 9u : 8u;
    }
    if (x > -0.33967943489551544f) {
        if (x > -0.13791173323988914f) return x > -0.045525018125772476f ? 7u : 6u;
        return x > -0.23460740596055984f ? 5u : 4u;
    }
    if (x > -0.6106329262256622f) return x > -0.4599952697753906f ? 3u : 2u;
    return x > -0.8480964004993439f ? 1u : 0u;
}

static inline unsigned fp4_code_of(float x) {
    const unsigned sign = x < 0 ? 8u : 0u;
    x = fabsf(x);
    if (x > 0.29166667f) {
        if (x > 0.583333f) return (x > 0.8333333f ? 3u : 2u) + sign;
        return (x > 0.4166667f ? 5u : 4u) + sign;
    }
    if (x > 0.0859375f) return (x > 0.20833333f ? 7u : 6u) + sign;
    return (x > 0.00260417f ? 1u : 0u) + sign;
}

/* The 8-bit code of a normalized value: round(x x 127) to nearest even, in [-127, 127]; NaN (a value of an all-zero
 * block) 0. As a byte (two's complement). */
static inline unsigned int8_code_of(float x) {
    const float r = rintf(x * 127.0f);
    const int c = r != r ? 0 : r > 127.0f ? 127 : r < -127.0f ? -127 : (int)r;
    return (unsigned)(unsigned char)(signed char)c;
}

unsigned tt_quant4_code_of(tt_quant4_type type, float normalized) {
    if (type == TT_QUANT_INT8) return int8_code_of(normalized);
    return type == TT_QUANT4_NF4 ? nf4_code_of(normalized) : fp4_code_of(normalized);
}

/* The trees above, as counts: a code is the number of (float) thresholds a value exceeds (they rise with the codes;
 * NaN exceeds none, as in the trees), which the compiler turns into vector compares instead of four unpredictable
 * branches a value (on random weights 20 ns a value with the trees, 4 with the counts: CPU-minutes for a 70B base).
 * FP4's tree compares |x|, and its counts map to codes by magnitude rank. test_quant4 checks both against the trees. */
static const float nf4_thresholds[15] = {
    -0.8480964004993439f,  -0.6106329262256622f,   -0.4599952697753906f, -0.33967943489551544f, -0.23460740596055984f,
    -0.13791173323988914f, -0.045525018125772476f, 0.03979014977812767f, 0.1202552504837513f,   0.2035212516784668f,
    0.2920137718319893f,   0.3893125355243683f,    0.5016634166240692f,  0.6427869200706482f,   0.8614784181118011f};
static const float fp4_thresholds[7] = {0.00260417f, 0.0859375f, 0.20833333f, 0.29166667f,
                                        0.4166667f,  0.583333f,  0.8333333f};
static const unsigned char fp4_code_of_rank[8] = {0, 1, 6, 7, 4, 5, 2, 3};

/* torch.linspace(start, end, n) in fp32: from the start up to n / 2, from the end above. */
static void linspace_f32(float *out, float start, float end, int n) {
    const float step = (end - start) / (float)(n - 1);
    for (int i = 0; i < n; i++) out[i] = i < n / 2 ? start + step * (float)i : end - step * (float)(n - 1 - i);
}

static int compare_floats(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static float dynamic_map[256];
static pthread_once_t dynamic_map_once = PTHREAD_ONCE_INIT;

/* Signed, 7 exponent bits: for exponent i the means of 2^i + 1 points spaced evenly in [0.1, 1],
 * times 10^(i - 6), with both signs; then 0 and 1. */
static void build_dynamic_map(void) {
    int count = 0;
    for (int i = 0; i < 7; i++) {
        const int items = (1 << i) + 1;
        float boundaries[65];
        linspace_f32(boundaries, 0.1f, 1.0f, items);
        const float scale = (float)pow(10.0, (double)(i - 6));
        for (int k = 0; k + 1 < items; k++) dynamic_map[count++] = scale * ((boundaries[k] + boundaries[k + 1]) / 2.0f);
        for (int k = 0; k + 1 < items; k++)
            dynamic_map[count++] = -scale * ((boundaries[k] + boundaries[k + 1]) / 2.0f);
    }
    dynamic_map[count++] = 0.0f;
    dynamic_map[count++] = 1.0f;
    TT_CHECK(count == 256, "the dynamic map has %d entries", count);
    qsort(dynamic_map, 256, sizeof(float), compare_floats);
}

const float *tt_quant4_dynamic_map(void) {
    pthread_once(&dynamic_map_once, build_dynamic_map);
    return dynamic_map;
}

/* bitsandbytes' dQuantize (not stochastic): a binary search over the sorted codes, then the nearer
 * neighbour by the midpoint (ties to the code the search stopped at). */
static unsigned char dynamic_code_of(const float *code, float x) {
    int pivot = 127, upper_pivot = 255, lower_pivot = 0;
    float lower = -1.0f, upper = 1.0f;
    float value = code[pivot];
    for (int step = 64; step > 0; step >>= 1) {
        if (x > value) {
            lower_pivot = pivot;
            lower = value;
            pivot += step;
        } else {
            upper_pivot = pivot;
            upper = value;
            pivot -= step;
        }
        value = code[pivot];
    }
    if (upper_pivot == 255) upper = code[upper_pivot];
    if (lower_pivot == 0) lower = code[lower_pivot];
    if (x > value) return (unsigned char)(x > (upper + value) * 0.5f ? upper_pivot : pivot);
    return (unsigned char)(x < (lower + value) * 0.5f ? lower_pivot : pivot);
}

/* 1 / absmax as the kernels take it (an all-zero block gives infinity, so its values become NaN and
 * the tree gives them its lowest code, as on the GPU). */
static float reciprocal(float absmax) { return absmax == 0.0f ? INFINITY : 1.0f / absmax; }

/* max |x| (a NaN is passed over, as fmaxf does; written out so that it is not a library call per value) */
static float block_absmax_of(const float *x, int64_t count) {
    float m = 0.0f;
    for (int64_t k = 0; k < count; k++) {
        const float a = fabsf(x[k]);
        if (a > m) m = a;
    }
    return m;
}

/* value * reciprocal, with 0 * inf = NaN as IEEE (and the GPU) has it, without tripping a sanitizer */
static float scaled(float value, float recip) { return isinf(recip) && value == 0.0f ? NAN : value * recip; }

void tt_quant4_quantize_nested(void *dst, const float *absmax, int64_t numel) {
    const tt_quant4_format format = {.type = TT_QUANT4_NF4, .double_quant = true}; /* the layout only */
    const tt_quant4_layout l = tt_quant4_layout_of(numel, &format);
    if (l.blocks == 0) return;
    unsigned char *base = dst;
    /* the offset: the mean of the absmax values, summed in order in double (one thread: the bits of the sum) */
    double sum = 0.0;
    for (int64_t b = 0; b < l.blocks; b++) sum += absmax[b];
    const float offset = (float)(sum / (double)l.blocks);
    float *nested = (float *)(base + l.nested_absmax);
    unsigned char *codes = base + l.absmax_codes;
    const float *map = tt_quant4_dynamic_map();
    /* nested blocks are independent: threads change no bit */
#pragma omp parallel for schedule(static) if (l.nested_blocks > 16)
    for (int64_t nb = 0; nb < l.nested_blocks; nb++) {
        const int64_t first = nb * TT_QUANT4_NESTED_BLOCK;
        const int64_t end = first + TT_QUANT4_NESTED_BLOCK < l.blocks ? first + TT_QUANT4_NESTED_BLOCK : l.blocks;
        float m = 0.0f;
        for (int64_t b = first; b < end; b++) m = fmaxf(m, fabsf(absmax[b] - offset));
        nested[nb] = m;
        const float recip = reciprocal(m);
        for (int64_t b = first; b < end; b++) codes[b] = dynamic_code_of(map, scaled(absmax[b] - offset, recip));
    }
    memcpy(base + l.offset, &offset, sizeof offset);
}

/* The codes of one block of count values (count <= 64; an odd tail pads with 0), two to a byte from codes[0]: the
 * codes of nf4_code_of / fp4_code_of, counted (above); 8-bit codes one to a byte. */
static inline void quantize_block(unsigned char *codes, const float *x, int64_t count, float recip,
                                  tt_quant4_type type) {
    float v[TT_QUANT4_BLOCK];
    unsigned char code[TT_QUANT4_BLOCK];
    const int64_t even = (count + 1) / 2 * 2;
    for (int64_t k = 0; k < even; k++) v[k] = scaled(k < count ? x[k] : 0.0f, recip);
    if (type == TT_QUANT_INT8) { /* a byte a value */
        for (int64_t k = 0; k < count; k++) codes[k] = (unsigned char)int8_code_of(v[k]);
        return;
    }
    if (type == TT_QUANT4_NF4) {
        for (int64_t k = 0; k < even; k++) {
            unsigned c = 0;
            for (int i = 0; i < 15; i++) c += v[k] > nf4_thresholds[i];
            code[k] = (unsigned char)c;
        }
    } else {
        for (int64_t k = 0; k < even; k++) {
            const float a = fabsf(v[k]);
            unsigned rank = 0;
            for (int i = 0; i < 7; i++) rank += a > fp4_thresholds[i];
            code[k] = (unsigned char)(fp4_code_of_rank[rank] + (v[k] < 0 ? 8u : 0u));
        }
    }
    for (int64_t k = 0; k < even; k += 2) codes[k / 2] = (unsigned char)(code[k] << 4 | code[k + 1]);
}

void tt_quant4_quantize_blocks(void *dst, float *absmax, int64_t numel, tt_quant4_type type, int64_t first_block,
                               int64_t block_count, const float *src) {
    unsigned char *codes = dst;
    for (int64_t i = 0; i < block_count; i++) {
        const int64_t b = first_block + i, first = b * TT_QUANT4_BLOCK;
        const int64_t count = first + TT_QUANT4_BLOCK <= numel ? TT_QUANT4_BLOCK : numel - first;
        const float *x = src + i * TT_QUANT4_BLOCK;
        const float m = block_absmax_of(x, count);
        absmax[b] = m;
        quantize_block(codes + tt_quant4_code_bytes(first, type), x, count, reciprocal(m), type); /* first: even */
    }
}

void tt_quant4_quantize(void *dst, const float *src, int64_t numel, const tt_quant4_format *format) {
    TT_CHECK(format->type != TT_QUANT_INT8 || !format->double_quant, "an 8-bit weight has no double quantization");
    const tt_quant4_layout l = tt_quant4_layout_of(numel, format);
    memset(dst, 0, l.bytes);
    float *absmax = format->double_quant ? tt_xmalloc(sizeof(float) * (size_t)(l.blocks ? l.blocks : 1),
                                                      "the absmax of a quantized weight")
                                         : (float *)((unsigned char *)dst + l.absmax);
    /* blocks are independent (a 70B base is 1.1G of them): threads change no bit */
    const int64_t per_piece = 256;
#pragma omp parallel for schedule(static) if (l.blocks > per_piece)
    for (int64_t first = 0; first < l.blocks; first += per_piece) {
        const int64_t count = first + per_piece < l.blocks ? per_piece : l.blocks - first;
        tt_quant4_quantize_blocks(dst, absmax, numel, format->type, first, count, src + first * TT_QUANT4_BLOCK);
    }
    if (format->double_quant) {
        tt_quant4_quantize_nested(dst, absmax, numel);
        free(absmax);
    }
}

float tt_quant4_block_absmax(const void *src, const tt_quant4_layout *l, const tt_quant4_format *format, int64_t b) {
    const unsigned char *base = src;
    float value;
    if (!format->double_quant) {
        memcpy(&value, base + l->absmax + (size_t)b * sizeof(float), sizeof value);
        return value;
    }
    float nested, offset;
    memcpy(&nested, base + l->nested_absmax + (size_t)(b / TT_QUANT4_NESTED_BLOCK) * sizeof(float), sizeof nested);
    memcpy(&offset, base + l->offset, sizeof offset);
    const float decoded = tt_quant4_dynamic_map()[base[l->absmax_codes + (size_t)b]] * nested;
    return decoded + offset;
}

void tt_quant4_dequantize_blocks(float *dst, const void *src, int64_t numel, const tt_quant4_format *format,
                                 int64_t first_block, int64_t block_count) {
    const tt_quant4_layout l = tt_quant4_layout_of(numel, format);
    const unsigned char *codes = (const unsigned char *)src + l.codes;
    const int64_t first_value = first_block * TT_QUANT4_BLOCK;
    /* every value is one product of its own: threads change no bit */
#pragma omp parallel for schedule(static) if (block_count > 1024)
    for (int64_t b = first_block; b < first_block + block_count; b++) {
        const float absmax = tt_quant4_block_absmax(src, &l, format, b);
        const int64_t first = b * TT_QUANT4_BLOCK;
        const int64_t end = first + TT_QUANT4_BLOCK < numel ? first + TT_QUANT4_BLOCK : numel;
        if (format->type == TT_QUANT_INT8) /* a byte a value */
            for (int64_t k = first; k < end; k++)
                dst[k - first_value] = tt_quant4_code_value(TT_QUANT_INT8, codes[k]) * absmax;
        else
            for (int64_t k = first; k < end; k++) {
                const unsigned code = k % 2 == 0 ? codes[k / 2] >> 4 : codes[k / 2] & 15u;
                dst[k - first_value] = tt_quant4_code_value(format->type, code) * absmax;
            }
    }
}

void tt_quant4_dequantize(float *dst, const void *src, int64_t numel, const tt_quant4_format *format) {
    tt_quant4_dequantize_blocks(dst, src, numel, format, 0, tt_quant4_layout_of(numel, format).blocks);
}
