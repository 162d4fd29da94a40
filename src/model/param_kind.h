/* The role of a parameter in a model: what the step program and the views call it, whatever its Hugging Face
 * name in a family (arch.h gives the names; Gemma's post_attention_layernorm is a post-norm, Llama's the MLP's
 * pre-norm). */
#ifndef TT_MODEL_PARAM_KIND_H
#define TT_MODEL_PARAM_KIND_H

#include <stdbool.h>

typedef enum tt_param_kind {
    TT_PARAM_EMBED,          /* [V, D] model.embed_tokens.weight */
    TT_PARAM_ATTN_NORM,      /* [D] the attention's pre-norm (input_layernorm) */
    TT_PARAM_WQ,             /* [Hq*hd, D] */
    TT_PARAM_BQ,             /* [Hq*hd] (attention_bias) */
    TT_PARAM_WK,             /* [Hkv*hd, D] */
    TT_PARAM_BK,             /* [Hkv*hd] */
    TT_PARAM_WV,             /* [Hkv*hd, D] */
    TT_PARAM_BV,             /* [Hkv*hd] */
    TT_PARAM_WO,             /* [D, Hq*hd] */
    TT_PARAM_BO,             /* [D] (attention_bias where o_proj takes it too: Llama's, not Qwen2's) */
    TT_PARAM_Q_NORM,         /* [hd] (qk_norm per head; [Hq*hd] over the whole projection) */
    TT_PARAM_K_NORM,         /* [hd] ([Hkv*hd]) */
    TT_PARAM_ATTN_POST_NORM, /* [D] the norm after attention (Gemma's and OLMo 2's post_attention_layernorm) */
    TT_PARAM_MLP_NORM, /* [D] the MLP's pre-norm (Llama's post_attention_layernorm, Gemma's pre_feedforward_layernorm) */
    TT_PARAM_W_GATE,   /* [F, D] */
    TT_PARAM_W_UP,     /* [F, D] */
    TT_PARAM_W_DOWN,   /* [D, F] */
    TT_PARAM_MLP_POST_NORM, /* [D] the norm after the MLP (post_feedforward_layernorm) */
    TT_PARAM_W_QKV,         /* [(Hq + 2 Hkv)*hd, D] q, k and v's rows in one (Phi-3's qkv_proj) */
    TT_PARAM_W_GATE_UP,     /* [2F, D] gate's rows, then up's (Phi-3's gate_up_proj) */
    TT_PARAM_FINAL_NORM,    /* [D] model.norm */
    TT_PARAM_LM_HEAD,       /* [V, D] (absent when tied) */
    TT_PARAM_ROUTER,        /* [E, D] a mixture of experts' router (Qwen3-MoE's mlp.gate.weight) */
    TT_PARAM_EXPERT_GATE,   /* [Fm, D] one expert's gate_proj (tt_param_info.expert); the E of a layer back to back */
    TT_PARAM_EXPERT_UP,     /* [Fm, D] */
    TT_PARAM_EXPERT_DOWN,   /* [D, Fm] */
    TT_PARAM_LORA_A,        /* [r, in] of the linear layer lora_module */
    TT_PARAM_LORA_B,        /* [out, r] */
    TT_PARAM_KIND_COUNT
} tt_param_kind;

/* Whether a parameter kind is the weight of a decoder layer's linear layer (what QLoRA quantizes). */
bool tt_param_kind_is_linear_weight(tt_param_kind kind);
/* Whether a parameter kind is one expert's projection of a mixture of experts (one parameter per expert). */
static inline bool tt_param_kind_is_expert(tt_param_kind kind) {
    return kind == TT_PARAM_EXPERT_GATE || kind == TT_PARAM_EXPERT_UP || kind == TT_PARAM_EXPERT_DOWN;
}
/* Whether a parameter kind is the weight of a norm (no weight decay; a fresh model starts it at 1, or at 0 where
 * the norm multiplies by 1 + w). */
bool tt_param_kind_is_norm(tt_param_kind kind);

#endif
