/* The tiny decoder the CPU step tests train: 3 layers, hidden 24, 4 query and 2 kv heads, vocab
 * 50; qwen3 = true gives tied embeddings, q/k norms and head_dim 8, false a Llama with attention
 * biases and head_dim 6. */
#ifndef TT_TESTS_TINY_MODEL_H
#define TT_TESTS_TINY_MODEL_H

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model_config.h"

static inline tt_model_config tt_test_tiny_config(bool qwen3) {
    tt_model_config c;
    memset(&c, 0, sizeof c);
    snprintf(c.model_type, sizeof c.model_type, "%s", qwen3 ? "qwen3" : "llama");
    c.vocab_size = 50;
    c.hidden_size = 24;
    c.intermediate_size = 40;
    c.num_layers = 3;
    c.num_heads = 4;
    c.num_kv_heads = 2;
    c.head_dim = qwen3 ? 8 : 6;
    c.max_position_embeddings = 64;
    c.rms_norm_eps = 1e-6;
    c.rope_theta = 10000;
    c.tie_word_embeddings = qwen3;
    c.attention_bias = !qwen3;
    c.dtype = TT_F32;
    c.bos_token_id = c.eos_token_id = -1;
    return c;
}

/* A tiny model of each family (model_type), the Llama-shaped one above with the family's features switched on:
 * gemma3_text: layers sliding (window 4), full, sliding, the sliding ones on a local RoPE table, linear scaling on the
 * full one's, q/k norms, GeGLU, (1 + w) norms around both halves, a scaled embedding and attention; gemma2: the same
 * layers on one table, soft-capped scores and logits; olmo2: norms after each half only, q/k norms over the projection;
 * smollm3: the middle layer without RoPE; granite: its four multipliers, with attention biases (o_proj's too); phi3:
 * fused q/k/v and gate/up, partial rotary, LongRoPE. The
 * config owns its layer table: tt_model_config_free releases it. */
static inline tt_model_config tt_test_tiny_family(const char *model_type) {
    const bool qwen3 = strcmp(model_type, "qwen3") == 0;
    tt_model_config c = tt_test_tiny_config(qwen3);
    snprintf(c.model_type, sizeof c.model_type, "%s", model_type);
    if (qwen3 || strcmp(model_type, "llama") == 0) return c;
    c.attention_bias = false;
    c.head_dim = 8;
    const bool gemma3 = strcmp(model_type, "gemma3_text") == 0, gemma2 = strcmp(model_type, "gemma2") == 0;
    if (gemma3 || gemma2 || strcmp(model_type, "smollm3") == 0) {
        c.layer_attention = (tt_layer_attention *)calloc((size_t)c.num_layers, sizeof(tt_layer_attention));
        for (int64_t l = 0; l < c.num_layers; l++) c.layer_attention[l].rope = TT_ROPE_TABLE_GLOBAL;
    }
    if (gemma3 || gemma2) {
        c.tie_word_embeddings = true;
        c.sliding_window = 4;
        c.attention_scale = 1.0 / sqrt(10.0);
        c.embedding_scale = sqrt((double)c.hidden_size);
        c.embedding_scale_in_compute_dtype = true;
        for (int64_t l = 0; l < c.num_layers; l++) c.layer_attention[l].sliding = l != 1;
    }
    if (gemma3) {
        c.rope_theta = 1e6;
        c.rope_type = TT_ROPE_LINEAR;
        c.rope_factor = 4;
        c.rope_local_theta = 1e4;
        for (int64_t l = 0; l < c.num_layers; l++)
            c.layer_attention[l].rope = l != 1 ? TT_ROPE_TABLE_LOCAL : TT_ROPE_TABLE_GLOBAL;
    }
    if (gemma2) {
        c.attention_softcap = 2.0;
        c.final_logit_softcap = 3.0;
    }
    if (strcmp(model_type, "smollm3") == 0) c.layer_attention[1].rope = TT_ROPE_TABLE_NONE;
    if (strcmp(model_type, "phi3") == 0) { /* 6 of head_dim 8 rotated, LongRoPE's long factors (7 tokens past 4) */
        c.tie_word_embeddings = true;
        c.rotary_dim = 6;
        c.rope_type = TT_ROPE_LONGROPE;
        c.rope_original_max_position = 4;
        c.rope_attention_factor = 1.2;
        c.rope_short_factor = (float *)malloc(3 * sizeof(float));
        c.rope_long_factor = (float *)malloc(3 * sizeof(float));
        for (int i = 0; i < 3; i++) {
            c.rope_short_factor[i] = 1.0f + 0.25f * (float)i;
            c.rope_long_factor[i] = 1.5f + 2.0f * (float)i;
        }
    }
    if (strcmp(model_type, "qwen3_moe") ==
        0) { /* Qwen3's attention, 4 experts of 8 (24 x 8: a multiple of 64), 2 a token */
        c.num_experts = 4;
        c.num_experts_per_tok = 2;
        c.moe_intermediate_size = 8;
        c.norm_topk_prob = true;
    }
    if (strcmp(model_type, "granite") == 0) {
        c.attention_bias = true;
        c.embedding_scale = 2.0;
        c.residual_scale = 0.5;
        c.attention_scale = 0.3;
        c.logit_scale = 1.0 / 2.5;
    }
    return c;
}

#endif
