/* Gemma 2 and Gemma 3: every half between a pre-norm and a norm after it (the sandwich), norms that multiply by
 * (1 + w), GeGLU (tanh gelu), the embedding scaled by sqrt(hidden) (a tensor of the activations' dtype), the softmax
 * scaled by query_pre_attn_scalar^-1/2, layers sliding over a window or attending causally (layer_types), tied.
 * Gemma 3 adds q/k norms per head and RoPE per layer type (the sliding layers' theta rope_local_base_freq, the full ones'
 * rope_theta with its scaling); Gemma 2 soft-caps the attention scores and the logits. gemma3 is Gemma 3's language
 * model inside a Gemma3ForConditionalGeneration checkpoint (config under text_config, weights under
 * language_model.model.). */
#include "model/arch_internal.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/json_describe.h"
#include "model/model_config_internal.h"
#include "model/slot_table.h"

/* clang-format off */
#define GEMMA_ATTENTION_PARAMS                                                                                         \
    {TT_PARAM_ATTN_NORM, "input_layernorm.weight", TT_DIM_HIDDEN, TT_DIM_ONE, TT_PRESENT_ALWAYS},                   \
    {TT_PARAM_WQ, "self_attn.q_proj.weight", TT_DIM_Q, TT_DIM_HIDDEN, TT_PRESENT_ALWAYS},                           \
    {TT_PARAM_BQ, "self_attn.q_proj.bias", TT_DIM_Q, TT_DIM_ONE, TT_PRESENT_WITH_ATTENTION_BIAS},                   \
    {TT_PARAM_WK, "self_attn.k_proj.weight", TT_DIM_KV, TT_DIM_HIDDEN, TT_PRESENT_ALWAYS},                          \
    {TT_PARAM_BK, "self_attn.k_proj.bias", TT_DIM_KV, TT_DIM_ONE, TT_PRESENT_WITH_ATTENTION_BIAS},                  \
    {TT_PARAM_WV, "self_attn.v_proj.weight", TT_DIM_KV, TT_DIM_HIDDEN, TT_PRESENT_ALWAYS},                          \
    {TT_PARAM_BV, "self_attn.v_proj.bias", TT_DIM_KV, TT_DIM_ONE, TT_PRESENT_WITH_ATTENTION_BIAS},                  \
    {TT_PARAM_WO, "self_attn.o_proj.weight", TT_DIM_HIDDEN, TT_DIM_Q, TT_PRESENT_ALWAYS},                           \
    {TT_PARAM_BO, "self_attn.o_proj.bias", TT_DIM_HIDDEN, TT_DIM_ONE, TT_PRESENT_WITH_ATTENTION_BIAS}
#define GEMMA_MLP_PARAMS                                                                                               \
    {TT_PARAM_ATTN_POST_NORM, "post_attention_layernorm.weight", TT_DIM_HIDDEN, TT_DIM_ONE, TT_PRESENT_ALWAYS},     \
    {TT_PARAM_MLP_NORM, "pre_feedforward_layernorm.weight", TT_DIM_HIDDEN, TT_DIM_ONE, TT_PRESENT_ALWAYS},          \
    {TT_PARAM_W_GATE, "mlp.gate_proj.weight", TT_DIM_FFN, TT_DIM_HIDDEN, TT_PRESENT_ALWAYS},                        \
    {TT_PARAM_W_UP, "mlp.up_proj.weight", TT_DIM_FFN, TT_DIM_HIDDEN, TT_PRESENT_ALWAYS},                            \
    {TT_PARAM_W_DOWN, "mlp.down_proj.weight", TT_DIM_HIDDEN, TT_DIM_FFN, TT_PRESENT_ALWAYS},                        \
    {TT_PARAM_MLP_POST_NORM, "post_feedforward_layernorm.weight", TT_DIM_HIDDEN, TT_DIM_ONE, TT_PRESENT_ALWAYS}

static const tt_layer_param gemma2_layer_params[] = {GEMMA_ATTENTION_PARAMS, GEMMA_MLP_PARAMS};
static const tt_layer_param gemma3_layer_params[] = {
    GEMMA_ATTENTION_PARAMS,
    {TT_PARAM_Q_NORM, "self_attn.q_norm.weight", TT_DIM_HEAD, TT_DIM_ONE, TT_PRESENT_ALWAYS},
    {TT_PARAM_K_NORM, "self_attn.k_norm.weight", TT_DIM_HEAD, TT_DIM_ONE, TT_PRESENT_ALWAYS},
    GEMMA_MLP_PARAMS,
};

#define GEMMA_SANDWICH_SLOTS(qk_slots)                                                                                 \
    TT_SLOTS_ATTENTION_PRE_NORM, TT_SLOTS_QKV_ADAPTERS, qk_slots, TT_SLOTS_ATTENTION, TT_SLOTS_ATTENTION_POST_NORM,  \
    TT_SLOTS_MLP_PRE_NORM, TT_SLOTS_GLU_MLP("GeGLU output"), TT_SLOTS_MLP_POST_NORM
static const tt_layer_slots gemma2_slots = {
    .architecture = "gemma2",
    .slot = {GEMMA_SANDWICH_SLOTS(TT_SLOTS_QK_PROJECTED)},
};
static const tt_layer_slots gemma3_slots = {
    .architecture = "gemma3",
    .slot = {GEMMA_SANDWICH_SLOTS(TT_SLOTS_QK_HEAD_NORMED)},
};
/* clang-format on */

/* layer_types (transformers 5: "sliding_attention" or "full_attention" a layer), or the pattern that derives it:
 * layer l slides unless (l + 1) % pattern == 0 (Gemma 3's sliding_window_pattern, 6; Gemma 2's alternation, 2). The
 * sliding layers take the local RoPE table where the model has one. */
static void read_layer_types(const tt_config_reader *r, tt_model_config *c, int64_t default_pattern) {
    c->sliding_window = tt_config_int(r, "sliding_window", false, 4096);
    if (c->sliding_window <= 0)
        tt_die("%s: key \"%ssliding_window\" is %lld; %s's sliding layers need a positive window", r->path, r->prefix,
               (long long)c->sliding_window, c->model_type);
    if (tt_config_bool(r, "use_bidirectional_attention", false))
        tt_die("%s: use_bidirectional_attention is true; tiertrain trains causal language models (set it to false)",
               r->path);
    if (c->num_layers <= 0 || c->num_layers > 1000000) return; /* validation names the layer count */
    c->layer_attention = tt_xcalloc((size_t)c->num_layers, sizeof(tt_layer_attention), "layer types");
    json_t *types = tt_config_value(r, "layer_types");
    const int64_t pattern = tt_config_int(r, "sliding_window_pattern", false,
                                          tt_config_int(r, "_sliding_window_pattern", false, default_pattern));
    if (!types && pattern <= 0)
        tt_die("%s: key \"%ssliding_window_pattern\" is %lld; it must be positive", r->path, r->prefix,
               (long long)pattern);
    if (types && (!json_is_array(types) || (int64_t)json_array_size(types) != c->num_layers))
        tt_die("%s: key \"%slayer_types\" must list one type for each of the %lld layers", r->path, r->prefix,
               (long long)c->num_layers);
    const int8_t sliding_rope = c->rope_local_theta > 0 ? TT_ROPE_TABLE_LOCAL : TT_ROPE_TABLE_GLOBAL;
    for (int64_t l = 0; l < c->num_layers; l++) {
        bool sliding = (l + 1) % (pattern > 0 ? pattern : 1) != 0;
        if (types) {
            const char *type = json_string_value(json_array_get(types, (size_t)l));
            if (!type || (strcmp(type, "sliding_attention") != 0 && strcmp(type, "full_attention") != 0))
                tt_die("%s: key \"%slayer_types\"[%lld] must be \"sliding_attention\" or \"full_attention\"", r->path,
                       r->prefix, (long long)l);
            sliding = strcmp(type, "sliding_attention") == 0;
        }
        c->layer_attention[l] =
            (tt_layer_attention){.sliding = sliding, .rope = sliding ? sliding_rope : TT_ROPE_TABLE_GLOBAL};
    }
}

/* Gemma's common keys: the attention scale, the embedding's sqrt(hidden) in the activations' dtype. */
static void read_gemma_common(const tt_config_reader *r, tt_model_config *c) {
    const double scalar = tt_config_number(r, "query_pre_attn_scalar", false, 256);
    if (!(scalar > 0)) tt_die("%s: query_pre_attn_scalar is %g; it must be positive", r->path, scalar);
    c->attention_scale = 1.0 / sqrt(scalar);
    c->embedding_scale = sqrt((double)c->hidden_size);
    c->embedding_scale_in_compute_dtype = true;
}

static double read_softcap(const tt_config_reader *r, const char *key, double fallback) {
    const double cap = tt_config_number(r, key, false, fallback);
    if (cap < 0) tt_die("%s: %s is %g; it must be positive (or null for none)", r->path, key, cap);
    return cap;
}

static void read_gemma2_config(const tt_config_reader *r, tt_model_config *c) {
    read_gemma_common(r, c);
    /* transformers' defaults are 50 and 30; null turns them off */
    json_t *attn = json_object_get(r->object, "attn_logit_softcapping");
    json_t *final = json_object_get(r->object, "final_logit_softcapping");
    c->attention_softcap = attn && json_is_null(attn) ? 0 : read_softcap(r, "attn_logit_softcapping", 50.0);
    c->final_logit_softcap = final && json_is_null(final) ? 0 : read_softcap(r, "final_logit_softcapping", 30.0);
    read_layer_types(r, c, 2);
}

/* Gemma 3's RoPE per layer type: rope_parameters {"full_attention": {...}, "sliding_attention": {...}}
 * (transformers 5), or rope_theta (with rope_scaling) for the full layers and rope_local_base_freq for the sliding
 * ones (4.5x). */
static void read_gemma3_rope(const tt_config_reader *r, tt_model_config *c) {
    json_t *params = tt_config_value(r, "rope_parameters");
    json_t *full = params ? json_object_get(params, "full_attention") : NULL;
    json_t *local = params ? json_object_get(params, "sliding_attention") : NULL;
    char prefix[160];
    c->rope_theta = tt_config_number(r, "rope_theta", false, 1000000.0);
    c->rope_local_theta = tt_config_number(r, "rope_local_base_freq", false, 10000.0);
    if (full || local) {
        if ((full && !json_is_object(full)) || (local && !json_is_object(local)))
            tt_die("%s: rope_parameters' full_attention and sliding_attention must be objects", r->path);
        snprintf(prefix, sizeof prefix, "%srope_parameters.full_attention.", r->prefix);
        tt_model_config_read_rope(r, full, prefix, c);
        if (local) {
            const tt_config_reader lr = {r->path, local, "rope_parameters.sliding_attention."};
            const char *type = tt_config_string(&lr, "rope_type");
            if (type && strcmp(type, "default") != 0)
                tt_die("%s: rope_parameters.sliding_attention.rope_type is \"%s\"; Gemma 3's sliding layers take "
                       "\"default\" RoPE",
                       r->path, type);
            c->rope_local_theta = tt_config_number(&lr, "rope_theta", false, c->rope_local_theta);
        }
    } else {
        json_t *scaling = tt_config_value(r, "rope_scaling");
        snprintf(prefix, sizeof prefix, "%srope_scaling.", r->prefix);
        tt_model_config_read_rope(r, json_is_object(scaling) ? scaling : NULL, prefix, c);
    }
    if (!(c->rope_local_theta > 0))
        tt_die("%s: the sliding layers' RoPE theta (rope_local_base_freq) is %g; it must be positive", r->path,
               c->rope_local_theta);
}

static void read_gemma3_config(const tt_config_reader *r, tt_model_config *c) {
    read_gemma_common(r, c);
    read_gemma3_rope(r, c);
    /* transformers' Gemma 3 attention passes no soft-capping (attn_logit_softcapping is ignored); its CausalLM caps the
     * logits where final_logit_softcapping is set */
    c->final_logit_softcap = read_softcap(r, "final_logit_softcapping", 0);
    read_layer_types(r, c, 6);
}

/* The language model of a Gemma3ForConditionalGeneration: its final logits are not capped (transformers' forward of
 * that class applies none). */
static void read_gemma3_multimodal_config(const tt_config_reader *r, tt_model_config *c) {
    read_gemma3_config(r, c);
    c->final_logit_softcap = 0;
}

#define GEMMA_FEATURES                                                                       \
    .block = TT_BLOCK_DENSE, .norm_placement = TT_NORM_SANDWICH, .norm_weight_offset = 1.0f, \
    .activation = TT_GLU_GELU_TANH, .tied_by_default = true

const tt_arch tt_arch_gemma2 = {
    .model_type = "gemma2",
    .architecture = "Gemma2ForCausalLM",
    GEMMA_FEATURES,
    .qk_norm = TT_QK_NORM_NONE,
    TT_ARCH_LAYER(gemma2_layer_params, tt_llama_linear_layers, gemma2_slots),
    .read_config = read_gemma2_config,
};

const tt_arch tt_arch_gemma3_text = {
    .model_type = "gemma3_text",
    .architecture = "Gemma3ForCausalLM",
    GEMMA_FEATURES,
    .qk_norm = TT_QK_NORM_PER_HEAD,
    TT_ARCH_LAYER(gemma3_layer_params, tt_llama_linear_layers, gemma3_slots),
    .read_config = read_gemma3_config,
};

const tt_arch tt_arch_gemma3 = {
    .model_type = "gemma3",
    .architecture = "Gemma3ForConditionalGeneration",
    GEMMA_FEATURES,
    .qk_norm = TT_QK_NORM_PER_HEAD,
    .text_config = "text_config",
    .text_config_prefix = "text_config.",
    .weight_prefix = "language_model.model.",
    .lm_head_name = "language_model.lm_head.weight",
    .peft_layers = "model.language_model.layers.",
    TT_ARCH_LAYER(gemma3_layer_params, tt_llama_linear_layers, gemma3_slots),
    .read_config = read_gemma3_multimodal_config,
};
