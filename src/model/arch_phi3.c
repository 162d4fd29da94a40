/* Phi-3, Phi-3.5, Phi-4 and Phi-4-mini (model_type phi3): Llama's pre-norm layer with q, k and v in one fused
 * qkv_proj (their rows in that order) and gate and up in one gate_up_proj (gate's rows first), no biases, LongRoPE
 * (short or long factors and an attention factor) and partial rotary (partial_rotary_factor) read by the common RoPE
 * reader, the sliding window over every layer where sliding_window is set. The fused layers run as their row blocks
 * (one GEMM a projection, the same bits as one GEMM on the CPU) and take one LoRA adapter each, as peft puts them. */
#include "model/arch_internal.h"

#include "core/check.h"
#include "model/config_reader.h"
#include "model/slot_table.h"

/* clang-format off */
static const tt_layer_param phi3_layer_params[] = {
    {TT_PARAM_ATTN_NORM, "input_layernorm.weight", TT_DIM_HIDDEN, TT_DIM_ONE, TT_PRESENT_ALWAYS},
    {TT_PARAM_W_QKV, "self_attn.qkv_proj.weight", TT_DIM_QKV, TT_DIM_HIDDEN, TT_PRESENT_ALWAYS},
    {TT_PARAM_WO, "self_attn.o_proj.weight", TT_DIM_HIDDEN, TT_DIM_Q, TT_PRESENT_ALWAYS},
    {TT_PARAM_MLP_NORM, "post_attention_layernorm.weight", TT_DIM_HIDDEN, TT_DIM_ONE, TT_PRESENT_ALWAYS},
    {TT_PARAM_W_GATE_UP, "mlp.gate_up_proj.weight", TT_DIM_FFN2, TT_DIM_HIDDEN, TT_PRESENT_ALWAYS},
    {TT_PARAM_W_DOWN, "mlp.down_proj.weight", TT_DIM_HIDDEN, TT_DIM_FFN, TT_PRESENT_ALWAYS},
};

static const tt_linear_layer phi3_linear_layers[] = {
    {TT_LORA_QKV, TT_PARAM_W_QKV, TT_DIM_HIDDEN, TT_DIM_QKV, 3,
     {{TT_LORA_Q, TT_DIM_Q}, {TT_LORA_K, TT_DIM_KV}, {TT_LORA_V, TT_DIM_KV}}},
    {TT_LORA_O, TT_PARAM_WO, TT_DIM_Q, TT_DIM_HIDDEN, 0, {{0}}},
    {TT_LORA_GATE_UP, TT_PARAM_W_GATE_UP, TT_DIM_HIDDEN, TT_DIM_FFN2, 2, {{TT_LORA_GATE, TT_DIM_FFN}, {TT_LORA_UP, TT_DIM_FFN}}},
    {TT_LORA_DOWN, TT_PARAM_W_DOWN, TT_DIM_FFN, TT_DIM_HIDDEN, 0, {{0}}},
};

static const tt_layer_slots phi3_slots = {
    .architecture = "phi3",
    .slot = {TT_SLOTS_ATTENTION_PRE_NORM, TT_SLOTS_QKV_FUSED_ADAPTER, TT_SLOTS_QK_PROJECTED, TT_SLOTS_ATTENTION,
             TT_SLOTS_RESIDUAL_JOINED, TT_SLOTS_MLP_PRE_NORM, TT_SLOTS_GLU_MLP_FUSED("SwiGLU output")},
};
/* clang-format on */

/* Dropout inside the layer (resid_pdrop, attention_dropout) changes the math; embd_pdrop is not used by transformers'
 * Phi-3. The window, where sliding_window is set, applies to every layer, as transformers' mask does. */
static void read_phi3_config(const tt_config_reader *r, tt_model_config *c) {
    static const char *const dropouts[] = {"resid_pdrop", "attention_dropout"};
    for (size_t i = 0; i < sizeof dropouts / sizeof dropouts[0]; i++)
        if (tt_config_number(r, dropouts[i], false, 0) != 0)
            tt_die("%s: %s is %g; tiertrain trains without dropout inside the layers (set it to 0.0; LoRA's "
                   "lora_dropout is its own)",
                   r->path, dropouts[i], tt_config_number(r, dropouts[i], false, 0));
    if (c->attention_bias) tt_die("%s: attention_bias is true; Phi-3's fused projections have no biases", r->path);
    c->sliding_window = tt_config_int(r, "sliding_window", false, 0);
    if (c->sliding_window < 0)
        tt_die("%s: sliding_window is %lld; it must be positive, or null for full attention", r->path,
               (long long)c->sliding_window);
}

const tt_arch tt_arch_phi3 = {
    .model_type = "phi3",
    .architecture = "Phi3ForCausalLM",
    .block = TT_BLOCK_DENSE,
    .norm_placement = TT_NORM_PRE,
    .activation = TT_GLU_SILU,
    .qk_norm = TT_QK_NORM_NONE,
    TT_ARCH_LAYER(phi3_layer_params, phi3_linear_layers, phi3_slots),
    .read_config = read_phi3_config,
};
