/* OLMo 2: no pre-norms; a norm after attention and after the MLP joins each to the residual stream
 * (post_attention_layernorm, post_feedforward_layernorm), q/k norms over the whole projection before RoPE. */
#include "model/arch_internal.h"

#include "model/slot_table.h"

/* clang-format off */
static const tt_layer_param olmo2_layer_params[] = {
    {TT_PARAM_WQ, "self_attn.q_proj.weight", TT_DIM_Q, TT_DIM_HIDDEN, TT_PRESENT_ALWAYS},
    {TT_PARAM_BQ, "self_attn.q_proj.bias", TT_DIM_Q, TT_DIM_ONE, TT_PRESENT_WITH_ATTENTION_BIAS},
    {TT_PARAM_WK, "self_attn.k_proj.weight", TT_DIM_KV, TT_DIM_HIDDEN, TT_PRESENT_ALWAYS},
    {TT_PARAM_BK, "self_attn.k_proj.bias", TT_DIM_KV, TT_DIM_ONE, TT_PRESENT_WITH_ATTENTION_BIAS},
    {TT_PARAM_WV, "self_attn.v_proj.weight", TT_DIM_KV, TT_DIM_HIDDEN, TT_PRESENT_ALWAYS},
    {TT_PARAM_BV, "self_attn.v_proj.bias", TT_DIM_KV, TT_DIM_ONE, TT_PRESENT_WITH_ATTENTION_BIAS},
    {TT_PARAM_WO, "self_attn.o_proj.weight", TT_DIM_HIDDEN, TT_DIM_Q, TT_PRESENT_ALWAYS},
    {TT_PARAM_BO, "self_attn.o_proj.bias", TT_DIM_HIDDEN, TT_DIM_ONE, TT_PRESENT_WITH_ATTENTION_BIAS},
    {TT_PARAM_Q_NORM, "self_attn.q_norm.weight", TT_DIM_Q, TT_DIM_ONE, TT_PRESENT_ALWAYS},
    {TT_PARAM_K_NORM, "self_attn.k_norm.weight", TT_DIM_KV, TT_DIM_ONE, TT_PRESENT_ALWAYS},
    {TT_PARAM_ATTN_POST_NORM, "post_attention_layernorm.weight", TT_DIM_HIDDEN, TT_DIM_ONE, TT_PRESENT_ALWAYS},
    {TT_PARAM_W_GATE, "mlp.gate_proj.weight", TT_DIM_FFN, TT_DIM_HIDDEN, TT_PRESENT_ALWAYS},
    {TT_PARAM_W_UP, "mlp.up_proj.weight", TT_DIM_FFN, TT_DIM_HIDDEN, TT_PRESENT_ALWAYS},
    {TT_PARAM_W_DOWN, "mlp.down_proj.weight", TT_DIM_HIDDEN, TT_DIM_FFN, TT_PRESENT_ALWAYS},
    {TT_PARAM_MLP_POST_NORM, "post_feedforward_layernorm.weight", TT_DIM_HIDDEN, TT_DIM_ONE, TT_PRESENT_ALWAYS},
};

static const tt_layer_slots olmo2_slots = {
    .architecture = "olmo2",
    .slot = {TT_SLOTS_QKV_ADAPTERS, TT_SLOTS_QK_PROJECTION_NORMED, TT_SLOTS_ATTENTION, TT_SLOTS_ATTENTION_POST_NORM,
             TT_SLOTS_GLU_MLP("SwiGLU output"), TT_SLOTS_MLP_POST_NORM},
};
/* clang-format on */

const tt_arch tt_arch_olmo2 = {
    .model_type = "olmo2",
    .architecture = "Olmo2ForCausalLM",
    .block = TT_BLOCK_DENSE,
    .norm_placement = TT_NORM_POST,
    .activation = TT_GLU_SILU,
    .qk_norm = TT_QK_NORM_PROJECTION,
    TT_ARCH_LAYER(olmo2_layer_params, tt_llama_linear_layers, olmo2_slots),
};
