/* What trains: frozen parameters (freezing, or the base under LoRA adapters) get no gradient,
 * no AdamW state and no master copy, keep their weights bit for bit through training, and the
 * size table prices only the trainable part; what trains changes. */
#include <string.h>

#include "core/rng.h"
#include "config/run_translation.h"
#include "memory/plan.h"
#include "model/weights.h"
#include "ops/backend.h"
#include "test_backend.h"
#include "test_util.h"
#include "tiny_model.h"
#include "train/optimizer.h"
#include "train/model_setup.h"
#include "train/optimizer_step.h"
#include "train/step.h"

static tt_model_config tiny_config(bool qwen3) { return tt_test_tiny_config(qwen3); }

/* A CPU model with what trains given, random weights (seed 11) and a fixed random batch. */
static void open_model(tt_model_state *s, bool qwen3, const tt_trainable_spec *spec, bool checkpointing) {
    tt_model_config config = tiny_config(qwen3);
    tt_run_config run;
    tt_run_config_defaults(&run);
    run.micro_batch_size = 2;
    run.sequence_len = 7;
    run.loss_chunk_size = 5;
    run.gradient_checkpointing = checkpointing;
    const tt_precision fp32 = tt_precision_for_run(&run, false);
    tt_plan plan;
    tt_plan_from_config(&plan, &run, &config, TT_TIER_HOST, &fp32);
    tt_run_config_free(&run);
    tt_model_state_init_trainable(s, &config, &plan, spec, tt_test_cpu_backend(), 0);
    tt_weights_init_random(s->weights, &s->params, 0.3, 11);
    tt_rng rng;
    tt_rng_seed(&rng, 5);
    const int64_t N = s->plan.micro_batch * s->plan.seq_len;
    for (int64_t i = 0; i < N; i++) {
        s->batch_inputs[i] = (int32_t)(tt_rng_next(&rng) % (uint64_t)s->config.vocab_size);
        s->batch_targets[i] = (int32_t)(tt_rng_next(&rng) % (uint64_t)s->config.vocab_size);
    }
}

/* `steps` AdamW steps of lr 1e-2 on the fixed batch. */
static void train(tt_model_state *s, int steps) {
    const tt_adamw_settings adamw = {.beta1 = 0.9f, .beta2 = 0.999f, .epsilon = 1e-8f, .weight_decay = 0.1f};
    for (int step = 1; step <= steps; step++) {
        tt_backend_zero(s->backend, s->gradients, s->sizes.gradients);
        int64_t count = 0;
        tt_step_forward_backward(s, 1.0 / 14.0, &count);
        tt_adamw_step(s, &adamw, 1e-2f, step, 1.0f);
    }
}

static bool same_values(const tt_model_state *a, const float *before, const tt_param_info *p) {
    return memcmp((const float *)a->weights + p->offset, before + p->offset, sizeof(float) * (size_t)p->numel) == 0;
}

static void check_frozen_unchanged(const char *what, bool qwen3, const tt_trainable_spec *spec) {
    tt_model_state s;
    open_model(&s, qwen3, spec, false);
    float *before = malloc(sizeof(float) * (size_t)s.params.total_numel);
    memcpy(before, s.weights, sizeof(float) * (size_t)s.params.total_numel);
    train(&s, 3);
    int frozen = 0, changed = 0, trainable = 0;
    for (int i = 0; i < s.params.count; i++) {
        const tt_param_info *p = &s.params.params[i];
        if (!p->trainable) {
            frozen++;
            TT_EXPECT(same_values(&s, before, p), "%s: frozen %s changed in training", what, p->name);
        } else {
            trainable++;
            changed += !same_values(&s, before, p);
        }
    }
    TT_EXPECT(frozen > 0 && changed == trainable, "%s: %d frozen, %d of %d trainable parameters changed", what, frozen,
              changed, trainable);
    /* gradients, master copy and moments are priced for the trainable part only */
    TT_EXPECT(s.sizes.gradients == tt_align_up((size_t)s.params.trainable_numel * 4) &&
                  s.sizes.optimizer_state == 2 * s.sizes.gradients && s.params.trainable_start > 0 &&
                  s.sizes.frozen_weights == (size_t)s.params.trainable_start * 4,
              "%s: the size table prices %zu gradient bytes for %lld trainable elements", what, s.sizes.gradients,
              (long long)s.params.trainable_numel);
    TT_EXPECT(s.arena.class_peak[TT_CLASS_FROZEN_WEIGHT] == s.sizes.class_peak[TT_CLASS_FROZEN_WEIGHT][TT_TIER_HOST] &&
                  s.arena.peak == s.sizes.tier_peak[TT_TIER_HOST],
              "%s: the arena's peaks equal the size table", what);
    free(before);
    tt_model_state_free(&s);
}

/* Freezing changes which gradients exist, never their values: every trainable parameter's
 * gradient equals the one full training computes. */
static void check_frozen_gradients_match(bool qwen3, const tt_trainable_spec *spec) {
    tt_model_state full, part;
    open_model(&full, qwen3, NULL, false);
    open_model(&part, qwen3, spec, true);
    int64_t count = 0;
    const double loss_full = tt_step_forward_backward(&full, 0.1, &count);
    const double loss_part = tt_step_forward_backward(&part, 0.1, &count);
    TT_EXPECT(loss_full == loss_part, "freezing leaves the loss alone: %.17g vs %.17g", loss_full, loss_part);
    for (int i = 0; i < part.params.count; i++) {
        const tt_param_info *p = &part.params.params[i], *q = &full.params.params[i];
        if (!p->trainable) continue;
        TT_EXPECT(memcmp((const float *)part.gradients + (p->offset - part.params.trainable_start),
                         (const float *)full.gradients + q->offset, sizeof(float) * (size_t)p->numel) == 0,
                  "the gradient of %s with parts frozen is the full-training one", p->name);
    }
    tt_model_state_free(&full);
    tt_model_state_free(&part);
}

static void set_lora_b(tt_model_state *s, float value) {
    for (int i = 0; i < s->params.count; i++)
        if (s->params.params[i].kind == TT_PARAM_LORA_B)
            for (int64_t k = 0; k < s->params.params[i].numel; k++)
                ((float *)s->weights)[s->params.params[i].offset + k] = value * (float)((k % 5) - 2);
}

/* LoRA as PEFT initialises it (B = 0) leaves the model's output unchanged, bit for bit; dropout
 * changes the training loss and not the evaluation loss; the size table prices the adapters. */
static void check_lora(bool qwen3) {
    const tt_trainable_spec spec = {.lora_rank = 4, .lora_alpha = 8, .lora_targets = TT_LORA_SEPARATE_MODULES};
    tt_model_state base, adapted;
    open_model(&base, qwen3, NULL, false);
    open_model(&adapted, qwen3, &spec, false);
    int64_t count = 0;
    const double base_loss = tt_step_forward_loss(&base, &count);
    TT_EXPECT(base_loss == tt_step_forward_loss(&adapted, &count) &&
                  base_loss == tt_step_forward_backward(&adapted, 0.1, &count),
              "zero-initialised adapters leave the loss unchanged");
    TT_EXPECT(adapted.params.trainable_numel < base.params.trainable_numel &&
                  adapted.sizes.class_peak[TT_CLASS_LORA][TT_TIER_HOST] == adapted.sizes.weights &&
                  adapted.sizes.class_peak[TT_CLASS_WEIGHT][TT_TIER_HOST] == 0 &&
                  adapted.sizes.gradients == tt_align_up((size_t)adapted.params.trainable_numel * 4),
              "the adapters are the trainable weights; gradients shrink to theirs");
    const tt_param_info *a = tt_param_table_find_lora(&adapted.params, TT_PARAM_LORA_A, TT_LORA_DOWN, 2);
    const tt_param_info *bb = tt_param_table_find_lora(&adapted.params, TT_PARAM_LORA_B, TT_LORA_DOWN, 2);
    TT_EXPECT(a && bb && strcmp(a->name, "base_model.model.model.layers.2.mlp.down_proj.lora_A.weight") == 0 &&
                  a->shape[0] == 4 && a->shape[1] == 40 && bb->shape[0] == 24 && bb->shape[1] == 4,
              "PEFT's names and shapes: A [r, in], B [out, r]");
    float bound = 0;
    for (int64_t k = 0; a && k < a->numel; k++) {
        const float v = fabsf(((float *)adapted.weights)[a->offset + k]);
        bound = v > bound ? v : bound;
    }
    TT_EXPECT(bound > 0.5f / sqrtf(40.0f) && bound < 1.0f / sqrtf(40.0f), "A ~ uniform(+-1/sqrt(in)): max %g", bound);
    tt_model_state_free(&base);

    tt_model_state dropped;
    tt_trainable_spec with_dropout = spec;
    with_dropout.lora_dropout = 0.3;
    open_model(&dropped, qwen3, &with_dropout, false);
    set_lora_b(&adapted, 0.05f);
    set_lora_b(&dropped, 0.05f);
    dropped.lora_dropout_seed = tt_lora_dropout_seed(1, 0, 0);
    const double train_plain = tt_step_forward_backward(&adapted, 0.1, &count);
    const double train_dropped = tt_step_forward_backward(&dropped, 0.1, &count);
    TT_EXPECT(train_plain != train_dropped, "dropout changes the training loss (%.9g vs %.9g)", train_plain,
              train_dropped);
    TT_EXPECT(tt_step_forward_loss(&adapted, &count) == tt_step_forward_loss(&dropped, &count),
              "evaluation runs without dropout");
    dropped.lora_dropout_seed = tt_lora_dropout_seed(1, 0, 1);
    TT_EXPECT(tt_step_forward_backward(&dropped, 0.1, &count) != train_dropped, "each micro-step draws its own masks");
    TT_EXPECT(dropped.sizes.lora_dropout_buffer == tt_align_up(14 * 40 * 4) && adapted.sizes.lora_dropout_buffer == 0,
              "the dropout workspace is [N, widest adapted input], only with dropout");
    tt_model_state_free(&adapted);
    tt_model_state_free(&dropped);
}

static void check_bad_frozen_layer(void *arg) {
    (void)arg;
    tt_model_config c = tiny_config(false);
    const int64_t layers[] = {1, 3};
    const tt_trainable_spec spec = {.frozen_layers = layers, .frozen_layer_count = 2};
    tt_param_table t;
    tt_param_table_build_trainable(&c, &spec, &t);
}

int main(void) {
    const int64_t first_two[] = {0, 1};
    for (int variant = 0; variant < 2; variant++) {
        const bool qwen3 = variant == 1;
        const tt_trainable_spec freeze = {
            .freeze_embeddings = true, .frozen_layers = first_two, .frozen_layer_count = 2};
        check_frozen_unchanged(
            qwen3 ? "qwen3 frozen embedding and layers 0-1" : "llama frozen embedding and layers 0-1", qwen3, &freeze);
        check_frozen_gradients_match(qwen3, &freeze);
        const tt_trainable_spec middle = {.frozen_layers = first_two + 1, .frozen_layer_count = 1};
        check_frozen_unchanged("frozen layer 1", qwen3, &middle);
        check_frozen_gradients_match(qwen3, &middle);
    }
    for (int variant = 0; variant < 2; variant++) {
        check_lora(variant == 1);
        const tt_trainable_spec lora = {.lora_rank = 2,
                                        .lora_alpha = 4,
                                        .lora_dropout = 0.1,
                                        .lora_targets = (1u << TT_LORA_K) | (1u << TT_LORA_UP)};
        check_frozen_unchanged(variant ? "qwen3 LoRA on k and up" : "llama LoRA on k and up", variant == 1, &lora);
    }
    tt_expect_die(check_bad_frozen_layer, NULL, "frozen_layers lists layer 3 but the model has 3 decoder layers");
    return tt_test_summary("trainable");
}
