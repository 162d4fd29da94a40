/* Architectures as data: one description per model family (config.json's model_type). A description says what
 * the family is made of (how its decoder layer is put together, its norms, its activation, its attention
 * variants), its parameters under their Hugging Face names and shapes, the linear layers LoRA adapts, the slots
 * a layer's backward reads (saved_slots.h) and the block that runs a layer (train/block.h). The parameter table,
 * the parameter count, the LoRA shapes, the size table and the step program read a model's shape from here and
 * nowhere else, so adding a family is its description (arch_<family>.c, one line in arch.c's list), its block
 * when no existing one fits, and its tests.
 *
 * Llama, Mistral (arch_llama.c), Qwen2, Qwen3 (arch_qwen.c), Gemma 2 and 3 (arch_gemma.c), OLMo 2 (arch_olmo2.c),
 * SmolLM3 (arch_smollm3.c), Granite (arch_granite.c), Qwen3-MoE (arch_qwen_moe.c: the mixture-of-experts block). */
#ifndef TT_MODEL_ARCH_H
#define TT_MODEL_ARCH_H

#include <stdbool.h>
#include <stdint.h>

#include "model/lora_modules.h"
#include "model/model_config_fields.h"
#include "model/param_kind.h"
#include "model/saved_slots.h"
#include "ops/backend.h"

struct json_t;
struct tt_config_reader;

/* A size of a parameter or a linear layer, from the model config. */
typedef enum tt_dim {
    TT_DIM_ONE,     /* 1: the columns of a vector */
    TT_DIM_HIDDEN,  /* D, hidden_size */
    TT_DIM_HEAD,    /* hd, head_dim */
    TT_DIM_Q,       /* Hq * hd: the query projection's outputs */
    TT_DIM_KV,      /* Hkv * hd: a key or value projection's outputs */
    TT_DIM_FFN,     /* F, intermediate_size */
    TT_DIM_VOCAB,   /* V, vocab_size */
    TT_DIM_QKV,     /* (Hq + 2 Hkv) * hd: a fused q/k/v projection's outputs */
    TT_DIM_FFN2,    /* 2F: a fused gate/up projection's outputs */
    TT_DIM_EXPERTS, /* E, num_experts: the router's outputs */
    TT_DIM_MOE_FFN, /* Fm, moe_intermediate_size: an expert's intermediate */
} tt_dim;

/* The elements a dim stands for in a model. */
int64_t tt_dim_size(tt_dim dim, const tt_model_config *model);

/* When a layer parameter exists. */
typedef enum tt_param_presence {
    TT_PRESENT_ALWAYS,
    TT_PRESENT_WITH_ATTENTION_BIAS, /* config.json's attention_bias (Qwen2's q/k/v biases; Llama's o_proj's too) */
} tt_param_presence;

/* One parameter of every decoder layer: model.layers.<l>.<name>, [rows, cols] ([rows] when cols is TT_DIM_ONE). An
 * expert's (tt_param_kind_is_expert) is num_experts of them: name holds the expert's index as %d
 * ("mlp.experts.%d.up_proj.weight"), each [rows, cols], laid out back to back by expert. */
typedef struct tt_layer_param {
    tt_param_kind kind;
    const char *name;
    tt_dim rows, cols;
    tt_param_presence presence;
} tt_layer_param;

/* How many parameters a layer parameter is in a model: num_experts for an expert's, else 1. */
int64_t tt_layer_param_copies(const tt_layer_param *param, const tt_model_config *model);

/* A projection a fused linear layer computes: its rows of the layer's output (and of W). */
typedef struct tt_linear_part {
    tt_lora_module projection; /* the projection the rows are (TT_LORA_Q, ...: the block names projections so) */
    tt_dim rows;
} tt_linear_part;

/* A linear layer of a decoder layer, y = x W^T: which parameter is W, and its input and output sizes. A fused layer
 * (Phi-3's qkv_proj, gate_up_proj) computes several projections, its parts, in row order: one GEMM each over its rows
 * of W, one LoRA adapter (one down projection, B's rows split the same way). */
typedef struct tt_linear_layer {
    tt_lora_module module; /* its PEFT module name (lora_modules.h) */
    tt_param_kind weight;
    tt_dim in, out;
    int part_count; /* 0: the layer is its own projection */
    tt_linear_part parts[3];
} tt_linear_layer;

/* How a decoder layer is put together: which block of train/block.h runs it. */
typedef enum tt_block_kind {
    TT_BLOCK_DENSE, /* an attention half and a gated MLP half, each joined to the residual stream (block_dense.c) */
    TT_BLOCK_MOE,   /* the dense block's attention half and a mixture of gated MLP experts (block_moe.c) */
} tt_block_kind;

/* Where a dense layer's RMSNorms sit around each half f (attention, MLP). */
typedef enum tt_norm_placement {
    TT_NORM_PRE,      /* Llama: h = x + f(norm(x)) */
    TT_NORM_SANDWICH, /* Gemma: h = x + norm_after(f(norm_before(x))) */
    TT_NORM_POST,     /* OLMo 2: h = x + norm(f(x)) */
} tt_norm_placement;

/* Normalization of q and k before RoPE. */
typedef enum tt_qk_norm {
    TT_QK_NORM_NONE,
    TT_QK_NORM_PER_HEAD,   /* RMSNorm over each head's hd values (Qwen3, Gemma 3) */
    TT_QK_NORM_PROJECTION, /* RMSNorm over the whole projection, Hq*hd (Hkv*hd for k) values a token (OLMo 2) */
} tt_qk_norm;

typedef struct tt_arch {
    const char *model_type;   /* config.json's model_type */
    const char *architecture; /* the transformers class a written config.json names */
    tt_block_kind block;
    tt_norm_placement norm_placement;
    float norm_weight_offset; /* 1: every RMSNorm multiplies by (1 + w), w starting at 0 (Gemma); 0: by w */
    tt_glu_activation activation;
    tt_qk_norm qk_norm;
    bool tied_by_default;      /* tie_word_embeddings when config.json does not say (Gemma, SmolLM3: true) */
    double rope_theta_default; /* rope_theta when config.json does not say (0: 10000) */
    /* A language model inside a larger model's checkpoint (Gemma3ForConditionalGeneration): the key of its config in
     * config.json (NULL: the top level), and the prefix of its weights' names and of the messages' keys */
    const char *text_config, *text_config_prefix;
    const char *weight_prefix; /* the decoder's name prefix (NULL: "model.") */
    const char *lm_head_name;  /* the LM head's name (NULL: "lm_head.weight") */
    /* PEFT's module path of the decoder layers in the transformers model (NULL: "model.layers."): the names of the
     * adapters (base_model.model.<path><l>.<module>.lora_A.weight) and, where it is not the default, the regex
     * target_modules that keeps peft's adapters off the other towers */
    const char *peft_layers;
    /* the decoder layer's parameters in checkpoint order (each layer's block is contiguous in the flat buffer) */
    const tt_layer_param *layer_params;
    int layer_param_count;
    /* its linear layers, in PEFT's module order */
    const tt_linear_layer *linear_layers;
    int linear_layer_count;
    const tt_layer_slots *slots; /* what a layer's backward reads */
    /* The family's own keys of config.json, read after the common ones (model_config.c) through r (NULL: none):
     * they may refuse a setting the family does not train, or set fields the common reader leaves at defaults. */
    void (*read_config)(const struct tt_config_reader *r, tt_model_config *model);
    /* The family's own keys of a config.json written from the fields (a config built in code), or NULL. */
    void (*write_config)(struct json_t *root, const tt_model_config *model);
} tt_arch;

/* The description of a model_type, or NULL when tiertrain does not train it. */
const tt_arch *tt_arch_find(const char *model_type);
/* The description of a model (its model_type must be one tt_arch_find knows). */
const tt_arch *tt_arch_of(const tt_model_config *model);
/* Every family, by index (0 .. tt_arch_family_count() - 1), in the order messages list them. */
int tt_arch_family_count(void);
const tt_arch *tt_arch_family(int index);
/* "llama, mistral, qwen2, ...": the model_types tiertrain trains, for messages. */
const char *tt_arch_supported_types(void);

/* The set of tt_lora_module a model's linear layers offer (lora_target_modules: all-linear). */
unsigned tt_arch_lora_modules(const tt_model_config *model);
/* The linear layer of LoRA module m in a model, or NULL when its family has none. */
const tt_linear_layer *tt_arch_linear_layer(const tt_model_config *model, tt_lora_module module);
/* W's shape of module m's linear layer: [out, in]. */
void tt_arch_linear_shape(const tt_model_config *model, tt_lora_module module, int64_t *in, int64_t *out);
/* The table of a model's saved slots (its family's). */
const tt_layer_slots *tt_layer_slots_for(const tt_model_config *model);
/* Where a model computes projection p (TT_LORA_Q ... TT_LORA_DOWN): the linear layer (its own, or the fused one
 * holding it), its part (0 for its own) and its rows of that layer's output: [*first_row, *first_row + *rows). */
const tt_linear_layer *tt_arch_projection(const tt_model_config *model, tt_lora_module projection, int *part,
                                          int64_t *first_row, int64_t *rows);
/* Whether a layer parameter exists in a model. */
bool tt_layer_param_present(const tt_layer_param *param, const tt_model_config *model);

#endif
