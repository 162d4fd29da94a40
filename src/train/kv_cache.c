#include "train/kv_cache.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/dtype.h"
#include "train/block.h"
#include "train/step_internal.h"

void tt_kv_cache_init(tt_kv_cache *cache, const tt_model_state *s) {
    const tt_plan *p = &s->plan;
    TT_CHECK(p->micro_batch == 1 && !p->packed_documents && p->sequence_parallel == 1 && p->mlp_shards <= 1 &&
                 !p->stream_frozen_layers && p->offloaded_weight_layers == 0,
             "a KV cache runs on a state built for generation (one sequence, nothing tiled or streamed)");
    if (s->host.base || s->inputs.disk)
        tt_die("generation: the model with a context of %lld tokens does not fit the %s with every layer's input on it "
               "(the plan spilled some to host memory); give a shorter --max-context",
               (long long)p->seq_len, s->backend->name);
    memset(cache, 0, sizeof *cache);
    const tt_model_config *c = &s->config;
    cache->capacity = p->seq_len;
    cache->kv_width = c->num_kv_heads * c->head_dim;
    cache->row_bytes = (size_t)cache->kv_width * p->activation_bytes;
    const size_t layer_bytes = tt_mul_size((size_t)cache->capacity, cache->row_bytes, "the KV cache");
    const size_t bytes =
        tt_mul_size(tt_mul_size(layer_bytes, 2, "the KV cache"), (size_t)c->num_layers, "the KV cache");
    cache->block = tt_backend_block_alloc(s->backend, bytes);
    if (!cache->block)
        tt_die("the KV cache of %lld positions (%.2f GiB on the %s) does not fit; give a shorter --max-context",
               (long long)cache->capacity, (double)bytes / (double)(1ull << 30), s->backend->name);
    cache->rope_tables = s->sizes.rope_tables;
    const int64_t half = tt_model_rotary_dim(c) / 2;
    const size_t table_bytes = tt_mul_size(sizeof(float), (size_t)(cache->capacity * half), "RoPE table");
    const bool switches = tt_rope_long_factors(c, cache->capacity);
    for (int k = 0; switches && k < cache->rope_tables; k++)
        for (int factors = 0; factors < 2; factors++) {
            cache->host_cos[k][factors] = tt_xmalloc(table_bytes, "RoPE table");
            cache->host_sin[k][factors] = tt_xmalloc(table_bytes, "RoPE table");
            tt_rope_tables(c, k, factors == 1, cache->capacity, cache->host_cos[k][factors],
                           cache->host_sin[k][factors]);
        }
    cache->history = tt_xmalloc(tt_mul_size(sizeof(int32_t), (size_t)cache->capacity, "the KV cache"), "the KV cache");
    cache->host_logits = tt_xmalloc(tt_mul_size(sizeof(float), (size_t)c->vocab_size, "logits"), "logits");
    if (p->activation_bytes == 2)
        cache->host_staging = tt_xmalloc(tt_mul_size(2, (size_t)c->vocab_size, "logits"), "logits");
}

void tt_kv_cache_free(tt_kv_cache *cache, const tt_model_state *s) {
    if (cache->block) tt_backend_block_free(s->backend, cache->block);
    for (int k = 0; k < TT_ROPE_TABLES; k++)
        for (int factors = 0; factors < 2; factors++) {
            free(cache->host_cos[k][factors]);
            free(cache->host_sin[k][factors]);
        }
    free(cache->history);
    free(cache->host_logits);
    free(cache->host_staging);
    memset(cache, 0, sizeof *cache);
}

int64_t tt_kv_cache_first_position(const tt_model_state *s) { return s->kv_cache ? s->kv_cache->length : 0; }

static unsigned char *layer_keys(const tt_kv_cache *cache, int64_t l) {
    return (unsigned char *)cache->block + (size_t)(2 * l) * (size_t)cache->capacity * cache->row_bytes;
}

void tt_kv_cache_attend(tt_model_state *s, int64_t l, void *out, const void *q, const void *k, const void *v,
                        const tt_attention_shape *shape) {
    const tt_kv_cache *cache = s->kv_cache;
    const int64_t n = s->plan.seq_len;
    unsigned char *keys = layer_keys(cache, l), *values = keys + (size_t)cache->capacity * cache->row_bytes;
    const size_t at = (size_t)cache->length * cache->row_bytes, bytes = (size_t)n * cache->row_bytes;
    tt_backend_copy(s->backend, keys + at, k, bytes);
    tt_backend_copy(s->backend, values + at, v, bytes);
    tt_backend_attention_cached(s->backend, out, q, keys, values, cache->length, n, shape);
}

/* The rows of the tokens' positions into the state's RoPE tables, from the factors transformers takes for a forward
 * whose largest position is the last of them. */
static void place_rope_rows(tt_model_state *s, const tt_kv_cache *cache, int64_t n) {
    if (!cache->host_cos[0][0]) return; /* one set of factors for the whole context: the state's tables have them */
    const int64_t half = tt_model_rotary_dim(&s->config) / 2;
    const int factors = tt_rope_long_factors(&s->config, cache->length + n) ? 1 : 0;
    const size_t offset = (size_t)(cache->length * half), bytes = sizeof(float) * (size_t)(n * half);
    for (int k = 0; k < cache->rope_tables; k++) {
        tt_backend_upload(s->backend, s->rope_cos[k] + offset, cache->host_cos[k][factors] + offset, bytes);
        tt_backend_upload(s->backend, s->rope_sin[k] + offset, cache->host_sin[k][factors] + offset, bytes);
    }
}

/* The final norm of the last token's output and its logits z = x W^T into the cache's host buffer, scaled and capped
 * as the loss takes them. */
static void last_token_logits(tt_model_state *s, tt_kv_cache *cache, const void *x_last) {
    const tt_backend *b = s->backend;
    const tt_model_config *c = &s->config;
    const int64_t D = c->hidden_size, V = c->vocab_size;
    float *rstd = tt_arena_push(&s->arena, sizeof(float), TT_CLASS_SAVED_ACTIVATION, "final norm rstd");
    void *normed =
        tt_arena_push(&s->arena, (size_t)D * s->plan.activation_bytes, TT_CLASS_SAVED_ACTIVATION, "final norm output");
    void *logits = tt_arena_push(&s->arena, (size_t)V * s->plan.activation_bytes, TT_CLASS_LOGITS, "logits");
    tt_backend_rmsnorm_forward(b, normed, rstd, x_last, s->w.final_norm, NULL, 1, D, c->rms_norm_eps,
                               s->arch->norm_weight_offset);
    tt_backend_linear_forward(b, logits, normed, s->w.lm_head, NULL, NULL, 1, D, V);
    float *z = cache->host_logits;
    if (cache->host_staging) {
        tt_backend_download(b, cache->host_staging, logits, (size_t)V * 2);
        for (int64_t i = 0; i < V; i++) z[i] = tt_bf16_to_f32(cache->host_staging[i]);
    } else {
        tt_backend_download(b, z, logits, (size_t)V * sizeof(float));
    }
    const float scale = (float)tt_model_logit_scale(c), cap = (float)c->final_logit_softcap;
    for (int64_t i = 0; i < V; i++) {
        if (scale != 1.0f) z[i] *= scale;
        if (cap > 0.0f) z[i] = cap * tanhf(z[i] / cap);
    }
}

const float *tt_kv_forward(tt_model_state *s, tt_kv_cache *cache, const int32_t *ids, int64_t n) {
    TT_CHECK(n >= 1 && cache->length + n <= cache->capacity, "a forward of %lld tokens at position %lld of %lld",
             (long long)n, (long long)cache->length, (long long)cache->capacity);
    memcpy(cache->history + cache->length, ids, sizeof(int32_t) * (size_t)n);
    /* LongRoPE: the cached keys were rotated with the short factors; transformers' Phi-3 drops them once the sequence
     * passes original_max_position_embeddings and runs it all with the long ones */
    if (cache->host_cos[0][0] && cache->length > 0 && !tt_rope_long_factors(&s->config, cache->length) &&
        tt_rope_long_factors(&s->config, cache->length + n)) {
        n += cache->length;
        cache->length = 0;
        ids = cache->history;
    }
    const tt_backend *b = s->backend;
    const int64_t L = s->config.num_layers, D = s->config.hidden_size;
    const int64_t capacity = s->plan.seq_len;
    s->plan.seq_len = n; /* the blocks run over the plan's tokens: this forward's */
    s->kv_cache = cache;
    s->lora_dropout_on = false;
    place_rope_rows(s, cache, n);
    tt_backend_upload(b, s->batch_inputs, ids, sizeof(int32_t) * (size_t)n);

    const tt_arena_mark mark = tt_arena_get_mark(&s->arena);
    void *x[2];
    for (int i = 0; i < 2; i++)
        x[i] = tt_arena_push(&s->arena, s->sizes.layer_input, TT_CLASS_LAYER_INPUT, "layer input");
    tt_step_run_hooks(s, TT_HOOK_BEFORE_FORWARD, 0, false);
    tt_backend_embedding_forward(b, x[0], s->batch_inputs, s->w.embed, n, D, s->embedding_scale);
    tt_step_run_hooks(s, TT_HOOK_AFTER_FORWARD, 0, false);
    for (int64_t l = 0; l < L; l++) {
        saved_tensors slots;
        tt_step_push_slots(s, &slots, TT_ALL_SLOTS);
        tt_step_run_hooks(s, TT_HOOK_BEFORE_FORWARD, l + 1, false);
        s->block->forward(s, l, x[l % 2], slots.slot, x[(l + 1) % 2], TT_ALL_SLOTS);
        tt_arena_pop_to(&s->arena, slots.mark);
        tt_step_run_hooks(s, TT_HOOK_AFTER_FORWARD, l + 1, false);
    }
    tt_step_run_hooks(s, TT_HOOK_BEFORE_FORWARD, L + 1, false);
    const void *last = (const unsigned char *)x[L % 2] + (size_t)((n - 1) * D) * s->plan.activation_bytes;
    last_token_logits(s, cache, last);
    tt_arena_pop_to(&s->arena, mark);

    cache->length += n;
    s->kv_cache = NULL;
    s->plan.seq_len = capacity;
    return cache->host_logits;
}
