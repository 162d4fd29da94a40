/* The list of families and what every description answers the same way (arch.h). */
#include "model/arch_internal.h"

#include <stdio.h>
#include <string.h>

#include "core/check.h"

/* Every family tiertrain trains, in the order messages list them. */
static const tt_arch *const families[] = {&tt_arch_llama,   &tt_arch_mistral,     &tt_arch_qwen2,  &tt_arch_qwen3,
                                          &tt_arch_gemma2,  &tt_arch_gemma3_text, &tt_arch_gemma3, &tt_arch_olmo2,
                                          &tt_arch_smollm3, &tt_arch_granite,     &tt_arch_phi3,   &tt_arch_qwen3_moe};
#define FAMILY_COUNT ((int)(sizeof families / sizeof families[0]))

int tt_arch_family_count(void) { return FAMILY_COUNT; }

const tt_arch *tt_arch_family(int index) {
    TT_CHECK(index >= 0 && index < FAMILY_COUNT, "family %d of %d", index, FAMILY_COUNT);
    return families[index];
}

const tt_arch *tt_arch_find(const char *model_type) {
    for (int i = 0; i < FAMILY_COUNT; i++)
        if (strcmp(families[i]->model_type, model_type) == 0) return families[i];
    return NULL;
}

const tt_arch *tt_arch_of(const tt_model_config *model) {
    const tt_arch *arch = tt_arch_find(model->model_type);
    TT_CHECK(arch != NULL, "model_type \"%s\" has no description", model->model_type);
    return arch;
}

const char *tt_arch_supported_types(void) {
    static char text[512];
    if (text[0]) return text;
    size_t used = 0;
    for (int i = 0; i < FAMILY_COUNT; i++)
        used += (size_t)snprintf(text + used, sizeof text - used, "%s%s",
                                 i == 0                  ? ""
                                 : i == FAMILY_COUNT - 1 ? " and "
                                                         : ", ",
                                 families[i]->model_type);
    return text;
}

int64_t tt_dim_size(tt_dim dim, const tt_model_config *m) {
    switch (dim) {
    case TT_DIM_ONE: return 1;
    case TT_DIM_HIDDEN: return m->hidden_size;
    case TT_DIM_HEAD: return m->head_dim;
    case TT_DIM_Q: return m->num_heads * m->head_dim;
    case TT_DIM_KV: return m->num_kv_heads * m->head_dim;
    case TT_DIM_FFN: return m->intermediate_size;
    case TT_DIM_VOCAB: return m->vocab_size;
    case TT_DIM_QKV: return (m->num_heads + 2 * m->num_kv_heads) * m->head_dim;
    case TT_DIM_FFN2: return 2 * m->intermediate_size;
    case TT_DIM_EXPERTS: return m->num_experts;
    case TT_DIM_MOE_FFN: return m->moe_intermediate_size;
    }
    TT_CHECK(false, "dimension %d", (int)dim);
    return 0;
}

const tt_layer_slots *tt_layer_slots_for(const tt_model_config *model) { return tt_arch_of(model)->slots; }

int64_t tt_layer_param_copies(const tt_layer_param *param, const tt_model_config *model) {
    return tt_param_kind_is_expert(param->kind) ? model->num_experts : 1;
}

bool tt_layer_param_present(const tt_layer_param *param, const tt_model_config *model) {
    return param->presence == TT_PRESENT_ALWAYS ||
           (param->presence == TT_PRESENT_WITH_ATTENTION_BIAS && model->attention_bias);
}

unsigned tt_arch_lora_modules(const tt_model_config *model) {
    const tt_arch *arch = tt_arch_of(model);
    unsigned modules = 0;
    for (int i = 0; i < arch->linear_layer_count; i++) modules |= 1u << arch->linear_layers[i].module;
    return modules;
}

const tt_linear_layer *tt_arch_linear_layer(const tt_model_config *model, tt_lora_module module) {
    const tt_arch *arch = tt_arch_of(model);
    for (int i = 0; i < arch->linear_layer_count; i++)
        if (arch->linear_layers[i].module == module) return &arch->linear_layers[i];
    return NULL;
}

const tt_linear_layer *tt_arch_projection(const tt_model_config *model, tt_lora_module projection, int *part,
                                          int64_t *first_row, int64_t *rows) {
    const tt_arch *arch = tt_arch_of(model);
    for (int i = 0; i < arch->linear_layer_count; i++) {
        const tt_linear_layer *linear = &arch->linear_layers[i];
        if (linear->part_count == 0 && linear->module == projection) {
            *part = 0;
            *first_row = 0;
            *rows = tt_dim_size(linear->out, model);
            return linear;
        }
        int64_t row = 0;
        for (int k = 0; k < linear->part_count; k++) {
            const int64_t n = tt_dim_size(linear->parts[k].rows, model);
            if (linear->parts[k].projection == projection) {
                *part = k;
                *first_row = row;
                *rows = n;
                return linear;
            }
            row += n;
        }
    }
    return NULL;
}

void tt_arch_linear_shape(const tt_model_config *model, tt_lora_module module, int64_t *in, int64_t *out) {
    const tt_linear_layer *linear = tt_arch_linear_layer(model, module);
    TT_CHECK(linear != NULL, "%s has no %s", model->model_type, tt_lora_module_name(module));
    *in = tt_dim_size(linear->in, model);
    *out = tt_dim_size(linear->out, model);
}
