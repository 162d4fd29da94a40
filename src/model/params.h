/* The parameter table: every parameter's Hugging Face name, shape, whether it trains, and its
 * place in the flat parameter buffer. The buffer holds the frozen parameters first and the
 * trainable ones after them, from trainable_start on: the weights span the whole buffer, while
 * gradients, master weights and the two AdamW moments exist for the trainable part only and use
 * its layout (trainable parameter p is element p->offset - trainable_start there). With nothing
 * frozen, trainable_start is 0 and every buffer has the one layout.
 *
 * What trains (tt_trainable_spec): everything (full fine-tuning), everything but the embedding
 * and/or some decoder layers (freezing), or LoRA adapters on a frozen base: for each targeted
 * linear layer W [out, in] of each decoder layer, A [r, in] and B [out, r], named as PEFT saves
 * them. Within each part the order is the model's (embedding, layer 0, ..., layer L-1, final
 * norm, LM head, then the adapters layer by layer), and each layer's base parameters are one
 * contiguous block, so a layer can later move between tiers as one. */
#ifndef TT_MODEL_PARAMS_H
#define TT_MODEL_PARAMS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model/lora_modules.h"
#include "model/model_config.h"
#include "model/param_kind.h"
#include "ops/quant4.h"

typedef struct tt_param_info {
    char name[96]; /* Hugging Face name (PEFT's for adapters) */
    tt_param_kind kind;
    tt_lora_module lora_module; /* TT_PARAM_LORA_A and _B: the linear layer adapted */
    bool trainable;             /* receives a gradient, AdamW state and (with master weights) a master copy */
    int64_t layer;              /* -1 for embedding, final norm, LM head */
    int expert;                 /* an expert's parameter (TT_PARAM_EXPERT_*): which; else -1 */
    int ndim;
    int64_t shape[2];
    int64_t numel;
    /* QLoRA: a frozen linear weight stored in bitsandbytes' 4-bit format (ops/quant4.h). Its place in the
     * flat buffer then holds those bytes, tt_quant4_layout_of(numel).bytes of them, exactly storage_numel
     * elements of the compute copy (the bytes are a multiple of 16), starting 16-byte aligned; everything else has
     * storage_numel == numel. (The fp32 flat buffer of tt_model_set_weights, for tests and small models, holds the
     * same bytes at the same offset, with room to spare; the trainer never makes one for a frozen base.) */
    bool quantized;
    int64_t storage_numel;
    int64_t offset;    /* in elements from the start of the flat buffer; multiple of 64 (a 4-bit weight: 16 bytes) */
    bool weight_decay; /* matrices decay; biases and norm weights do not (HF Trainer's rule) */
} tt_param_info;

/* What trains. The default (all zero) trains every parameter. */
typedef struct tt_trainable_spec {
    bool freeze_embeddings;       /* the embedding (and the LM head when tied) is frozen */
    bool freeze_all;              /* nothing of the base model trains (generation: tiertrain inference) */
    const int64_t *frozen_layers; /* decoder layers frozen (borrowed), ascending */
    int64_t frozen_layer_count;
    int64_t lora_rank;             /* > 0: LoRA adapters of this rank on a frozen base */
    unsigned lora_targets;         /* set of tt_lora_module */
    double lora_alpha;             /* scaling = lora_alpha / lora_rank (rslora: / sqrt(lora_rank)) */
    bool lora_rslora;              /* rank-stabilized LoRA (PEFT's use_rslora) */
    double lora_dropout;           /* on each adapter's input, training only */
    unsigned lora_modules_to_save; /* set of tt_saved_module: base parts trained whole beside the adapters */
    /* an LM head of its own for a model whose head is its embedding (tie_word_embeddings), starting as the
     * embedding's copy: PEFT's modules_to_save wraps embed_tokens and lm_head apart, each its own copy */
    bool untie_lm_head;
    /* QLoRA (adapter: qlora; adapter: lora with load_in_8bit): the frozen linear weights of every decoder layer in
     * quant_format (4 bits, or 8), laid out in elements of quant_storage_elem bytes (the compute copy's; set by the
     * caller, who knows the precision) */
    bool quantize_base;
    tt_quant4_format quant_format;
    size_t quant_storage_elem;
    /* a 4-bit checkpoint's linear weights kept in float (tt_model_quantization.float_linear: [L] bits by kind, NULL:
     * none): they stay in the compute dtype, frozen, as transformers loads them */
    const uint32_t *float_linear;
} tt_trainable_spec;

typedef struct tt_param_table {
    tt_param_info *params;
    int count;
    int64_t total_numel;     /* elements of the flat buffer, padding included */
    int64_t trainable_start; /* trainable parameters are elements [trainable_start, total_numel); multiple of 128 */
    int64_t trainable_numel; /* total_numel - trainable_start: elements of gradients, master and moments */
    /* LoRA (lora_rank 0: none): every adapted layer computes W x + lora_scaling B A dropout(x). */
    int64_t lora_rank;
    unsigned lora_targets; /* set of tt_lora_module */
    double lora_alpha, lora_scaling, lora_dropout;
    bool lora_rslora;              /* scaling = lora_alpha / sqrt(lora_rank) (PEFT's use_rslora) */
    unsigned lora_modules_to_save; /* set of tt_saved_module: trainable base parts saved with the adapters */
    /* the LM head is a parameter of its own although the model ties it to the embedding (tt_trainable_spec's
     * untie_lm_head): a checkpoint without lm_head.weight gives it the embedding's values */
    bool lm_head_untied;
    const char *lora_layers; /* PEFT's module path of the decoder layers (tt_arch.peft_layers; "model.layers.") */
    /* a norm weight's value at random init: 1, or 0 where the norm multiplies by (1 + w) (Gemma), as transformers */
    float norm_init;
    /* QLoRA: the decoder layers' linear weights are quantized (tt_param_info.quantized), in this format */
    bool quantized;
    tt_quant4_format quant_format;
    /* The trainable part as runs of neighbouring parameters with the same weight-decay rule (the
     * padding after a parameter joins its run), in the trainable layout: segment s is elements
     * [decay_segment_start[s], decay_segment_start[s+1]) and decays when decay_segment_decays[s]. The
     * multi-tensor AdamW updates every trainable parameter in one call over these. */
    int decay_segments;
    int64_t *decay_segment_start;        /* [decay_segments + 1] */
    unsigned char *decay_segment_decays; /* [decay_segments] */
} tt_param_table;

/* Every parameter trainable. */
void tt_param_table_build(const tt_model_config *config, tt_param_table *table);
/* spec NULL: every parameter trainable. A frozen layer past the model's layers is an error naming frozen_layers. */
void tt_param_table_build_trainable(const tt_model_config *config, const tt_trainable_spec *spec,
                                    tt_param_table *table);
void tt_param_table_free(tt_param_table *table);
/* The optimizer unit of a parameter (its place in the trainable layout): 0 the embedding, l + 1 decoder layer l,
 * num_layers + 1 the final norm and the LM head. */
int64_t tt_param_unit(const tt_param_info *p, int64_t num_layers);
/* NULL when the model has no such parameter. */
const tt_param_info *tt_param_table_find(const tt_param_table *table, tt_param_kind kind, int64_t layer);
/* The adapter of a linear layer: TT_PARAM_LORA_A or _B of module in layer; NULL when not adapted. */
const tt_param_info *tt_param_table_find_lora(const tt_param_table *table, tt_param_kind kind, tt_lora_module module,
                                              int64_t layer);

/* Typed views into a flat buffer (weights, gradients, ...). Absent parameters are NULL. */
typedef struct tt_layer_view {
    void *attn_norm, *wq, *bq, *wk, *bk, *wv, *bv, *wo, *bo, *q_norm, *k_norm, *attn_post_norm;
    void *mlp_norm, *w_gate, *w_up, *w_down, *mlp_post_norm;
    void *w_qkv, *w_gate_up; /* a fused layer's whole weight (Phi-3), whose row blocks wq/wk/wv, w_gate/w_up are */
    /* a mixture of experts: the router [E, D] and the experts' projections, the first expert's (the E lie back to
     * back: [E, Fm, D], [E, Fm, D], [E, D, Fm]) */
    void *router, *expert_gate, *expert_up, *expert_down;
    uint32_t quantized; /* bit per tt_param_kind: the layer's linear weights stored in 4 bits (QLoRA) */
    void *lora_a[TT_LORA_MODULE_COUNT], *lora_b[TT_LORA_MODULE_COUNT]; /* NULL where not adapted */
} tt_layer_view;

typedef struct tt_model_view {
    void *embed;
    tt_layer_view *layers; /* [L] */
    void *final_norm;
    void *lm_head;  /* == embed when tied */
    bool tied_head; /* tie_word_embeddings: setting the embedding sets lm_head too (tt_model_view_set) */
    /* where a fused weight's row blocks start, in elements of elem_size bytes (k's and v's in qkv_proj, up's in
     * gate_up_proj) */
    size_t elem_size;
    int64_t qkv_split[2], gate_up_split;
} tt_model_view;

/* Binds views to base, a whole flat buffer (elem_size bytes per element). layers must hold L entries. */
void tt_model_view_bind(tt_model_view *view, tt_layer_view *layers, const tt_param_table *table,
                        const tt_model_config *config, void *base, size_t elem_size);
/* Points the view's entry of parameter p at ptr (a tied model's LM head follows the embedding). */
void tt_model_view_set(tt_model_view *view, const tt_param_info *p, void *ptr);
/* Binds views to base, a buffer in the trainable layout (gradients): frozen parameters are NULL. */
void tt_model_view_bind_trainable(tt_model_view *view, tt_layer_view *layers, const tt_param_table *table,
                                  const tt_model_config *config, void *base, size_t elem_size);
/* Re-points the trainable parameters at trainable-layout elements [first, end) to base, which holds
 * that range (element first at base); the others keep their pointers. */
void tt_model_view_bind_range(tt_model_view *view, const tt_param_table *table, int64_t first, int64_t end, void *base,
                              size_t elem_size);

#endif
