/* SmolLM3: Llama's layer, some layers without RoPE (no_rope_layers: 1 a layer with RoPE, 0 one without; by default
 * every no_rope_layer_interval-th is without), sliding windows only where use_sliding_window puts them (on the layers
 * without RoPE), tied by default, theta 2e6 by default. */
#include "model/arch_internal.h"

#include <jansson.h>

#include "core/check.h"
#include "model/config_reader.h"

static void read_smollm3_config(const tt_config_reader *r, tt_model_config *c) {
    if (c->num_layers <= 0 || c->num_layers > 1000000) return; /* validation names the layer count */
    json_t *list = tt_config_value(r, "no_rope_layers");
    const int64_t interval = tt_config_int(r, "no_rope_layer_interval", false, 4);
    if (!list && interval <= 0)
        tt_die("%s: no_rope_layer_interval is %lld; it must be positive", r->path, (long long)interval);
    if (list && (!json_is_array(list) || (int64_t)json_array_size(list) != c->num_layers))
        tt_die("%s: key \"%sno_rope_layers\" must list 0 or 1 for each of the %lld layers", r->path, r->prefix,
               (long long)c->num_layers);
    const bool windowed = tt_config_bool(r, "use_sliding_window", false);
    c->sliding_window = windowed ? tt_config_int(r, "sliding_window", false, 0) : 0;
    if (c->sliding_window < 0)
        tt_die("%s: sliding_window is %lld; it must be positive, or null", r->path, (long long)c->sliding_window);
    c->layer_attention = tt_xcalloc((size_t)c->num_layers, sizeof(tt_layer_attention), "layer types");
    for (int64_t l = 0; l < c->num_layers; l++) {
        bool rope = (l + 1) % interval != 0;
        if (list) {
            json_t *v = json_array_get(list, (size_t)l);
            if (!json_is_integer(v) || (json_integer_value(v) != 0 && json_integer_value(v) != 1))
                tt_die("%s: key \"%sno_rope_layers\"[%lld] must be 0 (no RoPE) or 1", r->path, r->prefix, (long long)l);
            rope = json_integer_value(v) == 1;
        }
        c->layer_attention[l] = (tt_layer_attention){.sliding = c->sliding_window > 0 && !rope,
                                                     .rope = rope ? TT_ROPE_TABLE_GLOBAL : TT_ROPE_TABLE_NONE};
    }
}

const tt_arch tt_arch_smollm3 = {
    .model_type = "smollm3",
    .architecture = "SmolLM3ForCausalLM",
    .block = TT_BLOCK_DENSE,
    .norm_placement = TT_NORM_PRE,
    .activation = TT_GLU_SILU,
    .qk_norm = TT_QK_NORM_NONE,
    .tied_by_default = true,
    .rope_theta_default = 2000000.0,
    TT_ARCH_LAYER(tt_llama_layer_params, tt_llama_linear_layers, tt_llama_slots),
    .read_config = read_smollm3_config,
};
