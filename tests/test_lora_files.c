/* LoRA adapters on disk: PEFT's adapter_model.safetensors and adapter_config.json (names, shapes,
 * fields), and `tiertrain merge`: the merged model's loss equals the adapted model's within fp32
 * rounding; a merge that cannot be right stops with the file named. */
#include <jansson.h>
#include <string.h>

#include "core/rng.h"
#include "config/run_translation.h"
#include "memory/plan.h"
#include "model/lora.h"
#include "model/safetensors.h"
#include "model/weights.h"
#include "ops/backend.h"
#include "test_backend.h"
#include "test_util.h"
#include "tiny_model.h"
#include "train/optimizer.h"
#include "train/model_setup.h"
#include "train/optimizer_step.h"
#include "train/step.h"

/* The shared tiny model with two layers, the non-qwen3 one a qwen2 (attention biases). */
static tt_model_config tiny_config(bool qwen3) {
    tt_model_config c = tt_test_tiny_config(qwen3);
    if (!qwen3) snprintf(c.model_type, sizeof c.model_type, "%s", "qwen2");
    c.num_layers = 2;
    return c;
}

static void open_model(tt_model_state *s, bool qwen3, const tt_trainable_spec *spec) {
    tt_model_config config = tiny_config(qwen3);
    tt_run_config run;
    tt_run_config_defaults(&run);
    run.micro_batch_size = 2;
    run.sequence_len = 6;
    const tt_precision fp32 = tt_precision_for_run(&run, false);
    tt_plan plan;
    tt_plan_from_config(&plan, &run, &config, TT_TIER_HOST, &fp32);
    tt_run_config_free(&run);
    tt_model_state_init_trainable(s, &config, &plan, spec, tt_test_cpu_backend(), 0);
    tt_rng rng;
    tt_rng_seed(&rng, 8);
    for (int64_t i = 0; i < 12; i++) {
        s->batch_inputs[i] = (int32_t)(tt_rng_next(&rng) % 50);
        s->batch_targets[i] = (int32_t)(tt_rng_next(&rng) % 50);
    }
}

static char *scratch_path(const char *name) { return tt_test_path(name); }

static void merge_bad(void *arg) {
    char *base = scratch_path("base"), *out = scratch_path("merged_bad");
    mkdir(out, 0755);
    tt_lora_merge(base, arg, out, 0);
    free(base);
    free(out);
}

static void check_round_trip(bool qwen3) {
    const tt_trainable_spec spec = {
        .lora_rank = 3, .lora_alpha = 5, .lora_targets = TT_LORA_SEPARATE_MODULES & ~(1u << TT_LORA_K)};
    tt_model_state s;
    open_model(&s, qwen3, &spec);
    tt_weights_init_random(s.weights, &s.params, 0.2, 4);
    /* a few AdamW steps, so that B is no longer zero */
    const tt_adamw_settings adamw = {.beta1 = 0.9f, .beta2 = 0.999f, .epsilon = 1e-8f};
    int64_t count = 0;
    for (int step = 1; step <= 3; step++) {
        tt_backend_zero(s.backend, s.gradients, s.sizes.gradients);
        tt_step_forward_backward(&s, 1.0 / 12, &count);
        tt_adamw_step(&s, &adamw, 2e-2f, step, 1.0f);
    }
    const double adapted_loss = tt_step_forward_loss(&s, &count);

    char *base = scratch_path("base"), *adapter = scratch_path("adapter"), *merged = scratch_path("merged");
    mkdir(base, 0755);
    mkdir(adapter, 0755);
    mkdir(merged, 0755);
    tt_weights_save_hf(s.weights, &s.params, &s.config, TT_F32, base, 0, NULL);
    tt_lora_save_peft((const float *)s.weights + s.params.trainable_start, &s.params, TT_F32, "some/base", adapter);

    /* the files */
    char path[4200];
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", adapter);
    tt_st_file f;
    tt_st_open(path, &f);
    TT_EXPECT(f.count == 2 * 2 * 6, "%d adapter tensors: 2 layers x 6 modules x (A, B)", f.count);
    const tt_st_tensor *a = tt_st_find(&f, "base_model.model.model.layers.1.mlp.down_proj.lora_A.weight");
    const tt_st_tensor *b = tt_st_find(&f, "base_model.model.model.layers.0.self_attn.o_proj.lora_B.weight");
    TT_EXPECT(a && a->dtype == TT_F32 && a->shape[0] == 3 && a->shape[1] == 40, "down_proj's A is F32 [3, 40]");
    TT_EXPECT(b && b->shape[0] == 24 && b->shape[1] == 3, "o_proj's B is [24, 3]");
    TT_EXPECT(!tt_st_find(&f, "base_model.model.model.layers.0.self_attn.k_proj.lora_A.weight"), "k_proj not adapted");
    tt_st_close(&f);
    snprintf(path, sizeof path, "%s/model.safetensors", base);
    tt_st_open(path, &f);
    bool base_only = true;
    for (int i = 0; i < f.count; i++) base_only = base_only && strstr(f.tensors[i].name, "lora_") == NULL;
    TT_EXPECT(base_only, "the Hugging Face save holds the base model only");
    tt_st_close(&f);
    snprintf(path, sizeof path, "%s/adapter_config.json", adapter);
    json_error_t error;
    json_t *config = json_load_file(path, 0, &error);
    TT_EXPECT(config && strcmp(json_string_value(json_object_get(config, "peft_type")), "LORA") == 0 &&
                  json_integer_value(json_object_get(config, "r")) == 3 &&
                  json_integer_value(json_object_get(config, "lora_alpha")) == 5 &&
                  strcmp(json_string_value(json_object_get(config, "task_type")), "CAUSAL_LM") == 0 &&
                  strcmp(json_string_value(json_object_get(config, "bias")), "none") == 0 &&
                  json_is_false(json_object_get(config, "fan_in_fan_out")) &&
                  json_is_false(json_object_get(config, "use_rslora")) &&
                  strcmp(json_string_value(json_object_get(config, "base_model_name_or_path")), "some/base") == 0 &&
                  json_array_size(json_object_get(config, "target_modules")) == 6,
              "adapter_config.json has PEFT's fields");
    json_decref(config);

    /* merged: W + (5/3) B A; the loss of the full model equals the adapted one's */
    tt_lora_merge(base, adapter, merged, 0);
    tt_model_state full;
    open_model(&full, qwen3, NULL);
    tt_weights_load_hf(full.weights, &full.params, base);
    const double base_loss = tt_step_forward_loss(&full, &count);
    tt_weights_load_hf(full.weights, &full.params, merged);
    const double merged_loss = tt_step_forward_loss(&full, &count);
    TT_EXPECT(fabs(merged_loss - adapted_loss) <= 1e-5 * fabs(adapted_loss) && fabs(base_loss - adapted_loss) > 1e-4,
              "merged loss %.9g, adapted loss %.9g, base loss %.9g (qwen3 %d)", merged_loss, adapted_loss, base_loss,
              qwen3);

    /* bad adapters */
    char *bad = scratch_path("bad");
    mkdir(bad, 0755);
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", adapter);
    char cmd[9000];
    snprintf(cmd, sizeof cmd, "cp '%s' '%s/'", path, bad);
    TT_EXPECT(system(cmd) == 0, "copy the adapter");
    tt_test_write_text("bad/adapter_config.json",
                       "{\"peft_type\": \"LORA\", \"r\": 3, \"lora_alpha\": 5, \"use_dora\": true}");
    tt_expect_die(merge_bad, bad, "use_dora is true");
    tt_test_write_text("bad/adapter_config.json", "{\"peft_type\": \"PREFIX_TUNING\"}");
    tt_expect_die(merge_bad, bad, "peft_type is PREFIX_TUNING");
    tt_test_write_text("bad/adapter_config.json", "{\"peft_type\": \"LORA\", \"r\": 3, \"lora_alpha\": 5, "
                                                  "\"fan_in_fan_out\": true}");
    tt_expect_die(merge_bad, bad, "fan_in_fan_out is true");
    tt_test_write_text("bad/adapter_config.json", "{\"peft_type\": \"LORA\", \"r\": 3}");
    tt_expect_die(merge_bad, bad, "lora_alpha must be a number");
    char *nowhere = scratch_path("nowhere");
    tt_expect_die(merge_bad, nowhere, "cannot read the adapter's config");
    free(nowhere);
    free(bad);
    free(base);
    free(adapter);
    free(merged);
    tt_model_state_free(&s);
    tt_model_state_free(&full);
}

int main(void) {
    tt_test_scratch_open("lora-files");
    check_round_trip(false);
    check_round_trip(true);
    tt_test_scratch_close();
    return tt_test_summary("lora_files");
}
