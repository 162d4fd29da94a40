/* Optimizer offload on the CPU backend: over three optimizer steps of two micro-batches each, every
 * optimizer_offload_fraction (0, 0.3, 0.6, 1), with and without overlap_cpu_optimizer_d2h_h2d, with and
 * without clipping, gives the weights and AdamW moments of the run without offload bit for bit; for full
 * fine-tuning (tied and untied LM head), frozen parts and LoRA. The host arena's measured peaks equal the
 * size table; the split is a unit boundary nearest the fraction; a run that saves after two steps and
 * continues with another fraction and schedule ends with the same bits. */
#include <string.h>

#include "core/rng.h"
#include "memory/plan.h"
#include "model/weights.h"
#include "ops/backend.h"
#include "test_backend.h"
#include "size_oracle.h"
#include "test_util.h"
#include "trainable_ranges.h"
#include "tiny_model.h"
#include "train/optimizer.h"
#include "train/optimizer_offload.h"
#include "train/model_setup.h"
#include "train/optimizer_step.h"
#include "train/step.h"

typedef struct variant {
    const char *name;
    bool qwen3;  /* tied LM head, q/k norms; else untied with attention biases */
    bool lora;   /* rank-2 adapters on q, v and down_proj */
    bool freeze; /* freeze_embeddings and layer 1 */
} variant;

typedef struct offload_setting {
    bool on;
    double fraction;
    bool overlap;
    bool ring; /* the gradient ring */
} offload_setting;

static int64_t micro_batches = 2; /* per optimizer step */

/* The shared tiny model, narrower: vocab 40, hidden 16, MLP 24, 2 query heads and 1 kv head of 8. */
static tt_model_config tiny_config(bool qwen3) {
    tt_model_config c = tt_test_tiny_config(qwen3);
    c.vocab_size = 40;
    c.hidden_size = 16;
    c.intermediate_size = 24;
    c.num_heads = 2;
    c.num_kv_heads = 1;
    c.head_dim = 8;
    return c;
}

static const int64_t frozen_layer[1] = {1};

static tt_trainable_spec spec_of(const variant *v) {
    tt_trainable_spec spec = {0};
    if (v->lora) {
        spec.lora_rank = 2;
        spec.lora_alpha = 4;
        spec.lora_targets = (1u << TT_LORA_Q) | (1u << TT_LORA_V) | (1u << TT_LORA_DOWN);
    }
    if (v->freeze) {
        spec.freeze_embeddings = true;
        spec.frozen_layers = frozen_layer;
        spec.frozen_layer_count = 1;
    }
    return spec;
}

static void make_state(tt_model_state *s, const variant *v, offload_setting o) {
    tt_model_config config = tiny_config(v->qwen3);
    tt_plan plan;
    memset(&plan, 0, sizeof plan);
    plan.num_layers = config.num_layers;
    plan.layers = calloc((size_t)config.num_layers, sizeof(tt_layer_plan));
    for (int64_t l = 0; l < config.num_layers; l++) {
        plan.layers[l].recompute = l == 1 ? TT_RECOMPUTE_EVERYTHING : TT_RECOMPUTE_NOTHING;
        plan.layers[l].saved_activation_tier = TT_TIER_HOST;
        plan.layers[l].layer_input_tier = TT_TIER_HOST;
    }
    plan.compute_tier = TT_TIER_HOST;
    plan.offload_dir = "/tmp";
    plan.offload_ring = 2;
    plan.saved_ring = 2;
    plan.micro_batch = 2;
    plan.seq_len = 6;
    plan.loss_chunk = 5;
    plan.precision = (tt_precision){.activation = TT_F32, .gradient = TT_F32, .moment = TT_F32, .master = false};
    plan.activation_bytes = plan.weight_bytes = plan.gradient_bytes = plan.moment_bytes = 4;
    plan.optimizer_offload = o.on;
    plan.optimizer_offload_fraction = o.fraction;
    plan.optimizer_overlap = o.overlap;
    plan.gradient_ring = o.ring;
    const tt_trainable_spec spec = spec_of(v);
    tt_model_state_init_trainable(s, &config, &plan, &spec, tt_test_cpu_backend(), 0);
}

static void initial_weights(tt_model_state *s) {
    float *host = calloc((size_t)s->params.total_numel, sizeof(float));
    tt_weights_init_random(host, &s->params, 0.3, 11);
    for (int i = 0; i < s->params.count; i++) /* B starts at zero: nonzero, so adapters get gradients */
        if (s->params.params[i].kind == TT_PARAM_LORA_B)
            for (int64_t k = 0; k < s->params.params[i].numel; k++)
                host[s->params.params[i].offset + k] = 0.05f * (float)((k % 7) - 3);
    tt_model_set_weights(s, host);
    free(host);
}

static int64_t clipped_steps; /* steps whose gradients clipping scaled down */

/* Optimizer steps [first, last) of micro_batches each, as the trainer runs them. */
static void train_steps(tt_model_state *s, int64_t first, int64_t last, float max_grad_norm) {
    const tt_adamw_settings adamw = {
        .beta1 = 0.9f, .beta2 = 0.95f, .epsilon = 1e-8f, .weight_decay = 0.1f, .max_grad_norm = max_grad_norm};
    const int64_t N = s->plan.micro_batch * s->plan.seq_len;
    int32_t inputs[64], targets[64];
    for (int64_t step = first; step < last; step++) {
        const float lr = 2e-2f / (float)(step + 1);
        tt_backend_zero(s->backend, s->gradients, s->sizes.gradients);
        for (int64_t micro = 0; micro < micro_batches; micro++) {
            tt_rng rng;
            tt_rng_seed(&rng, (uint64_t)(100 * step + micro));
            for (int64_t i = 0; i < N; i++) {
                inputs[i] = (int32_t)(tt_rng_next(&rng) % (uint64_t)s->config.vocab_size);
                targets[i] =
                    i % 5 == 3 ? TT_IGNORE_INDEX : (int32_t)(tt_rng_next(&rng) % (uint64_t)s->config.vocab_size);
            }
            if (micro == micro_batches - 1)
                tt_optimizer_offload_expect_gradients(s->optimizer_offload, &adamw, lr, step + 1);
            tt_model_set_batch(s, inputs, targets);
            int64_t count = 0;
            tt_step_forward_backward(s, 0.05, &count);
        }
        const double norm = tt_gradient_norm(s);
        if (max_grad_norm > 0) clipped_steps += norm > max_grad_norm;
        tt_adamw_step(s, &adamw, lr, step + 1, tt_clip_scale(norm, adamw.max_grad_norm));
        if (step == first) { /* an evaluation between steps reads the weights the update wrote */
            int64_t count = 0;
            tt_step_forward_loss(s, &count);
        }
    }
}

typedef struct trained {
    float *weights, *m, *v;
    size_t weight_bytes, moment_bytes;
} trained;

static trained read_back(tt_model_state *s) {
    trained t;
    t.weight_bytes = (size_t)s->params.total_numel * sizeof(float);
    t.moment_bytes = (size_t)s->params.trainable_numel * sizeof(float);
    t.weights = malloc(t.weight_bytes);
    t.m = malloc(t.moment_bytes);
    t.v = malloc(t.moment_bytes);
    tt_model_get_weights(s, t.weights);
    tt_model_get_moments(s, t.m, t.v);
    TT_EXPECT(trainable_ranges_match(s, t.weights + s->params.trainable_start, t.m, t.v),
              "a tensor at a time reads the whole getters' values");
    char scratch[] = "/tmp/tiertrain-streamed-save-XXXXXX";
    TT_EXPECT(mkdtemp(scratch) != NULL, "a scratch directory");
    TT_EXPECT(streamed_saves_match(s, scratch), "the streamed saves are the gathered saves' bytes");
    char remove_it[200];
    snprintf(remove_it, sizeof remove_it, "rm -rf %s", scratch);
    TT_EXPECT(system(remove_it) == 0, "scratch removed");
    return t;
}

static void free_trained(trained *t) {
    free(t->weights);
    free(t->m);
    free(t->v);
}

static bool same(const trained *a, const trained *b) {
    return a->weight_bytes == b->weight_bytes && memcmp(a->weights, b->weights, a->weight_bytes) == 0 &&
           memcmp(a->m, b->m, a->moment_bytes) == 0 && memcmp(a->v, b->v, a->moment_bytes) == 0;
}

static trained run(const variant *v, offload_setting o, float max_grad_norm) {
    tt_model_state s;
    make_state(&s, v, o);
    initial_weights(&s);
    train_steps(&s, 0, 3, max_grad_norm);
    trained t = read_back(&s);
    char why[256];
    TT_EXPECT(tt_size_oracle_agrees(&s.sizes, &s.config, &s.params, &s.plan, why, sizeof why), "%s fraction %g: %s",
              v->name, o.fraction, why);
    if (o.on) {
        /* the host arena holds exactly what the size table prices */
        static const tt_class classes[] = {TT_CLASS_MASTER, TT_CLASS_OPTIMIZER_STATE, TT_CLASS_GRADIENT};
        for (size_t i = 0; i < 3; i++)
            TT_EXPECT(s.host.class_peak[classes[i]] == s.sizes.class_peak[classes[i]][TT_TIER_PINNED],
                      "%s fraction %g: %s measured %zu, estimated %zu", v->name, o.fraction, tt_class_name(classes[i]),
                      s.host.class_peak[classes[i]], s.sizes.class_peak[classes[i]][TT_TIER_PINNED]);
        TT_EXPECT(s.host.peak == s.sizes.tier_peak[TT_TIER_PINNED], "%s fraction %g: pinned tier %zu vs %zu", v->name,
                  o.fraction, s.host.peak, s.sizes.tier_peak[TT_TIER_PINNED]);
        TT_EXPECT(s.arena.peak == s.sizes.tier_peak[TT_TIER_HOST], "%s fraction %g: compute tier %zu vs %zu", v->name,
                  o.fraction, s.arena.peak, s.sizes.tier_peak[TT_TIER_HOST]);
        const int64_t n = s.params.trainable_numel, host = s.sizes.optimizer_host_numel;
        TT_EXPECT(o.fraction != 0 || host == 0, "fraction 0 offloads nothing");
        TT_EXPECT(o.fraction != 1 || host == n, "fraction 1 offloads everything");
        TT_EXPECT(o.fraction == 0 || o.fraction == 1 || (host > 0 && host < n) || v->lora,
                  "%s fraction %g: a share of the parameters (%lld of %lld)", v->name, o.fraction, (long long)host,
                  (long long)n);
    }
    tt_model_state_free(&s);
    return t;
}

/* Two steps with one setting, the state read back as a checkpoint holds it, then a fresh state with another
 * setting loads it and takes the third step. */
static trained run_resumed(const variant *v, offload_setting before, offload_setting after, float max_grad_norm) {
    tt_model_state s;
    make_state(&s, v, before);
    initial_weights(&s);
    train_steps(&s, 0, 2, max_grad_norm);
    trained mid = read_back(&s);
    tt_model_state_free(&s);
    make_state(&s, v, after);
    tt_model_set_weights(&s, mid.weights);
    tt_model_set_moments(&s, mid.m, mid.v);
    free_trained(&mid);
    train_steps(&s, 2, 3, max_grad_norm);
    trained t = read_back(&s);
    tt_model_state_free(&s);
    return t;
}

/* The split: unit boundaries, the nearest to the fraction. */
static void test_split(void) {
    /* units of 10, 30, 30, 30 elements: trailing shares 0, 30, 60, 90, 100 */
    const int64_t start[5] = {0, 10, 40, 70, 100};
    TT_EXPECT(tt_optimizer_first_host_unit(start, 2, 0.0) == 4, "fraction 0: nothing");
    TT_EXPECT(tt_optimizer_first_host_unit(start, 2, 1.0) == 0, "fraction 1: everything");
    TT_EXPECT(tt_optimizer_first_host_unit(start, 2, 0.3) == 3, "fraction 0.3: the last unit");
    TT_EXPECT(tt_optimizer_first_host_unit(start, 2, 0.5) == 2, "fraction 0.5: nearest is 60");
    TT_EXPECT(tt_optimizer_first_host_unit(start, 2, 0.45) == 3, "fraction 0.45: a tie goes to the smaller share");
    TT_EXPECT(tt_optimizer_first_host_unit(start, 2, 0.1) == 4, "fraction 0.1: nearer to nothing than to 30");
    /* an empty unit (a frozen layer) is never where the share starts */
    const int64_t with_empty[5] = {0, 40, 40, 70, 100};
    TT_EXPECT(tt_optimizer_first_host_unit(with_empty, 2, 0.6) == 2, "the empty unit 1 is skipped");
}

int main(void) {
    test_split();
    const variant variants[] = {{.name = "llama"},
                                {.name = "qwen3 tied", .qwen3 = true},
                                {.name = "LoRA", .lora = true},
                                {.name = "frozen embedding and layer 1", .freeze = true}};
    const offload_setting settings[] = {{true, 0.0, false, false}, {true, 0.3, false, false}, {true, 0.6, true, false},
                                        {true, 1.0, false, false}, {true, 1.0, true, false},  {true, 0.3, true, false}};
    const float clips[] = {0.0f, 0.05f};
    for (size_t vi = 0; vi < sizeof variants / sizeof *variants; vi++)
        for (int ci = 0; ci < 2; ci++) {
            const variant *v = &variants[vi];
            trained reference = run(v, (offload_setting){0}, clips[ci]);
            for (size_t si = 0; si < sizeof settings / sizeof *settings; si++) {
                trained t = run(v, settings[si], clips[ci]);
                TT_EXPECT(same(&reference, &t), "%s, max_grad_norm %g: fraction %g%s differs from no offload", v->name,
                          clips[ci], settings[si].fraction, settings[si].overlap ? " with overlap" : "");
                free_trained(&t);
            }
            trained resumed = run_resumed(v, settings[2], settings[1], clips[ci]);
            TT_EXPECT(same(&reference, &resumed), "%s: saved with fraction 0.6 and overlap, resumed with 0.3", v->name);
            free_trained(&resumed);
            trained resumed_plain = run_resumed(v, settings[4], (offload_setting){0}, clips[ci]);
            TT_EXPECT(same(&reference, &resumed_plain), "%s: saved with everything offloaded, resumed without",
                      v->name);
            free_trained(&resumed_plain);
            free_trained(&reference);
        }
    TT_EXPECT(clipped_steps > 0, "max_grad_norm 0.05 clips (the scale reaches the CPU AdamW)");

    /* The gradient ring (overlap): the host share's layers' gradients stream out of two slots, with the same
     * bits as no offload, and the compute tier holds less; with several micro-batches per step each one's
     * gradients go out and come back into the slot for the next one's backward */
    for (micro_batches = 1; micro_batches <= 3; micro_batches += 2)
        for (size_t vi = 0; vi < sizeof variants / sizeof *variants; vi++)
            for (int ci = 0; ci < 2; ci++) {
                const variant *v = &variants[vi];
                trained reference = run(v, (offload_setting){0}, clips[ci]);
                const offload_setting ring = {true, 1.0, true, true}, no_ring = {true, 1.0, true, false};
                trained t = run(v, ring, clips[ci]);
                TT_EXPECT(
                    same(&reference, &t),
                    "%s, max_grad_norm %g, %lld micro-batches per step: the gradient ring differs from no offload",
                    v->name, clips[ci], (long long)micro_batches);
                free_trained(&t);
                tt_model_state a, b;
                make_state(&a, v, ring);
                make_state(&b, v, no_ring);
                /* (with layer 1 frozen two layers have gradients: two slots would save nothing, so no ring) */
                TT_EXPECT(v->freeze ? a.sizes.gradient_ring_first == a.config.num_layers + 1 &&
                                          a.sizes.gradients == b.sizes.gradients
                                    : a.sizes.gradient_ring_first <= a.config.num_layers &&
                                          a.sizes.class_peak[TT_CLASS_GRADIENT][TT_TIER_HOST] <
                                              b.sizes.class_peak[TT_CLASS_GRADIENT][TT_TIER_HOST],
                          "%s: the ring from unit %lld keeps %zu gradient bytes on the compute tier, %zu without",
                          v->name, (long long)a.sizes.gradient_ring_first,
                          a.sizes.class_peak[TT_CLASS_GRADIENT][TT_TIER_HOST],
                          b.sizes.class_peak[TT_CLASS_GRADIENT][TT_TIER_HOST]);
                tt_model_state_free(&a);
                tt_model_state_free(&b);
                trained resumed = run_resumed(v, ring, (offload_setting){0}, clips[ci]);
                TT_EXPECT(same(&reference, &resumed), "%s: saved with the gradient ring, resumed without", v->name);
                free_trained(&resumed);
                free_trained(&reference);
            }
    return tt_test_summary("optimizer_offload");
}
