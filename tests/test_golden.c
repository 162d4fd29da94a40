/* Golden test against transformers: tiny Qwen3, Llama (llama3 RoPE scaling), Qwen2 (attention bias), Gemma 3
 * (sliding and full layers, RoPE per layer type, GeGLU, sandwich norms), Gemma 2 (soft-capping), OLMo 2 (post-norms),
 * SmolLM3 (a layer without RoPE) and Granite (multipliers) fixtures made by tools/make_golden_fixtures.py in float64,
 * and Gemma 3's language model read from a Gemma3ForConditionalGeneration checkpoint. The CPU backend's loss and every
 * parameter gradient match to 1e-5 relative, and one AdamW step matches torch.optim.AdamW. Gradient checkpointing
 * gives the same bits. */
#include <stdlib.h>
#include <string.h>

#include "memory/plan.h"
#include "config/run_translation.h"
#include "model/safetensors.h"
#include "model/weights.h"
#include "ops/backend.h"
#include "test_backend.h"
#include "test_util.h"
#include "train/optimizer.h"
#include "train/model_setup.h"
#include "train/optimizer_step.h"
#include "train/step.h"

static double metadata_number(const char *path, const char *key) {
    /* The golden file's __metadata__ is read through its raw header: small and trusted. */
    FILE *f = fopen(path, "rb");
    uint64_t n = 0;
    if (!f || fread(&n, 8, 1, f) != 1) return NAN;
    char *header = calloc(n + 1, 1);
    size_t got = fread(header, 1, n, f);
    fclose(f);
    header[got] = 0;
    char needle[64];
    snprintf(needle, sizeof needle, "\"%s\":", key);
    char *p = strstr(header, needle);
    double value = NAN;
    if (p) {
        p += strlen(needle);
        while (*p == ' ' || *p == '"') p++;
        value = strtod(p, NULL);
    }
    free(header);
    return value;
}

static const tt_st_tensor *need(const tt_st_file *f, const char *name) {
    const tt_st_tensor *t = tt_st_find(f, name);
    if (!t) {
        fprintf(stderr, "%s: missing tensor %s\n", f->path, name);
        exit(1);
    }
    return t;
}

/* The golden tensor of a parameter: its name with the prefix a checkpoint nests the language model under stripped
 * (tiny_gemma3_multimodal's language_model., against tiny_gemma3's golden). */
static const char *golden_name(const char *name, const char *strip) {
    const size_t n = strlen(strip);
    return strncmp(name, strip, n) == 0 ? name + n : name;
}

/* golden: the fixture whose golden.safetensors holds the reference (the fixture itself, or the model nested in it) */
static void run_fixture_against(const char *source_dir, const char *name, const char *golden_fixture, const char *strip,
                                bool checkpointing, float **grads_out, size_t *grad_bytes) {
    char dir[4096], path[4200];
    snprintf(dir, sizeof dir, "%s/tests/fixtures/%s", source_dir, name);
    snprintf(path, sizeof path, "%s/config.json", dir);
    tt_model_config config;
    tt_model_config_load(path, &config);

    snprintf(path, sizeof path, "%s/tests/fixtures/%s/golden.safetensors", source_dir, golden_fixture);
    tt_st_file golden;
    tt_st_open(path, &golden);
    const tt_st_tensor *ids = need(&golden, "input_ids"), *labels = need(&golden, "labels");
    TT_EXPECT(ids->dtype == TT_I32 && ids->ndim == 2, "%s: input_ids must be I32 [B, T]", name);
    const int64_t B = ids->shape[0], T = ids->shape[1];

    tt_run_config run;
    tt_run_config_defaults(&run);
    run.micro_batch_size = B;
    run.sequence_len = T;
    run.loss_chunk_size = 5; /* several chunks, the last one short */
    run.gradient_checkpointing = checkpointing;
    tt_plan plan;
    const tt_precision fp32 = tt_precision_for_run(&run, false);
    tt_plan_from_config(&plan, &run, &config, TT_TIER_HOST, &fp32);
    tt_model_state s;
    tt_model_state_init(&s, &config, &plan, tt_test_cpu_backend(), 0);
    tt_weights_load_hf(s.weights, &s.params, dir);

    const int32_t *in = ids->data, *lab = labels->data;
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++) {
            s.batch_inputs[b * T + t] = in[b * T + t];
            /* transformers shifts labels inside the loss: position t predicts labels[t + 1] */
            s.batch_targets[b * T + t] = t + 1 < T ? lab[b * T + t + 1] : TT_IGNORE_INDEX;
        }
    int64_t count = 0;
    for (int64_t i = 0; i < B * T; i++) count += s.batch_targets[i] != TT_IGNORE_INDEX;
    int64_t counted = 0;
    double loss = tt_step_forward_backward(&s, 1.0 / (double)count, &counted) / (double)counted;
    /* a mixture of experts with output_router_logits: transformers' loss adds the routers' auxiliary loss */
    if (s.moe_expert_tokens) loss += s.config.router_aux_loss_coef * s.moe_aux_loss;
    const double golden_loss = *(const double *)need(&golden, "loss")->data;
    TT_EXPECT(fabs(loss - golden_loss) <= 1e-5 * fabs(golden_loss), "%s: loss %.9g, transformers %.9g", name, loss,
              golden_loss);

    char key[200];
    for (int i = 0; i < s.params.count; i++) {
        const tt_param_info *p = &s.params.params[i];
        snprintf(key, sizeof key, "grad.%s", golden_name(p->name, strip));
        const tt_st_tensor *g = need(&golden, key);
        TT_EXPECT(g->dtype == TT_F32 && (int64_t)(g->bytes / 4) == p->numel, "%s: %s shape", name, key);
        double err = tt_max_rel_error_f32((const float *)s.gradients + p->offset, g->data, (size_t)p->numel);
        TT_EXPECT(err <= 1e-5, "%s: gradient of %s differs from transformers by %.3g relative", name, p->name, err);
    }

    /* One AdamW step with the fixture's settings (no clipping), on torch's own gradients: the
     * optimizer is tested here, not the backward again (AdamW's first step, m / sqrt(v), is
     * +-1 for any gradient well above eps, so an element whose gradient is ~0 would turn a
     * 1e-11 difference in the backward into a visible difference in the weights). */
    tt_adamw_settings adamw = {
        .beta1 = (float)metadata_number(path, "beta1"),
        .beta2 = (float)metadata_number(path, "beta2"),
        .epsilon = (float)metadata_number(path, "eps"),
        .weight_decay = (float)metadata_number(path, "weight_decay"),
        .max_grad_norm = 0,
    };
    float lr = (float)metadata_number(path, "lr");
    TT_EXPECT(isfinite(lr) && lr > 0 && adamw.beta2 > 0, "%s: AdamW settings in the golden metadata", name);
    *grad_bytes = s.sizes.gradients;
    *grads_out = malloc(*grad_bytes);
    memcpy(*grads_out, s.gradients, *grad_bytes);
    for (int i = 0; i < s.params.count; i++) {
        const tt_param_info *p = &s.params.params[i];
        snprintf(key, sizeof key, "grad.%s", golden_name(p->name, strip));
        memcpy((float *)s.gradients + p->offset, need(&golden, key)->data, sizeof(float) * (size_t)p->numel);
    }
    tt_adamw_step(&s, &adamw, lr, 1, 1.0f);
    for (int i = 0; i < s.params.count; i++) {
        const tt_param_info *p = &s.params.params[i];
        snprintf(key, sizeof key, "adamw.%s", golden_name(p->name, strip));
        const tt_st_tensor *w = need(&golden, key);
        double err = tt_max_rel_error_f32((const float *)s.weights + p->offset, w->data, (size_t)p->numel);
        TT_EXPECT(err <= 1e-5, "%s: %s after one AdamW step differs from torch by %.3g relative", name, p->name, err);
    }
    tt_st_close(&golden);
    tt_model_state_free(&s);
    tt_run_config_free(&run);
}

static void run_fixture(const char *source_dir, const char *name, bool checkpointing, float **grads_out,
                        size_t *grad_bytes) {
    run_fixture_against(source_dir, name, name, "", checkpointing, grads_out, grad_bytes);
}

int main(int argc, char **argv) {
    const char *source_dir = argc > 1 ? argv[1] : ".";
    const char *fixtures[] = {"tiny_qwen3", "tiny_llama",   "tiny_qwen2",   "tiny_gemma3", "tiny_gemma2",
                              "tiny_olmo2", "tiny_smollm3", "tiny_granite", "tiny_phi3",   "tiny_qwen3_moe"};
    for (size_t i = 0; i < sizeof fixtures / sizeof *fixtures; i++) {
        float *plain = NULL, *checkpointed = NULL;
        size_t plain_bytes = 0, checkpointed_bytes = 0;
        run_fixture(source_dir, fixtures[i], false, &plain, &plain_bytes);
        run_fixture(source_dir, fixtures[i], true, &checkpointed, &checkpointed_bytes);
        TT_EXPECT(plain_bytes == checkpointed_bytes && memcmp(plain, checkpointed, plain_bytes) == 0,
                  "%s: gradient checkpointing changed the gradients", fixtures[i]);
        free(plain);
        free(checkpointed);
    }
    /* Gemma 3's language model inside a Gemma3ForConditionalGeneration checkpoint (its text config under text_config,
     * its weights under language_model.model.) is tiny_gemma3's model: tiny_gemma3's golden */
    float *nested = NULL;
    size_t nested_bytes = 0;
    run_fixture_against(source_dir, "tiny_gemma3_multimodal", "tiny_gemma3", "language_model.", false, &nested,
                        &nested_bytes);
    free(nested);
    return tt_test_summary("golden");
}
