/* The dense decoder layer of every family here (block.h): an attention half and a gated MLP half, each
 *   h = x + join(f(in(x)))
 * with in() the half's pre-norm (or nothing: OLMo 2), join() the residual stream's add, directly, after a norm (Gemma's
 * sandwich, OLMo 2's post-norms) or after a multiplier (Granite's residual_multiplier), and f the half:
 *   attention: o(attention(rope(qk_norm(q(n))), rope(qk_norm(k(n))), v(n)))
 *   MLP:       down(act(gate(m)) * up(m))
 * qk_norm per head (Qwen3, Gemma 3), over the whole projection (OLMo 2) or none; RoPE from the layer's table, or none
 * (SmolLM3's NoPE layers); the attention causal or over the layer's window; act silu or tanh gelu; every norm weighted
 * by w or by (1 + w) (Gemma). The LoRA adapters of the adapted linear layers run around their base layers. What varies
 * comes from the family's description (model/arch.h) and the model's config; the slots each variant writes are its
 * family's table. */
#include "train/block.h"

#include "train/block_parts.h"
#include "train/kv_cache.h"
#include "train/step_internal.h"

#define WANTS(slots) ((compute & (slots)) != 0)

/* The projections that read one input, whose adapters run as a group (a fused layer's one adapter once). */
static const tt_lora_module qkv[3] = {TT_LORA_Q, TT_LORA_K, TT_LORA_V}, gate_up[2] = {TT_LORA_GATE, TT_LORA_UP};
static const tt_lora_module o = TT_LORA_O, down = TT_LORA_DOWN;

static bool has_pre_norm(const tt_model_state *s) { return s->arch->norm_placement != TT_NORM_POST; }
static bool has_post_norm(const tt_model_state *s) { return s->arch->norm_placement != TT_NORM_PRE; }

static int64_t tokens(const tt_model_state *s) { return s->plan.micro_batch * s->plan.seq_len; }

/* y = x W^T (+ b) (+ residual) of one of the layer's linear weights, then its adapter's up projection. */
static void projection(tt_model_state *s, int64_t l, tt_lora_module module, tt_param_kind kind, void *y, const void *x,
                       const void *W, const void *bias, const void *residual, int64_t in, int64_t out, void *const *S) {
    const tt_layer_view *w = &s->w_layers[l];
    tt_backend_linear_forward(s->backend, y, x, tt_block_gemm_weight(s, w, kind, W, in * out), bias, residual,
                              tokens(s), in, out);
    tt_block_adapter_up(s, l, module, y, S);
}

/* RoPE of q or k ([N, heads * hd]) from layer l's table, in place; nothing in a layer without RoPE. */
static void rope(tt_model_state *s, int64_t l, void *x, int64_t heads, bool backward) {
    const int table = tt_model_layer_attention(&s->config, l).rope;
    if (table == TT_ROPE_TABLE_NONE) return;
    const tt_rope_layout r = tt_block_rope_layout(s);
    const int64_t hd = s->config.head_dim, rotary_dim = tt_model_rotary_dim(&s->config);
    /* generation: the tokens start at the KV cache's next position */
    const int64_t first_row = tt_kv_cache_first_position(s) * (rotary_dim / 2);
    const float *cos = s->rope_cos[table] + first_row, *sin = s->rope_sin[table] + first_row;
    if (backward) tt_backend_rope_backward(s->backend, x, cos, sin, r.sequences, r.rows, heads, hd, rotary_dim);
    else tt_backend_rope_forward(s->backend, x, cos, sin, r.sequences, r.rows, heads, hd, rotary_dim);
}

/* The rows and width of a q/k norm over `heads` heads: one row a head, or one a token over the whole projection. */
static void qk_norm_shape(const tt_model_state *s, int64_t heads, int64_t *rows, int64_t *width) {
    const int64_t hd = s->config.head_dim;
    const bool per_head = s->arch->qk_norm == TT_QK_NORM_PER_HEAD;
    *rows = per_head ? tokens(s) * heads : tokens(s);
    *width = per_head ? hd : heads * hd;
}

/* q or k: projected (raw), normed, rotated: the slots of `compute` among raw, rstd and the result. */
static void qk_forward(tt_model_state *s, int64_t l, const void *in, void *const *S, tt_slot_set compute, bool is_q) {
    const tt_model_config *c = &s->config;
    const tt_layer_view *w = &s->w_layers[l];
    const int64_t D = c->hidden_size, heads = is_q ? c->num_heads : c->num_kv_heads, dim = heads * c->head_dim;
    const tt_saved_slot out = is_q ? TT_SAVED_Q : TT_SAVED_K, raw = is_q ? TT_SAVED_Q_RAW : TT_SAVED_K_RAW;
    const tt_saved_slot rstd = is_q ? TT_SAVED_Q_RSTD : TT_SAVED_K_RSTD;
    const tt_lora_module module = is_q ? TT_LORA_Q : TT_LORA_K;
    const tt_param_kind kind = is_q ? TT_PARAM_WQ : TT_PARAM_WK;
    const void *W = is_q ? w->wq : w->wk, *bias = is_q ? w->bq : w->bk;
    if (s->arch->qk_norm == TT_QK_NORM_NONE) {
        if (!WANTS(TT_SLOT(out))) return;
        projection(s, l, module, kind, S[out], in, W, bias, NULL, D, dim, S);
        rope(s, l, S[out], heads, false);
        return;
    }
    if (WANTS(TT_SLOT(raw))) projection(s, l, module, kind, S[raw], in, W, bias, NULL, D, dim, S);
    /* the result = rope(norm(raw)), written together with its rstd */
    if (WANTS(TT_SLOT(out) | TT_SLOT(rstd))) {
        int64_t rows, width;
        qk_norm_shape(s, heads, &rows, &width);
        tt_backend_rmsnorm_forward(s->backend, S[out], S[rstd], S[raw], is_q ? w->q_norm : w->k_norm, NULL, rows, width,
                                   c->rms_norm_eps, s->arch->norm_weight_offset);
        rope(s, l, S[out], heads, false);
    }
}

/* The attention of layer l (Ulysses sequence parallel trades tokens for heads around it). */
static const tt_attention_shape *attention_shape(const tt_model_state *s, int64_t l) {
    return &s->attention[tt_model_layer_attention(&s->config, l).sliding];
}

/* The attention half forward: x_in -> the residual after attention (and the half's slots in `compute`). */
void tt_block_dense_attention_forward(tt_model_state *s, int64_t l, const void *x_in, void *const *S,
                                      tt_slot_set compute) {
    const tt_backend *b = s->backend;
    const tt_model_config *c = &s->config;
    const tt_layer_view *w = &s->w_layers[l];
    const int64_t N = tokens(s), D = c->hidden_size;
    const int64_t q_dim = c->num_heads * c->head_dim, kv_dim = c->num_kv_heads * c->head_dim;
    const float offset = s->arch->norm_weight_offset;

    const void *in = x_in;
    if (has_pre_norm(s)) {
        if (WANTS(TT_SLOT(TT_SAVED_ATTN_NORMED) | TT_SLOT(TT_SAVED_ATTN_RSTD)))
            tt_backend_rmsnorm_forward(b, S[TT_SAVED_ATTN_NORMED], S[TT_SAVED_ATTN_RSTD], x_in, w->attn_norm, NULL, N,
                                       D, c->rms_norm_eps, offset);
        in = S[TT_SAVED_ATTN_NORMED];
    }
    tt_block_adapters_down(s, l, qkv, 3, in, S, compute);
    qk_forward(s, l, in, S, compute, true);
    qk_forward(s, l, in, S, compute, false);
    if (WANTS(TT_SLOT(TT_SAVED_V)))
        projection(s, l, TT_LORA_V, TT_PARAM_WV, S[TT_SAVED_V], in, w->wv, w->bv, NULL, D, kv_dim, S);
    if (WANTS(TT_SLOT(TT_SAVED_ATTN_OUT) | TT_SLOT(TT_SAVED_LSE))) {
        if (s->kv_cache) /* generation: over the cached keys and values, the new ones appended */
            tt_kv_cache_attend(s, l, S[TT_SAVED_ATTN_OUT], S[TT_SAVED_Q], S[TT_SAVED_K], S[TT_SAVED_V],
                               attention_shape(s, l));
        else if (s->plan.sequence_parallel > 1) /* Ulysses: tokens traded for heads around the attention */
            tt_sequence_parallel_attention_forward(s, attention_shape(s, l), S[TT_SAVED_ATTN_OUT], S[TT_SAVED_LSE],
                                                   S[TT_SAVED_Q], S[TT_SAVED_K], S[TT_SAVED_V]);
        else
            tt_backend_attention_forward(b, S[TT_SAVED_ATTN_OUT], S[TT_SAVED_LSE], S[TT_SAVED_Q], S[TT_SAVED_K],
                                         S[TT_SAVED_V], attention_shape(s, l));
    }
    tt_block_adapters_down(s, l, &o, 1, S[TT_SAVED_ATTN_OUT], S, compute);
    /* the join: residual + o(attention), after the norm after attention, or scaled */
    if (has_post_norm(s)) {
        if (WANTS(TT_SLOT(TT_SAVED_ATTN_PROJ)))
            projection(s, l, TT_LORA_O, TT_PARAM_WO, S[TT_SAVED_ATTN_PROJ], S[TT_SAVED_ATTN_OUT], w->wo, w->bo, NULL,
                       q_dim, D, S);
        if (WANTS(TT_SLOT(TT_SAVED_RESIDUAL_MID) | TT_SLOT(TT_SAVED_ATTN_POST_RSTD)))
            tt_backend_rmsnorm_forward(b, S[TT_SAVED_RESIDUAL_MID], S[TT_SAVED_ATTN_POST_RSTD], S[TT_SAVED_ATTN_PROJ],
                                       w->attn_post_norm, x_in, N, D, c->rms_norm_eps, offset);
    } else if (WANTS(TT_SLOT(TT_SAVED_RESIDUAL_MID))) {
        const double scale = tt_model_residual_scale(c);
        void *mid = S[TT_SAVED_RESIDUAL_MID];
        projection(s, l, TT_LORA_O, TT_PARAM_WO, mid, S[TT_SAVED_ATTN_OUT], w->wo, w->bo, scale == 1.0 ? x_in : NULL,
                   q_dim, D, S);
        if (scale != 1.0) { /* Granite: x + (o(attention) * m), in that order */
            tt_backend_dropout_scale(b, mid, mid, N * D, (float)scale, 0, 0);
            tt_backend_add(b, mid, x_in, mid, N * D);
        }
    }
}

/* The MLP's intermediates for the rows of one shard (all rows untiled), from the MLP's input (its pre-norm's output, or
 * the residual after attention) and the gate/up adapters' down projections: gate, up and act(gate) * up (those in
 * `compute`) into their slots, which hold the shard alone when tiled, and down_proj's adapter projection into its
 * rows. */
static void mlp_intermediates(tt_model_state *s, int64_t l, const void *mlp_in, void *const *S, tt_slot_set compute,
                              const tt_row_range *rows) {
    const tt_backend *b = s->backend;
    const tt_layer_view *w = &s->w_layers[l];
    const int64_t D = s->config.hidden_size, F = s->config.intermediate_size, n = rows->count;
    const void *in = tt_block_row_at(s, (void *)mlp_in, rows->first, D);
    if ((compute >> TT_SAVED_GATE) & 1u) {
        tt_backend_linear_forward(b, S[TT_SAVED_GATE], in,
                                  tt_block_gemm_weight(s, w, TT_PARAM_W_GATE, w->w_gate, F * D), NULL, NULL, n, D, F);
        tt_block_adapter_up_rows(s, l, TT_LORA_GATE, S[TT_SAVED_GATE], S, rows);
    }
    if ((compute >> TT_SAVED_UP) & 1u) {
        tt_backend_linear_forward(b, S[TT_SAVED_UP], in, tt_block_gemm_weight(s, w, TT_PARAM_W_UP, w->w_up, F * D),
                                  NULL, NULL, n, D, F);
        tt_block_adapter_up_rows(s, l, TT_LORA_UP, S[TT_SAVED_UP], S, rows);
    }
    if ((compute >> TT_SAVED_GLU) & 1u)
        tt_backend_glu_forward(b, S[TT_SAVED_GLU], S[TT_SAVED_GATE], S[TT_SAVED_UP], n * F, s->arch->activation);
    tt_block_adapters_down_rows(s, l, &down, 1, S[TT_SAVED_GLU], S, compute, rows);
}

/* The MLP's input: its pre-norm's output, or the residual after attention itself. */
static void *mlp_input(const tt_model_state *s, void *const *S) {
    return has_pre_norm(s) ? S[TT_SAVED_MLP_NORMED] : S[TT_SAVED_RESIDUAL_MID];
}

/* The MLP half forward: the residual after attention -> x_out (unless NULL) and the half's slots in `compute`. */
static void mlp_forward(tt_model_state *s, int64_t l, void *const *S, void *x_out, tt_slot_set compute) {
    const tt_backend *b = s->backend;
    const tt_model_config *c = &s->config;
    const tt_layer_view *w = &s->w_layers[l];
    const int64_t N = tokens(s), D = c->hidden_size, F = c->intermediate_size;
    const float offset = s->arch->norm_weight_offset;
    const double scale = tt_model_residual_scale(c);

    if (has_pre_norm(s) && WANTS(TT_SLOT(TT_SAVED_MLP_NORMED) | TT_SLOT(TT_SAVED_MLP_RSTD)))
        tt_backend_rmsnorm_forward(b, S[TT_SAVED_MLP_NORMED], S[TT_SAVED_MLP_RSTD], S[TT_SAVED_RESIDUAL_MID],
                                   w->mlp_norm, NULL, N, D, c->rms_norm_eps, offset);
    const void *in = mlp_input(s, S);
    tt_block_adapters_down(s, l, gate_up, 2, in, S, compute);
    /* Tiled, the intermediates live one shard at a time: a recompute leaves them to the MLP backward, which makes them
     * again shard by shard, unless it wants down_proj's output (the input of the norm after the MLP), which needs
     * them. */
    const bool needs_projection = has_post_norm(s) && (x_out || WANTS(TT_SLOT(TT_SAVED_MLP_PROJ)));
    const bool shards = !(tt_block_mlp_tiled(s) && !x_out && !needs_projection);
    for (int64_t k = 0; shards && k < tt_block_mlp_shard_count(s); k++) {
        const tt_row_range rows = tt_block_mlp_shard(s, k);
        mlp_intermediates(s, l, in, S, compute, &rows);
        if (needs_projection) {
            void *proj = tt_block_row_at(s, S[TT_SAVED_MLP_PROJ], rows.first, D);
            tt_backend_linear_forward(b, proj, S[TT_SAVED_GLU],
                                      tt_block_gemm_weight(s, w, TT_PARAM_W_DOWN, w->w_down, D * F), NULL, NULL,
                                      rows.count, F, D);
            tt_block_adapter_up_rows(s, l, TT_LORA_DOWN, proj, S, &rows);
        } else if (x_out && !has_post_norm(s)) {
            void *out = tt_block_row_at(s, x_out, rows.first, D);
            void *mid = tt_block_row_at(s, S[TT_SAVED_RESIDUAL_MID], rows.first, D);
            tt_backend_linear_forward(b, out, S[TT_SAVED_GLU],
                                      tt_block_gemm_weight(s, w, TT_PARAM_W_DOWN, w->w_down, D * F), NULL,
                                      scale == 1.0 ? mid : NULL, rows.count, F, D);
            tt_block_adapter_up_rows(s, l, TT_LORA_DOWN, out, S, &rows);
            if (scale != 1.0) { /* Granite: mid + (down(...) * m) */
                tt_backend_dropout_scale(b, out, out, rows.count * D, (float)scale, 0, 0);
                tt_backend_add(b, out, mid, out, rows.count * D);
            }
        }
    }
    /* the norm after the MLP joins the residual stream (in a recompute: its rstd alone) */
    if (has_post_norm(s) && (x_out || WANTS(TT_SLOT(TT_SAVED_MLP_POST_RSTD))))
        tt_backend_rmsnorm_forward(b, x_out, S[TT_SAVED_MLP_POST_RSTD], S[TT_SAVED_MLP_PROJ], w->mlp_post_norm,
                                   S[TT_SAVED_RESIDUAL_MID], N, D, c->rms_norm_eps, offset);
}

static void dense_forward(tt_model_state *s, int64_t l, const void *x_in, void *const *S, void *x_out,
                          tt_slot_set compute) {
    tt_block_dense_attention_forward(s, l, x_in, S, compute);
    mlp_forward(s, l, S, x_out, compute);
}

/* The gradient of a half's output projection: d_residual itself, or (into scratch) through the norm after the half or
 * the residual multiplier. proj and rstd: the post-norm's input and its 1/rms. */
static const void *projection_gradient(tt_model_state *s, void *scratch, const void *d_residual, const void *proj,
                                       const void *norm_weight, void *norm_gradient, const float *rstd) {
    const tt_backend *b = s->backend;
    const int64_t N = tokens(s), D = s->config.hidden_size;
    if (has_post_norm(s)) {
        tt_backend_zero(b, scratch, (size_t)(N * D) * s->plan.activation_bytes);
        tt_backend_rmsnorm_backward(b, scratch, norm_gradient, d_residual, proj, norm_weight, rstd, N, D,
                                    s->arch->norm_weight_offset);
        return scratch;
    }
    const double scale = tt_model_residual_scale(&s->config);
    if (scale == 1.0) return d_residual;
    tt_backend_dropout_scale(b, scratch, d_residual, N * D, (float)scale, 0, 0);
    return scratch;
}

/* The MLP half of a layer's backward. d_residual holds the gradient of the layer output and
 * becomes the gradient of the residual after attention. The MLP's saved tensors are dead once
 * read, so their gradients overwrite them: d act(gate) * up goes into its output, d gate and d up
 * into gate and up, the pre-norm output's gradient into the norm output (each weight gradient is
 * taken first, from the input it still holds); without a pre-norm the input's gradient adds into d_residual. Tiled
 * (tiled_mlp), shard by shard: the shard's intermediates are made again from the MLP's input first, its weight
 * gradients add to the others' in shard order, and its rows of the input take their gradient; the pre-norm's
 * backward then runs once over all rows. */
static void dense_backward_mlp(tt_model_state *s, int64_t l, void *const *S, void *scratch, void *d_residual) {
    const tt_backend *b = s->backend;
    const tt_model_config *c = &s->config;
    const tt_layer_view *w = &s->w_layers[l], *g = &s->g_layers[l];
    const int64_t N = tokens(s), D = c->hidden_size, F = c->intermediate_size;
    const void *dy_all = projection_gradient(s, scratch, d_residual, S[TT_SAVED_MLP_PROJ], w->mlp_post_norm,
                                             g->mlp_post_norm, S[TT_SAVED_MLP_POST_RSTD]);
    void *in_all = mlp_input(s, S);

    /* an adapter's weight gradients are taken while its layer's input is intact, and its share of the input gradient
     * added after the base layer's (its down-projection slot holds the gradient in between) */
    for (int64_t k = 0; k < tt_block_mlp_shard_count(s); k++) {
        const tt_row_range rows = tt_block_mlp_shard(s, k);
        const int64_t n = rows.count;
        if (tt_block_mlp_tiled(s)) mlp_intermediates(s, l, in_all, S, TT_ALL_SLOTS, &rows);
        const void *dy = tt_block_row_at(s, (void *)dy_all, rows.first, D);
        void *in = tt_block_row_at(s, in_all, rows.first, D);
        tt_block_adapters_backward_weights_rows(s, l, &down, &dy, 1, S[TT_SAVED_GLU], S, &rows);
        tt_backend_linear_backward(b, S[TT_SAVED_GLU], g->w_down, NULL, dy, S[TT_SAVED_GLU],
                                   tt_block_gemm_weight(s, w, TT_PARAM_W_DOWN, w->w_down, D * F), n, F, D, false);
        tt_block_adapters_backward_input_rows(s, l, &down, 1, S[TT_SAVED_GLU], S, &rows);
        tt_backend_glu_backward(b, S[TT_SAVED_GATE], S[TT_SAVED_UP], S[TT_SAVED_GLU], S[TT_SAVED_GATE], S[TT_SAVED_UP],
                                n * F, s->arch->activation);
        const void *d_gate_up[2] = {S[TT_SAVED_GATE], S[TT_SAVED_UP]};
        tt_block_adapters_backward_weights_rows(s, l, gate_up, d_gate_up, 2, in, S, &rows);
        tt_backend_linear_backward(b, NULL, g->w_gate, NULL, S[TT_SAVED_GATE], in, w->w_gate, n, D, F, false);
        tt_backend_linear_backward(b, NULL, g->w_up, NULL, S[TT_SAVED_UP], in, w->w_up, n, D, F, false);
        /* the input's gradient: into the pre-norm's output (overwritten), or added into d_residual */
        const bool pre_norm = has_pre_norm(s);
        void *d_in = pre_norm ? in : tt_block_row_at(s, d_residual, rows.first, D);
        tt_backend_linear_backward(b, d_in, NULL, NULL, S[TT_SAVED_GATE], NULL,
                                   tt_block_gemm_weight(s, w, TT_PARAM_W_GATE, w->w_gate, F * D), n, D, F, !pre_norm);
        tt_backend_linear_backward(b, d_in, NULL, NULL, S[TT_SAVED_UP], NULL,
                                   tt_block_gemm_weight(s, w, TT_PARAM_W_UP, w->w_up, F * D), n, D, F, true);
        tt_block_adapters_backward_input_rows(s, l, gate_up, 2, d_in, S, &rows);
    }
    if (has_pre_norm(s))
        tt_backend_rmsnorm_backward(b, d_residual, g->mlp_norm, S[TT_SAVED_MLP_NORMED], S[TT_SAVED_RESIDUAL_MID],
                                    w->mlp_norm, S[TT_SAVED_MLP_RSTD], N, D, s->arch->norm_weight_offset);
}

/* The attention half: d_residual becomes the gradient of the layer input. The pre-norm output's gradient
 * overwrites the norm output, as in the MLP half (without a pre-norm, the input's gradient adds into d_residual). */
void tt_block_dense_backward_attention(tt_model_state *s, int64_t l, const void *x_in, void *const *S, void *const *W,
                                       void *d_residual, void *spare, size_t spare_bytes) {
    const tt_backend *b = s->backend;
    const tt_model_config *c = &s->config;
    const tt_layer_view *w = &s->w_layers[l], *g = &s->g_layers[l];
    const int64_t N = tokens(s), D = c->hidden_size;
    const int64_t hd = c->head_dim, q_dim = c->num_heads * hd, kv_dim = c->num_kv_heads * hd;
    const float offset = s->arch->norm_weight_offset;

    const void *dy = projection_gradient(s, W[TT_BACKWARD_D_ATTN_PROJ], d_residual, S[TT_SAVED_ATTN_PROJ],
                                         w->attn_post_norm, g->attn_post_norm, S[TT_SAVED_ATTN_POST_RSTD]);
    tt_block_adapters_backward_weights(s, l, &o, &dy, 1, S[TT_SAVED_ATTN_OUT], S);
    tt_backend_linear_backward(b, W[TT_BACKWARD_D_ATTN_OUT], g->wo, g->bo, dy, S[TT_SAVED_ATTN_OUT],
                               tt_block_gemm_weight(s, w, TT_PARAM_WO, w->wo, D * q_dim), N, q_dim, D, false);
    tt_block_adapters_backward_input(s, l, &o, 1, W[TT_BACKWARD_D_ATTN_OUT], S);
    if (s->plan.sequence_parallel > 1)
        tt_sequence_parallel_attention_backward(s, attention_shape(s, l), W[TT_BACKWARD_D_Q], W[TT_BACKWARD_D_K],
                                                W[TT_BACKWARD_D_V], W[TT_BACKWARD_D_ATTN_OUT], S[TT_SAVED_ATTN_OUT],
                                                S[TT_SAVED_LSE], S[TT_SAVED_Q], S[TT_SAVED_K], S[TT_SAVED_V],
                                                W[TT_BACKWARD_ATTENTION], spare, spare_bytes);
    else
        tt_backend_attention_backward(b, W[TT_BACKWARD_D_Q], W[TT_BACKWARD_D_K], W[TT_BACKWARD_D_V],
                                      W[TT_BACKWARD_D_ATTN_OUT], S[TT_SAVED_ATTN_OUT], S[TT_SAVED_LSE], S[TT_SAVED_Q],
                                      S[TT_SAVED_K], S[TT_SAVED_V], attention_shape(s, l), W[TT_BACKWARD_ATTENTION],
                                      spare, spare_bytes);
    rope(s, l, W[TT_BACKWARD_D_Q], c->num_heads, true);
    rope(s, l, W[TT_BACKWARD_D_K], c->num_kv_heads, true);
    void *d_q_proj = W[TT_BACKWARD_D_Q], *d_k_proj = W[TT_BACKWARD_D_K];
    if (s->arch->qk_norm != TT_QK_NORM_NONE) {
        /* The norms' input gradients go where the attention backward's dead inputs were: d q before
         * norm into d attention output, d k before norm into k (both the same shape). */
        const size_t act = s->plan.activation_bytes;
        void *d_q_raw = W[TT_BACKWARD_D_ATTN_OUT], *d_k_raw = S[TT_SAVED_K];
        int64_t q_rows, q_width, k_rows, k_width;
        qk_norm_shape(s, c->num_heads, &q_rows, &q_width);
        qk_norm_shape(s, c->num_kv_heads, &k_rows, &k_width);
        tt_backend_zero(b, d_q_raw, (size_t)(N * q_dim) * act);
        tt_backend_zero(b, d_k_raw, (size_t)(N * kv_dim) * act);
        tt_backend_rmsnorm_backward(b, d_q_raw, g->q_norm, W[TT_BACKWARD_D_Q], S[TT_SAVED_Q_RAW], w->q_norm,
                                    S[TT_SAVED_Q_RSTD], q_rows, q_width, offset);
        tt_backend_rmsnorm_backward(b, d_k_raw, g->k_norm, W[TT_BACKWARD_D_K], S[TT_SAVED_K_RAW], w->k_norm,
                                    S[TT_SAVED_K_RSTD], k_rows, k_width, offset);
        d_q_proj = d_q_raw;
        d_k_proj = d_k_raw;
    }
    const bool pre_norm = has_pre_norm(s);
    void *in = pre_norm ? S[TT_SAVED_ATTN_NORMED] : (void *)x_in;
    const void *d_qkv[3] = {d_q_proj, d_k_proj, W[TT_BACKWARD_D_V]};
    tt_block_adapters_backward_weights(s, l, qkv, d_qkv, 3, in, S);
    tt_backend_linear_backward(b, NULL, g->wq, g->bq, d_q_proj, in, w->wq, N, D, q_dim, false);
    tt_backend_linear_backward(b, NULL, g->wk, g->bk, d_k_proj, in, w->wk, N, D, kv_dim, false);
    tt_backend_linear_backward(b, NULL, g->wv, g->bv, W[TT_BACKWARD_D_V], in, w->wv, N, D, kv_dim, false);
    /* the input's gradient: into the pre-norm's output (overwritten), or added into d_residual */
    void *d_in = pre_norm ? in : d_residual;
    tt_backend_linear_backward(b, d_in, NULL, NULL, d_q_proj, NULL,
                               tt_block_gemm_weight(s, w, TT_PARAM_WQ, w->wq, q_dim * D), N, D, q_dim, !pre_norm);
    tt_backend_linear_backward(b, d_in, NULL, NULL, d_k_proj, NULL,
                               tt_block_gemm_weight(s, w, TT_PARAM_WK, w->wk, kv_dim * D), N, D, kv_dim, true);
    tt_backend_linear_backward(b, d_in, NULL, NULL, W[TT_BACKWARD_D_V], NULL,
                               tt_block_gemm_weight(s, w, TT_PARAM_WV, w->wv, kv_dim * D), N, D, kv_dim, true);
    tt_block_adapters_backward_input(s, l, qkv, 3, d_in, S);
    if (pre_norm)
        tt_backend_rmsnorm_backward(b, d_residual, g->attn_norm, d_in, x_in, w->attn_norm, S[TT_SAVED_ATTN_RSTD], N, D,
                                    offset);
}

const tt_block tt_block_dense = {
    .name = "dense",
    .forward = dense_forward,
    .backward_mlp = dense_backward_mlp,
    .backward_attention = tt_block_dense_backward_attention,
};
