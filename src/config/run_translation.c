/* The one translation of a run configuration into what the layers below take: the memory plan and its
 * number formats, the trainable-parameter spec, the learning-rate schedule and AdamW's settings. Nothing
 * outside src/config/ and the trainer turns keys into these. */
#include "config/run_translation.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "model/arch.h"

tt_precision tt_precision_for_run(const tt_run_config *run, bool gpu) {
    if (!gpu) return (tt_precision){.activation = TT_F32, .gradient = TT_F32, .moment = TT_F32, .master = false};
    if (run->master_weights)
        return (tt_precision){.activation = TT_BF16, .gradient = TT_F32, .moment = TT_F32, .master = true};
    return (tt_precision){.activation = TT_BF16, .gradient = TT_BF16, .moment = TT_BF16, .master = false};
}

/* Whether decoder layer l has trainable parameters (LoRA adapts every layer; full fine-tuning
 * trains every layer outside frozen_layers). */
static bool layer_trains(const tt_run_config *run, int64_t l) {
    if (run->adapter != TT_ADAPTER_NONE) return true;
    for (int64_t i = 0; i < run->frozen_layer_count; i++)
        if (run->frozen_layers[i] == l) return false;
    return true;
}

/* The recompute set of layer l from the checkpointing keys (validated together at config load):
 *   gradient_checkpointing: keep only each layer's input and recompute the layer (every_n_layers:
 *     only layers 0, N, 2N, ...; checkpoint_trainable_layers_only: only layers that train);
 *   selective_checkpointing: also keep the attention output, so attention is not recomputed;
 *   recompute_granularity full (Megatron): as gradient_checkpointing, with recompute_method
 *     block for only the first recompute_num_layers layers;
 *   recompute_granularity selective (Megatron): recompute the cheap element-wise ops only. */
static tt_slot_set layer_recompute_set(const tt_run_config *run, const tt_model_config *model, int64_t l) {
    if (run->recompute_granularity == TT_RECOMPUTE_SELECTIVE) return tt_recompute_cheap_ops(model);
    if (run->recompute_granularity == TT_RECOMPUTE_FULL) {
        if (run->recompute_method == TT_RECOMPUTE_BLOCK && l >= run->recompute_num_layers) return TT_RECOMPUTE_NOTHING;
        return run->selective_checkpointing ? TT_RECOMPUTE_ALL_BUT_ATTENTION : TT_RECOMPUTE_EVERYTHING;
    }
    if (!run->gradient_checkpointing) return TT_RECOMPUTE_NOTHING;
    if (l % run->every_n_layers != 0) return TT_RECOMPUTE_NOTHING;
    if (run->checkpoint_trainable_layers_only && !layer_trains(run, l)) return TT_RECOMPUTE_NOTHING;
    return run->selective_checkpointing ? TT_RECOMPUTE_ALL_BUT_ATTENTION : TT_RECOMPUTE_EVERYTHING;
}

/* Where activation_offloading puts a checkpointed layer's input between its forward and its backward. */
static tt_tier layer_input_tier(const tt_run_config *run, tt_tier compute_tier) {
    switch (run->activation_offloading) {
    case TT_OFFLOAD_NONE: return compute_tier;
    case TT_OFFLOAD_TRUE: return run->use_pin_memory ? TT_TIER_PINNED : TT_TIER_HOST;
    case TT_OFFLOAD_LEGACY: return TT_TIER_PINNED;
    case TT_OFFLOAD_DISK: return TT_TIER_DISK;
    case TT_OFFLOAD_HIDDEN_STATES: return TT_TIER_PINNED;
    }
    TT_CHECK(false, "activation_offloading %d", (int)run->activation_offloading);
    return compute_tier;
}

static tt_attention_kind attention_kind(tt_attn_implementation implementation) {
    switch (implementation) {
    case TT_ATTN_AUTO: return TT_ATTENTION_AUTO;
    case TT_ATTN_CUDNN: return TT_ATTENTION_CUDNN;
    case TT_ATTN_FLASH: return TT_ATTENTION_FLASH;
    case TT_ATTN_SIMPLE: return TT_ATTENTION_SIMPLE;
    }
    TT_CHECK(false, "attn_implementation %d", (int)implementation);
    return TT_ATTENTION_AUTO;
}

void tt_plan_from_config(tt_plan *plan, const tt_run_config *run, const tt_model_config *model, tt_tier compute_tier,
                         const tt_precision *precision) {
    memset(plan, 0, sizeof(*plan));
    plan->num_layers = model->num_layers;
    plan->compute_tier = compute_tier;
    plan->micro_batch = run->micro_batch_size;
    /* Ulysses: a rank holds its share of each sequence's tokens (validated: sequence_len divides) */
    plan->sequence_parallel = run->sequence_parallel_degree > 1 ? run->sequence_parallel_degree : 1;
    plan->seq_len = run->sequence_len / plan->sequence_parallel;
    plan->packed_documents = run->sample_packing;
    int64_t tokens = run->micro_batch_size * run->sequence_len;
    plan->loss_chunk = run->loss_chunk_size < tokens ? run->loss_chunk_size : tokens;
    plan->precision = *precision;
    plan->offload_dir = run->offload_dir ? run->offload_dir : "/var/tmp";
    plan->attention = attention_kind(run->attn_implementation);
    plan->attention_workspace_limit = (size_t)run->attn_workspace_limit;
    plan->nondeterministic = !run->deterministic;
    plan->neftune_noise_alpha = run->neftune_noise_alpha;
    plan->activation_bytes = tt_dtype_size(precision->activation);
    plan->weight_bytes = plan->activation_bytes;
    plan->gradient_bytes = tt_dtype_size(precision->gradient);
    plan->master_bytes = precision->master ? 4 : 0;
    plan->moment_bytes = tt_dtype_size(precision->moment);
    plan->moments_8bit = tt_run_config_optimizer_8bit(run);
    if (run->recompute_granularity == TT_RECOMPUTE_FULL && run->recompute_method == TT_RECOMPUTE_BLOCK &&
        run->recompute_num_layers > model->num_layers)
        tt_die("recompute_num_layers is %lld but the model has %lld layers; use at most %lld (all layers)",
               (long long)run->recompute_num_layers, (long long)model->num_layers, (long long)model->num_layers);
    if (run->cpu_offloading && run->cpu_offloading_num_layers >= model->num_layers)
        tt_die("cpu_offloading_num_layers is %lld but the model has %lld layers; use 0 .. %lld (Megatron's range: the "
               "last layer's activations are needed first in the backward and stay)",
               (long long)run->cpu_offloading_num_layers, (long long)model->num_layers,
               (long long)model->num_layers - 1);
    plan->layers = tt_xcalloc((size_t)model->num_layers, sizeof(tt_layer_plan), "plan");
    const size_t input_bytes = (size_t)(tokens * model->hidden_size) * plan->activation_bytes;
    const bool offload_true = run->activation_offloading == TT_OFFLOAD_TRUE;
    const tt_tier host_tier = offload_true && !run->use_pin_memory ? TT_TIER_HOST : TT_TIER_PINNED;
    for (int64_t l = 0; l < model->num_layers; l++) {
        tt_layer_plan *lp = &plan->layers[l];
        lp->recompute = layer_recompute_set(run, model, l);
        /* With LoRA, activation_offloading: true offloads instead of recomputing (the PR's rule:
         * pure offload is leaner and faster when the base is frozen) */
        if (offload_true && run->adapter != TT_ADAPTER_NONE) lp->recompute = TT_RECOMPUTE_NOTHING;
        lp->saved_activation_tier = compute_tier;
        /* Kept saved activations that live in host memory between forward and backward:
         * Megatron's cpu_offloading (all of the first layers'), activation_offloading: true on a
         * layer that keeps everything (every saved tensor, TRL's OffloadActivations), and
         * selective_checkpointing offload: true (the kept attention output and log-sum-exp). */
        const tt_slot_set kept = TT_ALL_SLOTS & ~lp->recompute;
        const bool megatron =
            run->cpu_offloading && run->cpu_offloading_activations && l < run->cpu_offloading_num_layers;
        lp->offloaded = megatron                                                          ? kept
                        : offload_true && lp->recompute == TT_RECOMPUTE_NOTHING           ? kept
                        : run->selective_offload && lp->recompute != TT_RECOMPUTE_NOTHING ? kept & TT_ATTENTION_SLOTS
                                                                                          : 0;
        if (lp->offloaded && host_tier != compute_tier) lp->saved_activation_tier = host_tier;
        else lp->offloaded = 0;
        /* activation_offloading: the checkpoints (layer inputs) of checkpointed layers live in host
         * memory, or in a file under offload_dir, between the forward and the backward. The LM
         * head's input (layer L's input) is never offloaded, nor an input below min_offload_size. */
        const bool checkpointed = lp->recompute != TT_RECOMPUTE_NOTHING;
        const bool large_enough = !(run->activation_offloading == TT_OFFLOAD_TRUE ||
                                    run->activation_offloading == TT_OFFLOAD_HIDDEN_STATES) ||
                                  input_bytes >= (size_t)run->min_offload_size;
        lp->layer_input_tier = checkpointed && large_enough ? layer_input_tier(run, compute_tier) : compute_tier;
        if (megatron && checkpointed) lp->layer_input_tier = TT_TIER_PINNED;
        if (lp->layer_input_tier == TT_TIER_HOST && compute_tier == TT_TIER_HOST) lp->layer_input_tier = compute_tier;
        if (lp->layer_input_tier == TT_TIER_PINNED && compute_tier == TT_TIER_PINNED)
            lp->layer_input_tier = compute_tier;
    }
    const bool megatron_activations = run->cpu_offloading && run->cpu_offloading_activations;
    plan->offload_streamed = (offload_true && run->use_streams) || run->activation_offloading == TT_OFFLOAD_DISK ||
                             run->activation_offloading == TT_OFFLOAD_HIDDEN_STATES || megatron_activations ||
                             run->selective_offload;
    plan->offload_ring = plan->offload_streamed ? run->max_fwd_stash_size + 1 : 2;
    plan->saved_ring = megatron_activations ? (run->cpu_offloading_double_buffering ? 2 : 1) : plan->offload_ring;
    plan->min_offload_bytes = offload_true ? (size_t)run->min_offload_size : 0;
    plan->copy_delay_us = (unsigned)run->debug_copy_delay_us;
    plan->stream_frozen_layers = run->layer_offloading;
    plan->offloaded_weight_layers =
        run->cpu_offloading && run->cpu_offloading_weights ? run->cpu_offloading_num_layers : 0;
    plan->optimizer_offload = run->optimizer_cpu_offload;
    plan->optimizer_offload_fraction = run->optimizer_cpu_offload ? run->optimizer_offload_fraction : 0.0;
    plan->optimizer_overlap = run->optimizer_cpu_offload && run->overlap_cpu_optimizer_d2h_h2d;
    plan->zero_stage = (int)run->zero_stage;
    /* with several micro-batches per step, each one's ringed gradients go out and come back for the next */
    plan->gradient_ring = plan->optimizer_overlap;
    /* tiled_mlp_num_shards unset: ceil(sequence_len / hidden_size), ALST's and axolotl's default */
    const int64_t shards = !run->tiled_mlp ? 1
                           : run->tiled_mlp_num_shards > 0
                               ? run->tiled_mlp_num_shards
                               : (run->sequence_len + model->hidden_size - 1) / model->hidden_size;
    tt_plan_tile_mlp(plan, shards);
}

tt_trainable_spec tt_trainable_spec_for_run(const tt_run_config *run, const tt_model_config *model,
                                            size_t storage_elem) {
    tt_trainable_spec spec = {
        .freeze_embeddings = run->freeze_embeddings,
        .frozen_layers = run->frozen_layers,
        .frozen_layer_count = run->frozen_layer_count,
    };
    if (run->adapter != TT_ADAPTER_NONE) {
        spec.lora_rank = run->lora_r;
        /* lora_target_linear: every linear layer the model's family has */
        spec.lora_targets = run->lora_target_linear ? tt_arch_lora_modules(model) : run->lora_target_modules;
        spec.lora_alpha = run->lora_alpha;
        spec.lora_rslora = run->peft_use_rslora;
        spec.lora_dropout = run->lora_dropout;
        spec.lora_modules_to_save = tt_run_config_modules_to_save(run);
        /* PEFT wraps embed_tokens and lm_head apart, each module its own copy: a tied head becomes its own */
        spec.untie_lm_head = spec.lora_modules_to_save && model->tie_word_embeddings;
    }
    if (run->adapter == TT_ADAPTER_QLORA && run->load_in_4bit) {
        spec.quantize_base = true;
        spec.quant_format =
            (tt_quant4_format){.type = run->bnb_4bit_quant_type == TT_BNB_FP4 ? TT_QUANT4_FP4 : TT_QUANT4_NF4,
                               .double_quant = run->bnb_4bit_use_double_quant};
        /* a base saved in 4 bits keeps its own format (as transformers lets the checkpoint's config win) */
        if (run->base_model && model->quantization.load_in_4bit) {
            spec.quant_format = model->quantization.format;
            spec.float_linear = model->quantization.float_linear;
        }
        spec.quant_storage_elem = storage_elem;
    }
    if (run->adapter == TT_ADAPTER_LORA && run->load_in_8bit) { /* the same path, the 8-bit form */
        spec.quantize_base = true;
        spec.quant_format = (tt_quant4_format){.type = TT_QUANT_INT8, .double_quant = false};
        spec.quant_storage_elem = storage_elem;
    }
    return spec;
}

tt_lr_schedule tt_lr_schedule_for_run(const tt_run_config *run, int64_t total_steps) {
    return (tt_lr_schedule){
        .kind = run->lr_scheduler,
        .peak = run->learning_rate,
        .warmup_steps =
            run->warmup_steps >= 0 ? run->warmup_steps : (int64_t)ceil(run->warmup_ratio * (double)total_steps),
        .total_steps = total_steps,
        .min_ratio = run->cosine_min_lr_ratio,
    };
}

tt_adamw_settings tt_adamw_settings_for_run(const tt_run_config *run) {
    return (tt_adamw_settings){
        .beta1 = (float)run->adam_beta1,
        .beta2 = (float)run->adam_beta2,
        .epsilon = (float)run->adam_epsilon,
        .weight_decay = (float)run->weight_decay,
        .max_grad_norm = (float)run->max_grad_norm,
    };
}
