/* Llama (1 to 3.x, llama3 RoPE scaling) and Mistral (a sliding window over every layer): pre-norm decoder layers
 * with separate q/k/v projections (biases with attention_bias), RoPE, grouped-query attention and a SwiGLU MLP. */
#include "model/arch_internal.h"

#include <jansson.h>

#include "core/check.h"
#include "model/config_reader.h"
#include "model/slot_table.h"

/* clang-format off */
const tt_layer_param tt_llama_layer_params[13] = {
    {TT_PARAM_ATTN_NORM, "input_layernorm.weight", TT_DIM_HIDDEN, TT_DIM_ONE, TT_PRESENT_ALWAYS},
    {TT_PARAM_WQ, "self_attn.q_proj.weight", TT_DIM_Q, TT_DIM_HIDDEN, TT_PRESENT_ALWAYS},
    {TT_PARAM_BQ, "self_attn.q_proj.bias", TT_DIM_Q, TT_DIM_ONE, TT_PRESENT_WITH_ATTENTION_BIAS},
    {TT_PARAM_WK, "self_attn.k_proj.weight", TT_DIM_KV, TT_DIM_HIDDEN, TT_PRESENT_ALWAYS},
    {TT_PARAM_BK, "self_attn.k_proj.bias", TT_DIM_KV, TT_DIM_ONE, TT_PRESENT_WITH_ATTENTION_BIAS},
    {TT_PARAM_WV, "self_attn.v_proj.weight", TT_DIM_KV, TT_DIM_HIDDEN, TT_PRESENT_ALWAYS},
    {TT_PARAM_BV, "self_attn.v_proj.bias", TT_DIM_KV, TT_DIM_ONE, TT_PRESENT_WITH_ATTENTION_BIAS},
    {TT_PARAM_WO, "self_attn.o_proj.weight", TT_DIM_HIDDEN, TT_DIM_Q, TT_PRESENT_ALWAYS},
    {TT_PARAM_BO, "self_attn.o_proj.bias", TT_DIM_HIDDEN, TT_DIM_ONE, TT_PRESENT_WITH_ATTENTION_BIAS},
    {TT_PARAM_MLP_NORM, "post_attention_layernorm.weight", TT_DIM_HIDDEN, TT_DIM_ONE, TT_PRESENT_ALWAYS},
    {TT_PARAM_W_GATE, "mlp.gate_proj.weight", TT_DIM_FFN, TT_DIM_HIDDEN, TT_PRESENT_ALWAYS},
    {TT_PARAM_W_UP, "mlp.up_proj.weight", TT_DIM_FFN, TT_DIM_HIDDEN, TT_PRESENT_ALWAYS},
    {TT_PARAM_W_DOWN, "mlp.down_proj.weight", TT_DIM_HIDDEN, TT_DIM_FFN, TT_PRESENT_ALWAYS},
};

/* q, k, v, o, gate, up, down: the linear layers of every family with separate projections */
const tt_linear_layer tt_llama_linear_layers[7] = {
    {TT_LORA_Q, TT_PARAM_WQ, TT_DIM_HIDDEN, TT_DIM_Q, 0, {{0}}},
    {TT_LORA_K, TT_PARAM_WK, TT_DIM_HIDDEN, TT_DIM_KV, 0, {{0}}},
    {TT_LORA_V, TT_PARAM_WV, TT_DIM_HIDDEN, TT_DIM_KV, 0, {{0}}},
    {TT_LORA_O, TT_PARAM_WO, TT_DIM_Q, TT_DIM_HIDDEN, 0, {{0}}},
    {TT_LORA_GATE, TT_PARAM_W_GATE, TT_DIM_HIDDEN, TT_DIM_FFN, 0, {{0}}},
    {TT_LORA_UP, TT_PARAM_W_UP, TT_DIM_HIDDEN, TT_DIM_FFN, 0, {{0}}},
    {TT_LORA_DOWN, TT_PARAM_W_DOWN, TT_DIM_FFN, TT_DIM_HIDDEN, 0, {{0}}},
};

const tt_layer_slots tt_llama_slots = {
    .architecture = "llama",
    .slot = {TT_SLOTS_PRE_NORM_LAYER(TT_SLOTS_QK_PROJECTED)},
};
/* clang-format on */

/* Mistral's sliding_window (null: full attention) applies to every layer. */
static void read_mistral_config(const tt_config_reader *r, tt_model_config *c) {
    c->sliding_window = tt_config_int(r, "sliding_window", false, 0);
    if (c->sliding_window < 0)
        tt_die("%s: key \"sliding_window\" is %lld; it must be positive, or null for full attention", r->path,
               (long long)c->sliding_window);
}

/* transformers' MistralConfig defaults sliding_window to 4096, so full attention is an explicit null. */
static void write_mistral_config(json_t *root, const tt_model_config *c) {
    json_object_set_new(root, "sliding_window", c->sliding_window > 0 ? json_integer(c->sliding_window) : json_null());
}

const tt_arch tt_arch_llama = {
    .model_type = "llama",
    .architecture = "LlamaForCausalLM",
    .block = TT_BLOCK_DENSE,
    .norm_placement = TT_NORM_PRE,
    .activation = TT_GLU_SILU,
    .qk_norm = TT_QK_NORM_NONE,
    TT_ARCH_LAYER(tt_llama_layer_params, tt_llama_linear_layers, tt_llama_slots),
};

const tt_arch tt_arch_mistral = {
    .model_type = "mistral",
    .architecture = "MistralForCausalLM",
    .block = TT_BLOCK_DENSE,
    .norm_placement = TT_NORM_PRE,
    .activation = TT_GLU_SILU,
    .qk_norm = TT_QK_NORM_NONE,
    TT_ARCH_LAYER(tt_llama_layer_params, tt_llama_linear_layers, tt_llama_slots),
    .read_config = read_mistral_config,
    .write_config = write_mistral_config,
};
