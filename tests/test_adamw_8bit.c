/* bitsandbytes' 8-bit AdamW (optimizer: adamw_bnb_8bit) on the CPU backend against a plain reference of the published
 * algorithm written here: per tensor, dequantize (map[code] * the block's absmax), update in fp32 (bitsandbytes'
 * AdamW: the weight decays after the step, eps scaled by sqrt(1 - beta2^t)), take each block's new absmax, requantize
 * every value to the nearest code (a linear scan: the interval x falls in, the fp32 midpoint of its two codes, x on
 * the midpoint to the even code); tensors under 4096 elements keep fp32 moments and take bitsandbytes' 32-bit step.
 * Bit for bit over several steps, on tensors below and above 4096 elements, one not a multiple of 256, decaying and
 * not, with clipping, non-finite gradients and blocks of zeros; through the backend at 1 and 2 threads and through
 * a model's optimizer step. The dynamic maps against their published construction; the size table's price of the
 * moments; the config's refusals. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "config/run_translation.h"
#include "core/rng.h"
#include "memory/adamw_8bit_layout.h"
#include "model/weights.h"
#include "ops/backend.h"
#include "ops/cpu/adamw_8bit_cpu.h"
#include "ops/dynamic_map.h"
#include "test_util.h"
#include "train/model_setup.h"
#include "train/optimizer_step.h"
#include "train/step.h"

/* ------------------------------------------------------------------ the maps */

static int compare_doubles(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* create_dynamic_map(signed) in exact arithmetic: decade e contributes 10^(e-6) times the midpoints of
 * linspace(0.1, 1, k + 1) (k = 2^e signed, and their negatives; k = 2^(e+1) unsigned), then 0 and 1, sorted. */
static void published_map(double *out, bool is_signed) {
    int n = 0;
    for (int e = 0; e < 7; e++) {
        const int k = is_signed ? 1 << e : 1 << (e + 1);
        for (int j = 0; j < k; j++) {
            const double midpoint = 0.1 + (j + 0.5) * 0.9 / k;
            out[n++] = pow(10.0, e - 6) * midpoint;
            if (is_signed) out[n++] = -pow(10.0, e - 6) * midpoint;
        }
    }
    out[n++] = 0.0;
    out[n++] = 1.0;
    TT_EXPECT(n == 256, "the published construction gives %d values", n);
    qsort(out, (size_t)n, sizeof(double), compare_doubles);
}

static void test_maps(void) {
    for (int s = 0; s < 2; s++) {
        const bool is_signed = s == 0;
        float map[TT_DYNAMIC_MAP_CODES];
        double published[256];
        tt_dynamic_map_build(map, is_signed);
        published_map(published, is_signed);
        int unsorted = 0, off = 0;
        for (int i = 0; i < 256; i++) {
            if (i > 0 && !(map[i] > map[i - 1])) unsorted++;
            /* fp32 rounding of the linspace, its midpoints and the decade: a few ulp */
            if (fabs((double)map[i] - published[i]) > 4e-7 * fabs(published[i])) off++;
        }
        TT_EXPECT(unsorted == 0, "%s map: %d codes not above the one before", is_signed ? "signed" : "unsigned",
                  unsorted);
        TT_EXPECT(off == 0, "%s map: %d codes off the published construction", is_signed ? "signed" : "unsigned", off);
        TT_EXPECT(map[255] == 1.0f, "the last code is 1 (%g)", map[255]);
        int negative = 0, zeros = 0;
        for (int i = 0; i < 256; i++) {
            negative += map[i] < 0.0f;
            zeros += map[i] == 0.0f;
        }
        TT_EXPECT(zeros == 1, "one zero code (%d)", zeros);
        if (is_signed) {
            TT_EXPECT(negative == 127 && map[127] == 0.0f, "signed: 127 negative codes, then 0 (%d, %g)", negative,
                      map[127]);
            bool mirrored = true;
            for (int i = 0; i < 127; i++) mirrored &= map[i] == -map[254 - i];
            TT_EXPECT(mirrored, "signed: the negative codes mirror the positive ones below 1");
            /* the smallest: 1e-6 x 0.55 (linspace(0.1, 1, 2)'s midpoint); the largest below 1: 0.99296875 */
            TT_EXPECT(fabsf(map[128] - 5.5e-7f) <= 1e-13f && fabsf(map[254] - 0.99296875f) <= 1e-7f,
                      "signed: codes 128 and 254 are %.9g and %.9g", map[128], map[254]);
        } else {
            TT_EXPECT(negative == 0 && map[0] == 0.0f, "unsigned: no negative code, 0 first (%d, %g)", negative,
                      map[0]);
            TT_EXPECT(fabsf(map[1] - 3.25e-7f) <= 1e-13f, "unsigned: code 1 is %.9g (1e-6 x 0.325)", map[1]);
        }
    }
}

/* ------------------------------------------------------------------ the reference */

static float signed_map[256], unsigned_map[256];

/* The nearest code of x: the interval [map[k], map[k + 1]] it falls in, then the side of the fp32 midpoint; on the
 * midpoint the even code (bitsandbytes' search ends on even codes and keeps them). NaN (0 / 0): code 0. */
static unsigned char reference_nearest(const float *map, float x) {
    if (isnan(x) || x <= map[0]) return 0;
    if (x >= map[255]) return 255;
    int k = 0;
    while (!(map[k] <= x && x <= map[k + 1])) k++;
    const float midpoint = (map[k] + map[k + 1]) * 0.5f;
    if (x < midpoint) return (unsigned char)k;
    if (x > midpoint) return (unsigned char)(k + 1);
    return (unsigned char)(k % 2 == 0 ? k : k + 1);
}

/* The kernels' search against the scan: on every midpoint (the even code), beside it, on every code, at the ends,
 * NaN, and on random values. */
static void test_nearest(void) {
    const float *maps[2] = {signed_map, unsigned_map};
    tt_rng rng;
    tt_rng_seed(&rng, 17);
    for (int s = 0; s < 2; s++) {
        const float *map = maps[s];
        const bool is_signed = s == 0;
        int wrong = 0, odd_ties = 0;
        for (int k = 0; k < 255; k++) {
            const float midpoint = (map[k] + map[k + 1]) * 0.5f;
            const float xs[] = {midpoint, nextafterf(midpoint, -2.0f), nextafterf(midpoint, 2.0f), map[k], map[k + 1]};
            for (int i = 0; i < 5; i++)
                wrong += tt_dynamic_map_nearest(map, xs[i], is_signed) != reference_nearest(map, xs[i]);
            odd_ties += tt_dynamic_map_nearest(map, midpoint, is_signed) % 2 != 0;
        }
        const float ends[] = {-1.0f, 1.0f, 0.0f, -0.0f, NAN, map[0], map[255]};
        for (int i = 0; i < 7; i++)
            wrong += (is_signed || !(ends[i] < 0.0f)) &&
                     tt_dynamic_map_nearest(map, ends[i], is_signed) != reference_nearest(map, ends[i]);
        for (int i = 0; i < 200000; i++) {
            const float u = (float)(tt_rng_next(&rng) >> 40) / (float)(1 << 24);
            const float x = is_signed ? 2.0f * u - 1.0f : u * u * u;
            wrong += tt_dynamic_map_nearest(map, x, is_signed) != reference_nearest(map, x);
        }
        TT_EXPECT(wrong == 0, "%s map: the search and the scan disagree %d times", is_signed ? "signed" : "unsigned",
                  wrong);
        TT_EXPECT(odd_ties == 0, "%s map: %d midpoints go to an odd code", is_signed ? "signed" : "unsigned", odd_ties);
        TT_EXPECT(tt_dynamic_map_nearest(map, NAN, is_signed) == 0, "NaN takes code 0");
    }
}

typedef struct reference_tensor {
    int64_t numel;
    bool decays, quantized;
    float *p;
    float *m, *v;             /* fp32 moments (small tensors) */
    unsigned char *c1, *c2;   /* codes (8-bit tensors) */
    float *absmax1, *absmax2; /* [blocks] */
} reference_tensor;

typedef struct hyper {
    float lr, beta1, beta2, eps, weight_decay, grad_scale;
} hyper;

/* One step of bitsandbytes' AdamW8bit on t with gradient g. */
static void reference_step(reference_tensor *t, const float *g, const hyper *h, int64_t step) {
    const float correction1 = 1.0f - (float)pow(h->beta1, (double)step);
    const float correction2 = sqrtf(1.0f - (float)pow(h->beta2, (double)step));
    const float step_size = -h->lr * correction2 / correction1;
    const float lr_wd = h->lr * h->weight_decay, decay = 1.0f - lr_wd;
    const bool decays = t->decays && h->weight_decay > 0.0f;
    const int64_t n = t->numel;
    if (!t->quantized) { /* bitsandbytes' 32-bit Adam */
        for (int64_t i = 0; i < n; i++) {
            const float gi = g[i] * h->grad_scale;
            t->m[i] = t->m[i] * h->beta1 + (1.0f - h->beta1) * gi;
            t->v[i] = t->v[i] * h->beta2 + (1.0f - h->beta2) * (gi * gi);
            t->p[i] = t->p[i] + step_size * (t->m[i] / (sqrtf(t->v[i]) + h->eps * correction2));
            if (decays) t->p[i] = t->p[i] * decay;
        }
        return;
    }
    /* dequantize */
    float *m = malloc(sizeof(float) * (size_t)n), *v = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
        m[i] = signed_map[t->c1[i]] * t->absmax1[i / 256];
        v[i] = unsigned_map[t->c2[i]] * t->absmax2[i / 256];
    }
    /* update in fp32 */
    for (int64_t i = 0; i < n; i++) {
        const float gi = g[i] * h->grad_scale;
        if (!isfinite(gi)) { /* bitsandbytes zeroes the moments of a non-finite gradient and leaves the weight */
            m[i] = v[i] = 0.0f;
            continue;
        }
        v[i] = v[i] * h->beta2 + (1.0f - h->beta2) * gi * gi;
        m[i] = m[i] * h->beta1 + (1.0f - h->beta1) * gi;
        t->p[i] = t->p[i] + step_size * (m[i] / (sqrtf(v[i]) + correction2 * h->eps));
        if (decays) t->p[i] = t->p[i] * decay;
    }
    /* each block's new absmax; a short last block also counts what bitsandbytes' kernel computes for its missing
     * elements (code 128 and a zero gradient: map[128] x the old absmax x beta1) */
    const int64_t blocks = (n + 255) / 256;
    for (int64_t b = 0; b < blocks; b++) {
        float max1 = 0.0f, max2 = 0.0f;
        for (int64_t i = b * 256; i < n && i < (b + 1) * 256; i++) {
            if (fabsf(m[i]) > max1) max1 = fabsf(m[i]);
            if (fabsf(v[i]) > max2) max2 = fabsf(v[i]);
        }
        if ((b + 1) * 256 > n) {
            const float missing = fabsf(signed_map[128] * t->absmax1[b] * h->beta1);
            if (missing > max1) max1 = missing;
        }
        t->absmax1[b] = max1;
        t->absmax2[b] = max2;
    }
    /* requantize; the first moment keeps its sign (a code of the other sign moves one towards it) */
    for (int64_t i = 0; i < n; i++) {
        unsigned char c = reference_nearest(signed_map, m[i] / t->absmax1[i / 256]);
        if ((signbit(signed_map[c]) != 0) != (signbit(m[i]) != 0)) c = (unsigned char)(m[i] > 0.0f ? c + 1 : c - 1);
        t->c1[i] = c;
        t->c2[i] = reference_nearest(unsigned_map, v[i] / t->absmax2[i / 256]);
    }
    free(m);
    free(v);
}

/* ------------------------------------------------------------------ the kernel against it */

/* Tensors laid out as the trainable layout lays out parameters (each at a multiple of 64 elements, zeros between),
 * with the state of the kernel and of the reference. */
typedef struct flat_model {
    int count;
    tt_adamw_8bit_tensor tensors[8];
    reference_tensor ref[8];
    int64_t total;
    float *weights, *g;
    unsigned char *codes[2];
    float *absmax[2], *fp32[2];
    tt_adamw_8bit_moment moment[2];
} flat_model;

static void flat_model_init(flat_model *f, const int64_t *numels, int count, bool random_state, uint64_t seed) {
    memset(f, 0, sizeof *f);
    f->count = count;
    int64_t at = 0, codes = 0, blocks = 0, fp32 = 0;
    for (int i = 0; i < count; i++) {
        const int64_t n = numels[i];
        const bool quantized = n >= TT_ADAMW_8BIT_MIN_NUMEL;
        f->tensors[i] = (tt_adamw_8bit_tensor){.element = at,
                                               .numel = n,
                                               .decays = i % 2 == 0,
                                               .quantized = quantized,
                                               .state = quantized ? codes : fp32,
                                               .block = quantized ? blocks : 0};
        if (quantized) {
            codes += n;
            blocks += tt_adamw_8bit_blocks(n);
        } else {
            fp32 += n;
        }
        at += (n + 63) / 64 * 64;
    }
    f->total = at;
    f->weights = calloc((size_t)at, sizeof(float));
    f->g = calloc((size_t)at, sizeof(float));
    for (int k = 0; k < 2; k++) {
        f->codes[k] = calloc((size_t)codes + 1, 1);
        f->absmax[k] = calloc((size_t)blocks + 1, sizeof(float));
        f->fp32[k] = calloc((size_t)fp32 + 1, sizeof(float));
        f->moment[k] = (tt_adamw_8bit_moment){.codes = f->codes[k], .absmax = f->absmax[k], .fp32 = f->fp32[k]};
    }
    tt_rng rng;
    tt_rng_seed(&rng, seed);
    for (int i = 0; i < count; i++) {
        const tt_adamw_8bit_tensor *t = &f->tensors[i];
        reference_tensor *r = &f->ref[i];
        *r = (reference_tensor){.numel = t->numel, .decays = t->decays, .quantized = t->quantized};
        r->p = malloc(sizeof(float) * (size_t)t->numel);
        for (int64_t j = 0; j < t->numel; j++) f->weights[t->element + j] = r->p[j] = (float)tt_rng_normal(&rng);
        if (t->quantized) {
            const int64_t b = tt_adamw_8bit_blocks(t->numel);
            r->c1 = calloc((size_t)t->numel, 1);
            r->c2 = calloc((size_t)t->numel, 1);
            r->absmax1 = calloc((size_t)b, sizeof(float));
            r->absmax2 = calloc((size_t)b, sizeof(float));
            if (random_state) { /* any codes and absmax: the quantization's every path */
                for (int64_t j = 0; j < t->numel; j++) {
                    f->codes[0][t->state + j] = r->c1[j] = (unsigned char)(tt_rng_next(&rng) & 255);
                    f->codes[1][t->state + j] = r->c2[j] = (unsigned char)(tt_rng_next(&rng) & 255);
                }
                for (int64_t j = 0; j < b; j++) {
                    f->absmax[0][t->block + j] = r->absmax1[j] = 0.01f * (float)(1 + tt_rng_next(&rng) % 100);
                    f->absmax[1][t->block + j] = r->absmax2[j] = 1e-4f * (float)(1 + tt_rng_next(&rng) % 100);
                }
            }
        } else {
            r->m = calloc((size_t)t->numel, sizeof(float));
            r->v = calloc((size_t)t->numel, sizeof(float));
            if (random_state)
                for (int64_t j = 0; j < t->numel; j++) {
                    f->fp32[0][t->state + j] = r->m[j] = 0.01f * (float)tt_rng_normal(&rng);
                    const float x = (float)tt_rng_normal(&rng);
                    f->fp32[1][t->state + j] = r->v[j] = 1e-4f * x * x;
                }
        }
    }
}

static void flat_model_free(flat_model *f) {
    for (int i = 0; i < f->count; i++) {
        reference_tensor *r = &f->ref[i];
        free(r->p);
        free(r->m);
        free(r->v);
        free(r->c1);
        free(r->c2);
        free(r->absmax1);
        free(r->absmax2);
    }
    free(f->weights);
    free(f->g);
    for (int k = 0; k < 2; k++) {
        free(f->codes[k]);
        free(f->absmax[k]);
        free(f->fp32[k]);
    }
}

/* Step `step`'s gradients: over many magnitudes; some exact zeros, a block of zeros in the first step, a NaN and an
 * infinity in the third; the padding's zero. */
static void random_gradients(flat_model *f, int step, tt_rng *rng) {
    memset(f->g, 0, sizeof(float) * (size_t)f->total);
    for (int i = 0; i < f->count; i++) {
        const tt_adamw_8bit_tensor *t = &f->tensors[i];
        float *g = f->g + t->element;
        for (int64_t j = 0; j < t->numel; j++) {
            const float scale = powf(10.0f, (float)(tt_rng_next(rng) % 6) - 5.0f);
            g[j] = (j % 89 == 0) ? 0.0f : (float)tt_rng_normal(rng) * scale;
            if (step == 1 && j >= 512 && j < 768) g[j] = 0.0f; /* block 2: its moments all zero, absmax 0 */
        }
        if (step == 3 && t->numel > 1000) {
            g[7] = NAN;
            g[300] = INFINITY;
        }
    }
}

static bool same_floats(const float *a, const float *b, int64_t n, int64_t *at) {
    for (int64_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof(float)) != 0) {
            *at = i;
            return false;
        }
    return true;
}

static bool same_bytes(const unsigned char *a, const unsigned char *b, int64_t n, int64_t *at) {
    for (int64_t i = 0; i < n; i++)
        if (a[i] != b[i]) {
            *at = i;
            return false;
        }
    return true;
}

/* The kernel's state against the reference's, every tensor; false at the first difference (reported). */
static bool flat_model_matches(const flat_model *f, const char *what, int step) {
    bool all = true;
    for (int i = 0; i < f->count; i++) {
        const tt_adamw_8bit_tensor *t = &f->tensors[i];
        const reference_tensor *r = &f->ref[i];
        int64_t at = -1;
        bool ok = same_floats(f->weights + t->element, r->p, t->numel, &at);
        TT_EXPECT(ok, "%s, step %d, tensor of %lld: weight %lld is %.9g, the reference %.9g", what, step,
                  (long long)t->numel, (long long)at, ok ? 0.0 : f->weights[t->element + at], ok ? 0.0 : r->p[at]);
        all &= ok;
        if (t->quantized) {
            const int64_t blocks = tt_adamw_8bit_blocks(t->numel);
            ok = same_bytes(f->codes[0] + t->state, r->c1, t->numel, &at) &&
                 same_bytes(f->codes[1] + t->state, r->c2, t->numel, &at);
            TT_EXPECT(ok, "%s, step %d, tensor of %lld: codes differ at %lld", what, step, (long long)t->numel,
                      (long long)at);
            all &= ok;
            ok = same_floats(f->absmax[0] + t->block, r->absmax1, blocks, &at) &&
                 same_floats(f->absmax[1] + t->block, r->absmax2, blocks, &at);
            TT_EXPECT(ok, "%s, step %d, tensor of %lld: absmax differs in block %lld", what, step, (long long)t->numel,
                      (long long)at);
            all &= ok;
        } else {
            ok = same_floats(f->fp32[0] + t->state, r->m, t->numel, &at) &&
                 same_floats(f->fp32[1] + t->state, r->v, t->numel, &at);
            TT_EXPECT(ok, "%s, step %d, tensor of %lld: fp32 moments differ at %lld", what, step, (long long)t->numel,
                      (long long)at);
            all &= ok;
        }
    }
    return all;
}

/* Steps through the CPU backend (threads) against the reference. */
static void check_against_reference(const char *what, int threads, bool random_state) {
    static const int64_t numels[] = {1000, 4095, 4096, 5000, 70001, 300};
    flat_model f;
    flat_model_init(&f, numels, (int)(sizeof numels / sizeof numels[0]), random_state, 7);
    tt_backend *backend = tt_backend_cpu_create(threads);
    tt_rng rng;
    tt_rng_seed(&rng, 99);
    const hyper steps[] = {
        {.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.1f, .grad_scale = 1.0f},
        {.lr = 2e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.1f, .grad_scale = 0.37f},
        {.lr = 3e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.0f, .grad_scale = 1.0f},
        {.lr = 1e-3f, .beta1 = 0.8f, .beta2 = 0.95f, .eps = 1e-6f, .weight_decay = 0.01f, .grad_scale = 1.0f},
        {.lr = 5e-4f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.1f, .grad_scale = 0.9f},
    };
    for (int s = 0; s < (int)(sizeof steps / sizeof steps[0]); s++) {
        const int step = s + 1;
        const hyper *h = &steps[s];
        random_gradients(&f, step, &rng);
        for (int i = 0; i < f.count; i++) reference_step(&f.ref[i], f.g + f.tensors[i].element, h, step);
        const tt_adamw_8bit_scalars k =
            tt_adamw_8bit_scalars_for(h->lr, h->beta1, h->beta2, h->eps, h->weight_decay, step, h->grad_scale);
        tt_backend_adamw_8bit_update(backend, f.weights, NULL, f.g, &f.moment[0], &f.moment[1], f.tensors, f.count, &k);
        if (!flat_model_matches(&f, what, step)) break;
    }
    /* the padding between tensors keeps its zeros */
    bool padding_zero = true;
    for (int i = 0; i + 1 < f.count; i++)
        for (int64_t j = f.tensors[i].element + f.tensors[i].numel; j < f.tensors[i + 1].element; j++)
            padding_zero &= f.weights[j] == 0.0f;
    TT_EXPECT(padding_zero, "%s: the padding between tensors stays zero", what);
    tt_backend_destroy(backend);
    flat_model_free(&f);
}

/* A short last block whose own moments vanish takes its absmax from the elements bitsandbytes' kernel adds: map[128]
 * (the smallest positive code) x the old absmax x beta1. */
static void test_short_block_absmax(void) {
    static const int64_t numels[] = {4100}; /* 16 blocks and one of 4 */
    flat_model f;
    flat_model_init(&f, numels, 1, false, 3);
    f.absmax[0][16] = 1.0f; /* codes 0 with absmax 1 would be -1: set the codes to 127 (zero) */
    for (int j = 4096; j < 4100; j++) f.codes[0][j] = 127;
    const tt_adamw_8bit_scalars k = tt_adamw_8bit_scalars_for(1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f, 2, 1.0f);
    tt_adamw_8bit_maps maps;
    tt_adamw_8bit_maps_build(&maps);
    tt_cpu_adamw_8bit_update(&maps, f.weights, f.g, &f.moment[0], &f.moment[1], f.tensors, 1, &k);
    const float expected = signed_map[128] * 1.0f * 0.9f;
    TT_EXPECT(f.absmax[0][16] == expected, "the short block's absmax is %.9g, map[128] x 1 x 0.9 = %.9g",
              f.absmax[0][16], expected);
    TT_EXPECT(f.absmax[0][0] == 0.0f, "a full block of zeros has absmax 0 (%g)", f.absmax[0][0]);
    flat_model_free(&f);
}

/* ------------------------------------------------------------------ a model's optimizer step */

static tt_model_config model_config(void) {
    tt_model_config c;
    memset(&c, 0, sizeof c);
    snprintf(c.model_type, sizeof c.model_type, "qwen3");
    c.vocab_size = 101; /* the embedding: 6464 elements, 25 blocks and a quarter */
    c.hidden_size = 64;
    c.intermediate_size = 80;
    c.num_layers = 2;
    c.num_heads = 4;
    c.num_kv_heads = 2;
    c.head_dim = 16; /* q_proj 4096 elements (8-bit), k_proj 2048 (fp32) */
    c.max_position_embeddings = 64;
    c.rms_norm_eps = 1e-6;
    c.rope_theta = 10000;
    c.tie_word_embeddings = false;
    c.dtype = TT_F32;
    c.bos_token_id = c.eos_token_id = -1;
    return c;
}

static void open_model(tt_model_state *s, const char *optimizer) {
    tt_model_config config = model_config();
    tt_run_config run;
    tt_run_config_defaults(&run);
    run.micro_batch_size = 2;
    run.sequence_len = 8;
    run.loss_chunk_size = 8;
    free(run.optimizer);
    run.optimizer = tt_xstrdup(optimizer);
    const tt_precision fp32 = tt_precision_for_run(&run, false);
    tt_plan plan;
    tt_plan_from_config(&plan, &run, &config, TT_TIER_HOST, &fp32);
    tt_run_config_free(&run);
    tt_model_state_init_trainable(s, &config, &plan, NULL, tt_backend_cpu_create(2), 0);
    tt_weights_init_random(s->weights, &s->params, 0.3, 11);
}

/* The layout's view of a model's state as reference tensors (copies). */
static void model_reference(const tt_model_state *s, reference_tensor *ref) {
    const tt_adamw_8bit_layout *layout = s->adamw_8bit;
    const tt_adamw_8bit_moment m = tt_adamw_8bit_moment_in(layout, s->adam_m);
    const tt_adamw_8bit_moment v = tt_adamw_8bit_moment_in(layout, s->adam_v);
    for (int i = 0; i < layout->count; i++) {
        const tt_adamw_8bit_tensor *t = &layout->tensors[i];
        const int64_t n = t->numel, blocks = tt_adamw_8bit_blocks(n);
        reference_tensor *r = &ref[i];
        *r = (reference_tensor){.numel = n, .decays = t->decays, .quantized = t->quantized};
        r->p = malloc(sizeof(float) * (size_t)n);
        memcpy(r->p, (const float *)s->trainable_weights + t->element, sizeof(float) * (size_t)n);
        if (t->quantized) {
            r->c1 = malloc((size_t)n);
            r->c2 = malloc((size_t)n);
            r->absmax1 = malloc(sizeof(float) * (size_t)blocks);
            r->absmax2 = malloc(sizeof(float) * (size_t)blocks);
            memcpy(r->c1, m.codes + t->state, (size_t)n);
            memcpy(r->c2, v.codes + t->state, (size_t)n);
            memcpy(r->absmax1, m.absmax + t->block, sizeof(float) * (size_t)blocks);
            memcpy(r->absmax2, v.absmax + t->block, sizeof(float) * (size_t)blocks);
        } else {
            r->m = malloc(sizeof(float) * (size_t)n);
            r->v = malloc(sizeof(float) * (size_t)n);
            memcpy(r->m, m.fp32 + t->state, sizeof(float) * (size_t)n);
            memcpy(r->v, v.fp32 + t->state, sizeof(float) * (size_t)n);
        }
    }
}

static bool model_matches(const tt_model_state *s, const reference_tensor *ref, int step) {
    const tt_adamw_8bit_layout *layout = s->adamw_8bit;
    reference_tensor *now = calloc((size_t)layout->count, sizeof *now);
    model_reference(s, now);
    bool all = true;
    for (int i = 0; i < layout->count; i++) {
        const reference_tensor *a = &now[i], *b = &ref[i];
        const int64_t n = a->numel, blocks = tt_adamw_8bit_blocks(n);
        int64_t at = -1;
        bool ok = same_floats(a->p, b->p, n, &at);
        if (a->quantized)
            ok = ok && same_bytes(a->c1, b->c1, n, &at) && same_bytes(a->c2, b->c2, n, &at) &&
                 same_floats(a->absmax1, b->absmax1, blocks, &at) && same_floats(a->absmax2, b->absmax2, blocks, &at);
        else ok = ok && same_floats(a->m, b->m, n, &at) && same_floats(a->v, b->v, n, &at);
        TT_EXPECT(ok, "model, step %d: %s differs from the reference at %lld", step,
                  s->params.params[layout->param[i]].name, (long long)at);
        all &= ok;
    }
    for (int i = 0; i < layout->count; i++) {
        free(now[i].p);
        free(now[i].m);
        free(now[i].v);
        free(now[i].c1);
        free(now[i].c2);
        free(now[i].absmax1);
        free(now[i].absmax2);
    }
    free(now);
    return all;
}

static void test_model_step(void) {
    tt_model_state s;
    open_model(&s, "adamw_8bit");
    TT_EXPECT(s.adamw_8bit != NULL, "optimizer: adamw_8bit lays out 8-bit moments");
    int quantized = 0, small = 0;
    for (int i = 0; i < s.adamw_8bit->count; i++) {
        quantized += s.adamw_8bit->tensors[i].quantized;
        small += !s.adamw_8bit->tensors[i].quantized;
    }
    TT_EXPECT(quantized >= 5 && small >= 5, "the model has 8-bit (%d) and fp32 (%d) tensors", quantized, small);
    const tt_adamw_settings adamw = {
        .beta1 = 0.9f, .beta2 = 0.999f, .epsilon = 1e-8f, .weight_decay = 0.1f, .max_grad_norm = 1.0f};
    tt_rng rng;
    tt_rng_seed(&rng, 5);
    const int64_t N = s.plan.micro_batch * s.plan.seq_len;
    for (int step = 1; step <= 4; step++) {
        for (int64_t i = 0; i < N; i++) {
            s.batch_inputs[i] = (int32_t)(tt_rng_next(&rng) % (uint64_t)s.config.vocab_size);
            s.batch_targets[i] = (int32_t)(tt_rng_next(&rng) % (uint64_t)s.config.vocab_size);
        }
        tt_backend_zero(s.backend, s.gradients, s.sizes.gradients);
        int64_t count = 0;
        tt_step_forward_backward(&s, 1.0 / (double)N, &count);
        const float grad_scale = tt_clip_scale(tt_gradient_norm(&s), adamw.max_grad_norm);
        const float lr = 2e-3f * (float)step;
        reference_tensor *ref = calloc((size_t)s.adamw_8bit->count, sizeof *ref);
        model_reference(&s, ref);
        const hyper h = {.lr = lr,
                         .beta1 = adamw.beta1,
                         .beta2 = adamw.beta2,
                         .eps = adamw.epsilon,
                         .weight_decay = adamw.weight_decay,
                         .grad_scale = grad_scale};
        for (int i = 0; i < s.adamw_8bit->count; i++)
            reference_step(&ref[i], (const float *)s.gradients + s.adamw_8bit->tensors[i].element, &h, step);
        tt_adamw_step(&s, &adamw, lr, step, grad_scale);
        const bool ok = model_matches(&s, ref, step);
        for (int i = 0; i < s.adamw_8bit->count; i++) {
            free(ref[i].p);
            free(ref[i].m);
            free(ref[i].v);
            free(ref[i].c1);
            free(ref[i].c2);
            free(ref[i].absmax1);
            free(ref[i].absmax2);
        }
        free(ref);
        if (!ok) break;
    }
    const tt_backend *backend = s.backend;
    tt_model_state_free(&s);
    tt_backend_destroy((tt_backend *)backend);
}

/* ------------------------------------------------------------------ the size table */

static size_t align256(size_t bytes) { return (bytes + 255) / 256 * 256; }

static void test_price(void) {
    tt_model_state fp32, eight;
    open_model(&fp32, "adamw_torch");
    open_model(&eight, "adamw_bnb_8bit");
    /* per moment: a byte a element and 4 bytes a 256-element block of each 8-bit tensor, 4 bytes a element of the
     * others, each part aligned */
    size_t codes = 0, absmax = 0, small = 0;
    for (int i = 0; i < eight.params.count; i++) {
        const tt_param_info *p = &eight.params.params[i];
        if (!p->trainable) continue;
        if (p->numel >= 4096) {
            codes += (size_t)p->numel;
            absmax += 4 * (size_t)((p->numel + 255) / 256);
        } else {
            small += 4 * (size_t)p->numel;
        }
    }
    const size_t expected = 2 * (align256(codes) + align256(absmax) + align256(small));
    TT_EXPECT(eight.sizes.optimizer_state == expected, "8-bit moments priced %zu bytes, expected %zu",
              eight.sizes.optimizer_state, expected);
    TT_EXPECT(eight.sizes.optimizer_state < fp32.sizes.optimizer_state / 2,
              "8-bit moments (%zu bytes) under half of fp32 AdamW's (%zu)", eight.sizes.optimizer_state,
              fp32.sizes.optimizer_state);
    TT_EXPECT(eight.arena.class_peak[TT_CLASS_OPTIMIZER_STATE] == expected,
              "the arena holds exactly the priced moments (%zu bytes)",
              eight.arena.class_peak[TT_CLASS_OPTIMIZER_STATE]);
    TT_EXPECT(eight.sizes.class_peak[TT_CLASS_OPTIMIZER_STATE][TT_TIER_HOST] == expected,
              "the size table's peak of the optimizer state is the 8-bit moments' (%zu)",
              eight.sizes.class_peak[TT_CLASS_OPTIMIZER_STATE][TT_TIER_HOST]);
    const tt_backend *a = fp32.backend, *b = eight.backend;
    tt_model_state_free(&fp32);
    tt_model_state_free(&eight);
    tt_backend_destroy((tt_backend *)a);
    tt_backend_destroy((tt_backend *)b);
}

/* ------------------------------------------------------------------ the config */

static char *scratch;

static char *config_file(const char *name, const char *text) {
    char *path = malloc(4200);
    snprintf(path, 4200, "%s/%s", scratch, name);
    FILE *f = fopen(path, "wb");
    fputs(text, f);
    fclose(f);
    return path;
}

static void load_and_validate(void *path) {
    tt_run_config c;
    tt_run_config_defaults(&c);
    tt_run_config_load(&c, path, 0, NULL);
    tt_run_config_validate(&c);
    tt_run_config_free(&c);
}

/* The plan of a GPU run (tt_plan_from_config dies on a refused combination); whether it keeps 8-bit moments. */
static bool plan_on_gpu(const char *path) {
    tt_run_config c;
    tt_run_config_defaults(&c);
    tt_run_config_load(&c, path, 0, NULL);
    tt_model_config model = model_config();
    const tt_precision bf16 = tt_precision_for_run(&c, true);
    tt_plan plan;
    tt_plan_from_config(&plan, &c, &model, TT_TIER_GPU, &bf16);
    const bool moments_8bit = plan.moments_8bit;
    tt_plan_free(&plan);
    tt_run_config_free(&c);
    return moments_8bit;
}

#define VALID "model_config: m/config.json\ndatasets: [a.tok]\n"

static void test_config(void) {
    scratch = tt_test_tempdir("adamw_8bit");
    static const char *const names[] = {"adamw_bnb_8bit", "adamw_8bit", "paged_adamw_8bit"};
    char text[256];
    for (int i = 0; i < 3; i++) {
        snprintf(text, sizeof text, VALID "optimizer: %s\n", names[i]);
        char *path = config_file("eight.yaml", text);
        tt_run_config c;
        tt_run_config_defaults(&c);
        tt_run_config_load(&c, path, 0, NULL);
        tt_run_config_validate(&c);
        TT_EXPECT(tt_run_config_optimizer_8bit(&c), "optimizer: %s is the 8-bit AdamW", names[i]);
        tt_run_config_free(&c);
        free(path);
    }
    char *path = config_file("torch.yaml", VALID "optimizer: adamw_torch\n");
    tt_run_config c;
    tt_run_config_defaults(&c);
    tt_run_config_load(&c, path, 0, NULL);
    TT_EXPECT(!tt_run_config_optimizer_8bit(&c), "optimizer: adamw_torch is not the 8-bit AdamW");
    tt_run_config_free(&c);
    free(path);

    char *refused[5];
    refused[0] = config_file("offload.yaml", VALID "optimizer: adamw_bnb_8bit\noptimizer_cpu_offload: true\n"
                                                   "master_weights: true\n");
    TT_EXPECT(tt_expect_die(load_and_validate, refused[0], "optimizer_cpu_offload"),
              "8-bit AdamW with optimizer_cpu_offload is refused naming it");
    refused[1] = config_file("zero.yaml", VALID "optimizer: adamw_8bit\nzero_stage: 1\n");
    TT_EXPECT(tt_expect_die(load_and_validate, refused[1], "zero_stage"),
              "8-bit AdamW with zero_stage is refused naming it");
    refused[2] = config_file("gpu.yaml", VALID "optimizer: paged_adamw_8bit\n");
    TT_EXPECT(plan_on_gpu(refused[2]), "8-bit AdamW plans on the GPU (its kernel: tests/gpu/test_gpu_adamw_8bit.c)");
    refused[3] = config_file("lion.yaml", VALID "optimizer: lion_8bit\n");
    TT_EXPECT(tt_expect_die(load_and_validate, refused[3], "use adamw_torch, or adamw_bnb_8bit"),
              "bitsandbytes' Lion is refused with what to use");
    refused[4] = config_file("torchao.yaml", VALID "optimizer: adamw_torch_8bit\n");
    TT_EXPECT(tt_expect_die(load_and_validate, refused[4], "use adamw_bnb_8bit"),
              "torchao's 8-bit AdamW is refused with what to use");
    for (int i = 0; i < 5; i++) free(refused[i]);
}

int main(void) {
    tt_dynamic_map_build(signed_map, true);
    tt_dynamic_map_build(unsigned_map, false);
    test_maps();
    test_nearest();
    check_against_reference("from zero, 1 thread", 1, false);
    check_against_reference("from zero, 2 threads", 2, false);
    check_against_reference("from random state, 2 threads", 2, true);
    test_short_block_absmax();
    test_model_step();
    test_price();
    test_config();
    return tt_test_summary("adamw_8bit");
}
