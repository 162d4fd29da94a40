/* `make test-gpu`, the whole model: the step program on the CUDA backend against the same
 * program on the CPU backend (the fp32 oracle), from the same bf16-representable weights and
 * batch. Checks, per fixture and precision recipe: loss and every parameter gradient within
 * bf16 bounds; a multi-step AdamW loss curve that follows the CPU's; gradient checkpointing
 * bit-identical to keeping everything; two runs bit-identical. The same for LoRA adapters (with
 * dropout: both backends draw the same masks) on the frozen bf16 base, for packed documents
 * (sample_packing: several documents of different lengths per sequence, padding after them), and for QLoRA (that
 * base's linear weights quantized to NF4 with double quantization, dequantized next to each GEMM: bf16 of the CPU's
 * fp32 values).
 * Every family's tiny fixture runs these checks.
 *   test_gpu_model SOURCE_DIR [--qlora-only]   (--qlora-only: the QLoRA checks of the fixtures alone) */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "config/run_translation.h"
#include "core/dtype.h"
#include "core/rng.h"
#include "memory/plan.h"
#include "model/arch.h"
#include "model/quant4.h"
#include "model/safetensors.h"
#include "model/weights.h"
#include "ops/cuda/backend_cuda.h"
#include "test_util.h"
#include "train/optimizer.h"
#include "train/model_setup.h"
#include "train/optimizer_step.h"
#include "train/step.h"

#define STEPS 8

typedef struct model_case {
    const char *name;
    char config_path[4200];
    int64_t batch, seq_len;
    int64_t attn_workspace_limit; /* 0: auto */
    int32_t *inputs, *targets;    /* [batch * seq_len] */
    int32_t *positions;           /* [batch * seq_len] each token's position in its document (sample_packing) or
                                     NULL */
} model_case;

typedef struct run_result {
    double loss[STEPS];     /* mean token loss before each optimizer step */
    float *first_gradients; /* fp32 copy of the gradients of step 1 (the trainable layout) */
    float *final_weights;   /* fp32 weights after STEPS steps */
    int64_t numel;          /* of the weights */
    int64_t gradient_numel; /* of the gradients: the trainable parameters' */
    int attention_lanes;    /* the most head groups cuDNN's attention backward ran at once (GPU) */
} run_result;

typedef struct recipe {
    const char *name;
    bool gpu, master_weights, checkpointing;
    tt_attention_kind attention;
    bool lora;                 /* rank-4 adapters with dropout on every linear layer, the base frozen */
    int64_t mlp_shards;        /* tiled_mlp over this many shards (0: untiled) */
    int activation_offloading; /* index in false|true|legacy|disk|hidden_states (with checkpointing) */
    bool qlora;                /* with lora: the base's linear weights in 4 bits (NF4, double quantization) */
} recipe;

/* Rank-4 adapters with dropout on every linear layer the model has (all-linear: Phi-3's fused layers, the others'
 * separate projections). */
static tt_trainable_spec lora_spec_for(const tt_model_config *config) {
    return (tt_trainable_spec){
        .lora_rank = 4, .lora_alpha = 8, .lora_dropout = 0.1, .lora_targets = tt_arch_lora_modules(config)};
}

static float *rounded_weights(const char *config_path, tt_model_config *config, tt_param_table *params, bool lora) {
    tt_model_config_load(config_path, config);
    const tt_trainable_spec lora_spec = lora_spec_for(config);
    tt_param_table_build_trainable(config, lora ? &lora_spec : NULL, params);
    float *w = calloc((size_t)params->total_numel, sizeof(float)); /* padding between parameters: 0 */
    tt_weights_init_random(w, params, 0.05, 1234);
    for (int i = 0; i < params->count; i++) /* B != 0, so that every adapter gradient is exercised */
        if (params->params[i].kind == TT_PARAM_LORA_B)
            for (int64_t k = 0; k < params->params[i].numel; k++)
                w[params->params[i].offset + k] = 0.02f * (float)((k % 7) - 3);
    /* Every weight bf16-representable, so that both backends start from the same model. */
    for (int64_t i = 0; i < params->total_numel; i++) w[i] = tt_bf16_to_f32(tt_f32_to_bf16(w[i]));
    return w;
}

/* QLoRA's weights: those of the LoRA table (plain, whose layout weights has) in q's layout, each 4-bit weight the
 * bf16 value quantized, as a bf16 base is at load; the two tables list the same parameters in the same order. */
static float *quantized_flat(const float *weights, const tt_param_table *plain, const tt_param_table *q) {
    float *flat = calloc((size_t)q->total_numel, sizeof(float));
    for (int i = 0; i < q->count; i++) {
        const tt_param_info *qp = &q->params[i], *pp = &plain->params[i];
        if (qp->quantized) tt_quant4_quantize(flat + qp->offset, weights + pp->offset, qp->numel, &q->quant_format);
        else memcpy(flat + qp->offset, weights + pp->offset, sizeof(float) * (size_t)qp->numel);
    }
    return flat;
}

/* A model state of the case's shape for the recipe, with the case's weights and batch loaded. */
/* The backends the recipes run on: one CPU and one CUDA backend for the whole program (the two-backend
 * check makes a second CUDA backend of its own). */
static tt_backend *cpu_backend, *gpu_backend;

static const tt_backend *backend_for(const recipe *r) { return r->gpu ? gpu_backend : cpu_backend; }

static void open_model_on(tt_model_state *s, const model_case *mc, const recipe *r, tt_precision *precision,
                          const tt_backend *backend) {
    tt_model_config config;
    tt_param_table params;
    float *weights = rounded_weights(mc->config_path, &config, &params, r->lora);
    tt_run_config run_config;
    tt_run_config_defaults(&run_config);
    run_config.micro_batch_size = mc->batch;
    run_config.sequence_len = mc->seq_len;
    run_config.loss_chunk_size = 40; /* several chunks, the last one short */
    run_config.gradient_checkpointing = r->checkpointing;
    run_config.master_weights = r->master_weights;
    run_config.attn_implementation = (int)r->attention;
    run_config.tiled_mlp = r->mlp_shards > 0;
    run_config.tiled_mlp_num_shards = r->mlp_shards;
    run_config.attn_workspace_limit = mc->attn_workspace_limit;
    run_config.activation_offloading = r->activation_offloading;
    run_config.sample_packing = mc->positions != NULL;
    *precision = tt_precision_for_run(&run_config, r->gpu);
    tt_plan plan;
    tt_plan_from_config(&plan, &run_config, &config, backend->compute_tier, precision);
    const tt_trainable_spec lora_spec = lora_spec_for(&config);
    tt_trainable_spec qlora_spec = lora_spec;
    qlora_spec.quantize_base = true;
    qlora_spec.quant_format = (tt_quant4_format){.type = TT_QUANT4_NF4, .double_quant = true};
    qlora_spec.quant_storage_elem = plan.weight_bytes;
    tt_model_state_init_trainable(s, &config, &plan, r->qlora ? &qlora_spec : r->lora ? &lora_spec : NULL, backend, 0);
    s->lora_dropout_seed = tt_lora_dropout_seed(5, 0, 0);
    if (r->qlora) {
        float *quantized = quantized_flat(weights, &params, &s->params);
        free(weights);
        weights = quantized;
    }
    tt_model_set_weights(s, weights);
    tt_model_set_batch(s, mc->inputs, mc->targets);
    if (mc->positions) tt_model_set_positions(s, mc->positions);
    free(weights);
    tt_param_table_free(&params);
    tt_run_config_free(&run_config);
}

static void open_model(tt_model_state *s, const model_case *mc, const recipe *r, tt_precision *precision) {
    open_model_on(s, mc, r, precision, backend_for(r));
}

/* One run of the recipe, a step at a time (so that two runs can take turns). */
typedef struct runner {
    tt_model_state s;
    tt_precision precision;
    run_result out;
} runner;

static void runner_open(runner *run, const model_case *mc, const recipe *r, const tt_backend *backend) {
    open_model_on(&run->s, mc, r, &run->precision, backend);
    run->out = (run_result){.numel = run->s.params.total_numel, .gradient_numel = run->s.params.trainable_numel};
    run->out.first_gradients = malloc(sizeof(float) * (size_t)run->out.gradient_numel);
    run->out.final_weights = malloc(sizeof(float) * (size_t)run->out.numel);
}

static void runner_step(runner *run, const model_case *mc, int step) {
    tt_model_state *s = &run->s;
    const tt_backend *backend = s->backend;
    const tt_adamw_settings adamw = {
        .beta1 = 0.9f, .beta2 = 0.999f, .epsilon = 1e-8f, .weight_decay = 0.01f, .max_grad_norm = 1.0f};
    tt_backend_zero(backend, s->gradients, s->sizes.gradients);
    int64_t count = 0;
    int64_t tokens = 0;
    for (int64_t i = 0; i < mc->batch * mc->seq_len; i++) tokens += mc->targets[i] != TT_IGNORE_INDEX;
    double loss = tt_step_forward_backward(s, 1.0 / (double)tokens, &count);
    run->out.loss[step] = loss / (double)count;
    if (step == 0) {
        void *g = malloc(s->sizes.gradients);
        tt_backend_download(backend, g, s->gradients, s->sizes.gradients);
        tt_convert_to_f32(run->out.first_gradients, g, run->precision.gradient, (size_t)run->out.gradient_numel);
        free(g);
    }
    double norm = tt_gradient_norm(s);
    tt_adamw_step(s, &adamw, 3e-3f, step + 1, tt_clip_scale(norm, adamw.max_grad_norm));
}

static run_result runner_close(runner *run, const recipe *r) {
    tt_model_get_weights(&run->s, run->out.final_weights);
    if (r->gpu) run->out.attention_lanes = tt_backend_cuda_attention_most_lanes(run->s.backend);
    tt_model_state_free(&run->s);
    return run->out;
}

static run_result run(const model_case *mc, const recipe *r) {
    runner one;
    runner_open(&one, mc, r, backend_for(r));
    for (int step = 0; step < STEPS; step++) runner_step(&one, mc, step);
    return runner_close(&one, r);
}

static void free_result(run_result *r) {
    free(r->first_gradients);
    free(r->final_weights);
}

/* Same bits; on a difference, says where it starts (loss, first-step gradient, final weight). */
static bool same_bits(const run_result *a, const run_result *b) {
    for (int step = 0; step < STEPS; step++)
        if (memcmp(&a->loss[step], &b->loss[step], sizeof(double)) != 0) {
            printf("    losses differ first at step %d: %.17g vs %.17g\n", step + 1, a->loss[step], b->loss[step]);
            break;
        }
    for (int64_t i = 0; i < a->gradient_numel; i++)
        if (memcmp(&a->first_gradients[i], &b->first_gradients[i], sizeof(float)) != 0) {
            printf("    first-step gradients differ first at flat element %lld: %.9g vs %.9g\n", (long long)i,
                   a->first_gradients[i], b->first_gradients[i]);
            break;
        }
    return memcmp(a->loss, b->loss, sizeof a->loss) == 0 &&
           memcmp(a->first_gradients, b->first_gradients, sizeof(float) * (size_t)a->gradient_numel) == 0 &&
           memcmp(a->final_weights, b->final_weights, sizeof(float) * (size_t)a->numel) == 0;
}

static const char *param_at(const tt_param_table *params, int64_t element) {
    for (int i = 0; i < params->count; i++)
        if (element >= params->params[i].offset && element < params->params[i].offset + params->params[i].numel)
            return params->params[i].name;
    return "(padding)";
}

/* The step alone, twice on one model state: forward losses and gradients bit-identical. When
 * they are not, names the first parameter whose gradient differs (a race or an uninitialised
 * read in some kernel shows up here, without the optimizer in the way). */
static void check_step_repeats(const model_case *mc, const recipe *r) {
    tt_model_state s;
    tt_precision precision;
    open_model(&s, mc, r, &precision);
    const tt_backend *backend = s.backend;
    int64_t count = 0;
    double forward[2], loss[2];
    float *grads[2];
    for (int k = 0; k < 2; k++) {
        forward[k] = tt_step_forward_loss(&s, &count);
        tt_backend_zero(backend, s.gradients, s.sizes.gradients);
        loss[k] = tt_step_forward_backward(&s, 1e-2, &count);
        void *g = malloc(s.sizes.gradients);
        tt_backend_download(backend, g, s.gradients, s.sizes.gradients);
        grads[k] = malloc(sizeof(float) * (size_t)s.params.trainable_numel);
        tt_convert_to_f32(grads[k], g, precision.gradient, (size_t)s.params.trainable_numel);
        free(g);
    }
    TT_EXPECT(memcmp(&forward[0], &forward[1], sizeof(double)) == 0, "%s %s: forward loss repeats (%.17g vs %.17g)",
              mc->name, r->name, forward[0], forward[1]);
    TT_EXPECT(memcmp(&loss[0], &loss[1], sizeof(double)) == 0, "%s %s: training-step loss repeats (%.17g vs %.17g)",
              mc->name, r->name, loss[0], loss[1]);
    int64_t first = -1;
    for (int64_t i = 0; i < s.params.trainable_numel && first < 0; i++)
        if (memcmp(&grads[0][i], &grads[1][i], sizeof(float)) != 0) first = s.params.trainable_start + i;
    TT_EXPECT(first < 0, "%s %s: the step's gradients repeat bit for bit (first difference in %s: %.9g vs %.9g)",
              mc->name, r->name, first >= 0 ? param_at(&s.params, first) : "",
              first >= 0 ? grads[0][first - s.params.trainable_start] : 0.0,
              first >= 0 ? grads[1][first - s.params.trainable_start] : 0.0);
    free(grads[0]);
    free(grads[1]);
    tt_model_state_free(&s);
}

/* The GPU against the CPU: loss and gradients of the first step, and the loss curve. */
static void compare_with_cpu(const model_case *mc, const recipe *r, const run_result *gpu, const run_result *cpu) {
    const double loss_err = fabs(gpu->loss[0] - cpu->loss[0]) / fabs(cpu->loss[0]);
    /* bf16 activations against fp32; QLoRA adds the bf16 rounding of every dequantized weight the GEMMs read (the CPU
     * computes with its fp32 values): Gemma 3's unit-scale q/k norms put its adapters' gradients at 5.2e-2 there */
    const double gradient_bound = r->qlora ? 7.5e-2 : 5e-2;
    TT_EXPECT(loss_err <= 1e-2, "%s %s: loss %.6f vs CPU %.6f", mc->name, r->name, gpu->loss[0], cpu->loss[0]);
    tt_model_config config;
    tt_param_table params;
    float *unused = rounded_weights(mc->config_path, &config, &params, r->lora);
    double worst = 0;
    const char *worst_name = "";
    for (int i = 0; i < params.count; i++) {
        const tt_param_info *p = &params.params[i];
        if (!p->trainable) continue;
        const int64_t at = p->offset - params.trainable_start;
        double err = tt_max_rel_error_f32(gpu->first_gradients + at, cpu->first_gradients + at, (size_t)p->numel);
        if (!(err <= worst)) {
            worst = err;
            worst_name = p->name;
        }
        TT_EXPECT(err <= gradient_bound, "%s %s: gradient of %s differs from the CPU by %.3g relative", mc->name,
                  r->name, p->name, err);
    }
    double curve = 0;
    for (int step = 0; step < STEPS; step++) {
        /* against the starting loss: late in the curve the loss is small and bf16 steps move it */
        double e = fabs(gpu->loss[step] - cpu->loss[step]) / fabs(cpu->loss[0]);
        if (e > curve) curve = e;
    }
    TT_EXPECT(curve <= 2e-2, "%s %s: the loss curve leaves the CPU's by %.3g relative", mc->name, r->name, curve);
    TT_EXPECT(gpu->loss[STEPS - 1] < gpu->loss[0], "%s %s: the loss falls (%.4f -> %.4f)", mc->name, r->name,
              gpu->loss[0], gpu->loss[STEPS - 1]);
    printf("  %-12s %-28s loss %.5f (cpu %.5f, rel %.1e); worst gradient %-38s %.2e; curve %.1e; %.4f -> %.4f\n",
           mc->name, r->name, gpu->loss[0], cpu->loss[0], loss_err, worst_name, worst, curve, gpu->loss[0],
           gpu->loss[STEPS - 1]);
    free(unused);
    tt_param_table_free(&params);
    tt_model_config_free(&config);
}

static int64_t config_vocab(const char *config_path) {
    tt_model_config config;
    tt_model_config_load(config_path, &config);
    const int64_t vocab = config.vocab_size;
    tt_model_config_free(&config);
    return vocab;
}

/* A Qwen3 config at head_dim 128 (intermediate 512, vocab 512, tied embeddings) written to the scratch folder as
 * file, mc's config_path set to it. */
static void write_qwen3_config(model_case *mc, const char *file, int hidden, int layers, int heads, int kv_heads,
                               int max_positions) {
    char text[1024];
    snprintf(text, sizeof text,
             "{\"model_type\": \"qwen3\", \"hidden_size\": %d, \"intermediate_size\": 512, \"num_hidden_layers\": %d,"
             " \"num_attention_heads\": %d, \"num_key_value_heads\": %d, \"head_dim\": 128, \"vocab_size\": 512,"
             " \"rms_norm_eps\": 1e-6, \"rope_theta\": 1000000, \"tie_word_embeddings\": true,"
             " \"max_position_embeddings\": %d, \"torch_dtype\": \"bfloat16\"}",
             hidden, layers, heads, kv_heads, max_positions);
    tt_test_write_text(file, text);
    char *path = tt_test_path(file);
    snprintf(mc->config_path, sizeof mc->config_path, "%s", path);
    free(path);
}

static void random_batch(model_case *mc, int64_t vocab, uint64_t seed) {
    tt_rng rng;
    tt_rng_seed(&rng, seed);
    const int64_t N = mc->batch * mc->seq_len;
    mc->inputs = malloc(sizeof(int32_t) * (size_t)N);
    mc->targets = malloc(sizeof(int32_t) * (size_t)N);
    for (int64_t i = 0; i < N; i++) mc->inputs[i] = (int32_t)(tt_rng_next(&rng) % (uint64_t)vocab);
    for (int64_t i = 0; i < N; i++) {
        /* next-token targets within each sequence, a few masked */
        bool last = (i + 1) % mc->seq_len == 0;
        mc->targets[i] = last || i % 11 == 3 ? TT_IGNORE_INDEX : mc->inputs[i + 1];
    }
}

static void check_case(model_case *mc) {
    const recipe cpu = {"cpu fp32", false, true, false, TT_ATTENTION_AUTO, false, 0, 0, false};
    const recipe recipes[] = {
        {"bf16, fp32 master", true, true, false, TT_ATTENTION_AUTO, false, 0, 0, false},
        {"bf16, no master", true, false, false, TT_ATTENTION_AUTO, false, 0, 0, false},
        {"bf16, simple attention", true, true, false, TT_ATTENTION_SIMPLE, false, 0, 0, false},
    };
    run_result reference = run(mc, &cpu);
    for (size_t i = 0; i < sizeof recipes / sizeof *recipes; i++) {
        run_result gpu = run(mc, &recipes[i]);
        compare_with_cpu(mc, &recipes[i], &gpu, &reference);
        check_step_repeats(mc, &recipes[i]);
        if (i == 0) {
            run_result again = run(mc, &recipes[i]);
            TT_EXPECT(same_bits(&gpu, &again), "%s: two GPU runs give the same bits", mc->name);
            free_result(&again);
            recipe checkpointed = recipes[i];
            checkpointed.checkpointing = true;
            run_result gc = run(mc, &checkpointed);
            TT_EXPECT(same_bits(&gpu, &gc), "%s: gradient checkpointing gives the same bits on the GPU", mc->name);
            free_result(&gc);
        }
        free_result(&gpu);
    }
    free_result(&reference);

    /* LoRA on the frozen base: the GPU against the CPU (same dropout masks), repeats, checkpointing */
    const recipe cpu_lora = {"cpu fp32 LoRA", false, true, false, TT_ATTENTION_AUTO, true, 0, 0, false};
    const recipe lora_recipes[] = {
        {"bf16 LoRA, fp32 master", true, true, false, TT_ATTENTION_AUTO, true, 0, 0, false},
        {"bf16 LoRA, no master", true, false, false, TT_ATTENTION_AUTO, true, 0, 0, false},
    };
    run_result lora_reference = run(mc, &cpu_lora);
    for (size_t i = 0; i < sizeof lora_recipes / sizeof *lora_recipes; i++) {
        run_result gpu = run(mc, &lora_recipes[i]);
        compare_with_cpu(mc, &lora_recipes[i], &gpu, &lora_reference);
        check_step_repeats(mc, &lora_recipes[i]);
        recipe checkpointed = lora_recipes[i];
        checkpointed.checkpointing = true;
        run_result gc = run(mc, &checkpointed);
        TT_EXPECT(same_bits(&gpu, &gc), "%s %s: gradient checkpointing gives the same bits on the GPU", mc->name,
                  lora_recipes[i].name);
        free_result(&gc);
        free_result(&gpu);
    }
    free_result(&lora_reference);

    /* tiled_mlp (3 shards): the GPU against the CPU's tiled run, and checkpointing the same bits */
    const recipe tiled_recipes[][2] = {
        {{"cpu fp32 tiled MLP", false, true, false, TT_ATTENTION_AUTO, false, 3, 0, false},
         {"bf16 tiled MLP, fp32 master", true, true, false, TT_ATTENTION_AUTO, false, 3, 0, false}},
        {{"cpu fp32 LoRA tiled MLP", false, true, false, TT_ATTENTION_AUTO, true, 3, 0, false},
         {"bf16 LoRA tiled MLP, no master", true, false, false, TT_ATTENTION_AUTO, true, 3, 0, false}},
    };
    for (size_t i = 0; i < sizeof tiled_recipes / sizeof *tiled_recipes; i++) {
        run_result tiled_reference = run(mc, &tiled_recipes[i][0]);
        run_result gpu = run(mc, &tiled_recipes[i][1]);
        compare_with_cpu(mc, &tiled_recipes[i][1], &gpu, &tiled_reference);
        recipe checkpointed = tiled_recipes[i][1];
        checkpointed.checkpointing = true;
        run_result gc = run(mc, &checkpointed);
        TT_EXPECT(same_bits(&gpu, &gc), "%s %s: gradient checkpointing gives the same bits on the GPU", mc->name,
                  tiled_recipes[i][1].name);
        free_result(&gc);
        free_result(&gpu);
        free_result(&tiled_reference);
    }
    free(mc->inputs);
    free(mc->targets);
}

/* QLoRA on the case: the GPU against the CPU within the bf16 LoRA bounds (the same 4-bit bytes on both; the GPU
 * GEMMs read bf16 of the CPU's fp32 dequantized values), the step repeating, two runs and gradient checkpointing the
 * same bits. */
static void check_qlora(const model_case *mc) {
    const recipe cpu = {"cpu fp32 QLoRA", false, true, false, TT_ATTENTION_AUTO, true, 0, 0, true};
    const recipe gpu_recipe = {
        "bf16 QLoRA nf4+dq, fp32 master", true, true, false, TT_ATTENTION_AUTO, true, 0, 0, true};
    run_result reference = run(mc, &cpu);
    run_result gpu = run(mc, &gpu_recipe);
    compare_with_cpu(mc, &gpu_recipe, &gpu, &reference);
    check_step_repeats(mc, &gpu_recipe);
    run_result again = run(mc, &gpu_recipe);
    TT_EXPECT(same_bits(&gpu, &again), "%s %s: two GPU runs give the same bits", mc->name, gpu_recipe.name);
    recipe checkpointed = gpu_recipe;
    checkpointed.checkpointing = true;
    run_result gc = run(mc, &checkpointed);
    TT_EXPECT(same_bits(&gpu, &gc), "%s %s: gradient checkpointing gives the same bits on the GPU", mc->name,
              gpu_recipe.name);
    free_result(&gc);
    free_result(&again);
    free_result(&gpu);
    free_result(&reference);
}

/* cuDNN's deterministic attention backward (attn_implementation: cudnn) over head groups and chunks of keys, two
 * groups at a time and more in the dead layer inputs above a layer where they stay on the GPU: within bounds of the
 * CPU, and the same bits keeping everything, with checkpointing and with the inputs offloaded (hidden_states: no
 * spare lanes). Then tiertrain's own kernels at this head_dim 128 shape (the pipelined ones): within bounds of the
 * CPU, and the same bits kept, checkpointed and offloaded. */
static void check_chunked_case(model_case *mc) {
    const recipe cpu = {"cpu fp32", false, true, false, TT_ATTENTION_AUTO, false, 0, 0, false};
    const recipe keep = {
        "bf16, fp32 master, cuDNN key chunks in lanes", true, true, false, TT_ATTENTION_CUDNN, false, 0, 0, false};
    recipe checkpointed = keep, offloaded = keep;
    checkpointed.checkpointing = offloaded.checkpointing = true;
    offloaded.activation_offloading = TT_OFFLOAD_HIDDEN_STATES;
    run_result reference = run(mc, &cpu);
    run_result gpu = run(mc, &keep);
    compare_with_cpu(mc, &keep, &gpu, &reference);
    run_result gc = run(mc, &checkpointed), moved = run(mc, &offloaded);
    const int lanes_keep = gpu.attention_lanes, lanes_gc = gc.attention_lanes, lanes_moved = moved.attention_lanes;
    printf("%s: most head groups at once: %d keeping everything, %d checkpointed, %d with hidden_states\n", mc->name,
           lanes_keep, lanes_gc, lanes_moved);
    TT_EXPECT(lanes_keep > 2 && lanes_gc > 2 && lanes_moved == 2,
              "%s: 2 head groups at once in the workspace, more in the dead layer inputs where they stay on the GPU "
              "(got %d, %d, %d)",
              mc->name, lanes_keep, lanes_gc, lanes_moved);
    TT_EXPECT(same_bits(&gpu, &gc), "%s: checkpointing (spare attention lanes) gives the same bits", mc->name);
    TT_EXPECT(same_bits(&gpu, &moved), "%s: hidden_states offload (no spare lanes) gives the same bits", mc->name);
    free_result(&moved);
    free_result(&gc);
    free_result(&gpu);

    const recipe own = {
        "bf16, fp32 master, flash (pipelined kernels)", true, true, false, TT_ATTENTION_FLASH, false, 0, 0, false};
    recipe own_gc = own, own_moved = own;
    own_gc.checkpointing = own_moved.checkpointing = true;
    own_moved.activation_offloading = TT_OFFLOAD_HIDDEN_STATES;
    run_result own_run = run(mc, &own), own_gc_run = run(mc, &own_gc), own_moved_run = run(mc, &own_moved);
    compare_with_cpu(mc, &own, &own_run, &reference);
    TT_EXPECT(own_run.attention_lanes == 0, "%s: flash runs no cuDNN head groups (got %d)", mc->name,
              own_run.attention_lanes);
    TT_EXPECT(same_bits(&own_run, &own_gc_run), "%s: flash, checkpointing gives the same bits", mc->name);
    TT_EXPECT(same_bits(&own_run, &own_moved_run), "%s: flash, hidden_states offload gives the same bits", mc->name);
    free_result(&own_moved_run);
    free_result(&own_gc_run);
    free_result(&own_run);
    free_result(&reference);
}

/* From 128k tokens auto's attention is the pipelined kernels both ways (cuDNN's forward falls behind there): the same
 * bits as flash, kept and with the attention recomputed under checkpointing. No CPU run: at this length it would take
 * hours; the kernels are checked against the CPU in test_gpu_attention. */
static void check_long_auto_case(model_case *mc) {
    const recipe automatic = {"bf16, fp32 master, auto", true, true, false, TT_ATTENTION_AUTO, false, 0, 0, false};
    const recipe own = {"bf16, fp32 master, flash", true, true, false, TT_ATTENTION_FLASH, false, 0, 0, false};
    recipe checkpointed = automatic;
    checkpointed.checkpointing = true;
    run_result auto_run = run(mc, &automatic), own_run = run(mc, &own), gc_run = run(mc, &checkpointed);
    TT_EXPECT(isfinite(auto_run.loss[0]) && isfinite(auto_run.loss[STEPS - 1]) &&
                  auto_run.loss[STEPS - 1] < auto_run.loss[0],
              "%s: auto trains (loss %.6f then %.6f)", mc->name, auto_run.loss[0], auto_run.loss[STEPS - 1]);
    TT_EXPECT(same_bits(&auto_run, &own_run), "%s: auto at %lld tokens gives flash's bits (the pipelined forward too)",
              mc->name, (long long)mc->seq_len);
    TT_EXPECT(same_bits(&auto_run, &gc_run), "%s: auto, checkpointing gives the same bits", mc->name);
    printf("  %-12s auto at %lld tokens: flash's bits, kept and checkpointed (loss %.6f then %.6f)\n", mc->name,
           (long long)mc->seq_len, auto_run.loss[0], auto_run.loss[STEPS - 1]);
    free_result(&gc_run);
    free_result(&own_run);
    free_result(&auto_run);
}

/* A packed batch: sequence b holds documents of lengths[b][0..], one after another from its first token
 * (0 ends the list), then padding (input 0, no target, positions counting from 0 where it starts). A
 * document's targets are its next tokens (the last has none), a few masked. */
static void packed_batch(model_case *mc, int64_t vocab, uint64_t seed, const int lengths[][8]) {
    tt_rng rng;
    tt_rng_seed(&rng, seed);
    const int64_t N = mc->batch * mc->seq_len;
    mc->inputs = malloc(sizeof(int32_t) * (size_t)N);
    mc->targets = malloc(sizeof(int32_t) * (size_t)N);
    mc->positions = malloc(sizeof(int32_t) * (size_t)N);
    for (int64_t b = 0; b < mc->batch; b++) {
        int64_t t = 0;
        for (int d = 0; d < 8 && lengths[b][d] > 0; d++)
            for (int k = 0; k < lengths[b][d]; k++, t++) {
                const int64_t n = b * mc->seq_len + t;
                mc->inputs[n] = 1 + (int32_t)(tt_rng_next(&rng) % (uint64_t)(vocab - 1));
                mc->positions[n] = k;
                mc->targets[n] = TT_IGNORE_INDEX; /* the next token's, below */
                if (k > 0 && n % 11 != 3) mc->targets[n - 1] = mc->inputs[n];
            }
        TT_CHECK(t <= mc->seq_len, "the documents of sequence %lld fit in it", (long long)b);
        for (int64_t k = 0; t < mc->seq_len; t++, k++) {
            const int64_t n = b * mc->seq_len + t;
            mc->inputs[n] = 0;
            mc->targets[n] = TT_IGNORE_INDEX;
            mc->positions[n] = (int32_t)k;
        }
    }
}

/* Packed documents, each attending only to itself (the attention kernels' document boundaries, RoPE at each
 * token's position): the GPU within the bf16 bounds of the CPU's packed run, the step repeating bit for bit,
 * two runs and gradient checkpointing bit-identical. (On the CPU a packed batch is its documents run one by one
 * bit for bit: tests/test_packing_exact.c.) */
static void check_packed_case(model_case *mc) {
    const recipe cpu = {"cpu fp32 packed", false, true, false, TT_ATTENTION_AUTO, false, 0, 0, false};
    const recipe recipes[] = {
        {"bf16 packed, fp32 master", true, true, false, TT_ATTENTION_AUTO, false, 0, 0, false},
        {"bf16 packed, simple attention", true, true, false, TT_ATTENTION_SIMPLE, false, 0, 0, false},
    };
    run_result reference = run(mc, &cpu);
    for (size_t i = 0; i < sizeof recipes / sizeof *recipes; i++) {
        run_result gpu = run(mc, &recipes[i]);
        compare_with_cpu(mc, &recipes[i], &gpu, &reference);
        check_step_repeats(mc, &recipes[i]);
        run_result again = run(mc, &recipes[i]);
        TT_EXPECT(same_bits(&gpu, &again), "%s %s: two GPU runs give the same bits", mc->name, recipes[i].name);
        free_result(&again);
        recipe checkpointed = recipes[i];
        checkpointed.checkpointing = true;
        run_result gc = run(mc, &checkpointed);
        TT_EXPECT(same_bits(&gpu, &gc), "%s %s: gradient checkpointing gives the same bits on the GPU", mc->name,
                  recipes[i].name);
        free_result(&gc);
        free_result(&gpu);
    }
    free_result(&reference);
    free(mc->inputs);
    free(mc->targets);
    free(mc->positions);
    mc->positions = NULL;
}

/* Two CUDA backends on device 0 in one process, each prepared for its own run (other attention
 * kernels, other number formats), taking turns step by step, with size queries for other settings
 * asked of both in between: each run gives the bits it gives alone on the program's one backend. */
static void check_two_backends(model_case *mc) {
    const recipe first = {
        "bf16, fp32 master (auto attention)", true, true, false, TT_ATTENTION_AUTO, false, 0, 0, false};
    const recipe second = {
        "bf16, no master, simple attention", true, false, false, TT_ATTENTION_SIMPLE, false, 0, 0, false};
    run_result alone_first = run(mc, &first), alone_second = run(mc, &second);
    tt_backend *other = tt_backend_cuda_create(0);
    runner a, b;
    runner_open(&a, mc, &first, gpu_backend);
    runner_open(&b, mc, &second, other);
    /* queries for a plan neither run has: a 1 MiB attention workspace limit (cuDNN plans of their own) */
    const tt_backend_settings hypothetical = {
        .precision = b.precision, .attention = TT_ATTENTION_AUTO, .attention_workspace_limit = (size_t)1 << 20};
    const size_t workspace = tt_backend_attention_workspace_bytes(gpu_backend, &hypothetical, &a.s.attention[0]);
    for (int step = 0; step < STEPS; step++) {
        runner_step(&a, mc, step);
        TT_EXPECT(tt_backend_attention_workspace_bytes(other, &hypothetical, &b.s.attention[0]) == workspace &&
                      tt_backend_attention_workspace_bytes(gpu_backend, &hypothetical, &a.s.attention[0]) == workspace,
                  "%s: a size query gives the same answer on either backend, every time", mc->name);
        runner_step(&b, mc, step);
    }
    run_result together_first = runner_close(&a, &first), together_second = runner_close(&b, &second);
    TT_EXPECT(same_bits(&alone_first, &together_first), "%s %s: the same bits beside a second backend", mc->name,
              first.name);
    TT_EXPECT(same_bits(&alone_second, &together_second), "%s %s: the same bits on a second backend", mc->name,
              second.name);
    printf("  %-12s two CUDA backends, turn by turn: %s and %s match their runs alone\n", mc->name, first.name,
           second.name);
    tt_backend_destroy(other);
    free_result(&together_first);
    free_result(&together_second);
    free_result(&alone_first);
    free_result(&alone_second);
}

int main(int argc, char **argv) {
    const char *source_dir = argc > 1 ? argv[1] : ".";
    char name[128];
    size_t free_bytes, total_bytes;
    if (!tt_cuda_device_query(0, name, sizeof name, &free_bytes, &total_bytes)) {
        fprintf(stderr, "test_gpu_model: no CUDA GPU\n");
        return 1;
    }
    printf("GPU: %s\n", name);
    cpu_backend = tt_backend_cpu_create(0);
    gpu_backend = tt_backend_cuda_create(0);
    const bool qlora_only = argc > 2 && strcmp(argv[2], "--qlora-only") == 0;
    /* the families' fixtures: Gemma 3's and Gemma 2's sliding and full layers (two attention shapes in one run),
     * soft-capping and sandwich norms; OLMo 2's post-norms; SmolLM3's layers without RoPE; Granite's multipliers;
     * Phi-3's fused projections and LongRoPE */
    const char *fixtures[] = {"tiny_qwen3", "tiny_llama",   "tiny_qwen2",   "tiny_gemma3", "tiny_gemma2",
                              "tiny_olmo2", "tiny_smollm3", "tiny_granite", "tiny_phi3"};
    for (size_t i = 0; i < sizeof fixtures / sizeof *fixtures; i++) {
        model_case mc = {.name = fixtures[i], .batch = 2, .seq_len = 48};
        snprintf(mc.config_path, sizeof mc.config_path, "%s/tests/fixtures/%s/config.json", source_dir, fixtures[i]);
        tt_model_config config;
        tt_model_config_load(mc.config_path, &config);
        random_batch(&mc, config.vocab_size, 77 + i);
        tt_model_config_free(&config);
        if (qlora_only) {
            check_qlora(&mc);
            free(mc.inputs);
            free(mc.targets);
            continue;
        }
        if (i == 0) check_two_backends(&mc);
        check_qlora(&mc);
        check_case(&mc);
        if (i == 0) {
            /* documents of 13, 1 and 22 tokens, then 12 of padding; of 29, 2 and 15, then 2 */
            const int lengths[2][8] = {{13, 1, 22}, {29, 2, 15}};
            model_case packed = {.name = "tiny_qwen3 packed", .batch = 2, .seq_len = 48};
            snprintf(packed.config_path, sizeof packed.config_path, "%s", mc.config_path);
            packed_batch(&packed, config_vocab(mc.config_path), 177, lengths);
            check_packed_case(&packed);
        }
    }
    if (qlora_only) {
        tt_backend_destroy(gpu_backend);
        tt_backend_destroy(cpu_backend);
        return tt_test_summary("gpu_model");
    }
    /* Qwen3 shapes at head_dim 128, where the fused attention kernels run. */
    tt_test_scratch_open("gpu-model");
    model_case qwen3 = {.name = "qwen3-hd128", .batch = 1, .seq_len = 384};
    write_qwen3_config(&qwen3, "config.json", 256, 2, 4, 2, 4096);
    random_batch(&qwen3, 512, 99);
    check_two_backends(&qwen3); /* cuDNN's plans on the first backend, the reference kernels on the second */
    check_case(&qwen3);
    /* packed at head_dim 128: tiertrain's wgmma kernels with document boundaries (auto), and the reference kernels;
     * documents of 97, 1, 150 and 77 tokens, then 59 of padding */
    const int qwen3_lengths[1][8] = {{97, 1, 150, 77}};
    model_case qwen3_packed = {.name = "qwen3-hd128 packed", .batch = 1, .seq_len = 384};
    snprintf(qwen3_packed.config_path, sizeof qwen3_packed.config_path, "%s", qwen3.config_path);
    packed_batch(&qwen3_packed, 512, 199, qwen3_lengths);
    check_packed_case(&qwen3_packed);
    /* 8 heads of 128, 4 kv heads, 4 layers, 1024 tokens under a 1 MiB dP limit: 4 head groups x 6 key
     * chunks (128 to 256 keys), 2 groups at a time, a third in the layer inputs above the lowest layers */
    model_case chunked = {
        .name = "qwen3-hd128-key-chunks", .batch = 1, .seq_len = 1024, .attn_workspace_limit = (int64_t)1 << 20};
    write_qwen3_config(&chunked, "config_chunked.json", 512, 4, 8, 4, 4096);
    random_batch(&chunked, 512, 101);
    check_chunked_case(&chunked);
    free(chunked.inputs);
    free(chunked.targets);
    /* 131072 tokens, the shortest where auto takes the pipelined forward */
    model_case long_case = {.name = "qwen3-hd128-128k", .batch = 1, .seq_len = 131072};
    write_qwen3_config(&long_case, "config_long.json", 256, 2, 4, 2, 131072);
    random_batch(&long_case, 512, 103);
    check_long_auto_case(&long_case);
    free(long_case.inputs);
    free(long_case.targets);
    tt_test_scratch_close();
    tt_backend_destroy(gpu_backend);
    tt_backend_destroy(cpu_backend);
    return tt_test_summary("gpu_model");
}
