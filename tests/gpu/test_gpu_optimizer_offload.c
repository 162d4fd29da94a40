/* `make test-gpu`, optimizer offload on the CUDA backend (written for the device; CI only compiles it).
 *
 * 1. The CPU AdamW against the GPU's: the CUDA kernel (tt_cuda_adamw, fp32 master and moments, bf16 compute
 *    copy) and the CPU AdamW (every vector path this host runs, two threads) from the same fp32 state over
 *    three steps with clipping factors and decaying and non-decaying segments of odd lengths. The bound is
 *    exact: both round the same operations in the same order once each (the kernel's __fmul_rn / __fadd_rn /
 *    __fdiv_rn / __fsqrt_rn, the CPU's separate vector multiply, add, divide and sqrt without contraction),
 *    from the same float scalars derived in double, and both round to bf16 to nearest even; so master
 *    weights, m and v must be bit-identical and the bf16 weights equal. (Were either side to fuse a
 *    multiply-add, the difference would stay within 2 units in the last place of each moment and of the
 *    update; the test prints the largest difference in units in the last place to show which case holds.)
 * 2. The whole model on the GPU (tiny Qwen3 fixture, bf16 compute, fp32 master weights): three optimizer
 *    steps of two micro-batches with optimizer_offload_fraction 0.5 and overlap (and with the race stress of
 *    debug_copy_delay_us), and 1.0 without overlap, give the weights and moments of the run without offload
 *    bit for bit: the gradient norm is the device's sum over the whole gradient buffer either way. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/dtype.h"
#include "config/run_translation.h"
#include "core/rng.h"
#include "gpu_test_util.h"
#include "memory/plan.h"
#include "model/weights.h"
#include "ops/cuda/backend_cuda.h"
#include "test_util.h"
#include "trainable_ranges.h"
#include "train/cpu_adamw.h"
#include "train/optimizer.h"
#include "train/optimizer_offload.h"
#include "train/model_setup.h"
#include "train/optimizer_step.h"
#include "train/step.h"

static int64_t ulp_distance(float a, float b) {
    int32_t x, y;
    memcpy(&x, &a, 4);
    memcpy(&y, &b, 4);
    if (x < 0) x = (int32_t)0x80000000 - x;
    if (y < 0) y = (int32_t)0x80000000 - y;
    return x > y ? (int64_t)x - y : (int64_t)y - x;
}

static void test_adamw_against_gpu(int64_t n) {
    const size_t bytes = sizeof(float) * (size_t)n;
    float *p = malloc(bytes), *g = malloc(bytes), *m = malloc(bytes), *v = malloc(bytes);
    for (int64_t i = 0; i < n; i++) {
        p[i] = (float)(tt_rng_uniform(&gpu_test_rng) - 0.5);
        m[i] = (float)(1e-3 * (tt_rng_uniform(&gpu_test_rng) - 0.5));
        v[i] = (float)(1e-5 * tt_rng_uniform(&gpu_test_rng));
    }
    float *p_dev, *g_dev, *m_dev, *v_dev;
    tt_bf16 *w_dev = device_poisoned(n);
    TT_CUDA_CHECK(cudaMalloc((void **)&p_dev, bytes));
    TT_CUDA_CHECK(cudaMalloc((void **)&g_dev, bytes));
    TT_CUDA_CHECK(cudaMalloc((void **)&m_dev, bytes));
    TT_CUDA_CHECK(cudaMalloc((void **)&v_dev, bytes));
    TT_CUDA_CHECK(cudaMemcpy(p_dev, p, bytes, cudaMemcpyHostToDevice));
    TT_CUDA_CHECK(cudaMemcpy(m_dev, m, bytes, cudaMemcpyHostToDevice));
    TT_CUDA_CHECK(cudaMemcpy(v_dev, v, bytes, cudaMemcpyHostToDevice));
    const int64_t starts[5] = {0, 7, n / 3, n / 3 + 129, n};
    const unsigned char decays[4] = {1, 0, 1, 0};
    uint16_t *w_cpu = malloc(sizeof(uint16_t) * (size_t)n);
    tt_cpu_adamw_pool *pool = tt_cpu_adamw_pool_create(2, tt_cpu_adamw_best_isa());
    for (int64_t step = 1; step <= 3; step++) {
        for (int64_t i = 0; i < n; i++) g[i] = (float)(1e-2 * (tt_rng_uniform(&gpu_test_rng) - 0.5));
        TT_CUDA_CHECK(cudaMemcpy(g_dev, g, bytes, cudaMemcpyHostToDevice));
        const float scale = step == 2 ? 0.25f : 1.0f, lr = 3e-4f * (float)step;
        tt_cuda_adamw(p_dev, w_dev, g_dev, 1, m_dev, v_dev, 0, starts, decays, 4, lr, 0.9f, 0.95f, 1e-8f, 0.1f, step,
                      scale, 0);
        const tt_adamw_scalars k = tt_adamw_scalars_for(lr, 0.9f, 0.95f, 1e-8f, 0.1f, step, scale);
        tt_cpu_adamw_pool_update(pool, p, m, v, g, w_cpu, starts, decays, 4, &k);
    }
    TT_CUDA_CHECK(cudaDeviceSynchronize());
    float *got_p = download_f32(p_dev, n), *got_m = download_f32(m_dev, n), *got_v = download_f32(v_dev, n);
    float *got_w = download_bf16(w_dev, n);
    int64_t worst = 0;
    bool weights_equal = true;
    for (int64_t i = 0; i < n; i++) {
        int64_t d = ulp_distance(got_p[i], p[i]);
        if (ulp_distance(got_m[i], m[i]) > d) d = ulp_distance(got_m[i], m[i]);
        if (ulp_distance(got_v[i], v[i]) > d) d = ulp_distance(got_v[i], v[i]);
        if (d > worst) worst = d;
        weights_equal = weights_equal && got_w[i] == tt_bf16_to_f32(w_cpu[i]);
    }
    TT_EXPECT(worst == 0, "CPU AdamW (%s) vs the CUDA kernel: %lld units in the last place apart, 0 expected",
              tt_cpu_adamw_isa_name(tt_cpu_adamw_best_isa()), (long long)worst);
    TT_EXPECT(weights_equal, "the bf16 compute copies agree");
    printf("  %-40s largest difference %lld ulp (bound: 0)\n", "CPU AdamW vs CUDA AdamW, 3 steps", (long long)worst);
    tt_cpu_adamw_pool_free(pool);
    free(p);
    free(g);
    free(m);
    free(v);
    free(w_cpu);
    free(got_p);
    free(got_m);
    free(got_v);
    free(got_w);
    cudaFree(p_dev);
    cudaFree(g_dev);
    cudaFree(m_dev);
    cudaFree(v_dev);
    cudaFree(w_dev);
}

typedef struct trained {
    float *weights, *m, *v;
    size_t weight_bytes, moment_bytes;
} trained;

/* Three optimizer steps of `micro_batches` micro-batches each. */
static trained train_on_gpu(const char *config_path, bool offload, double fraction, bool overlap, unsigned delay_us,
                            int64_t micro_batches) {
    tt_model_config config;
    tt_model_config_load(config_path, &config);
    tt_run_config run;
    tt_run_config_defaults(&run);
    run.micro_batch_size = 2;
    run.sequence_len = 40;
    run.loss_chunk_size = 32;
    run.optimizer_cpu_offload = offload;
    run.optimizer_offload_fraction = fraction;
    run.overlap_cpu_optimizer_d2h_h2d = overlap;
    run.gradient_accumulation_steps = micro_batches;
    tt_backend *backend = tt_backend_cuda_create(0);
    const tt_precision precision = tt_precision_for_run(&run, true);
    tt_plan plan;
    tt_plan_from_config(&plan, &run, &config, backend->compute_tier, &precision);
    plan.copy_delay_us = delay_us;
    tt_param_table params;
    tt_param_table_build(&config, &params);
    float *host = calloc((size_t)params.total_numel, sizeof(float));
    tt_weights_init_random(host, &params, 0.05, 3);
    tt_param_table_free(&params);
    tt_model_state s;
    tt_model_state_init(&s, &config, &plan, backend, 0);
    tt_model_set_weights(&s, host);
    free(host);
    const tt_adamw_settings adamw = {
        .beta1 = 0.9f, .beta2 = 0.999f, .epsilon = 1e-8f, .weight_decay = 0.01f, .max_grad_norm = 1.0f};
    const int64_t N = 2 * 40;
    int32_t inputs[80], targets[80];
    for (int64_t step = 0; step < 3; step++) {
        const float lr = 1e-3f;
        tt_backend_zero(backend, s.gradients, s.sizes.gradients);
        for (int64_t micro = 0; micro < micro_batches; micro++) {
            tt_rng rng;
            tt_rng_seed(&rng, (uint64_t)(10 * step + micro));
            for (int64_t i = 0; i < N; i++) {
                inputs[i] = (int32_t)(tt_rng_next(&rng) % (uint64_t)s.config.vocab_size);
                targets[i] = (int32_t)(tt_rng_next(&rng) % (uint64_t)s.config.vocab_size);
            }
            if (micro == micro_batches - 1)
                tt_optimizer_offload_expect_gradients(s.optimizer_offload, &adamw, lr, step + 1);
            tt_model_set_batch(&s, inputs, targets);
            int64_t count = 0;
            tt_step_forward_backward(&s, 1.0 / 160.0, &count);
        }
        tt_adamw_step(&s, &adamw, lr, step + 1, tt_clip_scale(tt_gradient_norm(&s), adamw.max_grad_norm));
    }
    trained t;
    t.weight_bytes = (size_t)s.params.total_numel * sizeof(float);
    t.moment_bytes = (size_t)s.params.trainable_numel * sizeof(float);
    t.weights = malloc(t.weight_bytes);
    t.m = malloc(t.moment_bytes);
    t.v = malloc(t.moment_bytes);
    tt_model_get_weights(&s, t.weights);
    tt_model_get_moments(&s, t.m, t.v);
    /* a streamed save's reads, a tensor at a time (the fp32 master copy's and the moments' on the GPU and in host) */
    TT_EXPECT(trainable_ranges_match(&s, t.weights + s.params.trainable_start, t.m, t.v),
              "a tensor at a time reads the whole getters' values");
    char scratch[] = "/tmp/tiertrain-streamed-save-XXXXXX";
    TT_EXPECT(mkdtemp(scratch) != NULL, "a scratch directory");
    TT_EXPECT(streamed_saves_match(&s, scratch), "the streamed saves are the gathered saves' bytes");
    char remove_it[200];
    snprintf(remove_it, sizeof remove_it, "rm -rf %s", scratch);
    TT_EXPECT(system(remove_it) == 0, "scratch removed");
    tt_model_state_free(&s);
    tt_backend_destroy(backend);
    tt_run_config_free(&run);
    return t;
}

static bool same(const trained *a, const trained *b) {
    return memcmp(a->weights, b->weights, a->weight_bytes) == 0 && memcmp(a->m, b->m, a->moment_bytes) == 0 &&
           memcmp(a->v, b->v, a->moment_bytes) == 0;
}

static void free_trained(trained *t) {
    free(t->weights);
    free(t->m);
    free(t->v);
}

int main(int argc, char **argv) {
    const char *source_dir = argc > 1 ? argv[1] : ".";
    char name[128];
    size_t free_bytes, total_bytes;
    if (!tt_cuda_device_query(0, name, sizeof name, &free_bytes, &total_bytes)) {
        fprintf(stderr, "test_gpu_optimizer_offload: no CUDA GPU\n");
        return 1;
    }
    printf("GPU: %s\n", name);
    tt_rng_seed(&gpu_test_rng, 21);
    test_adamw_against_gpu(1000003);
    test_adamw_against_gpu(4099);

    char config_path[4200];
    snprintf(config_path, sizeof config_path, "%s/tests/fixtures/tiny_qwen3/config.json", source_dir);
    trained reference = train_on_gpu(config_path, false, 1.0, false, 0, 2);
    const struct {
        double fraction;
        bool overlap;
        unsigned delay_us;
    } cases[] = {{0.5, true, 0}, {0.5, true, 2000}, {1.0, false, 0}, {1.0, true, 0}, {0.0, false, 0}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        trained t = train_on_gpu(config_path, true, cases[i].fraction, cases[i].overlap, cases[i].delay_us, 2);
        TT_EXPECT(same(&reference, &t),
                  "GPU, optimizer_offload_fraction %g%s%s: weights and moments differ from "
                  "the run without offload",
                  cases[i].fraction, cases[i].overlap ? " with overlap" : "",
                  cases[i].delay_us ? " and copy delays" : "");
        printf("  %-40s fraction %.1f%s%s: %s\n", "optimizer offload vs none, 3 steps", cases[i].fraction,
               cases[i].overlap ? ", overlap" : "", cases[i].delay_us ? ", delays" : "",
               same(&reference, &t) ? "bit-identical" : "DIFFERENT");
        free_trained(&t);
    }
    free_trained(&reference);

    /* The gradient ring (overlap; one and three micro-batches per step): a 4-layer Qwen3 shape whose layers' gradients stream
     * out of two slots, against the same run without offload, with and without copy delays */
    tt_test_scratch_open("gpu-optimizer-offload");
    tt_test_write_text("config.json",
                       "{\"model_type\": \"qwen3\", \"hidden_size\": 128, \"intermediate_size\": 256,"
                       " \"num_hidden_layers\": 4, \"num_attention_heads\": 4, \"num_key_value_heads\": 2,"
                       " \"head_dim\": 64, \"vocab_size\": 300, \"rms_norm_eps\": 1e-6, \"rope_theta\": 10000,"
                       " \"tie_word_embeddings\": true, \"max_position_embeddings\": 256,"
                       " \"torch_dtype\": \"bfloat16\"}");
    char *ring_config = tt_test_path("config.json");
    for (int64_t micro_batches = 1; micro_batches <= 3; micro_batches += 2) {
        /* with three micro-batches the ringed gradients go out and come back between them */
        trained ring_reference = train_on_gpu(ring_config, false, 1.0, false, 0, micro_batches);
        for (unsigned delay = 0; delay <= 2000; delay += 2000) {
            trained t = train_on_gpu(ring_config, true, 1.0, true, delay, micro_batches);
            TT_EXPECT(same(&ring_reference, &t),
                      "GPU, the gradient ring, %lld micro-batches%s: weights and moments "
                      "differ from the run without offload",
                      (long long)micro_batches, delay ? " with copy delays" : "");
            printf("  %-40s %lld micro-batch(es), %s: %s\n", "gradient ring vs none, 3 steps", (long long)micro_batches,
                   delay ? "delays" : "no delays", same(&ring_reference, &t) ? "bit-identical" : "DIFFERENT");
            free_trained(&t);
        }
        free_trained(&ring_reference);
    }
    free(ring_config);
    tt_test_scratch_close();
    return tt_test_summary("test_gpu_optimizer_offload");
}
