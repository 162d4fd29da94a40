/* Qwen2 / Qwen2.5 (Llama's layer with q/k/v biases by default) and Qwen3 (RMSNorm per head on q and k before RoPE,
 * no biases by default). Their sliding windows (use_sliding_window) are not trained: refused. */
#include "model/arch_internal.h"

#include <jansson.h>

#include "core/check.h"
#include "model/config_reader.h"
#include "model/slot_table.h"

/* clang-format off */
/* Qwen2's o_proj has no bias, whatever attention_bias says (its q/k/v biases do) */
static const tt_layer_param qwen2_layer_params[] = {
    {TT_PARAM_ATTN_NORM, "input_layernorm.weight", TT_DIM_HIDDEN, TT_DIM_ONE, TT_PRESENT_ALWAYS},
    {TT_PARAM_WQ, "self_attn.q_proj.weight", TT_DIM_Q, TT_DIM_HIDDEN, TT_PRESENT_ALWAYS},
    {TT_PARAM_BQ, "self_attn.q_proj.bias", TT_DIM_Q, TT_DIM_ONE, TT_PRESENT_WITH_ATTENTION_BIAS},
    {TT_PARAM_WK, "self_attn.k_proj.weight", TT_DIM_KV, TT_DIM_HIDDEN, TT_PRESENT_ALWAYS},
    {TT_PARAM_BK, "self_attn.k_proj.bias", TT_DIM_KV, TT_DIM_ONE, TT_PRESENT_WITH_ATTENTION_BIAS},
    {TT_PARAM_WV, "self_attn.v_proj.weight", TT_DIM_KV, TT_DIM_HIDDEN, TT_PRESENT_ALWAYS},
    {TT_PARAM_BV, "self_attn.v_proj.bias", TT_DIM_KV, TT_DIM_ONE, TT_PRESENT_WITH_ATTENTION_BIAS},
    {TT_PARAM_WO, "self_attn.o_proj.weight", TT_DIM_HIDDEN, TT_DIM_Q, TT_PRESENT_ALWAYS},
    {TT_PARAM_MLP_NORM, "post_attention_layernorm.weight", TT_DIM_HIDDEN, TT_DIM_ONE, TT_PRESENT_ALWAYS},
    {TT_PARAM_W_GATE, "mlp.gate_proj.weight", TT_DIM_FFN, TT_DIM_HIDDEN, TT_PRESENT_ALWAYS},
    {TT_PARAM_W_UP, "mlp.up_proj.weight", TT_DIM_FFN, TT_DIM_HIDDEN, TT_PRESENT_ALWAYS},
    {TT_PARAM_W_DOWN, "mlp.down_proj.weight", TT_DIM_HIDDEN, TT_DIM_FFN, TT_PRESENT_ALWAYS},
};

/* Qwen3's attention is Llama's: o_proj takes a bias with attention_bias too */
static const tt_layer_param qwen3_layer_params[] = {
    TT_QWEN3_ATTENTION_PARAMS,
    {TT_PARAM_W_GATE, "mlp.gate_proj.weight", TT_DIM_FFN, TT_DIM_HIDDEN, TT_PRESENT_ALWAYS},
    {TT_PARAM_W_UP, "mlp.up_proj.weight", TT_DIM_FFN, TT_DIM_HIDDEN, TT_PRESENT_ALWAYS},
    {TT_PARAM_W_DOWN, "mlp.down_proj.weight", TT_DIM_HIDDEN, TT_DIM_FFN, TT_PRESENT_ALWAYS},
};

static const tt_layer_slots qwen3_slots = {
    .architecture = "qwen3",
    .slot = {TT_SLOTS_PRE_NORM_LAYER(TT_SLOTS_QK_HEAD_NORMED)},
};
/* clang-format on */

static void refuse_sliding_window(const tt_config_reader *r, const tt_model_config *c) {
    if (tt_config_bool(r, "use_sliding_window", false))
        tt_die("%s: use_sliding_window is true; sliding-window attention for %s models is not supported yet (set it "
               "to false to train with full attention)",
               r->path, c->model_type);
}

/* transformers' Qwen2Config gives q/k/v biases unless attention_bias says otherwise. */
static void read_qwen2_config(const tt_config_reader *r, tt_model_config *c) {
    c->attention_bias = tt_config_bool(r, "attention_bias", true);
    refuse_sliding_window(r, c);
}

static void read_qwen3_config(const tt_config_reader *r, tt_model_config *c) { refuse_sliding_window(r, c); }

static void write_qwen_config(json_t *root, const tt_model_config *c) {
    (void)c;
    json_object_set_new(root, "use_sliding_window", json_false());
}

const tt_arch tt_arch_qwen2 = {
    .model_type = "qwen2",
    .architecture = "Qwen2ForCausalLM",
    .block = TT_BLOCK_DENSE,
    .norm_placement = TT_NORM_PRE,
    .activation = TT_GLU_SILU,
    .qk_norm = TT_QK_NORM_NONE,
    TT_ARCH_LAYER(qwen2_layer_params, tt_llama_linear_layers, tt_llama_slots),
    .read_config = read_qwen2_config,
    .write_config = write_qwen_config,
};

const tt_arch tt_arch_qwen3 = {
    .model_type = "qwen3",
    .architecture = "Qwen3ForCausalLM",
    .block = TT_BLOCK_DENSE,
    .norm_placement = TT_NORM_PRE,
    .activation = TT_GLU_SILU,
    .qk_norm = TT_QK_NORM_PER_HEAD,
    TT_ARCH_LAYER(qwen3_layer_params, tt_llama_linear_layers, qwen3_slots),
    .read_config = read_qwen3_config,
    .write_config = write_qwen_config,
};
