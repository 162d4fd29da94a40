/* Two CPU backends in one process: a backend's state (op scratch, copy engine counters, timeline,
 * thread count) is its context's, so two of them, on different thread counts, run two models turn
 * by turn and each gives the bits one backend gives alone; the size queries asked in between, for
 * settings neither run has, change nothing. */
#include <string.h>

#include "core/rng.h"
#include "config/run_translation.h"
#include "memory/plan.h"
#include "memory/size_table.h"
#include "model/weights.h"
#include "ops/backend.h"
#include "test_util.h"
#include "tiny_model.h"
#include "train/model_setup.h"
#include "train/optimizer.h"
#include "train/optimizer_step.h"
#include "train/step.h"

#define STEPS 3

typedef struct run_result {
    double loss[STEPS];
    float *weights; /* after STEPS steps */
    int64_t numel;
} run_result;

/* A Qwen3-shaped tiny model (large enough a batch that the ops' parallel regions run on several threads),
 * random weights (seed 11), a fixed random batch; activation_offloading moves the saved tensors through the
 * backend's copy engine (the same bits as keeping them). */
static void open_model(tt_model_state *s, const tt_backend *backend, bool offload) {
    tt_model_config config = tt_test_tiny_config(true);
    tt_run_config run;
    tt_run_config_defaults(&run);
    run.micro_batch_size = 4;
    run.sequence_len = 64;
    run.loss_chunk_size = 96;
    run.activation_offloading = offload ? 1 : 0;
    const tt_precision fp32 = tt_precision_for_run(&run, false);
    tt_plan plan;
    tt_plan_from_config(&plan, &run, &config, TT_TIER_HOST, &fp32);
    tt_run_config_free(&run);
    tt_model_state_init(s, &config, &plan, backend, 0);
    tt_weights_init_random(s->weights, &s->params, 0.3, 11);
    tt_rng rng;
    tt_rng_seed(&rng, 5);
    const int64_t N = s->plan.micro_batch * s->plan.seq_len;
    for (int64_t i = 0; i < N; i++) {
        s->batch_inputs[i] = (int32_t)(tt_rng_next(&rng) % (uint64_t)s->config.vocab_size);
        s->batch_targets[i] =
            i % 9 == 4 ? TT_IGNORE_INDEX : (int32_t)(tt_rng_next(&rng) % (uint64_t)s->config.vocab_size);
    }
}

static void train_step(tt_model_state *s, int step, run_result *out) {
    const tt_adamw_settings adamw = {
        .beta1 = 0.9f, .beta2 = 0.999f, .epsilon = 1e-8f, .weight_decay = 0.1f, .max_grad_norm = 1.0f};
    tt_backend_zero(s->backend, s->gradients, s->sizes.gradients);
    int64_t count = 0;
    out->loss[step] = tt_step_forward_backward(s, 1.0 / 256.0, &count);
    tt_adamw_step(s, &adamw, 1e-2f, step + 1, tt_clip_scale(tt_gradient_norm(s), adamw.max_grad_norm));
}

/* The weights after training, and the state freed. */
static void close_model(tt_model_state *s, run_result *out) {
    out->numel = s->params.total_numel;
    out->weights = malloc(sizeof(float) * (size_t)out->numel);
    memcpy(out->weights, s->weights, sizeof(float) * (size_t)out->numel);
    tt_model_state_free(s);
}

static bool same_bits(const run_result *a, const run_result *b) {
    return memcmp(a->loss, b->loss, sizeof a->loss) == 0 && a->numel == b->numel &&
           memcmp(a->weights, b->weights, sizeof(float) * (size_t)a->numel) == 0;
}

int main(int argc, char **argv) {
    (void)argc, (void)argv;
    /* one backend alone, on 2 threads */
    tt_backend *alone = tt_backend_cpu_create(2);
    tt_model_state s;
    open_model(&s, alone, false);
    run_result reference = {0};
    for (int step = 0; step < STEPS; step++) train_step(&s, step, &reference);
    close_model(&s, &reference);
    tt_backend_destroy(alone);

    /* two backends side by side, on 1 and 3 threads, the second offloading activations */
    tt_backend *one = tt_backend_cpu_create(1), *three = tt_backend_cpu_create(3);
    tt_model_state a, b;
    open_model(&a, one, false);
    open_model(&b, three, true);
    const tt_backend_settings settings = tt_plan_backend_settings(&a.plan);
    tt_scratch_shape longer = tt_size_table_scratch_shape(&a.config, &a.params, &a.plan);
    longer.attention.seq_len *= 2; /* a hypothetical plan: twice the sequence */
    longer.tokens *= 2;
    const size_t first_answer = tt_backend_scratch_bytes(one, &settings, &longer);
    run_result turn_a = {0}, turn_b = {0};
    for (int step = 0; step < STEPS; step++) {
        train_step(&a, step, &turn_a);
        const size_t asked_one = tt_backend_scratch_bytes(one, &settings, &longer);
        const size_t asked_three = tt_backend_scratch_bytes(three, &settings, &longer);
        TT_EXPECT(asked_one == first_answer && asked_three >= asked_one,
                  "a size query between steps gives the same answer (%zu, then %zu; %zu on 3 threads)", first_answer,
                  asked_one, asked_three);
        train_step(&b, step, &turn_b);
    }
    size_t to_host[2], to_device[2];
    double seconds, exposed;
    tt_backend_copy_stats(one, &to_host[0], &to_device[0], &seconds, &exposed);
    tt_backend_copy_stats(three, &to_host[1], &to_device[1], &seconds, &exposed);
    TT_EXPECT(to_host[0] == 0 && to_device[0] == 0 && to_host[1] > 0 && to_device[1] == to_host[1],
              "each backend counts its own copies (%zu and %zu bytes out)", to_host[0], to_host[1]);
    close_model(&a, &turn_a);
    close_model(&b, &turn_b);
    TT_EXPECT(same_bits(&reference, &turn_a), "the backend on 1 thread, beside another, gives the bits of one alone");
    TT_EXPECT(same_bits(&reference, &turn_b),
              "the backend on 3 threads, offloading, beside another, gives the bits of one alone");
    tt_backend_destroy(one);
    tt_backend_destroy(three);
    free(reference.weights);
    free(turn_a.weights);
    free(turn_b.weights);
    return tt_test_summary("two_backends");
}
