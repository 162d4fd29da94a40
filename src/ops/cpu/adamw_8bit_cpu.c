/* The CPU backend's 8-bit AdamW (adamw_8bit_cpu.h). Compiled with -ffp-contract=off (CMakeLists.txt): bitsandbytes'
 * kernels round every product and sum on their own, and a fused multiply-add would give other bits. */
#include "ops/cpu/adamw_8bit_cpu.h"

#include <float.h>
#include <math.h>

/* Blocks of one tensor below which its update stays on one thread. */
#define PARALLEL_MIN_BLOCKS 16

/* A small tensor: bitsandbytes' 32-bit Adam step (the weight decays after it). */
static void step_fp32(float *p, const float *g, float *m, float *v, int64_t n, const tt_adamw_8bit_scalars *k,
                      bool decays) {
    for (int64_t i = 0; i < n; i++) {
        const float gi = g[i] * k->grad_scale;
        const float mi = m[i] * k->beta1 + k->one_minus_beta1 * gi;
        const float vi = v[i] * k->beta2 + k->one_minus_beta2 * (gi * gi);
        float pi = p[i] + k->step_size * (mi / (sqrtf(vi) + k->scaled_eps));
        if (decays) pi = pi * k->decay;
        m[i] = mi;
        v[i] = vi;
        p[i] = pi;
    }
}

/* One block of an 8-bit tensor: `valid` elements (a tensor's last block may be short). */
static void step_block(const tt_adamw_8bit_maps *maps, float *p, const float *g, unsigned char *codes1,
                       unsigned char *codes2, float *absmax1, float *absmax2, int valid, const tt_adamw_8bit_scalars *k,
                       bool decays) {
    float s1[TT_ADAMW_8BIT_BLOCK], s2[TT_ADAMW_8BIT_BLOCK];
    bool finite[TT_ADAMW_8BIT_BLOCK];
    const float old1 = *absmax1, old2 = *absmax2;
    float max1 = -FLT_MAX, max2 = -FLT_MAX;
    for (int j = 0; j < valid; j++) {
        const float gj = g[j] * k->grad_scale;
        finite[j] = isfinite(gj);
        if (finite[j]) { /* a non-finite gradient zeroes the element's moments and leaves its weight */
            s2[j] = maps->second[codes2[j]] * old2;
            s2[j] = s2[j] * k->beta2 + k->one_minus_beta2 * gj * gj;
            s1[j] = maps->first[codes1[j]] * old1;
            s1[j] = s1[j] * k->beta1 + k->one_minus_beta1 * gj;
        } else {
            s1[j] = 0.0f;
            s2[j] = 0.0f;
        }
        max1 = fmaxf(max1, fabsf(s1[j]));
        max2 = fmaxf(max2, fabsf(s2[j]));
    }
    if (valid < TT_ADAMW_8BIT_BLOCK) {
        /* bitsandbytes' kernel runs a short block's missing elements too, as codes 128 and 0 with a zero gradient,
         * and takes their moments into the new absmax: the first moment's is map[128] (the smallest positive code)
         * times the old absmax times beta1, which decides the absmax of a block whose own moments are smaller */
        const float gj = 0.0f * k->grad_scale;
        float tail2 = maps->second[0] * old2;
        tail2 = tail2 * k->beta2 + k->one_minus_beta2 * gj * gj;
        float tail1 = maps->first[128] * old1;
        tail1 = tail1 * k->beta1 + k->one_minus_beta1 * gj;
        max1 = fmaxf(max1, fabsf(tail1));
        max2 = fmaxf(max2, fabsf(tail2));
    }
    *absmax1 = max1;
    *absmax2 = max2;
    for (int j = 0; j < valid; j++) {
        if (finite[j]) {
            p[j] = p[j] + k->step_size * (s1[j] / (sqrtf(s2[j]) + k->scaled_eps));
            if (decays) p[j] = p[j] * k->decay;
        }
        unsigned char c1 = tt_dynamic_map_nearest(maps->first, s1[j] / max1, true);
        codes2[j] = tt_dynamic_map_nearest(maps->second, s2[j] / max2, false);
        /* the first moment keeps its sign: a code of the other sign moves one code towards the value's side (a
         * small negative value nearest to code 127, zero, becomes code 126) */
        if ((signbit(maps->first[c1]) != 0) != (signbit(s1[j]) != 0))
            c1 = (unsigned char)(s1[j] > 0.0f ? c1 + 1 : c1 - 1);
        codes1[j] = c1;
    }
}

static void step_quantized(const tt_adamw_8bit_maps *maps, float *p, const float *g, const tt_adamw_8bit_moment *m,
                           const tt_adamw_8bit_moment *v, const tt_adamw_8bit_tensor *t, const tt_adamw_8bit_scalars *k,
                           bool decays) {
    const int64_t blocks = tt_adamw_8bit_blocks(t->numel);
#pragma omp parallel for schedule(static) if (blocks >= PARALLEL_MIN_BLOCKS)
    for (int64_t b = 0; b < blocks; b++) {
        const int64_t first = b * TT_ADAMW_8BIT_BLOCK, left = t->numel - first;
        const int valid = left < TT_ADAMW_8BIT_BLOCK ? (int)left : TT_ADAMW_8BIT_BLOCK;
        step_block(maps, p + first, g + first, m->codes + t->state + first, v->codes + t->state + first,
                   m->absmax + t->block + b, v->absmax + t->block + b, valid, k, decays);
    }
}

void tt_cpu_adamw_8bit_update(const tt_adamw_8bit_maps *maps, float *weights, const float *g,
                              const tt_adamw_8bit_moment *m, const tt_adamw_8bit_moment *v,
                              const tt_adamw_8bit_tensor *tensors, int count, const tt_adamw_8bit_scalars *k) {
    for (int i = 0; i < count; i++) {
        const tt_adamw_8bit_tensor *t = &tensors[i];
        const bool decays = t->decays && k->weight_decays;
        if (t->quantized) step_quantized(maps, weights + t->element, g + t->element, m, v, t, k, decays);
        else
            step_fp32(weights + t->element, g + t->element, m->fp32 + t->state, v->fp32 + t->state, t->numel, k,
                      decays);
    }
}
