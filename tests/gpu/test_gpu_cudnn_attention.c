/* cuDNN fused causal grouped-query attention (src/ops/cuda/attention_cudnn.c) against the CPU
 * reference, then its speed.
 *
 * Correctness: fresh random bf16-rounded inputs, NaN-poisoned outputs; forward out and lse, and
 * backward dq, dk, dv (from the CPU's bf16-rounded out and its lse, so both sides see the same
 * inputs) must agree within bf16 bounds (max |a-b| / max |b|). Each shape runs with the default
 * backward and with the deterministic one; a second backward is compared bit for bit, which
 * fails the test only when the deterministic backward was asked for and granted.
 * Also Gemma's shapes: head_dim 256, a sliding window (whole, and over key chunks), soft-capping.
 * Speed: B=1, Hq=16, Hkv=8, hd=128 at T = 4096, 16384, 65536 (--quick: not 65536), and Gemma 3 4B's attention at 16k
 * (Hq 8, Hkv 4, hd 256) causal and with its 1024-key window, median of 10 timed calls after warm-up, in TFLOP/s of
 * the visible pairs' FLOPs (forward 2*2*pairs*hd*Hq with pairs T*T/2 causal, about window*T with a window;
 * backward 2.5x that).
 *
 * Usage: test_gpu_cudnn_attention [--quick] [--speed T:GiB[:lanes[:Hq[:hd[:window]]]][,...]]. --speed times only the
 * listed lengths, each with the deterministic backward under that dP limit (T:0 times cuDNN's atomic
 * backward), with that many head groups at once (default 1), that many query heads (default 16; Hkv 8, or Hq/2
 * below 16), that head_dim (default 128) and sliding window (default 0: causal), and skips the checks. Exit status 0
 * when every check passed. */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "core/rng.h"
#include "ops/cpu/ops_cpu.h"
#include "ops/cuda/attention_cudnn.h"
#include "ops/cuda/cuda_check.h"
#include "gpu/gpu_test_util.h"
#include "test_util.h"

#define BF16_TOLERANCE 1e-2 /* a few bf16 ulps (2^-8 = 3.9e-3) of the largest value */
#define LSE_TOLERANCE 1e-3
#define TIMED_CALLS 10

static void *device_workspace(size_t bytes) {
    void *workspace = NULL;
    if (bytes) TT_CUDA_CHECK(cudaMalloc(&workspace, bytes));
    return workspace;
}

/* Synchronizes and names the call when the device reported an error. */
static void synchronize(const char *after) {
    cudaError_t status = cudaDeviceSynchronize();
    if (status == cudaSuccess) status = cudaGetLastError();
    if (status != cudaSuccess) {
        fprintf(stderr, "test_gpu_cudnn_attention: CUDA error after %s: %s\n", after, cudaGetErrorString(status));
        exit(2);
    }
}

/* The sliding window and soft-capping of the shapes made next (0: none; Gemma's layers set them). */
static int64_t current_window;
static double current_softcap;

static tt_attention_shape attention_shape(int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t hd) {
    return (tt_attention_shape){.batch = B,
                                .seq_len = T,
                                .num_heads = Hq,
                                .num_kv_heads = Hkv,
                                .head_dim = hd,
                                .scale = 1.0 / sqrt((double)hd),
                                .sliding_window = current_window,
                                .softcap = current_softcap};
}

/* Query-key pairs a causal query sees, within the window when there is one. */
static double visible_pairs(int64_t T, int64_t window) {
    if (window <= 0 || window >= T) return (double)T * (double)T / 2.0;
    return (double)window * (double)T - (double)window * (double)(window - 1) / 2.0;
}

/* dP bytes the deterministic backward may keep per call, for the plans created next (small values slice and
 * chunk small shapes). */
static size_t current_dp_limit = (size_t)1 << 30;

static tt_cudnn_attention *create_or_report(const tt_attention_shape *shape, int deterministic) {
    char why[2048];
    tt_cudnn_attention *a = tt_cudnn_attention_create(shape, deterministic, current_dp_limit, why, sizeof why);
    TT_EXPECT(a != NULL, "tt_cudnn_attention_create (%s backward) returned NULL: %s",
              deterministic ? "deterministic" : "default", why);
    if (a) printf("  %s\n", tt_cudnn_attention_describe(a));
    return a;
}

static void test_attention(int64_t B, int64_t T, int64_t Hq, int64_t Hkv, int64_t hd, int deterministic) {
    tt_attention_shape shape = attention_shape(B, T, Hq, Hkv, hd);
    printf("B=%lld T=%lld Hq=%lld Hkv=%lld hd=%lld window %lld softcap %g, %s backward requested\n", (long long)B,
           (long long)T, (long long)Hq, (long long)Hkv, (long long)hd, (long long)current_window, current_softcap,
           deterministic ? "deterministic" : "default");
    tt_cudnn_attention *a = create_or_report(&shape, deterministic);
    if (!a) return;
    const int64_t nq = B * T * Hq * hd, nkv = B * T * Hkv * hd, rows = B * Hq * T;
    /* room for every head group at once: the second backward below runs them all in parallel lanes */
    const size_t one_lane = tt_cudnn_attention_workspace_bytes(a);
    const size_t all_lanes = one_lane + (size_t)(TT_CUDNN_ATTENTION_MAX_LANES - 1) * tt_cudnn_attention_lane_bytes(a);
    void *workspace = device_workspace(all_lanes);

    tt_bf16 *q_dev, *k_dev, *v_dev, *dout_dev;
    float *q = random_bf16(nq, 2.0f, &q_dev), *k = random_bf16(nkv, 2.0f, &k_dev), *v = random_bf16(nkv, 1.0f, &v_dev);
    float *dout = random_bf16(nq, 1.0f, &dout_dev);
    tt_bf16 *out_dev = device_poisoned(nq);
    float *lse_dev = device_poisoned_f32(rows);
    tt_cudnn_attention_forward(a, out_dev, lse_dev, q_dev, k_dev, v_dev, workspace, 0);
    synchronize("tt_cudnn_attention_forward");

    float *out = malloc(sizeof(float) * (size_t)nq), *lse = malloc(sizeof(float) * (size_t)rows);
    tt_cpu_attention_forward_f32(NULL, out, lse, q, k, v, &shape);
    expect_device_close("forward out", out_dev, out, nq, BF16_TOLERANCE);
    float *g = download_f32(lse_dev, rows);
    expect_close("forward lse", g, lse, rows, LSE_TOLERANCE);
    free(g);

    /* the backward reads the CPU's (bf16-rounded) out and lse, as the CPU backward does */
    tt_bf16 *same_out_dev = upload_as_bf16(out, nq);
    float *same_lse_dev = upload_f32(lse, rows);
    tt_bf16 *dq_dev = device_poisoned(nq), *dk_dev = device_poisoned(nkv), *dv_dev = device_poisoned(nkv);
    tt_cudnn_attention_backward(a, dq_dev, dk_dev, dv_dev, dout_dev, same_out_dev, same_lse_dev, q_dev, k_dev, v_dev,
                                workspace, one_lane, NULL, 0, 0);
    synchronize("tt_cudnn_attention_backward");
    expect_attention_backward_close("backward", dq_dev, dk_dev, dv_dev, dout, out, lse, q, k, v, &shape,
                                    2 * BF16_TOLERANCE);

    /* run again into fresh poisoned buffers, the head groups in as many lanes as they have (in the
     * workspace, then in spare memory at an unaligned address): same bits? */
    tt_bf16 *dq2_dev = device_poisoned(nq), *dk2_dev = device_poisoned(nkv), *dv2_dev = device_poisoned(nkv);
    tt_cudnn_attention_backward(a, dq2_dev, dk2_dev, dv2_dev, dout_dev, same_out_dev, same_lse_dev, q_dev, k_dev, v_dev,
                                workspace, all_lanes, NULL, 0, 0);
    synchronize("second tt_cudnn_attention_backward");
    bool same = same_bits_bf16(dq_dev, dq2_dev, nq) && same_bits_bf16(dk_dev, dk2_dev, nkv) &&
                same_bits_bf16(dv_dev, dv2_dev, nkv);
    const size_t spare_bytes = all_lanes - one_lane + 512;
    char *spare = device_workspace(spare_bytes);
    tt_bf16 *dq3_dev = device_poisoned(nq), *dk3_dev = device_poisoned(nkv), *dv3_dev = device_poisoned(nkv);
    tt_cudnn_attention_backward(a, dq3_dev, dk3_dev, dv3_dev, dout_dev, same_out_dev, same_lse_dev, q_dev, k_dev, v_dev,
                                workspace, one_lane, spare + 40, spare_bytes - 40, 0);
    synchronize("third tt_cudnn_attention_backward (spare lanes)");
    same = same && same_bits_bf16(dq_dev, dq3_dev, nq) && same_bits_bf16(dk_dev, dk3_dev, nkv) &&
           same_bits_bf16(dv_dev, dv3_dev, nkv);
    const int granted = tt_cudnn_attention_backward_is_deterministic(a);
    printf("  backward three times (1 lane, %d lanes, 1 + spare lanes): %s (deterministic %s, %s)\n",
           tt_cudnn_attention_lanes_for(a, all_lanes), same ? "same bits" : "DIFFERENT bits",
           deterministic ? "requested" : "not requested", granted ? "granted" : "not granted");
    if (deterministic && granted) TT_EXPECT(same, "deterministic backward gave different bits on a second run");

    cudaFree(spare);
    cudaFree(dq3_dev);
    cudaFree(dk3_dev);
    cudaFree(dv3_dev);
    cudaFree(dq2_dev);
    cudaFree(dk2_dev);
    cudaFree(dv2_dev);
    cudaFree(dq_dev);
    cudaFree(dk_dev);
    cudaFree(dv_dev);
    cudaFree(same_out_dev);
    cudaFree(same_lse_dev);
    cudaFree(out_dev);
    cudaFree(lse_dev);
    cudaFree(q_dev);
    cudaFree(k_dev);
    cudaFree(v_dev);
    cudaFree(dout_dev);
    cudaFree(workspace);
    free(q);
    free(k);
    free(v);
    free(dout);
    free(out);
    free(lse);
    tt_cudnn_attention_destroy(a);
}

/* ------------------------------------------------------------------------------------------- */

typedef struct timing_row {
    int64_t T, Hq, hd, window;
    int deterministic;
    size_t dp_limit;
    int lanes;
    bool ran;
    char note[160];
    double forward_ms, backward_ms, forward_tflops, backward_tflops;
} timing_row;

static int compare_doubles(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct timing_buffers {
    tt_cudnn_attention *a;
    tt_bf16 *q, *k, *v, *out, *dout, *dq, *dk, *dv;
    float *lse;
    void *workspace;
    size_t workspace_bytes;
} timing_buffers;

static void call_forward(timing_buffers *b) {
    tt_cudnn_attention_forward(b->a, b->out, b->lse, b->q, b->k, b->v, b->workspace, 0);
}

static void call_backward(timing_buffers *b) {
    tt_cudnn_attention_backward(b->a, b->dq, b->dk, b->dv, b->dout, b->out, b->lse, b->q, b->k, b->v, b->workspace,
                                b->workspace_bytes, NULL, 0, 0);
}

/* Median milliseconds of TIMED_CALLS calls, after two warm-up calls. */
static double median_ms(void (*call)(timing_buffers *), timing_buffers *b, const char *what) {
    call(b);
    call(b);
    synchronize(what);
    cudaEvent_t start, stop;
    TT_CUDA_CHECK(cudaEventCreate(&start));
    TT_CUDA_CHECK(cudaEventCreate(&stop));
    double ms[TIMED_CALLS];
    for (int i = 0; i < TIMED_CALLS; i++) {
        TT_CUDA_CHECK(cudaEventRecord(start, 0));
        call(b);
        TT_CUDA_CHECK(cudaEventRecord(stop, 0));
        TT_CUDA_CHECK(cudaEventSynchronize(stop));
        float elapsed = 0;
        TT_CUDA_CHECK(cudaEventElapsedTime(&elapsed, start, stop));
        ms[i] = elapsed;
    }
    synchronize(what);
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    qsort(ms, TIMED_CALLS, sizeof(double), compare_doubles);
    return 0.5 * (ms[TIMED_CALLS / 2 - 1] + ms[TIMED_CALLS / 2]);
}

static void set_dp_limit(size_t bytes) { current_dp_limit = bytes; }

static void time_attention(int64_t T, int64_t Hq, int64_t hd, int deterministic, int lanes, timing_row *row) {
    const int64_t B = 1, Hkv = Hq >= 16 ? 8 : Hq / 2;
    tt_attention_shape shape = attention_shape(B, T, Hq, Hkv, hd);
    *row = (timing_row){.T = T,
                        .Hq = Hq,
                        .hd = hd,
                        .window = current_window,
                        .deterministic = deterministic,
                        .dp_limit = current_dp_limit};
    printf("timing T=%lld Hq=%lld hd=%lld window %lld, %s backward\n", (long long)T, (long long)Hq, (long long)hd,
           (long long)current_window, deterministic ? "deterministic" : "default");
    char why[2048];
    tt_cudnn_attention *a = tt_cudnn_attention_create(&shape, deterministic, current_dp_limit, why, sizeof why);
    if (!a) {
        printf("  create failed: %s\n", why);
        snprintf(row->note, sizeof row->note, "create failed (reason above)");
        /* the deterministic backward refuses lengths whose dP does not fit its limit (64k): by design */
        TT_EXPECT(deterministic && strstr(why, "over the") != NULL, "timing T=%lld: create failed: %s", (long long)T,
                  why);
        return;
    }
    printf("  %s\n", tt_cudnn_attention_describe(a));
    const int64_t nq = B * T * Hq * hd, nkv = B * T * Hkv * hd, rows = B * Hq * T;
    const size_t workspace_bytes =
        tt_cudnn_attention_workspace_bytes(a) + (size_t)(lanes - 1) * tt_cudnn_attention_lane_bytes(a);
    row->lanes = tt_cudnn_attention_lanes_for(a, workspace_bytes);
    size_t free_bytes = 0, total_bytes = 0;
    TT_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    const size_t buffer_bytes = (size_t)(4 * nq + 4 * nkv) * sizeof(tt_bf16) + (size_t)rows * sizeof(float);
    if (workspace_bytes + buffer_bytes + ((size_t)1 << 30) > free_bytes) {
        char need[32], have[32];
        snprintf(row->note, sizeof row->note, "skipped: workspace %s, %s free",
                 tt_format_bytes(workspace_bytes, need, sizeof need), tt_format_bytes(free_bytes, have, sizeof have));
        printf("  %s\n", row->note);
        tt_cudnn_attention_destroy(a);
        return;
    }
    timing_buffers b = {.a = a};
    b.q = device_random_repeated(nq, 2.0f);
    b.k = device_random_repeated(nkv, 2.0f);
    b.v = device_random_repeated(nkv, 1.0f);
    b.dout = device_random_repeated(nq, 1.0f);
    TT_CUDA_CHECK(cudaMalloc((void **)&b.out, sizeof(tt_bf16) * (size_t)nq));
    TT_CUDA_CHECK(cudaMalloc((void **)&b.dq, sizeof(tt_bf16) * (size_t)nq));
    TT_CUDA_CHECK(cudaMalloc((void **)&b.dk, sizeof(tt_bf16) * (size_t)nkv));
    TT_CUDA_CHECK(cudaMalloc((void **)&b.dv, sizeof(tt_bf16) * (size_t)nkv));
    TT_CUDA_CHECK(cudaMalloc((void **)&b.lse, sizeof(float) * (size_t)rows));
    b.workspace = device_workspace(workspace_bytes);
    b.workspace_bytes = workspace_bytes;

    /* the FLOPs of the visible pairs: a window's share of the causal square */
    const double forward_flops = 4.0 * visible_pairs(T, current_window) * (double)hd * (double)Hq * (double)B;
    row->forward_ms = median_ms(call_forward, &b, "timed forward");
    row->backward_ms = median_ms(call_backward, &b, "timed backward");
    row->forward_tflops = forward_flops / (row->forward_ms * 1e-3) / 1e12;
    row->backward_tflops = 2.5 * forward_flops / (row->backward_ms * 1e-3) / 1e12;
    row->ran = true;
    printf("  forward %.3f ms (%.1f TFLOP/s), backward %.3f ms (%.1f TFLOP/s)\n", row->forward_ms, row->forward_tflops,
           row->backward_ms, row->backward_tflops);

    cudaFree(b.q);
    cudaFree(b.k);
    cudaFree(b.v);
    cudaFree(b.dout);
    cudaFree(b.out);
    cudaFree(b.dq);
    cudaFree(b.dk);
    cudaFree(b.dv);
    cudaFree(b.lse);
    cudaFree(b.workspace);
    tt_cudnn_attention_destroy(a);
}

static void print_timing_table(const timing_row *table, int row_count) {
    char version[96];
    printf(
        "\ncuDNN %s, B=1 Hkv=8 (Hq/2 below 16), causal (window 0) or a sliding window, median of %d; TFLOP/s of the visible "
        "pairs' FLOPs\n",
        tt_cudnn_version_string(version, sizeof version), TIMED_CALLS);
    printf("%7s  %3s  %3s  %6s  %-13s  %6s  %5s  %10s  %8s  %10s  %8s\n", "T", "Hq", "hd", "window", "backward",
           "dP GiB", "lanes", "fwd ms", "TFLOP/s", "bwd ms", "TFLOP/s");
    for (int i = 0; i < row_count; i++) {
        const timing_row *r = &table[i];
        if (r->ran)
            printf("%7lld  %3lld  %3lld  %6lld  %-13s  %6.2f  %5d  %10.3f  %8.1f  %10.3f  %8.1f\n", (long long)r->T,
                   (long long)r->Hq, (long long)r->hd, (long long)r->window,
                   r->deterministic ? "deterministic" : "default", (double)r->dp_limit / (double)(1 << 30), r->lanes,
                   r->forward_ms, r->forward_tflops, r->backward_ms, r->backward_tflops);
        else
            printf("%7lld  %3lld  %3lld  %6lld  %-13s  %s\n", (long long)r->T, (long long)r->Hq, (long long)r->hd,
                   (long long)r->window, r->deterministic ? "deterministic" : "default", r->note);
    }
}

/* --speed T:GiB[:lanes[:Hq[:hd[:window]]]],...: the listed lengths and dP limits only (GiB 0: the atomic
 * backward). */
static int time_listed(const char *list) {
    timing_row table[32];
    int row_count = 0;
    const char *p = list;
    while (*p && row_count < 32) {
        char *end = NULL;
        const long long T = strtoll(p, &end, 10);
        double gib = 1.0;
        long lanes = 1, Hq = 16, hd = 128, window = 0;
        if (end && *end == ':') gib = strtod(end + 1, &end);
        if (end && *end == ':') lanes = strtol(end + 1, &end, 10);
        if (end && *end == ':') Hq = strtol(end + 1, &end, 10);
        if (end && *end == ':') hd = strtol(end + 1, &end, 10);
        if (end && *end == ':') window = strtol(end + 1, &end, 10);
        if (!end || T <= 0 || T % 128 != 0 || gib < 0 || lanes < 1 || lanes > TT_CUDNN_ATTENTION_MAX_LANES || Hq < 2 ||
            Hq % 2 != 0 || hd < 8 || hd > 256 || hd % 8 != 0 || window < 0 || (*end && *end != ',')) {
            fprintf(
                stderr,
                "--speed: expected T:GiB[:lanes[:Hq[:hd[:window]]]][,...] with T a multiple of 128, lanes 1..%d, Hq "
                "even, hd a multiple of 8 up to 256, at '%s'\n",
                TT_CUDNN_ATTENTION_MAX_LANES, p);
            return 2;
        }
        if (gib > 0) set_dp_limit((size_t)(gib * (double)(1 << 30)));
        current_window = window;
        time_attention(T, Hq, hd, gib > 0, (int)lanes, &table[row_count++]);
        current_window = 0;
        p = *end ? end + 1 : end;
    }
    set_dp_limit((size_t)1 << 30);
    print_timing_table(table, row_count);
    return tt_test_summary("test_gpu_cudnn_attention --speed");
}

int main(int argc, char **argv) {
    bool quick = false; /* `make test-gpu` passes the source dir first */
    const char *speed_list = NULL;
    for (int i = 1; i < argc; i++) {
        quick = quick || strcmp(argv[i], "--quick") == 0;
        if (strcmp(argv[i], "--speed") == 0 && i + 1 < argc) speed_list = argv[++i];
    }
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        fprintf(stderr, "test_gpu_cudnn_attention: no CUDA device; run it on a machine with a GPU\n");
        return 1;
    }
    struct cudaDeviceProp properties;
    TT_CUDA_CHECK(cudaGetDeviceProperties(&properties, 0));
    char version[96];
    printf("device: %s (sm_%d%d), cuDNN %s\n", properties.name, properties.major, properties.minor,
           tt_cudnn_version_string(version, sizeof version));
    tt_rng_seed(&gpu_test_rng, 2026);
    if (speed_list) return time_listed(speed_list);

    const int64_t shapes[][5] = {{2, 64, 4, 2, 64}, {1, 200, 8, 2, 128}, {1, 512, 2, 1, 128}};
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
        for (int deterministic = 0; deterministic <= 1; deterministic++)
            test_attention(shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3], shapes[i][4], deterministic);
    /* the deterministic backward in head groups: a small dP limit makes these shapes run one kv head
     * (and its query heads) per call */
    set_dp_limit((size_t)1 << 20);
    test_attention(1, 512, 8, 4, 128, 1); /* 4 groups */
    set_dp_limit((size_t)600 << 10);
    test_attention(2, 256, 4, 2, 64, 1); /* 2 groups, batch 2 */
    /* over chunks of keys: one kv head's whole-sequence dP is over the limit */
    set_dp_limit((size_t)300 << 10);
    test_attention(1, 512, 8, 4, 128, 1); /* 4 groups x chunks of 128, 128, 256 keys */
    set_dp_limit((size_t)400 << 10);
    test_attention(2, 384, 4, 2, 64, 1); /* batch 2, 2 groups x 3 chunks of 128 keys */
    set_dp_limit((size_t)1 << 30);
    /* Gemma's layers: head_dim 256; a sliding window (whole and over key chunks, each chunk against the queries its
     * keys' window reaches: the dQ sum starts at zero); Gemma 2's soft-capping, alone and with the window */
    test_attention(1, 256, 4, 2, 256, 1);
    current_window = 100;
    for (int deterministic = 0; deterministic <= 1; deterministic++) {
        test_attention(2, 200, 4, 2, 128, deterministic);
        test_attention(1, 384, 4, 2, 256, deterministic);
    }
    set_dp_limit((size_t)300 << 10);
    test_attention(1, 1024, 8, 4, 128, 1); /* 4 groups x key chunks, the window 100 keys */
    set_dp_limit((size_t)1 << 30);
    current_window = 0;
    current_softcap = 5.0;
    for (int deterministic = 0; deterministic <= 1; deterministic++) test_attention(1, 256, 4, 2, 128, deterministic);
    current_window = 64;
    test_attention(1, 384, 4, 2, 256, 1);
    current_window = 0;
    current_softcap = 0;

    const int64_t lengths[] = {4096, 16384, 65536};
    const int length_count = quick ? 2 : 3;
    timing_row table[12];
    int row_count = 0;
    for (int i = 0; i < length_count; i++)
        for (int deterministic = 0; deterministic <= 1; deterministic++)
            time_attention(lengths[i], 16, 128, deterministic, 1, &table[row_count++]);
    if (!quick) { /* the key-chunked deterministic backward at 64k with more dP per call */
        set_dp_limit((size_t)4 << 30);
        time_attention(65536, 16, 128, 1, 1, &table[row_count++]);
        set_dp_limit((size_t)1 << 30);
    }
    /* Gemma 3 4B's shape at 16k (8 heads of 256, 4 kv heads): causal and its sliding layers' window of 1024 */
    time_attention(16384, 8, 256, 1, 1, &table[row_count++]);
    current_window = 1024;
    time_attention(16384, 8, 256, 1, 1, &table[row_count++]);
    current_window = 0;

    print_timing_table(table, row_count);
    return tt_test_summary("test_gpu_cudnn_attention");
}
