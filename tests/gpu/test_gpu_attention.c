/* The tensor-core flash attention (src/ops/cuda/attention_flash.h) against the CPU reference
 * and the simple GPU kernels, on fresh random bf16-rounded inputs with NaN-poisoned outputs:
 * forward out and lse, backward dq, dk, dv, two backward runs giving the same bits; then its
 * speed at long sequences (TFLOP/s, causal FLOPs). Packed documents (sample_packing: one document, many
 * short ones, boundaries inside tiles, documents of one token, a long one then short ones), flash and
 * the simple kernels, and the Hopper (wgmma) kernels at head_dim 64 and 128, against the CPU reference.
 * The Hopper kernels (attention_hopper.h) forward and backward against the CPU reference and the flash
 * kernels, twice the same bits, the pipelined (TMA) ones bit for bit against the cp.async ones, and their
 * speed beside the flash kernels'. `--speed T:Hq[:hd],...` times only the Hopper kernels at those shapes (Hkv 8,
 * hd 128 unless given),
 * e.g. issue 15's 16384:16,65536:16,262144:16,16384:32,65536:32,262144:32.
 * `test_gpu_attention --quick` skips T = 65536.
 * Exit status nonzero on any failed check. */
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "core/dtype.h"
#include "core/rng.h"
#include "ops/cpu/ops_cpu.h"
#include "ops/cuda/attention_flash.h"
#include "ops/cuda/attention_hopper.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/ops_cuda.h"
#include "gpu/gpu_test_util.h"
#include "test_util.h"

#define OUT_TOLERANCE 1e-2  /* a few bf16 ulps (2^-8 = 3.9e-3) of the largest value */
#define GRAD_TOLERANCE 2e-2 /* gradients pass through bf16 P and dS */
#define LSE_TOLERANCE 1e-4

/* max|got - want| / max(max|want|, floor): with floor 0 the relative error of expect_close;
 * a floor keeps gradients that are zero up to rounding (a single token: dS = 0) from dividing
 * rounding noise by rounding noise. */
static double max_error(const float *got, const float *want, int64_t n, double floor) {
    double max_diff = 0, max_ref = floor > 1e-30 ? floor : 1e-30;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - (double)want[i]);
        if (!(d <= max_diff)) max_diff = isnan(d) ? INFINITY : d;
        if (fabs((double)want[i]) > max_ref) max_ref = fabs((double)want[i]);
    }
    return max_diff / max_ref;
}

static void expect_close_floor(const char *what, const float *got, const float *want, int64_t n, double tolerance,
                               double floor) {
    double err = max_error(got, want, n, floor);
    TT_EXPECT(err <= tolerance, "%s: relative error %.3g > %.3g", what, err, tolerance);
    printf("  %-44s max relative error %.2e\n", what, err);
}

/* lse values are O(1..10): an absolute bound, relative to max(1, |want|). */
static void expect_close_lse(const char *what, const float *got, const float *want, int64_t n) {
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double ref = fabs((double)want[i]) > 1.0 ? fabs((double)want[i]) : 1.0;
        double err = fabs((double)got[i] - (double)want[i]) / ref;
        if (!(err <= worst)) worst = isnan(err) ? INFINITY : err;
    }
    TT_EXPECT(worst <= LSE_TOLERANCE, "%s: error %.3g > %.3g", what, worst, LSE_TOLERANCE);
    printf("  %-44s max error %.2e\n", what, worst);
}

static tt_attention_shape make_shape(int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t hd) {
    tt_attention_shape s = {.batch = B,
                            .seq_len = T,
                            .num_heads = Hq,
                            .num_kv_heads = Hkv,
                            .head_dim = hd,
                            .scale = 1.0 / sqrt((double)hd),
                            .sliding_window = 0};
    return s;
}

/* The inputs and outputs of one shape on the device. */
typedef struct attention_buffers {
    int64_t nq, nkv, rows;
    float *q, *k, *v, *dout; /* host copies of the inputs */
    tt_bf16 *q_dev, *k_dev, *v_dev, *dout_dev, *out_dev, *dq_dev, *dk_dev, *dv_dev;
    float *lse_dev;
    void *scratch;
} attention_buffers;

static attention_buffers make_buffers(const tt_attention_shape *s) {
    attention_buffers a;
    a.nq = s->batch * s->seq_len * s->num_heads * s->head_dim;
    a.nkv = s->batch * s->seq_len * s->num_kv_heads * s->head_dim;
    a.rows = s->batch * s->num_heads * s->seq_len;
    a.q = random_bf16(a.nq, 2.0f, &a.q_dev);
    a.k = random_bf16(a.nkv, 2.0f, &a.k_dev);
    a.v = random_bf16(a.nkv, 1.0f, &a.v_dev);
    a.dout = random_bf16(a.nq, 1.0f, &a.dout_dev);
    a.out_dev = device_poisoned(a.nq);
    a.dq_dev = device_poisoned(a.nq);
    a.dk_dev = device_poisoned(a.nkv);
    a.dv_dev = device_poisoned(a.nkv);
    a.lse_dev = device_poisoned_f32(a.rows);
    TT_CUDA_CHECK(cudaMalloc(&a.scratch, tt_cuda_flash_attention_backward_scratch_bytes(s)));
    return a;
}

static void free_buffers(attention_buffers *a) {
    free(a->q);
    free(a->k);
    free(a->v);
    free(a->dout);
    cudaFree(a->q_dev);
    cudaFree(a->k_dev);
    cudaFree(a->v_dev);
    cudaFree(a->dout_dev);
    cudaFree(a->out_dev);
    cudaFree(a->dq_dev);
    cudaFree(a->dk_dev);
    cudaFree(a->dv_dev);
    cudaFree(a->lse_dev);
    cudaFree(a->scratch);
}

static void run_flash(attention_buffers *a, const tt_attention_shape *s) {
    tt_cuda_flash_attention_forward(a->out_dev, a->lse_dev, a->q_dev, a->k_dev, a->v_dev, s, 0);
    tt_cuda_flash_attention_backward(a->dq_dev, a->dk_dev, a->dv_dev, a->dout_dev, a->out_dev, a->lse_dev, a->q_dev,
                                     a->k_dev, a->v_dev, s, a->scratch, 0);
    TT_CUDA_CHECK(cudaDeviceSynchronize());
}

/* Scratch for every Hopper backward schedule (cp.async or pipelined, dQ kernel or ordered dQ). */
static size_t hopper_scratch_bytes(const tt_attention_shape *s) {
    const size_t a = tt_cuda_hopper_attention_backward_ordered_scratch_bytes(s);
    const size_t b = tt_cuda_hopper_attention_backward_pipelined_scratch_bytes(s, true);
    return a > b ? a : b;
}

/* NaN bits over every output (out, lse, dq, dk, dv), so that a row a kernel does not write fails its check. */
static void poison_outputs(attention_buffers *a) {
    TT_CUDA_CHECK(cudaMemset(a->out_dev, 0xFF, sizeof(tt_bf16) * (size_t)a->nq));
    TT_CUDA_CHECK(cudaMemset(a->dq_dev, 0xFF, sizeof(tt_bf16) * (size_t)a->nq));
    TT_CUDA_CHECK(cudaMemset(a->dk_dev, 0xFF, sizeof(tt_bf16) * (size_t)a->nkv));
    TT_CUDA_CHECK(cudaMemset(a->dv_dev, 0xFF, sizeof(tt_bf16) * (size_t)a->nkv));
    TT_CUDA_CHECK(cudaMemset(a->lse_dev, 0xFF, sizeof(float) * (size_t)a->rows));
}

/* The pipelined forward into fresh poisoned buffers: the out and lse bits the cp.async forward left in a. */
static void expect_pipelined_forward_bits(const attention_buffers *a, const tt_attention_shape *s, const char *label) {
    tt_bf16 *out2 = device_poisoned(a->nq);
    float *lse2 = device_poisoned_f32(a->rows);
    tt_cuda_hopper_attention_forward_pipelined(out2, lse2, a->q_dev, a->k_dev, a->v_dev, s, 0);
    TT_CUDA_CHECK(cudaDeviceSynchronize());
    float *x = download_f32(lse2, a->rows), *y = download_f32(a->lse_dev, a->rows);
    TT_EXPECT(same_bits_bf16(a->out_dev, out2, a->nq) && memcmp(x, y, sizeof(float) * (size_t)a->rows) == 0,
              "%s: the pipelined hopper forward gives the cp.async one's bits", label);
    free(x);
    free(y);
    cudaFree(out2);
    cudaFree(lse2);
}

/* Backward again into fresh poisoned buffers: the same bits. */
static void expect_deterministic(attention_buffers *a, const tt_attention_shape *s, const char *label) {
    tt_bf16 *dq2 = device_poisoned(a->nq), *dk2 = device_poisoned(a->nkv), *dv2 = device_poisoned(a->nkv);
    tt_cuda_flash_attention_backward(dq2, dk2, dv2, a->dout_dev, a->out_dev, a->lse_dev, a->q_dev, a->k_dev, a->v_dev,
                                     s, a->scratch, 0);
    TT_CUDA_CHECK(cudaDeviceSynchronize());
    bool same = same_bits_bf16(a->dq_dev, dq2, a->nq) && same_bits_bf16(a->dk_dev, dk2, a->nkv) &&
                same_bits_bf16(a->dv_dev, dv2, a->nkv);
    TT_EXPECT(same, "%s: backward twice gives the same bits", label);
    printf("  %-44s %s\n", "backward deterministic", same ? "yes" : "NO");
    cudaFree(dq2);
    cudaFree(dk2);
    cudaFree(dv2);
}

/* The device's out, lse (from the kernels just run on a) against the CPU reference over host_shape, then its
 * dq, dk, dv against the CPU backward given the device's own (bf16) out and lse, as the GPU backward is;
 * checks are named "<prefix>forward out", ...; dq and dk are relative to at least `floor`. */
static void expect_matches_cpu(const char *prefix, const attention_buffers *a, const tt_attention_shape *host_shape,
                               double floor) {
    char what[64];
    float *out = malloc(sizeof(float) * (size_t)a->nq), *lse = malloc(sizeof(float) * (size_t)a->rows);
    tt_cpu_attention_forward_f32(NULL, out, lse, a->q, a->k, a->v, host_shape);
    float *got_out = download_bf16(a->out_dev, a->nq), *got_lse = download_f32(a->lse_dev, a->rows);
    snprintf(what, sizeof what, "%sforward out", prefix);
    expect_close(what, got_out, out, a->nq, OUT_TOLERANCE);
    snprintf(what, sizeof what, "%sforward lse", prefix);
    expect_close_lse(what, got_lse, lse, a->rows);
    float *dq = malloc(sizeof(float) * (size_t)a->nq), *dk = malloc(sizeof(float) * (size_t)a->nkv),
          *dv = malloc(sizeof(float) * (size_t)a->nkv);
    tt_cpu_attention_backward_f32(NULL, dq, dk, dv, a->dout, got_out, got_lse, a->q, a->k, a->v, host_shape);
    float *g = download_bf16(a->dq_dev, a->nq);
    snprintf(what, sizeof what, "%sbackward dq", prefix);
    expect_close_floor(what, g, dq, a->nq, GRAD_TOLERANCE, floor);
    free(g);
    g = download_bf16(a->dk_dev, a->nkv);
    snprintf(what, sizeof what, "%sbackward dk", prefix);
    expect_close_floor(what, g, dk, a->nkv, GRAD_TOLERANCE, floor);
    free(g);
    snprintf(what, sizeof what, "%sbackward dv", prefix);
    expect_device_close(what, a->dv_dev, dv, a->nkv, GRAD_TOLERANCE);
    free(out);
    free(lse);
    free(got_out);
    free(got_lse);
    free(dq);
    free(dk);
    free(dv);
}

/* Flash forward + backward against the CPU reference. */
static void test_against_cpu(int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t hd) {
    const double floor = T == 1 ? 1.0 : 0.0; /* one token: dq = dk = 0 up to rounding */
    tt_attention_shape s = make_shape(B, T, Hq, Hkv, hd);
    printf("flash attention vs CPU: B %lld T %lld Hq %lld Hkv %lld hd %lld\n", (long long)B, (long long)T,
           (long long)Hq, (long long)Hkv, (long long)hd);
    TT_EXPECT(tt_cuda_flash_attention_supported(&s), "shape supported");
    attention_buffers a = make_buffers(&s);
    run_flash(&a, &s);
    expect_matches_cpu("", &a, &s, floor);
    expect_deterministic(&a, &s, "flash vs CPU");
    free_buffers(&a);
}

/* Flash against the simple GPU kernels at a shape too large for a quick CPU reference. */
static void test_against_simple(int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t hd) {
    tt_attention_shape s = make_shape(B, T, Hq, Hkv, hd);
    printf("flash attention vs simple GPU kernels: B %lld T %lld Hq %lld Hkv %lld hd %lld\n", (long long)B,
           (long long)T, (long long)Hq, (long long)Hkv, (long long)hd);
    attention_buffers a = make_buffers(&s);
    run_flash(&a, &s);

    tt_bf16 *out_ref = device_poisoned(a.nq), *dq_ref = device_poisoned(a.nq), *dk_ref = device_poisoned(a.nkv),
            *dv_ref = device_poisoned(a.nkv);
    float *lse_ref = device_poisoned_f32(a.rows), *scratch_ref;
    TT_CUDA_CHECK(cudaMalloc((void **)&scratch_ref, sizeof(float) * (size_t)a.rows));
    tt_cuda_attention_forward(out_ref, lse_ref, a.q_dev, a.k_dev, a.v_dev, &s, 0);
    /* the same saved out and lse on both sides */
    tt_cuda_attention_backward(dq_ref, dk_ref, dv_ref, a.dout_dev, a.out_dev, a.lse_dev, a.q_dev, a.k_dev, a.v_dev, &s,
                               scratch_ref, 0);
    TT_CUDA_CHECK(cudaDeviceSynchronize());

    const tt_bf16 *got[] = {a.out_dev, a.dq_dev, a.dk_dev, a.dv_dev};
    const tt_bf16 *want[] = {out_ref, dq_ref, dk_ref, dv_ref};
    const int64_t counts[] = {a.nq, a.nq, a.nkv, a.nkv};
    const char *names[] = {"forward out", "backward dq", "backward dk", "backward dv"};
    for (int i = 0; i < 4; i++) {
        float *x = download_bf16(got[i], counts[i]), *y = download_bf16(want[i], counts[i]);
        expect_close(names[i], x, y, counts[i], i == 0 ? OUT_TOLERANCE : GRAD_TOLERANCE);
        free(x);
        free(y);
    }
    float *x = download_f32(a.lse_dev, a.rows), *y = download_f32(lse_ref, a.rows);
    expect_close_lse("forward lse", x, y, a.rows);
    free(x);
    free(y);
    expect_deterministic(&a, &s, "flash vs simple");

    cudaFree(out_ref);
    cudaFree(dq_ref);
    cudaFree(dk_ref);
    cudaFree(dv_ref);
    cudaFree(lse_ref);
    cudaFree(scratch_ref);
    free_buffers(&a);
}

/* Packed documents: each sequence cut into documents of lengths[0], lengths[1], ... (cycling from lengths[b],
 * the last one cut at T); positions[B*T] count from 0 in each. */
static int32_t *packed_positions(int64_t B, int64_t T, const int64_t *lengths, int count) {
    int32_t *positions = malloc(sizeof(int32_t) * (size_t)(B * T));
    for (int64_t b = 0; b < B; b++) {
        int which = (int)(b % count);
        int64_t left = lengths[which];
        for (int64_t t = 0, k = 0; t < T; t++, k++) {
            if (left == 0) {
                which = (which + 1) % count;
                left = lengths[which];
                k = 0;
            }
            positions[b * T + t] = (int32_t)k;
            left--;
        }
    }
    return positions;
}

/* Flash and the simple kernels with packed documents against the CPU reference (each with its own forward's out
 * and lse in its backward's reference), and the flash backward twice: the same bits. */
static void test_packed_against_cpu(const char *layout, int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t hd,
                                    const int64_t *lengths, int count) {
    printf("packed documents (%s) vs CPU: B %lld T %lld Hq %lld Hkv %lld hd %lld\n", layout, (long long)B, (long long)T,
           (long long)Hq, (long long)Hkv, (long long)hd);
    int32_t *positions = packed_positions(B, T, lengths, count), *positions_dev;
    TT_CUDA_CHECK(cudaMalloc((void **)&positions_dev, sizeof(int32_t) * (size_t)(B * T)));
    TT_CUDA_CHECK(cudaMemcpy(positions_dev, positions, sizeof(int32_t) * (size_t)(B * T), cudaMemcpyHostToDevice));
    tt_attention_shape s = make_shape(B, T, Hq, Hkv, hd), host_shape;
    s.documents = true;
    host_shape = s;
    s.positions = positions_dev;
    host_shape.positions = positions;
    /* a document of one token has dq = dk = 0 up to rounding */
    const double floor = 1.0;
    attention_buffers a = make_buffers(&s);
    void *hopper_scratch = NULL;
    const size_t ordered_bytes = hopper_scratch_bytes(&s);
    TT_CUDA_CHECK(cudaMalloc(&hopper_scratch, ordered_bytes));
    /* flash, the simple kernels, then (head_dim 128) the Hopper ones with the ordered dQ and with the dQ kernel */
    const int kernels = tt_cuda_hopper_attention_supported(&s) ? 4 : 2;
    const bool wide = hd == 128; /* the ordered dQ is head_dim 128's */
    for (int kernel = 0; kernel < kernels; kernel++) {
        if (kernel == 2 && !wide) continue;
        if (kernel == 0) {
            run_flash(&a, &s);
        } else if (kernel >= 2) {
            /* outputs poisoned first: a row these kernels miss cannot pass on an earlier kernel's value */
            poison_outputs(&a);
            tt_cuda_hopper_attention_forward(a.out_dev, a.lse_dev, a.q_dev, a.k_dev, a.v_dev, &s, 0);
            if (kernel == 3) { /* the pipelined forward: the same bits */
                char label[96];
                snprintf(label, sizeof label, "packed documents (%s)", layout);
                expect_pipelined_forward_bits(&a, &s, label);
            }
            tt_cuda_hopper_attention_backward(a.dq_dev, a.dk_dev, a.dv_dev, a.dout_dev, a.out_dev, a.lse_dev, a.q_dev,
                                              a.k_dev, a.v_dev, &s, hopper_scratch, ordered_bytes, kernel == 2, 0);
            TT_CUDA_CHECK(cudaDeviceSynchronize());
            /* and again into fresh poisoned buffers: the same bits (the ordered schedule's turns included) */
            tt_bf16 *dq2 = device_poisoned(a.nq), *dk2 = device_poisoned(a.nkv), *dv2 = device_poisoned(a.nkv);
            tt_cuda_hopper_attention_backward(dq2, dk2, dv2, a.dout_dev, a.out_dev, a.lse_dev, a.q_dev, a.k_dev,
                                              a.v_dev, &s, hopper_scratch, ordered_bytes, kernel == 2, 0);
            TT_CUDA_CHECK(cudaDeviceSynchronize());
            TT_EXPECT(same_bits_bf16(a.dq_dev, dq2, a.nq) && same_bits_bf16(a.dk_dev, dk2, a.nkv) &&
                          same_bits_bf16(a.dv_dev, dv2, a.nkv),
                      "packed documents (%s): hopper backward (%s) twice gives the same bits", layout,
                      kernel == 2 ? "ordered dQ" : "dQ kernel");
            cudaFree(dq2);
            cudaFree(dk2);
            cudaFree(dv2);
            if (kernel == 3) { /* the pipelined backward: the same bits */
                tt_bf16 *dq3 = device_poisoned(a.nq), *dk3 = device_poisoned(a.nkv), *dv3 = device_poisoned(a.nkv);
                tt_cuda_hopper_attention_backward_pipelined(dq3, dk3, dv3, a.dout_dev, a.out_dev, a.lse_dev, a.q_dev,
                                                            a.k_dev, a.v_dev, &s, hopper_scratch, ordered_bytes, false,
                                                            0);
                TT_CUDA_CHECK(cudaDeviceSynchronize());
                char what[128];
                snprintf(what, sizeof what,
                         "packed documents (%s): the pipelined hopper backward gives the dQ kernel schedule's bits",
                         layout);
                expect_same_gradients(what, a.dq_dev, dq3, a.nq, a.dk_dev, dk3, a.dv_dev, dv3, a.nkv);
                /* the pipelined ordered dQ (head_dim 128): within bf16 of the dQ kernel's dq (another order), dk and
                 * dv the same bits, and twice the same bits */
                tt_bf16 *dq4 = wide ? device_poisoned(a.nq) : NULL;
                if (wide) {
                    TT_CUDA_CHECK(cudaMemset(dk3, 0xFF, sizeof(tt_bf16) * (size_t)a.nkv));
                    TT_CUDA_CHECK(cudaMemset(dv3, 0xFF, sizeof(tt_bf16) * (size_t)a.nkv));
                    tt_cuda_hopper_attention_backward_pipelined(dq3, dk3, dv3, a.dout_dev, a.out_dev, a.lse_dev,
                                                                a.q_dev, a.k_dev, a.v_dev, &s, hopper_scratch,
                                                                ordered_bytes, true, 0);
                    tt_cuda_hopper_attention_backward_pipelined(dq4, dk3, dv3, a.dout_dev, a.out_dev, a.lse_dev,
                                                                a.q_dev, a.k_dev, a.v_dev, &s, hopper_scratch,
                                                                ordered_bytes, true, 0);
                    TT_CUDA_CHECK(cudaDeviceSynchronize());
                    TT_EXPECT(same_bits_bf16(dq3, dq4, a.nq) && same_bits_bf16(a.dk_dev, dk3, a.nkv) &&
                                  same_bits_bf16(a.dv_dev, dv3, a.nkv),
                              "packed documents (%s): the pipelined ordered-dQ backward twice the same bits", layout);
                    float *x = download_bf16(dq3, a.nq), *y = download_bf16(a.dq_dev, a.nq);
                    expect_close_floor("pipelined ordered dQ: dq vs the dQ kernel's", x, y, a.nq, GRAD_TOLERANCE,
                                       floor);
                    free(x);
                    free(y);
                    cudaFree(dq4);
                }
                cudaFree(dq3);
                cudaFree(dk3);
                cudaFree(dv3);
            }
        } else {
            tt_cuda_attention_forward(a.out_dev, a.lse_dev, a.q_dev, a.k_dev, a.v_dev, &s, 0);
            tt_cuda_attention_backward(a.dq_dev, a.dk_dev, a.dv_dev, a.dout_dev, a.out_dev, a.lse_dev, a.q_dev, a.k_dev,
                                       a.v_dev, &s, (float *)a.scratch, 0);
            TT_CUDA_CHECK(cudaDeviceSynchronize());
        }
        expect_matches_cpu(kernel == 0   ? "flash "
                           : kernel == 1 ? "simple "
                           : kernel == 2 ? "hopper ordered dQ "
                                         : "hopper dQ kernel ",
                           &a, &host_shape, floor);
        if (kernel == 0) expect_deterministic(&a, &s, layout);
    }
    cudaFree(hopper_scratch);
    free_buffers(&a);
    free(positions);
    cudaFree(positions_dev);
}

/* The Hopper forward against the CPU reference (out, lse), then run again into fresh poisoned buffers: the same bits. */
static void test_hopper_against_cpu(int64_t B, int64_t T, int64_t Hq, int64_t Hkv) {
    tt_attention_shape s = make_shape(B, T, Hq, Hkv, 128);
    printf("hopper forward vs CPU: B %lld T %lld Hq %lld Hkv %lld hd 128\n", (long long)B, (long long)T, (long long)Hq,
           (long long)Hkv);
    TT_EXPECT(tt_cuda_hopper_attention_supported(&s), "shape supported");
    attention_buffers a = make_buffers(&s);
    tt_cuda_hopper_attention_forward(a.out_dev, a.lse_dev, a.q_dev, a.k_dev, a.v_dev, &s, 0);
    TT_CUDA_CHECK(cudaDeviceSynchronize());
    float *out = malloc(sizeof(float) * (size_t)a.nq), *lse = malloc(sizeof(float) * (size_t)a.rows);
    tt_cpu_attention_forward_f32(NULL, out, lse, a.q, a.k, a.v, &s);
    float *got_out = download_bf16(a.out_dev, a.nq), *got_lse = download_f32(a.lse_dev, a.rows);
    expect_close("hopper forward out", got_out, out, a.nq, OUT_TOLERANCE);
    expect_close_lse("hopper forward lse", got_lse, lse, a.rows);
    tt_bf16 *out2 = device_poisoned(a.nq);
    tt_cuda_hopper_attention_forward(out2, a.lse_dev, a.q_dev, a.k_dev, a.v_dev, &s, 0);
    TT_CUDA_CHECK(cudaDeviceSynchronize());
    TT_EXPECT(same_bits_bf16(a.out_dev, out2, a.nq), "hopper forward twice gives the same bits");
    /* the pipelined forward (TMA, producer warpgroup): the same bits as the cp.async one */
    float *lse2 = device_poisoned_f32(a.rows);
    TT_CUDA_CHECK(cudaMemset(out2, 0xFF, sizeof(tt_bf16) * (size_t)a.nq)); /* no row passes on the last run's value */
    tt_cuda_hopper_attention_forward_pipelined(out2, lse2, a.q_dev, a.k_dev, a.v_dev, &s, 0);
    TT_CUDA_CHECK(cudaDeviceSynchronize());
    TT_EXPECT(same_bits_bf16(a.out_dev, out2, a.nq), "pipelined hopper forward: the same out bits as the cp.async one");
    float *got_lse2 = download_f32(lse2, a.rows);
    TT_EXPECT(memcmp(got_lse2, got_lse, sizeof(float) * (size_t)a.rows) == 0,
              "pipelined hopper forward: the same lse bits as the cp.async one");
    free(got_lse2);
    cudaFree(lse2);
    cudaFree(out2);
    free(out);
    free(lse);
    free(got_out);
    free(got_lse);
    free_buffers(&a);
}

/* The Hopper forward and backward against the CPU reference (the backward given the device's own out and lse), and
 * the backward twice into fresh buffers: the same bits. */
static void test_hopper_backward_against_cpu(int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t hd) {
    const double floor = T == 1 ? 1.0 : 0.0;
    tt_attention_shape s = make_shape(B, T, Hq, Hkv, hd);
    printf("hopper forward + backward vs CPU: B %lld T %lld Hq %lld Hkv %lld hd %lld\n", (long long)B, (long long)T,
           (long long)Hq, (long long)Hkv, (long long)hd);
    attention_buffers a = make_buffers(&s);
    void *scratch;
    const size_t ordered_bytes = hopper_scratch_bytes(&s);
    TT_CUDA_CHECK(cudaMalloc(&scratch, ordered_bytes));
    /* dQ added in key order (head_dim 128), then dQ's own kernel */
    for (int ordered = hd == 128 ? 1 : 0; ordered >= 0; ordered--) {
        const size_t bytes = ordered ? ordered_bytes : tt_cuda_hopper_attention_backward_scratch_bytes(&s);
        poison_outputs(&a);
        tt_cuda_hopper_attention_forward(a.out_dev, a.lse_dev, a.q_dev, a.k_dev, a.v_dev, &s, 0);
        tt_cuda_hopper_attention_backward(a.dq_dev, a.dk_dev, a.dv_dev, a.dout_dev, a.out_dev, a.lse_dev, a.q_dev,
                                          a.k_dev, a.v_dev, &s, scratch, bytes, ordered, 0);
        TT_CUDA_CHECK(cudaDeviceSynchronize());
        expect_matches_cpu(ordered ? "hopper ordered dQ " : "hopper dQ kernel ", &a, &s, floor);
        tt_bf16 *dq2 = device_poisoned(a.nq), *dk2 = device_poisoned(a.nkv), *dv2 = device_poisoned(a.nkv);
        tt_cuda_hopper_attention_backward(dq2, dk2, dv2, a.dout_dev, a.out_dev, a.lse_dev, a.q_dev, a.k_dev, a.v_dev,
                                          &s, scratch, bytes, ordered, 0);
        TT_CUDA_CHECK(cudaDeviceSynchronize());
        TT_EXPECT(same_bits_bf16(a.dq_dev, dq2, a.nq) && same_bits_bf16(a.dk_dev, dk2, a.nkv) &&
                      same_bits_bf16(a.dv_dev, dv2, a.nkv),
                  "hopper backward (%s) twice gives the same bits", ordered ? "ordered dQ" : "dQ kernel");
        if (!ordered) { /* the pipelined kernels (TMA, producer warpgroup): the cp.async ones' bits */
            char label[32];
            snprintf(label, sizeof label, "hd %lld", (long long)hd);
            expect_pipelined_forward_bits(&a, &s, label);
            TT_CUDA_CHECK(cudaMemset(dq2, 0xFF, sizeof(tt_bf16) * (size_t)a.nq));
            TT_CUDA_CHECK(cudaMemset(dk2, 0xFF, sizeof(tt_bf16) * (size_t)a.nkv));
            TT_CUDA_CHECK(cudaMemset(dv2, 0xFF, sizeof(tt_bf16) * (size_t)a.nkv));
            tt_cuda_hopper_attention_backward_pipelined(dq2, dk2, dv2, a.dout_dev, a.out_dev, a.lse_dev, a.q_dev,
                                                        a.k_dev, a.v_dev, &s, scratch, ordered_bytes, false, 0);
            TT_CUDA_CHECK(cudaDeviceSynchronize());
            char what[96];
            snprintf(what, sizeof what, "hd %lld: the pipelined hopper backward gives the dQ kernel schedule's bits",
                     (long long)hd);
            expect_same_gradients(what, a.dq_dev, dq2, a.nq, a.dk_dev, dk2, a.dv_dev, dv2, a.nkv);
        }
        if (!ordered &&
            hd == 128) { /* the pipelined backward with the ordered dQ: against the CPU, twice the same bits */
            poison_outputs(&a);
            tt_cuda_hopper_attention_forward(a.out_dev, a.lse_dev, a.q_dev, a.k_dev, a.v_dev, &s, 0);
            tt_cuda_hopper_attention_backward_pipelined(a.dq_dev, a.dk_dev, a.dv_dev, a.dout_dev, a.out_dev, a.lse_dev,
                                                        a.q_dev, a.k_dev, a.v_dev, &s, scratch, ordered_bytes, true, 0);
            TT_CUDA_CHECK(cudaDeviceSynchronize());
            expect_matches_cpu("pipelined hopper ordered dQ ", &a, &s, floor);
            TT_CUDA_CHECK(cudaMemset(dq2, 0xFF, sizeof(tt_bf16) * (size_t)a.nq));
            tt_cuda_hopper_attention_backward_pipelined(dq2, dk2, dv2, a.dout_dev, a.out_dev, a.lse_dev, a.q_dev,
                                                        a.k_dev, a.v_dev, &s, scratch, ordered_bytes, true, 0);
            TT_CUDA_CHECK(cudaDeviceSynchronize());
            TT_EXPECT(same_bits_bf16(a.dq_dev, dq2, a.nq) && same_bits_bf16(a.dk_dev, dk2, a.nkv) &&
                          same_bits_bf16(a.dv_dev, dv2, a.nkv),
                      "pipelined hopper backward (ordered dQ) twice gives the same bits");
        }
        cudaFree(dq2);
        cudaFree(dk2);
        cudaFree(dv2);
    }
    cudaFree(scratch);
    free_buffers(&a);
}

/* The Hopper forward against the flash forward at a length too long for a quick CPU reference. */
static void test_hopper_against_flash(int64_t B, int64_t T, int64_t Hq, int64_t Hkv) {
    tt_attention_shape s = make_shape(B, T, Hq, Hkv, 128);
    printf("hopper forward vs flash forward: B %lld T %lld Hq %lld Hkv %lld hd 128\n", (long long)B, (long long)T,
           (long long)Hq, (long long)Hkv);
    attention_buffers a = make_buffers(&s);
    tt_bf16 *out_ref = device_poisoned(a.nq);
    float *lse_ref = device_poisoned_f32(a.rows);
    tt_cuda_flash_attention_forward(out_ref, lse_ref, a.q_dev, a.k_dev, a.v_dev, &s, 0);
    tt_cuda_hopper_attention_forward(a.out_dev, a.lse_dev, a.q_dev, a.k_dev, a.v_dev, &s, 0);
    TT_CUDA_CHECK(cudaDeviceSynchronize());
    float *x = download_bf16(a.out_dev, a.nq), *y = download_bf16(out_ref, a.nq);
    expect_close("hopper forward out vs flash", x, y, a.nq, OUT_TOLERANCE);
    free(x);
    free(y);
    x = download_f32(a.lse_dev, a.rows);
    y = download_f32(lse_ref, a.rows);
    expect_close_lse("hopper forward lse vs flash", x, y, a.rows);
    free(x);
    free(y);
    /* the backwards from the same (flash) out and lse */
    tt_bf16 *dq_ref = device_poisoned(a.nq), *dk_ref = device_poisoned(a.nkv), *dv_ref = device_poisoned(a.nkv);
    tt_cuda_flash_attention_backward(dq_ref, dk_ref, dv_ref, a.dout_dev, out_ref, lse_ref, a.q_dev, a.k_dev, a.v_dev,
                                     &s, a.scratch, 0);
    const size_t ordered_bytes = tt_cuda_hopper_attention_backward_ordered_scratch_bytes(&s);
    void *scratch;
    TT_CUDA_CHECK(cudaMalloc(&scratch, ordered_bytes));
    for (int ordered = 1; ordered >= 0; ordered--) {
        poison_outputs(&a);
        tt_cuda_hopper_attention_backward(a.dq_dev, a.dk_dev, a.dv_dev, a.dout_dev, out_ref, lse_ref, a.q_dev, a.k_dev,
                                          a.v_dev, &s, scratch, ordered_bytes, ordered, 0);
        TT_CUDA_CHECK(cudaDeviceSynchronize());
        const tt_bf16 *got[] = {a.dq_dev, a.dk_dev, a.dv_dev}, *want[] = {dq_ref, dk_ref, dv_ref};
        const int64_t counts[] = {a.nq, a.nkv, a.nkv};
        const char *names[2][3] = {
            {"hopper backward dq vs flash", "hopper backward dk vs flash", "hopper backward dv vs flash"},
            {"hopper ordered dQ: dq vs flash", "hopper ordered dQ: dk vs flash", "hopper ordered dQ: dv vs flash"}};
        for (int i = 0; i < 3; i++) {
            x = download_bf16(got[i], counts[i]);
            y = download_bf16(want[i], counts[i]);
            expect_close(names[ordered][i], x, y, counts[i], GRAD_TOLERANCE);
            free(x);
            free(y);
        }
    }
    cudaFree(scratch);
    cudaFree(dq_ref);
    cudaFree(dk_ref);
    cudaFree(dv_ref);
    cudaFree(out_ref);
    cudaFree(lse_ref);
    free_buffers(&a);
}

static int compare_floats(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

#define TIMED_RUNS 10
/* At 128k tokens and beyond (a backward takes seconds) --speed times 4 runs after one warm-up. */
#define LONG_TIMED_RUNS 4
static int timed_runs = TIMED_RUNS;

typedef struct timing {
    int64_t T;
    double forward_ms, backward_ms, forward_tflops, backward_tflops;
    double hopper_forward_ms, hopper_forward_tflops, hopper_backward_ms, hopper_backward_tflops;
    double ordered_backward_ms, ordered_backward_tflops;     /* the Hopper backward with dQ added in key order */
    double pipelined_forward_ms, pipelined_forward_tflops;   /* the Hopper forward with TMA and a producer */
    double pipelined_backward_ms, pipelined_backward_tflops; /* the Hopper backward with TMA and a producer */
    double pipelined_ordered_ms, pipelined_ordered_tflops;   /* ...and dQ added in key order by a writer */
} timing;

/* What median_ms times. */
typedef enum timed_call {
    FLASH_FORWARD,
    FLASH_BACKWARD,
    HOPPER_FORWARD,
    HOPPER_FORWARD_PIPELINED,
    HOPPER_BACKWARD_PIPELINED,
    HOPPER_BACKWARD_PIPELINED_ORDERED,
    HOPPER_BACKWARD,         /* dQ's own kernel */
    HOPPER_BACKWARD_ORDERED, /* dQ added in key order */
} timed_call;

/* Median milliseconds of timed_runs calls after two warm-ups (one for LONG_TIMED_RUNS); hopper_scratch
 * (scratch_bytes) is the Hopper backward's. */
static double median_ms(attention_buffers *a, const tt_attention_shape *s, timed_call call, void *hopper_scratch,
                        size_t scratch_bytes) {
    cudaEvent_t start, stop;
    TT_CUDA_CHECK(cudaEventCreate(&start));
    TT_CUDA_CHECK(cudaEventCreate(&stop));
    float ms[TIMED_RUNS];
    for (int run = timed_runs < TIMED_RUNS ? -1 : -2; run < timed_runs; run++) { /* warm-up runs below 0 */
        TT_CUDA_CHECK(cudaEventRecord(start, 0));
        if (call == HOPPER_BACKWARD || call == HOPPER_BACKWARD_ORDERED)
            tt_cuda_hopper_attention_backward(a->dq_dev, a->dk_dev, a->dv_dev, a->dout_dev, a->out_dev, a->lse_dev,
                                              a->q_dev, a->k_dev, a->v_dev, s, hopper_scratch, scratch_bytes,
                                              call == HOPPER_BACKWARD_ORDERED, 0);
        else if (call == HOPPER_BACKWARD_PIPELINED || call == HOPPER_BACKWARD_PIPELINED_ORDERED)
            tt_cuda_hopper_attention_backward_pipelined(a->dq_dev, a->dk_dev, a->dv_dev, a->dout_dev, a->out_dev,
                                                        a->lse_dev, a->q_dev, a->k_dev, a->v_dev, s, hopper_scratch,
                                                        scratch_bytes, call == HOPPER_BACKWARD_PIPELINED_ORDERED, 0);
        else if (call == FLASH_BACKWARD)
            tt_cuda_flash_attention_backward(a->dq_dev, a->dk_dev, a->dv_dev, a->dout_dev, a->out_dev, a->lse_dev,
                                             a->q_dev, a->k_dev, a->v_dev, s, a->scratch, 0);
        else if (call == HOPPER_FORWARD)
            tt_cuda_hopper_attention_forward(a->out_dev, a->lse_dev, a->q_dev, a->k_dev, a->v_dev, s, 0);
        else if (call == HOPPER_FORWARD_PIPELINED)
            tt_cuda_hopper_attention_forward_pipelined(a->out_dev, a->lse_dev, a->q_dev, a->k_dev, a->v_dev, s, 0);
        else tt_cuda_flash_attention_forward(a->out_dev, a->lse_dev, a->q_dev, a->k_dev, a->v_dev, s, 0);
        TT_CUDA_CHECK(cudaEventRecord(stop, 0));
        TT_CUDA_CHECK(cudaEventSynchronize(stop));
        if (run >= 0) TT_CUDA_CHECK(cudaEventElapsedTime(&ms[run], start, stop));
    }
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    qsort(ms, (size_t)timed_runs, sizeof(float), compare_floats);
    return 0.5 * (ms[timed_runs / 2 - 1] + ms[timed_runs / 2]);
}

static timing time_flash(int64_t T) {
    const int64_t Hq = 16, Hkv = 8, hd = 128;
    tt_attention_shape s = make_shape(1, T, Hq, Hkv, hd);
    attention_buffers a = make_buffers(&s);
    timing r = {.T = T};
    void *hopper_scratch;
    const size_t hopper_bytes = hopper_scratch_bytes(&s);
    TT_CUDA_CHECK(cudaMalloc(&hopper_scratch, hopper_bytes));
    r.hopper_forward_ms = median_ms(&a, &s, HOPPER_FORWARD, hopper_scratch, hopper_bytes);
    r.pipelined_forward_ms = median_ms(&a, &s, HOPPER_FORWARD_PIPELINED, hopper_scratch, hopper_bytes);
    r.pipelined_backward_ms = median_ms(&a, &s, HOPPER_BACKWARD_PIPELINED, hopper_scratch, hopper_bytes);
    r.pipelined_ordered_ms = median_ms(&a, &s, HOPPER_BACKWARD_PIPELINED_ORDERED, hopper_scratch, hopper_bytes);
    r.hopper_backward_ms = median_ms(&a, &s, HOPPER_BACKWARD, hopper_scratch, hopper_bytes);
    r.ordered_backward_ms = median_ms(&a, &s, HOPPER_BACKWARD_ORDERED, hopper_scratch, hopper_bytes);
    r.forward_ms = median_ms(&a, &s, FLASH_FORWARD, hopper_scratch, hopper_bytes);
    r.backward_ms = median_ms(&a, &s, FLASH_BACKWARD, hopper_scratch, hopper_bytes);
    cudaFree(hopper_scratch);
    /* causal: half of the T x T scores; two GEMMs of 2 * hd FLOPs per score; backward 2.5x */
    const double forward_flops = 2.0 * 2.0 * (double)T * (double)T / 2.0 * (double)hd * (double)Hq;
    r.forward_tflops = forward_flops / (r.forward_ms * 1e-3) / 1e12;
    r.backward_tflops = 2.5 * forward_flops / (r.backward_ms * 1e-3) / 1e12;
    r.hopper_forward_tflops = forward_flops / (r.hopper_forward_ms * 1e-3) / 1e12;
    r.hopper_backward_tflops = 2.5 * forward_flops / (r.hopper_backward_ms * 1e-3) / 1e12;
    r.ordered_backward_tflops = 2.5 * forward_flops / (r.ordered_backward_ms * 1e-3) / 1e12;
    r.pipelined_forward_tflops = forward_flops / (r.pipelined_forward_ms * 1e-3) / 1e12;
    r.pipelined_backward_tflops = 2.5 * forward_flops / (r.pipelined_backward_ms * 1e-3) / 1e12;
    r.pipelined_ordered_tflops = 2.5 * forward_flops / (r.pipelined_ordered_ms * 1e-3) / 1e12;
    TT_CUDA_CHECK(cudaGetLastError());
    float *check = download_bf16(a.dq_dev, a.nq); /* the timed runs produced finite values */
    bool finite = true;
    for (int64_t i = 0; i < a.nq && finite; i++) finite = isfinite(check[i]);
    TT_EXPECT(finite, "T %lld: dq finite after the timed runs", (long long)T);
    free(check);
    printf("timing T %6lld: forward %8.3f ms %6.1f TFLOP/s, backward %8.3f ms %6.1f TFLOP/s\n", (long long)T,
           r.forward_ms, r.forward_tflops, r.backward_ms, r.backward_tflops);
    free_buffers(&a);
    return r;
}

/* The wgmma kernels alone at one long shape (B 1, Hkv 8, head_dim hd, causal): the pipelined forward and both
 * pipelined backward schedules (dQ kernel; ordered dQ at head_dim 128) beside the cp.async kernels, TFLOP/s, median
 * of TIMED_RUNS after two warm-ups (LONG_TIMED_RUNS after one from 128k tokens), on device buffers of a repeated
 * random block (no CPU reference at these lengths); the outputs checked finite. */
static void time_hopper_at(int64_t T, int64_t Hq, int64_t hd) {
    tt_attention_shape s = make_shape(1, T, Hq, 8, hd);
    const int64_t nq = T * Hq * hd, nkv = T * 8 * hd, rows = T * Hq;
    attention_buffers a = {0};
    a.nq = nq;
    a.nkv = nkv;
    a.rows = rows;
    a.q_dev = device_random_repeated(nq, 2.0f);
    a.k_dev = device_random_repeated(nkv, 2.0f);
    a.v_dev = device_random_repeated(nkv, 1.0f);
    a.dout_dev = device_random_repeated(nq, 1.0f);
    a.out_dev = device_poisoned(nq);
    a.dq_dev = device_poisoned(nq);
    a.dk_dev = device_poisoned(nkv);
    a.dv_dev = device_poisoned(nkv);
    a.lse_dev = device_poisoned_f32(rows);
    void *scratch;
    const size_t scratch_bytes = hopper_scratch_bytes(&s);
    TT_CUDA_CHECK(cudaMalloc(&scratch, scratch_bytes));
    timed_runs = T >= 131072 ? LONG_TIMED_RUNS : TIMED_RUNS;
    const double forward_ms = median_ms(&a, &s, HOPPER_FORWARD, scratch, scratch_bytes);
    const double backward_ms = median_ms(&a, &s, HOPPER_BACKWARD, scratch, scratch_bytes);
    const double pipelined_forward_ms = median_ms(&a, &s, HOPPER_FORWARD_PIPELINED, scratch, scratch_bytes);
    const double pipelined_backward_ms = median_ms(&a, &s, HOPPER_BACKWARD_PIPELINED, scratch, scratch_bytes);
    const double ordered_ms =
        hd == 128 ? median_ms(&a, &s, HOPPER_BACKWARD_PIPELINED_ORDERED, scratch, scratch_bytes) : NAN;
    const double forward_flops = 2.0 * 2.0 * (double)T * (double)T / 2.0 * (double)hd * (double)Hq;
    float *check = download_bf16(a.dq_dev, nq);
    bool finite = true;
    for (int64_t i = 0; i < nq && finite; i++) finite = isfinite(check[i]);
    free(check);
    TT_EXPECT(finite, "T %lld Hq %lld: dq finite after the timed runs", (long long)T, (long long)Hq);
#define FORWARD_TFLOPS(ms) (forward_flops / ((ms)*1e-3) / 1e12)
#define BACKWARD_TFLOPS(ms) (2.5 * forward_flops / ((ms)*1e-3) / 1e12)
    char ordered[96] = "backward (ordered dQ) not at this head_dim"; /* head_dim 128's schedule only */
    if (hd == 128)
        snprintf(ordered, sizeof ordered, "backward (ordered dQ) %9.3f ms %6.1f TFLOP/s", ordered_ms,
                 BACKWARD_TFLOPS(ordered_ms));
    printf("pipelined T %7lld Hq %2lld Hkv 8 hd %3lld: forward %9.3f ms %6.1f TFLOP/s, backward (dQ kernel) %9.3f ms "
           "%6.1f TFLOP/s, %s\n",
           (long long)T, (long long)Hq, (long long)hd, pipelined_forward_ms, FORWARD_TFLOPS(pipelined_forward_ms),
           pipelined_backward_ms, BACKWARD_TFLOPS(pipelined_backward_ms), ordered);
    printf("cp.async  T %7lld Hq %2lld Hkv 8 hd %3lld: forward %9.3f ms %6.1f TFLOP/s, backward (dQ kernel) %9.3f ms "
           "%6.1f TFLOP/s\n",
           (long long)T, (long long)Hq, (long long)hd, forward_ms, FORWARD_TFLOPS(forward_ms), backward_ms,
           BACKWARD_TFLOPS(backward_ms));
#undef FORWARD_TFLOPS
#undef BACKWARD_TFLOPS
    cudaFree(scratch);
    cudaFree(a.q_dev);
    cudaFree(a.k_dev);
    cudaFree(a.v_dev);
    cudaFree(a.dout_dev);
    cudaFree(a.out_dev);
    cudaFree(a.dq_dev);
    cudaFree(a.dk_dev);
    cudaFree(a.dv_dev);
    cudaFree(a.lse_dev);
}

int main(int argc, char **argv) {
    bool quick = false;       /* `make test-gpu` passes the source dir first */
    const char *speed = NULL; /* --speed T:Hq[:hd],...: only the wgmma kernels' speed at those shapes */
    for (int i = 1; i < argc; i++) {
        quick = quick || strcmp(argv[i], "--quick") == 0;
        if (strcmp(argv[i], "--speed") == 0 && i + 1 < argc) speed = argv[++i];
    }
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        fprintf(stderr, "test_gpu_attention: no CUDA device; run it on a machine with a GPU\n");
        return 1;
    }
    tt_rng_seed(&gpu_test_rng, 2027);
    if (speed) {
        for (const char *at = speed; *at;) {
            char *end;
            const long long T = strtoll(at, &end, 10);
            const long long Hq = *end == ':' ? strtoll(end + 1, &end, 10) : 0;
            const long long hd = *end == ':' ? strtoll(end + 1, &end, 10) : 128;
            if (T <= 0 || Hq <= 0 || Hq % 8 != 0 || (hd != 64 && hd != 128) || (*end != ',' && *end != '\0')) {
                fprintf(stderr,
                        "test_gpu_attention: --speed takes T:Hq[:hd] shapes, Hq a multiple of 8, hd 64 or 128 "
                        "(default 128; e.g. 16384:16,262144:32,65536:32:64); got '%s'\n",
                        speed);
                return 2;
            }
            time_hopper_at(T, Hq, hd);
            at = *end == ',' ? end + 1 : end;
        }
        return tt_test_summary("gpu_attention --speed");
    }

    tt_attention_shape window = make_shape(1, 64, 2, 1, 64), odd_dim = make_shape(1, 64, 2, 1, 96);
    window.sliding_window = 16;
    TT_EXPECT(!tt_cuda_flash_attention_supported(&window), "sliding window is not supported");
    TT_EXPECT(!tt_cuda_flash_attention_supported(&odd_dim), "head_dim 96 is not supported");

    test_against_cpu(2, 67, 4, 2, 64);
    test_against_cpu(1, 200, 8, 2, 128);
    test_against_cpu(1, 513, 2, 1, 128);
    test_against_cpu(2, 128, 4, 4, 64);
    test_against_cpu(1, 1, 2, 1, 64); /* a single token */
    test_against_cpu(3, 17, 2, 1, 128);
    test_against_simple(1, 2048, 16, 8, 128);

    const int64_t one[] = {1 << 30}, short_docs[] = {3, 7, 1, 12, 5}, in_tiles[] = {70, 90, 100}, ones[] = {1},
                  long_short[] = {500, 13, 1};
    test_packed_against_cpu("one document", 1, 200, 4, 2, 128, one, 1);
    test_packed_against_cpu("many short documents", 2, 300, 4, 2, 64, short_docs, 5);
    test_packed_against_cpu("boundaries inside tiles", 2, 260, 8, 2, 128, in_tiles, 3);
    test_packed_against_cpu("documents of one token", 1, 67, 2, 1, 64, ones, 1);
    test_packed_against_cpu("a long document, then short ones", 3, 513, 8, 2, 128, long_short, 3);
    /* the Hopper kernels' tiles (128 queries, 128 keys forward; 64-row steps backward) cut by documents */
    const int64_t across_blocks[] = {700, 300, 129, 1, 1000}, hopper_short[] = {3, 7, 1, 12, 5, 200};
    test_packed_against_cpu("documents across the Hopper tiles", 2, 2048, 4, 2, 128, across_blocks, 5);
    test_packed_against_cpu("many short documents, head_dim 128", 2, 300, 4, 2, 128, hopper_short, 6);
    test_packed_against_cpu("documents of one token, head_dim 128", 1, 67, 2, 1, 128, ones, 1);

    test_hopper_against_cpu(2, 67, 4, 2);
    test_hopper_against_cpu(1, 200, 8, 2);
    test_hopper_against_cpu(1, 513, 2, 1);
    test_hopper_against_cpu(3, 17, 2, 1);
    test_hopper_against_cpu(1, 1, 2, 1);
    test_hopper_against_cpu(1, 256, 2, 2);
    test_hopper_backward_against_cpu(2, 67, 4, 2, 128);
    test_hopper_backward_against_cpu(1, 200, 8, 2, 128);
    test_hopper_backward_against_cpu(1, 513, 2, 1, 128);
    test_hopper_backward_against_cpu(1, 1, 2, 1, 128);
    test_hopper_backward_against_cpu(2, 67, 4, 2, 64); /* head_dim 64: the same kernels, one 64-column half */
    test_hopper_backward_against_cpu(1, 513, 4, 1, 64);
    test_hopper_backward_against_cpu(1, 1, 2, 1, 64);
    test_hopper_against_flash(1, 2048, 16, 8);
    test_hopper_against_flash(2, 1000, 4, 1);

    const int64_t lengths[] = {4096, 16384, 65536};
    const int count = quick ? 2 : 3;
    timing results[3];
    for (int i = 0; i < count; i++) results[i] = time_flash(lengths[i]);
    printf("\nflash attention, B 1, Hq 16, Hkv 8, hd 128, causal (median of %d runs)\n", TIMED_RUNS);
    printf("%8s %12s %12s %12s %12s %14s %14s %14s %14s %15s %15s %14s %15s %14s %15s\n", "T", "fwd ms", "fwd TFLOP/s",
           "bwd ms", "bwd TFLOP/s", "hopper fwd ms", "hopper TFLOP/s", "hopper bwd ms", "hopper TFLOP/s",
           "ordered bwd ms", "ordered TFLOP/s", "pipe fwd ms", "pipe TFLOP/s", "pipe bwd ms", "pipe TFLOP/s");
    for (int i = 0; i < count; i++)
        printf(
            "%8lld %12.3f %12.1f %12.3f %12.1f %14.3f %14.1f %14.3f %14.1f %15.3f %15.1f %14.3f %15.1f %14.3f %15.1f\n",
            (long long)results[i].T, results[i].forward_ms, results[i].forward_tflops, results[i].backward_ms,
            results[i].backward_tflops, results[i].hopper_forward_ms, results[i].hopper_forward_tflops,
            results[i].hopper_backward_ms, results[i].hopper_backward_tflops, results[i].ordered_backward_ms,
            results[i].ordered_backward_tflops, results[i].pipelined_forward_ms, results[i].pipelined_forward_tflops,
            results[i].pipelined_backward_ms, results[i].pipelined_backward_tflops);
    printf("\npipelined (TMA, producer warpgroup) backward: dQ kernel / ordered dQ (TFLOP/s)\n");
    for (int i = 0; i < count; i++)
        printf("%8lld %12.1f %12.1f\n", (long long)results[i].T, results[i].pipelined_backward_tflops,
               results[i].pipelined_ordered_tflops);
    return tt_test_summary("gpu_attention");
}
