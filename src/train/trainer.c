#include "train/trainer.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/check.h"
#include "core/hf_cache.h"
#include "config/run_translation.h"
#include "core/host_memory.h"
#include "core/trace.h"
#include "memory/attention_offload.h"
#include "memory/disk_store.h"
#include "memory/size_table.h"
#include "memory/free_keep.h"
#include "memory/residency.h"
#include "memory/spill.h"
#include "model/lora.h"
#include "model/weights.h"
#include "train/checkpoint.h"
#include "ops/op_profile.h"
#include "train/flops.h"
#include "train/data.h"
#include "train/measure.h"
#include "train/model_card.h"
#include "train/optimizer.h"
#include "train/optimizer_offload.h"
#include "train/prepare.h"
#include "train/report.h"
#include "train/report_html.h"
#include "train/schedule.h"
#include "train/model_setup.h"
#include "train/optimizer_step.h"
#include "train/step.h"
#include "train/streamed_save.h"
#include "train/data_parallel.h"

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* CPU time of every thread of the process: on a shared machine the wall time of the load says little */
static double process_cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void tt_load_model_config_for_run(const tt_run_config *run, tt_model_config *model) {
    const char *source = run->base_model ? run->base_model : run->model_config;
    char path[4096];
    struct stat st;
    if (run->base_model) tt_hf_check_path(source, TT_HF_MODEL, run->revision_of_model, "base_model");
    if (stat(source, &st) != 0)
        tt_die("%s '%s' does not exist", run->base_model ? "base_model" : "model_config", source);
    if (S_ISDIR(st.st_mode)) snprintf(path, sizeof path, "%s/config.json", source);
    else snprintf(path, sizeof path, "%s", source);
    tt_model_config_load(path, model);
    const tt_model_quantization *q = &model->quantization;
    /* a bitsandbytes 4-bit base: which linear weights it keeps in float (llm_int8_skip_modules), from its tensors */
    if (run->base_model && S_ISDIR(st.st_mode) && q->present && strcmp(q->method, "bitsandbytes") == 0 &&
        q->load_in_4bit && !q->load_in_8bit)
        tt_weights_find_float_linear(model, run->base_model);
}

/* What trains, in one line: everything, some parts frozen, or LoRA adapters on a frozen base. */
static void print_trainable(const tt_param_table *params, FILE *out) {
    int64_t frozen = 0, trainable = 0, float_linear = 0;
    for (int i = 0; i < params->count; i++) {
        const tt_param_info *p = &params->params[i];
        *(p->trainable ? &trainable : &frozen) += p->numel;
        float_linear += params->quantized && tt_param_kind_is_linear_weight(p->kind) && !p->quantized;
    }
    if (params->lora_rank > 0) {
        fprintf(out, "training: LoRA adapters, rank %lld, alpha %g (scaling %g), dropout %g, on",
                (long long)params->lora_rank, params->lora_alpha, params->lora_scaling, params->lora_dropout);
        for (int m = 0; m < TT_LORA_MODULE_COUNT; m++)
            if ((params->lora_targets >> m) & 1u) fprintf(out, " %s", tt_lora_module_name((tt_lora_module)m));
        if (params->lora_modules_to_save)
            fprintf(out, ", and %s%s%s trained whole (lora_modules_to_save)",
                    params->lora_modules_to_save & TT_SAVE_EMBED_TOKENS ? "embed_tokens" : "",
                    params->lora_modules_to_save == (TT_SAVE_EMBED_TOKENS | TT_SAVE_LM_HEAD) ? " and " : "",
                    params->lora_modules_to_save & TT_SAVE_LM_HEAD ? "lm_head" : "");
        fprintf(out, ": %.3fM trainable parameters, the %.2fM of the base frozen%s\n", (double)trainable / 1e6,
                (double)frozen / 1e6,
                !params->quantized                           ? ""
                : params->quant_format.type == TT_QUANT_INT8 ? " (load_in_8bit: linear weights in 8 bits, absmax "
                                                               "blocks of 64)"
                : params->quant_format.type == TT_QUANT4_NF4
                    ? (params->quant_format.double_quant
                           ? " (QLoRA: linear weights in 4-bit NF4, double-quantized absmax)"
                           : " (QLoRA: linear weights in 4-bit NF4)")
                : params->quant_format.double_quant ? " (QLoRA: linear weights in 4-bit FP4, double-quantized absmax)"
                                                    : " (QLoRA: linear weights in 4-bit FP4)");
        if (float_linear)
            fprintf(out,
                    "training: %lld linear weight(s) of the base stay in its float dtype, as its checkpoint keeps "
                    "them (llm_int8_skip_modules)\n",
                    (long long)float_linear);
    } else if (frozen > 0) {
        fprintf(out, "training: %.2fM of %.2fM parameters (%.2fM frozen: no gradient, no optimizer state)\n",
                (double)trainable / 1e6, (double)(trainable + frozen) / 1e6, (double)frozen / 1e6);
    }
}

/* The FLOPs a token MFU and HFU count (train/flops.h), and the peak they divide by. */
static void print_flops(const tt_model_config *m, const tt_param_table *params, const tt_plan *plan,
                        const tt_device *device, FILE *out) {
    const tt_step_flops flops = tt_step_flops_of(m, params, plan);
    const double peak = tt_dense_bf16_peak_flops(device->description);
    fprintf(out, "flops: %.4g GFLOP a token (the model's: MFU), %.4g GFLOP with this plan's recompute (HFU); ",
            flops.model_per_token / 1e9, flops.hardware_per_token / 1e9);
    if (peak > 0) fprintf(out, "against the GPU's dense bf16 peak of %.0f TFLOP/s\n", peak / 1e12);
    else if (device->backend->compute_tier != TT_TIER_GPU) fprintf(out, "no MFU on the CPU\n");
    else fprintf(out, "no MFU: this GPU's dense bf16 peak is not in tiertrain's table (train/flops.c)\n");
}

static void print_header(const tt_model_config *m, const tt_param_table *params, const tt_device *device,
                         const tt_plan *plan, const tt_size_table *sizes, FILE *out) {
    char mlp[96];
    if (m->num_experts > 0)
        snprintf(mlp, sizeof mlp, "%lld experts of %lld (%lld a token)", (long long)m->num_experts,
                 (long long)m->moe_intermediate_size, (long long)m->num_experts_per_tok);
    else snprintf(mlp, sizeof mlp, "MLP %lld", (long long)m->intermediate_size);
    fprintf(out, "model: %s, %lld layers, hidden %lld, %lld heads (%lld kv) x %lld, %s, vocab %lld, %.2fM parameters\n",
            m->model_type, (long long)m->num_layers, (long long)m->hidden_size, (long long)m->num_heads,
            (long long)m->num_kv_heads, (long long)m->head_dim, mlp, (long long)m->vocab_size,
            (double)tt_model_config_param_count(m) / 1e6);
    print_trainable(params, out);
    fprintf(out, "device: %s\n", device->description);
    print_flops(m, params, plan, device, out);
    tt_plan_print(plan, m, out);
    tt_size_table_print_layers(sizes, plan, m, out);
    tt_size_table_print_weight_offload(sizes, plan, params, out);
    tt_size_table_print_optimizer(sizes, plan, params, out);
    tt_size_table_print_moments_8bit(sizes, plan, params, out);
    tt_residency_map residency;
    tt_residency_build(&residency, params, plan, sizes);
    fprintf(out, "  where the trainable parameters live (optimizer units):\n");
    tt_residency_print(&residency, plan, sizes, out);
    tt_residency_free(&residency);
    tt_size_table_print(sizes, out, NULL);
}

/* What MFU and HFU count (train/flops.h). */
static void set_utilization(tt_reporter *reporter, const tt_model_state *model, const tt_device *device, int devices) {
    const tt_step_flops flops = tt_step_flops_of(&model->config, &model->params, &model->plan);
    reporter->model_flops_per_token = flops.model_per_token;
    reporter->hardware_flops_per_token = flops.hardware_per_token;
    reporter->peak_flops = tt_dense_bf16_peak_flops(device->description);
    reporter->devices = devices;
}

static tt_tier compute_tier_of(const tt_device *device) { return device->backend->compute_tier; }

/* Sizes a key sets that only make sense next to the model: refused before anything is priced
 * or allocated (a rank of a million on a model of width 16 once ran for minutes). */
/* A base saved in bitsandbytes' 4-bit format trains as QLoRA with its 4-bit weights as they are: LoRA on a bf16 base and
 * full fine-tuning would need the original weights, which the checkpoint no longer has (dequantized ones carry the
 * quantization error into every update, and take four times the memory), so both are refused, as PEFT refuses to
 * fine-tune a purely quantized model. */
static void check_quantized_base(const tt_run_config *run, const tt_model_config *model) {
    const tt_model_quantization *q = &model->quantization;
    if (!run->base_model || !q->present) return;
    char source[4200];
    snprintf(source, sizeof source, "%s/config.json", run->base_model);
    tt_model_config_check_quantization(model, source);
    if (run->adapter != TT_ADAPTER_QLORA)
        tt_die("base_model %s is saved in bitsandbytes' 4-bit format (config.json's quantization_config), so it trains "
               "with adapter: qlora and load_in_4bit: true (its 4-bit weights are used as they are); %s would need the "
               "weights in bf16, which this checkpoint no longer has: train from the original model for that",
               run->base_model, run->adapter == TT_ADAPTER_LORA ? "adapter: lora" : "full fine-tuning (adapter: ~)");
    const bool fp4 = run->bnb_4bit_quant_type == TT_BNB_FP4;
    if (run->bnb_key_given &&
        ((q->format.type == TT_QUANT4_FP4) != fp4 || q->format.double_quant != run->bnb_4bit_use_double_quant))
        tt_warn("base_model %s is saved in 4 bits as %s%s; its format is used, not bnb_4bit_quant_type: %s, "
                "bnb_4bit_use_double_quant: %s (as transformers uses a checkpoint's own quantization_config)",
                run->base_model, q->format.type == TT_QUANT4_FP4 ? "fp4" : "nf4",
                q->format.double_quant ? " with double quantization" : " without double quantization",
                fp4 ? "fp4" : "nf4", run->bnb_4bit_use_double_quant ? "true" : "false");
}

/* Ulysses: every process a whole number of each sequence's tokens, of the query heads and of the kv heads */
static void check_sequence_parallel(const tt_run_config *run, const tt_model_config *model) {
    const int64_t sp = run->sequence_parallel_degree;
    if (sp <= 1) return;
    if (run->sequence_len % sp != 0)
        tt_die("sequence_len %lld is not divisible by sequence_parallel_degree %lld: each process holds an equal share "
               "of a sequence's tokens; choose a sequence_len that is a multiple of it",
               (long long)run->sequence_len, (long long)sp);
    if (model->num_heads % sp != 0 || model->num_kv_heads % sp != 0)
        tt_die("the model has %lld attention heads and %lld key/value heads, not both divisible by "
               "sequence_parallel_degree %lld: each process attends with an equal share of them; use a degree that "
               "divides %lld",
               (long long)model->num_heads, (long long)model->num_kv_heads, (long long)sp,
               (long long)model->num_kv_heads);
}

static void check_run_against_model(const tt_run_config *run, const tt_model_config *model) {
    check_quantized_base(run, model);
    check_sequence_parallel(run, model);
    if (run->adapter == TT_ADAPTER_LORA) {
        int64_t widest = model->hidden_size > model->intermediate_size ? model->hidden_size : model->intermediate_size;
        if (model->num_heads * model->head_dim > widest) widest = model->num_heads * model->head_dim;
        if (run->lora_r > widest)
            tt_die("lora_r %lld is more than the widest layer of the model (%lld); a rank above a layer's smaller "
                   "dimension adds nothing: lower lora_r",
                   (long long)run->lora_r, (long long)widest);
    }
}

bool tt_selective_auto_applies(const tt_run_config *run) {
    const bool megatron_activations = run->cpu_offloading && run->cpu_offloading_activations;
    return run->selective_auto && !megatron_activations &&
           (run->activation_offloading == TT_OFFLOAD_NONE || run->activation_offloading == TT_OFFLOAD_HIDDEN_STATES);
}

void tt_plan_for_run(tt_plan *plan, const tt_run_config *run, const tt_model_config *model, const tt_device *device,
                     bool report) {
    check_run_against_model(run, model);
    const tt_precision precision = tt_precision_for_run(run, compute_tier_of(device) == TT_TIER_GPU);
    tt_plan_from_config(plan, run, model, compute_tier_of(device), &precision);
    plan->data_parallel_ranks = device->data_parallel_ranks;
    plan->data_parallel_rank = device->data_parallel_rank;
    plan->sequence_parallel_rank = device->data_parallel_rank % plan->sequence_parallel;
    plan->offload_dir_processes = device->host_processes;
    plan->pinned_budget = run->host_memory_budget > 0 ? (size_t)run->host_memory_budget
                                                      : tt_host_memory_default_budget(device->host_processes);
    tt_param_table params;
    const tt_trainable_spec trainable = tt_trainable_spec_for_run(run, model, plan->weight_bytes);
    tt_param_table_build_trainable(model, &trainable, &params);
    tt_size_table sizes; /* settles attn_workspace_limit: auto before the spill prices the plan */
    tt_size_table_configure(&sizes, model, &params, plan, device->backend);
    const tt_plan_pricer pricer = tt_step_pricer(model, &params, device->backend);
    const tt_spill_result spill = tt_plan_spill(plan, &pricer, device->memory_budget, plan->pinned_budget);
    if (report && (spill.to_pinned || spill.to_disk || spill.kept_to_pinned || spill.kept_to_disk))
        tt_info("plan: the %s budget is full: %lld layer input(s) spill to pinned host memory and %lld to disk, the "
                "kept activations of %lld layer(s) to pinned host memory and of %lld to disk (offload_dir %s)%s",
                tt_tier_name(plan->compute_tier), (long long)spill.to_pinned, (long long)spill.to_disk,
                (long long)spill.kept_to_pinned, (long long)spill.kept_to_disk, plan->offload_dir,
                spill.fits ? "" : "; still over budget");
    const int64_t kept = tt_plan_keep_free(plan, &pricer);
    if (report && kept > 0)
        tt_info("plan: the top %lld layer(s) keep their attention half from the forward (the LM head's phase leaves "
                "room under the peak): no attention recompute there, the same peak and bits",
                (long long)kept);
    if (tt_selective_auto_applies(run)) {
        const int64_t offloaded = tt_plan_offload_attention(plan, &pricer, device->memory_budget, plan->pinned_budget,
                                                            tt_attention_span(plan, model->sliding_window));
        if (report && offloaded > 0) {
            /* a layer's: the attention output [B, T, Hq / sp, hd] and the fp32 log-sum-exp [B, Hq / sp, T] */
            const size_t rows =
                (size_t)(plan->micro_batch * tt_plan_sequence_len(plan) * (model->num_heads / plan->sequence_parallel));
            const size_t bytes =
                (rows * (size_t)model->head_dim * plan->activation_bytes + rows * sizeof(float)) * (size_t)offloaded;
            char size[32];
            tt_info("plan: %lld checkpointed layer(s) keep their attention output and log-sum-exp in pinned memory "
                    "instead of recomputing the attention (about %s; the same bits; selective_checkpointing: ~ "
                    "recomputes it)",
                    (long long)offloaded, tt_format_bytes(bytes, size, sizeof size));
        }
    }
    tt_param_table_free(&params);
}

static void plan_for_run(tt_plan *plan, const tt_run_config *run, const tt_model_config *model,
                         const tt_device *device) {
    tt_plan_for_run(plan, run, model, device, true);
}

bool tt_print_run_plan(const tt_run_config *run, const tt_device *device, FILE *out) {
    tt_model_config model;
    tt_load_model_config_for_run(run, &model);
    tt_plan plan;
    plan_for_run(&plan, run, &model, device);
    tt_param_table params;
    const tt_trainable_spec trainable = tt_trainable_spec_for_run(run, &model, plan.weight_bytes);
    tt_param_table_build_trainable(&model, &trainable, &params);
    tt_size_table sizes;
    tt_size_table_configure(&sizes, &model, &params, &plan, device->backend);
    print_header(&model, &params, device, &plan, &sizes, out);
    if (model.num_experts > 0 && !device->backend->iface->moe_forward)
        fprintf(out, "note: a mixture of experts trains on the CPU backend only for now: this plan prices the layout, "
                     "`tiertrain train` on this device stops at start\n");
    char budget[32];
    const tt_tier tier = compute_tier_of(device);
    const bool fits = sizes.tier_peak[tier] <= device->memory_budget;
    fprintf(out, "  %s budget: %s (%zu bytes)%s\n", tt_tier_name(tier),
            tt_format_bytes(device->memory_budget, budget, sizeof budget), device->memory_budget,
            fits ? "" : "  (EXCEEDED: training would stop at start)");
    if (!fits) {
        char peak[32];
        fprintf(stderr,
                "tiertrain: error: the plan needs %s of %s but the budget is %s: training would stop at start%s. Lower "
                "sequence_len or micro_batch_size, turn on gradient_checkpointing or activation_offloading, or raise "
                "the budget\n",
                tt_format_bytes(sizes.tier_peak[tier], peak, sizeof peak), tt_tier_name(tier), budget,
                run->device == TT_DEVICE_AUTO && tier != TT_TIER_GPU
                    ? " (device: auto found no GPU, so this is the CPU backend's plan: a GPU run is priced on the GPU "
                      "machine, or with device: cuda there)"
                    : "");
    }
    tt_param_table_free(&params);
    tt_plan_free(&plan);
    tt_model_config_free(&model);
    return fits;
}

/* The start lines of sample packing: documents, the sequences they fill and how full those are. */
/* An epoch's packing efficiency: document tokens over its sequences' tokens. */
static double epoch_packing_efficiency(const tt_dataset *data) {
    const tt_packing_stats *p = &data->packing;
    return p->train_sequences ? (double)p->train_tokens / ((double)p->train_sequences * (double)data->seq_len) : 0.0;
}

static void report_epoch_packing(const tt_dataset *data) {
    tt_info("sample_packing: epoch %lld: %lld training documents packed anew into %lld sequences: packing efficiency "
            "%.1f%%",
            (long long)data->epoch + 1, (long long)data->packing.train_documents,
            (long long)data->packing.train_sequences, 100.0 * epoch_packing_efficiency(data));
}

static void report_packing(const tt_dataset *data, const tt_run_config *run) {
    const tt_packing_stats *p = &data->packing;
    const double T = (double)run->sequence_len;
    const double efficiency = epoch_packing_efficiency(data);
    tt_info("sample_packing: %lld training documents (%lld tokens) packed into %lld sequences of %lld tokens for "
            "epoch %lld (first-fit in the epoch's seeded order, at most %lld documents a sequence, groups of %lld; "
            "packed anew each epoch, as axolotl's multipack sampler): packing efficiency %.1f%%",
            (long long)p->train_documents, (long long)p->train_tokens, (long long)p->train_sequences,
            (long long)run->sequence_len, (long long)data->epoch + 1, (long long)run->sample_packing_bin_size,
            (long long)run->sample_packing_group_size, 100.0 * efficiency);
    if (p->eval_documents)
        tt_info("sample_packing: %lld eval documents packed into %lld sequences (efficiency %.1f%%)",
                (long long)p->eval_documents, (long long)p->eval_sequences,
                100.0 * (double)p->eval_tokens / ((double)p->eval_sequences * T));
    if (p->dropped)
        tt_warn("sample_packing: dropped %lld document(s) of the token files longer than sequence_len %lld "
                "(excess_length_strategy: drop; truncate keeps their first sequence_len tokens)",
                (long long)p->dropped, (long long)run->sequence_len);
    if (p->truncated)
        tt_info("sample_packing: truncated %lld document(s) of the token files to sequence_len %lld",
                (long long)p->truncated, (long long)run->sequence_len);
    if (run->sample_packing_eff_est > 0)
        tt_info("sample_packing_eff_est %.3f: the packing is done before the steps are counted, so the measured "
                "efficiency (%.3f) counts them",
                run->sample_packing_eff_est, efficiency);
    if (!run->pad_to_sequence_len)
        tt_info("pad_to_sequence_len: false: sequences are padded to sequence_len all the same (the buffers are sized "
                "once for it; padding changes no loss or gradient)");
}

/* Runs the held-out sequences through the model; returns the mean token loss. inputs, targets
 * and positions are host buffers of one micro-batch (positions: packed documents only). */
/* The eval loss over every eval sequence; with several processes each takes every N-th micro-batch (rank r the r-th)
 * and the loss sums and token counts are summed in rank order, on every rank. */
static double evaluate(tt_model_state *model, const tt_dataset *data, int32_t *inputs, int32_t *targets,
                       int32_t *positions, const tt_comm *comm, int64_t *tokens_out) {
    const int64_t B = model->plan.micro_batch, T = tt_plan_sequence_len(&model->plan);
    /* data parallel splits the eval micro-batches over the sequence-parallel groups (each rank a group without
     * sequence parallel), whose ranks share each (every rank its tokens) */
    const int64_t sp = model->plan.sequence_parallel;
    const int64_t rank = comm ? comm->rank / sp : 0, ranks = comm ? comm->size / sp : 1;
    double loss_sum = 0;
    int64_t tokens = 0;
    /* every group runs as many micro-batches (one past the data is all padding, adding exactly 0): zero_stage 3's
     * weights come from their owners in collectives every rank takes part in */
    const int64_t rounds = (data->eval_count + ranks * B - 1) / (ranks * B);
    for (int64_t round = 0; round < rounds; round++) {
        const int64_t first = (round * ranks + rank) * B;
        int64_t rows = data->eval_count - first < B ? data->eval_count - first : B;
        if (rows < 0) rows = 0;
        for (int64_t r = 0; r < B; r++) {
            if (r < rows) {
                tt_dataset_get_eval_positions(data, first + r, inputs + r * T, targets + r * T,
                                              positions ? positions + r * T : NULL);
            } else { /* a short last batch: pad with ignored rows */
                for (int64_t t = 0; t < T; t++) {
                    inputs[r * T + t] = 0;
                    targets[r * T + t] = TT_IGNORE_INDEX;
                    if (positions) positions[r * T + t] = (int32_t)t;
                }
            }
        }
        tt_model_set_batch(model, inputs, targets);
        if (positions) tt_model_set_positions(model, positions);
        int64_t count = 0;
        loss_sum += tt_step_forward_loss(model, &count);
        tokens += count;
    }
    if (comm) {
        double sums[2] = {loss_sum, (double)tokens};
        tt_comm_sum_doubles(comm, sums, 2);
        loss_sum = sums[0];
        tokens = (int64_t)sums[1];
    }
    *tokens_out = tokens;
    return tokens ? loss_sum / (double)tokens : NAN;
}

void tt_load_run_weights(tt_model_state *model, const tt_run_config *run) {
    const double started = now_seconds(), started_cpu = process_cpu_seconds();
    /* calloc: the padding between parameters is 0 on the device too */
    float *trainable = tt_xcalloc((size_t)model->params.trainable_numel, sizeof(float), "the trainable weights");
    tt_model_loader loader;
    const tt_weight_sink sink = tt_model_loader_begin(&loader, model, trainable);
    if (run->base_model) {
        tt_weights_load_hf_to(&model->params, run->base_model, &sink);
        tt_weights_init_lora(trainable, &model->params, (uint64_t)run->seed);
    } else {
        double std = run->initializer_range > 0 ? run->initializer_range : model->config.initializer_range;
        tt_weights_init_random_to(&model->params, std, (uint64_t)run->seed, &sink);
    }
    tt_model_loader_end(&loader);
    if (run->lora_model_dir) { /* continue from a saved adapter */
        tt_hf_check_path(run->lora_model_dir, TT_HF_MODEL, NULL, "lora_model_dir");
        tt_lora_check_peft_config(&model->params, run->lora_model_dir);
        tt_lora_load_peft(trainable, &model->params, run->lora_model_dir);
        tt_info("LoRA adapters from %s", run->lora_model_dir);
    }
    tt_model_set_trainable_weights(model, trainable);
    free(trainable);
    tt_info("weights: %s in %.2f s (%.2f s of CPU time)", run->base_model ? "loaded" : "initialised at random",
            now_seconds() - started, process_cpu_seconds() - started_cpu);
}

/* The final model in output_dir: a Hugging Face checkpoint, or with LoRA the adapters in PEFT's format (then only the
 * trainable part crosses to the host). writes false: this rank only takes part in fetching a zero_stage 1 model. */
static void save_final_weights(const tt_model_state *model, const tt_run_config *run, bool writes) {
    if (model->params.lora_rank > 0) {
        float *trainable = tt_xmalloc(tt_mul_size((size_t)model->params.trainable_numel, sizeof(float), "the adapters"),
                                      "the adapters");
        tt_model_get_trainable_weights(model, trainable);
        if (writes)
            tt_lora_save_peft(trainable, &model->params, tt_adapter_dtype(model), tt_run_base_model_name(run),
                              run->output_dir);
        free(trainable);
        return;
    }
    if (tt_model_reads_trainable_ranges(model)) { /* a tensor at a time (with zero_stage, every rank takes part) */
        tt_save_model_streamed(model, run->output_dir, run->max_shard_bytes, run->base_model, writes);
        return;
    }
    float *host =
        tt_xmalloc(tt_mul_size((size_t)model->params.total_numel, sizeof(float), "the weights"), "the weights");
    tt_model_get_weights(model, host);
    if (writes)
        tt_weights_save_hf(host, &model->params, &model->config, model->config.dtype, run->output_dir,
                           run->max_shard_bytes, run->base_model);
    free(host);
}

/* The end-of-run lines on offloaded layer inputs: bytes moved each way per tier, the copy
 * engine's achieved bandwidth, and how much of the copy time compute did not hide. */
static void report_offload(tt_model_state *model) {
    const tt_offload_store *inputs = &model->inputs;
    if (!model->host.base && !inputs->disk) return;
    const tt_size_table *t = &model->sizes;
    const bool activations = inputs->disk || t->class_peak[TT_CLASS_LAYER_INPUT][t->host_tier] ||
                             t->class_peak[TT_CLASS_SAVED_ACTIVATION][t->host_tier];
    const bool optimizer = t->optimizer_host_numel > 0;
    tt_backend_synchronize(model->backend);
    size_t to_host = 0, to_device = 0;
    double copy_seconds = 0, exposed_seconds = 0;
    tt_backend_copy_stats(model->backend, &to_host, &to_device, &copy_seconds, &exposed_seconds);
    char out[32], back[32];
    const bool weights = model->plan.offloaded_weight_layers > 0;
    char what[96];
    snprintf(what, sizeof what, "offload copies (%s%s%s%s%s)", activations ? "activations" : "",
             activations && (optimizer || weights) ? ", " : "",
             optimizer ? "optimizer: gradients out, weights back" : "", optimizer && weights ? ", " : "",
             weights ? "layer weights" : "");
    printf("  %s: %s copied to %s memory, %s copied back", what, tt_format_bytes(to_host, out, sizeof out),
           inputs->disk ? "pinned (on the way to disk)" : tt_tier_name(model->host.tier),
           tt_format_bytes(to_device, back, sizeof back));
    if (copy_seconds > 0)
        printf("; copies busy %.3f s (%.1f GB/s), compute waited %.3f s for them (%.0f%% of the copy time hidden)",
               copy_seconds, (double)(to_host + to_device) / copy_seconds / 1e9, exposed_seconds,
               100.0 * (1.0 - (exposed_seconds < copy_seconds ? exposed_seconds / copy_seconds : 1.0)));
    printf("\n");
    if (model->frozen_host) {
        char streamed[32], layer[32];
        printf("  layer_offloading: %s of frozen weights streamed from pinned memory, through two buffers of %s\n",
               tt_format_bytes(model->stream.loaded_bytes, streamed, sizeof streamed),
               tt_format_bytes(model->sizes.weight_ring, layer, sizeof layer));
    }
    if (model->plan.offloaded_weight_layers > 0) {
        char loaded[32], stored[32], layer[32];
        printf("  weight offload: %s of layer weights streamed from %s memory, %s of updates written back, through "
               "two buffers of %s\n",
               tt_format_bytes(model->weight_offload.loaded_bytes, loaded, sizeof loaded),
               tt_tier_name(model->host.tier),
               tt_format_bytes(model->weight_offload.stored_bytes, stored, sizeof stored),
               tt_format_bytes(model->sizes.weight_offload_slot, layer, sizeof layer));
    }
    const tt_offload_store *stores[2] = {inputs, &model->saved};
    for (int i = 0; i < 2; i++) {
        if (!stores[i]->disk) continue;
        size_t written = 0, read = 0;
        double seconds = 0;
        tt_disk_store_stats(stores[i]->disk, &written, &read, &seconds);
        char w[32], r[32];
        printf("  disk tier (%s): %s written, %s read, IO thread busy %.2f s (%.2f GB/s)\n",
               i == 0 ? "layer inputs" : "kept activations", tt_format_bytes(written, w, sizeof w),
               tt_format_bytes(read, r, sizeof r), seconds,
               seconds > 0 ? (double)(written + read) / seconds / 1e9 : 0.0);
    }
}

/* The training data, before any memory is reserved: a bad dataset or a micro-batch larger than it is refused at
 * once (reserving a large plan's arenas takes seconds). JSON datasets train from their prepared file (token file
 * version 2), made now if there is none. */
static void open_training_data(tt_dataset *data, const tt_run_config *run, const tt_model_config *model_config,
                               const tt_comm *comm) {
    char *prepared = NULL;
    if (tt_run_has_json_datasets(run)) {
        /* several processes: rank 0 prepares the file (one writer under its final name), the others then reuse it */
        if (comm && comm->rank > 0) tt_comm_barrier(comm);
        bool reused = false;
        prepared = tt_prepare_datasets(run, &reused);
        if (comm && comm->rank == 0) tt_comm_barrier(comm);
        tt_info("data: %s %s",
                reused ? "reusing the prepared dataset" : "no prepared dataset with this hash yet: prepared", prepared);
    }
    if (run->sample_packing) {
        tt_dataset_open_packed(data, prepared ? &prepared : run->datasets, prepared ? 1 : run->dataset_count,
                               model_config->vocab_size, run->sequence_len, run->val_set_size, (uint64_t)run->seed,
                               run->excess_length_strategy == TT_EXCESS_TRUNCATE, run->sample_packing_bin_size,
                               run->sample_packing_group_size);
        report_packing(data, run);
    } else {
        tt_dataset_open(data, prepared ? &prepared : run->datasets, prepared ? 1 : run->dataset_count,
                        model_config->vocab_size, run->sequence_len, run->val_set_size, (uint64_t)run->seed);
    }
    free(prepared);
    /* axolotl grows the embedding to the tokenizer's size rounded up to 32 when the model has fewer rows; tiertrain
     * resizes no embedding, so the key is the same run only when the model has them */
    const int64_t rows_32x = ((int64_t)data->tokenizer_vocab_size + 31) / 32 * 32;
    if (run->resize_token_embeddings_to_32x && model_config->vocab_size < rows_32x)
        tt_die("resize_token_embeddings_to_32x: true would grow the model's embedding and LM head from vocab_size %lld "
               "to %lld rows (the tokenizer's %u rounded up to a multiple of 32, as axolotl resizes), which changes "
               "the softmax; tiertrain does not resize embeddings: remove the key, or give a model whose vocab_size "
               "is at least %lld",
               (long long)model_config->vocab_size, (long long)rows_32x, data->tokenizer_vocab_size,
               (long long)rows_32x);
    if (run->micro_batch_size > data->train_count) /* every sequence many times over in each micro-batch */
        tt_die("micro_batch_size %lld is more than the %lld training %s the datasets hold; lower micro_batch_size",
               (long long)run->micro_batch_size, (long long)data->train_count,
               data->documents ? "documents" : "sequences");
}

/* How often (in steps) to evaluate or save; 0: only at the end. A count of steps, or below 1 that fraction of the run's
 * steps rounded up (transformers' reading of a fractional eval_steps / save_steps); axolotl's per-epoch keys are the
 * fraction 1 / (per_epoch x num_epochs), which past 1 (fewer epochs than one period) means only at the end; an
 * epoch strategy is one per epoch. */
static int64_t step_interval(double steps, int64_t per_epoch, bool each_epoch, double num_epochs, int64_t total_steps) {
    if (each_epoch) per_epoch = 1;
    if (per_epoch > 0) steps = 1.0 / ((double)per_epoch * num_epochs);
    if (steps <= 0 || (per_epoch > 0 && steps >= 1)) return 0;
    if (steps < 1) {
        const int64_t every = (int64_t)ceil(steps * (double)total_steps);
        return every > 0 ? every : 1;
    }
    return (int64_t)steps;
}

/* max_steps, else num_epochs of the training sequences (packed: each epoch's own packing counts; they differ by a
 * few sequences). */
static int64_t total_steps_of(const tt_run_config *run, const tt_dataset *data, int64_t sequences_per_step) {
    if (run->max_steps > 0) return run->max_steps;
    const double sequences = tt_dataset_sequences_in_epochs(data, run->num_epochs);
    const int64_t steps = (int64_t)ceil(sequences / (double)sequences_per_step);
    return steps < 1 ? 1 : steps;
}

/* The initial weights, or a checkpoint's (resume_from_checkpoint, or the latest with --resume) with the trainer's
 * state and the data's position. Returns the checkpoint's directory (the caller frees it), or NULL. */
static char *resume_or_initialise(tt_model_state *model, tt_trainer_state *trainer, tt_dataset *data,
                                  const tt_run_config *run, bool resume_latest, bool leader) {
    char *resume_dir = NULL;
    if (run->resume_from_checkpoint) {
        resume_dir = tt_xstrdup(run->resume_from_checkpoint);
    } else if (resume_latest) {
        resume_dir = tt_checkpoint_find_latest(run->output_dir);
        if (!resume_dir) tt_die("--resume: no checkpoint-<step> directory in output_dir '%s'", run->output_dir);
    }
    if (!resume_dir) {
        tt_load_run_weights(model, run);
        return NULL;
    }
    /* A checkpoint holds the trainable parameters; the frozen ones are the run's initial weights. */
    if (model->params.trainable_start > 0) tt_load_run_weights(model, run);
    tt_checkpoint_load(model, trainer, resume_dir);
    tt_dataset_set_position(data, trainer->data_epoch, trainer->data_index);
    tt_info("resumed from %s at step %lld", resume_dir, (long long)trainer->global_step);
    if (leader)
        tt_metrics_keep_steps(run->output_dir, trainer->global_step); /* the steps it replays are written anew */
    return resume_dir;
}

/* One optimizer step's micro-batches, drawn up front so that the loss can be averaged over all unmasked tokens
 * of the step (not per micro-batch). Each array: [accumulation x micro_batch x sequence_len]. */
typedef struct step_batch {
    int32_t *inputs, *targets;
    int32_t *positions;     /* packed documents' position ids, else NULL */
    int64_t reported_epoch; /* the last epoch whose packing was reported (epoch 1's at start or resume) */
} step_batch;

static void step_batch_init(step_batch *batch, const tt_dataset *data, int64_t tokens) {
    batch->inputs = tt_xmalloc(sizeof(int32_t) * (size_t)tokens, "step token buffer");
    batch->targets = tt_xmalloc(sizeof(int32_t) * (size_t)tokens, "step token buffer");
    batch->positions = data->packed ? tt_xmalloc(sizeof(int32_t) * (size_t)tokens, "step token buffer") : NULL;
    batch->reported_epoch = data->epoch;
}

static void step_batch_free(step_batch *batch) {
    free(batch->inputs);
    free(batch->targets);
    free(batch->positions);
}

/* Draws the step's sequences; returns its target tokens (those not masked). */
static int64_t draw_step_batch(step_batch *batch, tt_dataset *data, int64_t sequences, int64_t T) {
    for (int64_t i = 0; i < sequences; i++) {
        if (data->packed && data->index_in_epoch == 0 && data->epoch != batch->reported_epoch) {
            report_epoch_packing(data);
            batch->reported_epoch = data->epoch;
        }
        tt_dataset_next_train_positions(data, batch->inputs + i * T, batch->targets + i * T,
                                        batch->positions ? batch->positions + i * T : NULL);
    }
    int64_t target_tokens = 0;
    for (int64_t i = 0; i < sequences * T; i++) target_tokens += batch->targets[i] != TT_IGNORE_INDEX;
    return target_tokens;
}

/* Forward and backward of this rank's micro-batches of the step (first_micro on) into zeroed gradients; returns
 * their loss sum and counts the tokens it is over into *counted. */
static double accumulate_gradients(tt_model_state *model, tt_data_parallel *dp, const step_batch *batch,
                                   const tt_run_config *run, const tt_trainer_state *trainer,
                                   const tt_adamw_settings *adamw, const tt_lr_schedule *schedule,
                                   int64_t target_tokens, int64_t first_micro, int64_t *counted, double *router_aux) {
    const int64_t N = run->micro_batch_size * run->sequence_len, accumulation = run->gradient_accumulation_steps;
    tt_backend_zero(model->backend, model->gradients, model->sizes.gradients);
    double loss_sum = 0;
    *counted = 0;
    *router_aux = 0;
    for (int64_t local = 0; local < accumulation; local++) {
        const int64_t micro = first_micro + local; /* in the step's micro-batches of every rank */
        /* the last micro-batch's backward finishes the gradients: optimizer offload with overlap starts
         * moving (and, without clipping, updating) the host share layer by layer */
        if (local == accumulation - 1) {
            tt_optimizer_offload_expect_gradients(model->optimizer_offload, adamw,
                                                  (float)tt_lr_at(schedule, trainer->global_step),
                                                  trainer->global_step + 1);
            tt_data_parallel_expect_gradients(dp); /* the ranks sum each unit's gradients as its backward ends */
        }
        tt_model_set_batch(model, batch->inputs + micro * N, batch->targets + micro * N);
        if (batch->positions) tt_model_set_positions(model, batch->positions + micro * N);
        /* sequence parallel: each rank's share of the tokens draws its own masks (the masks are keyed by the
         * element within the rank's tensors, which would repeat every share) */
        model->lora_dropout_seed = tt_lora_dropout_seed((uint64_t)run->seed, trainer->global_step, micro) ^
                                   ((uint64_t)model->plan.sequence_parallel_rank * 0x9E3779B97F4A7C15ull);
        int64_t count = 0;
        /* every token's loss gradient is scaled by 1 / (the step's target tokens), as transformers does with
         * num_items_in_batch, and its loss added in token order onto the step's running sum: micro-batches of
         * one document each give the bits of the same documents packed into one */
        loss_sum = tt_step_forward_backward_continuing(model, target_tokens ? 1.0 / (double)target_tokens : 0.0,
                                                       loss_sum, &count);
        *counted += count;
        *router_aux += model->moe_aux_loss; /* each micro-batch's forward adds its own (output_router_logits) */
    }
    return loss_sum;
}

/* A save's pageable host memory: a full fine-tune's streams a tensor at a time (train/streamed_save.h, with
 * zero_stage sharding each tensor from its owner); a LoRA run's, and zero_stage 3's compute copy without a master
 * copy, gather the trainable weights and both AdamW moments in fp32 (and a whole model in fp32) at once, on the
 * leader and with sharding on every rank (checkpoint.c, save_final_weights). Where the save and the pinned memory the
 * plan holds exceed what the host has for runs, the first save would fail after the training before it; said at the
 * start, while nothing is lost. */
static void warn_if_saves_exceed_host_memory(const tt_model_state *m, const tt_run_config *run,
                                             const tt_device *device) {
    const size_t room = tt_host_memory_default_budget(1);
    if (run->save_strategy == TT_SAVE_NO || !room) return;
    const int processes = device->host_processes > 1 ? device->host_processes : 1;
    const bool streamed = m->params.lora_rank == 0 && tt_model_reads_trainable_ranges(m);
    const size_t moments_and_weights = 12 * (size_t)m->params.trainable_numel;
    const size_t whole_model = m->params.lora_rank > 0 ? 0 : 4 * (size_t)m->params.total_numel;
    const int savers = m->shards ? processes : 1;
    const size_t others = !streamed && m->shards ? (size_t)(processes - 1) * moments_and_weights : 0;
    const size_t save =
        streamed ? tt_streamed_save_host_bytes(m) * (size_t)savers : moments_and_weights + whole_model + others;
    const size_t held = (m->sizes.tier_peak[TT_TIER_PINNED] + m->sizes.tier_peak[TT_TIER_HOST]) * (size_t)processes;
    if (held + save <= room) return;
    char save_text[32], held_text[32], room_text[32];
    tt_warn("a save takes %s of pageable host memory (%s%s%s) beside the %s held by the %d process%s on this host, "
            "more than the %s the host has for runs: the first checkpoint (save_steps, or the last step) will fail "
            "for memory. Use save_strategy: no, fewer processes on this host, or a machine with more memory",
            tt_format_bytes(save, save_text, sizeof save_text),
            streamed ? "the largest tensor: a full fine-tune's save streams a tensor at a time"
                     : "the trainable weights and AdamW moments in fp32, gathered whole",
            !streamed && whole_model ? ", and the whole model in fp32" : "", others ? ", in every zero_stage rank" : "",
            tt_format_bytes(held, held_text, sizeof held_text), processes, processes == 1 ? "" : "es",
            tt_format_bytes(room, room_text, sizeof room_text));
}

/* The end of a run: the final model (unless the run stopped on a non-finite step), the tok/s, the measured peaks
 * against the estimate, what the offload mechanisms moved. */
/* After the final model is saved (save_final_weights). */
static void finish_run(tt_model_state *model, const tt_run_config *run, const tt_device *device, bool completed,
                       int64_t steps, double start, int64_t tokens_per_step) {
    if (completed) {
        const bool saving = run->save_strategy != TT_SAVE_NO;
        if (!saving) tt_info("save_strategy: no: the trained model is not saved");
        const double elapsed = now_seconds() - start; /* the final save included */
        tt_info("done: %lld steps in %.1f s (%.0f tok/s)%s%s", (long long)steps, elapsed,
                elapsed > 0 ? (double)(steps * tokens_per_step) / elapsed : 0.0,
                !saving                       ? ""
                : model->params.lora_rank > 0 ? "; LoRA adapter (PEFT format) saved to "
                                              : "; model saved to ",
                saving ? run->output_dir : "");
        if (saving && model->params.lora_rank > 0 && run->base_model)
            tt_info("a full model: tiertrain merge --base %s --adapter %s -o <dir>", run->base_model, run->output_dir);
    }
    const tt_tier tier = compute_tier_of(device);
    const tt_arena *measured[TT_TIER_COUNT] = {0};
    measured[tier] = &model->arena;
    if (model->host.base) measured[model->host.tier] = &model->host;
    printf("memory, estimate vs measured peak:\n");
    tt_size_table_print(&model->sizes, stdout, measured);
    report_offload(model);
    if (model->optimizer_offload) {
        tt_optimizer_offload_finish(model->optimizer_offload);
        char line[256];
        tt_optimizer_offload_describe(model->optimizer_offload, line, sizeof line);
        if (line[0]) printf("  %s\n", line);
    }
    const size_t outside = tt_backend_bytes_outside_arenas(model->backend);
    if (outside) {
        char text[32];
        printf("  %s memory outside the arena (library handles and workspaces): %s\n", tt_tier_name(tier),
               tt_format_bytes(outside, text, sizeof text));
    }
}

/* The weights evaluate reads: a checkpoint's (over the run's initial ones), else the run's final model or adapter in
 * output_dir, else its newest checkpoint. */
static void evaluated_weights(tt_model_state *model, const tt_run_config *run, const char *checkpoint, char *what,
                              size_t what_size) {
    char *latest = NULL;
    if (!checkpoint) {
        tt_run_config final = *run; /* a shallow copy whose model comes from output_dir */
        const bool lora = model->params.lora_rank > 0;
        char path[4400];
        snprintf(path, sizeof path, "%s/%s", run->output_dir, lora ? "adapter_model.safetensors" : "model.safetensors");
        if (access(path, R_OK) == 0) {
            if (lora) final.lora_model_dir = run->output_dir;
            else final.base_model = run->output_dir, final.model_config = NULL;
            tt_load_run_weights(model, &final);
            snprintf(what, what_size, "the final %s in %s", lora ? "adapter" : "model", run->output_dir);
            return;
        }
        latest = tt_checkpoint_find_latest(run->output_dir);
        if (!latest)
            tt_die(
                "evaluate: output_dir '%s' holds neither the run's final %s nor a checkpoint-<step>; train first, or "
                "give --checkpoint DIR",
                run->output_dir, lora ? "adapter (adapter_model.safetensors)" : "model (model.safetensors)");
        checkpoint = latest;
    }
    tt_trainer_state trainer = {0};
    tt_load_run_weights(model, run); /* the frozen parameters: the run's initial weights */
    tt_checkpoint_load(model, &trainer, checkpoint);
    snprintf(what, what_size, "%s (step %lld)", checkpoint, (long long)trainer.global_step);
    free(latest);
}

int tt_evaluate_run(const tt_run_config *run_config, const tt_device *device, const char *checkpoint,
                    const char *dataset) {
    /* --dataset: that file in the format of the run's first dataset, every document of it evaluated, unpacked */
    tt_run_config given = *run_config; /* a shallow copy: its strings are the run's */
    if (dataset) {
        if (run_config->dataset_count < 1)
            tt_die("evaluate: --dataset takes the format of the run's first dataset, and the run names none");
        given.datasets[0] = (char *)dataset;
        given.dataset_count = 1;
        given.val_set_size = 0;
        given.sample_packing = false;
    }
    const tt_run_config *run = &given;
    if (run->num_threads > 0) omp_set_num_threads((int)run->num_threads);
    tt_model_config model_config;
    tt_load_model_config_for_run(run, &model_config);
    tt_plan plan;
    tt_plan_for_run(&plan, run, &model_config, device, false);
    tt_dataset data;
    open_training_data(&data, run, &model_config, NULL);
    if (dataset) tt_dataset_evaluate_all(&data);
    if (data.eval_count == 0)
        tt_die("evaluate: the run holds no eval %s (val_set_size is %g); set val_set_size (a fraction, or a count of "
               "sequences), as the run that trained did",
               data.documents ? "documents" : "sequences", run->val_set_size);
    tt_model_state model;
    const tt_trainable_spec trainable = tt_trainable_spec_for_run(run, &model_config, plan.weight_bytes);
    tt_model_state_init_trainable(&model, &model_config, &plan, &trainable, device->backend, device->memory_budget);
    char what[4600];
    evaluated_weights(&model, run, checkpoint, what, sizeof what);
    step_batch batch;
    step_batch_init(&batch, &data, run->micro_batch_size * run->sequence_len);
    int64_t tokens = 0;
    const double start = now_seconds();
    const double loss = evaluate(&model, &data, batch.inputs, batch.targets, batch.positions, NULL, &tokens);
    printf("evaluate: %s on %lld eval %s: loss %.9g, perplexity %.6g, over %lld tokens (%.1f s)\n", what,
           (long long)data.eval_count, data.documents ? "documents" : "sequences", loss, exp(loss), (long long)tokens,
           now_seconds() - start);
    step_batch_free(&batch);
    tt_dataset_close(&data);
    tt_model_state_free(&model);
    return 0;
}

/* output_dir/report.html (train/report_html.h) from the run as it stands; trace_path: a closed trace to draw. */
static void write_html_report(tt_model_state *model, const tt_run_config *run, const tt_device *device,
                              const char *trace_path, bool final) {
    tt_run_report report = {.output_dir = run->output_dir,
                            .model = &model->config,
                            .plan = &model->plan,
                            .sizes = &model->sizes,
                            .trace_path = trace_path,
                            .final = final};
    char description[512];
    snprintf(description, sizeof description, "%s, %lld layers, on %s; sequence_len %lld, micro_batch_size %lld, %s",
             model->config.model_type, (long long)model->config.num_layers, device->description,
             (long long)run->sequence_len, (long long)run->micro_batch_size,
             model->params.lora_rank > 0 ? "LoRA adapters train" : "full fine-tuning");
    report.description = description;
    report.measured[device->backend->compute_tier] = &model->arena;
    if (model->host.base) report.measured[model->host.tier] = &model->host;
    tt_backend_synchronize(model->backend);
    tt_backend_copy_stats(model->backend, &report.copied_to_host, &report.copied_to_device, &report.copy_seconds,
                          &report.exposed_seconds);
    tt_write_run_report(&report);
}

int tt_train(const tt_run_config *run, const tt_device *device, const tt_comm *comm, tt_comm *sequence_group,
             bool resume_latest) {
    const int processes = comm ? comm->size : 1;
    if (run->sequence_parallel_degree > 1 && processes % run->sequence_parallel_degree != 0)
        tt_die("sequence_parallel_degree is %lld but %d process%s started: groups of %lld processes share each "
               "sequence, and the groups train side by side (data parallel); start a multiple of %lld processes "
               "(torchrun --nproc-per-node, or mpirun -np on the CPU)",
               (long long)run->sequence_parallel_degree, processes, processes == 1 ? " was" : "es were",
               (long long)run->sequence_parallel_degree, (long long)run->sequence_parallel_degree);
    if (run->num_threads > 0) omp_set_num_threads((int)run->num_threads);
    tt_make_directories(run->output_dir);
    tt_checkpoint_remove_incomplete(run->output_dir);
    tt_output_dir_check_previous_run(run->output_dir, resume_latest || run->resume_from_checkpoint,
                                     run->overwrite_output_dir, !comm || comm->rank == 0);

    tt_model_config model_config;
    tt_load_model_config_for_run(run, &model_config);
    tt_plan plan;
    plan_for_run(&plan, run, &model_config, device);
    if (comm) tt_data_parallel_agree_plan(comm, &plan); /* sequence parallel: one recompute plan for every rank */
    tt_dataset data;
    open_training_data(&data, run, &model_config, comm);

    tt_model_state model;
    const tt_trainable_spec trainable = tt_trainable_spec_for_run(run, &model_config, plan.weight_bytes);
    tt_model_state_init_trainable(&model, &model_config, &plan, &trainable, device->backend, device->memory_budget);
    const tt_tier tier = compute_tier_of(device);
    const int rank = comm ? comm->rank : 0;
    tt_model_set_trace(&model, rank == 0 ? tt_trace_open(run->trace) : NULL); /* rank 0's timeline */
    print_header(&model.config, &model.params, device, &model.plan, &model.sizes, stdout);

    const int64_t T = run->sequence_len;
    /* the data-parallel groups: each rank, or with sequence parallel each group of ranks sharing its sequences */
    const int ranks = comm ? comm->size / (int)model.plan.sequence_parallel : 1;
    const int group = comm ? comm->rank / (int)model.plan.sequence_parallel : 0;
    tt_data_parallel dp = {0};
    if (comm) tt_data_parallel_init(&dp, comm, sequence_group, run, &model);
    if (rank == 0) warn_if_saves_exceed_host_memory(&model, run, device); /* after the shards are known */
    /* a step is every rank's micro-batches: each draws them all, in the same order, and trains its own */
    const int64_t sequences_per_step = run->micro_batch_size * run->gradient_accumulation_steps * ranks;
    const int64_t total_steps = total_steps_of(run, &data, sequences_per_step);
    const tt_lr_schedule schedule = tt_lr_schedule_for_run(run, total_steps);
    const tt_adamw_settings adamw = tt_adamw_settings_for_run(run);

    tt_trainer_state trainer = {0};
    tt_rng_seed(&trainer.rng, (uint64_t)run->seed);
    char *resume_dir = resume_or_initialise(&model, &trainer, &data, run, resume_latest, rank == 0);
    tt_info("data: %lld training and %lld eval %s of %lld tokens; %lld steps of %lld sequences (%lld tokens)",
            (long long)data.train_count, (long long)data.eval_count,
            data.packed      ? "sequences (packed documents)"
            : data.documents ? "documents (one per sequence, padded)"
                             : "sequences",
            (long long)T, (long long)total_steps, (long long)sequences_per_step, (long long)(sequences_per_step * T));

    step_batch batch;
    step_batch_init(&batch, &data, sequences_per_step * T);
    tt_reporter reporter = {0};
    const bool leader = rank == 0; /* reports, evaluates and saves */
    if (leader) tt_reporter_open(&reporter, run->output_dir, run->progress, run->use_tensorboard);
    reporter.arenas[tier] = &model.arena;
    if (leader) set_utilization(&reporter, &model, device, comm ? comm->size : 1);
    if (model.host.base) reporter.arenas[model.host.tier] = &model.host;

    char *last_checkpoint = resume_dir ? tt_xstrdup(resume_dir) : NULL;
    const double start = now_seconds();
    const int64_t first_step = trainer.global_step;
    const int64_t eval_every = step_interval(run->eval_steps, run->evals_per_epoch, run->eval_strategy == TT_EVAL_EPOCH,
                                             run->num_epochs, total_steps);
    const int64_t save_every = step_interval(run->save_steps, run->saves_per_epoch, run->save_strategy == TT_SAVE_EPOCH,
                                             run->num_epochs, total_steps);
    int64_t watchdog_violations = 0;
    int exit_status = 0;
    if (run->profile) tt_op_profile_enable(device->backend); /* with trace: refused at config load */
    while (trainer.global_step < total_steps) {
        double profile_seconds[TT_OP_CLASS_COUNT];
        int64_t profile_calls[TT_OP_CLASS_COUNT];
        tt_op_profile_take(model.backend, profile_seconds,
                           profile_calls); /* evaluation's and saving's ops: not the step's */
        const double step_start = now_seconds();
        const int64_t step_tokens = draw_step_batch(&batch, &data, sequences_per_step, T);
        /* the loss sum, the tokens it is over, and the micro-batches' auxiliary router losses (output_router_logits) */
        double sums[3] = {0, 0, 0};
        int64_t counted = 0;
        sums[0] = accumulate_gradients(&model, comm ? &dp : NULL, &batch, run, &trainer, &adamw, &schedule, step_tokens,
                                       (int64_t)group * run->gradient_accumulation_steps, &counted, &sums[2]);
        sums[1] = (double)counted;
        if (comm) tt_data_parallel_reduce(&dp, &model, sums, 3);
        /* as transformers adds it: the cross-entropy's mean, and router_aux_loss_coef x each forward's auxiliary loss */
        const double loss = (sums[1] > 0 ? sums[0] / sums[1] : 0.0) + model.config.router_aux_loss_coef * sums[2];
        const double grad_norm = tt_gradient_norm(&model);
        if (!isfinite(loss) || !isfinite(grad_norm)) {
            if (leader) tt_reporter_close(&reporter);
            fprintf(stderr,
                    "tiertrain: error: the loss (%g) or gradient norm (%g) is not finite at step %lld; training "
                    "stopped without updating the weights. %s%s. Lower learning_rate, set max_grad_norm, or check "
                    "the data.\n",
                    loss, grad_norm, (long long)trainer.global_step + 1,
                    last_checkpoint ? "The last good checkpoint is " : "No checkpoint was written yet",
                    last_checkpoint ? last_checkpoint : "");
            exit_status = 2;
            break;
        }
        const double lr = tt_lr_at(&schedule, trainer.global_step);
        tt_adamw_step(&model, &adamw, (float)lr, trainer.global_step + 1,
                      tt_clip_scale(grad_norm, adamw.max_grad_norm));
        trainer.global_step++;
        trainer.tokens_seen += step_tokens;
        tt_dataset_get_position(&data, &trainer.data_epoch, &trainer.data_index);

        tt_backend_synchronize(model.backend); /* the step's time includes its last kernels */
        const double t_now = now_seconds();
        tt_op_profile_take(model.backend, profile_seconds, profile_calls);
        /* zero_stage 1 and 2: the other shards' new weights, issued here so that they arrive unit by unit while the
         * next step's forward computes (it waits for each unit's) */
        if (comm) tt_data_parallel_share_weights(&dp, &model);
        tt_step_report report = {
            .step = trainer.global_step,
            .total_steps = total_steps,
            .loss = loss,
            .learning_rate = lr,
            .grad_norm = grad_norm,
            .tokens = sequences_per_step * T,
            .target_tokens = step_tokens,
            .step_seconds = t_now - step_start,
            .elapsed_seconds = t_now - start,
            .steps_this_run = trainer.global_step - first_step,
            .profile_seconds = run->profile ? profile_seconds : NULL,
            .router_aux_loss = model.moe_expert_tokens ? sums[2] : NAN,
            .epoch = (double)trainer.data_epoch +
                     (data.train_count > 0 ? (double)trainer.data_index / (double)data.train_count : 0.0),
        };
        /* axolotl's loss watchdog: the step is taken, then training ends as at its last step (eval, save) */
        watchdog_violations =
            run->loss_watchdog_threshold > 0 && loss > run->loss_watchdog_threshold ? watchdog_violations + 1 : 0;
        const bool watchdog_stop =
            run->loss_watchdog_threshold > 0 && watchdog_violations >= run->loss_watchdog_patience;
        if (watchdog_stop && leader)
            tt_info(
                "loss_watchdog: the loss was above loss_watchdog_threshold (%g) for %lld steps in a row (%g at step "
                "%lld): training stops here and the model is saved as at the end",
                run->loss_watchdog_threshold, (long long)watchdog_violations, loss, (long long)trainer.global_step);
        const bool last = trainer.global_step == total_steps || watchdog_stop;
        if (leader) tt_reporter_step(&reporter, &report, last || trainer.global_step % run->logging_steps == 0);

        if (data.eval_count > 0 && run->eval_strategy != TT_EVAL_NO &&
            ((eval_every > 0 && trainer.global_step % eval_every == 0) || last)) {
            int64_t eval_tokens = 0; /* every rank evaluates its share */
            const double eval_loss =
                evaluate(&model, &data, batch.inputs, batch.targets, batch.positions, comm, &eval_tokens);
            if (leader) {
                tt_reporter_eval(&reporter, trainer.global_step, eval_loss, eval_tokens);
                write_html_report(&model, run, device, NULL, false);
            }
        }
        /* the leader saves for every rank; with zero_stage 1 every rank hands it its shard */
        if (run->save_strategy != TT_SAVE_NO && ((save_every > 0 && trainer.global_step % save_every == 0) || last) &&
            (leader || model.shards)) {
            free(last_checkpoint);
            tt_data_parallel_weights_ready(comm ? &dp : NULL, &model);
            last_checkpoint = tt_checkpoint_save(&model, &trainer, run, leader);
            if (leader) write_html_report(&model, run, device, NULL, false);
            if (leader && run->save_total_limit > 0) tt_checkpoint_keep_newest(run->output_dir, run->save_total_limit);
        }
        if (watchdog_stop) break;
    }
    if (leader) tt_reporter_close(&reporter);
    /* The final model, as a Hugging Face checkpoint in output_dir itself. */
    if (exit_status == 0 && run->save_strategy != TT_SAVE_NO && (leader || model.shards)) {
        tt_data_parallel_weights_ready(comm ? &dp : NULL, &model);
        save_final_weights(&model, run, leader);
        if (leader) tt_write_output_companions(run, model.params.lora_rank > 0, trainer.global_step);
    }
    if (comm) tt_comm_barrier(comm); /* every rank ends after the leader's last checkpoint */
    if (leader)
        finish_run(&model, run, device, exit_status == 0, trainer.global_step - first_step, start,
                   sequences_per_step * T);

    free(last_checkpoint);
    free(resume_dir);
    step_batch_free(&batch);
    if (comm) tt_data_parallel_free(&dp, &model);
    tt_dataset_close(&data);
    if (model.trace) {
        tt_trace_close(model.trace);
        model.trace = NULL;
        tt_info("trace written to %s (open it in ui.perfetto.dev)", run->trace);
    }
    if (leader) {
        write_html_report(&model, run, device, rank == 0 ? run->trace : NULL, true);
        tt_info("report: %s/report.html", run->output_dir);
    }
    tt_model_state_free(&model);
    return exit_status;
}
