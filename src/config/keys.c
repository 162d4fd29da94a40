/* The key table: every key of the run configuration, declared once (type, default, valid values,
 * availability, help); and the lookups and texts built from it. */
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

TIE_VALUES(tt_lr_scheduler);
TIE_VALUES(tt_recompute_granularity);
TIE_VALUES(tt_recompute_method);
TIE_VALUES(tt_device_kind);
TIE_VALUES(tt_activation_offloading);
TIE_VALUES(tt_bf16_setting);
TIE_VALUES(tt_attn_implementation);
TIE_VALUES(tt_train_on_eos);
TIE_VALUES(tt_save_strategy);
TIE_VALUES(tt_eval_strategy);
TIE_VALUES(tt_excess_length);
TIE_VALUES(tt_quant_type);
TIE_VALUES(tt_compute_dtype);
TIE_VALUES(tt_adapter_kind);

#define NAME_ITEM(member, name) [member] = name,
static const char *const train_on_eos_names[] = {TT_TRAIN_ON_EOS_VALUES(NAME_ITEM)};

const char *tt_train_on_eos_name(tt_train_on_eos rule) {
    TT_CHECK(rule >= 0 && rule < (int)(sizeof train_on_eos_names / sizeof train_on_eos_names[0]), "train_on_eos %d",
             (int)rule);
    return train_on_eos_names[rule];
}

static const char *const activation_offloading_names[] = {TT_ACTIVATION_OFFLOADING_VALUES(NAME_ITEM)};

const char *tt_activation_offloading_name(tt_activation_offloading mode) {
    TT_CHECK(mode >= 0 && mode < (int)(sizeof activation_offloading_names / sizeof activation_offloading_names[0]),
             "activation_offloading %d", (int)mode);
    return activation_offloading_names[mode];
}

const key_spec cfg_keys[] = {
    /* model */
    {.name = "base_model",
     .type = KEY_STRING,
     .offset = FIELD(base_model),
     .default_text = "~",
     .help = "a Hugging Face model directory to fine-tune: config.json + model.safetensors (or shards with "
             "model.safetensors.index.json), or a Hub name (Qwen/Qwen3-8B) read from the local Hugging Face cache "
             "(HF_HUB_CACHE, HF_HOME/hub or ~/.cache/huggingface/hub; never downloaded)",
     .known_as = "model_name_or_path|model_name|pretrained_model_name_or_path"},
    {.name = "revision_of_model",
     .type = KEY_STRING,
     .offset = FIELD(revision_of_model),
     .default_text = "~",
     .help = "the revision (branch, tag or commit) of a base_model given as a Hugging Face Hub name, read from the "
             "local Hugging Face cache; ~: main"},
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
    {.name = "load_in_8bit",
     .type = KEY_BOOL,
     .offset = FIELD(load_in_8bit),
     .default_text = "false",
     .null_is_default = true,
     .help = "adapter: lora: the frozen q/k/v/o/gate/up/down weights stored in 8 bits (round(x / absmax x 127) in "
             "blocks of 64, an fp32 absmax each: 1.06 bytes a weight), dequantized next to each GEMM as a 4-bit base "
             "is. bitsandbytes' LLM.int8 keeps a scale a row and multiplies in int8 with fp16 outlier columns; "
             "tiertrain's GEMM is the compute dtype's, so the loss is near LLM.int8's, not equal"},
    {.name = "bnb_4bit_quant_type",
     .type = KEY_ENUM,
     .offset = FIELD(bnb_4bit_quant_type),
     .default_text = "nf4",
     .values = VALUE_NAMES(TT_QUANT_TYPE_VALUES),
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
     .values = VALUE_NAMES(TT_COMPUTE_DTYPE_VALUES),
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
    {.name = "peft_use_rslora",
     .type = KEY_BOOL,
     .offset = FIELD(peft_use_rslora),
     .default_text = "false",
     .help = "rank-stabilized LoRA (axolotl's key; PEFT's use_rslora): the scaling is lora_alpha / sqrt(lora_r)"},
    {.name = "neftune_noise_alpha",
     .type = KEY_FLOAT,
     .offset = FIELD(neftune_noise_alpha),
     .default_text = "0.0",
     .range = AT_LEAST(0),
     .null_is_default = true,
     .help = "NEFTune: in training, uniform noise in +-alpha / sqrt(sequence_len x hidden_size) added to the embedding "
             "output, as transformers' neftune_noise_alpha (drawn from the run's seed, the step and micro-batch, so "
             "resume and every memory mode repeat it); 0: off"},
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
             "up_proj, down_proj (or q, k, v, o, gate, up, down); Phi-3's fused qkv_proj and gate_up_proj",
     .known_as = "target_modules|lora_target"},
    {.name = "lora_target_linear",
     .type = KEY_BOOL,
     .offset = FIELD(lora_target_linear),
     .default_text = "false",
     .null_is_default = true,
     .help = "adapters on every linear layer of every decoder layer, as peft's all-linear (q/k/v/o_proj and "
             "gate/up/down_proj; Phi-3's qkv_proj, o_proj, gate_up_proj, down_proj), with lora_target_modules too"},
    {.name = "lora_modules_to_save",
     .type = KEY_STRING_LIST,
     .offset = FIELD(lora_modules_to_save),
     .count_offset = FIELD(lora_modules_to_save_count),
     .default_text = "~",
     .help = "with LoRA, parts of the base trained whole beside the adapters and saved with them as PEFT's "
             "modules_to_save (axolotl's key): embed_tokens, lm_head (new tokens' rows train); a tied head trains as "
             "a copy of its own, as PEFT wraps the two apart"},
    {.name = "lora_model_dir",
     .type = KEY_STRING,
     .offset = FIELD(lora_model_dir),
     .default_text = "~",
     .help = "a PEFT LoRA adapter directory (adapter_model.safetensors, adapter_config.json), or a Hub name read "
             "from the local Hugging Face cache, to continue from: its adapters replace the fresh init; lora_r, "
             "lora_alpha and the target modules must be the adapter's"},
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
    {.name = "dataset_exact_deduplication",
     .type = KEY_BOOL,
     .offset = FIELD(dataset_exact_deduplication),
     .default_text = "false",
     .null_is_default = true,
     .help = "JSON datasets: a prepared document whose ids and labels equal an earlier one's is left out, across "
             "every entry, before the order is shuffled and the eval split taken (axolotl's exact deduplication of "
             "the tokenized rows)"},
    {.name = "resize_token_embeddings_to_32x",
     .type = KEY_BOOL,
     .offset = FIELD(resize_token_embeddings_to_32x),
     .default_text = "false",
     .null_is_default = true,
     .help = "axolotl's: the embedding grown to the tokenizer's size rounded up to a multiple of 32 when the model has "
             "fewer rows; tiertrain resizes no embedding, so true is accepted when the model's vocab_size has those "
             "rows already (Phi-3's 32064 for its 32011 tokens) and refused otherwise"},
    {.name = "tokenizer_config",
     .type = KEY_STRING,
     .offset = FIELD(tokenizer_config),
     .default_text = "~",
     .help = "JSON datasets: the tokenizer, a directory with tokenizer.json (and tokenizer_config.json), a "
             "tokenizer.json, or a Hub name read from the local Hugging Face cache; ~: base_model's directory",
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
     .values = VALUE_NAMES(TT_TRAIN_ON_EOS_VALUES),
     .null_is_default = true,
     .help = "chat_template datasets (axolotl's key): which EOS tokens train. completion, alpaca and input_output "
             "follow their type (the appended EOS trains with the output)"},
    {.name = "chat_template",
     .type = KEY_STRING,
     .offset = FIELD(chat_template),
     .default_text = "~",
     .help = "chat_template datasets without their own (axolotl's key): tokenizer_default (the tokenizer's "
             "chat_template.jinja or tokenizer_config.json's chat_template), tokenizer_default_fallback_<name>, jinja "
             "(chat_template_jinja) or a built-in: chatml, llama3, gemma, phi_3, qwen3; ~: tokenizer_default"},
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
     .values = VALUE_NAMES(TT_EXCESS_LENGTH_VALUES),
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
     .range = CLOSED(2, 1073741824),
     .help = "tokens per training sequence (at most 2^30; a micro-batch's tokens stay below 2^31)",
     .known_as = "max_seq_length|max_length|seq_length|max_seq_len|cutoff_len|block_size"},
    {.name = "micro_batch_size",
     .type = KEY_INT,
     .offset = FIELD(micro_batch_size),
     .default_text = "1",
     .range = CLOSED(1, 1048576),
     .help = "sequences per forward/backward pass (at most 2^20)",
     .known_as = "per_device_train_batch_size|batch_size|train_micro_batch_size_per_gpu"},
    {.name = "gradient_accumulation_steps",
     .type = KEY_INT,
     .offset = FIELD(gradient_accumulation_steps),
     .default_text = "1",
     .range = CLOSED(1, 1048576),
     .help = "micro-batches per optimizer step (at most 2^20); the loss is the mean over all their unmasked tokens"},
    /* optimisation */
    {.name = "optimizer",
     .type = KEY_ENUM,
     .offset = FIELD(optimizer),
     .default_text = "adamw_torch",
     .values = "adamw_torch|adamw_torch_fused|adamw_bnb_8bit|adamw_8bit|paged_adamw_8bit",
     .storage = STORE_NAME,
     .help = "adamw_torch, adamw_torch_fused: AdamW with torch.optim.AdamW's update (the same code); adamw_bnb_8bit, "
             "adamw_8bit, paged_adamw_8bit: bitsandbytes' AdamW8bit (moments of tensors of 4096 elements or more in "
             "8 bits, block-wise; the CPU and the CUDA backend the same bits; without optimizer_cpu_offload and "
             "zero_stage)",
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
     .values = VALUE_NAMES(TT_LR_SCHEDULER_VALUES),
     .help = "transformers' schedules after the linear warmup: cosine (to cosine_min_lr_ratio x learning_rate), "
             "cosine_with_min_lr (the same), linear (to 0), polynomial (to 1e-7, power 1), inverse_sqrt (timescale: "
             "the warmup, else 10000), constant_with_warmup; constant has no warmup, as in transformers",
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
    {.name = "overwrite_output_dir",
     .type = KEY_BOOL,
     .offset = FIELD(overwrite_output_dir),
     .default_text = "false",
     .help = "transformers' key: a run that does not resume may replace a previous run in output_dir (its "
             "checkpoints and metrics.jsonl are removed first); false: such a run is refused"},
    {.name = "save_strategy",
     .type = KEY_ENUM,
     .offset = FIELD(save_strategy),
     .default_text = "steps",
     .values = VALUE_NAMES(TT_SAVE_STRATEGY_VALUES),
     .help = "steps: checkpoints every save_steps (or saves_per_epoch) and the final model in output_dir; epoch: a "
             "checkpoint each epoch (saves_per_epoch: 1); no: nothing is saved (benchmarks)"},
    {.name = "save_steps",
     .type = KEY_FLOAT,
     .offset = FIELD(save_steps),
     .default_text = "0",
     .range = AT_LEAST(0),
     .help = "a checkpoint every N optimizer steps (and always at the end); below 1, that fraction of the run's "
             "steps (rounded up, as transformers reads it); 0: only at the end",
     .known_as = "save_interval"},
    {.name = "saves_per_epoch",
     .type = KEY_INT,
     .offset = FIELD(saves_per_epoch),
     .default_text = "0",
     .range = AT_LEAST(0),
     .help = "axolotl's: save_steps = 1 / (saves_per_epoch x num_epochs) of the run's steps; 0: save_steps decides"},
    {.name = "save_total_limit",
     .type = KEY_INT,
     .offset = FIELD(save_total_limit),
     .default_text = "0",
     .range = AT_LEAST(0),
     .help = "keep only the newest N checkpoint-<step> directories in output_dir (older ones are deleted after "
             "each save); 0: keep all"},
    {.name = "eval_strategy",
     .type = KEY_ENUM,
     .offset = FIELD(eval_strategy),
     .default_text = "steps",
     .values = VALUE_NAMES(TT_EVAL_STRATEGY_VALUES),
     .help = "steps: the eval loss every eval_steps (or evals_per_epoch) and at the end; epoch: each epoch "
             "(evals_per_epoch: 1); no: never (when val_set_size holds sequences out all the same)"},
    {.name = "eval_steps",
     .type = KEY_FLOAT,
     .offset = FIELD(eval_steps),
     .default_text = "0",
     .range = AT_LEAST(0),
     .help = "the eval loss every N optimizer steps (and at the end) when there is an eval set; below 1, that "
             "fraction of the run's steps (rounded up); 0: only at the end",
     .known_as = "eval_interval"},
    {.name = "evals_per_epoch",
     .type = KEY_INT,
     .offset = FIELD(evals_per_epoch),
     .default_text = "0",
     .range = AT_LEAST(0),
     .help = "axolotl's: eval_steps = 1 / (evals_per_epoch x num_epochs) of the run's steps; 0: eval_steps decides"},
    {.name = "loss_watchdog_threshold",
     .type = KEY_FLOAT,
     .offset = FIELD(loss_watchdog_threshold),
     .default_text = "0",
     .range = AT_LEAST(0),
     .null_is_default = true,
     .help = "axolotl's loss watchdog: training stops (the model is saved as at the end) after "
             "loss_watchdog_patience steps in a row whose loss is above this; 0: off"},
    {.name = "loss_watchdog_patience",
     .type = KEY_INT,
     .offset = FIELD(loss_watchdog_patience),
     .default_text = "3",
     .range = AT_LEAST(1),
     .null_is_default = true,
     .help = "the steps in a row above loss_watchdog_threshold that stop training"},
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
     .default_text = "auto",
     .help = "with gradient_checkpointing: {save: [attention]} keeps each layer's attention output and log-sum-exp "
             "and recomputes the rest (no attention recompute); offload: true keeps them in pinned host memory between "
             "forward and backward, copied on side streams; auto: on the GPU from 16384 tokens, the plan does that "
             "for as many checkpointed layers as the budgets hold (activation_offloading false or hidden_states; "
             "the same bits); ~: every checkpointed layer recomputes its attention"},
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
     .values = VALUE_NAMES(TT_RECOMPUTE_GRANULARITY_VALUES),
     .help = "Megatron's: full recomputes whole layers (as gradient_checkpointing), selective only the cheap "
             "element-wise ops (norms, RoPE, SwiGLU) and keeps every GEMM and attention output; none: "
             "gradient_checkpointing decides"},
    {.name = "recompute_method",
     .type = KEY_ENUM,
     .offset = FIELD(recompute_method),
     .default_text = "uniform",
     .values = VALUE_NAMES(TT_RECOMPUTE_METHOD_VALUES),
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
     .values = VALUE_NAMES(TT_ACTIVATION_OFFLOADING_VALUES),
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
     .help =
         "Megatron's: the share of the trainable parameters optimizer_cpu_offload updates on the CPU, rounded to "
         "the nearest whole layer (with zero_stage, of each process's shard); 1: all of them, 0: none. Without optimizer_cpu_offload only 1 or 0 (both: "
         "nothing offloaded) is accepted"},
    {.name = "overlap_cpu_optimizer_d2h_h2d",
     .type = KEY_BOOL,
     .offset = FIELD(overlap_cpu_optimizer_d2h_h2d),
     .default_text = "false",
     .help = "Megatron's: with optimizer_cpu_offload, a layer's gradients go to the host as soon as its backward is "
             "done, a CPU thread updates it while the GPU goes on (once the gradient norm is known when max_grad_norm "
             "> 0), and its new weights come back before the next forward reaches it; false: the copies and the CPU "
             "update run after the backward, synchronously"},
    {.name = "zero_stage",
     .type = KEY_INT,
     .offset = FIELD(zero_stage),
     .default_text = "0",
     .range = CLOSED(0, 3),
     .help =
         "DeepSpeed ZeRO's stage (its zero_optimization.stage) over the data-parallel processes: 1 shards the fp32 "
         "master weights and AdamW moments by whole layers, each process updating its shard and sending the "
         "others its new weights; 2 also the gradients (the other processes' layers pass through two ring "
         "slots and are summed on their owner as each layer's backward ends; with several micro-batches a step, "
         "each one's, onto the owner's running sum: zero_stage 0's results to rounding); 3 also the "
         "weights (another process's layer is sent by its owner into two ring slots before each use; the "
         "embedding and LM head stay on every process); otherwise the same bits as 0, where every process keeps and "
         "updates everything"},
    {.name = "sequence_parallel_degree",
     .type = KEY_INT,
     .offset = FIELD(sequence_parallel_degree),
     .default_text = "1",
     .range = AT_LEAST(1),
     .help = "Ulysses sequence parallel (axolotl's key, ALST's method): this many processes share each sequence, each "
             "holding sequence_len / N of its tokens through the whole layer and exchanging them for heads around "
             "attention (all-to-all: every process attends over the whole sequence for num_heads / N heads); every "
             "process then holds 1/N of the activations. The processes form groups of N consecutive ranks, the groups "
             "training side by side (data parallel); the process count, sequence_len, num_attention_heads and "
             "num_key_value_heads divisible by it",
     .known_as = "context_parallel_size|ulysses_degree"},
    {.name = "deepspeed",
     .type = KEY_STRING,
     .offset = FIELD(deepspeed),
     .default_text = "~",
     .help = "a DeepSpeed JSON (axolotl's deepspeed_configs/zero1.json etc.): zero_optimization.stage sets zero_stage "
             "and offload_optimizer.device cpu optimizer_cpu_offload; offload_param, fp16 and numbers that disagree "
             "with the run's keys are refused; its own tuning (bucket sizes, overlap_comm, ...) has no effect and is "
             "listed at start"},
    {.name = "ddp_timeout",
     .type = KEY_INT,
     .offset = FIELD(ddp_timeout),
     .default_text = "1800",
     .range = CLOSED(1, 86400),
     .help = "axolotl's (torch.distributed's timeout): seconds a data-parallel collective may take, from when it is "
             "queued (it may wait behind the GPU's queued work first), before every rank ends with the reason; a rank "
             "that ends (killed, or on an error) is seen at once whatever this says"},
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
     .help = "race stress for tests: each offload copy, and each of the ranks' collectives (several GPUs), first "
             "waits a random 0..N microseconds on its stream; the results must not change"},
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
    {.name = "profile",
     .type = KEY_BOOL,
     .offset = FIELD(profile),
     .default_text = "false",
     .help =
         "time every op by class (GEMMs, attention forward and backward, LM head and loss, norms and element-wise, "
         "optimizer, copies and collectives waited for) and the compute stream's gaps: each step's seconds in metrics.jsonl and a "
         "table at the end (ops/op_profile.h); costs two timeline marks an op"},
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
     .help =
         "host memory the run may use, e.g. 24GiB; 0: the machine's physical memory (or the cgroup's limit, where lower) less a "
         "sixteenth (at least 4GiB, at most half on a machine of 8GiB or less) for the system and the GPU driver, shared by "
         "the host's processes"},
    /* execution */
    {.name = "device",
     .type = KEY_ENUM,
     .offset = FIELD(device),
     .default_text = "auto",
     .values = VALUE_NAMES(TT_DEVICE_VALUES),
     .help = "where the ops run; auto: cuda when tiertrain was built with CUDA and a GPU is present, else cpu"},
    {.name = "gpu_memory_budget",
     .type = KEY_BYTES,
     .offset = FIELD(gpu_memory_budget),
     .default_text = "0",
     .range = AT_LEAST(0),
     .help = "GPU memory the plan may use, e.g. 40GiB; 0: what the GPU has free at start"},
    {.name = "gpu",
     .type = KEY_STRING,
     .offset = FIELD(gpu),
     .default_text = "~",
     .help = "tiertrain plan on a machine without a GPU: price the run for this GPU (h200, h100-80gb; with device: "
             "cuda), its memory the budget unless gpu_memory_budget says; ~: the GPU of this machine"},
    {.name = "num_threads",
     .type = KEY_INT,
     .offset = FIELD(num_threads),
     .default_text = "0",
     .range = CLOSED(0, 1024), /* each thread has a stack: 100000 of them overflowed (and no host has as many cores) */
     .help = "CPU threads; 0: all cores (at most 1024), 1/N of them for each of a host's N processes of a run"},
    {.name = "progress",
     .type = KEY_BOOL,
     .offset = FIELD(progress),
     .default_text = "true",
     .help = "on a terminal, a live progress line rewritten at every step (false: the logged steps' lines alone, as "
             "off a terminal)"},
    {.name = "use_tensorboard",
     .type = KEY_BOOL,
     .offset = FIELD(use_tensorboard),
     .default_text = "false",
     .help = "TensorBoard event files of every step's and eval's metrics under output_dir/runs/ (axolotl's key)"},
    {.name = "bf16",
     .type = KEY_ENUM,
     .offset = FIELD(bf16),
     .default_text = "auto",
     .values = VALUE_NAMES(TT_BF16_VALUES),
     .help = "bf16 compute (weights and activations, fp32 accumulation); auto: on the GPU. The CPU backend "
             "computes in fp32 and the GPU backend in bf16, so true needs device cuda and false device cpu"},
    {.name = "attn_implementation",
     .type = KEY_ENUM,
     .offset = FIELD(attn_implementation),
     .default_text = "auto",
     .values = VALUE_NAMES(TT_ATTN_IMPLEMENTATION_VALUES),
     .help = "GPU attention kernels: cudnn (cuDNN's fused flash attention; its deterministic backward over head "
             "groups and key chunks that fit attn_workspace_limit, or with deterministic: false its backward that "
             "adds dQ with atomics), flash (tiertrain's own, deterministic: for Hopper the pipelined wgmma kernels "
             "at head_dim 64 and 128), simple (the reference kernels); auto: cuDNN's forward with tiertrain's "
             "pipelined deterministic backward at head_dim 128 (measured the faster deterministic backward), "
             "elsewhere cuDNN's deterministic backward where a chunking of its dP fits attn_workspace_limit, else "
             "tiertrain's own kernels. The CPU backend has one"},
    {.name = "deterministic",
     .type = KEY_BOOL,
     .offset = FIELD(deterministic),
     .default_text = "true",
     .help = "bit-reproducible gradients: every kernel adds in a fixed order (the GPU attention backward's dQ "
             "without atomics), so a run repeats its bits. false lets attn_implementation auto and cudnn take "
             "cuDNN's attention backward with atomic dQ adds where it has it (faster at long context, not "
             "reproducible)"},
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
     .not_yet_reason = ": tiertrain's mixed precision is bf16 (bf16: true, the GPU's) with fp32 master weights",
     .help = "fp16 compute (only false: the GPU computes in bf16)"},
    {.name = "tf32",
     .type = KEY_BOOL,
     .offset = FIELD(tf32),
     .default_text = "false",
     .help = "transformers' tf32 matmuls for fp32 GEMMs; accepted either way and changes nothing: tiertrain's GEMMs "
             "take bf16 inputs on the GPU (fp32 accumulation) and fp32 on the CPU"},
    /* keys of later features (RESERVED(key, what)): accepted only with their off value; none at the moment */
};

const int cfg_key_count = (int)(sizeof cfg_keys / sizeof cfg_keys[0]);

/* ---- the key table ---- */

const key_spec *cfg_find_key(const char *name) {
    for (int i = 0; i < cfg_key_count; i++)
        if (strcmp(cfg_keys[i].name, name) == 0) return &cfg_keys[i];
    return NULL;
}

/* Is text one of the '|'-separated names in list? Its index, or -1. */
int cfg_index_in_list(const char *list, const char *text, bool ignore_case) {
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
const char *cfg_name_in_list(const char *list, int index, char *buf, size_t size) {
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
const char *cfg_list_with_commas(const char *list, char *buf, size_t size) {
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
const char *cfg_available_values(const key_spec *k, char *buf, size_t size) {
    buf[0] = 0;
    char name[64];
    for (const char *p = k->values; p; p = strchr(p, '|'), p = p ? p + 1 : NULL) {
        const char *bar = strchr(p, '|');
        snprintf(name, sizeof name, "%.*s", bar ? (int)(bar - p) : (int)strlen(p), p);
        if (cfg_index_in_list(k->not_yet_values, name, false) >= 0) continue;
        size_t used = strlen(buf);
        snprintf(buf + used, size - used, "%s%s", used ? "|" : "", name);
    }
    return buf;
}

static void format_number(double v, char *buf, size_t size) { snprintf(buf, size, "%.15g", v); }

/* ">= 1", "> 0", "in [0, 1)", or "" when unlimited. */
const char *cfg_range_text(const value_range *r, char *buf, size_t size) {
    char lo[32], hi[32];
    format_number(r->min, lo, sizeof lo);
    format_number(r->max, hi, sizeof hi);
    if (r->has_min && r->has_max)
        snprintf(buf, size, "in %s%s, %s%s", r->min_open ? "(" : "[", lo, hi, r->max_open ? ")" : "]");
    else if (r->has_min) snprintf(buf, size, "%s %s", r->min_open ? ">" : ">=", lo);
    else if (r->has_max) snprintf(buf, size, "%s %s", r->max_open ? "<" : "<=", hi);
    else buf[0] = 0;
    return buf;
}

bool cfg_in_range(const value_range *r, double v) {
    if (r->has_min && (r->min_open ? !(v > r->min) : !(v >= r->min))) return false;
    if (r->has_max && (r->max_open ? !(v < r->max) : !(v <= r->max))) return false;
    return true;
}

const char *cfg_type_name(const key_spec *k) {
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
const char *cfg_valid_text(const key_spec *k, char *buf, size_t size) {
    char range[96], values[128];
    cfg_range_text(&k->range, range, sizeof range);
    switch (k->type) {
    case KEY_BOOL: snprintf(buf, size, "%s", k->not_yet_values ? "false (true: not yet)" : "true, false"); break;
    case KEY_INT:
        if (k->minus_one_unset) snprintf(buf, size, "%s, or -1 (not given)", range);
        else snprintf(buf, size, "%s", range[0] ? range : "any integer");
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
        cfg_list_with_commas(cfg_available_values(k, available, sizeof available), values, sizeof values);
        if (k->not_yet_values) {
            char later[128];
            cfg_list_with_commas(k->not_yet_values, later, sizeof later);
            if (strlen(values) + strlen(later) + 12 <= 30) /* fits the --help column */
                snprintf(buf, size, "%s (%s: not yet)", values, later);
            else snprintf(buf, size, "%s (others: not yet)", values);
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
    for (size_t j = 0; j <= m; j++) row[j] = (int)j;
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

void cfg_die_unknown_key(const source *src, const yaml_node_t *node, const char *name) {
    const char *list_hint = "`tiertrain train --help` lists every key";
    /* Another tool's name for a key we have: TRL / transformers, Megatron, LLaMA-Factory. */
    for (int i = 0; i < cfg_key_count; i++)
        if (cfg_index_in_list(cfg_keys[i].known_as, name, true) >= 0)
            cfg_die_at(src, node, "unknown key '%s'; tiertrain calls it '%s' (%s)", name, cfg_keys[i].name, list_hint);
    /* A namespaced name, as Megatron's overrides write them: optimizer.optimizer_cpu_offload. */
    const char *dot = strrchr(name, '.');
    if (dot && cfg_find_key(dot + 1))
        cfg_die_at(src, node, "unknown key '%s'; did you mean '%s'? (tiertrain's keys have no namespace; %s)", name,
                   dot + 1, list_hint);
    size_t length = strlen(name);
    int allowed = length <= 4 ? 1 : length <= 8 ? 2 : 3;
    const key_spec *closest = NULL;
    int best = allowed + 1;
    for (int i = 0; i < cfg_key_count; i++) {
        int d = edit_distance(name, cfg_keys[i].name);
        if (d < best) {
            best = d;
            closest = &cfg_keys[i];
        }
    }
    if (closest) cfg_die_at(src, node, "unknown key '%s'; did you mean '%s'? (%s)", name, closest->name, list_hint);
    cfg_die_at(src, node, "unknown key '%s' (%s)", name, list_hint);
}
