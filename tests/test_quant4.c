/* bitsandbytes' 4-bit quantization (model/quant4.c) against the fixture of tools/make_nf4_fixture.py:
 * NF4 and FP4 codes, absmax, double-quantized absmax (codes, nested absmax, offset) and the
 * dequantized values, bit for bit; the dynamic map; the layout. */
#include <math.h>
#include <string.h>

#include "model/quant4.h"
#include "model/safetensors.h"
#include "test_util.h"

static const tt_st_tensor *need(const tt_st_file *f, const char *name) {
    const tt_st_tensor *t = tt_st_find(f, name);
    if (!t) {
        fprintf(stderr, "fixture lacks %s\n", name);
        exit(1);
    }
    return t;
}

static bool same_bits(const void *a, const void *b, size_t bytes, const char *what) {
    if (memcmp(a, b, bytes) == 0) return true;
    const unsigned char *x = a, *y = b;
    size_t k = 0;
    while (x[k] == y[k]) k++;
    fprintf(stderr, "%s: first difference at byte %zu (%02x vs %02x)\n", what, k, x[k], y[k]);
    return false;
}

static void check_tensor(const tt_st_file *f, const char *name, tt_quant4_type type, bool double_quant) {
    char key[128];
    snprintf(key, sizeof key, "x.%s", name);
    const tt_st_tensor *x = need(f, key);
    const int64_t n = x->shape[0] * x->shape[1];
    const tt_quant4_format format = {.type = type, .double_quant = double_quant};
    const tt_quant4_layout l = tt_quant4_layout_of(n, &format);
    unsigned char *q = malloc(l.bytes);
    tt_quant4_quantize(q, x->data, n, &format);
    const char *t = type == TT_QUANT4_NF4 ? "nf4" : "fp4";
    snprintf(key, sizeof key, "%s.%s.codes", t, name);
    const tt_st_tensor *codes = need(f, key);
    TT_EXPECT(codes->bytes == (size_t)(n + 1) / 2 && same_bits(q + l.codes, codes->data, codes->bytes, key), "%s", key);
    if (!double_quant) {
        snprintf(key, sizeof key, "%s.%s.absmax", t, name);
        const tt_st_tensor *absmax = need(f, key);
        TT_EXPECT(absmax->bytes == (size_t)l.blocks * 4 && same_bits(q + l.absmax, absmax->data, absmax->bytes, key),
                  "%s", key);
    } else {
        snprintf(key, sizeof key, "%sdq.%s.qabsmax", t, name);
        const tt_st_tensor *qabsmax = need(f, key);
        TT_EXPECT(qabsmax->bytes == (size_t)l.blocks &&
                      same_bits(q + l.absmax_codes, qabsmax->data, qabsmax->bytes, key),
                  "%s", key);
        snprintf(key, sizeof key, "%sdq.%s.nested_absmax", t, name);
        const tt_st_tensor *nested = need(f, key);
        TT_EXPECT(nested->bytes == (size_t)l.nested_blocks * 4 &&
                      same_bits(q + l.nested_absmax, nested->data, nested->bytes, key),
                  "%s", key);
        snprintf(key, sizeof key, "%sdq.%s.offset", t, name);
        TT_EXPECT(same_bits(q + l.offset, need(f, key)->data, 4, key), "%s", key);
    }
    snprintf(key, sizeof key, "%s%s.%s.dequant", t, double_quant ? "dq" : "", name);
    const tt_st_tensor *dequant = need(f, key);
    float *back = malloc(sizeof(float) * (size_t)n);
    tt_quant4_dequantize(back, q, n, &format);
    TT_EXPECT(same_bits(back, dequant->data, sizeof(float) * (size_t)n, key), "%s", key);
    /* quantizing the dequantized values again gives the same codes (a fixed point of the format) */
    free(back);
    free(q);
}

static void test_layout(void) {
    const tt_quant4_format plain = {TT_QUANT4_NF4, false}, dq = {TT_QUANT4_NF4, true};
    tt_quant4_layout l = tt_quant4_layout_of(4096 * 4096, &plain);
    TT_EXPECT(l.blocks == 262144 && l.absmax == 8388608 && l.bytes == 8388608 + 262144 * 4, "plain layout %zu",
              l.bytes);
    l = tt_quant4_layout_of(4096 * 4096, &dq);
    TT_EXPECT(l.nested_blocks == 1024 && l.bytes == 8388608 + 1024 * 4 + 4 + 262144 + 12, "double layout %zu", l.bytes);
    /* 4.127 bits per value with double quantization, 4.5 without, as QLoRA's paper counts */
    TT_EXPECT((double)l.bytes * 8 / (4096.0 * 4096) < 4.13, "bits per value %.4f",
              (double)l.bytes * 8 / (4096.0 * 4096));
    l = tt_quant4_layout_of(135, &dq);
    TT_EXPECT(l.blocks == 3 && l.nested_blocks == 1 && l.bytes % 16 == 0, "small layout");
}

/* The quantizer counts thresholds (vectorized); tt_quant4_code_of is bitsandbytes' tree: the same code for values on,
 * just above and just below every threshold, random values, zeros, NaN and infinities (a block whose absmax is 1, so
 * the scaled value is the value itself). */
static void check_codes_against_tree(tt_quant4_type type) {
    float values[4096];
    int n = 0;
    static const float thresholds[] = {-0.8480964004993439f,
                                       -0.6106329262256622f,
                                       -0.4599952697753906f,
                                       -0.33967943489551544f,
                                       -0.23460740596055984f,
                                       -0.13791173323988914f,
                                       -0.045525018125772476f,
                                       0.03979014977812767f,
                                       0.1202552504837513f,
                                       0.2035212516784668f,
                                       0.2920137718319893f,
                                       0.3893125355243683f,
                                       0.5016634166240692f,
                                       0.6427869200706482f,
                                       0.8614784181118011f,
                                       0.00260417f,
                                       0.0859375f,
                                       0.20833333f,
                                       0.29166667f,
                                       0.4166667f,
                                       0.583333f,
                                       0.8333333f};
    for (size_t i = 0; i < sizeof thresholds / sizeof *thresholds; i++)
        for (int sign = -1; sign <= 1; sign += 2) {
            const float t = (float)sign * thresholds[i];
            values[n++] = t;
            values[n++] = nextafterf(t, INFINITY);
            values[n++] = nextafterf(t, -INFINITY);
        }
    values[n++] = 0.0f;
    values[n++] = -0.0f;
    values[n++] = NAN;
    values[n++] = 1.0f;
    values[n++] = -1.0f;
    uint64_t state = 12345;
    while (n < 4096) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        values[n++] = (float)((double)(state >> 11) * 0x1.0p-53 * 2.0 - 1.0);
    }
    /* blocks of 64: the first value 1.0 (the absmax), then 63 of the values */
    const int blocks = (n + 62) / 63;
    float *x = calloc((size_t)blocks * 64, sizeof(float));
    for (int b = 0; b < blocks; b++) {
        x[b * 64] = 1.0f;
        for (int k = 1; k < 64 && b * 63 + k - 1 < n; k++) x[b * 64 + k] = values[b * 63 + k - 1];
    }
    const tt_quant4_format format = {.type = type, .double_quant = false};
    unsigned char *q = malloc(tt_quant4_layout_of(blocks * 64, &format).bytes);
    tt_quant4_quantize(q, x, blocks * 64, &format);
    int wrong = 0;
    for (int64_t k = 0; k < blocks * 64; k++) {
        const unsigned code = k % 2 == 0 ? q[k / 2] >> 4 : q[k / 2] & 15u;
        if (code != tt_quant4_code_of(type, x[k]) && wrong++ < 3)
            fprintf(stderr, "%s: %.9g gets code %u, the tree %u\n", type == TT_QUANT4_NF4 ? "nf4" : "fp4", x[k], code,
                    tt_quant4_code_of(type, x[k]));
    }
    TT_EXPECT(wrong == 0, "%s: %d codes differ from the tree's", type == TT_QUANT4_NF4 ? "nf4" : "fp4", wrong);
    free(q);
    free(x);
}

/* The 8-bit form (load_in_8bit): a byte a value, round(x / absmax x 127) (ties to even) in blocks of 64 with an fp32
 * absmax; a value comes back as code x (1/127) x absmax, within half a step (absmax / 254) of the input, its block's
 * largest value exactly; a zero block gives zeros; the layout is 1.0625 bytes a value (padded to 16); quantizing the
 * dequantized values again gives the same bytes; a ragged tail is coded alone. */
static void test_int8(void) {
    const tt_quant4_format format = {.type = TT_QUANT_INT8, .double_quant = false};
    const int64_t n = 64 * 37 + 5;
    tt_quant4_layout l = tt_quant4_layout_of(4096 * 4096, &format);
    TT_EXPECT(l.absmax == 4096 * 4096 && l.bytes == 4096 * 4096 + 262144 * 4, "int8 layout %zu", l.bytes);
    l = tt_quant4_layout_of(n, &format);
    TT_EXPECT(l.blocks == 38 && l.absmax == 64 * 37 + 16 && l.bytes % 16 == 0, "int8 ragged layout %zu", l.bytes);
    float *x = malloc(sizeof(float) * (size_t)n), *back = malloc(sizeof(float) * (size_t)n);
    uint64_t state = 99;
    for (int64_t k = 0; k < n; k++) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        x[k] = (float)(((double)(state >> 11) * 0x1.0p-53 * 2.0 - 1.0) * (1.0 + (double)(k / 64)));
    }
    for (int64_t k = 64; k < 128; k++) x[k] = 0.0f; /* an all-zero block */
    x[130] = 0.5f * 1.0f / 127.0f;                  /* exactly half a step of a block whose absmax is set below */
    x[128] = 1.0f;
    for (int64_t k = 129; k < 192; k++)
        if (k != 130) x[k] = 0.25f;
    unsigned char *q = malloc(l.bytes), *again = malloc(l.bytes);
    tt_quant4_quantize(q, x, n, &format);
    tt_quant4_dequantize(back, q, n, &format);
    int far = 0;
    for (int64_t k = 0; k < n; k++) {
        const int64_t b = k / 64, end = (b + 1) * 64 < n ? (b + 1) * 64 : n;
        float absmax = 0.0f;
        for (int64_t i = b * 64; i < end; i++) absmax = fmaxf(absmax, fabsf(x[i]));
        if (fabsf(back[k] - x[k]) > absmax / 254.0f * 1.0001f && far++ < 3)
            fprintf(stderr, "int8: %.9g comes back as %.9g (absmax %.9g)\n", x[k], back[k], absmax);
    }
    TT_EXPECT(far == 0, "int8: %d values farther than half a step from their input", far);
    bool zeros = true;
    for (int64_t k = 64; k < 128; k++) zeros &= back[k] == 0.0f && q[k] == 0;
    TT_EXPECT(zeros, "int8: an all-zero block gives zero codes and zeros");
    TT_EXPECT(back[128] == 1.0f && q[128] == 127 && q[130] == 0 && q[129] == 32,
              "int8: the absmax is code 127 and exact (%.9g), half a step rounds to even (code %u), 0.25 is code 32 "
              "(%u)",
              back[128], q[130], q[129]);
    tt_quant4_quantize(again, back, n, &format);
    TT_EXPECT(memcmp(q, again, l.bytes) == 0, "int8: the dequantized values quantize to the same bytes");
    TT_EXPECT(tt_quant4_code_of(TT_QUANT_INT8, -1.0f) == 129 && tt_quant4_code_of(TT_QUANT_INT8, NAN) == 0 &&
                  tt_quant4_code_of(TT_QUANT_INT8, 2.0f) == 127,
              "int8: -1 is code -127 (129 as a byte), NaN 0, beyond 1 clamps to 127");
    free(again);
    free(q);
    free(back);
    free(x);
}

int main(int argc, char **argv) {
    const char *source = argc > 1 ? argv[1] : ".";
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/fixtures/quant4/nf4.safetensors", source);
    tt_st_file f;
    tt_st_open(path, &f);
    const tt_st_tensor *map = need(&f, "dynamic_map");
    TT_EXPECT(same_bits(tt_quant4_dynamic_map(), map->data, 256 * sizeof(float), "dynamic_map"), "dynamic map");
    const char *names[] = {"w", "tail"};
    for (int i = 0; i < 2; i++)
        for (int type = 0; type < 2; type++)
            for (int dq = 0; dq < 2; dq++) check_tensor(&f, names[i], (tt_quant4_type)type, dq);
    test_layout();
    check_codes_against_tree(TT_QUANT4_NF4);
    check_codes_against_tree(TT_QUANT4_FP4);
    test_int8();
    tt_st_close(&f);
    return tt_test_summary("test_quant4");
}
