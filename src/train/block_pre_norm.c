/* The pre-norm decoder layer of Llama, Mistral, Qwen2 and Qwen3 (block.h):
 *   mid = x + o(attention(rope(qk_norm(q(n))), rope(qk_norm(k(n))), v(n))),  n = norm(x)
 *   out = mid + down(silu(gate(m)) * up(m)),                                   m = norm(mid)
 * with qk_norm the per-head RMSNorm of Qwen3 (its description's qk_norm) or nothing, and the LoRA adapters of the
 * adapted linear layers around their base layers. */
#include "train/block.h"

#include "train/block_parts.h"
#include "train/step_internal.h"

/* The MLP's intermediates for the rows of one shard (all rows untiled), from the norm output and
 * the gate/up adapters' down projections: gate, up and SwiGLU (those in `compute`) into their slots,
 * which hold the shard alone when tiled, and down_proj's adapter projection into its rows. */
static void mlp_intermediates(tt_model_state *s, int64_t l, void *const *S, tt_slot_set compute,
                              const tt_row_range *rows) {
    const tt_backend *b = s->backend;
    const tt_layer_view *w = &s->w_layers[l];
    const int64_t D = s->config.hidden_size, F = s->config.intermediate_size, n = rows->count;
    const void *normed = tt_block_row_at(s, S[TT_SAVED_MLP_NORMED], rows->first, D);
    if ((compute >> TT_SAVED_GATE) & 1u) {
        tt_backend_linear_forward(b, S[TT_SAVED_GATE], normed,
                                  tt_block_gemm_weight(s, w, TT_PARAM_W_GATE, w->w_gate, F * D), NULL, NULL, n, D, F);
        tt_block_adapter_up_rows(s, l, TT_LORA_GATE, S[TT_SAVED_GATE], S, rows);
    }
    if ((compute >> TT_SAVED_UP) & 1u) {
        tt_backend_linear_forward(b, S[TT_SAVED_UP], normed, tt_block_gemm_weight(s, w, TT_PARAM_W_UP, w->w_up, F * D),
                                  NULL, NULL, n, D, F);
        tt_block_adapter_up_rows(s, l, TT_LORA_UP, S[TT_SAVED_UP], S, rows);
    }
    if ((compute >> TT_SAVED_SWIGLU) & 1u)
        tt_backend_swiglu_forward(b, S[TT_SAVED_SWIGLU], S[TT_SAVED_GATE], S[TT_SAVED_UP], n * F);
    tt_block_adapter_down_rows(s, l, TT_LORA_DOWN, S[TT_SAVED_SWIGLU], S, compute, rows);
}

/* One decoder layer forward: x_in -> the saved slots in `compute`, and x_out unless it is NULL
 * (a recompute in the backward needs the saved slots only, not the layer output). An op runs
 * when any of its outputs is in `compute`; its inputs are there, kept or computed before it.
 * A recomputed op may rewrite a kept output beside the one wanted (a norm's rstd, say) with the
 * same bits: every op is deterministic. */
static void pre_norm_forward(tt_model_state *s, int64_t l, const void *x_in, void *const *S, void *x_out,
                             tt_slot_set compute) {
    const tt_backend *b = s->backend;
    const tt_model_config *c = &s->config;
    const tt_layer_view *w = &s->w_layers[l];
    const int64_t N = s->plan.micro_batch * s->plan.seq_len, D = c->hidden_size, F = c->intermediate_size;
    const int64_t hd = c->head_dim, q_dim = c->num_heads * hd, kv_dim = c->num_kv_heads * hd;
    const tt_rope_layout rope = tt_block_rope_layout(s);
#define WANTS(slots) ((compute & (slots)) != 0)

    if (WANTS(TT_SLOT(TT_SAVED_ATTN_NORMED) | TT_SLOT(TT_SAVED_ATTN_RSTD)))
        tt_backend_rmsnorm_forward(b, S[TT_SAVED_ATTN_NORMED], S[TT_SAVED_ATTN_RSTD], x_in, w->attn_norm, N, D,
                                   c->rms_norm_eps);
    tt_block_adapter_down(s, l, TT_LORA_Q, S[TT_SAVED_ATTN_NORMED], S, compute);
    tt_block_adapter_down(s, l, TT_LORA_K, S[TT_SAVED_ATTN_NORMED], S, compute);
    tt_block_adapter_down(s, l, TT_LORA_V, S[TT_SAVED_ATTN_NORMED], S, compute);
    if (s->arch->qk_norm == TT_QK_NORM_PER_HEAD) {
        if (WANTS(TT_SLOT(TT_SAVED_Q_RAW))) {
            tt_backend_linear_forward(b, S[TT_SAVED_Q_RAW], S[TT_SAVED_ATTN_NORMED],
                                      tt_block_gemm_weight(s, w, TT_PARAM_WQ, w->wq, q_dim * D), w->bq, NULL, N, D,
                                      q_dim);
            tt_block_adapter_up(s, l, TT_LORA_Q, S[TT_SAVED_Q_RAW], S);
        }
        if (WANTS(TT_SLOT(TT_SAVED_K_RAW))) {
            tt_backend_linear_forward(b, S[TT_SAVED_K_RAW], S[TT_SAVED_ATTN_NORMED],
                                      tt_block_gemm_weight(s, w, TT_PARAM_WK, w->wk, kv_dim * D), w->bk, NULL, N, D,
                                      kv_dim);
            tt_block_adapter_up(s, l, TT_LORA_K, S[TT_SAVED_K_RAW], S);
        }
        /* q = rope(norm(q_raw)), written together with its rstd */
        if (WANTS(TT_SLOT(TT_SAVED_Q) | TT_SLOT(TT_SAVED_Q_RSTD))) {
            tt_backend_rmsnorm_forward(b, S[TT_SAVED_Q], S[TT_SAVED_Q_RSTD], S[TT_SAVED_Q_RAW], w->q_norm,
                                       N * c->num_heads, hd, c->rms_norm_eps);
            tt_backend_rope_forward(b, S[TT_SAVED_Q], s->rope_cos, s->rope_sin, rope.sequences, rope.rows, c->num_heads,
                                    hd);
        }
        if (WANTS(TT_SLOT(TT_SAVED_K) | TT_SLOT(TT_SAVED_K_RSTD))) {
            tt_backend_rmsnorm_forward(b, S[TT_SAVED_K], S[TT_SAVED_K_RSTD], S[TT_SAVED_K_RAW], w->k_norm,
                                       N * c->num_kv_heads, hd, c->rms_norm_eps);
            tt_backend_rope_forward(b, S[TT_SAVED_K], s->rope_cos, s->rope_sin, rope.sequences, rope.rows,
                                    c->num_kv_heads, hd);
        }
    } else {
        if (WANTS(TT_SLOT(TT_SAVED_Q))) {
            tt_backend_linear_forward(b, S[TT_SAVED_Q], S[TT_SAVED_ATTN_NORMED],
                                      tt_block_gemm_weight(s, w, TT_PARAM_WQ, w->wq, q_dim * D), w->bq, NULL, N, D,
                                      q_dim);
            tt_block_adapter_up(s, l, TT_LORA_Q, S[TT_SAVED_Q], S);
            tt_backend_rope_forward(b, S[TT_SAVED_Q], s->rope_cos, s->rope_sin, rope.sequences, rope.rows, c->num_heads,
                                    hd);
        }
        if (WANTS(TT_SLOT(TT_SAVED_K))) {
            tt_backend_linear_forward(b, S[TT_SAVED_K], S[TT_SAVED_ATTN_NORMED],
                                      tt_block_gemm_weight(s, w, TT_PARAM_WK, w->wk, kv_dim * D), w->bk, NULL, N, D,
                                      kv_dim);
            tt_block_adapter_up(s, l, TT_LORA_K, S[TT_SAVED_K], S);
            tt_backend_rope_forward(b, S[TT_SAVED_K], s->rope_cos, s->rope_sin, rope.sequences, rope.rows,
                                    c->num_kv_heads, hd);
        }
    }
    if (WANTS(TT_SLOT(TT_SAVED_V))) {
        tt_backend_linear_forward(b, S[TT_SAVED_V], S[TT_SAVED_ATTN_NORMED],
                                  tt_block_gemm_weight(s, w, TT_PARAM_WV, w->wv, kv_dim * D), w->bv, NULL, N, D,
                                  kv_dim);
        tt_block_adapter_up(s, l, TT_LORA_V, S[TT_SAVED_V], S);
    }
    if (WANTS(TT_SLOT(TT_SAVED_ATTN_OUT) | TT_SLOT(TT_SAVED_LSE))) {
        if (s->plan.sequence_parallel > 1) /* Ulysses: tokens traded for heads around the attention */
            tt_sequence_parallel_attention_forward(s, S[TT_SAVED_ATTN_OUT], S[TT_SAVED_LSE], S[TT_SAVED_Q],
                                                   S[TT_SAVED_K], S[TT_SAVED_V]);
        else
            tt_backend_attention_forward(b, S[TT_SAVED_ATTN_OUT], S[TT_SAVED_LSE], S[TT_SAVED_Q], S[TT_SAVED_K],
                                         S[TT_SAVED_V], &s->attention);
    }
    /* residual + o_proj(attention) */
    tt_block_adapter_down(s, l, TT_LORA_O, S[TT_SAVED_ATTN_OUT], S, compute);
    if (WANTS(TT_SLOT(TT_SAVED_RESIDUAL_MID))) {
        tt_backend_linear_forward(b, S[TT_SAVED_RESIDUAL_MID], S[TT_SAVED_ATTN_OUT],
                                  tt_block_gemm_weight(s, w, TT_PARAM_WO, w->wo, D * q_dim), NULL, x_in, N, q_dim, D);
        tt_block_adapter_up(s, l, TT_LORA_O, S[TT_SAVED_RESIDUAL_MID], S);
    }

    if (WANTS(TT_SLOT(TT_SAVED_MLP_NORMED) | TT_SLOT(TT_SAVED_MLP_RSTD)))
        tt_backend_rmsnorm_forward(b, S[TT_SAVED_MLP_NORMED], S[TT_SAVED_MLP_RSTD], S[TT_SAVED_RESIDUAL_MID],
                                   w->mlp_norm, N, D, c->rms_norm_eps);
    tt_block_adapter_down(s, l, TT_LORA_GATE, S[TT_SAVED_MLP_NORMED], S, compute);
    tt_block_adapter_down(s, l, TT_LORA_UP, S[TT_SAVED_MLP_NORMED], S, compute);
    /* Tiled, the intermediates live one shard at a time: a recompute leaves them to the MLP
     * backward, which makes them again shard by shard. */
    if (tt_block_mlp_tiled(s) && !x_out) return;
    for (int64_t k = 0; k < tt_block_mlp_shard_count(s); k++) {
        const tt_row_range rows = tt_block_mlp_shard(s, k);
        mlp_intermediates(s, l, S, compute, &rows);
        if (x_out) {
            void *out = tt_block_row_at(s, x_out, rows.first, D);
            tt_backend_linear_forward(b, out, S[TT_SAVED_SWIGLU],
                                      tt_block_gemm_weight(s, w, TT_PARAM_W_DOWN, w->w_down, D * F), NULL,
                                      tt_block_row_at(s, S[TT_SAVED_RESIDUAL_MID], rows.first, D), rows.count, F, D);
            tt_block_adapter_up_rows(s, l, TT_LORA_DOWN, out, S, &rows);
        }
    }
#undef WANTS
}

/* The MLP half of a layer's backward. d_residual holds the gradient of the layer output and
 * becomes the gradient of the residual after attention. The MLP's saved tensors are dead once
 * read, so their gradients overwrite them: d SwiGLU goes into the SwiGLU output, d gate and d up
 * into gate and up, the norm output's gradient into the norm output (each weight gradient is
 * taken first, from the input it still holds). No scratch at all. Tiled (tiled_mlp), shard by
 * shard: the shard's intermediates are made again from the norm output first, its weight
 * gradients add to the others' in shard order, and its rows of the norm output take their
 * gradient; the norm's backward then runs once over all rows. */
static void pre_norm_backward_mlp(tt_model_state *s, int64_t l, void *const *S, void *d_residual) {
    const tt_backend *b = s->backend;
    const tt_model_config *c = &s->config;
    const tt_layer_view *w = &s->w_layers[l], *g = &s->g_layers[l];
    const int64_t N = s->plan.micro_batch * s->plan.seq_len, D = c->hidden_size, F = c->intermediate_size;

    /* x_out = mid + down(silu(gate(n)) * up(n)), n = norm(mid); an adapter's weight gradients are
     * taken while its layer's input is intact, and its share of the input gradient added after the
     * base layer's (its down-projection slot holds the gradient in between) */
    for (int64_t k = 0; k < tt_block_mlp_shard_count(s); k++) {
        const tt_row_range rows = tt_block_mlp_shard(s, k);
        const int64_t n = rows.count;
        if (tt_block_mlp_tiled(s)) mlp_intermediates(s, l, S, TT_ALL_SLOTS, &rows);
        const void *dy = tt_block_row_at(s, d_residual, rows.first, D);
        void *normed = tt_block_row_at(s, S[TT_SAVED_MLP_NORMED], rows.first, D);
        tt_block_adapter_backward_weights_rows(s, l, TT_LORA_DOWN, dy, S[TT_SAVED_SWIGLU], S, &rows);
        tt_backend_linear_backward(b, S[TT_SAVED_SWIGLU], g->w_down, NULL, dy, S[TT_SAVED_SWIGLU],
                                   tt_block_gemm_weight(s, w, TT_PARAM_W_DOWN, w->w_down, D * F), n, F, D, false);
        tt_block_adapter_backward_input_rows(s, l, TT_LORA_DOWN, S[TT_SAVED_SWIGLU], S, &rows);
        tt_backend_swiglu_backward(b, S[TT_SAVED_GATE], S[TT_SAVED_UP], S[TT_SAVED_SWIGLU], S[TT_SAVED_GATE],
                                   S[TT_SAVED_UP], n * F);
        tt_block_adapter_backward_weights_rows(s, l, TT_LORA_GATE, S[TT_SAVED_GATE], normed, S, &rows);
        tt_block_adapter_backward_weights_rows(s, l, TT_LORA_UP, S[TT_SAVED_UP], normed, S, &rows);
        tt_backend_linear_backward(b, NULL, g->w_gate, NULL, S[TT_SAVED_GATE], normed, w->w_gate, n, D, F, false);
        tt_backend_linear_backward(b, NULL, g->w_up, NULL, S[TT_SAVED_UP], normed, w->w_up, n, D, F, false);
        void *d_normed = normed;
        tt_backend_linear_backward(b, d_normed, NULL, NULL, S[TT_SAVED_GATE], NULL,
                                   tt_block_gemm_weight(s, w, TT_PARAM_W_GATE, w->w_gate, F * D), n, D, F, false);
        tt_backend_linear_backward(b, d_normed, NULL, NULL, S[TT_SAVED_UP], NULL,
                                   tt_block_gemm_weight(s, w, TT_PARAM_W_UP, w->w_up, F * D), n, D, F, true);
        tt_block_adapter_backward_input_rows(s, l, TT_LORA_GATE, d_normed, S, &rows);
        tt_block_adapter_backward_input_rows(s, l, TT_LORA_UP, d_normed, S, &rows);
    }
    tt_backend_rmsnorm_backward(b, d_residual, g->mlp_norm, S[TT_SAVED_MLP_NORMED], S[TT_SAVED_RESIDUAL_MID],
                                w->mlp_norm, S[TT_SAVED_MLP_RSTD], N, D);
}

/* The attention half: d_residual becomes the gradient of the layer input. The attention
 * norm output's gradient overwrites the norm output, as in the MLP half. */
static void pre_norm_backward_attention(tt_model_state *s, int64_t l, const void *x_in, void *const *S, void *const *W,
                                        void *d_residual, void *spare, size_t spare_bytes) {
    const tt_backend *b = s->backend;
    const tt_model_config *c = &s->config;
    const tt_layer_view *w = &s->w_layers[l], *g = &s->g_layers[l];
    const int64_t N = s->plan.micro_batch * s->plan.seq_len, D = c->hidden_size;
    const int64_t hd = c->head_dim, q_dim = c->num_heads * hd, kv_dim = c->num_kv_heads * hd;
    const tt_rope_layout rope = tt_block_rope_layout(s);

    /* mid = x_in + o(attention(rope(norm(q(n))), rope(norm(k(n))), v(n))), n = norm(x_in) */
    tt_block_adapter_backward_weights(s, l, TT_LORA_O, d_residual, S[TT_SAVED_ATTN_OUT], S);
    tt_backend_linear_backward(b, W[TT_BACKWARD_D_ATTN_OUT], g->wo, NULL, d_residual, S[TT_SAVED_ATTN_OUT],
                               tt_block_gemm_weight(s, w, TT_PARAM_WO, w->wo, D * q_dim), N, q_dim, D, false);
    tt_block_adapter_backward_input(s, l, TT_LORA_O, W[TT_BACKWARD_D_ATTN_OUT], S);
    if (s->plan.sequence_parallel > 1)
        tt_sequence_parallel_attention_backward(s, W[TT_BACKWARD_D_Q], W[TT_BACKWARD_D_K], W[TT_BACKWARD_D_V],
                                                W[TT_BACKWARD_D_ATTN_OUT], S[TT_SAVED_ATTN_OUT], S[TT_SAVED_LSE],
                                                S[TT_SAVED_Q], S[TT_SAVED_K], S[TT_SAVED_V], W[TT_BACKWARD_ATTENTION],
                                                spare, spare_bytes);
    else
        tt_backend_attention_backward(b, W[TT_BACKWARD_D_Q], W[TT_BACKWARD_D_K], W[TT_BACKWARD_D_V],
                                      W[TT_BACKWARD_D_ATTN_OUT], S[TT_SAVED_ATTN_OUT], S[TT_SAVED_LSE], S[TT_SAVED_Q],
                                      S[TT_SAVED_K], S[TT_SAVED_V], &s->attention, W[TT_BACKWARD_ATTENTION], spare,
                                      spare_bytes);
    tt_backend_rope_backward(b, W[TT_BACKWARD_D_Q], s->rope_cos, s->rope_sin, rope.sequences, rope.rows, c->num_heads,
                             hd);
    tt_backend_rope_backward(b, W[TT_BACKWARD_D_K], s->rope_cos, s->rope_sin, rope.sequences, rope.rows,
                             c->num_kv_heads, hd);
    void *d_q_proj = W[TT_BACKWARD_D_Q], *d_k_proj = W[TT_BACKWARD_D_K];
    if (s->arch->qk_norm == TT_QK_NORM_PER_HEAD) {
        /* The norms' input gradients go where the attention backward's dead inputs were: d q before
         * norm into d attention output, d k before norm into k (both the same shape). */
        const size_t act = s->plan.activation_bytes;
        void *d_q_raw = W[TT_BACKWARD_D_ATTN_OUT], *d_k_raw = S[TT_SAVED_K];
        tt_backend_zero(b, d_q_raw, (size_t)(N * q_dim) * act);
        tt_backend_zero(b, d_k_raw, (size_t)(N * kv_dim) * act);
        tt_backend_rmsnorm_backward(b, d_q_raw, g->q_norm, W[TT_BACKWARD_D_Q], S[TT_SAVED_Q_RAW], w->q_norm,
                                    S[TT_SAVED_Q_RSTD], N * c->num_heads, hd);
        tt_backend_rmsnorm_backward(b, d_k_raw, g->k_norm, W[TT_BACKWARD_D_K], S[TT_SAVED_K_RAW], w->k_norm,
                                    S[TT_SAVED_K_RSTD], N * c->num_kv_heads, hd);
        d_q_proj = d_q_raw;
        d_k_proj = d_k_raw;
    }
    void *normed = S[TT_SAVED_ATTN_NORMED];
    tt_block_adapter_backward_weights(s, l, TT_LORA_Q, d_q_proj, normed, S);
    tt_block_adapter_backward_weights(s, l, TT_LORA_K, d_k_proj, normed, S);
    tt_block_adapter_backward_weights(s, l, TT_LORA_V, W[TT_BACKWARD_D_V], normed, S);
    tt_backend_linear_backward(b, NULL, g->wq, g->bq, d_q_proj, normed, w->wq, N, D, q_dim, false);
    tt_backend_linear_backward(b, NULL, g->wk, g->bk, d_k_proj, normed, w->wk, N, D, kv_dim, false);
    tt_backend_linear_backward(b, NULL, g->wv, g->bv, W[TT_BACKWARD_D_V], normed, w->wv, N, D, kv_dim, false);
    void *d_normed = normed;
    tt_backend_linear_backward(b, d_normed, NULL, NULL, d_q_proj, NULL,
                               tt_block_gemm_weight(s, w, TT_PARAM_WQ, w->wq, q_dim * D), N, D, q_dim, false);
    tt_backend_linear_backward(b, d_normed, NULL, NULL, d_k_proj, NULL,
                               tt_block_gemm_weight(s, w, TT_PARAM_WK, w->wk, kv_dim * D), N, D, kv_dim, true);
    tt_backend_linear_backward(b, d_normed, NULL, NULL, W[TT_BACKWARD_D_V], NULL,
                               tt_block_gemm_weight(s, w, TT_PARAM_WV, w->wv, kv_dim * D), N, D, kv_dim, true);
    tt_block_adapter_backward_input(s, l, TT_LORA_Q, d_normed, S);
    tt_block_adapter_backward_input(s, l, TT_LORA_K, d_normed, S);
    tt_block_adapter_backward_input(s, l, TT_LORA_V, d_normed, S);
    tt_backend_rmsnorm_backward(b, d_residual, g->attn_norm, d_normed, x_in, w->attn_norm, S[TT_SAVED_ATTN_RSTD], N, D);
}

const tt_block tt_block_pre_norm = {
    .name = "pre-norm",
    .forward = pre_norm_forward,
    .backward_mlp = pre_norm_backward_mlp,
    .backward_attention = pre_norm_backward_attention,
};
