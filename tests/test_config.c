/* The run configuration: defaults, an axolotl-style file, overrides over the file, the written
 * YAML loading back to the same values, byte sizes, --help and docs/CONFIG.md covering every
 * key, and every kind of bad input ending in one error line that names the place and the key. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/run_config.h"
#include "test_util.h"

static char *scratch;

/* Every key of the configuration, available or not yet: --help and docs/CONFIG.md must name them all. */
static const char *const all_keys[] = {"base_model",
                                       "revision_of_model",
                                       "model_config",
                                       "initializer_range",
                                       "datasets",
                                       "val_set_size",
                                       "sequence_len",
                                       "micro_batch_size",
                                       "gradient_accumulation_steps",
                                       "optimizer",
                                       "learning_rate",
                                       "lr_scheduler",
                                       "warmup_steps",
                                       "warmup_ratio",
                                       "cosine_min_lr_ratio",
                                       "max_steps",
                                       "num_epochs",
                                       "weight_decay",
                                       "max_grad_norm",
                                       "adam_beta1",
                                       "adam_beta2",
                                       "adam_epsilon",
                                       "seed",
                                       "output_dir",
                                       "overwrite_output_dir",
                                       "save_strategy",
                                       "save_steps",
                                       "eval_steps",
                                       "saves_per_epoch",
                                       "save_total_limit",
                                       "eval_strategy",
                                       "evals_per_epoch",
                                       "loss_watchdog_threshold",
                                       "loss_watchdog_patience",
                                       "logging_steps",
                                       "resume_from_checkpoint",
                                       "max_shard_size",
                                       "gradient_checkpointing",
                                       "selective_checkpointing",
                                       "recompute_granularity",
                                       "recompute_method",
                                       "recompute_num_layers",
                                       "every_n_layers",
                                       "checkpoint_trainable_layers_only",
                                       "gradient_checkpointing_kwargs",
                                       "offload_dir",
                                       "trace",
                                       "profile",
                                       "loss_chunk_size",
                                       "tiled_mlp",
                                       "tiled_mlp_num_shards",
                                       "host_memory_budget",
                                       "device",
                                       "gpu_memory_budget",
                                       "gpu",
                                       "num_threads",
                                       "progress",
                                       "use_tensorboard",
                                       "bf16",
                                       "attn_implementation",
                                       "attn_workspace_limit",
                                       "deterministic",
                                       "master_weights",
                                       "fp16",
                                       "tf32",
                                       "activation_offloading",
                                       "min_offload_size",
                                       "use_pin_memory",
                                       "use_streams",
                                       "max_fwd_stash_size",
                                       "debug_copy_delay_us",
                                       "layer_offloading",
                                       "cpu_offloading",
                                       "cpu_offloading_num_layers",
                                       "cpu_offloading_activations",
                                       "cpu_offloading_double_buffering",
                                       "cpu_offloading_weights",
                                       "adapter",
                                       "load_in_4bit",
                                       "load_in_8bit",
                                       "bnb_4bit_quant_type",
                                       "bnb_4bit_use_double_quant",
                                       "bnb_4bit_compute_dtype",
                                       "lora_r",
                                       "lora_alpha",
                                       "lora_dropout",
                                       "lora_target_modules",
                                       "lora_target_linear",
                                       "lora_modules_to_save",
                                       "lora_model_dir",
                                       "freeze_embeddings",
                                       "frozen_layers",
                                       "optimizer_cpu_offload",
                                       "optimizer_offload_fraction",
                                       "overlap_cpu_optimizer_d2h_h2d",
                                       "zero_stage",
                                       "ddp_timeout",
                                       "deepspeed",
                                       "sequence_parallel_degree",
                                       "train_on_inputs",
                                       "dataset_prepared_path",
                                       "shuffle_merged_datasets",
                                       "dataset_exact_deduplication",
                                       "resize_token_embeddings_to_32x",
                                       "tokenizer_config",
                                       "special_tokens",
                                       "train_on_eos",
                                       "chat_template",
                                       "chat_template_jinja",
                                       "chat_template_kwargs",
                                       "eot_tokens",
                                       "excess_length_strategy",
                                       "sample_packing",
                                       "pad_to_sequence_len",
                                       "sample_packing_eff_est",
                                       "sample_packing_bin_size",
                                       "sample_packing_group_size",
                                       "peft_use_rslora",
                                       "neftune_noise_alpha"};
#define ALL_KEY_COUNT ((int)(sizeof all_keys / sizeof all_keys[0]))
#define AVAILABLE_KEY_COUNT 119 /* every key is available (no key of a later feature at the moment) */

/* Writes scratch/name and returns its path (a fresh string that lives to the end of the test). */
static char *write_file(const char *name, const char *text) {
    char *path = malloc(4200);
    snprintf(path, 4200, "%s/%s", scratch, name);
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        exit(2);
    }
    fputs(text, f);
    fclose(f);
    return path;
}

/* The paths handed to tt_expect_die children; freed at the end. */
static char *paths[256];
static int path_count;
static char *yaml_file(const char *name, const char *text) {
    char *p = write_file(name, text);
    if (path_count < 256) paths[path_count++] = p;
    return p;
}

/* A config that passes validate, so each test line changes one thing. */
#define VALID "model_config: m/config.json\ndatasets: [a.tok]\n"

static void load_file(void *arg) {
    tt_run_config c;
    tt_run_config_defaults(&c);
    tt_run_config_load(&c, arg, 0, NULL);
    tt_run_config_validate(&c);
    tt_run_config_free(&c);
}

static void load_override(void *arg) {
    tt_run_config c;
    tt_run_config_defaults(&c);
    char *overrides[1] = {arg};
    tt_run_config_load(&c, NULL, 1, overrides);
    tt_run_config_free(&c);
}

static bool loads(const char *name, const char *text) {
    char *path = write_file(name, text);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        if (__lsan_disable) __lsan_disable();
        load_file(path);
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    free(path);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

static char *capture_yaml(const tt_run_config *c) {
    char *text = NULL;
    size_t size = 0;
    FILE *mem = open_memstream(&text, &size);
    tt_run_config_write_yaml(c, mem);
    fclose(mem);
    return text;
}

static bool same_string(const char *a, const char *b) { return (!a && !b) || (a && b && strcmp(a, b) == 0); }

/* Every field of two configurations equal. */
static bool same_config(const tt_run_config *a, const tt_run_config *b) {
    bool same =
        same_string(a->base_model, b->base_model) && same_string(a->model_config, b->model_config) &&
        a->initializer_range == b->initializer_range && a->dataset_count == b->dataset_count &&
        a->val_set_size == b->val_set_size && a->sequence_len == b->sequence_len &&
        a->micro_batch_size == b->micro_batch_size &&
        a->gradient_accumulation_steps == b->gradient_accumulation_steps && same_string(a->optimizer, b->optimizer) &&
        a->learning_rate == b->learning_rate && a->lr_scheduler == b->lr_scheduler &&
        a->warmup_steps == b->warmup_steps && a->warmup_ratio == b->warmup_ratio &&
        a->cosine_min_lr_ratio == b->cosine_min_lr_ratio && a->max_steps == b->max_steps &&
        a->num_epochs == b->num_epochs && a->weight_decay == b->weight_decay && a->max_grad_norm == b->max_grad_norm &&
        a->adam_beta1 == b->adam_beta1 && a->adam_beta2 == b->adam_beta2 && a->adam_epsilon == b->adam_epsilon &&
        a->seed == b->seed && same_string(a->output_dir, b->output_dir) && a->save_steps == b->save_steps &&
        a->saves_per_epoch == b->saves_per_epoch && a->save_total_limit == b->save_total_limit &&
        a->eval_strategy == b->eval_strategy && a->evals_per_epoch == b->evals_per_epoch &&
        a->loss_watchdog_threshold == b->loss_watchdog_threshold &&
        a->loss_watchdog_patience == b->loss_watchdog_patience && a->tf32 == b->tf32 &&
        a->eval_steps == b->eval_steps && a->logging_steps == b->logging_steps &&
        same_string(a->resume_from_checkpoint, b->resume_from_checkpoint) && a->max_shard_bytes == b->max_shard_bytes &&
        a->gradient_checkpointing == b->gradient_checkpointing &&
        a->selective_checkpointing == b->selective_checkpointing && a->selective_auto == b->selective_auto &&
        a->selective_offload == b->selective_offload && a->recompute_granularity == b->recompute_granularity &&
        a->recompute_method == b->recompute_method && a->recompute_num_layers == b->recompute_num_layers &&
        a->use_reentrant == b->use_reentrant && same_string(a->offload_dir, b->offload_dir) &&
        same_string(a->trace, b->trace) && a->profile == b->profile && a->loss_chunk_size == b->loss_chunk_size &&
        a->tiled_mlp == b->tiled_mlp && a->tiled_mlp_num_shards == b->tiled_mlp_num_shards &&
        a->host_memory_budget == b->host_memory_budget && a->device == b->device && a->num_threads == b->num_threads &&
        a->progress == b->progress && a->use_tensorboard == b->use_tensorboard && same_string(a->gpu, b->gpu) &&
        a->peft_use_rslora == b->peft_use_rslora && a->neftune_noise_alpha == b->neftune_noise_alpha &&
        a->activation_offloading == b->activation_offloading && a->min_offload_size == b->min_offload_size &&
        a->use_pin_memory == b->use_pin_memory && a->use_streams == b->use_streams &&
        a->max_fwd_stash_size == b->max_fwd_stash_size && a->debug_copy_delay_us == b->debug_copy_delay_us &&
        a->selective_offload == b->selective_offload && a->cpu_offloading == b->cpu_offloading &&
        a->layer_offloading == b->layer_offloading && a->every_n_layers == b->every_n_layers &&
        a->checkpoint_trainable_layers_only == b->checkpoint_trainable_layers_only &&
        a->cpu_offloading_num_layers == b->cpu_offloading_num_layers &&
        a->cpu_offloading_activations == b->cpu_offloading_activations &&
        a->cpu_offloading_double_buffering == b->cpu_offloading_double_buffering && a->bf16 == b->bf16 &&
        a->deterministic == b->deterministic && a->optimizer_cpu_offload == b->optimizer_cpu_offload &&
        a->optimizer_offload_fraction == b->optimizer_offload_fraction &&
        a->overlap_cpu_optimizer_d2h_h2d == b->overlap_cpu_optimizer_d2h_h2d && a->fp16 == b->fp16 &&
        a->tf32 == b->tf32 && a->adapter == b->adapter && a->lora_r == b->lora_r && a->lora_alpha == b->lora_alpha &&
        a->lora_dropout == b->lora_dropout && a->lora_target_modules == b->lora_target_modules &&
        a->lora_target_linear == b->lora_target_linear && same_string(a->lora_model_dir, b->lora_model_dir) &&
        a->freeze_embeddings == b->freeze_embeddings && a->frozen_layer_count == b->frozen_layer_count &&
        a->train_on_inputs == b->train_on_inputs && same_string(a->dataset_prepared_path, b->dataset_prepared_path) &&
        a->shuffle_merged_datasets == b->shuffle_merged_datasets &&
        same_string(a->tokenizer_config, b->tokenizer_config) && same_string(a->special_bos, b->special_bos) &&
        same_string(a->special_eos, b->special_eos) && same_string(a->special_pad, b->special_pad) &&
        a->train_on_eos == b->train_on_eos && a->excess_length_strategy == b->excess_length_strategy &&
        a->sample_packing == b->sample_packing && a->sample_packing_bin_size == b->sample_packing_bin_size &&
        a->sample_packing_group_size == b->sample_packing_group_size;
    for (int i = 0; same && i < a->dataset_count; i++) {
        const tt_dataset_spec *x = &a->dataset_specs[i], *y = &b->dataset_specs[i];
        same = same_string(a->datasets[i], b->datasets[i]) && x->type == y->type && same_string(x->field, y->field) &&
               same_string(x->field_instruction, y->field_instruction) && same_string(x->field_input, y->field_input) &&
               same_string(x->field_output, y->field_output) && same_string(x->split, y->split) &&
               x->user_defined == y->user_defined && same_string(x->format, y->format) &&
               same_string(x->no_input_format, y->no_input_format) && same_string(x->system_format, y->system_format) &&
               same_string(x->system_prompt, y->system_prompt) && same_string(x->field_system, y->field_system) &&
               same_string(x->chat_template, y->chat_template) &&
               same_string(x->chat_template_jinja, y->chat_template_jinja) &&
               same_string(x->field_messages, y->field_messages) &&
               x->property_mapping_count == y->property_mapping_count && x->roles_given == y->roles_given &&
               x->role_alias_count == y->role_alias_count && x->roles_to_train_count == y->roles_to_train_count &&
               x->train_on_eos == y->train_on_eos && x->drop_system_message == y->drop_system_message &&
               x->train_on_eot == y->train_on_eot && x->split_thinking == y->split_thinking &&
               same_string(x->message_field_training, y->message_field_training) &&
               same_string(x->message_field_training_detail, y->message_field_training_detail);
        for (int k = 0; same && k < x->property_mapping_count; k++)
            same = same_string(x->property_names[k], y->property_names[k]) &&
                   same_string(x->property_fields[k], y->property_fields[k]);
        for (int k = 0; same && k < x->role_alias_count; k++)
            same = same_string(x->role_alias_from[k], y->role_alias_from[k]) &&
                   same_string(x->role_alias_to[k], y->role_alias_to[k]);
        for (int k = 0; same && k < x->roles_to_train_count; k++)
            same = same_string(x->roles_to_train[k], y->roles_to_train[k]);
    }
    same = same && same_string(a->chat_template, b->chat_template) &&
           same_string(a->chat_template_jinja, b->chat_template_jinja) &&
           same_string(a->chat_template_kwargs, b->chat_template_kwargs) &&
           (a->eot_tokens == NULL) == (b->eot_tokens == NULL) && a->eot_token_count == b->eot_token_count;
    for (int i = 0; same && i < a->eot_token_count; i++) same = same_string(a->eot_tokens[i], b->eot_tokens[i]);
    for (int64_t i = 0; same && i < a->frozen_layer_count; i++) same = a->frozen_layers[i] == b->frozen_layers[i];
    return same;
}

static void test_defaults(void) {
    tt_run_config c;
    tt_run_config_defaults(&c);
    TT_EXPECT(c.base_model == NULL && c.model_config == NULL && c.initializer_range == 0 && c.dataset_count == 0,
              "model and data defaults");
    TT_EXPECT(c.val_set_size == 0 && c.sequence_len == 512 && c.micro_batch_size == 1 &&
                  c.gradient_accumulation_steps == 1,
              "batch defaults");
    TT_EXPECT(strcmp(c.optimizer, "adamw_torch") == 0 && c.learning_rate == 2e-5 && c.lr_scheduler == TT_LR_COSINE &&
                  c.warmup_steps == -1 && c.warmup_ratio == 0 && c.cosine_min_lr_ratio == 0 && c.max_steps == 0 &&
                  c.num_epochs == 1.0 && c.weight_decay == 0 && c.max_grad_norm == 1.0 && c.adam_beta1 == 0.9 &&
                  c.adam_beta2 == 0.999 && c.adam_epsilon == 1e-8 && c.seed == 42,
              "optimiser defaults");
    TT_EXPECT(strcmp(c.output_dir, "./outputs") == 0 && c.save_steps == 0 && c.eval_steps == 0 &&
                  c.logging_steps == 1 && c.resume_from_checkpoint == NULL && c.max_shard_bytes == 5000000000LL,
              "output defaults");
    TT_EXPECT(!c.gradient_checkpointing && c.loss_chunk_size == 1024 && c.host_memory_budget == 0 &&
                  c.device == TT_DEVICE_AUTO && c.gpu_memory_budget == 0 && c.master_weights &&
                  c.attn_implementation == TT_ATTN_AUTO && c.num_threads == 0 && c.progress &&
                  c.activation_offloading == TT_OFFLOAD_NONE && c.bf16 == TT_BF16_AUTO && !c.fp16 && !c.tf32,
              "memory and execution defaults (bf16: auto)");
    tt_run_config_free(&c);
    TT_EXPECT(c.optimizer == NULL && c.output_dir == NULL, "free clears the strings");

    /* An empty file, a file of comments and a null document are all defaults. */
    tt_run_config d;
    tt_run_config_defaults(&c);
    const char *empties[] = {"", "# nothing here\n", "~\n", "---\n"};
    for (int i = 0; i < 4; i++) {
        tt_run_config_defaults(&d);
        char *path = write_file("empty.yaml", empties[i]);
        tt_run_config_load(&d, path, 0, NULL);
        TT_EXPECT(same_config(&c, &d), "empty config %d is the defaults", i);
        tt_run_config_free(&d);
        free(path);
    }
    tt_run_config_free(&c);
}

/* Each enum key: every name of its value list (the X-macro list of run_config.h) loads as the enum member of
 * the same list, as a file's value and as an override. */
#define ENUM_CASE(member, name) {name, (int)(member)},
typedef struct enum_case {
    const char *name;
    int member;
} enum_case;

static void check_enum_key(const char *key, const enum_case *cases, int count, size_t offset) {
    for (int i = 0; i < count; i++) {
        tt_run_config c;
        tt_run_config_defaults(&c);
        char override[128];
        snprintf(override, sizeof override, "%s=%s", key, cases[i].name);
        char *overrides[] = {override};
        tt_run_config_load(&c, NULL, 1, overrides);
        const int stored = *(const int *)((const char *)&c + offset);
        TT_EXPECT(stored == cases[i].member, "%s: %s is stored as member %d (got %d)", key, cases[i].name,
                  cases[i].member, stored);
        tt_run_config_free(&c);
    }
}

#define CHECK_ENUM_KEY(key, list, field)                                                                   \
    do {                                                                                                   \
        static const enum_case cases[] = {list(ENUM_CASE)};                                                \
        check_enum_key(key, cases, (int)(sizeof cases / sizeof cases[0]), offsetof(tt_run_config, field)); \
    } while (0)

static void test_enum_keys(void) {
    CHECK_ENUM_KEY("lr_scheduler", TT_LR_SCHEDULER_VALUES, lr_scheduler);
    CHECK_ENUM_KEY("recompute_granularity", TT_RECOMPUTE_GRANULARITY_VALUES, recompute_granularity);
    CHECK_ENUM_KEY("recompute_method", TT_RECOMPUTE_METHOD_VALUES, recompute_method);
    CHECK_ENUM_KEY("device", TT_DEVICE_VALUES, device);
    CHECK_ENUM_KEY("activation_offloading", TT_ACTIVATION_OFFLOADING_VALUES, activation_offloading);
    CHECK_ENUM_KEY("bf16", TT_BF16_VALUES, bf16);
    CHECK_ENUM_KEY("attn_implementation", TT_ATTN_IMPLEMENTATION_VALUES, attn_implementation);
    CHECK_ENUM_KEY("train_on_eos", TT_TRAIN_ON_EOS_VALUES, train_on_eos);
    CHECK_ENUM_KEY("save_strategy", TT_SAVE_STRATEGY_VALUES, save_strategy);
    CHECK_ENUM_KEY("excess_length_strategy", TT_EXCESS_LENGTH_VALUES, excess_length_strategy);
    CHECK_ENUM_KEY("bnb_4bit_quant_type", TT_QUANT_TYPE_VALUES, bnb_4bit_quant_type);
    CHECK_ENUM_KEY("bnb_4bit_compute_dtype", TT_COMPUTE_DTYPE_VALUES, bnb_4bit_compute_dtype);
    TT_EXPECT(strcmp(tt_train_on_eos_name(TT_EOS_LAST), "last") == 0 &&
                  strcmp(tt_train_on_eos_name(TT_EOS_TURN), "turn") == 0,
              "train_on_eos names");
}

static void test_full_file_and_overrides(void) {
    char *path = write_file("axolotl.yaml", "# an axolotl-style run\n"
                                            "base_model: /models/Qwen3-0.6B\n"
                                            "datasets:\n"
                                            "  - path: data/a.tok\n"
                                            "  - path: data/b.tok\n"
                                            "    type: tokens\n"
                                            "  - data/c.tok\n"
                                            "val_set_size: 0.05\n"
                                            "sequence_len: 2048\n"
                                            "micro_batch_size: 2\n"
                                            "gradient_accumulation_steps: 8\n"
                                            "optimizer: adamw_torch_fused\n"
                                            "learning_rate: 1e-4\n"
                                            "lr_scheduler: linear\n"
                                            "warmup_ratio: 0.1\n"
                                            "cosine_min_lr_ratio: 0.1\n"
                                            "max_steps: 100\n"
                                            "num_epochs: 3\n"
                                            "weight_decay: 0.1\n"
                                            "max_grad_norm: 0\n"
                                            "adam_beta1: 0.8\n"
                                            "adam_beta2: 0.95\n"
                                            "adam_epsilon: 1.0e-6\n"
                                            "seed: 7\n"
                                            "output_dir: \"runs/qwen 3\"\n"
                                            "save_steps: 50\n"
                                            "eval_steps: 25\n"
                                            "logging_steps: 5\n"
                                            "resume_from_checkpoint: runs/x/checkpoint-50\n"
                                            "max_shard_size: 2GB\n"
                                            "gradient_checkpointing: True\n"
                                            "activation_offloading: false\n"
                                            "loss_chunk_size: 4096\n"
                                            "host_memory_budget: 24GiB\n"
                                            "device: cpu\n"
                                            "num_threads: 4\n"
                                            "progress: false\n"
                                            "bf16: false\n"
                                            "fp16: false\n"
                                            "tf32: False\n"
                                            "initializer_range: 0.01\n"
                                            "adapter:\n"
                                            "lora_r:\n"
                                            "lora_dropout: 0.0\n"
                                            "lora_target_modules: []\n"
                                            "gradient_checkpointing_kwargs: {}\n"
                                            "layer_offloading: false\n"
                                            "trace: ~\n");
    tt_run_config c;
    tt_run_config_defaults(&c);
    tt_run_config_load(&c, path, 0, NULL);
    TT_EXPECT(strcmp(c.base_model, "/models/Qwen3-0.6B") == 0 && c.model_config == NULL && c.initializer_range == 0.01,
              "model keys");
    TT_EXPECT(c.dataset_count == 3 && strcmp(c.datasets[0], "data/a.tok") == 0 &&
                  strcmp(c.datasets[1], "data/b.tok") == 0 && strcmp(c.datasets[2], "data/c.tok") == 0,
              "datasets: mappings and a plain path");
    TT_EXPECT(c.val_set_size == 0.05 && c.sequence_len == 2048 && c.micro_batch_size == 2 &&
                  c.gradient_accumulation_steps == 8,
              "batch keys");
    TT_EXPECT(strcmp(c.optimizer, "adamw_torch_fused") == 0 && c.learning_rate == 1e-4 &&
                  c.lr_scheduler == TT_LR_LINEAR && c.warmup_steps == -1 && c.warmup_ratio == 0.1 &&
                  c.cosine_min_lr_ratio == 0.1 && c.max_steps == 100 && c.num_epochs == 3 && c.weight_decay == 0.1 &&
                  c.max_grad_norm == 0 && c.adam_beta1 == 0.8 && c.adam_beta2 == 0.95 && c.adam_epsilon == 1e-6 &&
                  c.seed == 7,
              "optimiser keys");
    TT_EXPECT(strcmp(c.output_dir, "runs/qwen 3") == 0 && c.save_steps == 50 && c.eval_steps == 25 &&
                  c.logging_steps == 5 && strcmp(c.resume_from_checkpoint, "runs/x/checkpoint-50") == 0 &&
                  c.max_shard_bytes == 2000000000LL,
              "output keys");
    TT_EXPECT(c.gradient_checkpointing && c.activation_offloading == TT_OFFLOAD_NONE && c.loss_chunk_size == 4096 &&
                  c.host_memory_budget == 24LL << 30 && c.device == TT_DEVICE_CPU && c.num_threads == 4 &&
                  !c.progress && c.bf16 == TT_BF16_OFF && !c.fp16 && !c.tf32,
              "memory and execution keys");
    tt_run_config_validate(&c);
    tt_run_config_free(&c);

    /* Overrides win over the file, each value read as YAML. */
    char *overrides[] = {"learning_rate=1e-3",
                         "datasets=[x.tok,y.tok]",
                         "seed=9",
                         "base_model=null",
                         "model_config=cfg.json",
                         "lr_scheduler=constant",
                         "host_memory_budget=512MB",
                         "warmup_ratio=0",
                         "warmup_steps=3",
                         "resume_from_checkpoint=",
                         "gradient_checkpointing=false",
                         "bf16=auto",
                         "output_dir=out"};
    int n = (int)(sizeof overrides / sizeof overrides[0]);
    tt_run_config_defaults(&c);
    tt_run_config_load(&c, path, n, overrides);
    tt_run_config_validate(&c);
    TT_EXPECT(c.learning_rate == 1e-3 && c.seed == 9 && c.dataset_count == 2 && strcmp(c.datasets[0], "x.tok") == 0 &&
                  strcmp(c.datasets[1], "y.tok") == 0,
              "overrides win over the file");
    TT_EXPECT(c.base_model == NULL && strcmp(c.model_config, "cfg.json") == 0 && c.lr_scheduler == TT_LR_CONSTANT &&
                  c.host_memory_budget == 512000000LL && c.warmup_steps == 3 && c.warmup_ratio == 0 &&
                  c.resume_from_checkpoint == NULL && !c.gradient_checkpointing && c.bf16 == TT_BF16_AUTO &&
                  strcmp(c.output_dir, "out") == 0,
              "overrides: null and empty unset strings, enums, sizes");
    TT_EXPECT(c.sequence_len == 2048 && c.micro_batch_size == 2, "keys not overridden keep the file's values");
    tt_run_config_free(&c);

    /* Overrides alone; the last of two wins; a single path for datasets; warmup_steps=~ unsets it. */
    char *only[] = {"model_config=m.json", "datasets=one.tok", "seed=1",        "seed=2",
                    "warmup_steps=5",      "warmup_steps=~",   "num_epochs=0.5"};
    tt_run_config_defaults(&c);
    tt_run_config_load(&c, NULL, 7, only);
    tt_run_config_validate(&c);
    TT_EXPECT(c.dataset_count == 1 && strcmp(c.datasets[0], "one.tok") == 0 && c.seed == 2 && c.warmup_steps == -1 &&
                  c.num_epochs == 0.5,
              "overrides without a file");
    tt_run_config_free(&c);
    free(path);
}

static void test_round_trip(void) {
    /* Every key away from its default, strings that need quoting included. */
    char *overrides[] = {
        "model_config=\"null\"",
        ("datasets=[\"a b.tok\", \"we\\\"ird\\\\name.tok\", \"tab\\there\", \"~\", \"123\", \"é-ü.tok\", "
         "\"line\\nbreak\", \"\\x01\\x80\\uFEFF\"]"),
        "initializer_range=0.037",
        "val_set_size=12",
        "sequence_len=64",
        "micro_batch_size=3",
        "gradient_accumulation_steps=5",
        "optimizer=adamw_torch_fused",
        "learning_rate=3.3e-4",
        "lr_scheduler=constant",
        "warmup_steps=0",
        "warmup_ratio=0.25",
        "cosine_min_lr_ratio=0.1",
        "max_steps=17",
        "num_epochs=2.5",
        "weight_decay=0.01",
        "max_grad_norm=0.3",
        "adam_beta1=0.85",
        "adam_beta2=0.9",
        "adam_epsilon=1e-7",
        "seed=0",
        "output_dir=\"out: dir #1\"",
        "save_steps=0.125",
        "eval_steps=2",
        "save_total_limit=3",
        "eval_strategy=epoch",
        "loss_watchdog_threshold=7.5",
        "loss_watchdog_patience=4",
        "tf32=true",
        "logging_steps=3",
        "resume_from_checkpoint=-ckpt",
        "max_shard_size=1.5GiB",
        "gradient_checkpointing=true",
        "loss_chunk_size=7",
        "host_memory_budget=3G",
        "num_threads=2",
        "progress=false",
        "bf16=false",
        "adapter=lora",
        "lora_r=16",
        "lora_alpha=32",
        "lora_dropout=0.05",
        "lora_target_modules=[v_proj, q, down_proj]",
        "lora_target_linear=true",
        "lora_model_dir=runs/adapter"};
    int n = (int)(sizeof overrides / sizeof overrides[0]);
    tt_run_config c, again, defaults;
    tt_run_config_defaults(&c);
    tt_run_config_load(&c, NULL, n, overrides);
    TT_EXPECT(c.dataset_count == 8 && strcmp(c.datasets[1], "we\"ird\\name.tok") == 0 &&
                  strcmp(c.model_config, "null") == 0 && strcmp(c.datasets[3], "~") == 0,
              "quoted values are strings");
    char *text = capture_yaml(&c);
    char *path = write_file("written.yaml", text);
    tt_run_config_defaults(&again);
    tt_run_config_load(&again, path, 0, NULL);
    TT_EXPECT(same_config(&c, &again), "write_yaml loads back to an equal config:\n%s", text);
    char *text2 = capture_yaml(&again);
    TT_EXPECT(strcmp(text, text2) == 0, "written twice, the same text");
    for (int i = 0; i < ALL_KEY_COUNT; i++) {
        char line[80];
        snprintf(line, sizeof line, "\n%s:", all_keys[i]);
        bool reserved = i >= AVAILABLE_KEY_COUNT;
        TT_EXPECT(reserved == (strstr(text, line) == NULL), "write_yaml writes %s iff it is available", all_keys[i]);
    }
    free(text);
    free(text2);
    free(path);
    tt_run_config_free(&again);

    /* The defaults round-trip too (nulls, -1, an empty datasets list). */
    tt_run_config_defaults(&defaults);
    text = capture_yaml(&defaults);
    path = write_file("defaults.yaml", text);
    tt_run_config_defaults(&again);
    tt_run_config_load(&again, path, 0, NULL);
    TT_EXPECT(same_config(&defaults, &again), "defaults round trip:\n%s", text);
    free(text);
    free(path);
    tt_run_config_free(&again);
    tt_run_config_free(&defaults);
    tt_run_config_free(&c);
}

/* JSON dataset entries and the SFT keys survive write_yaml (the run.yaml next to checkpoints). */
static void test_sft_round_trip(void) {
    char *overrides[] = {"datasets=[{path: a.jsonl, type: alpaca, field_instruction: q, field_output: \"a b\"}, "
                         "{path: \"b c.json\", type: completion, field: body, split: train}, "
                         "{path: d.jsonl, type: input_output}, "
                         "{path: e.jsonl, type: {field_instruction: q, format: \"[INST] {instruction} {input} "
                         "[/INST]\", system_format: \"<<SYS>>{system}<</SYS>> {{x}}\"}}]",
                         "train_on_inputs=true",
                         "dataset_prepared_path=prep",
                         "shuffle_merged_datasets=false",
                         "tokenizer_config=/tok",
                         "special_tokens={eos_token: \"<|im_end|>\", bos_token: \"<s>\"}",
                         "train_on_eos=none",
                         "excess_length_strategy=truncate"};
    tt_run_config c, again;
    tt_run_config_defaults(&c);
    tt_run_config_load(&c, NULL, (int)(sizeof overrides / sizeof overrides[0]), overrides);
    char *text = capture_yaml(&c);
    char *path = write_file("sft_written.yaml", text);
    tt_run_config_defaults(&again);
    tt_run_config_load(&again, path, 0, NULL);
    TT_EXPECT(same_config(&c, &again) && again.dataset_specs[0].type == TT_DATASET_ALPACA &&
                  strcmp(again.dataset_specs[0].field_output, "a b") == 0 && again.dataset_specs[3].user_defined &&
                  strcmp(again.dataset_specs[3].no_input_format, "{instruction} ") == 0 &&
                  again.excess_length_strategy == TT_EXCESS_TRUNCATE,
              "SFT keys round trip:\n%s", text);
    free(text);
    free(path);
    tt_run_config_free(&c);
    tt_run_config_free(&again);
}

/* chat_template entries: mappings, aliases, roles_to_train, the dataset's train_on_eos and
 * template, the top-level template, through the written YAML and back */
static void test_chat_round_trip(void) {
    char *overrides[] = {
        "datasets=[{path: a.jsonl, type: chat_template, field_messages: conversations, "
        "message_property_mappings: {role: from, content: value, name: speaker}, roles: {user: [human, "
        "q], assistant: [gpt]}, roles_to_train: [gpt, human], train_on_eos: last, drop_system_message: "
        "true}, {path: b.jsonl, type: chat_template, chat_template_jinja: \"{{ x }}\\n\"}, "
        "{path: c.jsonl, type: chat_template, message_field_role: speaker, roles_to_train: []}]",
        "chat_template=chatml", "train_on_eos=all"};
    tt_run_config c, again;
    tt_run_config_defaults(&c);
    tt_run_config_load(&c, NULL, (int)(sizeof overrides / sizeof overrides[0]), overrides);
    const tt_dataset_spec *d = &c.dataset_specs[0], *e = &c.dataset_specs[1], *f = &c.dataset_specs[2];
    TT_EXPECT(d->property_mapping_count == 3 && strcmp(d->property_names[0], "role") == 0 &&
                  strcmp(d->property_fields[0], "from") == 0 && strcmp(d->property_names[2], "name") == 0 &&
                  d->roles_given && d->role_alias_count == 3 && strcmp(d->role_alias_from[1], "q") == 0 &&
                  strcmp(d->role_alias_to[1], "user") == 0 && d->roles_to_train_count == 2 && d->train_on_eos == 2 &&
                  d->drop_system_message && strcmp(d->field_messages, "conversations") == 0,
              "the first chat entry's keys");
    TT_EXPECT(strcmp(e->chat_template, "jinja") == 0 && strcmp(e->chat_template_jinja, "{{ x }}\n") == 0 &&
                  e->roles_to_train_count == 1 && strcmp(e->roles_to_train[0], "assistant") == 0 &&
                  e->train_on_eos == -1 && e->property_mapping_count == 2 && strcmp(e->field_messages, "messages") == 0,
              "chat_template_jinja implies jinja; axolotl's defaults");
    TT_EXPECT(f->roles_to_train_count == 0 && strcmp(f->property_fields[0], "speaker") == 0,
              "roles_to_train [] and message_field_role");
    char *text = capture_yaml(&c);
    char *path = write_file("chat_written.yaml", text);
    tt_run_config_defaults(&again);
    tt_run_config_load(&again, path, 0, NULL);
    TT_EXPECT(same_config(&c, &again) && strcmp(again.chat_template, "chatml") == 0 && again.train_on_eos == 1,
              "chat keys round trip:\n%s", text);
    free(text);
    free(path);
    tt_run_config_free(&c);
    tt_run_config_free(&again);
}

/* issue 14's chat keys: chat_template_kwargs (YAML values as JSON), eot_tokens, and the entries' train_on_eot,
 * message_field_training(_detail) and split_thinking, through the written YAML and back */
static void test_chat_keys_round_trip(void) {
    char *overrides[] = {"datasets=[{path: a.jsonl, type: chat_template, train_on_eot: all, train_on_eos: all, "
                         "message_field_training: trains, message_field_training_detail: spans, split_thinking: true}, "
                         "{path: b.jsonl, type: chat_template}]",
                         "chat_template_kwargs={enable_thinking: false, level: 3, scale: 0.5, name: \"x \\\"y\\\"\", "
                         "quoted: \"true\", none: ~, tags: [a, 1], nested: {deep: [true]}}",
                         "eot_tokens=[\"<|im_end|>\", \"<|endoftext|>\"]"};
    tt_run_config c, again;
    tt_run_config_defaults(&c);
    TT_EXPECT(c.chat_template_kwargs == NULL && c.eot_tokens == NULL && c.dataset_count == 0, "defaults: none");
    tt_run_config_load(&c, NULL, (int)(sizeof overrides / sizeof overrides[0]), overrides);
    const tt_dataset_spec *d = &c.dataset_specs[0], *e = &c.dataset_specs[1];
    TT_EXPECT(d->train_on_eot == 1 && d->split_thinking && strcmp(d->message_field_training, "trains") == 0 &&
                  strcmp(d->message_field_training_detail, "spans") == 0,
              "the entry's keys");
    TT_EXPECT(e->train_on_eot == -1 && !e->split_thinking && !e->message_field_training &&
                  !e->message_field_training_detail,
              "the defaults: train_on_eot as train_on_eos, no fields, no split");
    TT_EXPECT(
        c.chat_template_kwargs &&
            strcmp(c.chat_template_kwargs,
                   "{\"enable_thinking\": false, \"level\": 3, \"scale\": 0.5, \"name\": \"x \\\"y\\\"\", "
                   "\"quoted\": \"true\", \"none\": null, \"tags\": [\"a\", 1], \"nested\": {\"deep\": [true]}}") == 0,
        "chat_template_kwargs as JSON: %s", c.chat_template_kwargs);
    TT_EXPECT(c.eot_token_count == 2 && strcmp(c.eot_tokens[1], "<|endoftext|>") == 0, "eot_tokens");
    char *text = capture_yaml(&c);
    char *path = write_file("chat_keys_written.yaml", text);
    tt_run_config_defaults(&again);
    tt_run_config_load(&again, path, 0, NULL);
    TT_EXPECT(same_config(&c, &again), "chat keys round trip:\n%s", text);
    free(text);
    free(path);
    tt_run_config_free(&again);
    /* eot_tokens: [] is given (no end-of-turn token), ~ is not; chat_template_kwargs {} is none */
    char *empty[] = {"eot_tokens=[]", "chat_template_kwargs={}"};
    tt_run_config_load(&c, NULL, 2, empty);
    TT_EXPECT(c.eot_tokens != NULL && c.eot_token_count == 0 && c.chat_template_kwargs == NULL, "[] and {}");
    text = capture_yaml(&c);
    TT_EXPECT(strstr(text, "\neot_tokens: []\n") && strstr(text, "\nchat_template_kwargs: ~\n"), "%s", text);
    free(text);
    char *packing[] = {"sample_packing=true", "sample_packing_bin_size=7", "sample_packing_group_size=1000"};
    tt_run_config_load(&c, NULL, 3, packing);
    text = capture_yaml(&c);
    char *packing_path = write_file("packing_written.yaml", text);
    tt_run_config_defaults(&again);
    tt_run_config_load(&again, packing_path, 0, NULL);
    TT_EXPECT(same_config(&c, &again) && again.sample_packing_bin_size == 7 && again.sample_packing_group_size == 1000,
              "axolotl's multipack keys round trip:\n%s", text);
    tt_run_config_free(&again);
    free(packing_path);
    free(text);
    char *unset[] = {"eot_tokens=~"};
    tt_run_config_load(&c, NULL, 1, unset);
    TT_EXPECT(c.eot_tokens == NULL && c.eot_token_count == 0, "~ unsets eot_tokens");
    tt_run_config_free(&c);
}

static void test_parse_bytes(void) {
    TT_EXPECT(tt_parse_bytes("123") == 123 && tt_parse_bytes("0") == 0, "plain bytes");
    TT_EXPECT(tt_parse_bytes("4KiB") == 4096 && tt_parse_bytes("4KB") == 4000 && tt_parse_bytes("4K") == 4096 &&
                  tt_parse_bytes("4kb") == 4000,
              "kilo");
    TT_EXPECT(tt_parse_bytes("1.5GiB") == 1610612736LL && tt_parse_bytes("2GB") == 2000000000LL &&
                  tt_parse_bytes("512MiB") == 512LL << 20 && tt_parse_bytes("512MB") == 512000000LL &&
                  tt_parse_bytes("8G") == 8LL << 30 && tt_parse_bytes("24GiB") == 24LL << 30 &&
                  tt_parse_bytes("1T") == 1LL << 40 && tt_parse_bytes("2TB") == 2000000000000LL &&
                  tt_parse_bytes("10B") == 10 && tt_parse_bytes(" 24 GiB ") == 24LL << 30 &&
                  tt_parse_bytes(".5KiB") == 512 && tt_parse_bytes("1.0") == 1,
              "units");
    TT_EXPECT(tt_parse_bytes("9223372036854775807") == INT64_MAX && tt_parse_bytes("8388607TiB") == 8388607LL << 40,
              "the largest sizes");
    TT_EXPECT(tt_parse_bytes("abc") == -1 && tt_parse_bytes("") == -1 && tt_parse_bytes(NULL) == -1 &&
                  tt_parse_bytes("-5") == -1 && tt_parse_bytes("-1GiB") == -1 && tt_parse_bytes("+5") == -1 &&
                  tt_parse_bytes("5XB") == -1 && tt_parse_bytes("GiB") == -1 && tt_parse_bytes("1.5") == -1 &&
                  tt_parse_bytes("1.") == -1 && tt_parse_bytes("1e9") == -1 && tt_parse_bytes("0x10") == -1 &&
                  tt_parse_bytes("inf") == -1 && tt_parse_bytes("nan") == -1 && tt_parse_bytes("5 5") == -1,
              "garbage and negative sizes are -1");
    TT_EXPECT(tt_parse_bytes("9223372036854775808") == -1 && tt_parse_bytes("99999999999999999999999") == -1 &&
                  tt_parse_bytes("8388608TiB") == -1 && tt_parse_bytes("1e30GB") == -1 &&
                  tt_parse_bytes("9223372036854775807.5KiB") == -1,
              "overflow is -1");
}

static char *read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *text = NULL;
    size_t size = 0;
    FILE *mem = open_memstream(&text, &size);
    char buf[4096];
    size_t got;
    while ((got = fread(buf, 1, sizeof buf, f)) > 0) fwrite(buf, 1, got, mem);
    fclose(f);
    fclose(mem);
    return text;
}

static void test_help_and_docs(const char *source_dir) {
    char *text = NULL;
    size_t size = 0;
    FILE *mem = open_memstream(&text, &size);
    tt_run_config_print_help(mem);
    fclose(mem);
    for (int i = 0; i < ALL_KEY_COUNT; i++) {
        char needle[80];
        snprintf(needle, sizeof needle, "\n  %s ", all_keys[i]);
        TT_EXPECT(strstr(text, needle) != NULL, "--help lists %s", all_keys[i]);
    }
    TT_EXPECT(strstr(text, "cosine, linear, constant") && strstr(text, ">= 1") && strstr(text, "in [0, 1)") &&
                  strstr(text, "adamw_torch, adamw_torch_fused") &&
                  strstr(text, "Values not available yet: fp16: true") && strstr(text, "hidden_states") &&
                  strstr(text, "2e-5"),
              "--help shows types, defaults and valid values");
    TT_EXPECT(!strstr(text, "Not available yet (keys of later features"),
              "no section for keys of later features: none");

    /* docs/CONFIG.md documents every key --help prints (each line "  <key> ..." of the help). */
    char docs_path[4200];
    snprintf(docs_path, sizeof docs_path, "%s/docs/CONFIG.md", source_dir);
    char *docs = read_text(docs_path);
    TT_EXPECT(docs != NULL, "read %s", docs_path);
    int documented = 0;
    for (const char *line = text; docs && line && *line; line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
        if (strncmp(line, "  ", 2) != 0 || line[2] == ' ') continue;
        char key[80], needle[90];
        if (sscanf(line + 2, "%79s", key) != 1 || strcmp(key, "KEY") == 0) continue;
        snprintf(needle, sizeof needle, "`%s`", key);
        TT_EXPECT(strstr(docs, needle) != NULL, "docs/CONFIG.md documents %s", key);
        documented++;
    }
    TT_EXPECT(documented == ALL_KEY_COUNT, "docs checked %d keys of %d", documented, ALL_KEY_COUNT);
    if (docs) {
        const char *later = strstr(docs, "## Not available yet");
        TT_EXPECT(later && strstr(later, "`fp16: true`"), "docs list the values not available yet");
    }
    free(docs);
    free(text);
}

static void test_errors(void) {
    /* malformed YAML: libyaml's problem, with the line */
    tt_expect_die(load_file, yaml_file("malformed.yaml", "seed: 1\nlearning_rate: [1, 2\nwarmup_steps: 3\n"),
                  "malformed.yaml:3:");
    tt_expect_die(load_file, yaml_file("malformed2.yaml", "seed: 1\n  bad indent: 2\n"), "malformed YAML");
    tt_expect_die(load_file, yaml_file("tabs.yaml", "seed:\t1\n\tx: 2\n"), "tabs.yaml:2:");
    tt_expect_die(load_file, yaml_file("twodocs.yaml", VALID "---\nseed: 3\n"),
                  "twodocs.yaml:4: a second YAML document");
    /* the top level */
    tt_expect_die(load_file, yaml_file("list.yaml", "- a\n- b\n"), "list.yaml:1: the top level must be a mapping");
    tt_expect_die(load_file, yaml_file("scalar.yaml", "hello\n"), "the top level must be a mapping");
    tt_expect_die(load_file, yaml_file("complexkey.yaml", "[a, b]: 1\n"), "keys must be names");
    /* unknown keys */
    tt_expect_die(load_file, yaml_file("unknown.yaml", VALID "learning_rat: 1\n"),
                  "unknown.yaml:3: unknown key 'learning_rat'; did you mean 'learning_rate'?");
    tt_expect_die(load_file, yaml_file("unknown2.yaml", "gradient_checkpoint: true\n"),
                  "did you mean 'gradient_checkpointing'?");
    tt_expect_die(load_file, yaml_file("unknown3.yaml", "zzzzzzzzzzz: 1\n"),
                  "unknown key 'zzzzzzzzzzz' (`tiertrain train --help` lists every key)");
    tt_expect_die(load_file, yaml_file("trl.yaml", "num_train_epochs: 3\n"),
                  "unknown key 'num_train_epochs'; tiertrain calls it 'num_epochs'");
    tt_expect_die(load_file, yaml_file("hf.yaml", "per_device_train_batch_size: 3\n"),
                  "tiertrain calls it 'micro_batch_size'");
    tt_expect_die(load_override, "training.learning_rate=1", "did you mean 'learning_rate'?");
    tt_expect_die(load_override, "lr=1", "tiertrain calls it 'learning_rate'");
    /* wrong types */
    tt_expect_die(load_file, yaml_file("type.yaml", VALID "learning_rate: abc\n"),
                  "type.yaml:3: learning_rate: expected a number, got 'abc'");
    tt_expect_die(load_file, yaml_file("type2.yaml", "learning_rate: [1]\n"),
                  "learning_rate: expected a number, got a list");
    TT_EXPECT(loads("type3.yaml", VALID "learning_rate:\nfp16:\nbf16:\nwarmup_steps:\nhost_memory_budget:\n"),
              "nothing after a key (axolotl's templates) is its default");
    tt_expect_die(load_file, yaml_file("inf.yaml", "learning_rate: .inf\n"), "expected a number, got '.inf'");
    tt_expect_die(load_file, yaml_file("nan.yaml", "learning_rate: nan\n"), "expected a number, got 'nan'");
    tt_expect_die(load_file, yaml_file("hex.yaml", "learning_rate: 0x1p-3\n"), "expected a number");
    tt_expect_die(load_file, yaml_file("huge.yaml", "learning_rate: 1e999\n"), "outside the range of a double");
    tt_expect_die(load_file, yaml_file("int.yaml", "micro_batch_size: 1.5\n"),
                  "micro_batch_size: expected an integer, got '1.5'");
    tt_expect_die(load_file, yaml_file("int2.yaml", "micro_batch_size: 1e3\n"), "expected an integer, got '1e3'");
    tt_expect_die(load_file, yaml_file("int3.yaml", "seed: 99999999999999999999\n"),
                  "seed: 99999999999999999999 is outside the 64-bit integer range");
    tt_expect_die(load_file, yaml_file("bool.yaml", "gradient_checkpointing: yes\n"),
                  "gradient_checkpointing: expected true or false, got 'yes'");
    tt_expect_die(load_file, yaml_file("bool2.yaml", "progress: 1\n"), "progress: expected true or false, got '1'");
    tt_expect_die(load_file, yaml_file("str.yaml", "output_dir: {a: 1}\n"), "output_dir: expected a string");
    tt_expect_die(load_file, yaml_file("str2.yaml", "base_model: \"\"\n"),
                  "base_model: expected a string (or ~: unset), got ''");
    tt_expect_die(load_file, yaml_file("bytes.yaml", "host_memory_budget: lots\n"),
                  "host_memory_budget: expected a size in bytes such as 1073741824, 24GiB or 512MB, got 'lots'");
    tt_expect_die(load_file, yaml_file("bytes2.yaml", "host_memory_budget: -1GiB\n"), "expected a size in bytes");
    /* out of range */
    tt_expect_die(load_file, yaml_file("range.yaml", "micro_batch_size: 0\n"),
                  "range.yaml:1: micro_batch_size must be in [1, 1048576], got 0");
    tt_expect_die(load_file, yaml_file("range2.yaml", "sequence_len: 1\n"),
                  "sequence_len must be in [2, 1073741824], got 1");
    tt_expect_die(load_file, yaml_file("range3.yaml", "learning_rate: 0\n"), "learning_rate must be > 0, got 0");
    tt_expect_die(load_file, yaml_file("range4.yaml", "adam_beta2: 1\n"), "adam_beta2 must be in [0, 1), got 1");
    tt_expect_die(load_file, yaml_file("range5.yaml", "warmup_ratio: 1.5\n"),
                  "warmup_ratio must be in [0, 1], got 1.5");
    tt_expect_die(load_file, yaml_file("range6.yaml", "warmup_steps: -2\n"),
                  "warmup_steps must be >= 0 (or -1: not given), got -2");
    tt_expect_die(load_file, yaml_file("range7.yaml", "val_set_size: -0.1\n"), "val_set_size must be >= 0, got -0.1");
    tt_expect_die(load_file, yaml_file("range8.yaml", "num_epochs: 0\n"), "num_epochs must be > 0, got 0");
    tt_expect_die(load_file, yaml_file("range9.yaml", "adam_epsilon: 0\n"), "adam_epsilon must be > 0");
    tt_expect_die(load_file, yaml_file("range10.yaml", "num_threads: -1\n"),
                  "num_threads must be in [0, 1024], got -1");
    tt_expect_die(load_file, yaml_file("range12.yaml", "num_threads: 100000\n"),
                  "num_threads must be in [0, 1024], got 100000");
    tt_expect_die(load_file, yaml_file("range11.yaml", "logging_steps: 0\n"), "logging_steps must be >= 1, got 0");
    /* enums */
    tt_expect_die(load_file, yaml_file("enum.yaml", "lr_scheduler: step\n"),
                  "enum.yaml:1: lr_scheduler must be one of cosine, linear, constant, constant_with_warmup, "
                  "cosine_with_min_lr, polynomial, inverse_sqrt; got 'step'");
    tt_expect_die(load_file, yaml_file("enum2.yaml", "optimizer: sgd\n"),
                  "optimizer must be one of adamw_torch, adamw_torch_fused, adamw_bnb_8bit, adamw_8bit, "
                  "paged_adamw_8bit; got 'sgd'");
    tt_expect_die(load_file, yaml_file("enum3.yaml", "lr_scheduler: [cosine]\n"),
                  "lr_scheduler: expected one of cosine, linear, constant, constant_with_warmup, cosine_with_min_lr, "
                  "polynomial, inverse_sqrt, got a list");
    tt_expect_die(load_file, yaml_file("enum4.yaml", "device: tpu\n"),
                  "device must be one of auto, cpu, cuda; got 'tpu'");
    /* duplicate keys */
    tt_expect_die(load_file, yaml_file("dup.yaml", "seed: 1\nlearning_rate: 1e-4\nseed: 2\n"),
                  "dup.yaml:3: key 'seed' appears twice (first on line 1)");
    tt_expect_die(load_file, yaml_file("dup2.yaml", "adapter: ~\nadapter: ~\n"), "key 'adapter' appears twice");
    /* values of later features */
    tt_expect_die(load_file, yaml_file("hs.yaml", VALID "activation_offloading: hidden_states\n"),
                  "activation_offloading: hidden_states offloads the checkpoints of gradient checkpointing, but "
                  "gradient_checkpointing is false; set gradient_checkpointing: true");
    tt_expect_die(load_file, yaml_file("ao1.yaml", VALID "activation_offloading: disk\n"),
                  "activation_offloading: disk offloads the checkpoints of gradient checkpointing");
    TT_EXPECT(loads("ao1b.yaml", VALID "activation_offloading: True\n"),
              "activation_offloading: true without checkpointing offloads every saved tensor");
    tt_expect_die(load_file,
                  yaml_file("mg1.yaml", VALID "cpu_offloading: true\ncpu_offloading_num_layers: 1\n"
                                              "gradient_checkpointing: true\nactivation_offloading: hidden_states\n"),
                  "cpu_offloading (Megatron's) and activation_offloading: hidden_states both offload activations");
    tt_expect_die(load_file, yaml_file("en1.yaml", VALID "every_n_layers: 2\n"),
                  "every_n_layers chooses which layers gradient checkpointing covers, but gradient_checkpointing is "
                  "false");
    tt_expect_die(load_file, yaml_file("en2.yaml", VALID "every_n_layers: 0\n"), "every_n_layers must be >= 1");
    tt_expect_die(load_file, yaml_file("tm1.yaml", VALID "tiled_mlp_num_shards: 4\n"),
                  "tiled_mlp_num_shards is 4 but tiled_mlp is false; set tiled_mlp: true");
    tt_expect_die(load_file, yaml_file("tm2.yaml", VALID "tiled_mlp: true\nsequence_len: 8\ntiled_mlp_num_shards: 9\n"),
                  "tiled_mlp_num_shards is 9 but a micro-batch has 8 tokens");
    tt_expect_die(load_file, yaml_file("tm3.yaml", VALID "tiled_mlp: true\ntiled_mlp_num_shards: -1\n"),
                  "tiled_mlp_num_shards must be >= 0");
    tt_expect_die(load_file, yaml_file("mg2.yaml", VALID "cpu_offloading_num_layers: 2\n"),
                  "cpu_offloading_num_layers is 2 but cpu_offloading is false");
    tt_expect_die(load_file, yaml_file("mg3.yaml", VALID "cpu_offloading: true\ncpu_offloading_activations: false\n"),
                  "cpu_offloading with cpu_offloading_activations: false and cpu_offloading_weights: false offloads "
                  "nothing");
    tt_expect_die(load_file, yaml_file("mg4.yaml", VALID "cpu_offloading_weights: true\n"),
                  "cpu_offloading_weights is true but cpu_offloading is false");
    tt_expect_die(load_file, yaml_file("mg5.yaml", VALID "cpu_offloading: true\ncpu_offloading_weights: true\n"),
                  "cpu_offloading_weights is true but cpu_offloading_num_layers is 0");
    tt_expect_die(load_file,
                  yaml_file("mg6.yaml", VALID "cpu_offloading: true\ncpu_offloading_num_layers: 1\n"
                                              "cpu_offloading_weights: true\nadapter: lora\n"),
                  "with adapter: lora they are the adapters");
    tt_expect_die(load_file,
                  yaml_file("ao2.yaml", VALID "gradient_checkpointing: true\nactivation_offloading: legacy\n"
                                              "max_fwd_stash_size: 3\n"),
                  "max_fwd_stash_size is set but activation_offloading is legacy; it applies to activation_offloading: "
                  "true or hidden_states");
    tt_expect_die(load_file,
                  yaml_file("ao4.yaml", VALID "gradient_checkpointing: true\nactivation_offloading: hidden_states\n"
                                              "use_streams: false\n"),
                  "use_streams: false is set but activation_offloading is hidden_states");
    tt_expect_die(load_file, yaml_file("ao5.yaml", VALID "debug_copy_delay_us: 100\n"),
                  "debug_copy_delay_us delays offload copies, but activation_offloading is false");
    TT_EXPECT(loads("ao5b.yaml", VALID "debug_copy_delay_us: 100\ngradient_checkpointing: true\n"),
              "debug_copy_delay_us under checkpointing with selective_checkpointing auto (its offload copies)");
    tt_expect_die(load_file,
                  yaml_file("ao5c.yaml", VALID "debug_copy_delay_us: 100\ngradient_checkpointing: true\n"
                                               "selective_checkpointing: ~\n"),
                  "debug_copy_delay_us delays offload copies, but activation_offloading is false");
    tt_expect_die(load_file, yaml_file("ao6.yaml", VALID "max_fwd_stash_size: 0\n"), "max_fwd_stash_size must be >= 1");
    tt_expect_die(load_file, yaml_file("ao3.yaml", VALID "activation_offloading: legacy\n"),
                  "activation_offloading: legacy offloads the checkpoints of gradient checkpointing, but "
                  "gradient_checkpointing is false");
    TT_EXPECT(loads("ao_legacy.yaml", VALID "activation_offloading: legacy\ngradient_checkpointing: true\n"),
              "activation_offloading: legacy with gradient_checkpointing");
    tt_expect_die(load_file, yaml_file("ao4.yaml", VALID "activation_offloading: disk\n"),
                  "activation_offloading: disk offloads the checkpoints of gradient checkpointing");
    TT_EXPECT(loads("ao_disk.yaml", VALID "activation_offloading: disk\ngradient_checkpointing: true\n"
                                          "offload_dir: /var/tmp\n"),
              "activation_offloading: disk with gradient_checkpointing and offload_dir");
    tt_expect_die(load_file, yaml_file("ao5.yaml", "activation_offloading: sometimes\n"),
                  "activation_offloading must be one of false, true, legacy, disk, hidden_states; got 'sometimes'");
    tt_expect_die(load_file, yaml_file("bf16b.yaml", "bf16: fp8\n"),
                  "bf16 must be one of false, auto, true; got 'fp8'");
    tt_expect_die(load_file, yaml_file("fp16.yaml", "fp16: true\n"),
                  "fp16: true is not available yet: tiertrain's mixed precision is bf16 (bf16: true, the GPU's) with "
                  "fp32 master weights; use fp16: false");
    /* keys of later features: any value but the off value */
    tt_expect_die(load_file, yaml_file("lora_dir.yaml", VALID "lora_model_dir: runs/adapter\n"),
                  "lora_model_dir is set but adapter is not");
    tt_expect_die(
        load_file,
        yaml_file("lo.yaml", VALID "layer_offloading: true\nactivation_offloading: true\nuse_pin_memory: false\n"),
        "layer_offloading streams frozen layers from pinned host memory, but use_pin_memory is false");
    /* optimizer offload: Megatron's three keys against each other and against master_weights */
    tt_expect_die(load_file, yaml_file("frac.yaml", VALID "optimizer_offload_fraction: 0.5\n"),
                  "optimizer_offload_fraction is 0.5 but optimizer_cpu_offload is false; set optimizer_cpu_offload: "
                  "true");
    tt_expect_die(load_file,
                  yaml_file("frac2.yaml", VALID "optimizer_cpu_offload: true\noptimizer_offload_fraction: 1.5\n"),
                  "optimizer_offload_fraction must be in [0, 1], got 1.5");
    tt_expect_die(load_file,
                  yaml_file("frac3.yaml", VALID "optimizer_cpu_offload: true\noptimizer_offload_fraction: half\n"),
                  "optimizer_offload_fraction: expected a number, got 'half'");
    tt_expect_die(load_file, yaml_file("overlap.yaml", VALID "overlap_cpu_optimizer_d2h_h2d: true\n"),
                  "overlap_cpu_optimizer_d2h_h2d is true but optimizer_cpu_offload is false");
    tt_expect_die(load_file,
                  yaml_file("offload_bf16.yaml", VALID "optimizer_cpu_offload: true\nmaster_weights: false\n"),
                  "optimizer_cpu_offload keeps fp32 master weights and fp32 AdamW moments on the host, but "
                  "master_weights is false");
    tt_expect_die(load_override, "optimizer_cpu_offload=yes", "optimizer_cpu_offload: expected true or false");
    TT_EXPECT(loads("gck_ok.yaml", VALID "gradient_checkpointing_kwargs: {use_reentrant: false}\n"),
              "gradient_checkpointing_kwargs: {use_reentrant: false} is accepted");
    tt_expect_die(load_file, yaml_file("gck.yaml", "gradient_checkpointing_kwargs: {preserve_rng_state: false}\n"),
                  "gradient_checkpointing_kwargs: 'preserve_rng_state' is not supported");
    /* selective_checkpointing: a mapping; offload and other saves are refused with the fix */
    tt_expect_die(load_file, yaml_file("sel.yaml", VALID "selective_checkpointing: {save: [attention]}\n"),
                  "selective_checkpointing is set but gradient_checkpointing is false");
    TT_EXPECT(loads("sel2.yaml", VALID "gradient_checkpointing: true\n"
                                       "selective_checkpointing: {save: [attention], offload: true}\n"),
              "selective_checkpointing offload: true is accepted");
    tt_expect_die(load_file,
                  yaml_file("sel3.yaml", VALID "gradient_checkpointing: true\nactivation_offloading: legacy\n"
                                               "selective_checkpointing: {save: [attention], offload: true}\n"),
                  "selective_checkpointing offload: true and activation_offloading: legacy both decide what leaves "
                  "the GPU");
    tt_expect_die(load_file, yaml_file("sel3.yaml", VALID "selective_checkpointing: {save: [mlp]}\n"),
                  "sel3.yaml:3: selective_checkpointing: save: 'mlp' is not something tiertrain can keep");
    tt_expect_die(load_file, yaml_file("sel4.yaml", VALID "selective_checkpointing: {keep: [attention]}\n"),
                  "selective_checkpointing: unknown key 'keep'");
    tt_expect_die(load_file, yaml_file("sel5.yaml", VALID "selective_checkpointing: {save: []}\n"),
                  "selective_checkpointing: save lists nothing");
    tt_expect_die(load_file, yaml_file("sel6.yaml", VALID "selective_checkpointing: true\n"),
                  "selective_checkpointing: expected a mapping");
    { /* auto, the default, leaves the choice to the plan (memory/attention_offload.h); ~ and a mapping end it */
        const char *texts[3] = {"", "selective_checkpointing: ~\n",
                                "selective_checkpointing: {save: [attention], offload: true}\n"};
        const bool auto_expected[3] = {true, false, false};
        for (int i = 0; i < 3; i++) {
            char yaml[512];
            snprintf(yaml, sizeof yaml, VALID "gradient_checkpointing: true\n%s", texts[i]);
            char *path = write_file("sel7.yaml", yaml);
            tt_run_config c;
            tt_run_config_defaults(&c);
            tt_run_config_load(&c, path, 0, NULL);
            tt_run_config_validate(&c);
            TT_EXPECT(c.selective_auto == auto_expected[i] && c.selective_checkpointing == (i == 2) &&
                          c.selective_offload == (i == 2),
                      "selective_checkpointing '%s': auto %d, keep %d, offload %d", texts[i], c.selective_auto,
                      c.selective_checkpointing, c.selective_offload);
            tt_run_config_free(&c);
            free(path);
        }
        TT_EXPECT(loads("sel8.yaml", VALID "selective_checkpointing: auto\n"),
                  "selective_checkpointing: auto is accepted without gradient_checkpointing");
    }
    /* Megatron's recompute keys against each other and against gradient_checkpointing */
    tt_expect_die(load_file,
                  yaml_file("rg1.yaml", VALID "recompute_granularity: selective\ngradient_checkpointing: true\n"),
                  "recompute_granularity: selective (recompute only the cheap ops) and gradient_checkpointing: true");
    tt_expect_die(load_file, yaml_file("rg2.yaml", VALID "recompute_method: block\n"),
                  "recompute_method: block applies to recompute_granularity: full");
    tt_expect_die(load_file, yaml_file("rg3.yaml", VALID "recompute_granularity: full\nrecompute_num_layers: 4\n"),
                  "recompute_method: uniform with recompute_num_layers 4 (groups of layers checkpointed together) is "
                  "not available yet");
    tt_expect_die(load_file, yaml_file("rg4.yaml", VALID "recompute_granularity: partial\n"),
                  "recompute_granularity must be one of none, full, selective; got 'partial'");
    tt_expect_die(load_file, yaml_file("rg5.yaml", VALID "recompute_num_layers: 0\n"),
                  "recompute_num_layers must be >= 1");
    tt_expect_die(load_file, yaml_file("gpu.yaml", "gpu_memory_budget: lots\n"),
                  "gpu_memory_budget: expected a size in bytes such as 1073741824, 24GiB or 512MB, got 'lots'");
    tt_expect_die(load_file, yaml_file("attn.yaml", "attn_implementation: flash_attention_9\n"),
                  "attn_implementation must be one of auto, cudnn, flash, simple; got 'flash_attention_9'");
    /* attn_implementation: cudnn is valid either way: with deterministic (the default) it runs cuDNN's deterministic
     * backward, with deterministic: false its backward that adds dQ with atomics */
    tt_run_config deterministic_cudnn;
    tt_run_config_defaults(&deterministic_cudnn);
    tt_run_config_load(&deterministic_cudnn,
                       yaml_file("attn_cudnn.yaml", VALID "device: cuda\nattn_implementation: cudnn\n"), 0, NULL);
    tt_run_config_validate(&deterministic_cudnn);
    TT_EXPECT(deterministic_cudnn.deterministic && deterministic_cudnn.attn_implementation == TT_ATTN_CUDNN,
              "attn_implementation: cudnn with deterministic: true (cuDNN's deterministic backward)");
    tt_run_config_free(&deterministic_cudnn);
    tt_run_config nondeterministic;
    tt_run_config_defaults(&nondeterministic);
    TT_EXPECT(nondeterministic.deterministic, "deterministic: true by default");
    tt_run_config_load(
        &nondeterministic,
        yaml_file("attn_cudnn_ok.yaml", VALID "device: cuda\nattn_implementation: cudnn\ndeterministic: false\n"), 0,
        NULL);
    tt_run_config_validate(&nondeterministic);
    TT_EXPECT(!nondeterministic.deterministic && nondeterministic.attn_implementation == TT_ATTN_CUDNN,
              "deterministic: false allows attn_implementation: cudnn");
    tt_run_config_free(&nondeterministic);
    tt_expect_die(load_file, yaml_file("no.yaml", "use_pin_memory: no\n"), "use_pin_memory: expected true or false");
    tt_expect_die(load_file, yaml_file("emptystr.yaml", "offload_dir: \"\"\n"), "offload_dir: expected a string");
    tt_expect_die(load_file, yaml_file("quotednull.yaml", "tf32: \"~\"\n"), "tf32: expected true or false");
    /* datasets */
    tt_expect_die(load_file,
                  yaml_file("ds.yaml", "datasets:\n  - path: a.tok\n  - path: b.jsonl\n    type: sharegpt\n"),
                  "ds.yaml:4: datasets entry 2: type 'sharegpt' is not supported");
    tt_expect_die(load_file, yaml_file("ds2.yaml", "datasets:\n  - type: tokens\n"), "datasets entry 1 has no path");
    tt_expect_die(load_file, yaml_file("ds3.yaml", "datasets:\n  - path: a.tok\n    split: train\n"),
                  "datasets entry 1: split applies to type completion, alpaca, input_output, chat_template, but this "
                  "entry is type tokens");
    tt_expect_die(load_file,
                  yaml_file("ds3b.yaml", "datasets:\n  - path: a.jsonl\n    type: completion\n    bogus: 1\n"),
                  "datasets entry 1: unknown key 'bogus'");
    tt_expect_die(load_file, yaml_file("ds3c.yaml", "datasets:\n  - path: a.jsonl\n    type: alpaca\n    field: t\n"),
                  "ds3c.yaml:4: datasets entry 1: field applies to type completion, but this entry is type alpaca");
    tt_expect_die(load_file, yaml_file("ds3d.yaml", "datasets:\n  - path: a.jsonl\n"),
                  "datasets entry 1: a.jsonl is a file of records (JSON, JSONL or Parquet) but the entry has no type");
    tt_expect_die(load_file, yaml_file("ds3e.yaml", "datasets: [a.jsonl]\n"),
                  "datasets entry 1: a.jsonl is a file of records (JSON, JSONL or Parquet)");
    tt_expect_die(load_file,
                  yaml_file("ds3f.yaml", "datasets:\n  - path: a.jsonl\n    type: completion\n    split: test\n"),
                  "split 'test': a local JSON/JSONL file has one split, train");
    tt_expect_die(load_file,
                  yaml_file("ds3g.yaml", "datasets:\n  - path: a.jsonl\n    type: chat_template\n"
                                         "    roles_to_train: assistant\n"),
                  "roles_to_train: expected a list of roles");
    tt_expect_die(load_file,
                  yaml_file("ds3h.yaml", "datasets:\n  - path: a.jsonl\n    type: chat_template\n"
                                         "    message_property_mappings: [role]\n"),
                  "message_property_mappings: expected a mapping");
    tt_expect_die(load_file,
                  yaml_file("ds3i.yaml", "datasets:\n  - path: a.jsonl\n    type: completion\n    ds_type: csv\n"),
                  "ds_type 'csv' is not supported");
    tt_expect_die(load_file,
                  yaml_file("ds3j.yaml", "model_config: m\ndatasets:\n  - path: a.jsonl\n    type: completion\n"
                                         "  - path: b.tok\n"),
                  "datasets mixes token files (b.tok) and JSON datasets (a.jsonl)");
    tt_expect_die(load_file, yaml_file("json_key.yaml", VALID "train_on_inputs: true\n"),
                  "train_on_inputs: true is set, but it applies to JSON datasets");
    tt_expect_die(load_file, yaml_file("json_key2.yaml", VALID "special_tokens: {eos_token: x}\n"),
                  "special_tokens is set, but it applies to JSON datasets");
    tt_expect_die(load_file,
                  yaml_file("eos_key.yaml", "model_config: m\ndatasets:\n  - path: a.jsonl\n    type: alpaca\n"
                                            "train_on_eos: all\n"),
                  "train_on_eos applies to chat_template datasets");
    tt_expect_die(load_file,
                  yaml_file("ct_key.yaml", "model_config: m\ndatasets:\n  - path: a.jsonl\n    type: alpaca\n"
                                           "chat_template: chatml\n"),
                  "chat_template applies to chat_template datasets");
    tt_expect_die(load_file,
                  yaml_file("ct_jinja.yaml", "model_config: m\ndatasets:\n  - path: a.jsonl\n"
                                             "    type: chat_template\n    chat_template: jinja\n"),
                  "datasets entry 1 (a.jsonl): chat_template is jinja, but no chat_template_jinja is set");
    tt_expect_die(load_file,
                  yaml_file("ct_jinja2.yaml", "model_config: m\ndatasets:\n  - path: a.jsonl\n"
                                              "    type: chat_template\nchat_template: chatml\n"
                                              "chat_template_jinja: x\n"),
                  "chat_template_jinja is set, but chat_template is chatml");
    tt_expect_die(load_file,
                  yaml_file("ct_eos.yaml", "datasets:\n  - path: a.jsonl\n    type: chat_template\n"
                                           "    train_on_eos: first\n"),
                  "datasets entry 1: train_on_eos: expected turn, all, last or none");
    tt_expect_die(load_file,
                  yaml_file("ct_roles.yaml", "datasets:\n  - path: a.jsonl\n    type: chat_template\n"
                                             "    roles: {assistant: gpt}\n"),
                  "datasets entry 1: roles: assistant: expected a list of names such as [gpt]");
    tt_expect_die(load_file,
                  yaml_file("ct_map.yaml", "datasets:\n  - path: a.jsonl\n    type: chat_template\n"
                                           "    message_property_mappings: {role: from}\n"
                                           "    message_field_role: speaker\n"),
                  "the message property 'role' is mapped to 'from' and to 'speaker'");
    tt_expect_die(load_file,
                  yaml_file("ct_drop.yaml", "datasets:\n  - path: a.jsonl\n    type: chat_template\n"
                                            "    drop_system_message: maybe\n"),
                  "drop_system_message: expected true or false");
    tt_expect_die(load_file,
                  yaml_file("ct_eot.yaml", "datasets:\n  - path: a.jsonl\n    type: chat_template\n"
                                           "    train_on_eot: [turn]\n"),
                  "ct_eot.yaml:4: datasets entry 1: train_on_eot: expected turn, all, last or none, got a list");
    tt_expect_die(load_file,
                  yaml_file("ct_split.yaml", "datasets:\n  - path: a.jsonl\n    type: chat_template\n"
                                             "    split_thinking: 1\n"),
                  "ct_split.yaml:4: datasets entry 1: split_thinking: expected true or false, got '1'");
    tt_expect_die(load_file,
                  yaml_file("ct_mft.yaml", "datasets:\n  - path: a.jsonl\n    type: chat_template\n"
                                           "    message_field_training: [train]\n"),
                  "ct_mft.yaml:4: datasets entry 1: message_field_training: expected a name, got a list");
    tt_expect_die(load_file,
                  yaml_file("ct_mft2.yaml", "datasets:\n  - path: a.jsonl\n    type: chat_template\n"
                                            "    message_field_training: t\n    message_field_training_detail: t\n"),
                  "message_field_training and message_field_training_detail both name the field 't'");
    tt_expect_die(load_file,
                  yaml_file("ct_mft3.yaml", "datasets:\n  - path: a.jsonl\n    type: alpaca\n"
                                            "    split_thinking: true\n"),
                  "split_thinking applies to type chat_template, but this entry is type alpaca");
    tt_expect_die(
        load_file, yaml_file("kw1.yaml", "chat_template_kwargs: [enable_thinking]\n"),
        "kw1.yaml:1: chat_template_kwargs: expected a mapping of template variables such as {enable_thinking: "
        "false}, or ~, got a list");
    tt_expect_die(
        load_file, yaml_file("kw2.yaml", "seed: 1\nchat_template_kwargs:\n  enable_thinking: no\n"),
        "kw2.yaml:3: chat_template_kwargs.enable_thinking: 'no' is a boolean to YAML 1.1 (axolotl) and text to "
        "tiertrain; write true or false, or quote it (\"no\") for the text");
    tt_expect_die(load_file, yaml_file("kw3.yaml", "chat_template_kwargs: {messages: []}\n"),
                  "kw3.yaml:1: chat_template_kwargs: 'messages' is set for every render by tiertrain");
    tt_expect_die(load_file, yaml_file("kw4.yaml", "chat_template_kwargs: {a: {b: 1, b: 2}}\n"),
                  "kw4.yaml:1: chat_template_kwargs.a: 'b' appears twice");
    tt_expect_die(load_file, yaml_file("kw5.yaml", "chat_template_kwargs: {a: [.inf]}\n"),
                  "kw5.yaml:1: chat_template_kwargs.a[0]: .inf is not a finite number");
    tt_expect_die(load_file,
                  yaml_file("kw6.yaml", "model_config: m\ndatasets:\n  - path: a.jsonl\n    type: alpaca\n"
                                        "chat_template_kwargs: {enable_thinking: false}\n"),
                  "chat_template_kwargs applies to chat_template datasets");
    tt_expect_die(load_file, yaml_file("pack1.yaml", "sample_packing: true\nsample_packing_bin_size: 0\n"),
                  "pack1.yaml:2: sample_packing_bin_size must be >= 1, got 0");
    tt_expect_die(load_file, yaml_file("pack2.yaml", VALID "sample_packing_group_size: 10\n"),
                  "sample_packing_group_size is set, but sample_packing is off");
    tt_expect_die(load_file, yaml_file("eot1.yaml", "eot_tokens: \"<|im_end|>\"\n"),
                  "eot1.yaml:1: eot_tokens: expected a list of tokens such as");
    tt_expect_die(load_file, yaml_file("eot2.yaml", "eot_tokens: [a, \"\"]\n"),
                  "eot2.yaml:1: eot_tokens: expected tokens such as \"<|im_end|>\", got ''");
    tt_expect_die(load_file, yaml_file("eot3.yaml", "eot_tokens: [a, a]\n"), "eot_tokens lists 'a' twice");
    tt_expect_die(load_file,
                  yaml_file("eot4.yaml", "model_config: m\ndatasets:\n  - path: a.jsonl\n    type: alpaca\n"
                                         "eot_tokens: [x]\n"),
                  "eot_tokens applies to chat_template datasets");
    tt_expect_die(load_file,
                  yaml_file("ct_alpaca.yaml", "datasets:\n  - path: a.jsonl\n    type: alpaca\n"
                                              "    roles_to_train: [assistant]\n"),
                  "roles_to_train applies to type chat_template, but this entry is type alpaca");
    tt_expect_die(load_file, yaml_file("st.yaml", "special_tokens: {sep_token: x}\n"),
                  "special_tokens: 'sep_token' is not supported");
    tt_expect_die(load_file, yaml_file("st2.yaml", "special_tokens: [x]\n"), "special_tokens: expected a mapping");
    tt_expect_die(load_file, yaml_file("els.yaml", "excess_length_strategy: raise\n"),
                  "excess_length_strategy must be one of drop, truncate");
    tt_expect_die(load_file, yaml_file("ds4.yaml", "datasets: {path: a.tok}\n"), "datasets: expected a list");
    tt_expect_die(load_file, yaml_file("ds5.yaml", "datasets:\n  - [a.tok]\n"), "datasets entry 1 is a list");
    tt_expect_die(load_file, yaml_file("ds6.yaml", "datasets:\n  - ~\n"), "datasets entry 1 is empty");
    tt_expect_die(load_file, yaml_file("ds7.yaml", "datasets:\n  - path: [a.tok]\n"),
                  "datasets entry 1: path: expected a file's path, got a list");
    tt_expect_die(load_file, yaml_file("ds8.yaml", "datasets: [a,b,c,d,e,f,g,h,i,j,k,l,m,n,o,p,q]\n"),
                  "datasets: at most 16 entries");
    tt_expect_die(load_file, yaml_file("ds9.yaml", "datasets:\n  - path: a.tok\n    path: b.tok\n"),
                  "key 'path' appears twice");
    /* overrides */
    tt_expect_die(load_override, "learning_rate", "command-line override 'learning_rate': expected key=value");
    tt_expect_die(load_override, "=5", "no key before '='");
    tt_expect_die(load_override, "seed=x", "command-line override 'seed=x': seed: expected an integer, got 'x'");
    tt_expect_die(load_override, "learning_rate=abc",
                  "command-line override 'learning_rate=abc': learning_rate: expected a number, got 'abc'");
    tt_expect_die(load_override, "datasets=[a.tok", "command-line override 'datasets=[a.tok': malformed YAML value");
    tt_expect_die(load_override, "micro_batch_size=0",
                  "command-line override 'micro_batch_size=0': micro_batch_size must be in [1, 1048576], got 0");
    tt_expect_die(load_override, "learning_rat=1",
                  "command-line override 'learning_rat=1': unknown key 'learning_rat'; did you mean 'learning_rate'?");
    tt_expect_die(load_override, "adapter=qdora",
                  "command-line override 'adapter=qdora': adapter must be lora or qlora (or ~ for full fine-tuning)");
    /* the file itself */
    tt_expect_die(load_file, (char *)"/nonexistent/nope.yaml", "cannot open config /nonexistent/nope.yaml");
    tt_expect_die(load_file, scratch, "is not a regular file (a directory); expected a run config");
    /* validate: cross-key checks */
    tt_expect_die(load_file, yaml_file("both.yaml", "base_model: a\nmodel_config: b\ndatasets: [x]\n"),
                  "base_model ('a') and model_config ('b') are both set; set exactly one of them");
    tt_expect_die(load_file, yaml_file("neither.yaml", "datasets: [x]\n"),
                  "neither base_model nor model_config is set");
    tt_expect_die(load_file, yaml_file("nodata.yaml", "model_config: b\n"), "datasets is empty");
    tt_expect_die(load_file, yaml_file("nodata2.yaml", "model_config: b\ndatasets: []\n"), "datasets is empty");
    tt_expect_die(load_file, yaml_file("warmup.yaml", VALID "warmup_steps: 10\nwarmup_ratio: 0.1\n"),
                  "warmup_steps (10) and warmup_ratio (0.1) are both set");
    tt_expect_die(load_file, yaml_file("valsize.yaml", VALID "val_set_size: 1.5\n"), "val_set_size is 1.5");
}

/* adapter, lora_* and the freezing keys: values, and the checks that need two keys. */
static void test_lora_and_freezing(void) {
    tt_run_config c;
    tt_run_config_defaults(&c);
    TT_EXPECT(c.adapter == TT_ADAPTER_NONE && c.lora_r == 8 && c.lora_alpha == 16 && c.lora_dropout == 0 &&
                  c.lora_target_modules == 0 && !c.lora_target_linear && !c.freeze_embeddings &&
                  c.frozen_layer_count == 0 && c.lora_key_given == NULL,
              "LoRA and freezing defaults");
    char *path = write_file("lora_ok.yaml", VALID "adapter: lora\nlora_r: 4\nlora_alpha: 8\nlora_dropout: 0.1\n"
                                                  "lora_target_modules: [q_proj, v, gate_proj, down]\n");
    tt_run_config_load(&c, path, 0, NULL);
    tt_run_config_validate(&c);
    TT_EXPECT(c.adapter == TT_ADAPTER_LORA && c.lora_r == 4 && c.lora_alpha == 8 && c.lora_dropout == 0.1 &&
                  c.lora_target_modules ==
                      ((1u << TT_LORA_Q) | (1u << TT_LORA_V) | (1u << TT_LORA_GATE) | (1u << TT_LORA_DOWN)) &&
                  tt_run_config_lora_targets(&c) == c.lora_target_modules,
              "adapter: lora with full and short module names");
    char *overrides[] = {"lora_target_linear=true", "lora_r=", "frozen_layers=[]"};
    tt_run_config_load(&c, NULL, 3, overrides);
    TT_EXPECT(tt_run_config_lora_targets(&c) == TT_LORA_ALL_MODULES && c.lora_r == 8,
              "lora_target_linear adapts all seven; lora_r= (null) is the default");
    tt_run_config_free(&c);
    free(path);
    tt_run_config_defaults(&c);
    path = write_file("freeze_ok.yaml", VALID "freeze_embeddings: true\nfrozen_layers: [3, 0, 1]\n");
    tt_run_config_load(&c, path, 0, NULL);
    tt_run_config_validate(&c);
    TT_EXPECT(c.freeze_embeddings && c.frozen_layer_count == 3 && c.frozen_layers[0] == 0 && c.frozen_layers[1] == 1 &&
                  c.frozen_layers[2] == 3,
              "freeze_embeddings and frozen_layers (sorted)");
    tt_run_config_free(&c);
    free(path);
    /* axolotl's full fine-tuning templates list every LoRA key with no value */
    TT_EXPECT(loads("fft_template.yaml", VALID "adapter:\nlora_model_dir:\nlora_r:\nlora_alpha:\nlora_dropout:\n"
                                               "lora_target_linear:\nlora_target_modules:\n"),
              "LoRA keys without values are full fine-tuning");
    TT_EXPECT(loads("fft_off.yaml", VALID "adapter: false\nlora_target_linear: false\nlora_dropout: 0\n"),
              "off values without adapter");

    tt_expect_die(load_file, yaml_file("r_alone.yaml", VALID "lora_r: 16\n"),
                  "lora_r is set but adapter is not: LoRA settings take effect with adapter: lora");
    tt_expect_die(load_file, yaml_file("linear_alone.yaml", VALID "lora_target_linear: true\n"),
                  "lora_target_linear is set but adapter is not");
    tt_expect_die(
        load_file, yaml_file("no_targets.yaml", VALID "adapter: lora\n"),
        "adapter: lora has no modules to adapt: lora_target_modules is empty and lora_target_linear is false");
    tt_expect_die(load_file,
                  yaml_file("lora_frozen.yaml", VALID "adapter: lora\nlora_target_linear: true\n"
                                                      "frozen_layers: [0]\n"),
                  "frozen_layers chooses what full fine-tuning trains, but with adapter: lora");
    tt_expect_die(load_file, yaml_file("adapter_bad.yaml", "adapter: dora\n"),
                  "adapter_bad.yaml:1: adapter must be lora or qlora (or ~ for full fine-tuning); got 'dora'");
    /* qlora: axolotl's keys and their checks */
    tt_run_config_defaults(&c);
    TT_EXPECT(!c.load_in_4bit && c.bnb_4bit_quant_type == TT_BNB_NF4 && c.bnb_4bit_use_double_quant &&
                  c.bnb_4bit_compute_dtype == TT_COMPUTE_DTYPE_AUTO && c.bnb_key_given == NULL,
              "qlora defaults: nf4, double quantization, compute dtype auto");
    path = write_file("qlora_ok.yaml", VALID "adapter: qlora\nload_in_4bit: true\nbnb_4bit_quant_type: fp4\n"
                                             "bnb_4bit_use_double_quant: false\nbnb_4bit_compute_dtype: bfloat16\n"
                                             "lora_target_linear: true\n");
    tt_run_config_load(&c, path, 0, NULL);
    tt_run_config_validate(&c);
    TT_EXPECT(c.adapter == TT_ADAPTER_QLORA && c.load_in_4bit && c.bnb_4bit_quant_type == TT_BNB_FP4 &&
                  !c.bnb_4bit_use_double_quant && c.bnb_4bit_compute_dtype == TT_COMPUTE_DTYPE_BF16,
              "adapter: qlora with the bnb keys");
    tt_run_config_free(&c);
    free(path);
    tt_expect_die(load_file, yaml_file("qlora.yaml", VALID "adapter: qlora\nlora_target_linear: true\n"),
                  "adapter: qlora needs load_in_4bit: true");
    tt_expect_die(load_file, yaml_file("qlora_targets.yaml", VALID "adapter: qlora\nload_in_4bit: true\n"),
                  "adapter: qlora has no modules to adapt");
    tt_expect_die(load_file,
                  yaml_file("4bit_lora.yaml", VALID "adapter: lora\nload_in_4bit: true\nlora_target_linear: true\n"),
                  "load_in_4bit: true quantizes the frozen base of adapter: qlora, but adapter is lora");
    tt_expect_die(load_file, yaml_file("4bit_fft.yaml", VALID "load_in_4bit: true\n"),
                  "load_in_4bit: true quantizes the frozen base of adapter: qlora, but adapter is ~");
    tt_expect_die(load_file, yaml_file("bnb_alone.yaml", VALID "bnb_4bit_quant_type: fp4\n"),
                  "bnb_4bit_quant_type is set but load_in_4bit is not");
    tt_expect_die(load_file, yaml_file("bnb_type.yaml", VALID "bnb_4bit_quant_type: int4\n"),
                  "bnb_4bit_quant_type must be one of nf4, fp4");
    tt_expect_die(load_file,
                  yaml_file("qlora_frozen.yaml", VALID "adapter: qlora\nload_in_4bit: true\n"
                                                       "lora_target_linear: true\nfreeze_embeddings: true\n"),
                  "with adapter: qlora the whole base model is frozen already");
    tt_expect_die(load_file, yaml_file("r0.yaml", "lora_r: 0\n"), "lora_r must be >= 1, got 0");
    tt_expect_die(load_file, yaml_file("drop1.yaml", "lora_dropout: 1\n"), "lora_dropout must be in [0, 1), got 1");
    tt_expect_die(load_file, yaml_file("alpha0.yaml", "lora_alpha: -2\n"), "lora_alpha must be > 0");
    tt_expect_die(load_file, yaml_file("target_bad.yaml", "lora_target_modules: [q_proj, lm_head]\n"),
                  "target_bad.yaml:1: lora_target_modules: 'lm_head' is not a linear layer tiertrain can put an "
                  "adapter on");
    tt_expect_die(load_file, yaml_file("target_map.yaml", "lora_target_modules: {q: 1}\n"),
                  "lora_target_modules: expected a list");
    tt_expect_die(load_file, yaml_file("layers_bad.yaml", "frozen_layers: [0, x]\n"),
                  "frozen_layers: expected layer indices (integers from 0), got 'x'");
    tt_expect_die(load_file, yaml_file("layers_neg.yaml", "frozen_layers: [-1]\n"), "frozen_layers: expected layer");
    tt_expect_die(load_file, yaml_file("layers_twice.yaml", "frozen_layers: [2, 2]\n"),
                  "frozen_layers lists layer 2 twice");
    /* chat_template_kwargs through YAML aliases: one inside its own value, and a chain that grows exponentially */
    tt_expect_die(load_file, yaml_file("kwargs_cycle.yaml", VALID "chat_template_kwargs: {x: &a [*a]}\n"),
                  "values nested more than 64 deep (a YAML alias inside its own value?)");
    tt_expect_die(load_override, "chat_template_kwargs={x: &a [*a]}", "values nested more than 64 deep");
    {
        char laughs[2048];
        size_t used =
            (size_t)snprintf(laughs, sizeof laughs, VALID "chat_template_kwargs:\n  a0: &a0 [l,l,l,l,l,l,l,l,l]\n");
        for (int i = 1; i < 10; i++)
            used += (size_t)snprintf(laughs + used, sizeof laughs - used,
                                     "  a%d: &a%d [*a%d,*a%d,*a%d,*a%d,*a%d,*a%d,*a%d,*a%d,*a%d]\n", i, i, i - 1, i - 1,
                                     i - 1, i - 1, i - 1, i - 1, i - 1, i - 1, i - 1);
        tt_expect_die(load_file, yaml_file("kwargs_laughs.yaml", laughs),
                      "expand to more than 100000 nodes or 1048576 bytes of JSON");
    }
    tt_expect_die(load_override, "lora_rank=8", "unknown key 'lora_rank'; tiertrain calls it 'lora_r'");
    tt_expect_die(load_override, "target_modules=[q]", "tiertrain calls it 'lora_target_modules'");
}

static void test_accepted(void) {
    /* Off values of the keys of later features are accepted: null, false, 0, [] and {}. */
    TT_EXPECT(loads("off.yaml",
                    VALID "lora_model_dir: ~\nlayer_offloading: False\n"
                          "cpu_offloading: false\ncpu_offloading_num_layers: 0\ncpu_offloading_activations: false\n"
                          "cpu_offloading_weights: false\ncpu_offloading_double_buffering: false\n"
                          "optimizer_cpu_offload: false\noptimizer_offload_fraction: 0.0\n"
                          "overlap_cpu_optimizer_d2h_h2d: false\ngpu_memory_budget: 0\n"),
              "off values of every key of a later feature are accepted");
    TT_EXPECT(loads("offvalues.yaml", VALID "activation_offloading: false\nbf16: auto\nfp16: false\ntf32: false\n"
                                            "device: cpu\n"),
              "available values of keys with later values are accepted");
    TT_EXPECT(loads("bf16false.yaml", VALID "bf16: False\n"), "bf16: False");
    TT_EXPECT(loads("selective.yaml", VALID "gradient_checkpointing: true\n"
                                            "selective_checkpointing: {save: [attention], offload: false}\n"),
              "selective_checkpointing with gradient_checkpointing");
    TT_EXPECT(loads("selective_off.yaml", VALID "selective_checkpointing: {}\n"), "selective_checkpointing: {} is off");
    TT_EXPECT(loads("optoffload.yaml", VALID "optimizer_cpu_offload: true\noptimizer_offload_fraction: 0.3\n"
                                             "overlap_cpu_optimizer_d2h_h2d: true\n"),
              "Megatron's optimizer offload keys");
    TT_EXPECT(loads("optoffload_default.yaml", VALID "optimizer_cpu_offload: true\n"),
              "optimizer offload, the fraction defaulting to 1");
    TT_EXPECT(loads("optoffload_off.yaml", VALID "optimizer_cpu_offload: false\noptimizer_offload_fraction: 1.0\n"),
              "the default fraction without optimizer offload changes nothing");
    TT_EXPECT(loads("megatron.yaml", VALID "recompute_granularity: full\nrecompute_method: block\n"
                                           "recompute_num_layers: 2\nselective_checkpointing: {save: [attention]}\n"),
              "Megatron's block recompute, with selective checkpointing");
    TT_EXPECT(loads("ao_false.yaml", VALID "activation_offloading: False\n"), "activation_offloading: False");
    TT_EXPECT(loads("numbers.yaml", VALID "learning_rate: 1e-4\nadam_epsilon: 1.0E-8\nweight_decay: .5\n"
                                          "num_epochs: 2\nseed: +3\nmax_grad_norm: 0.0\ninitializer_range: 0\n"),
              "number spellings");
    TT_EXPECT(loads("anchors.yaml", VALID "seed: &s 5\nsave_steps: *s\n"), "anchors and aliases");
    TT_EXPECT(loads("quoted.yaml", VALID "\"seed\": '5'\nhost_memory_budget: \"24GiB\"\nmax_shard_size: 1073741824\n"),
              "quoted keys and values");
    TT_EXPECT(loads("strds.yaml", "model_config: m\ndatasets:\n  - a.tok\n  - b.tok\n"), "a plain list of paths");
    TT_EXPECT(loads("sft.yaml", "model_config: m\ndatasets:\n  - path: a.jsonl\n    type: alpaca\n    split: train\n"
                                "    ds_type: json\n  - path: b.json\n    type: completion\n    field: body\n"
                                "  - path: c.jsonl\n    type: input_output\n"
                                "  - path: d.jsonl\n    type: chat_template\n    chat_template: chatml\n"
                                "    field_messages: conversations\n    message_property_mappings: {role: from, "
                                "content: value}\n    roles_to_train: [assistant]\n"
                                "train_on_inputs: true\nspecial_tokens: {eos_token: \"<|im_end|>\"}\n"
                                "tokenizer_config: /m\nexcess_length_strategy: truncate\ntrain_on_eos: all\n"),
              "JSON dataset entries of every type and the SFT keys");
    {
        tt_run_config d;
        tt_run_config_defaults(&d);
        char *sft = write_file("sft2.yaml", "datasets:\n  - path: a.jsonl\n    type: alpaca\n"
                                            "  - path: b.json\n    type: completion\n"
                                            "special_tokens: {eos_token: \"<|im_end|>\", pad_token: \"<pad>\"}\n");
        tt_run_config_load(&d, sft, 0, NULL);
        TT_EXPECT(d.dataset_count == 2 && d.dataset_specs[0].type == TT_DATASET_ALPACA &&
                      strcmp(d.dataset_specs[0].field_instruction, "instruction") == 0 &&
                      strcmp(d.dataset_specs[0].field_input, "input") == 0 &&
                      strcmp(d.dataset_specs[0].field_output, "output") == 0 &&
                      d.dataset_specs[1].type == TT_DATASET_COMPLETION && strcmp(d.dataset_specs[1].field, "text") == 0,
                  "axolotl's field defaults per type");
        TT_EXPECT(!d.train_on_inputs && d.shuffle_merged_datasets &&
                      strcmp(d.dataset_prepared_path, "last_run_prepared") == 0 &&
                      d.excess_length_strategy == TT_EXCESS_DROP && d.tokenizer_config == NULL &&
                      d.special_bos == NULL && strcmp(d.special_eos, "<|im_end|>") == 0 &&
                      strcmp(d.special_pad, "<pad>") == 0,
                  "SFT defaults and special_tokens");
        tt_run_config_free(&d);
        free(sft);
    }
    TT_EXPECT(loads("warm0.yaml", VALID "warmup_steps: 0\nwarmup_ratio: 0\n"), "warmup_steps 0 with ratio 0");
    TT_EXPECT(loads("valcount.yaml", VALID "val_set_size: 20\n"), "a whole val_set_size is a count");
    tt_run_config c;
    tt_run_config_defaults(&c);
    char *path = write_file("under.yaml", "adam_epsilon: 1e-300\nlearning_rate: 1.5\n");
    tt_run_config_load(&c, path, 0, NULL);
    TT_EXPECT(c.adam_epsilon == 1e-300 && c.learning_rate == 1.5, "tiny and large numbers");
    tt_run_config_free(&c);
    free(path);
}

int main(int argc, char **argv) {
    const char *source_dir = argc > 1 ? argv[1] : getenv("TT_SOURCE_DIR");
    if (!source_dir) source_dir = ".";
    scratch = tt_test_tempdir("config");
    test_defaults();
    test_enum_keys();
    test_full_file_and_overrides();
    test_round_trip();
    test_sft_round_trip();
    test_chat_round_trip();
    test_chat_keys_round_trip();
    test_parse_bytes();
    test_help_and_docs(source_dir);
    test_errors();
    test_accepted();
    test_lora_and_freezing();
    for (int i = 0; i < path_count; i++) {
        remove(paths[i]);
        free(paths[i]);
    }
    char cmd[4300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", scratch);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", scratch);
    free(scratch);
    return tt_test_summary("config");
}
