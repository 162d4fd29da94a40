/* The routers' auxiliary load-balancing loss of a mixture of experts (output_router_logits): its gradient with
 * respect to the routers' weights against central finite differences of the loss tiertrain reports (the
 * cross-entropy's mean + router_aux_loss_coef x the auxiliary loss), on the Qwen3-MoE fixture with a large
 * coefficient; and the auxiliary term's share of that gradient (coefficient 0.5 against 0) against the finite
 * differences of the auxiliary loss alone. The loss itself follows transformers' load_balancing_loss_func
 * (train/step.c: finish_router_statistics); tools/make_golden_fixtures.py --only tiny_qwen3_moe_aux makes the
 * transformers golden this test does not have yet. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "config/run_translation.h"
#include "memory/plan.h"
#include "model/safetensors.h"
#include "model/weights.h"
#include "test_backend.h"
#include "test_util.h"
#include "train/model_setup.h"
#include "train/step.h"

typedef struct moe_run {
    tt_model_state s;
    int64_t count;
} moe_run;

static void open_run(moe_run *r, const char *source_dir, double coef) {
    char dir[4096], path[4200];
    snprintf(dir, sizeof dir, "%s/tests/fixtures/tiny_qwen3_moe", source_dir);
    snprintf(path, sizeof path, "%s/config.json", dir);
    tt_model_config config;
    tt_model_config_load(path, &config);
    config.output_router_logits = coef > 0;
    config.router_aux_loss_coef = coef;
    snprintf(path, sizeof path, "%s/golden.safetensors", dir);
    tt_st_file golden;
    tt_st_open(path, &golden);
    const tt_st_tensor *ids = tt_st_find(&golden, "input_ids"), *labels = tt_st_find(&golden, "labels");
    const int64_t B = ids->shape[0], T = ids->shape[1];
    tt_run_config run;
    tt_run_config_defaults(&run);
    run.micro_batch_size = B;
    run.sequence_len = T;
    tt_plan plan;
    const tt_precision fp32 = tt_precision_for_run(&run, false);
    tt_plan_from_config(&plan, &run, &config, TT_TIER_HOST, &fp32);
    tt_run_config_free(&run);
    tt_model_state_init(&r->s, &config, &plan, tt_test_cpu_backend(), 0);
    tt_weights_load_hf(r->s.weights, &r->s.params, dir);
    const int32_t *in = ids->data, *lab = labels->data;
    r->count = 0;
    for (int64_t i = 0; i < B * T; i++) {
        r->s.batch_inputs[i] = in[i];
        r->s.batch_targets[i] = i % T + 1 < T ? lab[i + 1] : TT_IGNORE_INDEX;
        r->count += r->s.batch_targets[i] != TT_IGNORE_INDEX;
    }
    tt_st_close(&golden);
}

/* The loss as the trainer reports it; the gradients of the run's weights into s.gradients (zeroed first). aux: the
 * auxiliary loss alone. */
static double loss_of(moe_run *r, double *aux) {
    memset(r->s.gradients, 0, r->s.sizes.gradients);
    int64_t counted = 0;
    const double ce = tt_step_forward_backward(&r->s, 1.0 / (double)r->count, &counted) / (double)counted;
    *aux = r->s.moe_expert_tokens ? r->s.moe_aux_loss : 0;
    return ce + r->s.config.router_aux_loss_coef * *aux;
}

int main(int argc, char **argv) {
    const char *source_dir = argc > 1 ? argv[1] : ".";
    moe_run with, without;
    open_run(&with, source_dir, 0.5);
    open_run(&without, source_dir, 0.0);
    double aux = 0, none = 0;
    const double loss = loss_of(&with, &aux);
    (void)loss_of(&without, &none);
    TT_EXPECT(aux > 0 && isfinite(loss), "the auxiliary loss is there: %.9g", aux);
    /* E x sum_e f_e P_e is 1 for a perfectly even routing and at most E (4): the tiny model's lies between */
    TT_EXPECT(aux >= 0.9 && aux <= 4.0, "the auxiliary loss %.6g is within its range", aux);
    const size_t bytes = with.s.sizes.gradients;
    float *grad_with = malloc(bytes), *grad_without = malloc(bytes);
    memcpy(grad_with, with.s.gradients, bytes);
    memcpy(grad_without, without.s.gradients, bytes);
    int checked = 0;
    for (int64_t l = 0; l < with.s.config.num_layers; l++) {
        const tt_param_info *router = tt_param_table_find(&with.s.params, TT_PARAM_ROUTER, l);
        for (int64_t element = 0; element < router->numel; element += 13) {
            float *w = (float *)with.s.weights + router->offset + element;
            const float original = *w, h = 1e-3f;
            double aux_up, aux_down;
            *w = original + h;
            const double up = loss_of(&with, &aux_up);
            *w = original - h;
            const double down = loss_of(&with, &aux_down);
            *w = original;
            const int64_t at = router->offset - with.s.params.trainable_start + element;
            const double numeric = (up - down) / (2.0 * (double)h), analytic = grad_with[at];
            const double aux_numeric = 0.5 * (aux_up - aux_down) / (2.0 * (double)h);
            const double aux_analytic = (double)grad_with[at] - (double)grad_without[at];
            TT_EXPECT(fabs(numeric - analytic) <= 2e-2 * fabs(numeric) + 2e-4,
                      "layer %lld router element %lld: gradient %.6g, finite differences %.6g", (long long)l,
                      (long long)element, analytic, numeric);
            TT_EXPECT(fabs(aux_numeric - aux_analytic) <= 5e-2 * fabs(aux_numeric) + 2e-4,
                      "layer %lld router element %lld: the auxiliary share %.6g, its finite differences %.6g",
                      (long long)l, (long long)element, aux_analytic, aux_numeric);
            checked++;
        }
    }
    TT_EXPECT(checked >= 10, "%d router weights checked", checked);
    free(grad_with);
    free(grad_without);
    tt_model_state_free(&with.s);
    tt_model_state_free(&without.s);
    return tt_test_summary("moe_aux_loss");
}
