/* The linear layers of a decoder layer that can carry a LoRA adapter, in PEFT's names (q_proj ...
 * down_proj). lora_target_modules is a set of these: bit m is module m. */
#ifndef TT_MODEL_LORA_MODULES_H
#define TT_MODEL_LORA_MODULES_H

typedef enum tt_lora_module {
    TT_LORA_Q,    /* self_attn.q_proj */
    TT_LORA_K,    /* self_attn.k_proj */
    TT_LORA_V,    /* self_attn.v_proj */
    TT_LORA_O,    /* self_attn.o_proj */
    TT_LORA_GATE, /* mlp.gate_proj */
    TT_LORA_UP,   /* mlp.up_proj */
    TT_LORA_DOWN, /* mlp.down_proj */
    /* fused layers (Phi-3): one adapter over q, k and v's rows, one over gate's and up's */
    TT_LORA_QKV,     /* self_attn.qkv_proj */
    TT_LORA_GATE_UP, /* mlp.gate_up_proj */
    TT_LORA_MODULE_COUNT
} tt_lora_module;
#define TT_LORA_ALL_MODULES ((1u << TT_LORA_MODULE_COUNT) - 1u)
/* q, k, v, o, gate, up, down: every linear layer of a family with separate projections (Llama's) */
#define TT_LORA_SEPARATE_MODULES ((1u << TT_LORA_QKV) - 1u)

/* "q_proj", ..., "down_proj", "qkv_proj", "gate_up_proj" */
const char *tt_lora_module_name(tt_lora_module module);
/* "q", ..., "down": the short names lora_target_modules also takes */
const char *tt_lora_module_short_name(tt_lora_module module);
/* "self_attn.q_proj", ..., "mlp.down_proj": the module's path inside a decoder layer */
const char *tt_lora_module_path(tt_lora_module module);

/* PEFT's modules_to_save: a part of the base that a LoRA run trains whole and saves with the adapters. */
typedef enum tt_saved_module {
    TT_SAVE_EMBED_TOKENS = 1u << 0, /* the embedding */
    TT_SAVE_LM_HEAD = 1u << 1,      /* the LM head (untied) */
} tt_saved_module;

#endif
