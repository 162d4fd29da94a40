/* The parameter table: every parameter's Hugging Face name, shape and place in the flat
 * parameter buffer. Weights, gradients, master weights and the two AdamW moments all use
 * this one layout, so "parameter i" is the same slice in each. Layers are contiguous
 * (embedding, layer 0, ..., layer L-1, final norm, LM head) so a layer can later be moved
 * between tiers as one block. */
#ifndef TT_MODEL_PARAMS_H
#define TT_MODEL_PARAMS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/model_config.h"

typedef enum tt_param_kind {
    TT_PARAM_EMBED,       /* [V, D] model.embed_tokens.weight */
    TT_PARAM_ATTN_NORM,   /* [D] input_layernorm */
    TT_PARAM_WQ,          /* [Hq*hd, D] */
    TT_PARAM_BQ,          /* [Hq*hd] (attention_bias) */
    TT_PARAM_WK,          /* [Hkv*hd, D] */
    TT_PARAM_BK,          /* [Hkv*hd] */
    TT_PARAM_WV,          /* [Hkv*hd, D] */
    TT_PARAM_BV,          /* [Hkv*hd] */
    TT_PARAM_WO,          /* [D, Hq*hd] */
    TT_PARAM_Q_NORM,      /* [hd] (qk_norm) */
    TT_PARAM_K_NORM,      /* [hd] */
    TT_PARAM_MLP_NORM,    /* [D] post_attention_layernorm */
    TT_PARAM_W_GATE,      /* [F, D] */
    TT_PARAM_W_UP,        /* [F, D] */
    TT_PARAM_W_DOWN,      /* [D, F] */
    TT_PARAM_FINAL_NORM,  /* [D] model.norm */
    TT_PARAM_LM_HEAD,     /* [V, D] (absent when tied) */
    TT_PARAM_KIND_COUNT
} tt_param_kind;

typedef struct tt_param_info {
    char name[96];        /* Hugging Face name */
    tt_param_kind kind;
    int64_t layer;        /* -1 for embedding, final norm, LM head */
    int ndim;
    int64_t shape[2];
    int64_t numel;
    int64_t offset;       /* in elements from the start of the flat buffer; multiple of 64 */
    bool weight_decay;    /* matrices decay; biases and norm weights do not (HF Trainer's rule) */
} tt_param_info;

typedef struct tt_param_table {
    tt_param_info *params;
    int count;
    int64_t total_numel;  /* elements of the flat buffer, padding included */
    int64_t *layer_offset;/* [L+1]: element offset where layer l starts; [L] = end of layers */
    /* The flat buffer as runs of neighbouring parameters with the same weight-decay rule (the
     * padding after a parameter joins its run): segment s is elements [decay_segment_start[s],
     * decay_segment_start[s+1]) and decays when decay_segment_decays[s]. The multi-tensor AdamW
     * updates the whole buffer in one call over these. */
    int decay_segments;
    int64_t *decay_segment_start;         /* [decay_segments + 1] */
    unsigned char *decay_segment_decays;  /* [decay_segments] */
} tt_param_table;

void tt_param_table_build(const tt_model_config *config, tt_param_table *table);
void tt_param_table_free(tt_param_table *table);
/* NULL when the model has no such parameter. */
const tt_param_info *tt_param_table_find(const tt_param_table *table, tt_param_kind kind, int64_t layer);

/* Typed views into a flat buffer (weights, gradients, ...). Absent parameters are NULL. */
typedef struct tt_layer_view {
    void *attn_norm, *wq, *bq, *wk, *bk, *wv, *bv, *wo, *q_norm, *k_norm;
    void *mlp_norm, *w_gate, *w_up, *w_down;
} tt_layer_view;

typedef struct tt_model_view {
    void *embed;
    tt_layer_view *layers; /* [L] */
    void *final_norm;
    void *lm_head;         /* == embed when tied */
} tt_model_view;

/* Binds views to base (elem_size bytes per element). layers must hold L entries. */
void tt_model_view_bind(tt_model_view *view, tt_layer_view *layers, const tt_param_table *table,
                        const tt_model_config *config, void *base, size_t elem_size);

#endif
