/* The fields of a model config (model_config.h reads and writes them from config.json): the shape every
 * description of a family (arch.h) sizes its parameters and slots from. */
#ifndef TT_MODEL_MODEL_CONFIG_FIELDS_H
#define TT_MODEL_MODEL_CONFIG_FIELDS_H

#include <stdbool.h>
#include <stdint.h>

#include "core/dtype.h"
#include "ops/quant4.h"

/* The largest head_dim accepted (published models of these families use 64 to 256). */
#define TT_MAX_HEAD_DIM 1024

typedef enum tt_rope_type { TT_ROPE_DEFAULT, TT_ROPE_LLAMA3 } tt_rope_type;

/* config.json's quantization_config: how a checkpoint saved quantized stores its weights (transformers'
 * BitsAndBytesConfig and the other quantizers). present false for a checkpoint in a float dtype. */
typedef struct tt_model_quantization {
    bool present;
    char method[32]; /* quant_method: "bitsandbytes", "gptq", ... ("" when absent) */
    bool load_in_4bit, load_in_8bit;
    tt_quant4_format format; /* 4-bit: bnb_4bit_quant_type (nf4 default) and bnb_4bit_use_double_quant */
    /* A 4-bit checkpoint's linear weights kept in its float dtype (llm_int8_skip_modules: transformers leaves those
     * modules unconverted, as Unsloth's dynamic 4-bit saves do with some layers): [num_layers], bit k set when layer
     * l's parameter of kind k (tt_param_kind, the seven linear weights) is stored in float. NULL when none or until
     * tt_bnb_find_float_linear has read the checkpoint. */
    uint32_t *float_linear;
} tt_model_quantization;

typedef struct tt_model_config {
    char model_type[32];       /* config.json's: the family (arch.h: tt_arch_of) */
    int64_t vocab_size;        /* V */
    int64_t hidden_size;       /* D */
    int64_t intermediate_size; /* F */
    int64_t num_layers;        /* L */
    int64_t num_heads;         /* Hq */
    int64_t num_kv_heads;      /* Hkv, divides Hq */
    int64_t head_dim;          /* hd (explicit in Qwen3; else D / Hq) */
    int64_t max_position_embeddings;
    double rms_norm_eps;
    double initializer_range; /* std of a random init (config.json's, default 0.02) */
    double rope_theta;
    tt_rope_type rope_type;
    double rope_factor; /* llama3 scaling only */
    double rope_low_freq_factor;
    double rope_high_freq_factor;
    int64_t rope_original_max_position; /* original_max_position_embeddings */
    int64_t sliding_window;             /* 0: full causal attention (Mistral's window applies to every layer) */
    bool tie_word_embeddings;           /* LM head shares the embedding matrix */
    bool attention_bias;                /* q/k/v projections have biases (Qwen2) */
    tt_dtype dtype;                     /* storage dtype of the checkpoint (torch_dtype / dtype) */
    tt_model_quantization quantization; /* quantization_config (a checkpoint saved quantized) */
    int64_t bos_token_id, eos_token_id; /* -1 when absent */
    char *json_text;                    /* the original config.json, kept to write it back unchanged */
} tt_model_config;

#endif
