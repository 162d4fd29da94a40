/* Qwen3-MoE (Qwen3-30B-A3B, Qwen3-235B-A22B): Qwen3's attention (q/k norms per head), and in every decoder layer a
 * mixture of experts in place of the MLP: a linear router (mlp.gate, no bias) scores num_experts gated MLPs of
 * moe_intermediate_size (SwiGLU), each token goes to its num_experts_per_tok best after a softmax (renormalized to sum
 * to 1 with norm_topk_prob), and the layer adds their outputs weighted so. The checkpoint names each expert's
 * projections (mlp.experts.<e>.gate_proj.weight ...), as the hub's files do and transformers 5 writes them; a
 * checkpoint with a layer's experts as 3-D tensors (mlp.experts.gate_up_proj, mlp.experts.down_proj, as transformers 5
 * holds them) loads too (weights.c), and is written back per expert.
 *
 * With output_router_logits, the loss adds router_aux_loss_coef x the routers' load-balancing loss. Not trained yet,
 * and refused by name: layers with a dense MLP among the sparse ones (mlp_only_layers, decoder_sparse_step), sliding
 * windows. LoRA adapts the attention
 * (q/k/v/o_proj): the experts take none (as peft's all-linear, whose targets are nn.Linear modules, leaves
 * transformers 5's 3-D expert weights and router alone). */
#include "model/arch_internal.h"

#include <jansson.h>
#include <math.h>

#include "core/check.h"
#include "model/config_reader.h"
#include "model/slot_table.h"

/* clang-format off */
static const tt_layer_param qwen3_moe_layer_params[] = {
    TT_QWEN3_ATTENTION_PARAMS,
    {TT_PARAM_ROUTER, "mlp.gate.weight", TT_DIM_EXPERTS, TT_DIM_HIDDEN, TT_PRESENT_ALWAYS},
    {TT_PARAM_EXPERT_GATE, "mlp.experts.%d.gate_proj.weight", TT_DIM_MOE_FFN, TT_DIM_HIDDEN, TT_PRESENT_ALWAYS},
    {TT_PARAM_EXPERT_UP, "mlp.experts.%d.up_proj.weight", TT_DIM_MOE_FFN, TT_DIM_HIDDEN, TT_PRESENT_ALWAYS},
    {TT_PARAM_EXPERT_DOWN, "mlp.experts.%d.down_proj.weight", TT_DIM_HIDDEN, TT_DIM_MOE_FFN, TT_PRESENT_ALWAYS},
};

static const tt_layer_slots qwen3_moe_slots = {
    .architecture = "qwen3_moe",
    .slot = {TT_SLOTS_ATTENTION_PRE_NORM, TT_SLOTS_QKV_ADAPTERS, TT_SLOTS_QK_HEAD_NORMED, TT_SLOTS_ATTENTION,
             TT_SLOTS_RESIDUAL_JOINED, TT_SLOTS_MLP_PRE_NORM, TT_SLOTS_EXPERTS},
};
/* clang-format on */

static void read_qwen3_moe_config(const tt_config_reader *r, tt_model_config *c) {
    if (tt_config_bool(r, "use_sliding_window", false))
        tt_die("%s: use_sliding_window is true; sliding-window attention for qwen3_moe models is not supported yet "
               "(set it to false to train with full attention)",
               r->path);
    /* the hub's configs say num_experts, transformers 5 writes num_local_experts */
    c->num_experts = tt_config_value(r, "num_experts") ? tt_config_int(r, "num_experts", true, 0)
                                                       : tt_config_int(r, "num_local_experts", true, 0);
    c->num_experts_per_tok = tt_config_int(r, "num_experts_per_tok", true, 0);
    c->moe_intermediate_size = tt_config_int(r, "moe_intermediate_size", true, 0);
    c->norm_topk_prob = tt_config_bool(r, "norm_topk_prob", false);
    if (c->num_experts < 1 || c->num_experts > 4096)
        tt_die("%s: num_experts is %lld; a mixture of experts has 1 to 4096 of them", r->path,
               (long long)c->num_experts);
    if (c->num_experts_per_tok < 1 || c->num_experts_per_tok > c->num_experts)
        tt_die("%s: num_experts_per_tok is %lld; a token goes to 1 to num_experts (%lld) experts", r->path,
               (long long)c->num_experts_per_tok, (long long)c->num_experts);
    if (c->moe_intermediate_size < 1 || c->moe_intermediate_size > (1 << 20))
        tt_die("%s: moe_intermediate_size is %lld; expected 1 to 1048576", r->path,
               (long long)c->moe_intermediate_size);
    /* the experts of a layer lie back to back, unpadded: each expert's matrix a multiple of the 64-element alignment */
    if (c->hidden_size > 0 && (c->hidden_size * c->moe_intermediate_size) % 64 != 0)
        tt_die("%s: hidden_size x moe_intermediate_size (%lld x %lld) is not a multiple of 64, which tiertrain's "
               "expert layout needs (every published MoE model's is)",
               r->path, (long long)c->hidden_size, (long long)c->moe_intermediate_size);
    if (tt_config_int(r, "decoder_sparse_step", false, 1) != 1)
        tt_die("%s: decoder_sparse_step is not 1: layers with a dense MLP among the experts' are not supported yet "
               "(every layer a mixture of experts, as Qwen3-30B-A3B and Qwen3-235B-A22B)",
               r->path);
    json_t *dense = tt_config_value(r, "mlp_only_layers");
    if (dense && !json_is_null(dense) && !(json_is_array(dense) && json_array_size(dense) == 0))
        tt_die("%s: mlp_only_layers is not empty: layers with a dense MLP among the experts' are not supported yet",
               r->path);
    c->output_router_logits = tt_config_bool(r, "output_router_logits", false);
    c->router_aux_loss_coef = tt_config_number(r, "router_aux_loss_coef", false, 0.001);
    if (!isfinite(c->router_aux_loss_coef) || c->router_aux_loss_coef < 0)
        tt_die("%s: router_aux_loss_coef is %g; expected a number >= 0", r->path, c->router_aux_loss_coef);
}

static void write_qwen3_moe_config(json_t *root, const tt_model_config *c) {
    json_object_set_new(root, "use_sliding_window", json_false());
    json_object_set_new(root, "num_experts", json_integer(c->num_experts));
    json_object_set_new(root, "num_experts_per_tok", json_integer(c->num_experts_per_tok));
    json_object_set_new(root, "moe_intermediate_size", json_integer(c->moe_intermediate_size));
    json_object_set_new(root, "norm_topk_prob", json_boolean(c->norm_topk_prob));
    json_object_set_new(root, "decoder_sparse_step", json_integer(1));
    json_object_set_new(root, "mlp_only_layers", json_array());
    json_object_set_new(root, "output_router_logits", json_boolean(c->output_router_logits));
    json_object_set_new(root, "router_aux_loss_coef", json_real(c->router_aux_loss_coef));
}

const tt_arch tt_arch_qwen3_moe = {
    .model_type = "qwen3_moe",
    .architecture = "Qwen3MoeForCausalLM",
    .block = TT_BLOCK_MOE,
    .norm_placement = TT_NORM_PRE,
    .activation = TT_GLU_SILU,
    .qk_norm = TT_QK_NORM_PER_HEAD,
    .layer_params = qwen3_moe_layer_params,
    .layer_param_count = TT_COUNT_OF(qwen3_moe_layer_params),
    .linear_layers = tt_llama_linear_layers, /* q, k, v and o_proj: the first four */
    .linear_layer_count = 4,
    .slots = &qwen3_moe_slots,
    .read_config = read_qwen3_moe_config,
    .write_config = write_qwen3_moe_config,
};
