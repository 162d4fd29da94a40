/* Other tools' keys: every key that axolotl documents (its config schema and its integrations' arguments) and that
 * tiertrain has under no name of its own, with what a run does with it; and axolotl's values of tiertrain's own keys
 * (attn_implementation: flash_attention_2, gradient_checkpointing: offload, optimizer: adamw_bnb_8bit).
 *
 * A key whose value changes nothing here (experiment tracking, the Hub, how transformers loads a model, kernel and
 * compiler switches that tiertrain's own kernels make moot) is accepted with any value. A key of a feature tiertrain
 * does not have is accepted with its off value (~, false, 0, "", [] or {}: axolotl's templates carry them so) and
 * otherwise refused with what to use instead. Accepted keys are named in one note at start (tt_run_config_print_notes);
 * refusals are errors, all of a file's reported at once (load.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config_internal.h"
#include "core/check.h"

typedef enum foreign_policy {
    FOREIGN_MOOT,     /* any value: nothing changes here; `reason` says why */
    FOREIGN_OFF_ONLY, /* the off value only; `reason` says what to use instead */
} foreign_policy;

typedef struct foreign_key_group {
    const char *names; /* "a|b|c" */
    foreign_policy policy;
    const char *reason;
    bool one_is_off;     /* sizes of a parallel layout: 1 is no parallelism */
    bool quiet_when_off; /* a moot key left empty (axolotl's templates list the trackers' keys unset) is not noted */
} foreign_key_group;

/* The groups are searched in order; every name appears once (test_config checks the table against axolotl's key
 * list, tests/fixtures/axolotl_keys.txt). */
static const char kernels_reason[] =
    "kernels, compilers and sharding layouts: tiertrain runs its own kernels (exact attention, the loss in chunks) and "
    "its own placement (zero_stage shards over data-parallel ranks)";

static const foreign_key_group groups[] = {
    /* ---- accepted with any value ---- */
    {.names =
         "use_wandb|wandb_entity|wandb_log_model|wandb_mode|wandb_name|wandb_project|wandb_run_id|wandb_watch|use_mlflow|"
         "mlflow_experiment_name|mlflow_run_name|mlflow_tracking_uri|hf_mlflow_log_artifacts|use_comet|comet_api_key|"
         "comet_experiment_config|comet_experiment_key|comet_mode|comet_online|comet_project_name|comet_workspace|"
         "use_trackio|trackio_project_name|trackio_run_name|trackio_space_id|use_swanlab|swanlab_api_host|swanlab_api_key|"
         "swanlab_completion_log_interval|swanlab_completion_max_buffer|swanlab_description|swanlab_experiment_name|"
         "swanlab_lark_secret|swanlab_lark_webhook_url|swanlab_log_completions|swanlab_log_model|swanlab_mode|"
         "swanlab_project|swanlab_web_host|swanlab_workspace|use_otel_metrics|otel_metrics_host|otel_metrics_port|"
         "include_tkps|include_tokens_per_second|profiler_steps|profiler_steps_start",
     .policy = FOREIGN_MOOT,
     .reason = "experiment tracking: tiertrain logs every step to output_dir/metrics.jsonl and, with use_tensorboard: "
               "true, to TensorBoard's event files under output_dir/runs/",
     .quiet_when_off = true},
    {.names = "hub_model_id|hub_revision|hub_strategy|hf_use_auth_token|push_dataset_to_hub",
     .policy = FOREIGN_MOOT,
     .reason = "the Hugging Face Hub: tiertrain reads local directories and the local Hugging Face cache, and writes "
               "output_dir; it never uploads or downloads"},
    {.names =
         "model_type|type_of_model|tokenizer_type|tokenizer_use_fast|tokenizer_legacy|trust_remote_code|processor_type|"
         "processor_kwargs|is_falcon_derived_model|is_llama_derived_model|is_mistral_derived_model|is_qwen_derived_model|"
         "low_cpu_mem_usage|device_map|max_memory|gpu_memory_limit|experimental_skip_move_to_device|torchdistx_path|"
         "base_model_config|qlora_sharded_model_loading|strict|axolotl_config_path|tokenizer_save_jinja_files|"
         "save_safetensors|skip_prepare_dataset|is_preprocess|remove_unused_columns|dataset_processes|dataset_num_proc|"
         "dataset_keep_in_memory|num_dataset_shards_to_save|preprocess_iterable|dataloader_num_workers|"
         "dataloader_pin_memory|dataloader_prefetch_factor|dataloader_drop_last|sample_packing_mp_start_method|gc_steps|"
         "gc_collect_steps|torch_empty_cache_steps|local_rank|world_size|ddp|ddp_broadcast_buffers|ddp_bucket_cap_mb|"
         "ddp_find_unused_parameters|accelerator_config|total_num_tokens|total_supervised_tokens|lora_on_cpu|"
         "peft_autocast_adapter_dtype|save_only_model|bfloat16|freeze_mm_modules|image_size|image_resize_algorithm|"
         "pad_to_multiple_of",
     .policy = FOREIGN_MOOT,
     .reason = "loading and bookkeeping in transformers, datasets and accelerate: tiertrain reads config.json, "
               "tokenizer.json and the data itself, computes in bf16 on the GPU and places every tensor by its plan"},
    {.names =
         "liger_cross_entropy|liger_fused_linear_cross_entropy|liger_glu_activation|liger_layer_norm|liger_rms_norm|"
         "liger_rms_norm_gated|liger_rope|liger_swiglu|cut_cross_entropy|chunked_cross_entropy|"
         "chunked_cross_entropy_num_chunks|flash_attn_cross_entropy|flash_attn_fuse_mlp|flash_attn_rms_norm|"
         "flash_attn_d512|flash_optimum|use_kernels|lora_mlp_kernel|lora_qkv_kernel|lora_o_kernel|lora_embedding_kernel|"
         "torch_compile|torch_compile_backend|torch_compile_mode|torch_compile_options|deepcompile|"
         "flex_attn_compile_kwargs|fused_attn_kernel|sdpa_varlen|batch_flattening|eager_attention|flash_attention|"
         "sdp_attention|xformers_attention|flex_attention|gemma4_hybrid_attn_impl|large_head_attention|heads_k_stride|"
         "ring_attn_func|use_scattermoe|use_sonicmoe|experts_implementation|moe_grouped_backend|use_dsv4_kernels|"
         "use_glm_dsa_kernels|tiled_mlp_use_original_mlp|fsdp|fsdp_config|fsdp_version|fsdp_final_state_dict_type|"
         "dp_shard_size|dp_replicate_size",
     .policy = FOREIGN_MOOT,
     .reason = kernels_reason},
    {.names =
         "eval_batch_size|eval_sample_packing|eval_table_size|eval_max_new_tokens|do_causal_lm_eval|eval_causal_lm_metrics|"
         "do_bench_eval|bench_dataset|bench_split|lm_eval_batch_size|lm_eval_model|lm_eval_post_train|lm_eval_tasks|"
         "generate_samples|num_generation_samples|generation_do_sample|generation_max_new_tokens|generation_prompt_ratio|"
         "generation_temperature|generation_top_k|generation_top_p|gradio_max_new_tokens|gradio_server_name|"
         "gradio_server_port|gradio_share|gradio_temperature|gradio_title",
     .policy = FOREIGN_MOOT,
     .reason =
         "evaluation and sampling extras: tiertrain reports the eval loss (the mean over the eval tokens, packed as "
         "training packs) and computes no generation metrics"},
    /* ---- accepted when off; refused otherwise, with what to use instead ---- */
    {.names =
         "gptq|model_quantization_config|model_quantization_config_kwargs|quantization|qat|fp8|"
         "fp8_enable_fsdp_float8_all_gather|llmcompressor|use_onebitllms|nvfp4_merge_aware|nvfp4_merge_aware_start_step|"
         "quantize_moe_experts|gemma4_fp8_nonexpert|gemma4_nf4_nonexpert|moe_bnb_fast|moe_dequant_chunk_size|"
         "nonexpert_quantization|dsv4_bf16_all|dsv4_fp4_grouped_mode|dsv4_fp8_lora_kernel|dsv4_fp8_nonexpert_mode|"
         "dsv4_shared_mlp_lora_kernel|save_compressed",
     .policy = FOREIGN_OFF_ONLY,
     .reason =
         "quantized training other than QLoRA is not supported; use adapter: qlora with load_in_4bit: true (NF4 or FP4, "
         "bnb_4bit_quant_type)"},
    {.names = "float16",
     .policy = FOREIGN_OFF_ONLY,
     .reason = "fp16 is not supported; tiertrain computes in bf16 on the GPU (bf16: true)"},
    {.names = "float32|fp32_norms|fp32_norm_classes|embeddings_skip_upcast",
     .policy = FOREIGN_OFF_ONLY,
     .reason =
         "tiertrain's precision is fixed: bf16 compute with fp32 master weights on the GPU (master_weights: true), fp32 "
         "on the CPU, norms and the loss in fp32"},
    {.names = "tensor_parallel_size|expert_parallel_size",
     .policy = FOREIGN_OFF_ONLY,
     .reason =
         "tiertrain has no tensor or expert parallelism; it shards with zero_stage and splits a sequence over ranks with "
         "sequence_parallel_degree",
     .one_is_off = true},
    {.names =
         "expert_backend|expert_parallel_backend|expert_parallel_fallback_on_unsupported|expert_parallel_num_nvl_bytes|"
         "expert_parallel_num_rdma_bytes|expert_parallel_token_capacity|dense_mixer|llama4_linearized_experts|"
         "lora_target_parameters",
     .policy = FOREIGN_OFF_ONLY,
     .reason = "mixture-of-experts models are not supported yet"},
    {.names =
         "rl|rl_beta|dpo_beta|dpo_generate_during_eval|dpo_label_smoothing|dpo_loss_type|dpo_loss_weights|dpo_norm_loss|"
         "dpo_padding_free|dpo_use_liger_kernel|dpo_use_logits_to_keep|dpo_use_weighting|kto_desirable_weight|"
         "kto_undesirable_weight|orpo_alpha|cpo_alpha|simpo_gamma|rpo_alpha|trl|reward_model|process_reward_model|"
         "center_rewards_coefficient|precompute_ref_log_probs|num_labels|cls_model_config|reward_funcs|"
         "importance_weighting|vllm|max_prompt_len|trainer_cls",
     .policy = FOREIGN_OFF_ONLY,
     .reason =
         "tiertrain trains causal language models by next-token loss (SFT and pretraining); preference, reward and RL "
         "trainers are not supported"},
    {.names =
         "adam_beta3|adam_epsilon2|optim_args|optim_target_modules|dion_lr|dion_momentum|dion_rank_fraction|"
         "dion_rank_multiple_of|grokfast_alpha|grokfast_lamb|qgalore_cos_threshold|qgalore_gamma_proj|qgalore_proj_bits|"
         "qgalore_proj_group_size|qgalore_proj_quant|qgalore_proj_type|qgalore_queue_size|qgalore_rank|qgalore_scale|"
         "qgalore_update_proj_gap",
     .policy = FOREIGN_OFF_ONLY,
     .reason = "optimizers other than AdamW are not supported yet; use optimizer: adamw_torch"},
    {.names = "embedding_lr|embedding_lr_scale|lr_groups|loraplus_lr_ratio|loraplus_lr_embedding|lr_div_factor|"
              "lr_quadratic_warmup|lr_scheduler_kwargs|cosine_constant_lr_ratio|jagged_restart_steps|"
              "jagged_restart_warmup_steps|jagged_restart_anneal_steps",
     .policy = FOREIGN_OFF_ONLY,
     .reason =
         "per-group learning rates and these schedule variants are not supported; use learning_rate with lr_scheduler "
         "cosine (cosine_min_lr_ratio), linear or constant, and warmup_steps or warmup_ratio"},
    {.names =
         "peft_use_dora|lora_fan_in_fan_out|lora_alpha_pattern|lora_rank_pattern|peft_layers_to_transform|"
         "peft_layers_pattern|peft_layer_replication|peft_trainable_token_indices|peft_init_lora_weights|"
         "peft_ensure_weight_tying|peft|mora|mora_type|use_mora|relora|relora_cpu_offload|"
         "relora_prune_method|relora_prune_ratio|lisa_n_layers|lisa_step_interval|lisa_layers_attribute|"
         "unfrozen_parameters|spectrum_model_name|spectrum_top_fraction|train_attn|train_mlp|train_unembed|merge_lora|"
         "merge_method",
     .policy = FOREIGN_OFF_ONLY,
     .reason = "this adapter or freezing variant is not supported yet; tiertrain trains LoRA (lora_r, lora_alpha, "
               "lora_dropout, lora_target_modules or lora_target_linear), full fine-tuning with frozen_layers and "
               "freeze_embeddings, and merges with `tiertrain merge`"},
    {.names =
         "dataset_shard_num|dataset_shard_idx|curriculum_sampling|"
         "sample_packing_sequentially|multipack_real_batches|pretrain_multipack_attn|"
         "pretrain_multipack_buffer_size|pretraining_sample_concatenation|streaming|streaming_multipack_buffer_size|"
         "test_datasets|default_system_message|added_tokens_overrides|tokens|"
         "mean_resizing_embeddings|shrink_embeddings|fix_untrained_tokens|role_boundaries|min_sample_len|"
         "max_packed_sequence_len|shuffle_before_merging_datasets|eval_sequence_len|group_by_length|"
         "use_pose|pose_max_context_len|pose_num_chunks|pose_split_on_token_ids|"
         "tokenizer_use_mistral_common",
     .policy = FOREIGN_OFF_ONLY,
     .reason =
         "this data or vocabulary option is not supported yet; tiertrain reads datasets (path, type, split, ...), "
         "val_set_size, sequence_len, sample_packing and special_tokens"},
    {.names = "save_first_step|early_stopping_patience|load_best_model_at_end|metric_for_best_model|greater_is_better|"
              "auto_resume_from_checkpoints|dynamic_checkpoint|auto_find_batch_size|batch_size",
     .policy = FOREIGN_OFF_ONLY,
     .reason =
         "not supported yet; tiertrain saves every save_steps, evaluates every eval_steps and resumes with --resume; "
         "the batch is micro_batch_size x gradient_accumulation_steps"},
    {.names = "rope_scaling|overrides_of_model_config|model_kwargs|overrides_of_model_kwargs|scaling_softmax|"
              "scaling_softmax_bias|scaling_softmax_factor|s2_attention|sage_attention",
     .policy = FOREIGN_OFF_ONLY,
     .reason =
         "changing the model's architecture or attention at load is not supported; edit the model's config.json (or "
         "train from random init with model_config: a config.json)"},
    {.names =
         "diffusion|ebft|use_eaft|eaft_alpha|eaft_k|kd_alpha|kd_beta|kd_ce_alpha|kd_normalize_topk|kd_online_server|"
         "kd_online_server_base_url|kd_online_timeout|kd_online_topk|kd_temperature|kd_temperature_min|kd_trainer|loss_fn|"
         "loss_fn_config|mask_token_id|mask_token_str|max_mask_ratio|min_mask_ratio|noise_schedule|num_diffusion_steps|"
         "sample_temperature|liger_use_token_scaling|nemo_gym_auto_clone|nemo_gym_auto_start|nemo_gym_config_paths|"
         "nemo_gym_datasets|nemo_gym_dir|nemo_gym_enabled|nemo_gym_head_port|nemo_gym_max_turns|nemo_gym_model_name|"
         "nemo_gym_multi_turn|nemo_gym_run_timeout|nemo_gym_server_timeout|nemo_gym_verify_timeout|hatchery|pipeline|"
         "recipe|backend|base_url|api_key|project_id|future_timeout|save_name_prefix|generation_interval|"
         "generation_steps|generation_max_length|num_samples|max_sample_tokens|eps|use_ray|ray_num_workers|ray_run_name|"
         "resources_per_worker",
     .policy = FOREIGN_OFF_ONLY,
     .reason =
         "an axolotl integration (plugin) or objective that tiertrain does not have; tiertrain's loss is the causal LM "
         "cross-entropy"},
};

static const int group_count = (int)(sizeof groups / sizeof groups[0]);

/* The notes are printed grouped by reason, in the order their first key was met. */
static void note(tt_run_config *c, const char *reason, const char *item) {
    c->foreign_note_reasons =
        tt_xrealloc(c->foreign_note_reasons, (size_t)(c->foreign_note_count + 1) * sizeof(char *), "config notes");
    c->foreign_note_items =
        tt_xrealloc(c->foreign_note_items, (size_t)(c->foreign_note_count + 1) * sizeof(char *), "config notes");
    c->foreign_note_reasons[c->foreign_note_count] = reason;
    c->foreign_note_items[c->foreign_note_count] = tt_xstrdup(item);
    c->foreign_note_count++;
}

static const char *const off_reason = "set off, which is what tiertrain does";

/* The off value of another tool's key: cfg_is_off_value's, and "" (an empty string, as templates write unused
 * keys); 1 for a parallel layout's size. */
static bool is_off(const yaml_node_t *node, bool one_is_off) {
    if (cfg_is_off_value(node)) return true;
    if (node->type != YAML_SCALAR_NODE) return false;
    const char *text = cfg_scalar_text(node);
    return text[0] == 0 || (one_is_off && strcmp(text, "1") == 0);
}

/* axolotl's plugins: the kernel plugins compute what tiertrain's kernels compute; others add objectives or layouts. */
static void apply_plugins(tt_run_config *c, const source *src, yaml_document_t *doc, yaml_node_t *node) {
    if (cfg_is_off_value(node)) {
        note(c, off_reason, "plugins");
        return;
    }
    if (node->type != YAML_SEQUENCE_NODE)
        cfg_die_at(src, node, "plugins: expected a list of axolotl plugin class names");
    for (yaml_node_item_t *item = node->data.sequence.items.start; item < node->data.sequence.items.top; item++) {
        yaml_node_t *plugin = yaml_document_get_node(doc, *item);
        if (plugin->type != YAML_SCALAR_NODE) cfg_die_at(src, plugin, "plugins: expected plugin class names");
        const char *name = cfg_scalar_text(plugin);
        static const char *const moot_plugins = "axolotl.integrations.cut_cross_entropy.CutCrossEntropyPlugin|"
                                                "axolotl.integrations.liger.LigerPlugin|"
                                                "axolotl.integrations.kernels.KernelsPlugin|"
                                                "axolotl.integrations.swanlab.SwanLabPlugin";
        if (cfg_index_in_list(moot_plugins, name, false) < 0)
            cfg_die_at(src, plugin,
                       "plugins: %s is not available in tiertrain (it adds an objective, a layout or a model "
                       "tiertrain does not have); remove it. Accepted (they change nothing here): "
                       "CutCrossEntropyPlugin, LigerPlugin, KernelsPlugin, SwanLabPlugin",
                       name);
        char item_text[300];
        snprintf(item_text, sizeof item_text, "plugins: %s", strrchr(name, '.') ? strrchr(name, '.') + 1 : name);
        note(c, kernels_reason, item_text);
    }
}

/* bnb_config_kwargs: bitsandbytes' BitsAndBytesConfig arguments; the 4-bit ones are tiertrain's keys. */
static void apply_bnb_config_kwargs(tt_run_config *c, const source *src, yaml_document_t *doc, yaml_node_t *node) {
    if (cfg_is_off_value(node)) return;
    if (node->type != YAML_MAPPING_NODE) cfg_die_at(src, node, "bnb_config_kwargs: expected a mapping");
    for (yaml_node_pair_t *pair = node->data.mapping.pairs.start; pair < node->data.mapping.pairs.top; pair++) {
        yaml_node_t *key = yaml_document_get_node(doc, pair->key);
        yaml_node_t *value = yaml_document_get_node(doc, pair->value);
        const char *name = key->type == YAML_SCALAR_NODE ? cfg_scalar_text(key) : "";
        if (strncmp(name, "bnb_4bit_", 9) == 0 && cfg_find_key(name)) {
            /* axolotl applies them only to a 4-bit base: no "bnb_4bit_* without load_in_4bit" error from here */
            const char *given = c->bnb_key_given;
            cfg_apply_key(c, cfg_find_key(name), src, doc, value);
            c->bnb_key_given = given;
        } else if (strncmp(name, "llm_int8_", 9) == 0) {
            note(c, "8-bit settings of bitsandbytes: no 8-bit weights here", name);
        } else {
            cfg_die_at(src, key,
                       "bnb_config_kwargs: %s is not supported; tiertrain takes bnb_4bit_quant_type, "
                       "bnb_4bit_use_double_quant and bnb_4bit_compute_dtype (here or as keys)",
                       name);
        }
    }
}

/* reinit_weights: the base model's architecture from random init, as a model_config run trains (load.c turns
 * base_model into model_config once the file and the overrides are read). */
static void apply_reinit_weights(tt_run_config *c, const source *src, yaml_document_t *doc, yaml_node_t *node) {
    if (is_off(node, false)) {
        c->reinit_weights = false;
        note(c, off_reason, "reinit_weights");
        return;
    }
    if (node->type != YAML_SCALAR_NODE || cfg_index_in_list("true|True|TRUE", cfg_scalar_text(node), false) < 0)
        cfg_die_at(src, node, "reinit_weights: expected true or false");
    c->reinit_weights = true;
    note(c,
         "base_model's config.json trains from random init (initializer_range), as model_config does; its tokenizer "
         "tokenizes the data",
         "reinit_weights: true");
}

/* pretraining_dataset: axolotl's streamed pretraining texts, read as completion datasets (each text cut into
 * pieces of sequence_len, packed with sample_packing). */
static void apply_pretraining_dataset(tt_run_config *c, const source *src, yaml_document_t *doc, yaml_node_t *node) {
    if (cfg_is_off_value(node)) { /* pretraining_dataset: null drops the entries an earlier value gave */
        if (c->pretraining_given) cfg_clear_datasets(c);
        c->pretraining_given = false;
        note(c, off_reason, "pretraining_dataset");
        return;
    }
    if (c->dataset_count > 0 && !c->pretraining_given)
        cfg_die_at(src, node, "pretraining_dataset and datasets are both set; axolotl trains on one of them: keep one");
    cfg_set_pretraining_datasets(c, src, doc, node);
    c->pretraining_given = true;
    note(c,
         "texts read as completion datasets (type pretrain, text_column: their field), streamed through the tokenizer",
         "pretraining_dataset");
}

/* Other tools' keys read by a key of tiertrain's (another name of it) or by a reader of their own. */
typedef void (*foreign_reader)(tt_run_config *c, const source *src, yaml_document_t *doc, yaml_node_t *value);
static const struct {
    const char *name;
    const char *key;    /* tiertrain's key it is another name of, or NULL */
    const char *reason; /* of the note, for a renamed key */
    foreign_reader read;
} read_keys[] = {
    {"evaluation_strategy", "eval_strategy", "transformers' older name of eval_strategy", NULL},
    /* the ranks that share each sequence (ring attention there, Ulysses here: the same exact attention) */
    {"context_parallel_size", "sequence_parallel_degree", "axolotl's name of sequence_parallel_degree", NULL},
    {"noisy_embedding_alpha", "neftune_noise_alpha", "axolotl's older name of neftune_noise_alpha", NULL},
    {"model_revision", "revision_of_model", "axolotl's other name of revision_of_model", NULL},
    {"plugins", NULL, NULL, apply_plugins},
    {"bnb_config_kwargs", NULL, NULL, apply_bnb_config_kwargs},
    {"reinit_weights", NULL, NULL, apply_reinit_weights},
    {"pretraining_dataset", NULL, NULL, apply_pretraining_dataset},
};

bool cfg_apply_foreign_key(tt_run_config *c, const source *src, yaml_document_t *doc, const char *name,
                           yaml_node_t *value) {
    for (size_t i = 0; i < sizeof read_keys / sizeof read_keys[0]; i++) {
        if (strcmp(read_keys[i].name, name) != 0) continue;
        if (read_keys[i].read) {
            read_keys[i].read(c, src, doc, value);
        } else {
            cfg_apply_key(c, cfg_find_key(read_keys[i].key), src, doc, value);
            note(c, read_keys[i].reason, name);
        }
        return true;
    }
    for (int i = 0; i < group_count; i++) {
        const foreign_key_group *g = &groups[i];
        if (cfg_index_in_list(g->names, name, false) < 0) continue;
        if (g->policy == FOREIGN_MOOT) {
            if (!(g->quiet_when_off && is_off(value, false))) note(c, g->reason, name);
        } else if (is_off(value, g->one_is_off)) {
            note(c, off_reason, name);
        } else {
            char buf[256];
            cfg_die_at(src, value, "%s (axolotl's key) is %s: %s", name, cfg_describe_value(value, buf, sizeof buf),
                       g->reason);
        }
        return true;
    }
    return false;
}

/* ---- axolotl's values of tiertrain's own keys ---- */

/* attn_implementation: every exact attention of transformers runs as tiertrain's (auto); hub kernels ("org/name")
 * are exact flash attention builds */
static bool apply_attention_value(tt_run_config *c, const source *src, yaml_node_t *node, const char *text) {
    static const char *const exact = "eager|sdpa|flash_attention_2|flash_attention_3|flex_attention|xformers";
    if (cfg_index_in_list(exact, text, false) >= 0 || strchr(text, '/')) {
        c->attn_implementation = TT_ATTN_AUTO;
        char item[300];
        snprintf(item, sizeof item, "attn_implementation: %s", text);
        note(c, "exact attention, which tiertrain's attn_implementation: auto computes (the same softmax(QK^T)V)",
             item);
        return true;
    }
    if (strcmp(text, "sage") == 0 || strcmp(text, "fp8") == 0)
        cfg_die_at(src, node,
                   "attn_implementation: %s quantizes the attention's inputs, which changes the gradients; tiertrain's "
                   "attention is exact bf16: use auto (or cudnn, flash)",
                   text);
    return false;
}

static bool apply_optimizer_value(tt_run_config *c, const source *src, yaml_node_t *node, const char *text) {
    if (strcmp(text, "paged_adamw_32bit") == 0 || strcmp(text, "paged_adamw") == 0) {
        /* bitsandbytes' paged AdamW: AdamW with fp32 moments whose memory pages to the host under pressure; the
         * same update as tiertrain's, and tiertrain's plan places the state (optimizer_cpu_offload keeps it on the
         * host) */
        free(c->optimizer);
        c->optimizer = tt_xstrdup("adamw_torch");
        char item[200];
        snprintf(item, sizeof item, "optimizer: %s (= adamw_torch)", text);
        note(c,
             "bitsandbytes' paged 32-bit AdamW: the same AdamW update with fp32 moments; tiertrain's plan places "
             "the state (optimizer_cpu_offload: true keeps it in host memory)",
             item);
        return true;
    }
    /* adamw_bnb_8bit, adamw_8bit and paged_adamw_8bit are values of the key (bitsandbytes' AdamW8bit runs) */
    static const char *const adamw_variants = "adamw_torch_8bit|adamw_torch_4bit";
    static const char *const other_optimizers = "paged_lion_8bit|paged_lion_32bit|lion_8bit|lion_32bit|"
                                                "ademamix_8bit|paged_ademamix_8bit|paged_ademamix_32bit";
    if (cfg_index_in_list(adamw_variants, text, false) >= 0)
        cfg_die_at(src, node,
                   "optimizer: %s is not supported yet (torchao's low-bit AdamW, another quantization than "
                   "bitsandbytes'); "
                   "use adamw_bnb_8bit (bitsandbytes' 8-bit AdamW) or adamw_torch, and to save GPU "
                   "memory optimizer_cpu_offload: true (the AdamW state in pinned host memory, updated by the CPU) or "
                   "zero_stage over several GPUs",
                   text);
    if (cfg_index_in_list(other_optimizers, text, false) >= 0)
        cfg_die_at(src, node,
                   "optimizer: %s is not supported yet (bitsandbytes' Lion and AdEMAMix); use adamw_torch, or "
                   "adamw_bnb_8bit for bitsandbytes' 8-bit AdamW",
                   text);
    return false;
}

bool cfg_apply_foreign_value(tt_run_config *c, const key_spec *k, const source *src, yaml_node_t *node) {
    if (strcmp(k->name, "model_config") == 0 && node->type == YAML_MAPPING_NODE) {
        /* axolotl's model_config: overrides of the base's config.json (tiertrain's: a config.json to train) */
        if (cfg_is_off_value(node)) {
            note(c, off_reason, "model_config: {}");
            return true;
        }
        cfg_die_at(src, node,
                   "model_config: a mapping is axolotl's overrides of the base model's config.json, which tiertrain "
                   "does not apply; edit the model's config.json instead (tiertrain's model_config is the path of a "
                   "config.json to train from random init)");
    }
    if (node->type != YAML_SCALAR_NODE || cfg_is_null(node)) return false;
    const char *text = cfg_scalar_text(node);
    if (strcmp(k->name, "attn_implementation") == 0) return apply_attention_value(c, src, node, text);
    if (strcmp(k->name, "optimizer") == 0) return apply_optimizer_value(c, src, node, text);
    if (strcmp(k->name, "save_strategy") == 0 && strcmp(text, "best") == 0)
        cfg_die_at(src, node,
                   "save_strategy: best saves when metric_for_best_model improves, which tiertrain does not track; "
                   "use steps (save_steps, saves_per_epoch, save_total_limit) or epoch");
    if (strcmp(k->name, "gradient_checkpointing") == 0 &&
        (strcmp(text, "offload") == 0 || strcmp(text, "offload_disk") == 0)) {
        /* axolotl's offloaded checkpointing keeps each layer's input in host memory (or on disk) for the backward */
        c->gradient_checkpointing = true;
        const bool disk = strcmp(text, "offload_disk") == 0;
        c->activation_offloading = disk ? TT_OFFLOAD_DISK : TT_OFFLOAD_HIDDEN_STATES;
        note(c, "axolotl's offloaded checkpointing: the same recompute, each layer's input kept off the GPU",
             disk ? "gradient_checkpointing: offload_disk (= gradient_checkpointing: true, activation_offloading: disk)"
                  : "gradient_checkpointing: offload (= gradient_checkpointing: true, activation_offloading: "
                    "hidden_states)");
        return true;
    }
    if (strcmp(k->name, "tf32") == 0) {
        bool on = false;
        if (cfg_parse_bool(text, &on) && on) {
            c->tf32 = true;
            note(c, "tf32 matmuls: tiertrain's GEMMs take bf16 inputs on the GPU and fp32 on the CPU, without tf32",
                 "tf32: true");
            return true;
        }
    }
    return false;
}

void tt_run_config_print_notes(const tt_run_config *c, FILE *out) {
    if (c->foreign_note_count == 0) return;
    fprintf(out, "config: %d of axolotl's keys and values, read as follows:\n", c->foreign_note_count);
    for (int i = 0; i < c->foreign_note_count; i++) {
        bool first = true;
        for (int j = 0; j < i && first; j++) first = c->foreign_note_reasons[j] != c->foreign_note_reasons[i];
        if (!first) continue;
        fputs("  ", out);
        const char *separator = "";
        for (int j = i; j < c->foreign_note_count; j++) {
            if (c->foreign_note_reasons[j] != c->foreign_note_reasons[i]) continue;
            fprintf(out, "%s%s", separator, c->foreign_note_items[j]);
            separator = ", ";
        }
        fprintf(out, "\n      %s\n", c->foreign_note_reasons[i]);
    }
}

bool tt_run_config_knows_key(const char *name) {
    for (int i = 0; i < cfg_key_count; i++) /* another tool's name of a key: answered with tiertrain's */
        if (cfg_index_in_list(cfg_keys[i].known_as, name, true) >= 0) return true;
    if (cfg_find_key(name)) return true;
    for (size_t i = 0; i < sizeof read_keys / sizeof read_keys[0]; i++)
        if (strcmp(read_keys[i].name, name) == 0) return true;
    for (int i = 0; i < group_count; i++)
        if (cfg_index_in_list(groups[i].names, name, false) >= 0) return true;
    return false;
}
