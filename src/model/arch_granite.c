/* Granite: Llama's layer with four multipliers: of the embedding's output (embedding_multiplier), of each half's
 * output before the residual add (residual_multiplier), the softmax scale in place of 1/sqrt(head_dim)
 * (attention_multiplier), and the logits divided by logits_scaling. */
#include "model/arch_internal.h"

#include "core/check.h"
#include "model/config_reader.h"

static double read_multiplier(const tt_config_reader *r, const char *key) {
    const double value = tt_config_number(r, key, false, 1.0);
    if (!(value > 0)) tt_die("%s: %s is %g; it must be positive", r->path, key, value);
    return value;
}

static void read_granite_config(const tt_config_reader *r, tt_model_config *c) {
    c->embedding_scale = read_multiplier(r, "embedding_multiplier");
    c->residual_scale = read_multiplier(r, "residual_multiplier");
    c->attention_scale = read_multiplier(r, "attention_multiplier");
    c->logit_scale = 1.0 / read_multiplier(r, "logits_scaling");
}

const tt_arch tt_arch_granite = {
    .model_type = "granite",
    .architecture = "GraniteForCausalLM",
    .block = TT_BLOCK_DENSE,
    .norm_placement = TT_NORM_PRE,
    .activation = TT_GLU_SILU,
    .qk_norm = TT_QK_NORM_NONE,
    TT_ARCH_LAYER(tt_llama_layer_params, tt_llama_linear_layers, tt_llama_slots),
    .read_config = read_granite_config,
};
