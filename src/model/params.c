#include "model/params.h"

#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "model/arch.h"

/* Offsets are rounded to 64 elements so every parameter starts 256-byte aligned in fp32
 * (and 128-byte in bf16): vector loads and GPU kernels need no special cases. 4-bit weights: 16 bytes. */
#define TT_PARAM_ALIGN_ELEMS 64
/* The trainable part starts at a multiple of 128 elements, so the frozen part is a whole number
 * of 256-byte arena units in bf16 and fp32 alike and the two parts sit back to back in one buffer. */
#define TT_TRAINABLE_ALIGN_ELEMS 128

bool tt_param_kind_is_linear_weight(tt_param_kind kind) {
    return kind == TT_PARAM_WQ || kind == TT_PARAM_WK || kind == TT_PARAM_WV || kind == TT_PARAM_WO ||
           kind == TT_PARAM_W_GATE || kind == TT_PARAM_W_UP || kind == TT_PARAM_W_DOWN || kind == TT_PARAM_W_QKV ||
           kind == TT_PARAM_W_GATE_UP;
}

bool tt_param_kind_is_norm(tt_param_kind kind) {
    return kind == TT_PARAM_ATTN_NORM || kind == TT_PARAM_MLP_NORM || kind == TT_PARAM_Q_NORM ||
           kind == TT_PARAM_K_NORM || kind == TT_PARAM_ATTN_POST_NORM || kind == TT_PARAM_MLP_POST_NORM ||
           kind == TT_PARAM_FINAL_NORM;
}

static tt_param_info *add_param(tt_param_table *t, int *capacity, tt_param_kind kind, int64_t layer, const char *name,
                                int ndim, int64_t d0, int64_t d1) {
    if (t->count == *capacity) {
        *capacity = *capacity ? 2 * *capacity : 64;
        t->params = tt_xrealloc(t->params, sizeof(tt_param_info) * (size_t)*capacity, "parameter table");
    }
    tt_param_info *p = &t->params[t->count++];
    memset(p, 0, sizeof(*p));
    snprintf(p->name, sizeof p->name, "%s", name);
    p->kind = kind;
    p->layer = layer;
    p->ndim = ndim;
    p->shape[0] = d0;
    p->shape[1] = ndim == 2 ? d1 : 1;
    p->numel = d0 * p->shape[1];
    p->storage_numel = p->numel;
    p->weight_decay = ndim == 2;
    p->trainable = true;
    p->expert = -1;
    return p;
}

static int64_t padded(int64_t numel) {
    return (numel + TT_PARAM_ALIGN_ELEMS - 1) / TT_PARAM_ALIGN_ELEMS * TT_PARAM_ALIGN_ELEMS;
}

static bool layer_frozen(const tt_trainable_spec *spec, int64_t layer) {
    for (int64_t i = 0; i < spec->frozen_layer_count; i++)
        if (spec->frozen_layers[i] == layer) return true;
    return false;
}

void tt_param_table_build(const tt_model_config *c, tt_param_table *t) { tt_param_table_build_trainable(c, NULL, t); }

/* The model's own parameters in checkpoint order: the embedding, each decoder layer's (its family's table), the
 * final norm, the LM head (unless tied). */
static void add_base_params(tt_param_table *t, int *capacity, const tt_model_config *c, bool untie_lm_head) {
    const tt_arch *arch = tt_arch_of(c);
    const char *prefix = arch->weight_prefix ? arch->weight_prefix : "model.";
    const int64_t D = c->hidden_size;
    char name[96];
    snprintf(name, sizeof name, "%sembed_tokens.weight", prefix);
    add_param(t, capacity, TT_PARAM_EMBED, -1, name, 2, c->vocab_size, D);
    for (int64_t l = 0; l < c->num_layers; l++)
        for (int i = 0; i < arch->layer_param_count; i++) {
            const tt_layer_param *p = &arch->layer_params[i];
            if (!tt_layer_param_present(p, c)) continue;
            for (int64_t e = 0; e < tt_layer_param_copies(p, c); e++) { /* an expert's: one each, by expert */
                char own[64] = "", full[160];
                if (tt_param_kind_is_expert(p->kind)) snprintf(own, sizeof own, p->name, (int)e); /* its index */
                const int n = snprintf(full, sizeof full, "%slayers.%lld.%s", prefix, (long long)l,
                                       tt_param_kind_is_expert(p->kind) ? own : p->name);
                TT_CHECK(n > 0 && (size_t)n < sizeof name, "parameter name %s too long", full);
                memcpy(name, full, (size_t)n + 1);
                tt_param_info *added = add_param(t, capacity, p->kind, l, name, p->cols == TT_DIM_ONE ? 1 : 2,
                                                 tt_dim_size(p->rows, c), tt_dim_size(p->cols, c));
                if (tt_param_kind_is_expert(p->kind)) added->expert = (int)e;
            }
        }
    snprintf(name, sizeof name, "%snorm.weight", prefix);
    add_param(t, capacity, TT_PARAM_FINAL_NORM, -1, name, 1, D, 1);
    t->lm_head_untied = c->tie_word_embeddings && untie_lm_head;
    if (!c->tie_word_embeddings || untie_lm_head)
        add_param(t, capacity, TT_PARAM_LM_HEAD, -1, arch->lm_head_name ? arch->lm_head_name : "lm_head.weight", 2,
                  c->vocab_size, D);
}

/* What the spec freezes among the first base_count (the base model's) parameters. */
static void freeze_base_params(tt_param_table *t, int base_count, const tt_trainable_spec *spec) {
    for (int i = 0; i < base_count; i++) {
        tt_param_info *p = &t->params[i];
        if (spec->lora_rank > 0 && !spec->freeze_all) /* LoRA: the whole base is frozen but for its modules_to_save */
            p->trainable = (p->kind == TT_PARAM_EMBED && (spec->lora_modules_to_save & TT_SAVE_EMBED_TOKENS)) ||
                           (p->kind == TT_PARAM_LM_HEAD && (spec->lora_modules_to_save & TT_SAVE_LM_HEAD));
        else if (spec->lora_rank > 0 || spec->freeze_all) p->trainable = false;
        else if (p->kind == TT_PARAM_EMBED && spec->freeze_embeddings)
            p->trainable = false; /* a tied LM head is this same tensor */
        else if (p->layer >= 0 && layer_frozen(spec, p->layer)) p->trainable = false;
    }
}

/* LoRA adapters, layer by layer, in module order, as PEFT names them. */
static void add_lora_params(tt_param_table *t, int *capacity, const tt_model_config *c, const tt_trainable_spec *spec) {
    char name[96];
    t->lora_rank = spec->lora_rank > 0 ? spec->lora_rank : 0;
    if (t->lora_rank > 0) {
        TT_CHECK((spec->lora_targets & ~TT_LORA_ALL_MODULES) == 0 && spec->lora_targets != 0, "LoRA targets 0x%x",
                 spec->lora_targets);
        const unsigned offered = tt_arch_lora_modules(c);
        for (int m = 0; m < TT_LORA_MODULE_COUNT; m++)
            if (((spec->lora_targets & ~offered) >> m) & 1u)
                tt_die("lora_target_modules names %s, but %s models have no such layer; use all-linear or name "
                       "their linear layers",
                       tt_lora_module_name((tt_lora_module)m), c->model_type);
        t->lora_targets = spec->lora_targets;
        t->lora_alpha = spec->lora_alpha;
        t->lora_rslora = spec->lora_rslora;
        t->lora_scaling =
            spec->lora_alpha / (spec->lora_rslora ? sqrt((double)spec->lora_rank) : (double)spec->lora_rank);
        t->lora_dropout = spec->lora_dropout;
        t->lora_modules_to_save = spec->lora_modules_to_save;
        const int64_t r = t->lora_rank;
        t->lora_layers = tt_arch_of(c)->peft_layers ? tt_arch_of(c)->peft_layers : "model.layers.";
        for (int64_t l = 0; l < c->num_layers; l++)
            for (int m = 0; m < TT_LORA_MODULE_COUNT; m++) {
                if (!((t->lora_targets >> m) & 1u)) continue;
                int64_t in, out;
                tt_arch_linear_shape(c, (tt_lora_module)m, &in, &out);
                snprintf(name, sizeof name, "base_model.model.%s%lld.%s.lora_A.weight", t->lora_layers, (long long)l,
                         tt_lora_module_path((tt_lora_module)m));
                add_param(t, capacity, TT_PARAM_LORA_A, l, name, 2, r, in)->lora_module = (tt_lora_module)m;
                snprintf(name, sizeof name, "base_model.model.%s%lld.%s.lora_B.weight", t->lora_layers, (long long)l,
                         tt_lora_module_path((tt_lora_module)m));
                add_param(t, capacity, TT_PARAM_LORA_B, l, name, 2, out, r)->lora_module = (tt_lora_module)m;
            }
    }
}

/* QLoRA: the frozen linear weights in 4 bits (a LoRA run: the whole base is frozen). */
static void quantize_linear_weights(tt_param_table *t, int base_count, const tt_trainable_spec *spec) {
    if (spec->quantize_base) {
        TT_CHECK(t->lora_rank > 0 && spec->quant_storage_elem > 0, "4-bit weights without LoRA or a storage element");
        TT_CHECK(spec->quant_format.type != TT_QUANT_INT8 || !spec->quant_format.double_quant,
                 "an 8-bit base has no double quantization");
        t->quantized = true;
        t->quant_format = spec->quant_format;
        for (int i = 0; i < base_count; i++) {
            tt_param_info *p = &t->params[i];
            if (!tt_param_kind_is_linear_weight(p->kind)) continue;
            if (spec->float_linear && p->layer >= 0 && (spec->float_linear[p->layer] >> p->kind) & 1u) continue;
            const size_t bytes = tt_quant4_layout_of(p->numel, &spec->quant_format).bytes;
            TT_CHECK(16 % spec->quant_storage_elem == 0, "4-bit weights in elements of %zu bytes",
                     spec->quant_storage_elem);
            p->quantized = true;
            p->storage_numel = (int64_t)((bytes + spec->quant_storage_elem - 1) / spec->quant_storage_elem);
        }
    }
}

int64_t tt_param_unit(const tt_param_info *p, int64_t num_layers) {
    if (p->kind == TT_PARAM_EMBED) return 0;
    if (p->kind == TT_PARAM_FINAL_NORM || p->kind == TT_PARAM_LM_HEAD) return num_layers + 1;
    return p->layer + 1;
}

/* The trainable parameters in layout order: by optimizer unit, in table order within one (LoRA's adapters follow the
 * base's parameters in the table, and a LoRA run's modules_to_save are base parameters of units 0 and L + 1).
 * order[count]; returns how many. */
static int trainable_order(const tt_param_table *t, int64_t num_layers, int *order) {
    int n = 0;
    for (int64_t u = 0; u <= num_layers + 1; u++)
        for (int i = 0; i < t->count; i++)
            if (t->params[i].trainable && tt_param_unit(&t->params[i], num_layers) == u) order[n++] = i;
    return n;
}

/* Offsets: the frozen part, then the trainable part, each in table order. A 4-bit weight needs 16-byte alignment
 * only (its bytes are a multiple of 16), so the 4-bit weights of a layer sit back to back and the frozen part
 * holds exactly their bytes, with padding only before the next parameter of the compute dtype. */
static void lay_out_offsets(tt_param_table *t, const tt_trainable_spec *spec, int64_t num_layers) {
    for (int i = 0; i < t->count; i++)
        if (!t->params[i].trainable) {
            const int64_t align =
                t->params[i].quantized ? (int64_t)(16 / spec->quant_storage_elem) : TT_PARAM_ALIGN_ELEMS;
            t->params[i].offset = (t->total_numel + align - 1) / align * align;
            t->total_numel = t->params[i].offset + t->params[i].storage_numel;
        }
    t->total_numel = padded(t->total_numel);
    t->total_numel =
        (t->total_numel + TT_TRAINABLE_ALIGN_ELEMS - 1) / TT_TRAINABLE_ALIGN_ELEMS * TT_TRAINABLE_ALIGN_ELEMS;
    t->trainable_start = t->total_numel;
    int *order = tt_xmalloc(sizeof(int) * (size_t)(t->count + 1), "the trainable order");
    const int n = trainable_order(t, num_layers, order);
    for (int k = 0; k < n; k++) {
        t->params[order[k]].offset = t->total_numel;
        t->total_numel += padded(t->params[order[k]].numel);
    }
    free(order);
    t->trainable_numel = t->total_numel - t->trainable_start;
}

/* Runs of trainable parameters that decay alike (AdamW's weight decay applies to matrices only). */
static void build_decay_segments(tt_param_table *t, int64_t num_layers) {
    t->decay_segment_start = tt_xmalloc(sizeof(int64_t) * (size_t)(t->count + 1), "weight-decay segments");
    t->decay_segment_decays = tt_xmalloc((size_t)t->count + 1, "weight-decay segments");
    t->decay_segments = 0;
    int *order = tt_xmalloc(sizeof(int) * (size_t)(t->count + 1), "the trainable order");
    const int n = trainable_order(t, num_layers, order); /* the order of their offsets */
    for (int k = 0; k < n; k++) {
        const tt_param_info *p = &t->params[order[k]];
        const unsigned char decay = p->weight_decay;
        if (t->decay_segments > 0 && t->decay_segment_decays[t->decay_segments - 1] == decay) continue;
        t->decay_segment_start[t->decay_segments] = p->offset - t->trainable_start;
        t->decay_segment_decays[t->decay_segments++] = decay;
    }
    free(order);
    t->decay_segment_start[t->decay_segments] = t->trainable_numel;
}

void tt_param_table_build_trainable(const tt_model_config *c, const tt_trainable_spec *spec, tt_param_table *t) {
    static const tt_trainable_spec train_everything = {0};
    if (!spec) spec = &train_everything;
    memset(t, 0, sizeof(*t));
    int capacity = 0;
    for (int64_t i = 0; i < spec->frozen_layer_count; i++)
        if (spec->frozen_layers[i] < 0 || spec->frozen_layers[i] >= c->num_layers)
            tt_die("frozen_layers lists layer %lld but the model has %lld decoder layers (0 to %lld); remove it",
                   (long long)spec->frozen_layers[i], (long long)c->num_layers, (long long)c->num_layers - 1);
    add_base_params(t, &capacity, c, spec->untie_lm_head);
    t->norm_init = 1.0f - tt_arch_of(c)->norm_weight_offset;
    const int base_count = t->count;
    freeze_base_params(t, base_count, spec);
    add_lora_params(t, &capacity, c, spec);
    quantize_linear_weights(t, base_count, spec);
    lay_out_offsets(t, spec, c->num_layers);
    build_decay_segments(t, c->num_layers);
}

void tt_param_table_free(tt_param_table *t) {
    free(t->params);
    free(t->decay_segment_start);
    free(t->decay_segment_decays);
    memset(t, 0, sizeof(*t));
}

const tt_param_info *tt_param_table_find(const tt_param_table *t, tt_param_kind kind, int64_t layer) {
    for (int i = 0; i < t->count; i++)
        if (t->params[i].kind == kind && t->params[i].layer == layer) return &t->params[i];
    return NULL;
}

const tt_param_info *tt_param_table_find_lora(const tt_param_table *t, tt_param_kind kind, tt_lora_module module,
                                              int64_t layer) {
    for (int i = 0; i < t->count; i++)
        if (t->params[i].kind == kind && t->params[i].layer == layer && t->params[i].lora_module == module)
            return &t->params[i];
    return NULL;
}

void tt_model_view_set(tt_model_view *view, const tt_param_info *p, void *ptr) {
    tt_layer_view *lv = p->layer >= 0 ? &view->layers[p->layer] : NULL;
    if (lv && p->quantized) lv->quantized |= 1u << p->kind;
    switch (p->kind) {
    case TT_PARAM_EMBED:
        view->embed = ptr;
        if (view->tied_head) view->lm_head = ptr;
        break;
    case TT_PARAM_FINAL_NORM: view->final_norm = ptr; break;
    case TT_PARAM_LM_HEAD: view->lm_head = ptr; break;
    case TT_PARAM_ATTN_NORM: lv->attn_norm = ptr; break;
    case TT_PARAM_WQ: lv->wq = ptr; break;
    case TT_PARAM_BQ: lv->bq = ptr; break;
    case TT_PARAM_WK: lv->wk = ptr; break;
    case TT_PARAM_BK: lv->bk = ptr; break;
    case TT_PARAM_WV: lv->wv = ptr; break;
    case TT_PARAM_BV: lv->bv = ptr; break;
    case TT_PARAM_WO: lv->wo = ptr; break;
    case TT_PARAM_BO: lv->bo = ptr; break;
    case TT_PARAM_Q_NORM: lv->q_norm = ptr; break;
    case TT_PARAM_K_NORM: lv->k_norm = ptr; break;
    case TT_PARAM_MLP_NORM: lv->mlp_norm = ptr; break;
    case TT_PARAM_ATTN_POST_NORM: lv->attn_post_norm = ptr; break;
    case TT_PARAM_MLP_POST_NORM: lv->mlp_post_norm = ptr; break;
    case TT_PARAM_W_GATE: lv->w_gate = ptr; break;
    case TT_PARAM_W_UP: lv->w_up = ptr; break;
    case TT_PARAM_W_DOWN: lv->w_down = ptr; break;
    case TT_PARAM_W_QKV: /* q, k and v are its row blocks (not addressable in 4 bits: the GEMMs dequantize it whole) */
        lv->w_qkv = ptr;
        if (!p->quantized) {
            lv->wq = ptr;
            lv->wk = (unsigned char *)ptr + (size_t)view->qkv_split[0] * view->elem_size;
            lv->wv = (unsigned char *)ptr + (size_t)view->qkv_split[1] * view->elem_size;
        }
        break;
    case TT_PARAM_W_GATE_UP:
        lv->w_gate_up = ptr;
        if (!p->quantized) {
            lv->w_gate = ptr;
            lv->w_up = (unsigned char *)ptr + (size_t)view->gate_up_split * view->elem_size;
        }
        break;
    case TT_PARAM_ROUTER: lv->router = ptr; break;
    case TT_PARAM_EXPERT_GATE:
        if (p->expert == 0) lv->expert_gate = ptr;
        break;
    case TT_PARAM_EXPERT_UP:
        if (p->expert == 0) lv->expert_up = ptr;
        break;
    case TT_PARAM_EXPERT_DOWN:
        if (p->expert == 0) lv->expert_down = ptr;
        break;
    case TT_PARAM_LORA_A: lv->lora_a[p->lora_module] = ptr; break;
    case TT_PARAM_LORA_B: lv->lora_b[p->lora_module] = ptr; break;
    default: TT_CHECK(0, "unknown parameter kind %d", (int)p->kind);
    }
}

/* Binds the parameters for which bind_frozen or p->trainable holds, at base + (offset - first) elements. */
static void bind_views(tt_model_view *view, tt_layer_view *layers, const tt_param_table *t, const tt_model_config *c,
                       void *base, size_t elem_size, bool bind_frozen, int64_t first) {
    memset(view, 0, sizeof(*view));
    memset(layers, 0, sizeof(tt_layer_view) * (size_t)c->num_layers);
    view->layers = layers;
    view->tied_head = c->tie_word_embeddings && !t->lm_head_untied;
    view->elem_size = elem_size;
    const int64_t q = c->num_heads * c->head_dim * c->hidden_size, kv = c->num_kv_heads * c->head_dim * c->hidden_size;
    view->qkv_split[0] = q;
    view->qkv_split[1] = q + kv;
    view->gate_up_split = c->intermediate_size * c->hidden_size;
    for (int i = 0; i < t->count; i++) {
        const tt_param_info *p = &t->params[i];
        if (!bind_frozen && !p->trainable) continue;
        tt_model_view_set(view, p, (unsigned char *)base + (size_t)(p->offset - first) * elem_size);
    }
}

void tt_model_view_bind(tt_model_view *view, tt_layer_view *layers, const tt_param_table *t, const tt_model_config *c,
                        void *base, size_t elem_size) {
    bind_views(view, layers, t, c, base, elem_size, true, 0);
}

void tt_model_view_bind_trainable(tt_model_view *view, tt_layer_view *layers, const tt_param_table *t,
                                  const tt_model_config *c, void *base, size_t elem_size) {
    bind_views(view, layers, t, c, base, elem_size, false, t->trainable_start);
}

void tt_model_view_bind_range(tt_model_view *view, const tt_param_table *t, int64_t first, int64_t end, void *base,
                              size_t elem_size) {
    for (int i = 0; i < t->count; i++) {
        const tt_param_info *p = &t->params[i];
        const int64_t at = p->offset - t->trainable_start;
        if (!p->trainable || at < first || at >= end) continue;
        tt_model_view_set(view, p, (unsigned char *)base + (size_t)(at - first) * elem_size);
    }
}
