#include "model/params.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"

/* Offsets are rounded to 64 elements so every parameter starts 256-byte aligned in fp32
 * (and 128-byte in bf16): vector loads and GPU kernels need no special cases. */
#define TT_PARAM_ALIGN_ELEMS 64

static void add_param(tt_param_table *t, int *capacity, tt_param_kind kind, int64_t layer, const char *name,
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
    p->offset = t->total_numel;
    p->weight_decay = ndim == 2;
    t->total_numel += (p->numel + TT_PARAM_ALIGN_ELEMS - 1) / TT_PARAM_ALIGN_ELEMS * TT_PARAM_ALIGN_ELEMS;
}

void tt_param_table_build(const tt_model_config *c, tt_param_table *t) {
    memset(t, 0, sizeof(*t));
    int capacity = 0;
    const int64_t D = c->hidden_size, F = c->intermediate_size, hd = c->head_dim;
    const int64_t q_dim = c->num_heads * hd, kv_dim = c->num_kv_heads * hd;
    char name[96];
    t->layer_offset = tt_xcalloc((size_t)c->num_layers + 1, sizeof(int64_t), "layer offsets");

    add_param(t, &capacity, TT_PARAM_EMBED, -1, "model.embed_tokens.weight", 2, c->vocab_size, D);
    for (int64_t l = 0; l < c->num_layers; l++) {
        t->layer_offset[l] = t->total_numel;
#define LAYER_PARAM(kind, suffix, ndim, d0, d1)                                   \
    do {                                                                          \
        snprintf(name, sizeof name, "model.layers.%lld.%s", (long long)l, suffix); \
        add_param(t, &capacity, kind, l, name, ndim, d0, d1);                     \
    } while (0)
        LAYER_PARAM(TT_PARAM_ATTN_NORM, "input_layernorm.weight", 1, D, 1);
        LAYER_PARAM(TT_PARAM_WQ, "self_attn.q_proj.weight", 2, q_dim, D);
        if (c->attention_bias) LAYER_PARAM(TT_PARAM_BQ, "self_attn.q_proj.bias", 1, q_dim, 1);
        LAYER_PARAM(TT_PARAM_WK, "self_attn.k_proj.weight", 2, kv_dim, D);
        if (c->attention_bias) LAYER_PARAM(TT_PARAM_BK, "self_attn.k_proj.bias", 1, kv_dim, 1);
        LAYER_PARAM(TT_PARAM_WV, "self_attn.v_proj.weight", 2, kv_dim, D);
        if (c->attention_bias) LAYER_PARAM(TT_PARAM_BV, "self_attn.v_proj.bias", 1, kv_dim, 1);
        LAYER_PARAM(TT_PARAM_WO, "self_attn.o_proj.weight", 2, D, q_dim);
        if (c->qk_norm) {
            LAYER_PARAM(TT_PARAM_Q_NORM, "self_attn.q_norm.weight", 1, hd, 1);
            LAYER_PARAM(TT_PARAM_K_NORM, "self_attn.k_norm.weight", 1, hd, 1);
        }
        LAYER_PARAM(TT_PARAM_MLP_NORM, "post_attention_layernorm.weight", 1, D, 1);
        LAYER_PARAM(TT_PARAM_W_GATE, "mlp.gate_proj.weight", 2, F, D);
        LAYER_PARAM(TT_PARAM_W_UP, "mlp.up_proj.weight", 2, F, D);
        LAYER_PARAM(TT_PARAM_W_DOWN, "mlp.down_proj.weight", 2, D, F);
#undef LAYER_PARAM
    }
    t->layer_offset[c->num_layers] = t->total_numel;
    add_param(t, &capacity, TT_PARAM_FINAL_NORM, -1, "model.norm.weight", 1, D, 1);
    if (!c->tie_word_embeddings) add_param(t, &capacity, TT_PARAM_LM_HEAD, -1, "lm_head.weight", 2, c->vocab_size, D);

    t->decay_segment_start = tt_xmalloc(sizeof(int64_t) * (size_t)(t->count + 1), "weight-decay segments");
    t->decay_segment_decays = tt_xmalloc((size_t)t->count, "weight-decay segments");
    t->decay_segments = 0;
    for (int i = 0; i < t->count; i++) {
        const unsigned char decay = t->params[i].weight_decay;
        if (t->decay_segments > 0 && t->decay_segment_decays[t->decay_segments - 1] == decay) continue;
        t->decay_segment_start[t->decay_segments] = t->params[i].offset;
        t->decay_segment_decays[t->decay_segments++] = decay;
    }
    t->decay_segment_start[t->decay_segments] = t->total_numel;
}

void tt_param_table_free(tt_param_table *t) {
    free(t->params);
    free(t->layer_offset);
    free(t->decay_segment_start);
    free(t->decay_segment_decays);
    memset(t, 0, sizeof(*t));
}

const tt_param_info *tt_param_table_find(const tt_param_table *t, tt_param_kind kind, int64_t layer) {
    for (int i = 0; i < t->count; i++)
        if (t->params[i].kind == kind && t->params[i].layer == layer) return &t->params[i];
    return NULL;
}

void tt_model_view_bind(tt_model_view *view, tt_layer_view *layers, const tt_param_table *t,
                        const tt_model_config *c, void *base, size_t elem_size) {
    memset(view, 0, sizeof(*view));
    memset(layers, 0, sizeof(tt_layer_view) * (size_t)c->num_layers);
    view->layers = layers;
    for (int i = 0; i < t->count; i++) {
        const tt_param_info *p = &t->params[i];
        void *ptr = (unsigned char *)base + (size_t)p->offset * elem_size;
        tt_layer_view *lv = p->layer >= 0 ? &layers[p->layer] : NULL;
        switch (p->kind) {
        case TT_PARAM_EMBED: view->embed = ptr; break;
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
        case TT_PARAM_Q_NORM: lv->q_norm = ptr; break;
        case TT_PARAM_K_NORM: lv->k_norm = ptr; break;
        case TT_PARAM_MLP_NORM: lv->mlp_norm = ptr; break;
        case TT_PARAM_W_GATE: lv->w_gate = ptr; break;
        case TT_PARAM_W_UP: lv->w_up = ptr; break;
        case TT_PARAM_W_DOWN: lv->w_down = ptr; break;
        default: TT_CHECK(0, "unknown parameter kind %d", (int)p->kind);
        }
    }
    if (c->tie_word_embeddings) view->lm_head = view->embed;
}
