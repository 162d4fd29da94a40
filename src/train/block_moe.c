/* The mixture-of-experts decoder layer (block.h; Qwen3-MoE): the dense block's attention half, then
 *   h = x + experts(norm(x))
 * with experts() the router, the routing and the experts' gated MLPs in one backend op (moe_forward), whose saved
 * tensors are the layer's expert slots (saved_slots.h): recomputing any of them runs the op again. */
#include "train/block.h"

#include "train/block_parts.h"
#include "train/step_internal.h"

#define WANTS(slots) ((compute & (slots)) != 0)

/* the slots moe_forward writes */
#define EXPERT_SLOTS                                                                                     \
    (TT_SLOT(TT_SAVED_ROUTER_PROBS) | TT_SLOT(TT_SAVED_EXPERT_INDEX) | TT_SLOT(TT_SAVED_EXPERT_WEIGHT) | \
     TT_SLOT(TT_SAVED_EXPERT_GATE) | TT_SLOT(TT_SAVED_EXPERT_UP) | TT_SLOT(TT_SAVED_EXPERT_GLU) |        \
     TT_SLOT(TT_SAVED_EXPERT_OUT))

static tt_moe_shape moe_shape(const tt_model_state *s) {
    const tt_model_config *c = &s->config;
    return (tt_moe_shape){.tokens = s->plan.micro_batch * s->plan.seq_len,
                          .hidden = c->hidden_size,
                          .experts = c->num_experts,
                          .top_k = c->num_experts_per_tok,
                          .intermediate = c->moe_intermediate_size,
                          .normalize = c->norm_topk_prob,
                          .activation = (int)s->arch->activation};
}

static tt_moe_saved moe_saved(void *const *S) {
    return (tt_moe_saved){.probs = S[TT_SAVED_ROUTER_PROBS],
                          .index = S[TT_SAVED_EXPERT_INDEX],
                          .weight = S[TT_SAVED_EXPERT_WEIGHT],
                          .gate = S[TT_SAVED_EXPERT_GATE],
                          .up = S[TT_SAVED_EXPERT_UP],
                          .glu = S[TT_SAVED_EXPERT_GLU],
                          .out = S[TT_SAVED_EXPERT_OUT]};
}

static void moe_forward(tt_model_state *s, int64_t l, const void *x_in, void *const *S, void *x_out,
                        tt_slot_set compute) {
    tt_block_dense_attention_forward(s, l, x_in, S, compute);
    const tt_backend *b = s->backend;
    const tt_model_config *c = &s->config;
    const tt_layer_view *w = &s->w_layers[l];
    const tt_moe_shape shape = moe_shape(s);
    if (WANTS(TT_SLOT(TT_SAVED_MLP_NORMED) | TT_SLOT(TT_SAVED_MLP_RSTD)))
        tt_backend_rmsnorm_forward(b, S[TT_SAVED_MLP_NORMED], S[TT_SAVED_MLP_RSTD], S[TT_SAVED_RESIDUAL_MID],
                                   w->mlp_norm, NULL, shape.tokens, c->hidden_size, c->rms_norm_eps,
                                   s->arch->norm_weight_offset);
    if (!x_out && !WANTS(EXPERT_SLOTS)) return;
    tt_moe_saved saved = moe_saved(S);
    if (s->moe_collect && x_out) { /* a training forward (not a recompute): the auxiliary loss's statistics */
        saved.expert_tokens = s->moe_expert_tokens;
        saved.expert_probs = s->moe_expert_probs;
    }
    tt_backend_moe_forward(b, x_out, S[TT_SAVED_RESIDUAL_MID], S[TT_SAVED_MLP_NORMED], w->router, w->expert_gate,
                           w->expert_up, w->expert_down, &shape, &saved);
}

/* d_residual holds the gradient of the layer output, which is the experts' output's and the residual's after
 * attention; the experts' backward puts their input's gradient where the pre-norm's output was (dead once read), and
 * the pre-norm's backward adds it into d_residual. scratch: moe_backward's. */
static void moe_backward_mlp(tt_model_state *s, int64_t l, void *const *S, void *scratch, void *d_residual) {
    const tt_backend *b = s->backend;
    const tt_model_config *c = &s->config;
    const tt_layer_view *w = &s->w_layers[l], *g = &s->g_layers[l];
    const tt_moe_shape shape = moe_shape(s);
    tt_moe_saved saved = moe_saved(S);
    saved.prob_gradient = s->moe_prob_gradient; /* the auxiliary loss's (output_router_logits), or NULL */
    /* x is read before dx is written in its place: the op takes its input gradient last (backend.h) */
    tt_backend_moe_backward(b, S[TT_SAVED_MLP_NORMED], g->router, g->expert_gate, g->expert_up, g->expert_down,
                            d_residual, S[TT_SAVED_MLP_NORMED], w->router, w->expert_gate, w->expert_up, w->expert_down,
                            &shape, &saved, scratch);
    tt_backend_rmsnorm_backward(b, d_residual, g->mlp_norm, S[TT_SAVED_MLP_NORMED], S[TT_SAVED_RESIDUAL_MID],
                                w->mlp_norm, S[TT_SAVED_MLP_RSTD], shape.tokens, c->hidden_size,
                                s->arch->norm_weight_offset);
}

const tt_block tt_block_moe = {
    .name = "moe",
    .forward = moe_forward,
    .backward_mlp = moe_backward_mlp,
    .backward_attention = tt_block_dense_backward_attention,
};
