/* Model and hardware FLOPs of a training step (flops.h). */
#include "train/flops.h"

#include <string.h>

#include "model/arch.h"

/* What a step is made of. */
typedef struct step {
    const tt_model_config *config;
    const tt_param_table *params;
    const tt_plan *plan;
    const tt_layer_slots *slots;
} step;

/* Keys a query of a sequence of T tokens sees on average: (T + 1) / 2 causal; within a window w < T, the first w
 * queries see 1 .. w keys and the others w. */
static double visible_keys(int64_t T, int64_t window) {
    if (window <= 0 || window >= T) return (double)(T + 1) / 2.0;
    const double w = (double)window;
    return (w * (w + 1) / 2.0 + (double)(T - window) * w) / (double)T;
}

/* The attention forward of layer l, per token: QK^T and PV, 2 FLOPs a multiply-add, over the visible keys. */
static double attention_forward_per_token(const step *s, int64_t l) {
    const tt_model_config *c = s->config;
    const int64_t T = s->plan->seq_len * (s->plan->sequence_parallel > 1 ? s->plan->sequence_parallel : 1);
    const int64_t window = tt_model_layer_attention(c, l).sliding ? c->sliding_window : 0;
    return 2.0 * 2.0 * visible_keys(T, window) * (double)c->head_dim * (double)c->num_heads;
}

/* The LoRA adapter of a linear layer's module in layer l, or NULL. */
static const tt_param_info *adapter_param(const step *s, tt_param_kind kind, tt_lora_module module, int64_t l) {
    for (int i = 0; i < s->params->count; i++) {
        const tt_param_info *p = &s->params->params[i];
        if (p->kind == kind && p->layer == l && p->lora_module == module) return p;
    }
    return NULL;
}

/* Recomputing projection p of layer l: its rows of the GEMM and its adapter's up projection over them. */
static double projection_per_token(const step *s, int64_t l, tt_lora_module projection) {
    int part;
    int64_t first_row, rows;
    const tt_linear_layer *layer = tt_arch_projection(s->config, projection, &part, &first_row, &rows);
    if (!layer) return 0;
    double flops = 2.0 * (double)rows * (double)tt_dim_size(layer->in, s->config);
    if (adapter_param(s, TT_PARAM_LORA_B, layer->module, l)) flops += 2.0 * (double)rows * (double)s->params->lora_rank;
    return flops;
}

/* The GEMM projection whose output slot is (TT_LORA_MODULE_COUNT: the slot is no projection's output). */
static tt_lora_module slot_projection(tt_saved_slot slot) {
    switch (slot) {
    case TT_SAVED_Q_RAW: return TT_LORA_Q;
    case TT_SAVED_K_RAW: return TT_LORA_K;
    case TT_SAVED_Q: return TT_LORA_Q;
    case TT_SAVED_K: return TT_LORA_K;
    case TT_SAVED_V: return TT_LORA_V;
    case TT_SAVED_ATTN_PROJ: return TT_LORA_O;
    case TT_SAVED_RESIDUAL_MID: return TT_LORA_O;
    case TT_SAVED_GATE: return TT_LORA_GATE;
    case TT_SAVED_UP: return TT_LORA_UP;
    case TT_SAVED_MLP_PROJ: return TT_LORA_DOWN;
    default: return TT_LORA_MODULE_COUNT;
    }
}

/* What recomputing layer l's slots `recompute` runs, per token: each op once (block.h: an op runs when any of its
 * outputs is wanted). */
static double recompute_per_token(const step *s, int64_t l, tt_slot_set recompute) {
    double flops = 0;
    bool attention_done = false, experts_done = false;
    for (int slot = 0; slot < TT_SAVED_SLOT_COUNT; slot++) {
        const tt_saved_slot_info *info = &s->slots->slot[slot];
        if (!info->present || !(recompute & TT_SLOT(slot))) continue;
        switch (info->producer) {
        case TT_SLOT_OP_LINEAR:
        case TT_SLOT_OP_LINEAR_ROPE:
        case TT_SLOT_OP_RESIDUAL: flops += projection_per_token(s, l, slot_projection((tt_saved_slot)slot)); break;
        case TT_SLOT_OP_ATTENTION:
            if (!attention_done) flops += attention_forward_per_token(s, l);
            attention_done = true;
            break;
        case TT_SLOT_OP_EXPERTS: /* the router and each token's k experts' three projections, once */
            if (!experts_done) {
                const tt_model_config *c = s->config;
                flops += 2.0 * (double)(c->hidden_size * c->num_experts) +
                         (double)c->num_experts_per_tok * 6.0 * (double)(c->hidden_size * c->moe_intermediate_size);
            }
            experts_done = true;
            break;
        case TT_SLOT_OP_LORA_DOWN: {
            const tt_param_info *a = adapter_param(s, TT_PARAM_LORA_A, (tt_lora_module)info->lora_module, l);
            if (a) flops += 2.0 * (double)a->numel;
            break;
        }
        default: break; /* element-wise */
        }
    }
    return flops;
}

tt_step_flops tt_step_flops_of(const tt_model_config *c, const tt_param_table *params, const tt_plan *plan) {
    const step step_ = {.config = c, .params = params, .plan = plan, .slots = tt_layer_slots_for(c)}, *s = &step_;
    double matrices = 0;
    for (int i = 0; i < s->params->count; i++) {
        const tt_param_info *p = &s->params->params[i];
        const bool matrix = tt_param_kind_is_linear_weight(p->kind) || p->kind == TT_PARAM_LM_HEAD ||
                            p->kind == TT_PARAM_LORA_A || p->kind == TT_PARAM_LORA_B || p->kind == TT_PARAM_ROUTER;
        if (matrix) matrices += (p->trainable ? 6.0 : 4.0) * (double)p->numel;
        /* an expert: the tokens routed to it, k of E on average (MFU over the active parameters) */
        if (tt_param_kind_is_expert(p->kind))
            matrices +=
                (p->trainable ? 6.0 : 4.0) * (double)p->numel * (double)c->num_experts_per_tok / (double)c->num_experts;
        /* a tied LM head is the embedding's matrix, multiplied once a token */
        if (p->kind == TT_PARAM_EMBED && c->tie_word_embeddings && !s->params->lm_head_untied)
            matrices += (p->trainable ? 6.0 : 4.0) * (double)p->numel;
    }
    double attention = 0, recompute = 0;
    for (int64_t l = 0; l < c->num_layers; l++) {
        attention += attention_forward_per_token(s, l);
        recompute += recompute_per_token(s, l, s->plan->layers[l].recompute);
    }
    return (tt_step_flops){
        .model_per_token = matrices + 3.0 * attention,
        .hardware_per_token = matrices + 3.5 * attention + recompute,
    };
}

typedef struct gpu_peak {
    const char *name; /* a substring of the device name */
    double flops;
} gpu_peak;

/* Dense bf16 tensor FLOP/s from NVIDIA's data sheets; the more specific names first. */
static const gpu_peak gpu_peaks[] = {
    {"H100 PCIe", 756e12}, {"H100 NVL", 835e12}, {"H100", 989e12},  {"H200 NVL", 835e12}, {"H200", 989e12},
    {"GH200", 989e12},     {"H800", 989e12},     {"B200", 2250e12}, {"B100", 1750e12},    {"A100", 312e12},
    {"A800", 312e12},      {"L40S", 362e12},     {"A10G", 70e12},
};

double tt_dense_bf16_peak_flops(const char *device_description) {
    if (!device_description || strncmp(device_description, "cuda", 4) != 0) return 0;
    for (size_t i = 0; i < sizeof gpu_peaks / sizeof gpu_peaks[0]; i++)
        if (strstr(device_description, gpu_peaks[i].name)) return gpu_peaks[i].flops;
    return 0;
}
