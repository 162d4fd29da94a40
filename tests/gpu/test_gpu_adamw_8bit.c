/* `make test-gpu`: bitsandbytes' 8-bit AdamW on the GPU (tt_cuda_adamw_8bit) against the CPU backend's
 * (tt_cpu_adamw_8bit_update), bit for bit: tensors of 300, 4095, 4096, 5000 and 70001 elements (fp32 moments below
 * 4096, 8-bit blocks above, short last blocks), weight decay on some, clipping, non-finite gradients, five steps with
 * the moments starting at zero. Both round the same operations once each in the same order (the kernel's __fmul_rn,
 * __fadd_rn, __fdiv_rn, __fsqrt_rn; the CPU's code built without contraction), so the fp32 master weights, the codes,
 * the absmax and the fp32 moments must be equal, and the bf16 compute copy the master rounded to nearest even. A
 * second case without a master (bf16 parameters) checks the parameter read and rounded back in bf16. Then the whole
 * model: `optimizer: adamw_bnb_8bit` trains on the GPU (tests/test_adamw_8bit_cli.sh with device=cuda). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "core/rng.h"
#include "gpu_test_util.h"
#include "ops/adamw_8bit.h"
#include "ops/cpu/adamw_8bit_cpu.h"
#include "ops/cuda/ops_cuda.h"
#include "test_util.h"

static const int64_t sizes[] = {300, 4095, 4096, 5000, 70001};
#define TENSORS ((int)(sizeof sizes / sizeof sizes[0]))

typedef struct layout {
    tt_adamw_8bit_tensor tensors[TENSORS];
    int64_t elements, codes, blocks, fp32;
} layout;

static layout make_layout(void) {
    layout l = {0};
    for (int i = 0; i < TENSORS; i++) {
        tt_adamw_8bit_tensor *t = &l.tensors[i];
        t->element = l.elements;
        t->numel = sizes[i];
        t->decays = i % 2 == 0;
        t->quantized = sizes[i] >= TT_ADAMW_8BIT_MIN_NUMEL;
        if (t->quantized) {
            t->state = l.codes;
            t->block = l.blocks;
            l.codes += sizes[i];
            l.blocks += tt_adamw_8bit_blocks(sizes[i]);
        } else {
            t->state = l.fp32;
            l.fp32 += sizes[i];
        }
        l.elements += (sizes[i] + 63) / 64 * 64; /* the trainable layout's padding */
    }
    return l;
}

/* One moment on the host and its device copy. */
typedef struct moment_pair {
    tt_adamw_8bit_moment host, device;
} moment_pair;

static moment_pair moment_alloc(const layout *l) {
    moment_pair p;
    p.host.codes = calloc((size_t)l->codes, 1);
    p.host.absmax = calloc((size_t)l->blocks, sizeof(float));
    p.host.fp32 = calloc((size_t)l->fp32, sizeof(float));
    TT_CUDA_CHECK(cudaMalloc((void **)&p.device.codes, (size_t)l->codes));
    TT_CUDA_CHECK(cudaMalloc((void **)&p.device.absmax, sizeof(float) * (size_t)l->blocks));
    TT_CUDA_CHECK(cudaMalloc((void **)&p.device.fp32, sizeof(float) * (size_t)l->fp32));
    TT_CUDA_CHECK(cudaMemset(p.device.codes, 0, (size_t)l->codes));
    TT_CUDA_CHECK(cudaMemset(p.device.absmax, 0, sizeof(float) * (size_t)l->blocks));
    TT_CUDA_CHECK(cudaMemset(p.device.fp32, 0, sizeof(float) * (size_t)l->fp32));
    return p;
}

static void moment_free(moment_pair *p) {
    free(p->host.codes);
    free(p->host.absmax);
    free(p->host.fp32);
    cudaFree(p->device.codes);
    cudaFree(p->device.absmax);
    cudaFree(p->device.fp32);
}

/* The device copy equals the host one, byte for byte. */
static bool moment_equal(const layout *l, const moment_pair *p, const char *which, int step) {
    unsigned char *codes = malloc((size_t)l->codes);
    float *absmax = malloc(sizeof(float) * (size_t)l->blocks), *fp32 = malloc(sizeof(float) * (size_t)l->fp32);
    TT_CUDA_CHECK(cudaMemcpy(codes, p->device.codes, (size_t)l->codes, cudaMemcpyDeviceToHost));
    TT_CUDA_CHECK(cudaMemcpy(absmax, p->device.absmax, sizeof(float) * (size_t)l->blocks, cudaMemcpyDeviceToHost));
    TT_CUDA_CHECK(cudaMemcpy(fp32, p->device.fp32, sizeof(float) * (size_t)l->fp32, cudaMemcpyDeviceToHost));
    int64_t code_diffs = 0;
    for (int64_t i = 0; i < l->codes; i++) code_diffs += codes[i] != p->host.codes[i];
    const bool same = code_diffs == 0 && memcmp(absmax, p->host.absmax, sizeof(float) * (size_t)l->blocks) == 0 &&
                      memcmp(fp32, p->host.fp32, sizeof(float) * (size_t)l->fp32) == 0;
    TT_EXPECT(same, "step %d: the %s moment's codes (%lld differ), absmax and fp32 moments equal the CPU's", step,
              which, (long long)code_diffs);
    free(codes);
    free(absmax);
    free(fp32);
    return same;
}

static void test_against_cpu(bool with_master) {
    const layout l = make_layout();
    const size_t bytes = sizeof(float) * (size_t)l.elements;
    float *p = calloc((size_t)l.elements, sizeof(float)), *g = calloc((size_t)l.elements, sizeof(float));
    uint16_t *w = calloc((size_t)l.elements, sizeof(uint16_t));
    for (int i = 0; i < TENSORS; i++)
        for (int64_t j = 0; j < l.tensors[i].numel; j++) {
            const int64_t e = l.tensors[i].element + j;
            p[e] = (float)(tt_rng_uniform(&gpu_test_rng) - 0.5);
            if (!with_master) p[e] = tt_bf16_to_f32(tt_f32_to_bf16(p[e])); /* bf16 parameters: representable values */
            w[e] = tt_f32_to_bf16(p[e]);
        }
    float *p_dev = NULL, *g_dev;
    tt_bf16 *w_dev;
    if (with_master) {
        TT_CUDA_CHECK(cudaMalloc((void **)&p_dev, bytes));
        TT_CUDA_CHECK(cudaMemcpy(p_dev, p, bytes, cudaMemcpyHostToDevice));
    }
    TT_CUDA_CHECK(cudaMalloc((void **)&g_dev, bytes));
    TT_CUDA_CHECK(cudaMalloc((void **)&w_dev, sizeof(tt_bf16) * (size_t)l.elements));
    TT_CUDA_CHECK(cudaMemcpy(w_dev, w, sizeof(tt_bf16) * (size_t)l.elements, cudaMemcpyHostToDevice));
    moment_pair m = moment_alloc(&l), v = moment_alloc(&l);
    tt_adamw_8bit_maps maps;
    tt_adamw_8bit_maps_build(&maps);
    bool ok = true;
    for (int step = 1; step <= 5 && ok; step++) {
        for (int i = 0; i < TENSORS; i++)
            for (int64_t j = 0; j < l.tensors[i].numel; j++)
                g[l.tensors[i].element + j] = (float)(1e-2 * (tt_rng_uniform(&gpu_test_rng) - 0.5));
        if (step == 3) { /* a non-finite gradient: its element's moments zeroed, its weight left */
            g[l.tensors[4].element + 17] = NAN;
            g[l.tensors[2].element + 4095] = INFINITY;
        }
        TT_CUDA_CHECK(cudaMemcpy(g_dev, g, bytes, cudaMemcpyHostToDevice));
        const tt_adamw_8bit_scalars k =
            tt_adamw_8bit_scalars_for(1e-2f * (float)step, 0.9f, 0.995f, 1e-8f, 0.1f, step, step == 2 ? 0.5f : 1.0f);
        tt_cpu_adamw_8bit_update(&maps, p, g, &m.host, &v.host, l.tensors, TENSORS, &k);
        if (!with_master) /* the CPU oracle over fp32: bf16 parameters are the fp32 result rounded */
            for (int64_t e = 0; e < l.elements; e++) p[e] = tt_bf16_to_f32(tt_f32_to_bf16(p[e]));
        tt_cuda_adamw_8bit(p_dev, w_dev, g_dev, 1, &m.device, &v.device, l.tensors, TENSORS, &k, &maps, 0);
        TT_CUDA_CHECK(cudaDeviceSynchronize());
        ok = moment_equal(&l, &m, "first", step) && moment_equal(&l, &v, "second", step);
        uint16_t *w_back = malloc(sizeof(uint16_t) * (size_t)l.elements);
        TT_CUDA_CHECK(cudaMemcpy(w_back, w_dev, sizeof(uint16_t) * (size_t)l.elements, cudaMemcpyDeviceToHost));
        int64_t weight_diffs = 0, master_diffs = 0;
        for (int64_t e = 0; e < l.elements; e++) weight_diffs += w_back[e] != tt_f32_to_bf16(p[e]);
        if (with_master) {
            float *p_back = malloc(bytes);
            TT_CUDA_CHECK(cudaMemcpy(p_back, p_dev, bytes, cudaMemcpyDeviceToHost));
            for (int64_t e = 0; e < l.elements; e++) master_diffs += memcmp(&p_back[e], &p[e], 4) != 0;
            free(p_back);
        }
        TT_EXPECT(master_diffs == 0 && weight_diffs == 0,
                  "step %d (%s): master weights (%lld differ) and bf16 weights (%lld differ) equal the CPU's", step,
                  with_master ? "fp32 master" : "bf16 parameters", (long long)master_diffs, (long long)weight_diffs);
        ok = ok && master_diffs == 0 && weight_diffs == 0;
        free(w_back);
    }
    moment_free(&m);
    moment_free(&v);
    cudaFree(p_dev);
    cudaFree(g_dev);
    cudaFree(w_dev);
    free(p);
    free(g);
    free(w);
}

int main(int argc, char **argv) {
    (void)argc;
    (void)argv;
    tt_rng_seed(&gpu_test_rng, 8);
    test_against_cpu(true);
    test_against_cpu(false);
    return tt_test_summary("test_gpu_adamw_8bit");
}
