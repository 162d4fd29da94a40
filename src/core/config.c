/* The run configuration. Every key is declared once, in key_table below: its type, default,
 * valid values, availability and help. Defaults (the default text goes through the same parser
 * as a user's value), parsing, `--help`, the YAML written next to checkpoints and
 * docs/CONFIG.md all follow that table; no key is handled anywhere else.
 *
 * Error messages name where the value came from ("run.yaml:12" or "command-line override
 * 'seed=x'"), the key, what was wrong and the valid values. */
#include "core/config.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <yaml.h>

#include "core/check.h"
#include "core/input_file.h"

typedef enum key_type {
    KEY_BOOL,
    KEY_INT,
    KEY_FLOAT,
    KEY_STRING,   /* ~ (null) leaves it unset (NULL) */
    KEY_ENUM,     /* a name from a fixed list */
    KEY_BYTES,    /* an integer or a size with a unit: "24GiB", "512MB" */
    KEY_DATASETS, /* a list of token files or {path, type, ...} entries */
    KEY_SPECIAL_TOKENS, /* special_tokens: {bos_token: ..., eos_token: ..., pad_token: ...} */
    KEY_SELECTIVE, /* selective_checkpointing: {save: [attention], offload: false} */
    KEY_CHECKPOINTING_KWARGS, /* gradient_checkpointing_kwargs: {use_reentrant: false} */
    KEY_ADAPTER,  /* adapter: lora, or ~ */
    KEY_LORA_TARGETS, /* lora_target_modules: a list of module names (tt_lora_module) */
    KEY_LAYER_LIST, /* frozen_layers: a list of decoder-layer indices */
    KEY_TEMPLATE_KWARGS, /* chat_template_kwargs: a mapping of any YAML values, kept as a JSON object's text */
    KEY_STRING_LIST, /* eot_tokens: a list of strings (char ** at offset, int count at count_offset) */
} key_type;

typedef enum availability {
    AVAILABLE,
    NOT_YET, /* a key of a later feature: only its off value is accepted (is_off_value) */
} availability;

typedef enum enum_storage {
    STORE_INDEX, /* an int (or a C enum) field: the value's index in `values` */
    STORE_NAME,  /* a char * field: a copy of the value's name */
} enum_storage;

/* A closed, open or half-open interval; a bound that is absent is unlimited. */
typedef struct value_range {
    double min, max;
    bool has_min, has_max, min_open, max_open;
} value_range;

#define AT_LEAST(a)                                                                                                    \
    { .min = (a), .has_min = true }
#define ABOVE(a)                                                                                                       \
    { .min = (a), .has_min = true, .min_open = true }
#define CLOSED(a, b)                                                                                                   \
    { .min = (a), .max = (b), .has_min = true, .has_max = true }
#define HALF_OPEN(a, b)                                                                                                \
    { .min = (a), .max = (b), .has_min = true, .has_max = true, .max_open = true }

typedef struct key_spec {
    const char *name;
    key_type type;
    availability availability;
    size_t offset;              /* of the field in tt_run_config */
    size_t count_offset;        /* KEY_STRING_LIST: of the int count of the list's strings */
    const char *default_text;   /* YAML, parsed like a user's value */
    value_range range;          /* KEY_INT, KEY_FLOAT, KEY_BYTES */
    bool minus_one_unset;       /* KEY_INT: -1 (or ~) means "not given" besides the range */
    bool null_is_default;       /* ~ (or nothing) sets the default, as axolotl's templates write unused keys */
    const char *values;         /* KEY_ENUM: "a|b|c" */
    enum_storage storage;       /* KEY_ENUM */
    const char *not_yet_values; /* KEY_BOOL/KEY_ENUM values that belong to later features: "true|disk" */
    const char *not_yet_reason; /* completes "<key>: <value> is not available yet..." */
    const char *help;
    const char *known_as; /* what other tools call this key ("a|b"); only to answer an unknown key */
} key_spec;

#define FIELD(member) offsetof(tt_run_config, member)
#define RESERVED(key, what)                                                                                            \
    { .name = (key), .availability = NOT_YET, .help = (what) }

_Static_assert(sizeof(tt_lr_scheduler) == sizeof(int), "lr_scheduler is stored as an int index");
_Static_assert(sizeof(tt_device_kind) == sizeof(int), "device is stored as an int index");
_Static_assert(sizeof(tt_recompute_granularity) == sizeof(int), "recompute_granularity is stored as an int index");
_Static_assert(sizeof(tt_recompute_method) == sizeof(int), "recompute_method is stored as an int index");
_Static_assert(sizeof(tt_adapter_kind) == sizeof(int), "adapter is stored as an int");

static const char *const lora_module_names[TT_LORA_MODULE_COUNT] = {"q_proj", "k_proj", "v_proj", "o_proj",
                                                                    "gate_proj", "up_proj", "down_proj"};
static const char *const lora_module_short_names[TT_LORA_MODULE_COUNT] = {"q", "k", "v", "o", "gate", "up", "down"};
static const char *const lora_module_paths[TT_LORA_MODULE_COUNT] = {
    "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
    "mlp.gate_proj",    "mlp.up_proj",      "mlp.down_proj"};

const char *tt_lora_module_name(tt_lora_module module) {
    TT_CHECK(module >= 0 && module < TT_LORA_MODULE_COUNT, "LoRA module %d", (int)module);
    return lora_module_names[module];
}

const char *tt_lora_module_path(tt_lora_module module) {
    TT_CHECK(module >= 0 && module < TT_LORA_MODULE_COUNT, "LoRA module %d", (int)module);
    return lora_module_paths[module];
}

static const key_spec key_table[] = {
    /* model */
    {.name = "base_model",
     .type = KEY_STRING,
     .offset = FIELD(base_model),
     .default_text = "~",
     .help = "a Hugging Face model directory to fine-tune: config.json + model.safetensors (or shards with "
             "model.safetensors.index.json)",
     .known_as = "model_name_or_path|model_name|pretrained_model_name_or_path"},
    {.name = "model_config",
     .type = KEY_STRING,
     .offset = FIELD(model_config),
     .default_text = "~",
     .help = "a config.json (or a directory holding one): train that architecture from random init instead of "
             "base_model"},
    {.name = "initializer_range",
     .type = KEY_FLOAT,
     .offset = FIELD(initializer_range),
     .default_text = "0",
     .range = AT_LEAST(0),
     .help = "std of the normal random init of a model_config run; 0: config.json's initializer_range, else 0.02"},
    /* what trains */
    {.name = "adapter",
     .type = KEY_ADAPTER,
     .offset = FIELD(adapter),
     .default_text = "~",
     .help = "lora: train LoRA adapters on the frozen base model, saved in PEFT's format (adapter_model.safetensors); "
             "qlora: the same on a base whose linear weights are quantized to 4 bits at load (needs load_in_4bit: "
             "true); ~: full fine-tuning"},
    {.name = "load_in_4bit",
     .type = KEY_BOOL,
     .offset = FIELD(load_in_4bit),
     .default_text = "false",
     .null_is_default = true,
     .help = "adapter: qlora: the frozen q/k/v/o/gate/up/down weights are stored in bitsandbytes' 4-bit format "
             "(block 64), dequantized next to each GEMM; embeddings, norms and the LM head stay in the compute dtype. "
             "A base_model saved in that format (quantization_config) loads as it is, in its own nf4/fp4 format"},
    {.name = "bnb_4bit_quant_type",
     .type = KEY_ENUM,
     .offset = FIELD(bnb_4bit_quant_type),
     .default_text = "nf4",
     .values = "nf4|fp4",
     .null_is_default = true,
     .help = "load_in_4bit: the 4-bit code, nf4 (NormalFloat, QLoRA's) or fp4, as bitsandbytes"},
    {.name = "bnb_4bit_use_double_quant",
     .type = KEY_BOOL,
     .offset = FIELD(bnb_4bit_use_double_quant),
     .default_text = "true",
     .null_is_default = true,
     .help = "load_in_4bit: quantize the per-block absmax values to 8 bits too (blocks of 256 with an fp32 scale and "
             "their mean as offset), 0.127 bits per weight less, as axolotl's default"},
    {.name = "bnb_4bit_compute_dtype",
     .type = KEY_ENUM,
     .offset = FIELD(bnb_4bit_compute_dtype),
     .default_text = "auto",
     .values = "auto|bfloat16|float32",
     .null_is_default = true,
     .help = "load_in_4bit: the dtype weights are dequantized to for the GEMMs; auto: the run's compute dtype "
             "(bfloat16 on the GPU, float32 on the CPU backend); another value than the backend's is an error"},
    {.name = "lora_r",
     .type = KEY_INT,
     .offset = FIELD(lora_r),
     .default_text = "8",
     .range = AT_LEAST(1),
     .null_is_default = true,
     .help = "rank of every LoRA adapter: A is [lora_r, in], B is [out, lora_r]",
     .known_as = "lora_rank|r"},
    {.name = "lora_alpha",
     .type = KEY_FLOAT,
     .offset = FIELD(lora_alpha),
     .default_text = "16",
     .range = ABOVE(0),
     .null_is_default = true,
     .help = "LoRA scaling: each adapted layer computes W x + (lora_alpha / lora_r) B A x, as PEFT without rslora"},
    {.name = "lora_dropout",
     .type = KEY_FLOAT,
     .offset = FIELD(lora_dropout),
     .default_text = "0.0",
     .range = HALF_OPEN(0, 1),
     .null_is_default = true,
     .help = "dropout on each adapter's input while training, as PEFT (the mask is a function of seed, step, layer, "
             "module and element, so a recompute repeats it bit for bit); 0: none"},
    {.name = "lora_target_modules",
     .type = KEY_LORA_TARGETS,
     .offset = FIELD(lora_target_modules),
     .default_text = "[]",
     .help = "the linear layers of every decoder layer that get adapters: q_proj, k_proj, v_proj, o_proj, gate_proj, "
             "up_proj, down_proj (or q, k, v, o, gate, up, down)",
     .known_as = "target_modules|lora_target"},
    {.name = "lora_target_linear",
     .type = KEY_BOOL,
     .offset = FIELD(lora_target_linear),
     .default_text = "false",
     .null_is_default = true,
     .help = "adapters on all seven linear layers of every decoder layer (with lora_target_modules: all seven too)"},
    {.name = "lora_model_dir",
     .type = KEY_STRING,
     .offset = FIELD(lora_model_dir),
     .default_text = "~",
     .help = "a PEFT LoRA adapter directory (adapter_model.safetensors, adapter_config.json) to continue from: its "
             "adapters replace the fresh init; lora_r, lora_alpha and the target modules must be the adapter's"},
    {.name = "freeze_embeddings",
     .type = KEY_BOOL,
     .offset = FIELD(freeze_embeddings),
     .default_text = "false",
     .null_is_default = true,
     .help = "full fine-tuning: model.embed_tokens (and the LM head when it is tied to it) gets no gradient, no "
             "optimizer state and no master copy"},
    {.name = "frozen_layers",
     .type = KEY_LAYER_LIST,
     .offset = FIELD(frozen_layers),
     .default_text = "[]",
     .help = "full fine-tuning: decoder layers, by index from 0, that get no gradient, no optimizer state and no "
             "master copy, e.g. [0, 1, 2]",
     .known_as = "freeze_layers|layers_to_freeze"},
    /* data */
    {.name = "datasets",
     .type = KEY_DATASETS,
     .offset = FIELD(datasets),
     .default_text = "[]",
     .help = "what to train on: a list of {path: file.jsonl, type: completion|alpaca|input_output|chat_template, "
             "field: ...} (JSON/JSONL records, tokenized with the model's tokenizer) or of token files ({path: "
             "file.tok} or plain paths; docs/token_format.md)",
     .known_as = "dataset_name|train_file|data_path"},
    {.name = "train_on_inputs",
     .type = KEY_BOOL,
     .offset = FIELD(train_on_inputs),
     .default_text = "false",
     .null_is_default = true,
     .help = "JSON datasets: the prompt tokens (alpaca's instruction and input, input_output segments with label "
             "false) train too; false: their targets are masked (-100), as axolotl"},
    {.name = "dataset_prepared_path",
     .type = KEY_STRING,
     .offset = FIELD(dataset_prepared_path),
     .default_text = "last_run_prepared",
     .help = "directory of prepared datasets: `tiertrain preprocess` (and train, when none exists yet) writes the "
             "tokenized, masked data there as <hash>.tok (token file version 2), the hash of the data, the tokenizer "
             "and the keys that shape it"},
    {.name = "shuffle_merged_datasets",
     .type = KEY_BOOL,
     .offset = FIELD(shuffle_merged_datasets),
     .default_text = "true",
     .null_is_default = true,
     .help = "JSON datasets: the prepared documents of all entries in one order seeded by seed (false: input order); "
             "each epoch then visits them in its own shuffled order either way"},
    {.name = "tokenizer_config",
     .type = KEY_STRING,
     .offset = FIELD(tokenizer_config),
     .default_text = "~",
     .help = "JSON datasets: the tokenizer, a directory with tokenizer.json (and tokenizer_config.json) or a "
             "tokenizer.json; ~: base_model's directory",
     .known_as = "tokenizer|tokenizer_name|tokenizer_name_or_path"},
    {.name = "special_tokens",
     .type = KEY_SPECIAL_TOKENS,
     .offset = FIELD(special_bos),
     .default_text = "~",
     .help = "JSON datasets: {bos_token: ..., eos_token: ..., pad_token: ...} override tokenizer_config.json's; each "
             "must be a token of the tokenizer"},
    {.name = "train_on_eos",
     .type = KEY_ENUM,
     .offset = FIELD(train_on_eos),
     .default_text = "turn",
     .values = "turn|all|last|none",
     .null_is_default = true,
     .help = "chat_template datasets (axolotl's key): which EOS tokens train. completion, alpaca and input_output "
             "follow their type (the appended EOS trains with the output)"},
    {.name = "chat_template",
     .type = KEY_STRING,
     .offset = FIELD(chat_template),
     .default_text = "~",
     .help = "chat_template datasets without their own (axolotl's key): tokenizer_default (the tokenizer's "
             "chat_template.jinja or tokenizer_config.json's chat_template), tokenizer_default_fallback_<name>, jinja "
             "(chat_template_jinja) or a built-in: chatml, llama3, qwen3; ~: tokenizer_default"},
    {.name = "chat_template_jinja",
     .type = KEY_STRING,
     .offset = FIELD(chat_template_jinja),
     .default_text = "~",
     .help = "chat_template datasets: a Jinja chat template (or the path of a file holding one); chat_template: jinja "
             "uses it, and it implies chat_template: jinja when chat_template is not set"},
    {.name = "chat_template_kwargs",
     .type = KEY_TEMPLATE_KWARGS,
     .offset = FIELD(chat_template_kwargs),
     .default_text = "~",
     .help = "chat_template datasets (axolotl's key): more variables every render of the chat template sees, as "
             "apply_chat_template's keyword arguments, e.g. {enable_thinking: false}; values are YAML's booleans, "
             "numbers, strings, lists and mappings"},
    {.name = "eot_tokens",
     .type = KEY_STRING_LIST,
     .offset = FIELD(eot_tokens),
     .count_offset = FIELD(eot_token_count),
     .default_text = "~",
     .help = "chat_template datasets (axolotl's key): the end-of-turn tokens, each one token of the tokenizer, that "
             "train_on_eot picks from (the first within 3 tokens after a turn); ~: the tokenizer's eos_token"},
    {.name = "excess_length_strategy",
     .type = KEY_ENUM,
     .offset = FIELD(excess_length_strategy),
     .default_text = "drop",
     .values = "drop|truncate",
     .null_is_default = true,
     .help = "JSON datasets (and token files with sample_packing): a document longer than sequence_len is dropped "
             "(counted and printed, as axolotl) or truncated to its first sequence_len tokens"},
    {.name = "sample_packing",
     .type = KEY_BOOL,
     .offset = FIELD(sample_packing),
     .default_text = "false",
     .null_is_default = true,
     .help = "pack several documents into each sequence of sequence_len tokens, anew each epoch as axolotl's "
             "multipack sampler (first-fit in the epoch's seeded order); each document attends only to itself and its "
             "positions restart at 0, as transformers with position_ids (token files: documents end at the eos id of "
             "their header)"},
    {.name = "pad_to_sequence_len",
     .type = KEY_BOOL,
     .offset = FIELD(pad_to_sequence_len),
     .default_text = "true",
     .null_is_default = true,
     .help = "axolotl's key: pad every sequence to sequence_len. tiertrain always does (its buffers are sized once "
             "for sequence_len), so false changes nothing and says so at start"},
    {.name = "sample_packing_eff_est",
     .type = KEY_FLOAT,
     .offset = FIELD(sample_packing_eff_est),
     .default_text = "0",
     .null_is_default = true,
     .range = CLOSED(0, 1),
     .help = "axolotl's estimate of the packing efficiency (0..1) for counting steps before packing; tiertrain packs "
             "before it counts steps, so it prints the measured efficiency beside the estimate; 0: none given"},
    {.name = "sample_packing_bin_size",
     .type = KEY_INT,
     .offset = FIELD(sample_packing_bin_size),
     .default_text = "200",
     .range = AT_LEAST(1),
     .null_is_default = true,
     .help = "sample_packing (axolotl's key): a packed sequence holds at most this many documents"},
    {.name = "sample_packing_group_size",
     .type = KEY_INT,
     .offset = FIELD(sample_packing_group_size),
     .default_text = "100000",
     .range = AT_LEAST(1),
     .null_is_default = true,
     .help = "sample_packing (axolotl's key): an epoch's documents are packed in groups of this many, in its order, "
             "each group into sequences of its own"},
    {.name = "val_set_size",
     .type = KEY_FLOAT,
     .offset = FIELD(val_set_size),
     .default_text = "0.0",
     .range = AT_LEAST(0),
     .help = "sequences held out for the eval loss: below 1 a fraction, from 1 a whole count; 0: no eval set"},
    {.name = "sequence_len",
     .type = KEY_INT,
     .offset = FIELD(sequence_len),
     .default_text = "512",
     .range = AT_LEAST(2),
     .help = "tokens per training sequence",
     .known_as = "max_seq_length|max_length|seq_length|max_seq_len|cutoff_len|block_size"},
    {.name = "micro_batch_size",
     .type = KEY_INT,
     .offset = FIELD(micro_batch_size),
     .default_text = "1",
     .range = AT_LEAST(1),
     .help = "sequences per forward/backward pass",
     .known_as = "per_device_train_batch_size|batch_size|train_micro_batch_size_per_gpu"},
    {.name = "gradient_accumulation_steps",
     .type = KEY_INT,
     .offset = FIELD(gradient_accumulation_steps),
     .default_text = "1",
     .range = AT_LEAST(1),
     .help = "micro-batches per optimizer step; the loss is the mean over all their unmasked tokens"},
    /* optimisation */
    {.name = "optimizer",
     .type = KEY_ENUM,
     .offset = FIELD(optimizer),
     .default_text = "adamw_torch",
     .values = "adamw_torch|adamw_torch_fused",
     .storage = STORE_NAME,
     .help = "AdamW with torch.optim.AdamW's update (both names run the same code)",
     .known_as = "optim"},
    {.name = "learning_rate",
     .type = KEY_FLOAT,
     .offset = FIELD(learning_rate),
     .default_text = "2e-5",
     .range = ABOVE(0),
     .help = "peak learning rate, reached at the end of warmup",
     .known_as = "lr"},
    {.name = "lr_scheduler",
     .type = KEY_ENUM,
     .offset = FIELD(lr_scheduler),
     .default_text = "cosine",
     .values = "cosine|linear|constant",
     .help = "after warmup: cosine decay to cosine_min_lr_ratio x learning_rate, linear decay to 0, or constant",
     .known_as = "lr_scheduler_type|lr_decay_style"},
    {.name = "warmup_steps",
     .type = KEY_INT,
     .offset = FIELD(warmup_steps),
     .default_text = "-1",
     .range = AT_LEAST(0),
     .minus_one_unset = true,
     .help = "optimizer steps of linear warmup from 0; -1 (or ~): not given, warmup_ratio applies",
     .known_as = "num_warmup_steps|lr_warmup_iters"},
    {.name = "warmup_ratio",
     .type = KEY_FLOAT,
     .offset = FIELD(warmup_ratio),
     .default_text = "0.0",
     .range = CLOSED(0, 1),
     .help = "warmup as a fraction of all optimizer steps, when warmup_steps is not given",
     .known_as = "lr_warmup_fraction"},
    {.name = "cosine_min_lr_ratio",
     .type = KEY_FLOAT,
     .offset = FIELD(cosine_min_lr_ratio),
     .default_text = "0.0",
     .range = CLOSED(0, 1),
     .help = "the cosine schedule's floor as a fraction of learning_rate"},
    {.name = "max_steps",
     .type = KEY_INT,
     .offset = FIELD(max_steps),
     .default_text = "0",
     .range = AT_LEAST(0),
     .help = "optimizer steps to run; 0: as many as num_epochs takes",
     .known_as = "train_iters|max_iters"},
    {.name = "num_epochs",
     .type = KEY_FLOAT,
     .offset = FIELD(num_epochs),
     .default_text = "1.0",
     .range = ABOVE(0),
     .help = "passes over the training sequences, when max_steps is 0",
     .known_as = "num_train_epochs|epochs"},
    {.name = "weight_decay",
     .type = KEY_FLOAT,
     .offset = FIELD(weight_decay),
     .default_text = "0.0",
     .range = AT_LEAST(0),
     .help = "decoupled AdamW weight decay of matrices (biases and norm weights never decay)"},
    {.name = "max_grad_norm",
     .type = KEY_FLOAT,
     .offset = FIELD(max_grad_norm),
     .default_text = "1.0",
     .range = AT_LEAST(0),
     .help = "clip the global gradient norm to this; 0: no clipping",
     .known_as = "clip_grad|gradient_clipping"},
    {.name = "adam_beta1",
     .type = KEY_FLOAT,
     .offset = FIELD(adam_beta1),
     .default_text = "0.9",
     .range = HALF_OPEN(0, 1),
     .help = "AdamW beta1 (first-moment decay)"},
    {.name = "adam_beta2",
     .type = KEY_FLOAT,
     .offset = FIELD(adam_beta2),
     .default_text = "0.999",
     .range = HALF_OPEN(0, 1),
     .help = "AdamW beta2 (second-moment decay)"},
    {.name = "adam_epsilon",
     .type = KEY_FLOAT,
     .offset = FIELD(adam_epsilon),
     .default_text = "1e-8",
     .range = ABOVE(0),
     .help = "AdamW epsilon",
     .known_as = "adam_eps|eps"},
    {.name = "seed",
     .type = KEY_INT,
     .offset = FIELD(seed),
     .default_text = "42",
     .range = AT_LEAST(0),
     .help = "seeds the random init, the eval split and the shuffles"},
    /* output and evaluation */
    {.name = "output_dir",
     .type = KEY_STRING,
     .offset = FIELD(output_dir),
     .default_text = "./outputs",
     .help = "where checkpoints, the final model and metrics.jsonl go",
     .known_as = "save_dir|save"},
    {.name = "save_strategy",
     .type = KEY_ENUM,
     .offset = FIELD(save_strategy),
     .default_text = "steps",
     .values = "steps|no",
     .help = "steps: checkpoints every save_steps and the final model in output_dir; no: nothing is saved (benchmarks)"},
    {.name = "save_steps",
     .type = KEY_INT,
     .offset = FIELD(save_steps),
     .default_text = "0",
     .range = AT_LEAST(0),
     .help = "a checkpoint every N optimizer steps (and always at the end); 0: only at the end",
     .known_as = "save_interval"},
    {.name = "eval_steps",
     .type = KEY_INT,
     .offset = FIELD(eval_steps),
     .default_text = "0",
     .range = AT_LEAST(0),
     .help = "the eval loss every N optimizer steps (and at the end) when there is an eval set; 0: only at the end",
     .known_as = "eval_interval"},
    {.name = "logging_steps",
     .type = KEY_INT,
     .offset = FIELD(logging_steps),
     .default_text = "1",
     .range = AT_LEAST(1),
     .help = "print the progress line every N optimizer steps",
     .known_as = "log_interval"},
    {.name = "resume_from_checkpoint",
     .type = KEY_STRING,
     .offset = FIELD(resume_from_checkpoint),
     .default_text = "~",
     .help = "a checkpoint-<step> directory to continue from (`--resume` picks the newest in output_dir)"},
    {.name = "max_shard_size",
     .type = KEY_BYTES,
     .offset = FIELD(max_shard_bytes),
     .default_text = "5GB",
     .range = AT_LEAST(0),
     .help = "saved models larger than this are split into shards with an index, as save_pretrained does; 0: 5GB"},
    /* memory */
    {.name = "gradient_checkpointing",
     .type = KEY_BOOL,
     .offset = FIELD(gradient_checkpointing),
     .default_text = "false",
     .help = "keep only each layer's input and recompute the layer in the backward pass",
     .known_as = "activation_checkpointing"},
    {.name = "gradient_checkpointing_kwargs",
     .type = KEY_CHECKPOINTING_KWARGS,
     .offset = FIELD(use_reentrant),
     .default_text = "~",
     .help = "transformers' {use_reentrant: true|false}, accepted so configs carry over: tiertrain's recompute has "
             "one implementation and both values give the same bits"},
    {.name = "selective_checkpointing",
     .type = KEY_SELECTIVE,
     .offset = FIELD(selective_checkpointing),
     .default_text = "~",
     .help = "with gradient_checkpointing: {save: [attention]} keeps each layer's attention output and log-sum-exp "
             "and recomputes the rest (no attention recompute); offload: true keeps them in pinned host memory between "
             "forward and backward, copied on side streams"},
    {.name = "every_n_layers",
     .type = KEY_INT,
     .offset = FIELD(every_n_layers),
     .default_text = "1",
     .range = AT_LEAST(1),
     .help = "with gradient_checkpointing: checkpoint only every N-th layer (0, N, 2N, ...; torchtune's ac_option); "
             "the others keep everything"},
    {.name = "checkpoint_trainable_layers_only",
     .type = KEY_BOOL,
     .offset = FIELD(checkpoint_trainable_layers_only),
     .default_text = "false",
     .help = "with gradient_checkpointing: layers without trainable parameters (frozen_layers) are not checkpointed "
             "and keep everything (LLaMA-Factory's rule)"},
    {.name = "recompute_granularity",
     .type = KEY_ENUM,
     .offset = FIELD(recompute_granularity),
     .default_text = "none",
     .values = "none|full|selective",
     .help = "Megatron's: full recomputes whole layers (as gradient_checkpointing), selective only the cheap "
             "element-wise ops (norms, RoPE, SwiGLU) and keeps every GEMM and attention output; none: "
             "gradient_checkpointing decides"},
    {.name = "recompute_method",
     .type = KEY_ENUM,
     .offset = FIELD(recompute_method),
     .default_text = "uniform",
     .values = "uniform|block",
     .help = "Megatron's, with recompute_granularity full: block recomputes the first recompute_num_layers layers "
             "and keeps the rest; uniform checkpoints every layer (recompute_num_layers 1)"},
    {.name = "recompute_num_layers",
     .type = KEY_INT,
     .offset = FIELD(recompute_num_layers),
     .default_text = "1",
     .range = AT_LEAST(1),
     .help = "Megatron's: layers recomputed with recompute_method block; with uniform only 1 (a layer per "
             "checkpoint) is available"},
    {.name = "activation_offloading",
     .type = KEY_ENUM,
     .offset = FIELD(activation_offloading),
     .default_text = "false",
     .values = "false|true|legacy|disk|hidden_states",
     .help = "with gradient checkpointing, each layer's input (the checkpoint) leaves the compute tier after the "
             "layer's forward and comes back before its backward. true: to pinned host memory on a side stream "
             "while compute goes on (use_pin_memory, use_streams, min_offload_size, max_fwd_stash_size apply); "
             "hidden_states: the same, always pinned and streamed, the next layer's input prefetched in the "
             "backward; legacy: to pinned host memory, synchronously; disk: to a file under offload_dir, written "
             "and read back (one layer ahead) by an IO thread"},
    {.name = "layer_offloading",
     .type = KEY_BOOL,
     .offset = FIELD(layer_offloading),
     .default_text = "false",
     .help = "frozen decoder layers (adapter: lora, or frozen_layers) live in pinned host memory and are streamed to "
             "the GPU one layer at a time, the next one prefetched on a copy stream into a second buffer: at most two "
             "layers of frozen weights on the GPU"},
    {.name = "cpu_offloading",
     .type = KEY_BOOL,
     .offset = FIELD(cpu_offloading),
     .default_text = "false",
     .help = "Megatron's: the activations of the first cpu_offloading_num_layers layers (every tensor their backward "
             "keeps, and their checkpoints with recompute) live in pinned host memory between forward and backward, "
             "copied on side streams"},
    {.name = "cpu_offloading_num_layers",
     .type = KEY_INT,
     .offset = FIELD(cpu_offloading_num_layers),
     .default_text = "0",
     .range = AT_LEAST(0),
     .help = "Megatron's: how many layers, from the first, cpu_offloading offloads (0 .. num_layers - 1)"},
    {.name = "cpu_offloading_activations",
     .type = KEY_BOOL,
     .offset = FIELD(cpu_offloading_activations),
     .default_text = "true",
     .help = "Megatron's: cpu_offloading moves the activations of its layers"},
    {.name = "cpu_offloading_weights",
     .type = KEY_BOOL,
     .offset = FIELD(cpu_offloading_weights),
     .default_text = "false",
     .help = "Megatron's: the trainable weights of the first cpu_offloading_num_layers layers live in host memory and "
             "are streamed to the GPU one layer at a time (the next prefetched into a second buffer); their updates "
             "are written back there"},
    {.name = "cpu_offloading_double_buffering",
     .type = KEY_BOOL,
     .offset = FIELD(cpu_offloading_double_buffering),
     .default_text = "false",
     .help = "Megatron's: two staging buffers for the offloaded activations, so a layer's copy out overlaps the next "
             "layer's forward (false: one, and each layer waits for the previous copy)"},
    {.name = "optimizer_cpu_offload",
     .type = KEY_BOOL,
     .offset = FIELD(optimizer_cpu_offload),
     .default_text = "false",
     .help = "Megatron's: the fp32 master weights and AdamW moments of optimizer_offload_fraction of the trainable "
             "parameters (whole layers from the top of the stack: final norm and LM head, then layers L-1 down) live "
             "in pinned host memory and are updated there by the SIMD CPU AdamW; the rest stay on the compute device"},
    {.name = "optimizer_offload_fraction",
     .type = KEY_FLOAT,
     .offset = FIELD(optimizer_offload_fraction),
     .default_text = "1.0",
     .range = CLOSED(0, 1),
     .help = "Megatron's: the share of the trainable parameters optimizer_cpu_offload updates on the CPU, rounded to "
             "the nearest whole layer; 1: all of them, 0: none. Without optimizer_cpu_offload only 1 or 0 (both: "
             "nothing offloaded) is accepted"},
    {.name = "overlap_cpu_optimizer_d2h_h2d",
     .type = KEY_BOOL,
     .offset = FIELD(overlap_cpu_optimizer_d2h_h2d),
     .default_text = "false",
     .help = "Megatron's: with optimizer_cpu_offload, a layer's gradients go to the host as soon as its backward is "
             "done, a CPU thread updates it while the GPU goes on (once the gradient norm is known when max_grad_norm "
             "> 0), and its new weights come back before the next forward reaches it; false: the copies and the CPU "
             "update run after the backward, synchronously"},
    {.name = "min_offload_size",
     .type = KEY_BYTES,
     .offset = FIELD(min_offload_size),
     .default_text = "1024",
     .range = AT_LEAST(0),
     .help = "activation_offloading true/hidden_states: a tensor smaller than this many bytes stays on the GPU "
             "(TRL's OffloadActivations key)"},
    {.name = "use_pin_memory",
     .type = KEY_BOOL,
     .offset = FIELD(use_pin_memory),
     .default_text = "true",
     .help = "activation_offloading: true: offload into page-locked host memory (false: pageable memory, where "
             "copies run 5-8x slower and cannot overlap compute)"},
    {.name = "use_streams",
     .type = KEY_BOOL,
     .offset = FIELD(use_streams),
     .default_text = "true",
     .help = "activation_offloading: true: copies run on side streams, overlapped with compute (false: the compute "
             "waits for each copy, as legacy)"},
    {.name = "max_fwd_stash_size",
     .type = KEY_INT,
     .offset = FIELD(max_fwd_stash_size),
     .default_text = "1",
     .range = AT_LEAST(1),
     .help = "activation_offloading true/hidden_states: offloaded layer inputs whose copies may still be in flight "
             "while the forward goes on; each costs one layer input of GPU memory (TRL counts tensors and "
             "defaults to 5; one layer input already overlaps a whole layer's forward)"},
    {.name = "debug_copy_delay_us",
     .type = KEY_INT,
     .offset = FIELD(debug_copy_delay_us),
     .default_text = "0",
     .range = CLOSED(0, 1000000),
     .help = "race stress for tests: each offload copy first waits a random 0..N microseconds on its stream; the "
             "results must not change"},
    {.name = "offload_dir",
     .type = KEY_STRING,
     .offset = FIELD(offload_dir),
     .default_text = "~",
     .help = "directory of activation_offloading: disk (a local disk; the file is unlinked at once, so nothing is "
             "left behind); ~: /var/tmp"},
    {.name = "trace",
     .type = KEY_STRING,
     .offset = FIELD(trace),
     .default_text = "~",
     .help = "write a Chrome/Perfetto trace (JSON) of compute, copies and bytes per tier to this path (also: "
             "tiertrain train --trace FILE); on the GPU from CUDA events on the compute and copy streams"},
    {.name = "loss_chunk_size",
     .type = KEY_INT,
     .offset = FIELD(loss_chunk_size),
     .default_text = "1024",
     .range = AT_LEAST(1),
     .help = "tokens per LM-head + cross-entropy chunk: the full logits never exist"},
    {.name = "tiled_mlp",
     .type = KEY_BOOL,
     .offset = FIELD(tiled_mlp),
     .default_text = "false",
     .help = "ALST's tiled MLP (axolotl's key): each layer's MLP runs over shards of the tokens, so its [tokens, "
             "intermediate_size] gate, up and SwiGLU outputs exist for one shard at a time and are recomputed shard "
             "by shard in the backward; the weight gradients add up over the shards, so the bits differ from "
             "tiled_mlp: false (every memory mode with the same tiling gives the same bits)"},
    {.name = "tiled_mlp_num_shards",
     .type = KEY_INT,
     .offset = FIELD(tiled_mlp_num_shards),
     .default_text = "0",
     .range = AT_LEAST(0),
     .help = "with tiled_mlp: shards of the micro-batch's tokens; 0: ceil(sequence_len / hidden_size), as axolotl"},
    {.name = "host_memory_budget",
     .type = KEY_BYTES,
     .offset = FIELD(host_memory_budget),
     .default_text = "0",
     .range = AT_LEAST(0),
     .help = "host memory the run may use, e.g. 24GiB; 0: the machine's physical memory"},
    /* execution */
    {.name = "device",
     .type = KEY_ENUM,
     .offset = FIELD(device),
     .default_text = "auto",
     .values = "auto|cpu|cuda",
     .help = "where the ops run; auto: cuda when tiertrain was built with CUDA and a GPU is present, else cpu"},
    {.name = "gpu_memory_budget",
     .type = KEY_BYTES,
     .offset = FIELD(gpu_memory_budget),
     .default_text = "0",
     .range = AT_LEAST(0),
     .help = "GPU memory the plan may use, e.g. 40GiB; 0: what the GPU has free at start"},
    {.name = "num_threads",
     .type = KEY_INT,
     .offset = FIELD(num_threads),
     .default_text = "0",
     .range = CLOSED(0, 1024), /* each thread has a stack: 100000 of them overflowed (and no host has as many cores) */
     .help = "CPU threads; 0: all cores (at most 1024)"},
    {.name = "progress",
     .type = KEY_BOOL,
     .offset = FIELD(progress),
     .default_text = "true",
     .help = "show the live progress line"},
    {.name = "bf16",
     .type = KEY_ENUM,
     .offset = FIELD(bf16),
     .default_text = "auto",
     .values = "false|auto|true",
     .help = "bf16 compute (weights and activations, fp32 accumulation); auto: on the GPU. The CPU backend "
             "computes in fp32 and the GPU backend in bf16, so true needs device cuda and false device cpu"},
    {.name = "attn_implementation",
     .type = KEY_ENUM,
     .offset = FIELD(attn_implementation),
     .default_text = "auto",
     .values = "auto|cudnn|flash|simple",
     .help = "GPU attention kernels: cudnn (cuDNN's fused flash attention), flash (tiertrain's own), simple (the "
             "reference kernels); auto: the fastest available for the shape. The CPU backend has one"},
    {.name = "attn_workspace_limit",
     .type = KEY_BYTES,
     .offset = FIELD(attn_workspace_limit),
     .default_text = "0",
     .range = AT_LEAST(0),
     .help = "GPU memory cuDNN's deterministic attention backward keeps for its bf16 dP: it runs on groups of "
             "heads, and at long context on chunks of keys, that fit; where one call cannot hold every head, two "
             "groups run at once with half the limit each, and more in the layer inputs the backward is done with "
             "(measured on an H100 at 64k tokens, 16 heads, 8 kv, one group at a time: 322 TFLOP/s with 1GiB, 376 "
             "with 2GiB, 412 with 4GiB, 432 with 8GiB; two at a time: 417 with 2GiB, 442 with 4GiB). The workspace "
             "exists only during each layer's attention backward. 0: auto, 1GiB plus the room full checkpointing "
             "leaves free at that point (the MLP's tensors are gone by then), the same in every memory mode since "
             "it shapes the backward's bits"},
    {.name = "master_weights",
     .type = KEY_BOOL,
     .offset = FIELD(master_weights),
     .default_text = "true",
     .help = "GPU: fp32 master weights, fp32 gradients and fp32 AdamW state (mixed precision); false: bf16 "
             "parameters, gradients and AdamW state with no master copy, the recipe of a bf16 model in PyTorch"},
    {.name = "fp16",
     .type = KEY_BOOL,
     .offset = FIELD(fp16),
     .default_text = "false",
     .not_yet_values = "true",
     .not_yet_reason = " on the CPU backend (fp16 compute comes with the CUDA backend)",
     .help = "fp16 compute (only false in this version)"},
    {.name = "tf32",
     .type = KEY_BOOL,
     .offset = FIELD(tf32),
     .default_text = "false",
     .not_yet_values = "true",
     .not_yet_reason = " on the CPU backend (tf32 matmuls come with the CUDA backend)",
     .help = "tf32 matmuls (only false in this version)"},
    /* keys of later features (RESERVED(key, what)): accepted only with their off value; none at the moment */
};

enum { KEY_COUNT = (int)(sizeof key_table / sizeof key_table[0]) };

/* Where values come from: a config file (with line numbers) or one command-line override. */
typedef struct source {
    const char *path;     /* the config file, or NULL */
    const char *override; /* the "key=value" text when path is NULL */
    bool built_in;        /* a key's default, not the user's value */
} source;

static void die_at(const source *src, const yaml_node_t *node, const char *fmt, ...)
    __attribute__((__noreturn__, format(printf, 3, 4)));

static void die_at(const source *src, const yaml_node_t *node, const char *fmt, ...) {
    char message[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    if (src->path) tt_die("%s:%zu: %s", src->path, node ? node->start_mark.line + 1 : (size_t)1, message);
    tt_die("command-line override '%s': %s", src->override, message);
}

/* ---- byte sizes ---- */

int64_t tt_parse_bytes(const char *text) {
    if (!text) return -1;
    const char *p = text;
    while (*p == ' ' || *p == '\t')
        p++;
    if (!isdigit((unsigned char)*p) && !(*p == '.' && isdigit((unsigned char)p[1]))) return -1;
    uint64_t whole = 0;
    for (; isdigit((unsigned char)*p); p++) {
        uint64_t digit = (uint64_t)(*p - '0');
        if (whole > (UINT64_MAX - digit) / 10) return -1;
        whole = whole * 10 + digit;
    }
    uint64_t fraction = 0, fraction_scale = 1; /* the first 18 fractional digits are plenty */
    if (*p == '.') {
        p++;
        if (!isdigit((unsigned char)*p)) return -1;
        for (int digits = 0; isdigit((unsigned char)*p); p++, digits++)
            if (digits < 18) {
                fraction = fraction * 10 + (uint64_t)(*p - '0');
                fraction_scale *= 10;
            }
    }
    while (*p == ' ' || *p == '\t')
        p++;
    /* Bare K/M/G/T are binary, as in `free -g` and memory limits; KB/MB/GB/TB are decimal. */
    static const struct {
        const char *unit;
        uint64_t factor;
    } units[] = {{"", 1},
                 {"B", 1},
                 {"K", 1ull << 10},
                 {"KiB", 1ull << 10},
                 {"KB", 1000ull},
                 {"M", 1ull << 20},
                 {"MiB", 1ull << 20},
                 {"MB", 1000000ull},
                 {"G", 1ull << 30},
                 {"GiB", 1ull << 30},
                 {"GB", 1000000000ull},
                 {"T", 1ull << 40},
                 {"TiB", 1ull << 40},
                 {"TB", 1000000000000ull}};
    const char *end = p + strlen(p);
    while (end > p && (end[-1] == ' ' || end[-1] == '\t'))
        end--;
    size_t unit_length = (size_t)(end - p);
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strlen(units[i].unit) != unit_length || strncasecmp(p, units[i].unit, unit_length) != 0) continue;
        uint64_t factor = units[i].factor;
        if (factor == 1 && fraction != 0) return -1; /* a fraction of a byte */
        if (whole > (uint64_t)INT64_MAX / factor) return -1;
        uint64_t bytes = whole * factor;
        if (fraction) {
            long double extra = floorl((long double)fraction * (long double)factor / (long double)fraction_scale);
            if ((long double)bytes + extra > (long double)INT64_MAX) return -1;
            bytes += (uint64_t)extra;
            if (bytes > (uint64_t)INT64_MAX) return -1;
        }
        return (int64_t)bytes;
    }
    return -1;
}

/* ---- the key table ---- */

static const key_spec *find_key(const char *name) {
    for (int i = 0; i < KEY_COUNT; i++)
        if (strcmp(key_table[i].name, name) == 0) return &key_table[i];
    return NULL;
}

/* Is text one of the '|'-separated names in list? Its index, or -1. */
static int index_in_list(const char *list, const char *text, bool ignore_case) {
    if (!list) return -1;
    size_t length = strlen(text);
    int index = 0;
    for (const char *p = list;; index++) {
        const char *bar = strchr(p, '|');
        size_t n = bar ? (size_t)(bar - p) : strlen(p);
        if (n == length && (ignore_case ? strncasecmp(p, text, n) : strncmp(p, text, n)) == 0) return index;
        if (!bar) return -1;
        p = bar + 1;
    }
}

/* The index-th name of a '|'-separated list into buf. */
static const char *name_in_list(const char *list, int index, char *buf, size_t size) {
    const char *p = list;
    for (int i = 0; i < index && p; i++) {
        p = strchr(p, '|');
        if (p) p++;
    }
    TT_CHECK(p != NULL, "index %d past the list '%s'", index, list);
    const char *bar = strchr(p, '|');
    snprintf(buf, size, "%.*s", bar ? (int)(bar - p) : (int)strlen(p), p);
    return buf;
}

/* "a|b|c" as "a, b, c". */
static const char *list_with_commas(const char *list, char *buf, size_t size) {
    size_t used = 0;
    for (const char *p = list; *p && used + 3 < size; p++) {
        if (*p == '|') {
            buf[used++] = ',';
            buf[used++] = ' ';
        } else {
            buf[used++] = *p;
        }
    }
    buf[used] = 0;
    return buf;
}

/* The values of an enum that are available today: "a|b" from "a|b|c" minus not_yet_values. */
static const char *available_values(const key_spec *k, char *buf, size_t size) {
    buf[0] = 0;
    char name[64];
    for (const char *p = k->values; p; p = strchr(p, '|'), p = p ? p + 1 : NULL) {
        const char *bar = strchr(p, '|');
        snprintf(name, sizeof name, "%.*s", bar ? (int)(bar - p) : (int)strlen(p), p);
        if (index_in_list(k->not_yet_values, name, false) >= 0) continue;
        size_t used = strlen(buf);
        snprintf(buf + used, size - used, "%s%s", used ? "|" : "", name);
    }
    return buf;
}

static void format_number(double v, char *buf, size_t size) { snprintf(buf, size, "%.15g", v); }

/* ">= 1", "> 0", "in [0, 1)", or "" when unlimited. */
static const char *range_text(const value_range *r, char *buf, size_t size) {
    char lo[32], hi[32];
    format_number(r->min, lo, sizeof lo);
    format_number(r->max, hi, sizeof hi);
    if (r->has_min && r->has_max)
        snprintf(buf, size, "in %s%s, %s%s", r->min_open ? "(" : "[", lo, hi, r->max_open ? ")" : "]");
    else if (r->has_min)
        snprintf(buf, size, "%s %s", r->min_open ? ">" : ">=", lo);
    else if (r->has_max)
        snprintf(buf, size, "%s %s", r->max_open ? "<" : "<=", hi);
    else
        buf[0] = 0;
    return buf;
}

static bool in_range(const value_range *r, double v) {
    if (r->has_min && (r->min_open ? !(v > r->min) : !(v >= r->min))) return false;
    if (r->has_max && (r->max_open ? !(v < r->max) : !(v <= r->max))) return false;
    return true;
}

static const char *type_name(const key_spec *k) {
    switch (k->type) {
    case KEY_BOOL: return "bool";
    case KEY_INT: return "int";
    case KEY_FLOAT: return "float";
    case KEY_STRING: return "string";
    case KEY_ENUM: return "enum";
    case KEY_BYTES: return "bytes";
    case KEY_DATASETS: return "datasets";
    case KEY_SPECIAL_TOKENS: return "mapping";
    case KEY_SELECTIVE: return "mapping";
    case KEY_CHECKPOINTING_KWARGS: return "mapping";
    case KEY_ADAPTER: return "enum";
    case KEY_LORA_TARGETS: return "list";
    case KEY_LAYER_LIST: return "list";
    case KEY_TEMPLATE_KWARGS: return "mapping";
    case KEY_STRING_LIST: return "list";
    }
    return "?";
}

/* The valid values of a key, for --help and docs/CONFIG.md. */
static const char *valid_text(const key_spec *k, char *buf, size_t size) {
    char range[96], values[128];
    range_text(&k->range, range, sizeof range);
    switch (k->type) {
    case KEY_BOOL: snprintf(buf, size, "%s", k->not_yet_values ? "false (true: not yet)" : "true, false"); break;
    case KEY_INT:
        if (k->minus_one_unset)
            snprintf(buf, size, "%s, or -1 (not given)", range);
        else
            snprintf(buf, size, "%s", range[0] ? range : "any integer");
        break;
    case KEY_FLOAT: snprintf(buf, size, "%s", range[0] ? range : "any number"); break;
    case KEY_STRING: snprintf(buf, size, "text; ~: unset"); break;
    case KEY_BYTES: snprintf(buf, size, "%s, or 24GiB, 512MB", range); break;
    case KEY_DATASETS: snprintf(buf, size, "[{path: x.jsonl, type: alpaca}], [{path: x.tok}] or [paths]"); break;
    case KEY_SPECIAL_TOKENS: snprintf(buf, size, "{eos_token: TOKEN, bos_token: .., pad_token: ..}; ~: none"); break;
    case KEY_SELECTIVE: snprintf(buf, size, "{save: [attention], offload: false}; ~: off"); break;
    case KEY_CHECKPOINTING_KWARGS: snprintf(buf, size, "{use_reentrant: false}; ~: none"); break;
    case KEY_ADAPTER: snprintf(buf, size, "lora, qlora; ~: none"); break;
    case KEY_LORA_TARGETS: snprintf(buf, size, "[q_proj, ..., down_proj]"); break;
    case KEY_LAYER_LIST: snprintf(buf, size, "[layer indices]"); break;
    case KEY_TEMPLATE_KWARGS: snprintf(buf, size, "{name: value, ...}; ~: none"); break;
    case KEY_STRING_LIST: snprintf(buf, size, "[strings]; ~: unset"); break;
    case KEY_ENUM: {
        char available[128];
        list_with_commas(available_values(k, available, sizeof available), values, sizeof values);
        if (k->not_yet_values) {
            char later[128];
            list_with_commas(k->not_yet_values, later, sizeof later);
            if (strlen(values) + strlen(later) + 12 <= 30) /* fits the --help column */
                snprintf(buf, size, "%s (%s: not yet)", values, later);
            else
                snprintf(buf, size, "%s (others: not yet)", values);
        } else {
            snprintf(buf, size, "%s", values);
        }
        break;
    }
    }
    return buf;
}

/* ---- unknown keys ---- */

static int edit_distance(const char *a, const char *b) {
    size_t n = strlen(a), m = strlen(b);
    if (n > 63 || m > 63) return 99;
    int row[64];
    for (size_t j = 0; j <= m; j++)
        row[j] = (int)j;
    for (size_t i = 1; i <= n; i++) {
        int diagonal = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= m; j++) {
            int above = row[j];
            int cost = tolower((unsigned char)a[i - 1]) == tolower((unsigned char)b[j - 1]) ? 0 : 1;
            int best = diagonal + cost;
            if (above + 1 < best) best = above + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diagonal = above;
        }
    }
    return row[m];
}

__attribute__((__noreturn__)) static void die_unknown_key(const source *src, const yaml_node_t *node,
                                                          const char *name) {
    const char *list_hint = "`tiertrain train --help` lists every key";
    /* Another tool's name for a key we have: TRL / transformers, Megatron, LLaMA-Factory. */
    for (int i = 0; i < KEY_COUNT; i++)
        if (index_in_list(key_table[i].known_as, name, true) >= 0)
            die_at(src, node, "unknown key '%s'; tiertrain calls it '%s' (%s)", name, key_table[i].name, list_hint);
    /* A namespaced name, as Megatron's overrides write them: optimizer.optimizer_cpu_offload. */
    const char *dot = strrchr(name, '.');
    if (dot && find_key(dot + 1))
        die_at(src, node, "unknown key '%s'; did you mean '%s'? (tiertrain's keys have no namespace; %s)", name,
               dot + 1, list_hint);
    size_t length = strlen(name);
    int allowed = length <= 4 ? 1 : length <= 8 ? 2 : 3;
    const key_spec *closest = NULL;
    int best = allowed + 1;
    for (int i = 0; i < KEY_COUNT; i++) {
        int d = edit_distance(name, key_table[i].name);
        if (d < best) {
            best = d;
            closest = &key_table[i];
        }
    }
    if (closest) die_at(src, node, "unknown key '%s'; did you mean '%s'? (%s)", name, closest->name, list_hint);
    die_at(src, node, "unknown key '%s' (%s)", name, list_hint);
}

/* ---- scalars ---- */

static const char *scalar_text(const yaml_node_t *node) { return (const char *)node->data.scalar.value; }

/* YAML null: ~, null, Null, NULL or nothing, unquoted. */
static bool is_null(const yaml_node_t *node) {
    if (node->type != YAML_SCALAR_NODE || node->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) return false;
    const char *v = scalar_text(node);
    return v[0] == 0 || strcmp(v, "~") == 0 || strcmp(v, "null") == 0 || strcmp(v, "Null") == 0 ||
           strcmp(v, "NULL") == 0;
}

static bool parse_bool(const char *v, bool *out) {
    if (strcmp(v, "true") == 0 || strcmp(v, "True") == 0) {
        *out = true;
        return true;
    }
    if (strcmp(v, "false") == 0 || strcmp(v, "False") == 0) {
        *out = false;
        return true;
    }
    return false;
}

/* 0: ok; 1: not an integer; 2: outside int64. Decimal digits with an optional sign only. */
static int parse_int64(const char *text, int64_t *out) {
    const char *p = text;
    if (*p == '+' || *p == '-') p++;
    if (!*p) return 1;
    for (const char *q = p; *q; q++)
        if (!isdigit((unsigned char)*q)) return 1;
    errno = 0;
    long long v = strtoll(text, NULL, 10);
    if (errno == ERANGE) return 2;
    *out = v;
    return 0;
}

/* 0: ok; 1: not a number; 2: outside double. Decimal notation: 3, -0.5, 1e-4, 1.0E+3, .5 */
static int parse_double(const char *text, double *out) {
    const char *p = text;
    if (*p == '+' || *p == '-') p++;
    int digits = 0;
    while (isdigit((unsigned char)*p))
        p++, digits++;
    if (*p == '.') {
        p++;
        while (isdigit((unsigned char)*p))
            p++, digits++;
    }
    if (digits == 0) return 1;
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '+' || *p == '-') p++;
        if (!isdigit((unsigned char)*p)) return 1;
        while (isdigit((unsigned char)*p))
            p++;
    }
    if (*p) return 1;
    errno = 0;
    double v = strtod(text, NULL);
    if (!isfinite(v)) return 2; /* underflow gives 0 or a denormal: a number all the same */
    *out = v;
    return 0;
}

/* "got 'abc'", "got a list", "got nothing (null)". */
static const char *describe_value(const yaml_node_t *node, char *buf, size_t size) {
    if (node->type == YAML_SEQUENCE_NODE) return "a list";
    if (node->type == YAML_MAPPING_NODE) return "a mapping";
    if (is_null(node)) return "nothing (null)";
    snprintf(buf, size, "'%.200s'", scalar_text(node));
    return buf;
}

__attribute__((__noreturn__)) static void die_type(const source *src, const yaml_node_t *node, const key_spec *k,
                                                   const char *expected) {
    char buf[256];
    die_at(src, node, "%s: expected %s, got %s", k->name, expected, describe_value(node, buf, sizeof buf));
}

__attribute__((__noreturn__)) static void die_not_yet(const source *src, const yaml_node_t *node, const key_spec *k,
                                                      const char *value) {
    die_at(src, node, "%s: %s is not available yet%s; use %s: %s", k->name, value, k->not_yet_reason, k->name,
           k->default_text);
}

static void check_range(const source *src, const yaml_node_t *node, const key_spec *k, double value, const char *text) {
    if (in_range(&k->range, value)) return;
    char range[96];
    die_at(src, node, "%s must be %s%s, got %s", k->name, range_text(&k->range, range, sizeof range),
           k->minus_one_unset ? " (or -1: not given)" : "", text);
}

/* The off value of a key of a later feature: null (~, null or nothing), false / False, a number
 * equal to zero (0, 0.0), or an empty list or mapping ([] or {}). Anything else, including
 * "no", "off" and "", is the feature switched on or configured, and is rejected. */
static bool is_off_value(const yaml_node_t *node) {
    if (node->type == YAML_SEQUENCE_NODE) return node->data.sequence.items.start == node->data.sequence.items.top;
    if (node->type == YAML_MAPPING_NODE) return node->data.mapping.pairs.start == node->data.mapping.pairs.top;
    if (is_null(node)) return true;
    bool b;
    if (parse_bool(scalar_text(node), &b)) return !b;
    double v;
    return parse_double(scalar_text(node), &v) == 0 && v == 0;
}

/* ---- setting values ---- */

static const char *const dataset_type_names[] = {"tokens", "completion", "alpaca", "input_output", "chat_template"};

const char *tt_dataset_type_name(tt_dataset_type type) {
    TT_CHECK(type >= 0 && type <= TT_DATASET_CHAT_TEMPLATE, "dataset type %d", (int)type);
    return dataset_type_names[type];
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

static bool is_json_path(const char *path) {
    return ends_with(path, ".json") || ends_with(path, ".jsonl") || ends_with(path, ".JSON") ||
           ends_with(path, ".JSONL");
}

static void free_strings(char **list, int count) {
    for (int i = 0; i < count; i++) free(list[i]);
    free(list);
}

static void free_dataset_spec(tt_dataset_spec *spec) {
    free(spec->field);
    free(spec->field_instruction);
    free(spec->field_input);
    free(spec->field_output);
    free(spec->split);
    free(spec->chat_template);
    free(spec->chat_template_jinja);
    free(spec->field_messages);
    free(spec->message_field_training);
    free(spec->message_field_training_detail);
    free_strings(spec->property_names, spec->property_mapping_count);
    free_strings(spec->property_fields, spec->property_mapping_count);
    free_strings(spec->role_alias_from, spec->role_alias_count);
    free_strings(spec->role_alias_to, spec->role_alias_count);
    free_strings(spec->roles_to_train, spec->roles_to_train_count);
    memset(spec, 0, sizeof(*spec));
}

static void push_string(char ***list, int *count, const char *s) {
    *list = tt_xrealloc(*list, sizeof(char *) * (size_t)(*count + 1), "a list of names");
    (*list)[(*count)++] = tt_xstrdup(s);
}

/* The keys a datasets entry takes besides path and type, and the types they belong to (a bit per
 * tt_dataset_type); a key given for another type is an error, never ignored. */
typedef struct entry_key {
    const char *name;
    unsigned types;
    size_t offset; /* of a char * in tt_dataset_spec; 0 for keys with their own parser */
} entry_key;
#define TYPE_BIT(t) (1u << (t))
#define JSON_TYPES (TYPE_BIT(TT_DATASET_COMPLETION) | TYPE_BIT(TT_DATASET_ALPACA) | TYPE_BIT(TT_DATASET_INPUT_OUTPUT) | TYPE_BIT(TT_DATASET_CHAT_TEMPLATE))
#define CHAT TYPE_BIT(TT_DATASET_CHAT_TEMPLATE)
static const entry_key entry_keys[] = {
    {"field", TYPE_BIT(TT_DATASET_COMPLETION), offsetof(tt_dataset_spec, field)},
    {"field_instruction", TYPE_BIT(TT_DATASET_ALPACA), offsetof(tt_dataset_spec, field_instruction)},
    {"field_input", TYPE_BIT(TT_DATASET_ALPACA), offsetof(tt_dataset_spec, field_input)},
    {"field_output", TYPE_BIT(TT_DATASET_ALPACA), offsetof(tt_dataset_spec, field_output)},
    {"split", JSON_TYPES, offsetof(tt_dataset_spec, split)},
    {"ds_type", JSON_TYPES, 0},
    {"chat_template", CHAT, offsetof(tt_dataset_spec, chat_template)},
    {"chat_template_jinja", CHAT, offsetof(tt_dataset_spec, chat_template_jinja)},
    {"field_messages", CHAT, offsetof(tt_dataset_spec, field_messages)},
    {"message_property_mappings", CHAT, 0},
    {"message_field_role", CHAT, 0},
    {"message_field_content", CHAT, 0},
    {"roles_to_train", CHAT, 0},
    {"roles", CHAT, 0},
    {"train_on_eos", CHAT, 0},
    {"train_on_eot", CHAT, 0},
    {"drop_system_message", CHAT, 0},
    {"message_field_training", CHAT, offsetof(tt_dataset_spec, message_field_training)},
    {"message_field_training_detail", CHAT, offsetof(tt_dataset_spec, message_field_training_detail)},
    {"split_thinking", CHAT, 0},
};

static char *types_of(unsigned types, char *buf, size_t size) {
    buf[0] = 0;
    for (int t = 0; t <= TT_DATASET_CHAT_TEMPLATE; t++)
        if (types & TYPE_BIT(t))
            snprintf(buf + strlen(buf), size - strlen(buf), "%s%s", buf[0] ? ", " : "", dataset_type_names[t]);
    return buf;
}

/* A scalar that names something (a role, a field): not null, not empty. */
static const char *name_scalar(const source *src, const yaml_node_t *node, int index, const char *key,
                               const char *example) {
    char buf[256];
    if (node->type != YAML_SCALAR_NODE || is_null(node) || !*scalar_text(node))
        die_at(src, node, "datasets entry %d: %s: expected a name such as %s, got %s", index + 1, key, example,
               describe_value(node, buf, sizeof buf));
    return scalar_text(node);
}

/* message_property_mappings (and the legacy message_field_role / message_field_content): each
 * property the template reads, from the message field named; a property given twice with two
 * fields is an error, as axolotl's. */
static void set_property_mapping(const source *src, const yaml_node_t *at, int index, tt_dataset_spec *spec,
                                 const char *property, const char *field) {
    for (int i = 0; i < spec->property_mapping_count; i++)
        if (strcmp(spec->property_names[i], property) == 0) {
            if (strcmp(spec->property_fields[i], field) != 0)
                die_at(src, at, "datasets entry %d: the message property '%s' is mapped to '%s' and to '%s' "
                       "(message_property_mappings and message_field_%s); keep one", index + 1, property,
                       spec->property_fields[i], field, property);
            return;
        }
    int n = spec->property_mapping_count;
    push_string(&spec->property_names, &n, property);
    push_string(&spec->property_fields, &spec->property_mapping_count, field);
}

static void parse_chat_key(const source *src, yaml_document_t *doc, yaml_node_t *key, yaml_node_t *value, int index,
                           tt_dataset_spec *spec) {
    const char *name = scalar_text(key);
    char buf[256];
    if (strcmp(name, "message_property_mappings") == 0) {
        if (is_null(value)) return;
        if (value->type != YAML_MAPPING_NODE)
            die_at(src, value, "datasets entry %d: message_property_mappings: expected a mapping such as {role: "
                   "from, content: value}, got %s", index + 1, describe_value(value, buf, sizeof buf));
        for (yaml_node_pair_t *p = value->data.mapping.pairs.start; p < value->data.mapping.pairs.top; p++) {
            yaml_node_t *k2 = yaml_document_get_node(doc, p->key), *v2 = yaml_document_get_node(doc, p->value);
            const char *property = name_scalar(src, k2, index, "message_property_mappings", "content");
            const char *field = name_scalar(src, v2, index, "message_property_mappings", "value");
            set_property_mapping(src, v2, index, spec, property, field);
        }
    } else if (strcmp(name, "message_field_role") == 0 || strcmp(name, "message_field_content") == 0) {
        set_property_mapping(src, value, index, spec, name + strlen("message_field_"),
                             name_scalar(src, value, index, name, "from"));
    } else if (strcmp(name, "roles_to_train") == 0) {
        if (spec->roles_to_train) die_at(src, key, "datasets entry %d: key 'roles_to_train' appears twice", index + 1);
        if (value->type != YAML_SEQUENCE_NODE)
            die_at(src, value, "datasets entry %d: roles_to_train: expected a list of roles such as [assistant], "
                   "got %s", index + 1, describe_value(value, buf, sizeof buf));
        spec->roles_to_train = tt_xmalloc(sizeof(char *), "roles_to_train"); /* given, even if empty */
        for (yaml_node_item_t *it = value->data.sequence.items.start; it < value->data.sequence.items.top; it++)
            push_string(&spec->roles_to_train, &spec->roles_to_train_count,
                        name_scalar(src, yaml_document_get_node(doc, *it), index, "roles_to_train", "assistant"));
    } else if (strcmp(name, "roles") == 0) {
        if (is_null(value)) return;
        if (value->type != YAML_MAPPING_NODE)
            die_at(src, value, "datasets entry %d: roles: expected a mapping from a role to the names the data uses "
                   "for it, such as {user: [human], assistant: [gpt]}, got %s",
                   index + 1, describe_value(value, buf, sizeof buf));
        spec->roles_given = true;
        for (yaml_node_pair_t *p = value->data.mapping.pairs.start; p < value->data.mapping.pairs.top; p++) {
            yaml_node_t *k2 = yaml_document_get_node(doc, p->key), *v2 = yaml_document_get_node(doc, p->value);
            const char *role = name_scalar(src, k2, index, "roles", "assistant");
            if (v2->type != YAML_SEQUENCE_NODE)
                die_at(src, v2, "datasets entry %d: roles: %s: expected a list of names such as [gpt], got %s",
                       index + 1, role, describe_value(v2, buf, sizeof buf));
            for (yaml_node_item_t *it = v2->data.sequence.items.start; it < v2->data.sequence.items.top; it++) {
                const char *from = name_scalar(src, yaml_document_get_node(doc, *it), index, "roles", "gpt");
                int n = spec->role_alias_count;
                push_string(&spec->role_alias_from, &n, from);
                push_string(&spec->role_alias_to, &spec->role_alias_count, role);
            }
        }
    } else if (strcmp(name, "train_on_eos") == 0 || strcmp(name, "train_on_eot") == 0) {
        int v = value->type != YAML_SCALAR_NODE ? -1
                : is_null(value)               ? -1
                                               : index_in_list("turn|all|last|none", scalar_text(value), false);
        if (value->type != YAML_SCALAR_NODE || (v < 0 && !is_null(value)))
            die_at(src, value, "datasets entry %d: %s: expected turn, all, last or none, got %s", index + 1, name,
                   describe_value(value, buf, sizeof buf));
        *(strcmp(name, "train_on_eos") == 0 ? &spec->train_on_eos : &spec->train_on_eot) = v;
    } else if (strcmp(name, "drop_system_message") == 0 || strcmp(name, "split_thinking") == 0) {
        bool b = false;
        if (value->type != YAML_SCALAR_NODE || (!is_null(value) && !parse_bool(scalar_text(value), &b)))
            die_at(src, value, "datasets entry %d: %s: expected true or false, got %s", index + 1, name,
                   describe_value(value, buf, sizeof buf));
        *(strcmp(name, "split_thinking") == 0 ? &spec->split_thinking : &spec->drop_system_message) = b;
    }
}

/* One datasets entry: a path (a token file), or a mapping {path, type, per-type keys}. */
static void parse_dataset_entry(const source *src, yaml_document_t *doc, yaml_node_t *entry, int index, char **path_out,
                                tt_dataset_spec *spec) {
    memset(spec, 0, sizeof(*spec));
    spec->train_on_eos = -1;
    spec->train_on_eot = -1;
    if (entry->type == YAML_SCALAR_NODE) {
        if (is_null(entry) || !*scalar_text(entry))
            die_at(src, entry, "datasets entry %d is empty; write a token file's path, or {path: file.tok}", index + 1);
        if (is_json_path(scalar_text(entry)))
            die_at(src, entry,
                   "datasets entry %d: %s is a JSON file; say how to read it: {path: %s, type: completion | alpaca | "
                   "input_output | chat_template}",
                   index + 1, scalar_text(entry), scalar_text(entry));
        *path_out = tt_xstrdup(scalar_text(entry));
        return;
    }
    if (entry->type != YAML_MAPPING_NODE)
        die_at(src, entry, "datasets entry %d is a list; entries are paths or {path: file.jsonl, type: alpaca}",
               index + 1);
    const char *path = NULL;
    yaml_node_t *type_node = NULL;
    /* first pass: path and type, so the other keys can be checked against the type */
    for (yaml_node_pair_t *pair = entry->data.mapping.pairs.start; pair < entry->data.mapping.pairs.top; pair++) {
        yaml_node_t *key = yaml_document_get_node(doc, pair->key);
        yaml_node_t *value = yaml_document_get_node(doc, pair->value);
        char buf[256];
        if (key->type != YAML_SCALAR_NODE)
            die_at(src, key, "datasets entry %d: keys are names (path, type, field, ...), not %s", index + 1,
                   describe_value(key, buf, sizeof buf));
        const char *name = scalar_text(key);
        bool is_path = strcmp(name, "path") == 0, is_type = strcmp(name, "type") == 0;
        if (!is_path && !is_type) continue;
        if ((is_path && path) || (is_type && type_node))
            die_at(src, key, "datasets entry %d: key '%s' appears twice", index + 1, name);
        if (value->type != YAML_SCALAR_NODE || is_null(value) || !*scalar_text(value))
            die_at(src, value, "datasets entry %d: %s: expected %s, got %s", index + 1, name,
                   is_path ? "a file's path" : "completion, alpaca, input_output, chat_template or tokens",
                   describe_value(value, buf, sizeof buf));
        if (is_path) path = scalar_text(value);
        else type_node = value;
    }
    if (!path) die_at(src, entry, "datasets entry %d has no path; write {path: data.jsonl, type: alpaca}", index + 1);
    if (type_node) {
        int t = index_in_list("tokens|completion|alpaca|input_output|chat_template", scalar_text(type_node), false);
        if (t < 0)
            die_at(src, type_node,
                   "datasets entry %d: type '%s' is not supported; tiertrain reads completion, alpaca, input_output "
                   "and chat_template datasets (JSON or JSONL) and token files (type: tokens); other axolotl types "
                   "are not available yet",
                   index + 1, scalar_text(type_node));
        spec->type = (tt_dataset_type)t;
    } else if (is_json_path(path)) {
        die_at(src, entry, "datasets entry %d: %s is a JSON file but the entry has no type; add type: completion, "
               "alpaca, input_output or chat_template", index + 1, path);
    } else {
        spec->type = TT_DATASET_TOKENS;
    }
    for (yaml_node_pair_t *pair = entry->data.mapping.pairs.start; pair < entry->data.mapping.pairs.top; pair++) {
        yaml_node_t *key = yaml_document_get_node(doc, pair->key);
        yaml_node_t *value = yaml_document_get_node(doc, pair->value);
        const char *name = scalar_text(key);
        if (strcmp(name, "path") == 0 || strcmp(name, "type") == 0) continue;
        const entry_key *ek = NULL;
        for (size_t i = 0; i < sizeof entry_keys / sizeof entry_keys[0]; i++)
            if (strcmp(entry_keys[i].name, name) == 0) ek = &entry_keys[i];
        char buf[256], types[128];
        if (!ek)
            die_at(src, key,
                   "datasets entry %d: unknown key '%s'; an entry takes path, type, field (completion), "
                   "field_instruction / field_input / field_output (alpaca), split, ds_type, and chat_template, "
                   "chat_template_jinja, field_messages, message_property_mappings, roles, roles_to_train, "
                   "train_on_eos, train_on_eot, drop_system_message, message_field_training, "
                   "message_field_training_detail, split_thinking (chat_template)",
                   index + 1, name);
        if (!(ek->types & TYPE_BIT(spec->type)))
            die_at(src, key, "datasets entry %d: %s applies to type %s, but this entry is type %s; remove it", index + 1,
                   name, types_of(ek->types, types, sizeof types), dataset_type_names[spec->type]);
        if (!ek->offset && strcmp(name, "ds_type") != 0) {
            parse_chat_key(src, doc, key, value, index, spec);
            continue;
        }
        if (value->type != YAML_SCALAR_NODE || is_null(value) || !*scalar_text(value))
            die_at(src, value, "datasets entry %d: %s: expected a name, got %s", index + 1, name,
                   describe_value(value, buf, sizeof buf));
        const char *text = scalar_text(value);
        if (strcmp(name, "ds_type") == 0) {
            if (strcmp(text, "json") != 0)
                die_at(src, value, "datasets entry %d: ds_type '%s' is not supported; local files are read as "
                       "json (JSON or JSONL, by the file's extension)", index + 1, text);
            continue;
        }
        if (strcmp(name, "split") == 0 && strcmp(text, "train") != 0)
            die_at(src, value, "datasets entry %d: split '%s': a local JSON/JSONL file has one split, train",
                   index + 1, text);
        char **field = (char **)((char *)spec + ek->offset);
        if (*field) die_at(src, key, "datasets entry %d: key '%s' appears twice", index + 1, name);
        *field = tt_xstrdup(text);
    }
    /* axolotl's defaults */
    if (spec->type == TT_DATASET_COMPLETION && !spec->field) spec->field = tt_xstrdup("text");
    if (spec->type == TT_DATASET_ALPACA) {
        if (!spec->field_instruction) spec->field_instruction = tt_xstrdup("instruction");
        if (!spec->field_input) spec->field_input = tt_xstrdup("input");
        if (!spec->field_output) spec->field_output = tt_xstrdup("output");
    }
    if (spec->type == TT_DATASET_CHAT_TEMPLATE) {
        if (!spec->field_messages) spec->field_messages = tt_xstrdup("messages");
        /* role and content are always mapped (axolotl's handle_legacy_message_fields_logic) */
        for (int p = 0; p < 2; p++) {
            const char *property = p ? "content" : "role";
            bool mapped = false;
            for (int i = 0; i < spec->property_mapping_count; i++) mapped |= strcmp(spec->property_names[i], property) == 0;
            if (!mapped) set_property_mapping(src, entry, index, spec, property, property);
        }
        if (!spec->roles_to_train) push_string(&spec->roles_to_train, &spec->roles_to_train_count, "assistant");
        if (spec->chat_template_jinja && !spec->chat_template) spec->chat_template = tt_xstrdup("jinja");
        if (spec->message_field_training && spec->message_field_training_detail &&
            strcmp(spec->message_field_training, spec->message_field_training_detail) == 0)
            die_at(src, entry, "datasets entry %d: message_field_training and message_field_training_detail both name "
                   "the field '%s', but one is a message's true/false and the other its list of spans; name two fields",
                   index + 1, spec->message_field_training);
    }
    *path_out = tt_xstrdup(path);
}

static void clear_datasets(tt_run_config *c) {
    for (int i = 0; i < c->dataset_count; i++) {
        free(c->datasets[i]);
        c->datasets[i] = NULL;
        free_dataset_spec(&c->dataset_specs[i]);
    }
    c->dataset_count = 0;
}

static void set_datasets(tt_run_config *c, const source *src, yaml_document_t *doc, yaml_node_t *node) {
    clear_datasets(c);
    if (is_null(node)) return;
    if (node->type == YAML_SCALAR_NODE) { /* one path: datasets=corpus.tok */
        parse_dataset_entry(src, doc, node, 0, &c->datasets[0], &c->dataset_specs[0]);
        c->dataset_count = 1;
        return;
    }
    if (node->type != YAML_SEQUENCE_NODE)
        die_at(src, node, "datasets: expected a list of {path: ..., type: ...} entries or of paths, got a mapping");
    int index = 0;
    for (yaml_node_item_t *item = node->data.sequence.items.start; item < node->data.sequence.items.top;
         item++, index++) {
        yaml_node_t *entry = yaml_document_get_node(doc, *item);
        if (index == TT_MAX_DATASETS)
            die_at(src, entry, "datasets: at most %d entries; concatenate some of the files", TT_MAX_DATASETS);
        parse_dataset_entry(src, doc, entry, index, &c->datasets[index], &c->dataset_specs[index]);
        c->dataset_count = index + 1;
    }
}

/* special_tokens: {bos_token, eos_token, pad_token} (axolotl's key; unk_token etc. have no use here). */
static void set_special_tokens(tt_run_config *c, const key_spec *k, const source *src, yaml_document_t *doc,
                               yaml_node_t *node) {
    char **slots[3] = {&c->special_bos, &c->special_eos, &c->special_pad};
    for (int i = 0; i < 3; i++) {
        free(*slots[i]);
        *slots[i] = NULL;
    }
    if (is_off_value(node)) return;
    if (node->type != YAML_MAPPING_NODE) die_type(src, node, k, "a mapping such as {eos_token: \"<|im_end|>\"}, or ~");
    for (yaml_node_pair_t *pair = node->data.mapping.pairs.start; pair < node->data.mapping.pairs.top; pair++) {
        yaml_node_t *key = yaml_document_get_node(doc, pair->key), *value = yaml_document_get_node(doc, pair->value);
        const char *name = key->type == YAML_SCALAR_NODE ? scalar_text(key) : "";
        int slot = index_in_list("bos_token|eos_token|pad_token", name, false);
        if (slot < 0)
            die_at(src, key, "special_tokens: '%s' is not supported; it takes bos_token, eos_token and pad_token", name);
        if (value->type != YAML_SCALAR_NODE || is_null(value) || !*scalar_text(value))
            die_at(src, value, "special_tokens: %s: expected a token such as \"<|im_end|>\"", name);
        free(*slots[slot]);
        *slots[slot] = tt_xstrdup(scalar_text(value));
    }
}

/* selective_checkpointing: off (~, false, {}) or {save: [attention], offload: false}. */
static void set_selective(tt_run_config *c, const key_spec *k, const source *src, yaml_document_t *doc,
                          yaml_node_t *node) {
    c->selective_checkpointing = false;
    c->selective_offload = false;
    if (is_off_value(node)) return;
    if (node->type != YAML_MAPPING_NODE) die_type(src, node, k, "a mapping {save: [attention], offload: false} or ~");
    bool saves_attention = false;
    for (yaml_node_pair_t *pair = node->data.mapping.pairs.start; pair < node->data.mapping.pairs.top; pair++) {
        yaml_node_t *key = yaml_document_get_node(doc, pair->key), *value = yaml_document_get_node(doc, pair->value);
        const char *name = key->type == YAML_SCALAR_NODE ? scalar_text(key) : "";
        if (strcmp(name, "save") == 0) {
            if (value->type != YAML_SEQUENCE_NODE)
                die_at(src, value, "selective_checkpointing: save: expected a list such as [attention]");
            for (yaml_node_item_t *item = value->data.sequence.items.start; item < value->data.sequence.items.top;
                 item++) {
                yaml_node_t *entry = yaml_document_get_node(doc, *item);
                if (entry->type != YAML_SCALAR_NODE || strcmp(scalar_text(entry), "attention") != 0) {
                    char buf[256];
                    die_at(src, entry,
                           "selective_checkpointing: save: %s is not something tiertrain can keep; the one choice is "
                           "attention (the attention output and its log-sum-exp)",
                           describe_value(entry, buf, sizeof buf));
                }
                saves_attention = true;
            }
        } else if (strcmp(name, "offload") == 0) {
            bool offload;
            if (value->type != YAML_SCALAR_NODE || !parse_bool(scalar_text(value), &offload))
                die_at(src, value, "selective_checkpointing: offload: expected true or false");
            c->selective_offload = offload;
        } else {
            die_at(src, key, "selective_checkpointing: unknown key '%s'; it takes save (a list: [attention]) and "
                   "offload (true or false)", name);
        }
    }
    if (!saves_attention)
        die_at(src, node, "selective_checkpointing: save lists nothing; use save: [attention], or turn it off with ~");
    c->selective_checkpointing = true;
}

/* gradient_checkpointing_kwargs: transformers' keyword arguments of its checkpoint function. Only
 * use_reentrant is meaningful there and it picks between two PyTorch implementations of the same
 * arithmetic; anything else would change what checkpointing does and is refused. */
static void set_checkpointing_kwargs(tt_run_config *c, const key_spec *k, const source *src, yaml_document_t *doc,
                                     yaml_node_t *node) {
    c->use_reentrant = false;
    if (is_off_value(node)) return;
    if (node->type != YAML_MAPPING_NODE) die_type(src, node, k, "a mapping such as {use_reentrant: false}, or ~");
    for (yaml_node_pair_t *pair = node->data.mapping.pairs.start; pair < node->data.mapping.pairs.top; pair++) {
        yaml_node_t *key = yaml_document_get_node(doc, pair->key), *value = yaml_document_get_node(doc, pair->value);
        const char *name = key->type == YAML_SCALAR_NODE ? scalar_text(key) : "";
        if (strcmp(name, "use_reentrant") != 0)
            die_at(src, key,
                   "gradient_checkpointing_kwargs: '%s' is not supported; the one key is use_reentrant (for which "
                   "layers are checkpointed see recompute_method and selective_checkpointing)",
                   name);
        if (value->type != YAML_SCALAR_NODE || !parse_bool(scalar_text(value), &c->use_reentrant))
            die_at(src, value, "gradient_checkpointing_kwargs: use_reentrant: expected true or false");
    }
}

/* adapter: lora, or ~ (false) for full fine-tuning. */
static void set_adapter(tt_run_config *c, const source *src, yaml_node_t *node) {
    char buf[256];
    bool b;
    const char *text = node->type == YAML_SCALAR_NODE ? scalar_text(node) : "";
    if (is_null(node) || (parse_bool(text, &b) && !b)) {
        c->adapter = TT_ADAPTER_NONE;
        return;
    }
    if (strcmp(text, "lora") == 0) {
        c->adapter = TT_ADAPTER_LORA;
        return;
    }
    if (strcmp(text, "qlora") == 0) {
        c->adapter = TT_ADAPTER_QLORA;
        return;
    }
    die_at(src, node, "adapter must be lora or qlora (or ~ for full fine-tuning); got %s",
           describe_value(node, buf, sizeof buf));
}

/* lora_target_modules: [q_proj, v_proj, ...] (PEFT's names) or the short names [q, v, ...]; one name alone is a
 * list of one. */
static void set_lora_targets(tt_run_config *c, const source *src, yaml_document_t *doc, yaml_node_t *node) {
    c->lora_target_modules = 0;
    if (is_null(node)) return;
    if (node->type == YAML_MAPPING_NODE)
        die_at(src, node, "lora_target_modules: expected a list of module names such as [q_proj, v_proj], got a "
                          "mapping");
    yaml_node_item_t one = 0, *first = &one, *end = &one + 1;
    if (node->type == YAML_SEQUENCE_NODE) {
        first = node->data.sequence.items.start;
        end = node->data.sequence.items.top;
    }
    for (yaml_node_item_t *item = first; item < end; item++) {
        yaml_node_t *entry = node->type == YAML_SEQUENCE_NODE ? yaml_document_get_node(doc, *item) : node;
        char buf[256];
        int module = -1;
        for (int m = 0; entry->type == YAML_SCALAR_NODE && m < TT_LORA_MODULE_COUNT && module < 0; m++)
            if (strcmp(scalar_text(entry), lora_module_names[m]) == 0 ||
                strcmp(scalar_text(entry), lora_module_short_names[m]) == 0)
                module = m;
        if (module < 0)
            die_at(src, entry,
                   "lora_target_modules: %s is not a linear layer tiertrain can put an adapter on; choose from "
                   "q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj (or q, k, v, o, gate, up, down), or "
                   "set lora_target_linear: true for all of them",
                   describe_value(entry, buf, sizeof buf));
        c->lora_target_modules |= 1u << module;
    }
}

static int compare_int64(const void *a, const void *b) {
    const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* frozen_layers: [0, 1, ...] (or one index); kept ascending, each index once. Indices past the model's
 * layers are found when the model is read. */
static void set_layer_list(tt_run_config *c, const key_spec *k, const source *src, yaml_document_t *doc,
                           yaml_node_t *node) {
    free(c->frozen_layers);
    c->frozen_layers = NULL;
    c->frozen_layer_count = 0;
    if (is_null(node)) return;
    if (node->type == YAML_MAPPING_NODE) die_type(src, node, k, "a list of layer indices such as [0, 1]");
    size_t count = node->type == YAML_SEQUENCE_NODE
                       ? (size_t)(node->data.sequence.items.top - node->data.sequence.items.start)
                       : 1;
    if (count == 0) return;
    int64_t *layers = tt_xcalloc(count, sizeof(int64_t), "frozen_layers");
    c->frozen_layers = layers;
    for (size_t i = 0; i < count; i++) {
        yaml_node_t *entry =
            node->type == YAML_SEQUENCE_NODE ? yaml_document_get_node(doc, node->data.sequence.items.start[i]) : node;
        int64_t v = -1;
        if (entry->type != YAML_SCALAR_NODE || parse_int64(scalar_text(entry), &v) != 0 || v < 0) {
            char buf[256];
            die_at(src, entry, "%s: expected layer indices (integers from 0), got %s", k->name,
                   describe_value(entry, buf, sizeof buf));
        }
        for (size_t j = 0; j < i; j++)
            if (layers[j] == v) die_at(src, entry, "%s lists layer %lld twice; list each layer once", k->name, (long long)v);
        layers[i] = v;
        c->frozen_layer_count++;
    }
    qsort(layers, count, sizeof(int64_t), compare_int64);
}

/* ---- chat_template_kwargs: YAML values kept as JSON text (the chat template reads JSON) ---- */

typedef struct text_buffer {
    char *text;
    size_t length, capacity;
} text_buffer;

static void text_append(text_buffer *b, const char *s, size_t n) {
    if (b->length + n + 1 > b->capacity) {
        size_t capacity = b->capacity ? b->capacity : 64;
        while (b->length + n + 1 > capacity) capacity *= 2;
        b->text = tt_xrealloc(b->text, capacity, "chat_template_kwargs");
        b->capacity = capacity;
    }
    memcpy(b->text + b->length, s, n);
    b->length += n;
    b->text[b->length] = 0;
}

static void text_append_str(text_buffer *b, const char *s) { text_append(b, s, strlen(s)); }

/* A JSON string literal: quotes, backslashes and control characters escaped (the text is libyaml's, so UTF-8). */
static void text_append_json_string(text_buffer *b, const char *s) {
    text_append_str(b, "\"");
    for (const char *p = s; *p; p++) {
        const unsigned char ch = (unsigned char)*p;
        if (ch == '"' || ch == '\\') {
            char escaped[2] = {'\\', (char)ch};
            text_append(b, escaped, 2);
        } else if (ch < 0x20) {
            char escaped[8];
            snprintf(escaped, sizeof escaped, "\\u%04x", ch);
            text_append_str(b, escaped);
        } else {
            text_append(b, p, 1);
        }
    }
    text_append_str(b, "\"");
}

/* One YAML value as JSON: plain scalars by tiertrain's rules for values (null, true/false, integers, decimal
 * numbers; the rest text), quoted scalars as text, lists and mappings as arrays and objects. YAML 1.1's other
 * booleans (yes, no, on, off), which axolotl's PyYAML reads as booleans and tiertrain as text, are refused rather
 * than read either way silently. */
static void yaml_value_to_json(const source *src, yaml_document_t *doc, yaml_node_t *node, const char *path,
                               text_buffer *out) {
    char buf[256];
    if (node->type == YAML_SEQUENCE_NODE) {
        text_append_str(out, "[");
        int index = 0;
        yaml_node_item_t *it = node->data.sequence.items.start;
        for (; it < node->data.sequence.items.top; it++, index++) {
            char item_path[512];
            snprintf(item_path, sizeof item_path, "%s[%d]", path, index);
            text_append_str(out, index ? ", " : "");
            yaml_value_to_json(src, doc, yaml_document_get_node(doc, *it), item_path, out);
        }
        text_append_str(out, "]");
        return;
    }
    if (node->type == YAML_MAPPING_NODE) {
        text_append_str(out, "{");
        for (yaml_node_pair_t *p = node->data.mapping.pairs.start; p < node->data.mapping.pairs.top; p++) {
            yaml_node_t *key = yaml_document_get_node(doc, p->key), *value = yaml_document_get_node(doc, p->value);
            if (key->type != YAML_SCALAR_NODE || is_null(key) || !*scalar_text(key))
                die_at(src, key, "%s: the names of a mapping are text such as enable_thinking, not %s", path,
                       describe_value(key, buf, sizeof buf));
            for (yaml_node_pair_t *q = node->data.mapping.pairs.start; q < p; q++)
                if (strcmp(scalar_text(yaml_document_get_node(doc, q->key)), scalar_text(key)) == 0)
                    die_at(src, key, "%s: '%s' appears twice; keep one", path, scalar_text(key));
            char item_path[512];
            snprintf(item_path, sizeof item_path, "%s.%s", path, scalar_text(key));
            text_append_str(out, p > node->data.mapping.pairs.start ? ", " : "");
            text_append_json_string(out, scalar_text(key));
            text_append_str(out, ": ");
            yaml_value_to_json(src, doc, value, item_path, out);
        }
        text_append_str(out, "}");
        return;
    }
    const char *text = scalar_text(node);
    if (node->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) {
        text_append_json_string(out, text);
        return;
    }
    if (is_null(node)) {
        text_append_str(out, "null");
        return;
    }
    if (index_in_list("true|True|TRUE|false|False|FALSE", text, false) >= 0) {
        text_append_str(out, text[0] == 't' || text[0] == 'T' ? "true" : "false");
        return;
    }
    if (index_in_list("yes|Yes|YES|no|No|NO|on|On|ON|off|Off|OFF", text, false) >= 0)
        die_at(src, node, "%s: '%s' is a boolean to YAML 1.1 (axolotl) and text to tiertrain; write true or false, or "
               "quote it (\"%s\") for the text", path, text, text);
    int64_t integer;
    int status = parse_int64(text, &integer);
    if (status == 2) die_at(src, node, "%s: %s is outside the 64-bit integer range", path, text);
    if (status == 0) {
        snprintf(buf, sizeof buf, "%lld", (long long)integer);
        text_append_str(out, buf);
        return;
    }
    double number;
    status = parse_double(text, &number);
    if (status == 2) die_at(src, node, "%s: %s is outside the range of a double", path, text);
    if (status == 0) { /* written so that it reads back as a float, not an integer */
        snprintf(buf, sizeof buf, "%.17g", number);
        if (!strpbrk(buf, ".e")) strcat(buf, ".0");
        text_append_str(out, buf);
        return;
    }
    if (index_in_list(".inf|.Inf|.INF|-.inf|-.Inf|-.INF|+.inf|.nan|.NaN|.NAN", text, false) >= 0)
        die_at(src, node, "%s: %s is not a finite number, which a chat template cannot be given; quote it (\"%s\") for "
               "the text", path, text, text);
    text_append_json_string(out, text);
}

/* chat_template_kwargs: {name: value, ...}; ~ or {}: none. The names transformers sets itself are refused. */
static void set_template_kwargs(tt_run_config *c, const key_spec *k, const source *src, yaml_document_t *doc,
                                yaml_node_t *node) {
    char **field = (char **)((char *)c + k->offset);
    free(*field);
    *field = NULL;
    if (is_null(node) || (node->type == YAML_MAPPING_NODE && is_off_value(node))) return; /* ~ or {} */
    if (node->type != YAML_MAPPING_NODE)
        die_type(src, node, k, "a mapping of template variables such as {enable_thinking: false}, or ~");
    for (yaml_node_pair_t *p = node->data.mapping.pairs.start; p < node->data.mapping.pairs.top; p++) {
        yaml_node_t *key = yaml_document_get_node(doc, p->key);
        const char *name = key->type == YAML_SCALAR_NODE ? scalar_text(key) : "";
        if (index_in_list("messages|tools|documents|add_generation_prompt|chat_template", name, false) >= 0)
            die_at(src, key, "%s: '%s' is set for every render by tiertrain (as apply_chat_template sets it: the "
                   "record's messages and tools, no documents, add_generation_prompt false); remove it", k->name, name);
    }
    text_buffer out = {0};
    yaml_value_to_json(src, doc, node, k->name, &out);
    *field = out.text;
}

/* eot_tokens-style lists of strings: [a, b]; ~: not given (NULL); [] given and empty. */
static void set_string_list(tt_run_config *c, const key_spec *k, const source *src, yaml_document_t *doc,
                            yaml_node_t *node) {
    char ***list = (char ***)((char *)c + k->offset);
    int *count = (int *)((char *)c + k->count_offset);
    free_strings(*list, *count);
    *list = NULL;
    *count = 0;
    if (is_null(node)) return;
    if (node->type != YAML_SEQUENCE_NODE)
        die_type(src, node, k, "a list of tokens such as [\"<|im_end|>\"], or ~");
    *list = tt_xmalloc(sizeof(char *), k->name); /* given, even if empty */
    for (yaml_node_item_t *it = node->data.sequence.items.start; it < node->data.sequence.items.top; it++) {
        yaml_node_t *item = yaml_document_get_node(doc, *it);
        char buf[256];
        if (item->type != YAML_SCALAR_NODE || is_null(item) || !*scalar_text(item))
            die_at(src, item, "%s: expected tokens such as \"<|im_end|>\", got %s", k->name,
                   describe_value(item, buf, sizeof buf));
        for (int i = 0; i < *count; i++)
            if (strcmp((*list)[i], scalar_text(item)) == 0)
                die_at(src, item, "%s lists '%s' twice; list each token once", k->name, scalar_text(item));
        push_string(list, count, scalar_text(item));
    }
}

static void apply_default(tt_run_config *c, const key_spec *k);

/* Applies one value (a node of doc) to the config. */
static void set_key(tt_run_config *c, const key_spec *k, const source *src, yaml_document_t *doc, yaml_node_t *node) {
    void *field = (char *)c + k->offset;
    char buf[256];
    if (k->null_is_default && is_null(node)) {
        apply_default(c, k);
        return;
    }
    /* A LoRA setting without adapter: lora is a mistake validate names (off values are what axolotl's
     * full fine-tuning templates carry, and are fine). */
    if (!src->built_in && strncmp(k->name, "lora_", 5) == 0 && k->availability == AVAILABLE && !is_off_value(node) &&
        !c->lora_key_given)
        c->lora_key_given = k->name;
    if (!src->built_in && strncmp(k->name, "bnb_4bit_", 9) == 0 && !is_null(node) && !c->bnb_key_given)
        c->bnb_key_given = k->name;
    if (k->availability == NOT_YET) {
        if (!is_off_value(node))
            die_at(src, node,
                   "%s is not available yet in this version of tiertrain; remove it from the config (got %s; it is "
                   "for %s; only an off value, ~, false, 0, [] or {}, is accepted today)",
                   k->name, describe_value(node, buf, sizeof buf), k->help);
        return;
    }
    switch (k->type) {
    case KEY_DATASETS: set_datasets(c, src, doc, node); return;
    case KEY_SPECIAL_TOKENS: set_special_tokens(c, k, src, doc, node); return;
    case KEY_SELECTIVE: set_selective(c, k, src, doc, node); return;
    case KEY_CHECKPOINTING_KWARGS: set_checkpointing_kwargs(c, k, src, doc, node); return;
    case KEY_ADAPTER: set_adapter(c, src, node); return;
    case KEY_LORA_TARGETS: set_lora_targets(c, src, doc, node); return;
    case KEY_LAYER_LIST: set_layer_list(c, k, src, doc, node); return;
    case KEY_TEMPLATE_KWARGS: set_template_kwargs(c, k, src, doc, node); return;
    case KEY_STRING_LIST: set_string_list(c, k, src, doc, node); return;
    case KEY_STRING: {
        char **s = field;
        if (is_null(node)) {
            free(*s);
            *s = NULL;
            return;
        }
        if (node->type != YAML_SCALAR_NODE || !*scalar_text(node)) die_type(src, node, k, "a string (or ~: unset)");
        free(*s);
        *s = tt_xstrdup(scalar_text(node));
        return;
    }
    case KEY_BOOL: {
        bool b;
        if (node->type != YAML_SCALAR_NODE || !parse_bool(scalar_text(node), &b))
            die_type(src, node, k, "true or false");
        if (b && index_in_list(k->not_yet_values, "true", false) >= 0) die_not_yet(src, node, k, "true");
        *(bool *)field = b;
        return;
    }
    case KEY_INT: {
        int64_t v = 0;
        if (k->minus_one_unset && is_null(node)) {
            *(int64_t *)field = -1;
            return;
        }
        if (node->type != YAML_SCALAR_NODE) die_type(src, node, k, "an integer");
        int status = parse_int64(scalar_text(node), &v);
        if (status == 1) die_type(src, node, k, "an integer");
        if (status == 2) die_at(src, node, "%s: %s is outside the 64-bit integer range", k->name, scalar_text(node));
        if (!(k->minus_one_unset && v == -1)) check_range(src, node, k, (double)v, scalar_text(node));
        *(int64_t *)field = v;
        return;
    }
    case KEY_FLOAT: {
        double v = 0;
        if (node->type != YAML_SCALAR_NODE) die_type(src, node, k, "a number");
        int status = parse_double(scalar_text(node), &v);
        if (status == 1) die_type(src, node, k, "a number");
        if (status == 2) die_at(src, node, "%s: %s is outside the range of a double", k->name, scalar_text(node));
        check_range(src, node, k, v, scalar_text(node));
        *(double *)field = v;
        return;
    }
    case KEY_BYTES: {
        int64_t v = node->type == YAML_SCALAR_NODE ? tt_parse_bytes(scalar_text(node)) : -1;
        if (v < 0) die_type(src, node, k, "a size in bytes such as 1073741824, 24GiB or 512MB");
        check_range(src, node, k, (double)v, scalar_text(node));
        *(int64_t *)field = v;
        return;
    }
    case KEY_ENUM: {
        char valid[256];
        list_with_commas(k->values, valid, sizeof valid);
        if (node->type != YAML_SCALAR_NODE || is_null(node)) {
            char expected[300];
            snprintf(expected, sizeof expected, "one of %s", valid);
            die_type(src, node, k, expected);
        }
        const char *text = scalar_text(node);
        bool b;
        if (parse_bool(text, &b)) text = b ? "true" : "false"; /* True/False as YAML writes booleans */
        int index = index_in_list(k->values, text, false);
        if (index < 0) die_at(src, node, "%s must be one of %s; got '%s'", k->name, valid, scalar_text(node));
        if (index_in_list(k->not_yet_values, text, false) >= 0) die_not_yet(src, node, k, text);
        if (k->storage == STORE_NAME) {
            char **s = field;
            free(*s);
            *s = tt_xstrdup(text);
        } else {
            *(int *)field = index;
        }
        return;
    }
    }
}

/* ---- documents ---- */

/* Parses one YAML document from text; dies with libyaml's problem and where it is. A second
 * document in the same text is an error too (it would otherwise be ignored). */
/* Deeper nesting than any key needs (datasets: a list of mappings holding lists) is refused before
 * libyaml builds the document: its scanner re-checks every open flow level on each token, so a
 * list nested 100000 deep would take quadratic time (and the loader as many nodes) for nothing. */
#define TT_CONFIG_MAX_NESTING 64

/* One pass over the events, stopping at the first list or mapping past TT_CONFIG_MAX_NESTING;
 * a syntax error ends the pass quietly (the load that follows reports it with its position). */
static void check_nesting(const char *text, size_t size, const source *src) {
    yaml_parser_t parser;
    if (!yaml_parser_initialize(&parser)) tt_die("out of memory starting the YAML parser");
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, size);
    int depth = 0;
    for (;;) {
        yaml_event_t event;
        if (!yaml_parser_parse(&parser, &event)) break;
        const yaml_event_type_t type = event.type;
        const size_t line = event.start_mark.line + 1;
        yaml_event_delete(&event);
        if (type == YAML_SEQUENCE_START_EVENT || type == YAML_MAPPING_START_EVENT) {
            if (++depth > TT_CONFIG_MAX_NESTING) {
                yaml_parser_delete(&parser);
                if (src->path)
                    tt_die("%s:%zu: lists and mappings nested more than %d deep; no key takes more than 3 levels", src->path,
                           line, TT_CONFIG_MAX_NESTING);
                tt_die("command-line override '%s': lists and mappings nested more than %d deep; no key takes more than 3 "
                       "levels",
                       src->override, TT_CONFIG_MAX_NESTING);
            }
        } else if (type == YAML_SEQUENCE_END_EVENT || type == YAML_MAPPING_END_EVENT) {
            depth--;
        } else if (type == YAML_STREAM_END_EVENT) {
            break;
        }
    }
    yaml_parser_delete(&parser);
}

static void load_document(yaml_document_t *doc, const char *text, size_t size, const source *src) {
    check_nesting(text, size, src);
    yaml_parser_t parser;
    if (!yaml_parser_initialize(&parser)) tt_die("out of memory starting the YAML parser");
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, size);
    bool ok = yaml_parser_load(&parser, doc);
    yaml_document_t next;
    bool next_ok = ok && yaml_parser_load(&parser, &next);
    if (!ok || !next_ok) {
        char context[200] = "";
        if (parser.context)
            snprintf(context, sizeof context, " (%s, line %zu)", parser.context, parser.context_mark.line + 1);
        const char *problem = parser.problem ? parser.problem : "cannot be parsed";
        if (src->path)
            tt_die("%s:%zu:%zu: malformed YAML: %s%s; fix the syntax there", src->path, parser.problem_mark.line + 1,
                   parser.problem_mark.column + 1, problem, context);
        tt_die("command-line override '%s': malformed YAML value: %s%s; quote the value if it is text", src->override,
               problem, context);
    }
    yaml_node_t *second = yaml_document_get_root_node(&next);
    if (second) {
        size_t line = second->start_mark.line + 1;
        if (src->path)
            tt_die("%s:%zu: a second YAML document starts here; a config is one document (remove the '---')", src->path,
                   line);
        tt_die("command-line override '%s': the value holds more than one YAML document", src->override);
    }
    yaml_document_delete(&next);
    yaml_parser_delete(&parser);
}

static void apply_default(tt_run_config *c, const key_spec *k) {
    if (k->availability == NOT_YET) return;
    char label[160];
    snprintf(label, sizeof label, "built-in default %s=%s", k->name, k->default_text);
    source src = {.path = NULL, .override = label, .built_in = true};
    yaml_document_t doc;
    load_document(&doc, k->default_text, strlen(k->default_text), &src);
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    TT_CHECK(root != NULL, "the default of %s does not parse", k->name);
    set_key(c, k, &src, &doc, root);
    yaml_document_delete(&doc);
}

void tt_run_config_defaults(tt_run_config *c) {
    memset(c, 0, sizeof(*c));
    for (int i = 0; i < KEY_COUNT; i++)
        apply_default(c, &key_table[i]);
}

static char *read_config_file(const char *path, size_t *size) {
    FILE *f = tt_fopen_regular_file(path, "a run config (YAML)");
    if (!f) tt_die("cannot open config %s: %s; check the --config path", path, strerror(errno));
    char *buf = NULL;
    size_t used = 0, capacity = 0;
    for (;;) {
        if (used + 4096 > capacity) {
            capacity = capacity ? 2 * capacity : 8192;
            if (capacity > (16u << 20)) tt_die("%s: larger than 16 MiB; that is not a run config", path);
            buf = tt_xrealloc(buf, capacity, "config file");
        }
        size_t got = fread(buf + used, 1, capacity - used - 1, f);
        used += got;
        if (got == 0) break;
    }
    int error = ferror(f) ? errno : 0;
    fclose(f);
    if (error) tt_die("cannot read config %s: %s", path, strerror(error));
    buf[used] = 0;
    *size = used;
    return buf;
}

static void load_file(tt_run_config *c, const char *path) {
    size_t size = 0;
    char *text = read_config_file(path, &size);
    source src = {.path = path, .override = NULL};
    yaml_document_t doc;
    load_document(&doc, text, size, &src);
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (root && !is_null(root)) { /* an empty file is all defaults */
        if (root->type != YAML_MAPPING_NODE)
            die_at(&src, root, "the top level must be a mapping of keys to values (key: value), not %s",
                   root->type == YAML_SEQUENCE_NODE ? "a list" : "a single value");
        size_t first_line[KEY_COUNT] = {0};
        for (yaml_node_pair_t *pair = root->data.mapping.pairs.start; pair < root->data.mapping.pairs.top; pair++) {
            yaml_node_t *key = yaml_document_get_node(&doc, pair->key);
            yaml_node_t *value = yaml_document_get_node(&doc, pair->value);
            if (key->type != YAML_SCALAR_NODE) die_at(&src, key, "keys must be names, not a list or a mapping");
            const key_spec *k = find_key(scalar_text(key));
            if (!k) die_unknown_key(&src, key, scalar_text(key));
            size_t line = key->start_mark.line + 1, *first = &first_line[k - key_table];
            if (*first) die_at(&src, key, "key '%s' appears twice (first on line %zu); keep one", k->name, *first);
            *first = line;
            set_key(c, k, &src, &doc, value);
        }
    }
    yaml_document_delete(&doc);
    free(text);
}

static void apply_override(tt_run_config *c, const char *arg) {
    source src = {.path = NULL, .override = arg};
    const char *eq = strchr(arg, '=');
    if (!eq) die_at(&src, NULL, "expected key=value, e.g. learning_rate=1e-4");
    if (eq == arg) die_at(&src, NULL, "no key before '='; expected key=value, e.g. learning_rate=1e-4");
    char name[128];
    snprintf(name, sizeof name, "%.*s", (int)(eq - arg) < 127 ? (int)(eq - arg) : 127, arg);
    const key_spec *k = find_key(name);
    if (!k) die_unknown_key(&src, NULL, name);
    const char *value = eq + 1;
    yaml_document_t doc;
    load_document(&doc, value, strlen(value), &src);
    if (!yaml_document_get_root_node(&doc)) { /* "key=": nothing, i.e. null */
        yaml_document_delete(&doc);
        load_document(&doc, "~", 1, &src);
    }
    set_key(c, k, &src, &doc, yaml_document_get_root_node(&doc));
    yaml_document_delete(&doc);
}

void tt_run_config_load(tt_run_config *c, const char *path, int override_count, char *const *overrides) {
    if (path) load_file(c, path);
    for (int i = 0; i < override_count; i++)
        apply_override(c, overrides[i]);
}

unsigned tt_run_config_lora_targets(const tt_run_config *c) {
    return c->lora_target_linear ? TT_LORA_ALL_MODULES : c->lora_target_modules;
}

void tt_run_config_validate(const tt_run_config *c) {
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
    const char *json_key = c->train_on_inputs                ? "train_on_inputs: true"
                           : c->tokenizer_config             ? "tokenizer_config"
                           : c->special_bos || c->special_eos || c->special_pad ? "special_tokens"
                           : c->excess_length_strategy != 0 && !c->sample_packing ? "excess_length_strategy: truncate"
                           : !c->shuffle_merged_datasets     ? "shuffle_merged_datasets: false"
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
    if (c->train_on_eos != 0 && !chat)
        tt_die("train_on_eos applies to chat_template datasets (completion, alpaca and input_output always train the "
               "EOS they append); remove it");
    if ((c->chat_template || c->chat_template_jinja || c->chat_template_kwargs || c->eot_tokens) && !chat)
        tt_die("%s applies to chat_template datasets ({path: chats.jsonl, type: chat_template}), and this run has none; "
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
            tt_die("datasets entry %d (%s): chat_template_jinja is set, but chat_template is %s; set chat_template: jinja "
                   "to use it, or remove chat_template_jinja",
                   i + 1, c->datasets[i], choice);
    }
    if (c->warmup_steps >= 0 && c->warmup_ratio > 0)
        tt_die("warmup_steps (%lld) and warmup_ratio (%g) are both set; set one of them (warmup_steps=-1 or "
               "warmup_ratio=0 unsets the other)",
               (long long)c->warmup_steps, c->warmup_ratio);
    if (c->val_set_size >= 1 && c->val_set_size != floor(c->val_set_size))
        tt_die("val_set_size is %g: below 1 it is a fraction of the sequences, from 1 a whole count; use e.g. 0.05 "
               "or %lld",
               c->val_set_size, (long long)floor(c->val_set_size));
    if (!c->output_dir) tt_die("output_dir is unset; set it to the directory for checkpoints and the final model");
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
    static const char *const offload_modes[] = {"false", "true", "legacy", "disk", "hidden_states"};
    const char *offload_mode = offload_modes[c->activation_offloading];
    /* true without checkpointing offloads every saved tensor instead (TRL's OffloadActivations) */
    if (c->activation_offloading >= 2 && !c->gradient_checkpointing && c->recompute_granularity != TT_RECOMPUTE_FULL)
        tt_die("activation_offloading: %s offloads the checkpoints of gradient checkpointing, but "
               "gradient_checkpointing is false; set gradient_checkpointing: true, or activation_offloading: false "
               "(or true, which then offloads every saved tensor)",
               offload_mode);
    if (c->selective_offload && c->activation_offloading >= 1 && c->activation_offloading <= 3)
        tt_die("selective_checkpointing offload: true and activation_offloading: %s both decide what leaves the GPU; "
               "use one of them (selective offload goes with activation_offloading: false or hidden_states)",
               offload_mode);
    if (c->layer_offloading && !c->use_pin_memory)
        tt_die("layer_offloading streams frozen layers from pinned host memory, but use_pin_memory is false; remove "
               "use_pin_memory: false");
    if (c->cpu_offloading && c->activation_offloading != 0)
        tt_die("cpu_offloading (Megatron's) and activation_offloading: %s both offload activations; use one of them",
               offload_mode);
    if (c->cpu_offloading && !c->cpu_offloading_activations && !c->cpu_offloading_weights)
        tt_die("cpu_offloading with cpu_offloading_activations: false and cpu_offloading_weights: false offloads "
               "nothing; set one of them to true");
    if (c->cpu_offloading_weights && !c->cpu_offloading)
        tt_die("cpu_offloading_weights is true but cpu_offloading is false; set cpu_offloading: true and "
               "cpu_offloading_num_layers (the layers, from the first, whose weights live in host memory)");
    if (c->cpu_offloading_weights && c->cpu_offloading_num_layers == 0)
        tt_die("cpu_offloading_weights is true but cpu_offloading_num_layers is 0; set how many layers, from the first, "
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
    const bool streamed_mode = c->activation_offloading == 1 || c->activation_offloading == 4;
    if (!streamed_mode && (c->max_fwd_stash_size != 1 || c->min_offload_size != 1024))
        tt_die("%s is set but activation_offloading is %s; it applies to activation_offloading: true or "
               "hidden_states; remove it or change the mode",
               c->max_fwd_stash_size != 1 ? "max_fwd_stash_size" : "min_offload_size", offload_mode);
    if (c->activation_offloading != 1 && (!c->use_pin_memory || !c->use_streams))
        tt_die("%s: false is set but activation_offloading is %s; it applies to activation_offloading: true "
               "(legacy is the unstreamed mode, hidden_states is always pinned and streamed); remove it or set "
               "activation_offloading: true",
               !c->use_pin_memory ? "use_pin_memory" : "use_streams", offload_mode);
    if (c->debug_copy_delay_us && c->activation_offloading == 0 && !c->cpu_offloading && !c->selective_offload &&
        !c->optimizer_cpu_offload)
        tt_die("debug_copy_delay_us delays offload copies, but activation_offloading is false; set a mode or remove "
               "debug_copy_delay_us");
    if (c->adapter == TT_ADAPTER_NONE && c->lora_key_given)
        tt_die("%s is set but adapter is not: LoRA settings take effect with adapter: lora; set adapter: lora to train "
               "LoRA adapters, or remove %s for full fine-tuning",
               c->lora_key_given, c->lora_key_given);
    if (c->adapter != TT_ADAPTER_NONE && tt_run_config_lora_targets(c) == 0)
        tt_die("adapter: %s has no modules to adapt: lora_target_modules is empty and lora_target_linear is false; "
               "set lora_target_linear: true (all seven linear layers) or lora_target_modules: [q_proj, v_proj, ...]",
               c->adapter == TT_ADAPTER_QLORA ? "qlora" : "lora");
    if (c->adapter != TT_ADAPTER_NONE && (c->freeze_embeddings || c->frozen_layer_count > 0))
        tt_die("%s chooses what full fine-tuning trains, but with adapter: %s the whole base model is frozen "
               "already; remove %s, or remove adapter for full fine-tuning",
               c->freeze_embeddings ? "freeze_embeddings" : "frozen_layers", c->adapter == TT_ADAPTER_QLORA ? "qlora" : "lora",
               c->freeze_embeddings ? "freeze_embeddings" : "frozen_layers");
    /* qlora as axolotl checks it: the 4-bit base is load_in_4bit's, and the bnb keys belong to it */
    if (c->adapter == TT_ADAPTER_QLORA && !c->load_in_4bit)
        tt_die("adapter: qlora needs load_in_4bit: true (the frozen base quantized to 4 bits, as axolotl requires); set "
               "load_in_4bit: true, or use adapter: lora for a base in the compute dtype");
    if (c->load_in_4bit && c->adapter != TT_ADAPTER_QLORA)
        tt_die("load_in_4bit: true quantizes the frozen base of adapter: qlora, but adapter is %s; set adapter: qlora, "
               "or remove load_in_4bit",
               c->adapter == TT_ADAPTER_LORA ? "lora" : "~ (full fine-tuning trains the weights, which cannot be 4-bit)");
    if (c->bnb_key_given && !c->load_in_4bit)
        tt_die("%s is set but load_in_4bit is not: the bnb_4bit_* keys describe the 4-bit base of adapter: qlora; set "
               "adapter: qlora and load_in_4bit: true, or remove %s",
               c->bnb_key_given, c->bnb_key_given);
    if (c->attn_workspace_limit > 0 && c->attn_workspace_limit < (1 << 20))
        tt_die("attn_workspace_limit is %lld bytes; cuDNN's attention backward needs at least 1MiB for its dP. Use 0 "
               "(auto) or a size such as 4GiB",
               (long long)c->attn_workspace_limit);
    if (c->tiled_mlp_num_shards > 0 && !c->tiled_mlp)
        tt_die("tiled_mlp_num_shards is %lld but tiled_mlp is false; set tiled_mlp: true, or remove tiled_mlp_num_shards",
               (long long)c->tiled_mlp_num_shards);
    if (c->tiled_mlp_num_shards > c->micro_batch_size * c->sequence_len)
        tt_die("tiled_mlp_num_shards is %lld but a micro-batch has %lld tokens (micro_batch_size x sequence_len); use at "
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

/* ---- writing ---- */

/* Plain if it reads back as the same string, else double-quoted with escapes. */
static void write_yaml_string(FILE *out, const char *s) {
    if (!s) {
        fputs("~", out);
        return;
    }
    bool plain = isalnum((unsigned char)s[0]) || s[0] == '.' || s[0] == '/' || s[0] == '_';
    for (const char *p = s; *p && plain; p++)
        plain = isalnum((unsigned char)*p) || strchr("._/-+", *p) != NULL;
    if (plain && (strcmp(s, "null") == 0 || strcmp(s, "Null") == 0 || strcmp(s, "NULL") == 0)) plain = false;
    if (plain) {
        fputs(s, out);
        return;
    }
    fputc('"', out);
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        /* One UTF-8 character (the text came through libyaml, so it is well formed). */
        uint32_t code = *p;
        int length = code < 0x80 ? 1 : code < 0xe0 ? 2 : code < 0xf0 ? 3 : 4;
        if (length > 1) code &= 0x3fu >> (length - 1);
        for (int i = 1; i < length && p[i]; i++)
            code = (code << 6) | (p[i] & 0x3fu);
        /* YAML's printable set; everything else is written as an escape. */
        bool printable = (code >= 0x20 && code < 0x7f) || code == 0x85 || (code >= 0xa0 && code <= 0xd7ff) ||
                         (code >= 0xe000 && code <= 0xfffd && code != 0xfeff) || (code >= 0x10000 && code <= 0x10ffff);
        if (code == '"' || code == '\\')
            fprintf(out, "\\%c", (char)code);
        else if (code == '\n')
            fputs("\\n", out);
        else if (code == '\t')
            fputs("\\t", out);
        else if (!printable)
            fprintf(out, code <= 0xff ? "\\x%02x" : code <= 0xffff ? "\\u%04x" : "\\U%08x", (unsigned)code);
        else
            fwrite(p, 1, (size_t)length, out);
        for (int i = 0; i < length && *p; i++)
            p++;
    }
    fputc('"', out);
}

/* A size with the largest unit that divides it exactly (24GiB, 5GB), else in bytes. */
static void write_bytes(FILE *out, int64_t bytes) {
    static const struct {
        const char *unit;
        int64_t factor;
    } units[] = {{"TiB", 1LL << 40},   {"TB", 1000000000000LL}, {"GiB", 1LL << 30},
                 {"GB", 1000000000LL}, {"MiB", 1LL << 20},      {"MB", 1000000LL}};
    for (size_t i = 0; bytes > 0 && i < sizeof units / sizeof units[0]; i++)
        if (bytes % units[i].factor == 0) {
            fprintf(out, "%lld%s", (long long)(bytes / units[i].factor), units[i].unit);
            return;
        }
    fprintf(out, "%lld", (long long)bytes);
}

/* The shortest decimal that reads back as the same double. */
static void write_double(FILE *out, double v) {
    char text[40];
    for (int precision = 1; precision <= 17; precision++) {
        snprintf(text, sizeof text, "%.*g", precision, v);
        if (strtod(text, NULL) == v) break;
    }
    fputs(text, out);
}

/* A chat_template entry's lists and mappings, in flow style. */
static void write_chat_entry(FILE *out, const tt_dataset_spec *d) {
    fputs("\n    message_property_mappings: {", out);
    for (int i = 0; i < d->property_mapping_count; i++) {
        fputs(i ? ", " : "", out);
        write_yaml_string(out, d->property_names[i]);
        fputs(": ", out);
        write_yaml_string(out, d->property_fields[i]);
    }
    fputs("}\n    roles_to_train: [", out);
    for (int i = 0; i < d->roles_to_train_count; i++) {
        fputs(i ? ", " : "", out);
        write_yaml_string(out, d->roles_to_train[i]);
    }
    fputc(']', out);
    if (d->roles_given) {
        fputs("\n    roles: {", out);
        /* the aliases grouped by role, in the order the roles first appear */
        for (int i = 0, first = 1; i < d->role_alias_count; i++) {
            bool seen = false;
            for (int j = 0; j < i; j++) seen |= strcmp(d->role_alias_to[j], d->role_alias_to[i]) == 0;
            if (seen) continue;
            fputs(first ? "" : ", ", out);
            first = 0;
            write_yaml_string(out, d->role_alias_to[i]);
            fputs(": [", out);
            for (int j = i, n = 0; j < d->role_alias_count; j++)
                if (strcmp(d->role_alias_to[j], d->role_alias_to[i]) == 0) {
                    fputs(n++ ? ", " : "", out);
                    write_yaml_string(out, d->role_alias_from[j]);
                }
            fputc(']', out);
        }
        fputc('}', out);
    }
    if (d->train_on_eos >= 0) {
        static const char *const eos_names[] = {"turn", "all", "last", "none"};
        fprintf(out, "\n    train_on_eos: %s", eos_names[d->train_on_eos]);
    }
    if (d->train_on_eot >= 0) {
        static const char *const eot_names[] = {"turn", "all", "last", "none"};
        fprintf(out, "\n    train_on_eot: %s", eot_names[d->train_on_eot]);
    }
    if (d->drop_system_message) fputs("\n    drop_system_message: true", out);
    if (d->split_thinking) fputs("\n    split_thinking: true", out);
}

static void write_value(FILE *out, const tt_run_config *c, const key_spec *k) {
    const void *field = (const char *)c + k->offset;
    char name[64];
    switch (k->type) {
    case KEY_BOOL: fputs(*(const bool *)field ? "true" : "false", out); break;
    case KEY_INT: fprintf(out, "%lld", (long long)*(const int64_t *)field); break;
    case KEY_BYTES: write_bytes(out, *(const int64_t *)field); break;
    case KEY_FLOAT: write_double(out, *(const double *)field); break;
    case KEY_STRING: write_yaml_string(out, *(char *const *)field); break;
    case KEY_ENUM:
        if (k->storage == STORE_NAME)
            write_yaml_string(out, *(char *const *)field);
        else
            fputs(name_in_list(k->values, *(const int *)field, name, sizeof name), out);
        break;
    case KEY_SELECTIVE:
        fputs(!*(const bool *)field ? "~"
              : c->selective_offload ? "{save: [attention], offload: true}"
                                     : "{save: [attention], offload: false}",
              out);
        break;
    case KEY_CHECKPOINTING_KWARGS: fputs(*(const bool *)field ? "{use_reentrant: true}" : "~", out); break;
    case KEY_ADAPTER: {
        const tt_adapter_kind kind = *(const tt_adapter_kind *)field;
        fputs(kind == TT_ADAPTER_QLORA ? "qlora" : kind == TT_ADAPTER_LORA ? "lora" : "~", out);
        break;
    }
    case KEY_LORA_TARGETS: {
        fputc('[', out);
        for (int m = 0, first = 1; m < TT_LORA_MODULE_COUNT; m++)
            if ((c->lora_target_modules >> m) & 1u) {
                fprintf(out, "%s%s", first ? "" : ", ", lora_module_names[m]);
                first = 0;
            }
        fputc(']', out);
        break;
    }
    case KEY_LAYER_LIST:
        fputc('[', out);
        for (int64_t i = 0; i < c->frozen_layer_count; i++)
            fprintf(out, "%s%lld", i ? ", " : "", (long long)c->frozen_layers[i]);
        fputc(']', out);
        break;
    case KEY_DATASETS:
        if (c->dataset_count == 0) fputs("[]", out);
        for (int i = 0; i < c->dataset_count; i++) {
            const tt_dataset_spec *d = &c->dataset_specs[i];
            fputs("\n  - path: ", out);
            write_yaml_string(out, c->datasets[i]);
            fprintf(out, "\n    type: %s", dataset_type_names[d->type]);
            for (size_t e = 0; e < sizeof entry_keys / sizeof entry_keys[0]; e++) {
                if (!entry_keys[e].offset) continue;
                const char *v = *(char *const *)((const char *)d + entry_keys[e].offset);
                if (!v) continue;
                fprintf(out, "\n    %s: ", entry_keys[e].name);
                write_yaml_string(out, v);
            }
            if (d->type == TT_DATASET_CHAT_TEMPLATE) write_chat_entry(out, d);
        }
        break;
    case KEY_TEMPLATE_KWARGS: {
        const char *json = *(char *const *)field; /* JSON is YAML's flow style */
        fputs(json ? json : "~", out);
        break;
    }
    case KEY_STRING_LIST: {
        char *const *list = *(char **const *)field;
        const int count = *(const int *)((const char *)c + k->count_offset);
        if (!list) {
            fputs("~", out);
            break;
        }
        fputc('[', out);
        for (int i = 0; i < count; i++) {
            fputs(i ? ", " : "", out);
            write_yaml_string(out, list[i]);
        }
        fputc(']', out);
        break;
    }
    case KEY_SPECIAL_TOKENS:
        if (!c->special_bos && !c->special_eos && !c->special_pad) {
            fputs("~", out);
            break;
        }
        fputc('{', out);
        const char *names[3] = {"bos_token", "eos_token", "pad_token"};
        const char *values[3] = {c->special_bos, c->special_eos, c->special_pad};
        for (int i = 0, first = 1; i < 3; i++)
            if (values[i]) {
                fprintf(out, "%s%s: ", first ? "" : ", ", names[i]);
                write_yaml_string(out, values[i]);
                first = 0;
            }
        fputc('}', out);
        break;
    }
}

void tt_run_config_write_yaml(const tt_run_config *c, FILE *out) {
    fputs("# The effective configuration of this run, every key (tiertrain; docs/CONFIG.md).\n"
          "# Keys of features that are not available yet are all off and not listed.\n",
          out);
    for (int i = 0; i < KEY_COUNT; i++) {
        if (key_table[i].availability == NOT_YET) continue;
        /* "key: value", or "key:" and the datasets entries below it */
        fprintf(out, "%s:%s", key_table[i].name, key_table[i].type == KEY_DATASETS && c->dataset_count > 0 ? "" : " ");
        write_value(out, c, &key_table[i]);
        fputc('\n', out);
    }
}

void tt_run_config_print_help(FILE *out) {
    fputs("Configuration keys: a YAML file (--config run.yaml) and key=value overrides, the value read as YAML\n"
          "(learning_rate=1e-4, datasets=[a.tok,b.tok], base_model=null). Reference: docs/CONFIG.md.\n\n",
          out);
    fprintf(out, "  %-28s %-8s %-12s %-30s %s\n", "KEY", "TYPE", "DEFAULT", "VALID VALUES", "MEANING");
    char valid[320];
    for (int i = 0; i < KEY_COUNT; i++) {
        const key_spec *k = &key_table[i];
        if (k->availability == NOT_YET) continue;
        fprintf(out, "  %-28s %-8s %-12s %-30s %s\n", k->name, type_name(k), k->default_text,
                valid_text(k, valid, sizeof valid), k->help);
    }
    bool reserved = false;
    for (int i = 0; i < KEY_COUNT; i++) reserved |= key_table[i].availability == NOT_YET;
    if (reserved) {
        fputs("\nNot available yet (keys of later features; accepted only with an off value: ~, false, 0, [] or {}):\n",
              out);
        for (int i = 0; i < KEY_COUNT; i++)
            if (key_table[i].availability == NOT_YET) fprintf(out, "  %-32s %s\n", key_table[i].name, key_table[i].help);
    }
    fputs("\nValues not available yet:", out);
    for (int i = 0, first = 1; i < KEY_COUNT; i++)
        if (key_table[i].availability == AVAILABLE && key_table[i].not_yet_values) {
            char later[128];
            fprintf(out, "%s %s: %s", first ? "" : ";", key_table[i].name,
                    list_with_commas(key_table[i].not_yet_values, later, sizeof later));
            first = 0;
        }
    fputc('\n', out);
}

void tt_run_config_free(tt_run_config *c) {
    for (int i = 0; i < KEY_COUNT; i++) {
        const key_spec *k = &key_table[i];
        if (k->availability == AVAILABLE && (k->type == KEY_STRING || k->type == KEY_TEMPLATE_KWARGS ||
                                             (k->type == KEY_ENUM && k->storage == STORE_NAME))) {
            char **s = (char **)((char *)c + k->offset);
            free(*s);
            *s = NULL;
        }
        if (k->availability == AVAILABLE && k->type == KEY_STRING_LIST) {
            char ***list = (char ***)((char *)c + k->offset);
            int *count = (int *)((char *)c + k->count_offset);
            free_strings(*list, *count);
            *list = NULL;
            *count = 0;
        }
    }
    clear_datasets(c);
    free(c->special_bos);
    free(c->special_eos);
    free(c->special_pad);
    c->special_bos = c->special_eos = c->special_pad = NULL;
    free(c->frozen_layers);
    c->frozen_layers = NULL;
    c->frozen_layer_count = 0;
}
