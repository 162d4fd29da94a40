/* The tiny decoder the CPU step tests train: 3 layers, hidden 24, 4 query and 2 kv heads, vocab
 * 50; qwen3 = true gives tied embeddings, q/k norms and head_dim 8, false a Llama with attention
 * biases and head_dim 6. */
#ifndef TT_TESTS_TINY_MODEL_H
#define TT_TESTS_TINY_MODEL_H

#include <stdbool.h>
#include <stdio.h>
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

#endif
