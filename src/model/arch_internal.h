/* The tables several families' descriptions share (arch_*.c). */
#ifndef TT_MODEL_ARCH_INTERNAL_H
#define TT_MODEL_ARCH_INTERNAL_H

#include "model/arch.h"

#define TT_COUNT_OF(array) ((int)(sizeof(array) / sizeof((array)[0])))

/* A description's decoder layer: its parameters, its linear layers and its slot table, counts taken from the arrays. */
#define TT_ARCH_LAYER(params, linears, slot_table)                                                  \
    .layer_params = (params), .layer_param_count = TT_COUNT_OF(params), .linear_layers = (linears), \
    .linear_layer_count = TT_COUNT_OF(linears), .slots = &(slot_table)

/* Llama's decoder layer: input_layernorm, q/k/v/o (with their biases under attention_bias), post_attention_layernorm
 * (the MLP's pre-norm), gate, up, down. */
extern const tt_layer_param tt_llama_layer_params[13];
/* Qwen3's attention half: input_layernorm, q/k/v/o (their biases under attention_bias, o_proj's too), q_norm and
 * k_norm per head; then post_attention_layernorm, the MLP's pre-norm (Qwen3 and Qwen3-MoE). */
#define TT_QWEN3_ATTENTION_PARAMS                                                                          \
    {TT_PARAM_ATTN_NORM, "input_layernorm.weight", TT_DIM_HIDDEN, TT_DIM_ONE, TT_PRESENT_ALWAYS},          \
        {TT_PARAM_WQ, "self_attn.q_proj.weight", TT_DIM_Q, TT_DIM_HIDDEN, TT_PRESENT_ALWAYS},              \
        {TT_PARAM_BQ, "self_attn.q_proj.bias", TT_DIM_Q, TT_DIM_ONE, TT_PRESENT_WITH_ATTENTION_BIAS},      \
        {TT_PARAM_WK, "self_attn.k_proj.weight", TT_DIM_KV, TT_DIM_HIDDEN, TT_PRESENT_ALWAYS},             \
        {TT_PARAM_BK, "self_attn.k_proj.bias", TT_DIM_KV, TT_DIM_ONE, TT_PRESENT_WITH_ATTENTION_BIAS},     \
        {TT_PARAM_WV, "self_attn.v_proj.weight", TT_DIM_KV, TT_DIM_HIDDEN, TT_PRESENT_ALWAYS},             \
        {TT_PARAM_BV, "self_attn.v_proj.bias", TT_DIM_KV, TT_DIM_ONE, TT_PRESENT_WITH_ATTENTION_BIAS},     \
        {TT_PARAM_WO, "self_attn.o_proj.weight", TT_DIM_HIDDEN, TT_DIM_Q, TT_PRESENT_ALWAYS},              \
        {TT_PARAM_BO, "self_attn.o_proj.bias", TT_DIM_HIDDEN, TT_DIM_ONE, TT_PRESENT_WITH_ATTENTION_BIAS}, \
        {TT_PARAM_Q_NORM, "self_attn.q_norm.weight", TT_DIM_HEAD, TT_DIM_ONE, TT_PRESENT_ALWAYS},          \
        {TT_PARAM_K_NORM, "self_attn.k_norm.weight", TT_DIM_HEAD, TT_DIM_ONE, TT_PRESENT_ALWAYS}, {        \
        TT_PARAM_MLP_NORM, "post_attention_layernorm.weight", TT_DIM_HIDDEN, TT_DIM_ONE, TT_PRESENT_ALWAYS \
    }

/* q, k, v, o, gate, up, down: the linear layers of every family with separate projections. */
extern const tt_linear_layer tt_llama_linear_layers[7];
/* The slots of a pre-norm layer whose q and k come straight from their projections. */
extern const tt_layer_slots tt_llama_slots;

/* The descriptions (arch.c lists them). */
extern const tt_arch tt_arch_llama, tt_arch_mistral, tt_arch_qwen2, tt_arch_qwen3, tt_arch_gemma2, tt_arch_gemma3_text,
    tt_arch_gemma3, tt_arch_olmo2, tt_arch_smollm3, tt_arch_granite, tt_arch_phi3, tt_arch_qwen3_moe;

#endif
