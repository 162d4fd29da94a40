/* Cross-key checks of a loaded run configuration. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <yaml.h>

#include "config/config_internal.h"
#include "core/check.h"

/* Base_model or model_config, the datasets and the keys that shape them */
static void check_model_and_datasets(const tt_run_config *c) {
    if (c->base_model && c->model_config)
        tt_die("base_model ('%s') and model_config ('%s') are both set; set exactly one of them: base_model to "
               "fine-tune a Hugging Face model directory, model_config to train a config.json from random init "
               "(an override can unset the other, e.g. model_config=null)",
               c->base_model, c->model_config);
    if (!c->base_model && !c->model_config)
        tt_die("neither base_model nor model_config is set; set exactly one of them: base_model to fine-tune a "
               "Hugging Face model directory, model_config to train a config.json from random init");
    if (c->dataset_count == 0)
        tt_die("datasets is empty: list at least one dataset, e.g. datasets: [{path: data.jsonl, type: alpaca}] or "
               "[{path: corpus.tok}] (docs/CONFIG.md)");
    for (int i = 0; i < c->dataset_count; i++)
        if ((c->dataset_specs[i].type == TT_DATASET_TOKENS) != (c->dataset_specs[0].type == TT_DATASET_TOKENS))
            tt_die("datasets mixes token files (%s) and JSON datasets (%s); a run trains on one or the other: token "
                   "files are one stream cut into windows, JSON datasets one document per sequence with prompt masks",
                   c->dataset_specs[i].type == TT_DATASET_TOKENS ? c->datasets[i] : c->datasets[0],
                   c->dataset_specs[i].type == TT_DATASET_TOKENS ? c->datasets[0] : c->datasets[i]);
    bool json = false, chat = false;
    for (int i = 0; i < c->dataset_count; i++) {
        json |= c->dataset_specs[i].type != TT_DATASET_TOKENS;
        chat |= c->dataset_specs[i].type == TT_DATASET_CHAT_TEMPLATE;
    }
    /* keys that shape JSON datasets do nothing to token files: set there they are mistakes */
    const char *json_key = c->train_on_inputs    ? "train_on_inputs: true"
                           : c->tokenizer_config ? "tokenizer_config"
                           : c->special_bos || c->special_eos || c->special_pad || c->special_unk ? "special_tokens"
                           : c->excess_length_strategy != TT_EXCESS_DROP && !c->sample_packing
                               ? "excess_length_strategy: truncate"
                           : !c->shuffle_merged_datasets ? "shuffle_merged_datasets: false"
                                                         : NULL;
    if (c->dataset_count > 0 && !json && json_key)
        tt_die("%s is set, but it applies to JSON datasets ({path: data.jsonl, type: alpaca, ...}) and the datasets "
               "are token files, which are tokenized already; remove it",
               json_key);
    if ((c->sample_packing_bin_size != 200 || c->sample_packing_group_size != 100000) && !c->sample_packing)
        tt_die("%s is set, but sample_packing is off; set sample_packing: true or remove it",
               c->sample_packing_bin_size != 200 ? "sample_packing_bin_size" : "sample_packing_group_size");
    if (c->sample_packing_eff_est > 0 && !c->sample_packing)
        tt_die("sample_packing_eff_est (%g) estimates the efficiency of sample packing, which is off; set "
               "sample_packing: true or remove sample_packing_eff_est",
               c->sample_packing_eff_est);
    if (c->train_on_eos != TT_EOS_TURN && !chat)
        tt_die("train_on_eos applies to chat_template datasets (completion, alpaca and input_output always train the "
               "EOS they append); remove it");
    if ((c->chat_template || c->chat_template_jinja || c->chat_template_kwargs || c->eot_tokens) && !chat)
        tt_die(
            "%s applies to chat_template datasets ({path: chats.jsonl, type: chat_template}), and this run has none; "
            "remove it",
            c->chat_template          ? "chat_template"
            : c->chat_template_jinja  ? "chat_template_jinja"
            : c->chat_template_kwargs ? "chat_template_kwargs"
                                      : "eot_tokens");
    for (int i = 0; i < c->dataset_count; i++) {
        const tt_dataset_spec *d = &c->dataset_specs[i];
        const char *choice = d->chat_template ? d->chat_template : c->chat_template;
        const char *jinja = d->chat_template ? d->chat_template_jinja : c->chat_template_jinja;
        if (d->type != TT_DATASET_CHAT_TEMPLATE) continue;
        /* axolotl: chat_template_jinja alone means chat_template: jinja */
        if (!choice && jinja) choice = "jinja";
        if (choice && strcmp(choice, "jinja") == 0 && !jinja)
            tt_die("datasets entry %d (%s): chat_template is jinja, but no chat_template_jinja is set; set "
                   "chat_template_jinja to the template or to a file holding it",
                   i + 1, c->datasets[i]);
        if (jinja && (!choice || strcmp(choice, "jinja") != 0))
            tt_die(
                "datasets entry %d (%s): chat_template_jinja is set, but chat_template is %s; set chat_template: jinja "
                "to use it, or remove chat_template_jinja",
                i + 1, c->datasets[i], choice);
    }
}

/* Warmup, the eval split, output_dir */
static void check_schedule_and_output(const tt_run_config *c) {
    if (c->warmup_steps >= 0 && c->warmup_ratio > 0)
        tt_die("warmup_steps (%lld) and warmup_ratio (%g) are both set; set one of them (warmup_steps=-1 or "
               "warmup_ratio=0 unsets the other)",
               (long long)c->warmup_steps, c->warmup_ratio);
    if (c->val_set_size >= 1 && c->val_set_size != floor(c->val_set_size))
        tt_die("val_set_size is %g: below 1 it is a fraction of the sequences, from 1 a whole count; use e.g. 0.05 "
               "or %lld",
               c->val_set_size, (long long)floor(c->val_set_size));
    if (!c->output_dir) tt_die("output_dir is unset; set it to the directory for checkpoints and the final model");
    static const struct {
        const char *steps, *per_epoch, *strategy;
    } names[2] = {{"save_steps", "saves_per_epoch", "save_strategy"},
                  {"eval_steps", "evals_per_epoch", "eval_strategy"}};
    const double steps[2] = {c->save_steps, c->eval_steps};
    const int64_t per_epoch[2] = {c->saves_per_epoch, c->evals_per_epoch};
    const bool each_epoch[2] = {c->save_strategy == TT_SAVE_EPOCH, c->eval_strategy == TT_EVAL_EPOCH};
    for (int i = 0; i < 2; i++) {
        if (steps[i] >= 1 && steps[i] != floor(steps[i]))
            tt_die("%s is %g: below 1 it is a fraction of the run's steps, from 1 a whole number of steps; use e.g. "
                   "0.25 or %lld",
                   names[i].steps, steps[i], (long long)floor(steps[i]));
        if (steps[i] > 0 && per_epoch[i] > 0)
            tt_die("%s and %s are both set; they are two ways to say how often, set one of them (as axolotl asks)",
                   names[i].steps, names[i].per_epoch);
        if (each_epoch[i] && (steps[i] > 0 || per_epoch[i] > 0))
            tt_die("%s: epoch (once an epoch) and %s are both set; use %s: steps with it, or remove it",
                   names[i].strategy, steps[i] > 0 ? names[i].steps : names[i].per_epoch, names[i].strategy);
    }
}

/* Megatron's recompute keys against gradient checkpointing */
static void check_recompute(const tt_run_config *c) {
    if (c->recompute_granularity == TT_RECOMPUTE_SELECTIVE && c->gradient_checkpointing)
        tt_die("recompute_granularity: selective (recompute only the cheap ops) and gradient_checkpointing: true "
               "(recompute whole layers) contradict each other; set one of them");
    if (c->recompute_granularity == TT_RECOMPUTE_SELECTIVE && c->selective_checkpointing)
        tt_die("recompute_granularity: selective and selective_checkpointing choose different recompute sets; set "
               "one of them (selective_checkpointing needs gradient_checkpointing: true)");
    if (c->recompute_granularity != TT_RECOMPUTE_FULL && c->recompute_method == TT_RECOMPUTE_BLOCK)
        tt_die("recompute_method: block applies to recompute_granularity: full; set recompute_granularity: full");
    if (c->recompute_method == TT_RECOMPUTE_UNIFORM && c->recompute_num_layers != 1)
        tt_die("recompute_method: uniform with recompute_num_layers %lld (groups of layers checkpointed together) is "
               "not available yet; use recompute_num_layers: 1, or recompute_method: block to recompute the first "
               "%lld layers",
               (long long)c->recompute_num_layers, (long long)c->recompute_num_layers);
}

/* Activation, weight and optimizer offload */
static void check_offloading(const tt_run_config *c) {
    const char *offload_mode = tt_activation_offloading_name(c->activation_offloading);
    /* true without checkpointing offloads every saved tensor instead (TRL's OffloadActivations) */
    if (c->activation_offloading >= TT_OFFLOAD_LEGACY && !c->gradient_checkpointing &&
        c->recompute_granularity != TT_RECOMPUTE_FULL)
        tt_die("activation_offloading: %s offloads the checkpoints of gradient checkpointing, but "
               "gradient_checkpointing is false; set gradient_checkpointing: true, or activation_offloading: false "
               "(or true, which then offloads every saved tensor)",
               offload_mode);
    if (c->selective_offload && c->activation_offloading != TT_OFFLOAD_NONE &&
        c->activation_offloading != TT_OFFLOAD_HIDDEN_STATES)
        tt_die("selective_checkpointing offload: true and activation_offloading: %s both decide what leaves the GPU; "
               "use one of them (selective offload goes with activation_offloading: false or hidden_states)",
               offload_mode);
    if (c->layer_offloading && !c->use_pin_memory)
        tt_die("layer_offloading streams frozen layers from pinned host memory, but use_pin_memory is false; remove "
               "use_pin_memory: false");
    if (c->cpu_offloading && c->activation_offloading != TT_OFFLOAD_NONE)
        tt_die("cpu_offloading (Megatron's) and activation_offloading: %s both offload activations; use one of them",
               offload_mode);
    if (c->cpu_offloading && !c->cpu_offloading_activations && !c->cpu_offloading_weights)
        tt_die("cpu_offloading with cpu_offloading_activations: false and cpu_offloading_weights: false offloads "
               "nothing; set one of them to true");
    if (c->cpu_offloading_weights && !c->cpu_offloading)
        tt_die("cpu_offloading_weights is true but cpu_offloading is false; set cpu_offloading: true and "
               "cpu_offloading_num_layers (the layers, from the first, whose weights live in host memory)");
    if (c->cpu_offloading_weights && c->cpu_offloading_num_layers == 0)
        tt_die(
            "cpu_offloading_weights is true but cpu_offloading_num_layers is 0; set how many layers, from the first, "
            "keep their weights in host memory");
    if (c->cpu_offloading_weights && c->adapter != TT_ADAPTER_NONE)
        tt_die("cpu_offloading_weights offloads trainable layer weights; with adapter: %s they are the adapters "
               "(small): stream the frozen base with layer_offloading: true instead",
               c->adapter == TT_ADAPTER_QLORA ? "qlora" : "lora");
    if (!c->cpu_offloading && c->cpu_offloading_num_layers > 0)
        tt_die("cpu_offloading_num_layers is %lld but cpu_offloading is false; set cpu_offloading: true, or remove "
               "cpu_offloading_num_layers",
               (long long)c->cpu_offloading_num_layers);
    if (!c->optimizer_cpu_offload && c->optimizer_offload_fraction != 1.0 && c->optimizer_offload_fraction != 0.0)
        tt_die("optimizer_offload_fraction is %g but optimizer_cpu_offload is false; set optimizer_cpu_offload: true "
               "to update that share of the parameters on the CPU, or remove optimizer_offload_fraction",
               c->optimizer_offload_fraction);
    if (!c->optimizer_cpu_offload && c->overlap_cpu_optimizer_d2h_h2d)
        tt_die("overlap_cpu_optimizer_d2h_h2d is true but optimizer_cpu_offload is false: there are no CPU optimizer "
               "copies to overlap; set optimizer_cpu_offload: true, or remove overlap_cpu_optimizer_d2h_h2d");
    if (c->optimizer_cpu_offload && !c->master_weights)
        tt_die("optimizer_cpu_offload keeps fp32 master weights and fp32 AdamW moments on the host, but "
               "master_weights is false (bf16 parameters and AdamW state, no master copy); set master_weights: true, "
               "or remove optimizer_cpu_offload");
    const bool streamed_mode =
        c->activation_offloading == TT_OFFLOAD_TRUE || c->activation_offloading == TT_OFFLOAD_HIDDEN_STATES;
    if (!streamed_mode && (c->max_fwd_stash_size != 1 || c->min_offload_size != 1024))
        tt_die("%s is set but activation_offloading is %s; it applies to activation_offloading: true or "
               "hidden_states; remove it or change the mode",
               c->max_fwd_stash_size != 1 ? "max_fwd_stash_size" : "min_offload_size", offload_mode);
    if (c->activation_offloading != TT_OFFLOAD_TRUE && (!c->use_pin_memory || !c->use_streams))
        tt_die("%s: false is set but activation_offloading is %s; it applies to activation_offloading: true "
               "(legacy is the unstreamed mode, hidden_states is always pinned and streamed); remove it or set "
               "activation_offloading: true",
               !c->use_pin_memory ? "use_pin_memory" : "use_streams", offload_mode);
    /* selective_checkpointing: auto may offload attention outputs under checkpointing (the plan decides) */
    const bool auto_offload =
        c->selective_auto && (c->gradient_checkpointing || c->recompute_granularity == TT_RECOMPUTE_FULL);
    if (c->debug_copy_delay_us && c->activation_offloading == TT_OFFLOAD_NONE && !c->cpu_offloading &&
        !c->selective_offload && !auto_offload && !c->optimizer_cpu_offload && c->zero_stage == 0 &&
        c->sequence_parallel_degree <= 1)
        tt_die("debug_copy_delay_us delays offload copies, but activation_offloading is false; set a mode or remove "
               "debug_copy_delay_us");
}

/* bitsandbytes' 8-bit AdamW against the ways of keeping the optimizer state it does not have (the CUDA backend is
 * refused where the device is known: run_translation.c) */
static void check_optimizer(const tt_run_config *c) {
    if (!tt_run_config_optimizer_8bit(c)) return;
    if (c->optimizer_cpu_offload)
        tt_die("optimizer: %s and optimizer_cpu_offload: true: optimizer offload's CPU AdamW keeps fp32 moments, "
               "and the 8-bit state is a quarter of fp32 AdamW's; remove optimizer_cpu_offload, or use optimizer: "
               "adamw_torch with it",
               c->optimizer);
    if (c->zero_stage > 0)
        tt_die("optimizer: %s and zero_stage: %lld: sharding the 8-bit AdamW state across processes is not supported "
               "yet; use zero_stage: 0 (each process keeps the whole 8-bit state, about a quarter of fp32 AdamW's), or "
               "optimizer: adamw_torch with zero_stage (also set by a deepspeed config's zero_optimization.stage)",
               c->optimizer, (long long)c->zero_stage);
}

/* LoRA and QLoRA keys against adapter, and freezing */
static void check_adapter(const tt_run_config *c) {
    if (c->adapter == TT_ADAPTER_NONE && c->lora_key_given)
        tt_die("%s is set but adapter is not: LoRA settings take effect with adapter: lora; set adapter: lora to train "
               "LoRA adapters, or remove %s for full fine-tuning",
               c->lora_key_given, c->lora_key_given);
    if (c->adapter != TT_ADAPTER_NONE && tt_run_config_lora_targets(c) == 0)
        tt_die("adapter: %s has no modules to adapt: lora_target_modules is empty and lora_target_linear is false; "
               "set lora_target_linear: true (every linear layer) or lora_target_modules: [q_proj, v_proj, ...]",
               c->adapter == TT_ADAPTER_QLORA ? "qlora" : "lora");
    if (c->adapter != TT_ADAPTER_NONE) (void)tt_run_config_modules_to_save(c); /* its names, before any work */
    if (c->adapter != TT_ADAPTER_NONE && (c->freeze_embeddings || c->frozen_layer_count > 0))
        tt_die("%s chooses what full fine-tuning trains, but with adapter: %s the whole base model is frozen "
               "already; remove %s, or remove adapter for full fine-tuning",
               c->freeze_embeddings ? "freeze_embeddings" : "frozen_layers",
               c->adapter == TT_ADAPTER_QLORA ? "qlora" : "lora",
               c->freeze_embeddings ? "freeze_embeddings" : "frozen_layers");
    /* qlora as axolotl checks it: the 4-bit base is load_in_4bit's, and the bnb keys belong to it */
    if (c->adapter == TT_ADAPTER_QLORA && !c->load_in_4bit)
        tt_die(
            "adapter: qlora needs load_in_4bit: true (the frozen base quantized to 4 bits, as axolotl requires); set "
            "load_in_4bit: true, or use adapter: lora for a base in the compute dtype");
    if (c->load_in_4bit && c->adapter != TT_ADAPTER_QLORA)
        tt_die("load_in_4bit: true quantizes the frozen base of adapter: qlora, but adapter is %s; set adapter: qlora, "
               "or remove load_in_4bit",
               c->adapter == TT_ADAPTER_LORA ? "lora"
                                             : "~ (full fine-tuning trains the weights, which cannot be 4-bit)");
    if (c->load_in_8bit && c->load_in_4bit)
        tt_die("load_in_8bit and load_in_4bit are both true; the frozen base is stored in one of them: keep "
               "load_in_4bit (adapter: qlora) or load_in_8bit (adapter: lora)");
    if (c->load_in_8bit && c->adapter != TT_ADAPTER_LORA)
        tt_die("load_in_8bit: true stores the frozen base of adapter: lora in 8 bits, but adapter is %s; set adapter: "
               "lora, or remove load_in_8bit",
               c->adapter == TT_ADAPTER_QLORA ? "qlora (whose base is load_in_4bit's)"
                                              : "~ (full fine-tuning trains the weights, which cannot be 8-bit)");
    if (c->bnb_key_given && !c->load_in_4bit)
        tt_die("%s is set but load_in_4bit is not: the bnb_4bit_* keys describe the 4-bit base of adapter: qlora; set "
               "adapter: qlora and load_in_4bit: true, or remove %s",
               c->bnb_key_given, c->bnb_key_given);
}

/* Attention workspace, tiled MLP, which layers checkpointing covers */
static void check_kernels_and_checkpointing(const tt_run_config *c) {
    if (c->profile && c->trace)
        tt_die(
            "profile and trace both mark the backend's timeline, which holds the marks of one of them at a time: set "
            "one of the two (profile: false, or trace: ~)");
    if (c->attn_workspace_limit > 0 && c->attn_workspace_limit < (1 << 20))
        tt_die("attn_workspace_limit is %lld bytes; cuDNN's attention backward needs at least 1MiB for its dP. Use 0 "
               "(auto) or a size such as 4GiB",
               (long long)c->attn_workspace_limit);
    if (c->tiled_mlp_num_shards > 0 && !c->tiled_mlp)
        tt_die(
            "tiled_mlp_num_shards is %lld but tiled_mlp is false; set tiled_mlp: true, or remove tiled_mlp_num_shards",
            (long long)c->tiled_mlp_num_shards);
    if (c->micro_batch_size * c->sequence_len >= ((int64_t)1 << 31)) /* both bounded by their keys' ranges */
        tt_die("micro_batch_size x sequence_len is %lld tokens; a micro-batch holds fewer than 2^31 (2147483648: token "
               "positions and offsets are 32-bit on the GPU). Lower micro_batch_size and raise "
               "gradient_accumulation_steps for the same tokens a step",
               (long long)(c->micro_batch_size * c->sequence_len));
    if (c->tiled_mlp_num_shards > c->micro_batch_size * c->sequence_len)
        tt_die(
            "tiled_mlp_num_shards is %lld but a micro-batch has %lld tokens (micro_batch_size x sequence_len); use at "
            "most %lld",
            (long long)c->tiled_mlp_num_shards, (long long)(c->micro_batch_size * c->sequence_len),
            (long long)(c->micro_batch_size * c->sequence_len));
    if ((c->every_n_layers > 1 || c->checkpoint_trainable_layers_only) && !c->gradient_checkpointing)
        tt_die("%s chooses which layers gradient checkpointing covers, but gradient_checkpointing is false; set "
               "gradient_checkpointing: true, or remove %s",
               c->every_n_layers > 1 ? "every_n_layers" : "checkpoint_trainable_layers_only",
               c->every_n_layers > 1 ? "every_n_layers" : "checkpoint_trainable_layers_only");
    if (c->selective_checkpointing && !c->gradient_checkpointing && c->recompute_granularity != TT_RECOMPUTE_FULL)
        tt_die("selective_checkpointing is set but gradient_checkpointing is false: selective checkpointing chooses "
               "what checkpointed layers keep; set gradient_checkpointing: true, or remove selective_checkpointing");
}

/* In this order, so that the first rule a configuration breaks is the one reported. */
void tt_run_config_validate(const tt_run_config *c) {
    check_model_and_datasets(c);
    check_schedule_and_output(c);
    check_recompute(c);
    check_offloading(c);
    check_optimizer(c);
    check_adapter(c);
    check_kernels_and_checkpointing(c);
}
