/* Safetensors and dtypes: writer -> reader round trips for every dtype, the written layout
 * (8-byte aligned data, header order, metadata), the atomic writer (no .tmp left, old file kept
 * on a failed write), sharded checkpoints through model.safetensors.index.json, and every
 * malformed file ending in exit status 1 with a message naming the file and the tensor. Also the
 * element conversions: bf16 and f16 round to nearest even (ties, subnormals, inf, NaN), checked
 * against known bit patterns. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdint.h>
#include <ftw.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>

#include "core/check.h"
#include "core/dtype.h"
#include "model/safetensors.h"
#include "test_util.h"

static bool exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

/* A raw safetensors file: the header string as given, then data_bytes bytes (value i & 0xff). */
static void write_raw(const char *name, const char *header, size_t data_bytes) {
    size_t n = strlen(header);
    unsigned char *buf = malloc(8 + n + data_bytes + 1);
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)((uint64_t)n >> (8 * i));
    memcpy(buf + 8, header, n);
    for (size_t i = 0; i < data_bytes; i++) buf[8 + n + i] = (unsigned char)i;
    tt_test_write_bytes(name, buf, 8 + n + data_bytes);
    free(buf);
}

static void *read_all(const char *path, size_t *bytes) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *buf = malloc((size_t)n + 1);
    *bytes = fread(buf, 1, (size_t)n, f);
    fclose(f);
    return buf;
}

/* Children for tt_expect_die: the argument is a file or directory name inside tt_test_scratch_dir. */
static void open_file(void *arg) {
    tt_st_file f;
    tt_st_open(tt_test_path(arg), &f);
}

static void open_model_dir(void *arg) {
    tt_st_model m;
    tt_st_model_open(tt_test_path(arg), &m);
}

static uint32_t f32_bits(float f) {
    uint32_t b;
    memcpy(&b, &f, 4);
    return b;
}

static float bits_f32(uint32_t b) {
    float f;
    memcpy(&f, &b, 4);
    return f;
}

/* Streaming: two tensors added without data, their bytes appended in pieces through a path buffer that is gone by
 * then; the file equals the one commit writes from whole tensors. Too few bytes or too many abort (a program error). */
static void stream_short(void *arg) {
    tt_st_writer w;
    tt_st_writer_init(&w);
    const int64_t shape[1] = {4};
    tt_st_writer_add(&w, "a", TT_F32, 1, shape, NULL);
    tt_st_writer_begin(&w, tt_test_path(arg));
    const float half[2] = {1, 2};
    tt_st_writer_write(&w, half, sizeof half);
    tt_st_writer_finish(&w);
}

static void stream_long(void *arg) {
    tt_st_writer w;
    tt_st_writer_init(&w);
    const int64_t shape[1] = {1};
    tt_st_writer_add(&w, "a", TT_F32, 1, shape, NULL);
    tt_st_writer_begin(&w, tt_test_path(arg));
    const float two[2] = {1, 2};
    tt_st_writer_write(&w, two, sizeof two);
}

static void test_streamed_writer(void) {
    const float a[6] = {1, 2, 3, 4, 5, 6};
    const uint16_t b[3] = {0x3f80, 0x4000, 0x4040};
    const int64_t shape_a[2] = {2, 3}, shape_b[1] = {3};
    char *whole = tt_test_path("whole.safetensors"), *streamed = tt_test_path("streamed.safetensors");
    tt_st_writer w;
    tt_st_writer_init(&w);
    tt_st_writer_add(&w, "a", TT_F32, 2, shape_a, a);
    tt_st_writer_add(&w, "b", TT_BF16, 1, shape_b, b);
    tt_st_writer_add_metadata(&w, "format", "pt");
    tt_st_writer_commit(&w, whole);
    tt_st_writer_free(&w);
    tt_st_writer_init(&w);
    tt_st_writer_add(&w, "a", TT_F32, 2, shape_a, NULL);
    tt_st_writer_add(&w, "b", TT_BF16, 1, shape_b, NULL);
    tt_st_writer_add_metadata(&w, "format", "pt");
    char *path = tt_xstrdup(streamed);
    tt_st_writer_begin(&w, path);
    memset(path, 'x', strlen(path)); /* the writer keeps its own copy */
    free(path);
    tt_st_writer_write(&w, a, 2 * sizeof(float));
    tt_st_writer_write(&w, a + 2, 4 * sizeof(float));
    tt_st_writer_write(&w, b, sizeof b);
    char tmp[4300];
    snprintf(tmp, sizeof tmp, "%s.tmp", streamed);
    TT_EXPECT(exists(tmp) && !exists(streamed), "until finish the file is its .tmp");
    tt_st_writer_finish(&w);
    tt_st_writer_free(&w);
    size_t n1 = 0, n2 = 0;
    void *x = read_all(whole, &n1), *y = read_all(streamed, &n2);
    TT_EXPECT(x && y && n1 == n2 && memcmp(x, y, n1) == 0, "streamed pieces give the bytes of a whole commit");
    free(x);
    free(y);
    free(whole);
    free(streamed);
    tt_expect_abort(stream_short, "short.safetensors", "8 of the tensors' 16 bytes written");
    tt_expect_abort(stream_long, "long.safetensors", "bytes past the");
}

/* ------------------------------------------------------------------------------------------ */

static void test_dtype_names(void) {
    const char *names[] = {"F32", "BF16", "F16", "F64", "I32", "I64", "U8"};
    const size_t sizes[] = {4, 2, 2, 8, 4, 8, 1};
    for (int i = 0; i < TT_DTYPE_COUNT; i++) {
        tt_dtype d;
        TT_EXPECT(tt_dtype_from_safetensors_name(names[i], &d) == 0 && d == (tt_dtype)i, "parse %s", names[i]);
        TT_EXPECT(strcmp(tt_dtype_safetensors_name((tt_dtype)i), names[i]) == 0, "name of %d", i);
        TT_EXPECT(tt_dtype_size((tt_dtype)i) == sizes[i], "size of %s", names[i]);
        TT_EXPECT(tt_dtype_from_torch_name(tt_dtype_torch_name((tt_dtype)i), &d) == 0 && d == (tt_dtype)i,
                  "torch name round trip %s", names[i]);
    }
    tt_dtype d;
    TT_EXPECT(tt_dtype_from_safetensors_name("F8_E4M3", &d) != 0, "F8_E4M3 is unknown");
    TT_EXPECT(tt_dtype_from_safetensors_name("f32", &d) != 0, "names are case-sensitive");
    TT_EXPECT(tt_dtype_from_torch_name("bfloat16", &d) == 0 && d == TT_BF16, "torch bfloat16");
    TT_EXPECT(tt_dtype_from_torch_name("float8", &d) != 0, "torch float8 is unknown");
}

static void test_bf16(void) {
    struct {
        uint32_t f32;
        uint16_t bf16;
        const char *what;
    } cases[] = {
        {0x3f800000u, 0x3f80, "1.0"},
        {0xbf800000u, 0xbf80, "-1.0"},
        {0x00000000u, 0x0000, "+0"},
        {0x80000000u, 0x8000, "-0"},
        {0x40490fdbu, 0x4049, "pi rounds down (0x0fdb < 0x8000)"},
        {0x3f808000u, 0x3f80, "tie with even low half: stays 0x3f80"},
        {0x3f818000u, 0x3f82, "tie with odd low half: up to 0x3f82"},
        {0x3f808001u, 0x3f81, "just above the tie: up"},
        {0x3f807fffu, 0x3f80, "just below the tie: down"},
        {0x3f80ffffu, 0x3f81, "rounds up inside the binade"},
        {0x3fffffffu, 0x4000, "carry into the exponent"},
        {0x7f7fffffu, 0x7f80, "FLT_MAX rounds to inf"},
        {0x7f7f7fffu, 0x7f7f, "largest value that stays finite"},
        {0xff7fffffu, 0xff80, "-FLT_MAX rounds to -inf"},
        {0x7f800000u, 0x7f80, "inf"},
        {0xff800000u, 0xff80, "-inf"},
        {0x00000001u, 0x0000, "smallest f32 subnormal rounds to 0"},
        {0x00008000u, 0x0000, "subnormal tie to even 0"},
        {0x00018000u, 0x0002, "subnormal tie to even 2"},
        {0x00010000u, 0x0001, "smallest bf16 subnormal"},
        {0x007fffffu, 0x0080, "largest subnormal rounds up to the smallest normal"},
        {0x80018000u, 0x8002, "negative subnormal tie"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint16_t got = tt_f32_to_bf16(bits_f32(cases[i].f32));
        TT_EXPECT(got == cases[i].bf16, "bf16(0x%08x) = 0x%04x, expected 0x%04x (%s)", cases[i].f32, got, cases[i].bf16,
                  cases[i].what);
    }
    /* NaN stays NaN (quiet, sign kept), even when the payload sits only in the low 16 bits that
     * truncation would drop (truncating 0x7f800001 would give inf). */
    const uint32_t nans[] = {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u, 0x7fbfffffu};
    for (size_t i = 0; i < sizeof nans / sizeof nans[0]; i++) {
        uint16_t h = tt_f32_to_bf16(bits_f32(nans[i]));
        TT_EXPECT((h & 0x7f80) == 0x7f80 && (h & 0x7f) != 0 && (h & 0x40) && (h >> 15) == (nans[i] >> 31),
                  "bf16 NaN 0x%08x -> 0x%04x", nans[i], h);
        TT_EXPECT(isnan(tt_bf16_to_f32(h)), "bf16 NaN widens to NaN");
    }
    /* widening is exact: every bf16 is the top half of its float */
    int wrong = 0;
    for (uint32_t h = 0; h < 0x10000; h++) {
        float f = tt_bf16_to_f32((uint16_t)h);
        if (f32_bits(f) != h << 16) wrong++;
        if (!isnan(f) && tt_f32_to_bf16(f) != h) wrong++;
    }
    TT_EXPECT(wrong == 0, "%d bf16 values do not round-trip exactly", wrong);
    TT_EXPECT(tt_bf16_to_f32(0xc040) == -3.0f && tt_bf16_to_f32(0x3f00) == 0.5f, "bf16 known values");
}

static void test_f16(void) {
    struct {
        uint32_t f32;
        uint16_t f16;
        const char *what;
    } cases[] = {
        {0x3f800000u, 0x3c00, "1.0"},
        {0xc0000000u, 0xc000, "-2.0"},
        {0x3f000000u, 0x3800, "0.5"},
        {0x477fe000u, 0x7bff, "65504 (largest half)"},
        {0x477fefffu, 0x7bff, "just below 65520 rounds down to 65504"},
        {0x477ff000u, 0x7c00, "65520: tie between 65504 (odd) and 65536: to even = inf"},
        {0x47800000u, 0x7c00, "65536 overflows to inf"},
        {0x49742400u, 0x7c00, "1e6 overflows to inf"},
        {0xc9742400u, 0xfc00, "-1e6 overflows to -inf"},
        {0x7f800000u, 0x7c00, "inf"},
        {0xff800000u, 0xfc00, "-inf"},
        {0x00000000u, 0x0000, "+0"},
        {0x80000000u, 0x8000, "-0"},
        {0x38800000u, 0x0400, "2^-14: smallest normal"},
        {0x387fc000u, 0x03ff, "largest subnormal"},
        {0x387fe000u, 0x0400, "tie above the largest subnormal (odd) rounds up to the smallest normal"},
        {0x33800000u, 0x0001, "2^-24: smallest subnormal"},
        {0x33000000u, 0x0000, "2^-25: tie between 0 and the smallest subnormal: to even 0"},
        {0x33000001u, 0x0001, "just above 2^-25 rounds up"},
        {0x33c00000u, 0x0002, "1.5 x 2^-24: tie between 1 and 2: to even 2"},
        {0x34200000u, 0x0002, "2.5 x 2^-24: tie between 2 and 3: to even 2"},
        {0x34300000u, 0x0003, "2.75 x 2^-24: rounds to 3"},
        {0x32ffffffu, 0x0000, "below half the smallest subnormal: 0"},
        {0xb3800000u, 0x8001, "negative smallest subnormal"},
        {0x00000001u, 0x0000, "f32 subnormal: 0"},
        {0x3f801000u, 0x3c00, "1 + half an ulp: tie to even (down)"},
        {0x3f803000u, 0x3c02, "1 + 3/2 ulp: tie to even (up)"},
        {0x3f801001u, 0x3c01, "just above the tie: up"},
        {0x3fffffffu, 0x4000, "carry into the exponent"},
        {0x40490fdbu, 0x4248, "pi"},
        {0x3dcccccdu, 0x2e66, "0.1"},
        {0xbeaaaaabu, 0xb555, "-1/3"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint16_t got = tt_f32_to_f16(bits_f32(cases[i].f32));
        TT_EXPECT(got == cases[i].f16, "f16(0x%08x) = 0x%04x, expected 0x%04x (%s)", cases[i].f32, got, cases[i].f16,
                  cases[i].what);
    }
    const uint32_t nans[] = {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0x7f801fffu};
    for (size_t i = 0; i < sizeof nans / sizeof nans[0]; i++) {
        uint16_t h = tt_f32_to_f16(bits_f32(nans[i]));
        TT_EXPECT((h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0 && (h >> 15) == (nans[i] >> 31),
                  "f16 NaN 0x%08x -> 0x%04x", nans[i], h);
    }
    /* widening: known values, then every half round-trips through float exactly */
    TT_EXPECT(tt_f16_to_f32(0x0001) == 5.9604644775390625e-8f, "f16 smallest subnormal widens");
    TT_EXPECT(tt_f16_to_f32(0x03ff) == 6.09755516052246094e-5f, "f16 largest subnormal widens");
    TT_EXPECT(tt_f16_to_f32(0x7bff) == 65504.0f && tt_f16_to_f32(0xc000) == -2.0f, "f16 normals widen");
    TT_EXPECT(isinf(tt_f16_to_f32(0x7c00)) && tt_f16_to_f32(0xfc00) < 0, "f16 inf widens");
    TT_EXPECT(isnan(tt_f16_to_f32(0x7e00)) && isnan(tt_f16_to_f32(0x7c01)), "f16 NaN widens");
    TT_EXPECT(f32_bits(tt_f16_to_f32(0x8000)) == 0x80000000u, "f16 -0 widens");
    int wrong = 0;
    for (uint32_t h = 0; h < 0x10000; h++) {
        if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) continue;
        if (tt_f32_to_f16(tt_f16_to_f32((uint16_t)h)) != h) wrong++;
    }
    TT_EXPECT(wrong == 0, "%d halves do not round-trip exactly", wrong);
    /* Every float between two neighbouring halves rounds to the nearer one (ties to even): the
     * midpoints between consecutive positive halves, and one float either side of each. */
    wrong = 0;
    for (uint32_t h = 0; h < 0x7bff; h++) {
        double lo = tt_f16_to_f32((uint16_t)h), hi = tt_f16_to_f32((uint16_t)(h + 1));
        float mid = (float)((lo + hi) / 2); /* exact: halves have 11 significant bits */
        uint16_t even = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
        if (tt_f32_to_f16(mid) != even) wrong++;
        if (tt_f32_to_f16(nextafterf(mid, 0)) != h) wrong++;
        if (tt_f32_to_f16(nextafterf(mid, INFINITY)) != h + 1) wrong++;
    }
    TT_EXPECT(wrong == 0, "%d f16 rounding boundaries are wrong", wrong);
}

static void test_bulk_conversions(void) {
    const float src[6] = {1.0f, -2.5f, 65504.0f, 1e-8f, INFINITY, 0.1f};
    uint16_t b[6], h[6];
    float back[6];
    tt_convert_from_f32(b, TT_BF16, src, 6);
    tt_convert_from_f32(h, TT_F16, src, 6);
    bool same = true;
    for (int i = 0; i < 6; i++) same = same && b[i] == tt_f32_to_bf16(src[i]) && h[i] == tt_f32_to_f16(src[i]);
    TT_EXPECT(same, "bulk narrowing matches the scalar conversions");
    tt_convert_to_f32(back, b, TT_BF16, 6);
    same = true;
    for (int i = 0; i < 6; i++) same = same && f32_bits(back[i]) == f32_bits(tt_bf16_to_f32(b[i]));
    TT_EXPECT(same, "bulk bf16 widening matches the scalar conversion");
    tt_convert_to_f32(back, h, TT_F16, 6);
    TT_EXPECT(back[0] == 1.0f && back[1] == -2.5f && back[2] == 65504.0f && back[3] == 0.0f && isinf(back[4]),
              "bulk f16 widening");
    const double d[3] = {0.5, -1e300, 1.0 / 3.0};
    tt_convert_to_f32(back, d, TT_F64, 3);
    TT_EXPECT(back[0] == 0.5f && isinf(back[1]) && back[2] == (float)(1.0 / 3.0), "f64 narrows to f32");
    tt_convert_from_f32(back, TT_F32, src, 6);
    TT_EXPECT(memcmp(back, src, sizeof src) == 0, "f32 copy");
}

/* ------------------------------------------------------------------------------------------ */

static void test_round_trip(void) {
    float f32[2 * 3 * 2 * 2];
    for (int i = 0; i < 24; i++) f32[i] = (float)i * 0.25f - 3.0f;
    f32[5] = -0.0f;
    f32[6] = INFINITY;
    uint16_t bf16[5] = {0x3f80, 0xc000, 0x4040, 0x7fc0, 0x0001};
    uint16_t f16[3] = {0x3c00, 0x7bff, 0x8001};
    double f64[2] = {1.0 / 3.0, -1e300};
    int32_t i32[4] = {1, -1, INT32_MAX, INT32_MIN};
    int64_t i64[3] = {-5, INT64_MAX, INT64_MIN};
    float scalar = 42.0f;

    tt_st_writer w;
    tt_st_writer_init(&w);
    const int64_t s4[4] = {2, 3, 2, 2}, s5[1] = {5}, s3[1] = {3}, s2[1] = {2}, s22[2] = {2, 2}, s0[2] = {0, 7};
    /* names out of alphabetical order: the header keeps the order they were added in */
    tt_st_writer_add(&w, "model.z.f32", TT_F32, 4, s4, f32);
    tt_st_writer_add(&w, "model.b.bf16", TT_BF16, 1, s5, bf16);
    tt_st_writer_add(&w, "model.empty", TT_F32, 2, s0, NULL);
    tt_st_writer_add(&w, "model.c.f16", TT_F16, 1, s3, f16);
    tt_st_writer_add(&w, "model.a.f64", TT_F64, 1, s2, f64);
    tt_st_writer_add(&w, "model.e.i32", TT_I32, 2, s22, i32);
    tt_st_writer_add(&w, "model.f.i64", TT_I64, 1, s3, i64);
    tt_st_writer_add(&w, "scalar", TT_F32, 0, NULL, &scalar);
    tt_st_writer_add_metadata(&w, "format", "pt");
    tt_st_writer_add_metadata(&w, "written_by", "tiertrain");
    char *p = tt_test_path("round.safetensors");
    tt_st_writer_commit(&w, p);
    tt_st_writer_free(&w);
    char tmp[4300];
    snprintf(tmp, sizeof tmp, "%s.tmp", p);
    TT_EXPECT(!exists(tmp), "no .tmp left behind after a commit");

    tt_st_file f;
    tt_st_open(p, &f);
    TT_EXPECT(f.count == 8, "8 tensors, got %d", f.count);
    TT_EXPECT(strcmp(f.path, p) == 0, "the file keeps its path");
    const tt_st_tensor *t = tt_st_find(&f, "model.z.f32");
    TT_EXPECT(t && t->dtype == TT_F32 && t->ndim == 4 && t->shape[0] == 2 && t->shape[1] == 3 && t->shape[2] == 2 &&
                  t->shape[3] == 2 && t->bytes == sizeof f32 && memcmp(t->data, f32, sizeof f32) == 0,
              "f32 4-d tensor");
    t = tt_st_find(&f, "model.b.bf16");
    TT_EXPECT(t && t->dtype == TT_BF16 && t->ndim == 1 && t->shape[0] == 5 && memcmp(t->data, bf16, sizeof bf16) == 0,
              "bf16 tensor");
    t = tt_st_find(&f, "model.c.f16");
    TT_EXPECT(t && t->dtype == TT_F16 && t->bytes == 6 && memcmp(t->data, f16, sizeof f16) == 0, "f16 tensor");
    t = tt_st_find(&f, "model.a.f64");
    TT_EXPECT(t && t->dtype == TT_F64 && memcmp(t->data, f64, sizeof f64) == 0, "f64 tensor");
    t = tt_st_find(&f, "model.e.i32");
    TT_EXPECT(t && t->dtype == TT_I32 && t->ndim == 2 && memcmp(t->data, i32, sizeof i32) == 0, "i32 tensor");
    t = tt_st_find(&f, "model.f.i64");
    TT_EXPECT(t && t->dtype == TT_I64 && memcmp(t->data, i64, sizeof i64) == 0, "i64 tensor");
    t = tt_st_find(&f, "model.empty");
    TT_EXPECT(t && t->ndim == 2 && t->shape[0] == 0 && t->shape[1] == 7 && t->bytes == 0, "empty tensor");
    t = tt_st_find(&f, "scalar");
    TT_EXPECT(t && t->ndim == 0 && t->bytes == 4 && *(const float *)t->data == 42.0f, "0-d tensor");
    TT_EXPECT(tt_st_find(&f, "missing") == NULL && tt_st_find(&f, "__metadata__") == NULL, "absent tensor");
    TT_EXPECT(((uintptr_t)tt_st_find(&f, "model.z.f32")->data - (uintptr_t)f.map) % 8 == 0,
              "the data area starts 8-byte aligned");

    /* The layout: length, header padded with spaces to a multiple of 8, tensors packed in order. */
    const unsigned char *bytes = f.map;
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | bytes[i];
    TT_EXPECT((8 + n) % 8 == 0, "header length %llu keeps the data 8-byte aligned", (unsigned long long)n);
    TT_EXPECT(bytes[8] == '{', "the header starts with '{'");
    size_t last = 8 + (size_t)n - 1;
    while (bytes[last] == ' ') last--;
    TT_EXPECT(bytes[last] == '}' && 8 + n - 1 - last < 8, "the header is padded with fewer than 8 spaces");
    char *header = strndup((const char *)bytes + 8, (size_t)n);
    const char *order[] = {"__metadata__", "model.z.f32", "model.b.bf16", "model.empty", "model.c.f16",
                           "model.a.f64",  "model.e.i32", "model.f.i64",  "scalar"};
    const char *prev = header;
    bool in_order = true;
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) {
        char key[64];
        snprintf(key, sizeof key, "\"%s\"", order[i]);
        const char *at = strstr(header, key);
        in_order = in_order && at && at >= prev;
        if (at) prev = at;
    }
    TT_EXPECT(in_order, "the header lists __metadata__ then the tensors in the order added: %s", header);
    json_t *root = json_loads(header, 0, NULL);
    json_t *meta = json_object_get(root, "__metadata__");
    TT_EXPECT(json_is_object(meta) && strcmp(json_string_value(json_object_get(meta, "format")), "pt") == 0 &&
                  strcmp(json_string_value(json_object_get(meta, "written_by")), "tiertrain") == 0,
              "metadata written as strings");
    json_t *e = json_object_get(root, "model.b.bf16");
    TT_EXPECT(json_integer_value(json_array_get(json_object_get(e, "data_offsets"), 0)) == 96 &&
                  json_integer_value(json_array_get(json_object_get(e, "data_offsets"), 1)) == 106 &&
                  strcmp(json_string_value(json_object_get(e, "dtype")), "BF16") == 0,
              "bf16 entry follows the 96-byte f32 tensor");
    e = json_object_get(root, "scalar");
    TT_EXPECT(json_array_size(json_object_get(e, "shape")) == 0, "0-d shape is []");
    json_decref(root);
    free(header);
    TT_EXPECT(f.map_bytes == 8 + n + 96 + 10 + 0 + 6 + 16 + 16 + 24 + 4, "file size is header + packed data");
    tt_st_close(&f);

    /* Committing again replaces the file in place (atomic rename over the old one). */
    tt_st_writer_init(&w);
    tt_st_writer_add(&w, "only", TT_I32, 1, s2, i32);
    tt_st_writer_commit(&w, p);
    tt_st_writer_free(&w);
    tt_st_open(p, &f);
    TT_EXPECT(f.count == 1 && tt_st_find(&f, "only") && !tt_st_find(&f, "model.z.f32"), "commit replaces the file");
    tt_st_close(&f);

    /* A writer with no tensors still makes a valid file. */
    tt_st_writer_init(&w);
    char *empty = tt_test_path("empty.safetensors");
    tt_st_writer_commit(&w, empty);
    tt_st_writer_free(&w);
    tt_st_open(empty, &f);
    TT_EXPECT(f.count == 0, "an empty file opens with no tensors");
    tt_st_close(&f);
    free(empty);
    free(p);
}

/* Files written by other tools: spaces and key orders other than ours, gaps between tensors. */
static void test_foreign_layouts(void) {
    write_raw("foreign.safetensors",
              " { \"__metadata__\" : {\"format\": \"pt\"}, \"b\": {\"data_offsets\": [8, 16], \"shape\": [2],"
              " \"dtype\": \"F32\"}, \"a\": {\"shape\": [1, 1], \"dtype\": \"I32\", \"data_offsets\": [0, 4]}}   ",
              20);
    tt_st_file f;
    char *p = tt_test_path("foreign.safetensors");
    tt_st_open(p, &f);
    const tt_st_tensor *a = tt_st_find(&f, "a"), *b = tt_st_find(&f, "b");
    TT_EXPECT(f.count == 2 && a && b, "foreign layout opens");
    TT_EXPECT(a && b && (const unsigned char *)b->data - (const unsigned char *)a->data == 8 &&
                  ((const unsigned char *)b->data)[0] == 8,
              "data pointers follow data_offsets");
    tt_st_close(&f);
    free(p);
}

static void write_one_tensor(const char *path, size_t elements) {
    float *data = calloc(elements, sizeof(float));
    int64_t shape[1] = {(int64_t)elements};
    tt_st_writer w;
    tt_st_writer_init(&w);
    tt_st_writer_add(&w, "w", TT_F32, 1, shape, data);
    tt_st_writer_commit(&w, path);
    tt_st_writer_free(&w);
    free(data);
}

/* A write that fails half way (here: over the file size limit, EFBIG, as a full disk gives
 * ENOSPC) dies naming the file and the reason, removes the .tmp and leaves the old file. */
static void write_too_large(void *arg) {
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit limit = {64 * 1024, 64 * 1024};
    setrlimit(RLIMIT_FSIZE, &limit);
    write_one_tensor(tt_test_path(arg), 1 << 20);
}

static void write_into_missing_directory(void *arg) { write_one_tensor(tt_test_path(arg), 4); }

static void atomic_write_missing_directory(void *arg) {
    (void)arg;
    tt_write_file_atomic(tt_test_path("no_such_dir/x.json"), "{}", 2);
}

static void test_atomic_writer(void) {
    char *p = tt_test_path("atomic.json");
    tt_write_file_atomic(p, "{\"a\": 1}\n", 9);
    size_t n = 0;
    char *text = read_all(p, &n);
    TT_EXPECT(text && n == 9 && memcmp(text, "{\"a\": 1}\n", 9) == 0, "atomic write content");
    free(text);
    char tmp[4300];
    snprintf(tmp, sizeof tmp, "%s.tmp", p);
    TT_EXPECT(!exists(tmp), "no atomic.json.tmp left behind");
    tt_write_file_atomic(p, "", 0);
    struct stat st;
    TT_EXPECT(stat(p, &st) == 0 && st.st_size == 0, "atomic write of 0 bytes");
    free(p);

    p = tt_test_path("kept.safetensors");
    write_one_tensor(p, 3);
    size_t before_bytes = 0;
    void *before = read_all(p, &before_bytes);
    tt_expect_die(write_too_large, "kept.safetensors", "kept.safetensors");
    tt_expect_die(write_too_large, "kept.safetensors", strerror(EFBIG));
    snprintf(tmp, sizeof tmp, "%s.tmp", p);
    TT_EXPECT(!exists(tmp), "a failed write removes its .tmp");
    size_t after_bytes = 0;
    void *after = read_all(p, &after_bytes);
    TT_EXPECT(after && after_bytes == before_bytes && memcmp(before, after, before_bytes) == 0,
              "a failed write leaves the previous file unchanged");
    free(before);
    free(after);
    free(p);
    tt_expect_die(write_into_missing_directory, "no_such_dir/w.safetensors", "no_such_dir/w.safetensors.tmp");
    tt_expect_die(atomic_write_missing_directory, NULL, "No such file or directory");
}

/* ------------------------------------------------------------------------------------------ */

static void test_sharded(void) {
    char *dir = tt_test_path("sharded");
    mkdir(dir, 0755);
    float a[4] = {1, 2, 3, 4}, b[2] = {5, 6}, c[3] = {7, 8, 9};
    int64_t s4[1] = {4}, s2[1] = {2}, s3[1] = {3};
    char *shard1 = tt_test_path("sharded/model-00001-of-00002.safetensors");
    char *shard2 = tt_test_path("sharded/model-00002-of-00002.safetensors");
    tt_st_writer w;
    tt_st_writer_init(&w);
    tt_st_writer_add(&w, "model.embed_tokens.weight", TT_F32, 1, s4, a);
    tt_st_writer_add(&w, "model.norm.weight", TT_F32, 1, s2, b);
    tt_st_writer_commit(&w, shard1);
    tt_st_writer_free(&w);
    tt_st_writer_init(&w);
    tt_st_writer_add(&w, "lm_head.weight", TT_F32, 1, s3, c);
    tt_st_writer_commit(&w, shard2);
    tt_st_writer_free(&w);
    tt_test_write_text("sharded/model.safetensors.index.json",
                       "{\"metadata\": {\"total_size\": 36},\n \"weight_map\": {\n"
                       "  \"lm_head.weight\": \"model-00002-of-00002.safetensors\",\n"
                       "  \"model.embed_tokens.weight\": \"model-00001-of-00002.safetensors\",\n"
                       "  \"model.norm.weight\": \"model-00001-of-00002.safetensors\"}}\n");
    tt_st_model m;
    tt_st_model_open(dir, &m);
    TT_EXPECT(m.file_count == 2, "each shard opened once: %d files", m.file_count);
    const char *file = NULL;
    const tt_st_tensor *t = tt_st_model_find(&m, "model.embed_tokens.weight", &file);
    TT_EXPECT(t && file && strcmp(file, shard1) == 0 && memcmp(t->data, a, sizeof a) == 0, "tensor in shard 1");
    t = tt_st_model_find(&m, "model.norm.weight", &file);
    TT_EXPECT(t && strcmp(file, shard1) == 0 && memcmp(t->data, b, sizeof b) == 0, "second tensor in shard 1");
    t = tt_st_model_find(&m, "lm_head.weight", &file);
    TT_EXPECT(t && strcmp(file, shard2) == 0 && memcmp(t->data, c, sizeof c) == 0, "tensor in shard 2");
    file = "unchanged";
    TT_EXPECT(tt_st_model_find(&m, "absent", &file) == NULL && strcmp(file, "unchanged") == 0, "absent tensor");
    TT_EXPECT(tt_st_model_find(&m, "lm_head.weight", NULL) != NULL, "file_path may be NULL");
    tt_st_model_close(&m);
    TT_EXPECT(m.files == NULL && m.file_count == 0, "close resets the model");

    /* A single-file model directory. */
    char *single_dir = tt_test_path("single");
    mkdir(single_dir, 0755);
    char *single = tt_test_path("single/model.safetensors");
    write_one_tensor(single, 5);
    tt_st_model_open(single_dir, &m);
    t = tt_st_model_find(&m, "w", &file);
    TT_EXPECT(m.file_count == 1 && t && t->shape[0] == 5 && strcmp(file, single) == 0, "single-file model");
    tt_st_model_close(&m);
    free(single);
    free(single_dir);
    free(shard1);
    free(shard2);
    free(dir);
}

/* ------------------------------------------------------------------------------------------ */

#define F32_ENTRY(name, begin, end) \
    "\"" name "\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[" #begin "," #end "]}"

static void test_bad_files(void) {
    tt_test_write_text("short.safetensors", "abc");
    tt_expect_die(open_file, "short.safetensors", "short.safetensors: 3 bytes is too short");
    tt_test_write_text("empty_file.safetensors", "");
    tt_expect_die(open_file, "empty_file.safetensors", "too short");

    write_raw("long_header.safetensors", "{}", 0);
    { /* the length field claims more bytes than the file has */
        unsigned char len[8] = {0xff, 0xff, 0, 0, 0, 0, 0, 0};
        char *p = tt_test_path("long_header.safetensors");
        FILE *f = fopen(p, "r+b");
        fwrite(len, 1, 8, f);
        fclose(f);
        free(p);
    }
    tt_expect_die(open_file, "long_header.safetensors", "the header length field says 65535 bytes");
    {
        unsigned char huge[16] = {0, 0, 0, 0, 0, 0, 0, 0x80, '{', '}'};
        tt_test_write_bytes("huge_header.safetensors", huge, sizeof huge);
    }
    tt_expect_die(open_file, "huge_header.safetensors", "header length field says 9223372036854775808");

    write_raw("not_json.safetensors", "{\"a\": [", 0);
    tt_expect_die(open_file, "not_json.safetensors", "not_json.safetensors: the header is not valid JSON");
    write_raw("array.safetensors", "[1, 2]", 0);
    tt_expect_die(open_file, "array.safetensors", "expected a JSON object");
    write_raw("dup.safetensors", "{" F32_ENTRY("a", 0, 8) "," F32_ENTRY("a", 8, 16) "}", 16);
    tt_expect_die(open_file, "dup.safetensors", "duplicate");

    write_raw("dtype.safetensors", "{\"w\":{\"dtype\":\"F8_E4M3\",\"shape\":[1],\"data_offsets\":[0,1]}}", 8);
    tt_expect_die(open_file, "dtype.safetensors", "tensor 'w' has dtype F8_E4M3");
    write_raw("dtype_type.safetensors", "{\"w\":{\"dtype\":5,\"shape\":[1],\"data_offsets\":[0,4]}}", 8);
    tt_expect_die(open_file, "dtype_type.safetensors", "tensor 'w': \"dtype\" is an integer");
    write_raw("no_shape.safetensors", "{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 8);
    tt_expect_die(open_file, "no_shape.safetensors", "\"shape\" is missing");
    write_raw("entry_type.safetensors", "{\"w\": 3}", 8);
    tt_expect_die(open_file, "entry_type.safetensors", "tensor 'w': the header entry is an integer");
    write_raw("neg.safetensors", "{\"w\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 8);
    tt_expect_die(open_file, "neg.safetensors", "tensor 'w': shape[0] is not a non-negative integer");
    write_raw("real_dim.safetensors", "{\"w\":{\"dtype\":\"F32\",\"shape\":[2, 1.5],\"data_offsets\":[0,4]}}", 8);
    tt_expect_die(open_file, "real_dim.safetensors", "shape[1]");
    write_raw("dims.safetensors", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1],\"data_offsets\":[0,4]}}", 8);
    tt_expect_die(open_file, "dims.safetensors", "tensor 'w' has 5 dimensions");
    write_raw("overflow.safetensors",
              "{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,16],\"data_offsets\":[0,4]}}", 8);
    tt_expect_die(open_file, "overflow.safetensors", "overflows");
    write_raw("overflow2.safetensors",
              "{\"w\":{\"dtype\":\"F64\",\"shape\":[2305843009213693952,4],\"data_offsets\":[0,4]}}", 8);
    tt_expect_die(open_file, "overflow2.safetensors", "overflows");
    write_raw("offsets_type.safetensors", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 8);
    tt_expect_die(open_file, "offsets_type.safetensors", "\"data_offsets\" is an array of the wrong length");
    write_raw("backwards.safetensors", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,4]}}", 8);
    tt_expect_die(open_file, "backwards.safetensors", "0 <= begin <= end");
    write_raw("meta.safetensors", "{\"__metadata__\":{\"format\":1}}", 0);
    tt_expect_die(open_file, "meta.safetensors", "\"__metadata__\" key 'format' is an integer, expected a string");
    write_raw("meta2.safetensors", "{\"__metadata__\":[]}", 0);
    tt_expect_die(open_file, "meta2.safetensors", "\"__metadata__\" is an array");

    /* offsets past the end: a real file truncated after writing */
    {
        char *p = tt_test_path("truncated.safetensors");
        write_one_tensor(p, 16); /* 64 bytes of data */
        struct stat st;
        stat(p, &st);
        TT_EXPECT(truncate(p, st.st_size - 10) == 0, "truncate");
        free(p);
    }
    tt_expect_die(open_file, "truncated.safetensors",
                  "truncated.safetensors: tensor 'w': data_offsets [0, 64] point past the end of the data (the file "
                  "has 54 bytes of data); the file is truncated or corrupt; re-download or re-save it");
    write_raw("past.safetensors", "{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 8);
    tt_expect_die(open_file, "past.safetensors", "point past the end");
    write_raw("far.safetensors",
              "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[9223372036854775800,"
              "9223372036854775804]}}",
              8);
    tt_expect_die(open_file, "far.safetensors", "point past the end");

    /* end - begin disagreeing with the shape */
    write_raw("size.safetensors", "{\"w\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,16]}}", 16);
    tt_expect_die(open_file, "size.safetensors",
                  "tensor 'w': data_offsets [0, 16] hold 16 bytes but shape and dtype F32 need 12");
    write_raw("size_bf16.safetensors", "{\"w\":{\"dtype\":\"BF16\",\"shape\":[2,2],\"data_offsets\":[0,16]}}", 16);
    tt_expect_die(open_file, "size_bf16.safetensors", "need 8");

    /* overlapping tensors: partial, identical, one inside another, and across an empty tensor */
    write_raw("overlap.safetensors", "{" F32_ENTRY("a", 0, 8) "," F32_ENTRY("b", 4, 12) "}", 16);
    tt_expect_die(open_file, "overlap.safetensors", "tensors 'a' (bytes 0 to 8) and 'b' (bytes 4 to 12) overlap");
    write_raw("same.safetensors", "{" F32_ENTRY("a", 0, 8) "," F32_ENTRY("b", 0, 8) "}", 16);
    tt_expect_die(open_file, "same.safetensors", "overlap");
    write_raw("inside.safetensors",
              "{\"big\":{\"dtype\":\"F32\",\"shape\":[6],\"data_offsets\":[0,24]}," F32_ENTRY(
                  "small", 8, 16) "," F32_ENTRY("after", 24, 32) "}",
              32);
    tt_expect_die(open_file, "inside.safetensors", "'big' (bytes 0 to 24) and 'small' (bytes 8 to 16) overlap");
    write_raw("across_empty.safetensors",
              "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
              "\"e\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,8]}," F32_ENTRY("b", 8, 16) "}",
              16);
    tt_expect_die(open_file, "across_empty.safetensors", "'a' (bytes 0 to 16) and 'b' (bytes 8 to 16) overlap");
    write_raw("past_nested.safetensors",
              "{\"big\":{\"dtype\":\"F32\",\"shape\":[8],\"data_offsets\":[0,32]}," F32_ENTRY(
                  "s1", 4, 12) "," F32_ENTRY("s2", 24, 32) "}",
              32);
    tt_expect_die(open_file, "past_nested.safetensors", "overlap");
    /* touching tensors and empty tensors anywhere are fine */
    write_raw("touching.safetensors",
              "{" F32_ENTRY("a", 0, 8) "," F32_ENTRY("b", 8, 16) ",\"e\":{\"dtype\":\"I64\",\"shape\":[3,0],"
                                                                 "\"data_offsets\":[4,4]}}",
              16);
    tt_st_file f;
    char *p = tt_test_path("touching.safetensors");
    tt_st_open(p, &f);
    TT_EXPECT(f.count == 3, "touching and empty tensors do not overlap");
    tt_st_close(&f);
    free(p);

    tt_expect_die(open_file, "does_not_exist.safetensors", "does_not_exist.safetensors: No such file or directory");
    char *d = tt_test_path("a_directory.safetensors");
    mkdir(d, 0755);
    free(d);
    tt_expect_die(open_file, "a_directory.safetensors", "is not a regular file");
}

static void test_bad_model_dirs(void) {
    char *dir = tt_test_path("bad_sharded");
    mkdir(dir, 0755);
    write_raw("bad_sharded/model-00001-of-00002.safetensors", "{" F32_ENTRY("a", 0, 8) "}", 8);
    tt_test_write_text("bad_sharded/model.safetensors.index.json",
                       "{\"weight_map\": {\"a\": \"model-00001-of-00002.safetensors\", \"b\": "
                       "\"model-00002-of-00002.safetensors\"}}");
    tt_expect_die(open_model_dir, "bad_sharded",
                  "model.safetensors.index.json names shard model-00002-of-00002.safetensors for tensor 'b', but");
    tt_expect_die(open_model_dir, "bad_sharded", "bad_sharded/model-00002-of-00002.safetensors does not exist");
    write_raw("bad_sharded/model-00002-of-00002.safetensors", "{" F32_ENTRY("c", 0, 8) "}", 8);
    tt_expect_die(open_model_dir, "bad_sharded",
                  "names model-00002-of-00002.safetensors as the shard of tensor 'b', but that file does not hold it");
    /* a broken shard is reported with its own path */
    write_raw("bad_sharded/model-00002-of-00002.safetensors", "{" F32_ENTRY("b", 0, 8) "}", 4);
    tt_expect_die(open_model_dir, "bad_sharded", "model-00002-of-00002.safetensors: tensor 'b': data_offsets [0, 8]");

    tt_test_write_text("bad_sharded/model.safetensors.index.json", "{\"weight_map\": {\"a\": \n 3}}");
    tt_expect_die(open_model_dir, "bad_sharded", "weight_map['a'] is an integer");
    tt_test_write_text("bad_sharded/model.safetensors.index.json", "{\"weight_map\": {\"a\": \"../x.safetensors\"}}");
    tt_expect_die(open_model_dir, "bad_sharded", "a shard must be a file name in the same directory");
    tt_test_write_text("bad_sharded/model.safetensors.index.json", "{\"metadata\": {}}");
    tt_expect_die(open_model_dir, "bad_sharded", "\"weight_map\" is missing");
    tt_test_write_text("bad_sharded/model.safetensors.index.json", "{\"weight_map\": {}}");
    tt_expect_die(open_model_dir, "bad_sharded", "lists no tensors");
    tt_test_write_text("bad_sharded/model.safetensors.index.json", "{\"weight_map\": {\n\"a\": }");
    tt_expect_die(open_model_dir, "bad_sharded", "model.safetensors.index.json:2:");

    char *empty = tt_test_path("empty_dir");
    mkdir(empty, 0755);
    char needle[4400];
    snprintf(needle, sizeof needle, "%s holds neither model.safetensors nor model.safetensors.index.json", empty);
    tt_expect_die(open_model_dir, "empty_dir", needle);
    tt_expect_die(open_model_dir, "no_such_model_dir", "no_such_model_dir: No such file or directory");
    free(empty);
    free(dir);
}

/* ------------------------------------------------------------------------------------------ */
/* Hardening: input that is valid but awkward (odd offsets), hostile (millions of tensors) or not
 * a file at all (a FIFO). */

/* Data at an odd address: the header's length is even, so the data area starts at an even file
 * offset (mmap is page-aligned) and every tensor, at an odd offset inside it, at an odd address.
 * The bytes must convert exactly as at an aligned address (the sanitizer build also checks that
 * no misaligned load happens). */
static void test_odd_offsets(void) {
    const char *header = "{\"b\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[1,7]},"
                         "\"h\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[7,11]},"
                         "\"d\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[11,19]},"
                         "\"f\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[19,23]}} ";
    TT_EXPECT(strlen(header) % 2 == 0, "the header length is even (%zu)", strlen(header));
    write_raw("odd.safetensors", header, 23); /* data byte i holds i */
    char *p = tt_test_path("odd.safetensors");
    tt_st_file f;
    tt_st_open(p, &f);
    const tt_st_tensor *b = tt_st_find(&f, "b"), *h = tt_st_find(&f, "h"), *d = tt_st_find(&f, "d"),
                       *f32 = tt_st_find(&f, "f");
    TT_EXPECT(b && h && d && f32, "all four tensors found");
    if (b && h && d && f32) {
        TT_EXPECT(((uintptr_t)b->data & 1) == 1, "the bf16 data sits at an odd address");
        float out[3];
        tt_convert_to_f32(out, b->data, b->dtype, 3);
        for (int i = 0; i < 3; i++) {
            const uint16_t v = (uint16_t)((2 * i + 1) | (2 * i + 2) << 8); /* little-endian bytes 1+2i, 2+2i */
            TT_EXPECT(f32_bits(out[i]) == f32_bits(tt_bf16_to_f32(v)), "bf16 element %d at an odd offset", i);
        }
        tt_convert_to_f32(out, h->data, h->dtype, 2);
        for (int i = 0; i < 2; i++) {
            const uint16_t v = (uint16_t)((7 + 2 * i) | (8 + 2 * i) << 8);
            TT_EXPECT(f32_bits(out[i]) == f32_bits(tt_f16_to_f32(v)), "f16 element %d at an odd offset", i);
        }
        unsigned char raw[8];
        for (int i = 0; i < 8; i++) raw[i] = (unsigned char)(11 + i);
        double expected_d;
        memcpy(&expected_d, raw, 8);
        tt_convert_to_f32(out, d->data, d->dtype, 1);
        TT_EXPECT(f32_bits(out[0]) == f32_bits((float)expected_d), "f64 at an odd offset");
        unsigned char raw4[4] = {19, 20, 21, 22};
        float expected_f;
        memcpy(&expected_f, raw4, 4);
        tt_convert_to_f32(out, f32->data, f32->dtype, 1);
        TT_EXPECT(f32_bits(out[0]) == f32_bits(expected_f), "f32 at an odd offset");
        /* and back: narrowing into an odd destination */
        unsigned char dst[1 + 2 * 3];
        const float values[3] = {1.0f, -2.5f, 3.0e-3f};
        tt_convert_from_f32(dst + 1, TT_BF16, values, 3);
        for (int i = 0; i < 3; i++) {
            uint16_t v;
            memcpy(&v, dst + 1 + 2 * i, 2);
            TT_EXPECT(v == tt_f32_to_bf16(values[i]), "bf16 written to an odd address, element %d", i);
        }
    }
    tt_st_close(&f);
    free(p);
}

/* A header listing `count` tensors (empty F32 ones, so the data area is empty); `terse` writes
 * 0 for each entry instead, to fit millions into the 100 MB a header may have. */
static void write_many_tensors(const char *name, long count, bool terse) {
    size_t cap = 64 + (size_t)count * 64, n = 0;
    char *header = malloc(cap);
    header[n++] = '{';
    for (long i = 0; i < count; i++)
        n += (size_t)snprintf(header + n, cap - n,
                              terse ? "%s\"t%ld\":0"
                                    : "%s\"t%ld\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}",
                              i ? "," : "", i);
    header[n++] = '}';
    header[n] = 0;
    write_raw(name, header, 0);
    free(header);
}

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* 2 million tensors are refused before the JSON parser builds them (a fraction of a second; the
 * bound is loose for the sanitizer build), and a header at the limit, 262144 tensors, loads
 * with every tensor found by name (the name index: n log n, not n^2). */
static void test_tensor_count_limit(void) {
    write_many_tensors("two_million.safetensors", 2000000, true);
    double t0 = now_seconds();
    tt_expect_die(open_file, "two_million.safetensors", "the header lists 2000000 tensors, more than the 262144");
    double refused = now_seconds() - t0;
    TT_EXPECT(refused < 5.0, "2 million tensors refused in %.2f s", refused);
    char *p = tt_test_path("two_million.safetensors");
    unlink(p);
    free(p);

    write_many_tensors("at_limit.safetensors", 262144, false);
    p = tt_test_path("at_limit.safetensors");
    t0 = now_seconds();
    tt_st_file f;
    tt_st_open(p, &f);
    int found = 0;
    char name[32];
    for (int i = 0; i < f.count; i++) {
        snprintf(name, sizeof name, "t%d", i);
        found += tt_st_find(&f, name) != NULL;
    }
    double loaded = now_seconds() - t0;
    TT_EXPECT(f.count == 262144 && found == 262144, "%d tensors, %d found", f.count, found);
    TT_EXPECT(tt_st_find(&f, "t262144") == NULL && tt_st_find(&f, "") == NULL, "absent names are absent");
    TT_EXPECT(loaded < 30.0, "262144 tensors loaded and looked up in %.2f s", loaded);
    tt_st_close(&f);
    unlink(p);
    free(p);

    write_many_tensors("over_limit.safetensors", 262145, false);
    tt_expect_die(open_file, "over_limit.safetensors", "lists 262145 tensors");
    p = tt_test_path("over_limit.safetensors");
    unlink(p);
    free(p);
}

/* A FIFO must be refused at once, naming the path, not block in open() waiting for a writer.
 * The alarm turns a hang into a failure instead of a test timeout. */
static void open_file_with_alarm(void *arg) {
    alarm(10);
    open_file(arg);
}

static void open_absolute_with_alarm(void *arg) {
    alarm(10);
    tt_st_file f;
    tt_st_open(arg, &f);
}

static void open_model_dir_with_alarm(void *arg) {
    alarm(10);
    open_model_dir(arg);
}

static void test_not_regular(void) {
    char *p = tt_test_path("fifo.safetensors");
    TT_EXPECT(mkfifo(p, 0644) == 0, "mkfifo %s: %s", p, strerror(errno));
    tt_expect_die(open_file_with_alarm, "fifo.safetensors", "fifo.safetensors is not a regular file (a FIFO)");
    free(p);
    tt_expect_die(open_absolute_with_alarm, "/dev/null", "/dev/null is not a regular file (a device)");
    /* a model directory whose model.safetensors is a FIFO */
    char *dir = tt_test_path("fifo_model");
    mkdir(dir, 0755);
    p = tt_test_path("fifo_model/model.safetensors");
    TT_EXPECT(mkfifo(p, 0644) == 0, "mkfifo %s: %s", p, strerror(errno));
    tt_expect_die(open_model_dir_with_alarm, "fifo_model", "fifo_model");
    free(p);
    free(dir);
}

int main(int argc, char **argv) {
    (void)argc;
    (void)argv;
    tt_test_scratch_open("safetensors");
    test_dtype_names();
    test_bf16();
    test_f16();
    test_bulk_conversions();
    test_round_trip();
    test_foreign_layouts();
    test_atomic_writer();
    test_streamed_writer();
    test_sharded();
    test_bad_files();
    test_bad_model_dirs();
    test_odd_offsets();
    test_tensor_count_limit();
    test_not_regular();
    tt_test_scratch_close();
    return tt_test_summary("safetensors");
}
