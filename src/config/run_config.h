/* The run configuration: a YAML file with axolotl's key names where they exist, plus
 * key=value overrides from the command line. Every key is declared once in the key
 * table (src/config/keys.c): name, type, default, valid values, one line of help. Unknown keys,
 * wrong types and out-of-range values are errors that name the key and the valid
 * values; keys of features that are not built yet are rejected as "not available yet",
 * never ignored. */
#ifndef TT_CORE_CONFIG_H
#define TT_CORE_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "model/lora_modules.h"

/* Each key whose value is a name from a fixed list has a C enum, made from one list together with
 * the key table's value list (keys.c: `.values = VALUE_NAMES(TT_..._VALUES)`), so that the order of
 * the names and of the enum cannot drift apart; keys.c asserts statically that each enum is stored as the
 * int the table writes (TIE_VALUES), and test_config loads every name as its member. X(member, "name") */
/* lr_scheduler: transformers' SchedulerType names, each as its get_*_schedule computes it (train/schedule.c) */
#define TT_LR_SCHEDULER_VALUES(X)                         \
    X(TT_LR_COSINE, "cosine")                             \
    X(TT_LR_LINEAR, "linear")                             \
    X(TT_LR_CONSTANT, "constant")                         \
    X(TT_LR_CONSTANT_WITH_WARMUP, "constant_with_warmup") \
    X(TT_LR_COSINE_WITH_MIN_LR, "cosine_with_min_lr")     \
    X(TT_LR_POLYNOMIAL, "polynomial") X(TT_LR_INVERSE_SQRT, "inverse_sqrt")
#define TT_RECOMPUTE_GRANULARITY_VALUES(X) \
    X(TT_RECOMPUTE_NONE, "none") X(TT_RECOMPUTE_FULL, "full") X(TT_RECOMPUTE_SELECTIVE, "selective")
#define TT_RECOMPUTE_METHOD_VALUES(X) X(TT_RECOMPUTE_UNIFORM, "uniform") X(TT_RECOMPUTE_BLOCK, "block")
#define TT_DEVICE_VALUES(X) X(TT_DEVICE_AUTO, "auto") X(TT_DEVICE_CPU, "cpu") X(TT_DEVICE_CUDA, "cuda")
/* activation_offloading: where checkpointed layers' inputs wait for the backward */
#define TT_ACTIVATION_OFFLOADING_VALUES(X)                                                                             \
    X(TT_OFFLOAD_NONE, "false") /* in the compute tier */                                                              \
    X(TT_OFFLOAD_TRUE, "true")  /* TRL's: pinned (or pageable) host memory, kept slots too where nothing recomputes */ \
    X(TT_OFFLOAD_LEGACY, "legacy")               /* pinned host memory, synchronous copies */                          \
    X(TT_OFFLOAD_DISK, "disk")                   /* a file under offload_dir */                                        \
    X(TT_OFFLOAD_HIDDEN_STATES, "hidden_states") /* axolotl's: pinned host memory on side streams */
/* bf16: false needs the CPU backend, true the CUDA backend, auto follows the device */
#define TT_BF16_VALUES(X) X(TT_BF16_OFF, "false") X(TT_BF16_AUTO, "auto") X(TT_BF16_ON, "true")
/* attn_implementation: which fused attention the GPU runs */
#define TT_ATTN_IMPLEMENTATION_VALUES(X) \
    X(TT_ATTN_AUTO, "auto") X(TT_ATTN_CUDNN, "cudnn") X(TT_ATTN_FLASH, "flash") X(TT_ATTN_SIMPLE, "simple")
/* train_on_eos / train_on_eot (axolotl's): which end-of-sequence (end-of-turn) tokens train */
#define TT_TRAIN_ON_EOS_VALUES(X)                            \
    X(TT_EOS_TURN, "turn") /* after each turn that trains */ \
    X(TT_EOS_ALL, "all")   /* after every turn */            \
    X(TT_EOS_LAST, "last") /* after the last turn only */    \
    X(TT_EOS_NONE, "none")
#define TT_SAVE_STRATEGY_VALUES(X) X(TT_SAVE_STEPS, "steps") X(TT_SAVE_EPOCH, "epoch") X(TT_SAVE_NO, "no")
#define TT_EVAL_STRATEGY_VALUES(X) X(TT_EVAL_STEPS, "steps") X(TT_EVAL_EPOCH, "epoch") X(TT_EVAL_NO, "no")
/* excess_length_strategy: a document longer than sequence_len */
#define TT_EXCESS_LENGTH_VALUES(X) X(TT_EXCESS_DROP, "drop") X(TT_EXCESS_TRUNCATE, "truncate")
#define TT_QUANT_TYPE_VALUES(X) X(TT_BNB_NF4, "nf4") X(TT_BNB_FP4, "fp4")
/* bnb_4bit_compute_dtype: what the 4-bit weights are dequantized to */
#define TT_COMPUTE_DTYPE_VALUES(X) \
    X(TT_COMPUTE_DTYPE_AUTO, "auto") X(TT_COMPUTE_DTYPE_BF16, "bfloat16") X(TT_COMPUTE_DTYPE_F32, "float32")

#define TT_ENUM_MEMBER(member, name) member,
#define TT_ENUM_PLUS_ONE(member, name) +1
typedef enum tt_lr_scheduler { TT_LR_SCHEDULER_VALUES(TT_ENUM_MEMBER) } tt_lr_scheduler;
typedef enum tt_recompute_granularity { TT_RECOMPUTE_GRANULARITY_VALUES(TT_ENUM_MEMBER) } tt_recompute_granularity;
typedef enum tt_recompute_method { TT_RECOMPUTE_METHOD_VALUES(TT_ENUM_MEMBER) } tt_recompute_method;
typedef enum tt_device_kind { TT_DEVICE_VALUES(TT_ENUM_MEMBER) } tt_device_kind;
typedef enum tt_activation_offloading { TT_ACTIVATION_OFFLOADING_VALUES(TT_ENUM_MEMBER) } tt_activation_offloading;
typedef enum tt_bf16_setting { TT_BF16_VALUES(TT_ENUM_MEMBER) } tt_bf16_setting;
typedef enum tt_attn_implementation { TT_ATTN_IMPLEMENTATION_VALUES(TT_ENUM_MEMBER) } tt_attn_implementation;
/* TT_EOS_INHERIT: a datasets entry without its own value takes the top level's (train_on_eot: train_on_eos) */
typedef enum tt_train_on_eos { TT_EOS_INHERIT = -1, TT_TRAIN_ON_EOS_VALUES(TT_ENUM_MEMBER) } tt_train_on_eos;
typedef enum tt_save_strategy { TT_SAVE_STRATEGY_VALUES(TT_ENUM_MEMBER) } tt_save_strategy;
typedef enum tt_eval_strategy { TT_EVAL_STRATEGY_VALUES(TT_ENUM_MEMBER) } tt_eval_strategy;
typedef enum tt_excess_length { TT_EXCESS_LENGTH_VALUES(TT_ENUM_MEMBER) } tt_excess_length;
typedef enum tt_quant_type { TT_QUANT_TYPE_VALUES(TT_ENUM_MEMBER) } tt_quant_type;
typedef enum tt_compute_dtype { TT_COMPUTE_DTYPE_VALUES(TT_ENUM_MEMBER) } tt_compute_dtype;
/* qlora: LoRA on a base whose frozen linear weights are stored in bitsandbytes' 4-bit format. */
typedef enum tt_adapter_kind { TT_ADAPTER_NONE, TT_ADAPTER_LORA, TT_ADAPTER_QLORA } tt_adapter_kind;

/* "turn", "all", "last", "none" */
const char *tt_train_on_eos_name(tt_train_on_eos rule);
/* "false", "true", "legacy", "disk", "hidden_states" */
const char *tt_activation_offloading_name(tt_activation_offloading mode);

#define TT_MAX_DATASETS 16

/* What a datasets entry holds (its `type`, as axolotl names them). */
typedef enum tt_dataset_type {
    TT_DATASET_TOKENS,       /* a token file (docs/token_format.md) */
    TT_DATASET_COMPLETION,   /* JSON/JSONL records with raw text in `field`; every token trains */
    TT_DATASET_ALPACA,       /* instruction / input / output records; the prompt is masked */
    TT_DATASET_INPUT_OUTPUT, /* {segments: [{text, label}]}; segments with label false are masked */
    TT_DATASET_CHAT_TEMPLATE, /* conversations through a chat template; roles_to_train train (src/data/chat_template.h) */
} tt_dataset_type;

/* One datasets entry beyond its path (src/config/datasets.c parses it; src/data/sft_*.c use it). */
typedef struct tt_dataset_spec {
    tt_dataset_type type;
    char *field;             /* completion: the text field (default "text") */
    char *field_instruction; /* alpaca: default "instruction" */
    char *field_input;       /* alpaca: default "input" (optional in a record) */
    char *field_output;      /* alpaca: default "output" */
    /* axolotl's user-defined type (`type:` a mapping): alpaca's tokenization with the prompt built from these, as
     * Python's str.format fills them: system_format with {system}, format with {instruction} and {input} (a record
     * with a non-empty input), no_input_format with {instruction}; the system text is the record's field_system, else
     * system_prompt */
    bool user_defined;
    char *format, *no_input_format, *system_format, *system_prompt, *field_system;
    char *split;       /* "train": a local file has one split */
    char *config_name; /* name: the dataset's configuration, a directory of it (Hub datasets' configs: allenai/c4's en) */
    /* chat_template entries (axolotl's keys; src/data/chat_template.h) */
    char *chat_template;       /* tokenizer_default | tokenizer_default_fallback_<name> | jinja | a built-in;
                                  NULL: the top level's */
    char *chat_template_jinja; /* chat_template: jinja's template, or a file holding it */
    char *field_messages;      /* the record's list of messages (default "messages") */
    int property_mapping_count;
    char **property_names;  /* [property_mapping_count] the property the template reads (role, content, ...) */
    char **property_fields; /* [property_mapping_count] the message field it comes from (role and content
                                  always present: role -> role, content -> content unless mapped) */
    bool roles_given;       /* roles: given (it replaces axolotl's default aliases) */
    int role_alias_count;
    char **role_alias_from; /* [role_alias_count] a role as the data writes it (gpt) */
    char **role_alias_to;   /* [role_alias_count] the role the template gets (assistant) */
    int roles_to_train_count;
    char **roles_to_train;               /* default [assistant] */
    tt_train_on_eos train_on_eos;        /* TT_EOS_INHERIT: the top level's */
    tt_train_on_eos train_on_eot;        /* for the eot_tokens; TT_EOS_INHERIT: as train_on_eos */
    bool drop_system_message;            /* a first system turn is left out */
    char *message_field_training;        /* a message's boolean field that overrides whether it trains, or NULL */
    char *message_field_training_detail; /* a message's list of {begin_offset, end_offset, train} character spans of
                                            its content: only the spans' tokens train; or NULL */
    bool split_thinking;                 /* an assistant content's <think>...</think> becomes its reasoning_content */
    bool tool_call_arguments_as_given;   /* tool_calls[].function.arguments given as JSON text stay text, as
                                            transformers renders them; false: parsed, as axolotl parses them */
} tt_dataset_spec;

/* "tokens", "completion", "alpaca", "input_output", "chat_template" */
const char *tt_dataset_type_name(tt_dataset_type type);

typedef struct tt_run_config {
    /* model */
    char *base_model;         /* directory with config.json and model.safetensors(.index.json); a Hub name is
                                 replaced at load by its snapshot in the Hugging Face cache (core/hf_cache.h) */
    char *base_model_repo_id; /* the Hub name base_model was given as (NULL: a path): what the saved files name */
    char *revision_of_model;  /* the revision of a Hub-named base_model (NULL: main) */
    bool reinit_weights;      /* axolotl's: base_model's config.json from random init (model_config), at load's end */
    bool pretraining_given;   /* the datasets came from axolotl's pretraining_dataset */
    char *model_config;       /* a config.json (or a directory holding one): random init */
    double initializer_range; /* std of the random init (default: config.json's, else 0.02) */
    /* what trains: the whole model (some parts frozen), or LoRA adapters on a frozen base */
    tt_adapter_kind adapter;      /* adapter: lora */
    int64_t lora_r;               /* rank of every adapter */
    double lora_alpha;            /* scaling = lora_alpha / lora_r (PEFT without rslora) */
    bool peft_use_rslora;         /* rank-stabilized LoRA: scaling = lora_alpha / sqrt(lora_r) */
    double neftune_noise_alpha;   /* NEFTune's noise on the embedding output in training; 0: none */
    double lora_dropout;          /* dropout on each adapter's input, training only */
    unsigned lora_target_modules; /* set of tt_lora_module */
    bool lora_target_linear;      /* every linear layer of the decoder layers (the family's modules, all-linear) */
    char **lora_modules_to_save;  /* PEFT's modules_to_save: embed_tokens, lm_head (trained whole, saved with the
                                     adapters); NULL: none */
    int lora_modules_to_save_count;
    char *lora_model_dir;       /* a PEFT adapter directory to continue from, or NULL */
    const char *lora_key_given; /* the first lora_* key given a value (for the check against adapter), or NULL */
    /* adapter: qlora (axolotl's / transformers' BitsAndBytesConfig keys) */
    bool load_in_4bit; /* the frozen linear weights in 4 bits; required by qlora */
    bool load_in_8bit; /* adapter: lora: the frozen linear weights in 8 bits (ops/quant4.h's int8 form) */
    tt_quant_type bnb_4bit_quant_type;
    bool bnb_4bit_use_double_quant;          /* the absmax quantized to 8 bits too */
    tt_compute_dtype bnb_4bit_compute_dtype; /* what dequantization produces */
    const char *bnb_key_given;               /* the first bnb_4bit_* key given a value, or NULL */
    bool freeze_embeddings;                  /* full fine-tuning: model.embed_tokens (and a tied LM head) trains not */
    int64_t *frozen_layers;                  /* full fine-tuning: decoder layers that train not, ascending */
    int64_t frozen_layer_count;
    /* data */
    char *datasets[TT_MAX_DATASETS];                /* paths (datasets: [{path: ...}]): token files or JSON/JSONL */
    tt_dataset_spec dataset_specs[TT_MAX_DATASETS]; /* each path's type and fields */
    int dataset_count;
    /* JSON/JSONL datasets (src/data/prepare.c): tokenized with the model's tokenizer */
    bool train_on_inputs;                /* prompt tokens train too (axolotl's key; default false: masked) */
    char *dataset_prepared_path;         /* where prepared (tokenized, masked) files are kept, by hash */
    bool shuffle_merged_datasets;        /* the prepared file's documents in a seeded order (else input order) */
    bool dataset_exact_deduplication;    /* a prepared document equal to an earlier one (ids and labels) left out */
    bool resize_token_embeddings_to_32x; /* axolotl's embedding resize to a multiple of 32: checked to change nothing */
    char *tokenizer_config;              /* tokenizer.json or its directory; NULL: base_model's */
    char *special_bos, *special_eos, *special_pad; /* special_tokens overrides, or NULL */
    char *special_unk; /* special_tokens' unk_token: must be the tokenizer's own (axolotl's configs restate it) */
    tt_train_on_eos train_on_eos; /* chat_template datasets without their own */
    char *chat_template;          /* chat_template datasets without their own: NULL is tokenizer_default */
    char *chat_template_jinja;    /* the template (or its file) for chat_template: jinja */
    char *chat_template_kwargs;   /* chat_template datasets: more variables of the template, a JSON object's text
                                    (from YAML's mapping); NULL: none */
    char **eot_tokens;            /* chat_template datasets: the end-of-turn tokens train_on_eot picks from; NULL (not
                                    given): the tokenizer's eos_token alone; given, even [], a non-NULL array */
    int eot_token_count;
    tt_excess_length excess_length_strategy; /* documents longer than sequence_len */
    bool sample_packing;                     /* several documents per sequence, each attending only to itself */
    bool pad_to_sequence_len;                /* axolotl's key; sequences are always padded to sequence_len */
    double sample_packing_eff_est;           /* axolotl's packing efficiency estimate, 0: none (informational) */
    int64_t sample_packing_bin_size;   /* documents a packed sequence holds at most (axolotl's multipack bin_size) */
    int64_t sample_packing_group_size; /* documents packed together, the next group into sequences of its own */
    double val_set_size;               /* < 1: fraction of sequences held out; >= 1: a count */
    int64_t sequence_len;
    int64_t micro_batch_size;
    int64_t gradient_accumulation_steps;
    /* optimisation */
    char *optimizer; /* adamw_torch (also: adamw_torch_fused), or adamw_bnb_8bit (also: adamw_8bit, paged_adamw_8bit) */
    double learning_rate;
    tt_lr_scheduler lr_scheduler;
    int64_t warmup_steps;
    double warmup_ratio; /* used when warmup_steps is not given */
    double cosine_min_lr_ratio;
    int64_t max_steps; /* 0: use num_epochs */
    double num_epochs;
    double weight_decay;
    double max_grad_norm; /* 0: no clipping */
    double adam_beta1, adam_beta2, adam_epsilon;
    int64_t seed;
    /* output and evaluation */
    char *output_dir;
    bool overwrite_output_dir;      /* a fresh run may replace a previous one in output_dir */
    tt_save_strategy save_strategy; /* no: no checkpoints, no final model */
    double save_steps;              /* 0: only at the end; below 1: that fraction of the run's steps */
    int64_t saves_per_epoch;        /* axolotl's: save_steps = 1 / (saves_per_epoch x num_epochs); 0: not given */
    int64_t save_total_limit;       /* checkpoints kept in output_dir (the newest); 0: all */
    tt_eval_strategy eval_strategy; /* no: never evaluate */
    double eval_steps;       /* 0: only at the end (if there is an eval set); below 1: a fraction, as save_steps */
    int64_t evals_per_epoch; /* axolotl's: eval_steps = 1 / (evals_per_epoch x num_epochs); 0: not given */
    double loss_watchdog_threshold; /* training stops after loss_watchdog_patience steps above it; 0: off */
    int64_t loss_watchdog_patience;
    int64_t logging_steps;
    char *resume_from_checkpoint; /* a checkpoint directory; --resume picks the latest */
    int64_t max_shard_bytes;      /* max_shard_size: larger models are saved in shards (0: 5GB) */
    /* memory */
    bool gradient_checkpointing;
    bool selective_checkpointing; /* checkpointed layers keep the attention output and log-sum-exp */
    bool selective_offload;       /* ... in pinned host memory (selective_checkpointing offload: true) */
    /* selective_checkpointing: auto (the default): the plan keeps them in pinned memory where that fits and pays
     * (memory/attention_offload.h) */
    bool selective_auto;
    int64_t every_n_layers; /* gradient checkpointing on layers 0, N, 2N, ... only; the others keep all */
    bool checkpoint_trainable_layers_only; /* LLaMA-Factory's rule: layers without trainable parameters keep all */
    bool layer_offloading;                 /* frozen decoder layers streamed from pinned host memory */
    bool cpu_offloading; /* Megatron: offload the activations of the first cpu_offloading_num_layers */
    int64_t cpu_offloading_num_layers;
    bool cpu_offloading_activations;
    bool cpu_offloading_weights; /* Megatron: the trainable weights of those layers live in host memory */
    bool cpu_offloading_double_buffering;
    /* Megatron's optimizer offload: optimizer_offload_fraction of the trainable parameters (whole layers from
     * the top of the stack) keep fp32 master weights and AdamW moments in pinned host memory, updated by the
     * CPU AdamW */
    bool optimizer_cpu_offload;
    double optimizer_offload_fraction;
    bool overlap_cpu_optimizer_d2h_h2d; /* copies and CPU updates per layer, beside the GPU's work */
    int64_t zero_stage;  /* DeepSpeed ZeRO's stage over the data-parallel ranks: 0-3 (memory/optimizer_shards.h) */
    char *deepspeed;     /* a DeepSpeed JSON whose zero_optimization sets zero_stage (config/deepspeed.c), or NULL */
    int64_t ddp_timeout; /* seconds a collective waits for the other ranks before the run ends */
    int64_t sequence_parallel_degree;               /* Ulysses: the processes that share each sequence (1: none) */
    bool use_reentrant;                             /* gradient_checkpointing_kwargs (same arithmetic either way) */
    tt_recompute_granularity recompute_granularity; /* Megatron's keys */
    tt_recompute_method recompute_method;
    int64_t recompute_num_layers;
    char *offload_dir;            /* activation_offloading: disk goes here (NULL: /var/tmp) */
    int64_t min_offload_size;     /* bytes: smaller layer inputs are not offloaded (true, hidden_states) */
    bool use_pin_memory;          /* activation_offloading: true into pinned (else pageable) host memory */
    bool use_streams;             /* activation_offloading: true on side streams (else synchronous) */
    int64_t max_fwd_stash_size;   /* offloaded inputs whose copies may be in flight in the forward */
    int64_t debug_copy_delay_us;  /* race stress: random delay before each offload copy */
    char *trace;                  /* Chrome/Perfetto trace path, or NULL */
    bool profile;                 /* time the ops by class (ops/op_profile.h) */
    int64_t loss_chunk_size;      /* tokens per LM-head + cross-entropy chunk */
    bool tiled_mlp;               /* the MLP over shards of the tokens (ALST) */
    int64_t tiled_mlp_num_shards; /* 0: ceil(sequence_len / hidden_size) */
    int64_t host_memory_budget;   /* bytes; 0: tt_host_memory_default_budget (the machine's less a reserve) */
    int64_t gpu_memory_budget;    /* bytes; 0: what the GPU has free at start */
    char *gpu;                    /* plan without a GPU: a known GPU's name (ops/cuda/backend_cuda.h), or NULL */
    /* execution */
    tt_device_kind device; /* auto: cuda when built with CUDA and a GPU is present */
    int64_t num_threads;   /* 0: all cores */
    bool progress;         /* live progress line */
    bool use_tensorboard;  /* TensorBoard event files under output_dir/runs/ (train/tensorboard.h) */
    tt_activation_offloading activation_offloading;
    tt_bf16_setting bf16; /* true needs the CUDA backend */
    tt_attn_implementation attn_implementation;
    int64_t attn_workspace_limit; /* bytes the deterministic attention backward keeps for its dP, all calls at once */
    bool deterministic;           /* bit-reproducible gradients: no kernel that adds with atomics (false allows) */
    bool master_weights;          /* GPU: fp32 master weights, gradients and AdamW state (else all bf16) */
    bool fp16;                    /* only false */
    bool tf32;                    /* accepted: tiertrain's GEMMs take bf16 (GPU) or fp32 (CPU) inputs, without tf32 */
    /* other tools' keys accepted without effect, and their values mapped onto tiertrain's (config/foreign_keys.c):
     * [foreign_note_count] items ("wandb_project", "attn_implementation: sdpa"), each with the reason of its group
     * (a static string; the note groups items by it) */
    const char **foreign_note_reasons;
    char **foreign_note_items;
    int foreign_note_count;
} tt_run_config;

void tt_run_config_defaults(tt_run_config *config);

/* Loads a YAML file (path may be NULL: defaults only), then applies overrides given as
 * "key=value" strings (the value parsed as a YAML scalar or flow collection). Dies with a
 * message naming the file, line, key and valid values on any error. */
void tt_run_config_load(tt_run_config *config, const char *path, int override_count, char *const *overrides);

/* The note at start: the other tools' keys the config holds that change nothing here, grouped by why. */
void tt_run_config_print_notes(const tt_run_config *config, FILE *out);

/* A key of tiertrain's or one another tool documents (axolotl's): the file is read with it (accepted, or refused with
 * a reason), never "unknown key". */
bool tt_run_config_knows_key(const char *name);

/* The modules that get adapters: lora_target_modules, or all of them with lora_target_linear. */
unsigned tt_run_config_lora_targets(const tt_run_config *config);
/* lora_modules_to_save as a set of tt_saved_module (model/params.h): embed_tokens and lm_head; another name is an
 * error naming it. */
unsigned tt_run_config_modules_to_save(const tt_run_config *config);

/* optimizer: bitsandbytes' 8-bit AdamW (adamw_bnb_8bit, or its names adamw_8bit and paged_adamw_8bit). */
bool tt_run_config_optimizer_8bit(const tt_run_config *config);

/* Cross-key checks (e.g. base_model xor model_config, datasets present). */
void tt_run_config_validate(const tt_run_config *config);

/* `tiertrain train --help`: every key, its type, default and one line of help. */
void tt_run_config_print_help(FILE *out);

/* Writes the effective configuration as YAML (saved next to checkpoints). */
void tt_run_config_write_yaml(const tt_run_config *config, FILE *out);

void tt_run_config_free(tt_run_config *config);

/* Parses sizes such as "24GiB", "512MB", "1073741824" into bytes; -1 on error. */
int64_t tt_parse_bytes(const char *text);

#endif
