/* The CPU AdamW of optimizer offload: every vector path this CPU runs (AVX-512, AVX2, scalar) and
 * every thread count give the bits of the CPU backend's scalar AdamW, on random data of odd
 * lengths with decaying and non-decaying segments, the bf16 copy the bits of tt_f32_to_bf16; and
 * the result against a double-precision AdamW within fp32 rounding (the bound below). */
#include <string.h>

#include "core/dtype.h"
#include "core/rng.h"
#include "ops/cpu/ops_cpu.h"
#include "test_util.h"
#include "train/cpu_adamw.h"

typedef struct adamw_state {
    int64_t n;
    float *p, *m, *v, *g;
    uint16_t *w;
} adamw_state;

static adamw_state random_state(int64_t n, uint64_t seed) {
    adamw_state s = {.n = n};
    s.p = malloc(sizeof(float) * (size_t)n);
    s.m = malloc(sizeof(float) * (size_t)n);
    s.v = malloc(sizeof(float) * (size_t)n);
    s.g = malloc(sizeof(float) * (size_t)n);
    s.w = malloc(sizeof(uint16_t) * (size_t)n);
    tt_rng rng;
    tt_rng_seed(&rng, seed);
    for (int64_t i = 0; i < n; i++) {
        s.p[i] = (float)tt_rng_normal(&rng);
        s.m[i] = 0.01f * (float)tt_rng_normal(&rng);
        const float r = (float)tt_rng_normal(&rng);
        s.v[i] = 1e-4f * r * r;
        /* gradients over many magnitudes, some exactly zero */
        s.g[i] = (i % 97 == 0) ? 0.0f : (float)tt_rng_normal(&rng) * powf(10.0f, (float)(i % 7) - 4.0f);
        s.w[i] = 0xdead;
    }
    return s;
}

static adamw_state copy_state(const adamw_state *a) {
    adamw_state s = random_state(a->n, 1);
    memcpy(s.p, a->p, sizeof(float) * (size_t)a->n);
    memcpy(s.m, a->m, sizeof(float) * (size_t)a->n);
    memcpy(s.v, a->v, sizeof(float) * (size_t)a->n);
    memcpy(s.g, a->g, sizeof(float) * (size_t)a->n);
    return s;
}

static void free_state(adamw_state *s) {
    free(s->p);
    free(s->m);
    free(s->v);
    free(s->g);
    free(s->w);
}

static bool same_bits(const float *a, const float *b, int64_t n, int64_t *first_difference) {
    for (int64_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof(float)) != 0) {
            *first_difference = i;
            return false;
        }
    return true;
}

/* Segments of a few lengths, alternating decay, covering [0, n). */
static int make_segments(int64_t n, int64_t *start, unsigned char *decays, int max_segments) {
    static const int64_t lengths[] = {1, 64, 7, 130, 1000, 3, 4096, 17};
    int count = 0;
    int64_t at = 0;
    while (at < n && count < max_segments - 1) {
        start[count] = at;
        decays[count] = (unsigned char)(count % 2 == 0);
        at += lengths[count % 8];
        if (at > n) at = n;
        count++;
    }
    if (at < n) {
        start[count] = at;
        decays[count] = 1;
        count++;
    }
    start[count] = n;
    return count;
}

/* The CPU backend's AdamW over the segments, as its adamw_update calls it. */
static void backend_adamw(adamw_state *s, const int64_t *start, const unsigned char *decays, int segments, float lr,
                          float wd, int64_t step, float grad_scale) {
    for (int k = 0; k < segments; k++) {
        const int64_t at = start[k], n = start[k + 1] - at;
        tt_cpu_adamw_update_f32(s->p + at, s->g + at, s->m + at, s->v + at, n, lr, 0.9f, 0.999f, 1e-8f,
                                decays[k] ? wd : 0.0f, step, grad_scale);
    }
}

static void test_bit_identity(void) {
    static const int64_t lengths[] = {1,    7,    15,    16,     17,     33,
                                      1000, 4099, 70001, 262147, 2100001}; /* the last: several pieces */
    const tt_cpu_adamw_isa isas[] = {TT_CPU_ADAMW_SCALAR, TT_CPU_ADAMW_AVX2, TT_CPU_ADAMW_AVX512};
    const int thread_counts[] = {1, 2, 3};
    int64_t start[4096];
    unsigned char decays[4096];
    for (size_t li = 0; li < sizeof lengths / sizeof lengths[0]; li++) {
        const int64_t n = lengths[li];
        const int segments = make_segments(n, start, decays, 4096);
        for (int64_t step = 1; step <= 3; step += 2) {
            const float lr = 1e-3f, wd = 0.1f, grad_scale = step == 1 ? 1.0f : 0.37f;
            adamw_state reference = random_state(n, (uint64_t)(n * 31 + step));
            adamw_state input = copy_state(&reference);
            backend_adamw(&reference, start, decays, segments, lr, wd, step, grad_scale);
            const tt_adamw_scalars k = tt_adamw_scalars_for(lr, 0.9f, 0.999f, 1e-8f, wd, step, grad_scale);
            for (size_t ii = 0; ii < 3; ii++) {
                if (!tt_cpu_adamw_isa_supported(isas[ii])) {
                    printf("  %s: not supported by this CPU, skipped\n", tt_cpu_adamw_isa_name(isas[ii]));
                    continue;
                }
                for (size_t ti = 0; ti < 3; ti++) {
                    adamw_state s = copy_state(&input);
                    tt_cpu_adamw_pool *pool = tt_cpu_adamw_pool_create(thread_counts[ti], isas[ii]);
                    tt_cpu_adamw_pool_update(pool, s.p, s.m, s.v, s.g, s.w, start, decays, segments, &k);
                    tt_cpu_adamw_pool_free(pool);
                    int64_t at = -1;
                    TT_EXPECT(same_bits(s.p, reference.p, n, &at), "%s, %d threads, n %lld: weights differ at %lld",
                              tt_cpu_adamw_isa_name(isas[ii]), thread_counts[ti], (long long)n, (long long)at);
                    TT_EXPECT(same_bits(s.m, reference.m, n, &at) && same_bits(s.v, reference.v, n, &at),
                              "%s, %d threads, n %lld: moments differ at %lld", tt_cpu_adamw_isa_name(isas[ii]),
                              thread_counts[ti], (long long)n, (long long)at);
                    bool bf16_same = true;
                    for (int64_t i = 0; i < n; i++) bf16_same &= s.w[i] == tt_f32_to_bf16(reference.p[i]);
                    TT_EXPECT(bf16_same, "%s, n %lld: the bf16 copy is not tt_f32_to_bf16 of the weights",
                              tt_cpu_adamw_isa_name(isas[ii]), (long long)n);
                    free_state(&s);
                }
            }
            free_state(&reference);
            free_state(&input);
        }
    }
}

/* Special values through the vector paths: NaN and infinite gradients, huge and tiny weights;
 * bf16 rounding ties and NaN quieting. */
static void test_special_values(void) {
    const int64_t n = 48;
    adamw_state input = random_state(n, 5);
    const float specials[] = {NAN, INFINITY, -INFINITY, 3.4e38f, 1e-40f, -0.0f};
    for (int i = 0; i < 6; i++) input.g[i] = specials[i];
    for (int i = 0; i < 6; i++) input.p[10 + i] = specials[i];
    input.p[20] = 1.00390625f; /* exactly halfway between two bf16 values: rounds to even */
    input.p[21] = 1.01171875f;
    int64_t start[2] = {0, n};
    unsigned char decays[1] = {0};
    adamw_state reference = copy_state(&input);
    backend_adamw(&reference, start, decays, 1, 1e-3f, 0.0f, 2, 1.0f);
    const tt_adamw_scalars k = tt_adamw_scalars_for(1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f, 2, 1.0f);
    for (int isa = TT_CPU_ADAMW_SCALAR; isa <= TT_CPU_ADAMW_AVX512; isa++) {
        if (!tt_cpu_adamw_isa_supported((tt_cpu_adamw_isa)isa)) continue;
        adamw_state s = copy_state(&input);
        tt_cpu_adamw_range((tt_cpu_adamw_isa)isa, s.p, s.m, s.v, s.g, s.w, n, &k, 1.0f);
        int64_t at = -1;
        TT_EXPECT(same_bits(s.p, reference.p, n, &at), "%s special values: weights differ at %lld",
                  tt_cpu_adamw_isa_name((tt_cpu_adamw_isa)isa), (long long)at);
        bool bf16_same = true;
        for (int64_t i = 0; i < n; i++) bf16_same &= s.w[i] == tt_f32_to_bf16(reference.p[i]);
        TT_EXPECT(bf16_same, "%s special values: bf16 copy", tt_cpu_adamw_isa_name((tt_cpu_adamw_isa)isa));
        free_state(&s);
    }
    free_state(&input);
    free_state(&reference);
}

/* Against AdamW in double on the same fp32 inputs. Each fp32 result carries a few roundings of
 * relative size 2^-24: the bound is 8 * 2^-24 of the weight plus 8 * 2^-24 of the
 * step's magnitude lr/bc1 * |m| / denom (the division chain); m and v, 3 and 4 roundings of their
 * terms' magnitudes. */
static void test_against_double(void) {
    const int64_t n = 100003;
    adamw_state s = random_state(n, 77);
    adamw_state input = copy_state(&s);
    const float lr = 3e-3f, wd = 0.05f, grad_scale = 0.5f;
    const int64_t step = 4;
    const tt_adamw_scalars k = tt_adamw_scalars_for(lr, 0.9f, 0.999f, 1e-8f, wd, step, grad_scale);
    tt_cpu_adamw_pool *pool = tt_cpu_adamw_pool_create(2, tt_cpu_adamw_best_isa());
    int64_t start[2] = {0, n};
    unsigned char decays[1] = {1};
    tt_cpu_adamw_pool_update(pool, s.p, s.m, s.v, s.g, NULL, start, decays, 1, &k);
    tt_cpu_adamw_pool_free(pool);
    const double eps24 = ldexp(1.0, -24);
    /* the same fp32 constants, the arithmetic in double */
    const double b1 = 0.9f, b2 = 0.999f, omb1 = (float)(1.0 - b1), omb2 = (float)(1.0 - b2), eps = 1e-8f;
    const double bc1 = 1.0 - pow(b1, (double)step), bc2 = 1.0 - pow(b2, (double)step);
    int64_t bad = 0;
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        const double g = (double)input.g[i] * grad_scale;
        const double m = b1 * input.m[i] + omb1 * g, v = b2 * input.v[i] + omb2 * g * g;
        const double update = lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps);
        const double p = input.p[i] * (1.0 - (double)lr * wd) - update;
        const double bound = 8.0 * eps24 * fabs(p) + 8.0 * eps24 * fabs(update);
        const double error = fabs((double)s.p[i] - p);
        if (error > bound) bad++;
        if (bound > 0 && error / bound > worst) worst = error / bound;
        /* each moment: two products and a sum, so 3 roundings of the terms' magnitude */
        const double m_scale = fabs(b1 * input.m[i]) + fabs(omb1 * g),
                     v_scale = fabs(b2 * input.v[i]) + fabs(omb2 * g * g);
        if (fabs((double)s.m[i] - m) > 3 * eps24 * m_scale || fabs((double)s.v[i] - v) > 4 * eps24 * v_scale) bad++;
    }
    TT_EXPECT(bad == 0, "%lld of %lld elements outside the fp32 rounding bound", (long long)bad, (long long)n);
    printf("  against double: worst error %.2f of the bound\n", worst);
    free_state(&s);
    free_state(&input);
}

int main(void) {
    printf("CPU AdamW: this CPU runs %s\n", tt_cpu_adamw_isa_name(tt_cpu_adamw_best_isa()));
    test_bit_identity();
    test_special_values();
    test_against_double();
    return tt_test_summary("test_cpu_adamw");
}
