/* The fields of a model config (model_config.h reads and writes them from config.json): the shape every
 * description of a family (arch.h) sizes its parameters and slots from. */
#ifndef TT_MODEL_MODEL_CONFIG_FIELDS_H
#define TT_MODEL_MODEL_CONFIG_FIELDS_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/dtype.h"
#include "ops/quant4.h"

/* The largest head_dim accepted (published models of these families use 64 to 256). */
#define TT_MAX_HEAD_DIM 1024

typedef enum tt_rope_type {
    TT_ROPE_DEFAULT,  /* inv_freq_i = theta^(-2i / rotary_dim) */
    TT_ROPE_LLAMA3,   /* Llama 3.1's band-wise scaling (factor, low/high_freq_factor, original max position) */
    TT_ROPE_LINEAR,   /* inv_freq / factor (Gemma 3's full-attention layers at 4B and up) */
    TT_ROPE_LONGROPE, /* Phi-3's: inv_freq_i / ext_i (short or long factors by sequence length), cos and sin times the
                         attention factor */
} tt_rope_type;

/* Which RoPE table a decoder layer reads (tt_layer_attention.rope). */
#define TT_ROPE_TABLE_GLOBAL 0  /* the model's (rope_theta, rope_type) */
#define TT_ROPE_TABLE_LOCAL 1   /* Gemma 3's sliding layers' (rope_local_theta, default type) */
#define TT_ROPE_TABLE_NONE (-1) /* no RoPE (SmolLM3's NoPE layers) */
#define TT_ROPE_TABLES 2

/* How one decoder layer attends. */
typedef struct tt_layer_attention {
    bool sliding; /* attends over the sliding_window last tokens (Gemma's sliding_attention layers), else causal */
    int8_t rope;  /* TT_ROPE_TABLE_GLOBAL, _LOCAL or _NONE */
} tt_layer_attention;

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
    /* LongRoPE (Phi-3): [rotary_dim / 2] each (NULL otherwise); the long factors apply when the run's sequences are
     * longer than rope_original_max_position, as transformers switches by the largest position */
    float *rope_short_factor, *rope_long_factor;
    double rope_attention_factor; /* LongRoPE: cos and sin multiplied by it (0: 1) */
    double rope_local_theta;      /* the local table's theta (Gemma 3's rope_local_base_freq), 0: no local table */
    int64_t rotary_dim;           /* the leading dimensions of each head RoPE rotates (partial_rotary_factor x head_dim,
                                     Phi-4-mini); 0: head_dim */
    int64_t sliding_window;       /* 0: full causal attention (Mistral's window applies to every layer) */
    /* Per decoder layer [num_layers], or NULL: every layer alike (sliding when sliding_window > 0, the global RoPE) */
    tt_layer_attention *layer_attention;
    /* The softmax scale of attention, 0: 1 / sqrt(head_dim) (Gemma: query_pre_attn_scalar^-1/2; Granite:
     * attention_multiplier) */
    double attention_scale;
    double attention_softcap;   /* Gemma 2's attn_logit_softcapping, 0: none */
    double final_logit_softcap; /* Gemma 2's final_logit_softcapping, 0: none */
    /* Multipliers, 0 standing for 1 (none): of the embedding's output (Gemma: sqrt(hidden), rounded to the compute
     * dtype first as transformers' tensor of that dtype is, embedding_scale_in_compute_dtype; Granite:
     * embedding_multiplier), of each sublayer's output before the residual add (Granite's residual_multiplier) and of
     * the logits (Granite: 1 / logits_scaling) */
    double embedding_scale;
    bool embedding_scale_in_compute_dtype;
    double residual_scale;
    double logit_scale;
    /* Mixture of experts (Qwen3-MoE): every decoder layer's MLP is num_experts experts of moe_intermediate_size, each
     * token routed to num_experts_per_tok of them by a linear router; 0 experts: a dense MLP */
    int64_t num_experts;           /* E */
    int64_t num_experts_per_tok;   /* k */
    int64_t moe_intermediate_size; /* Fm */
    bool norm_topk_prob;           /* the k routing weights renormalized to sum to 1 */
    /* output_router_logits: the loss adds router_aux_loss_coef x the routers' load-balancing loss (Switch
     * Transformer's, as transformers' load_balancing_loss_func computes it over every layer's tokens) */
    bool output_router_logits;
    double router_aux_loss_coef;
    bool tie_word_embeddings;           /* LM head shares the embedding matrix */
    bool attention_bias;                /* q/k/v projections have biases (Qwen2) */
    tt_dtype dtype;                     /* storage dtype of the checkpoint (torch_dtype / dtype) */
    tt_model_quantization quantization; /* quantization_config (a checkpoint saved quantized) */
    int64_t bos_token_id, eos_token_id; /* -1 when absent */
    char *json_text;                    /* the original config.json, kept to write it back unchanged */
} tt_model_config;

/* The fields' defaults spelled out (0 stands for them). */
static inline int64_t tt_model_rotary_dim(const tt_model_config *c) {
    return c->rotary_dim ? c->rotary_dim : c->head_dim;
}
static inline double tt_model_attention_scale(const tt_model_config *c) {
    return c->attention_scale ? c->attention_scale : 1.0 / sqrt((double)c->head_dim);
}
static inline double tt_model_residual_scale(const tt_model_config *c) {
    return c->residual_scale ? c->residual_scale : 1.0;
}
static inline double tt_model_logit_scale(const tt_model_config *c) { return c->logit_scale ? c->logit_scale : 1.0; }

/* How decoder layer l attends: its own entry, or the model's (sliding where sliding_window is set, the global RoPE). */
static inline tt_layer_attention tt_model_layer_attention(const tt_model_config *c, int64_t l) {
    if (c->layer_attention) return c->layer_attention[l];
    return (tt_layer_attention){.sliding = c->sliding_window > 0, .rope = TT_ROPE_TABLE_GLOBAL};
}

#endif
