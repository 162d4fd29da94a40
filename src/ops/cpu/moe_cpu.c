/* A mixture of experts on the CPU (backend.h: moe_forward, moe_backward), fp32: the oracle of the GPU's grouped
 * GEMMs to come. Every sum runs in a fixed order: each expert's GEMMs over its rows in token order, each token's
 * combine over its choices in choice order, each weight gradient row after row; the bits do not depend on the thread
 * count. */
#include "ops/cpu/moe_cpu.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"

/* The routed rows grouped by expert: first[e] .. first[e + 1] are expert e's, in token order; row_of[t * k + j] is
 * the row of token t's j-th choice and token_of[row] its token. */
typedef struct routing {
    int64_t *first;    /* [E + 1] */
    int64_t *row_of;   /* [N * k] */
    int64_t *token_of; /* [N * k] */
} routing;

static routing route_rows(const tt_moe_shape *s, const int32_t *index) {
    const int64_t N = s->tokens, E = s->experts, k = s->top_k;
    routing r = {tt_xcalloc((size_t)(E + 1), sizeof(int64_t), "the experts' rows"),
                 tt_xmalloc(sizeof(int64_t) * (size_t)(N * k), "the routed rows"),
                 tt_xmalloc(sizeof(int64_t) * (size_t)(N * k), "the routed rows")};
    for (int64_t i = 0; i < N * k; i++) r.first[index[i] + 1]++;
    for (int64_t e = 0; e < E; e++) r.first[e + 1] += r.first[e];
    int64_t *next = tt_xmalloc(sizeof(int64_t) * (size_t)E, "the experts' rows");
    memcpy(next, r.first, sizeof(int64_t) * (size_t)E);
    for (int64_t t = 0; t < N; t++) /* tokens in order: each expert's rows by token */
        for (int64_t j = 0; j < k; j++) {
            const int64_t row = next[index[t * k + j]]++;
            r.row_of[t * k + j] = row;
            r.token_of[row] = t;
        }
    free(next);
    return r;
}

static void free_routing(routing *r) {
    free(r->first);
    free(r->row_of);
    free(r->token_of);
}

/* The router: softmax of each token's logits (in probs, replaced by it: max subtracted, summed in expert order), its
 * k best, their weights. */
static void route(const tt_moe_shape *s, const tt_moe_saved *saved) {
    const int64_t N = s->tokens, E = s->experts, k = s->top_k;
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < N; t++) {
        float *p = saved->probs + t * E;
        float max = p[0];
        for (int64_t e = 1; e < E; e++) max = p[e] > max ? p[e] : max;
        float sum = 0;
        for (int64_t e = 0; e < E; e++) sum += p[e] = expf(p[e] - max);
        for (int64_t e = 0; e < E; e++) p[e] /= sum;
        int32_t *index = saved->index + t * k;
        float *weight = saved->weight + t * k, chosen = 0;
        for (int64_t j = 0; j < k; j++) { /* the j-th best: the largest not taken, the lower index on a tie */
            int32_t best = -1;
            for (int64_t e = 0; e < E; e++) {
                bool taken = false;
                for (int64_t i = 0; i < j && !taken; i++) taken = index[i] == e;
                if (!taken && (best < 0 || p[e] > p[best])) best = (int32_t)e;
            }
            index[j] = best;
            weight[j] = p[best];
            chosen += p[best];
        }
        if (s->normalize)
            for (int64_t j = 0; j < k; j++) weight[j] /= chosen;
    }
}

void tt_cpu_moe_forward_f32(tt_cpu_scratch *scratch, float *y, const float *residual, const float *x,
                            const float *router, const float *w_gate, const float *w_up, const float *w_down,
                            const tt_moe_shape *s, const tt_moe_saved *saved) {
    const int64_t N = s->tokens, D = s->hidden, E = s->experts, k = s->top_k, F = s->intermediate;
    tt_cpu_linear_forward_f32(scratch, saved->probs, x, router, NULL, N, D, E, false); /* the logits, then */
    route(s, saved);
    if (saved->expert_tokens) /* the auxiliary loss's statistics, token after token */
        for (int64_t t = 0; t < N; t++) {
            for (int64_t j = 0; j < k; j++) saved->expert_tokens[j * E + saved->index[t * k + j]] += 1.0;
            for (int64_t e = 0; e < E; e++) saved->expert_probs[e] += (double)saved->probs[t * E + e];
        }
    routing r = route_rows(s, saved->index);
    float *gate = saved->gate, *up = saved->up, *glu = saved->glu, *out = saved->out;
    /* the routed rows' inputs, gathered into out (each expert's are dead once its gate and up are made) */
#pragma omp parallel for schedule(static)
    for (int64_t row = 0; row < N * k; row++) memcpy(out + row * D, x + r.token_of[row] * D, sizeof(float) * (size_t)D);
    for (int64_t e = 0; e < E; e++) {
        const int64_t first = r.first[e], n = r.first[e + 1] - first;
        if (n == 0) continue;
        tt_cpu_linear_forward_f32(scratch, gate + first * F, out + first * D, w_gate + e * F * D, NULL, n, D, F, false);
        tt_cpu_linear_forward_f32(scratch, up + first * F, out + first * D, w_up + e * F * D, NULL, n, D, F, false);
        tt_cpu_glu_forward_f32(glu + first * F, gate + first * F, up + first * F, n * F,
                               (tt_glu_activation)s->activation);
        tt_cpu_linear_forward_f32(scratch, out + first * D, glu + first * F, w_down + e * D * F, NULL, n, F, D, false);
    }
    if (y) {
#pragma omp parallel for schedule(static)
        for (int64_t t = 0; t < N; t++)
            for (int64_t d = 0; d < D; d++) {
                float sum = 0;
                for (int64_t j = 0; j < k; j++) sum += saved->weight[t * k + j] * out[r.row_of[t * k + j] * D + d];
                y[t * D + d] = residual[t * D + d] + sum;
            }
    }
    free_routing(&r);
}

void tt_cpu_moe_backward_f32(tt_cpu_scratch *scratch, float *dx, float *d_router, float *d_gate, float *d_up,
                             float *d_down, const float *dy, const float *x, const float *router, const float *w_gate,
                             const float *w_up, const float *w_down, const tt_moe_shape *s, const tt_moe_saved *saved,
                             void *workspace) {
    const int64_t N = s->tokens, D = s->hidden, E = s->experts, k = s->top_k, F = s->intermediate;
    float *d_rows = workspace; /* [N*k, D]: the routed rows' output gradients, then their inputs', then their inputs */
    float *d_logits = (float *)((char *)workspace + tt_moe_activation_scratch_bytes(s, sizeof(float))); /* [N, E] */
    float *d_weight = d_logits + N * E;                                                                 /* [N, k] */
    float *gate = saved->gate, *up = saved->up, *glu = saved->glu, *out = saved->out;
    routing r = route_rows(s, saved->index);
    /* the combine's: d weight[t, j] = dy[t] . out(t, j); d out(t, j) = weight[t, j] dy[t] */
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < N; t++)
        for (int64_t j = 0; j < k; j++) {
            const int64_t row = r.row_of[t * k + j];
            const float w = saved->weight[t * k + j];
            float dot = 0;
            for (int64_t d = 0; d < D; d++) {
                dot += dy[t * D + d] * out[row * D + d];
                d_rows[row * D + d] = w * dy[t * D + d];
            }
            d_weight[t * k + j] = dot;
        }
    for (int64_t e = 0; e < E; e++) {
        const int64_t first = r.first[e], n = r.first[e + 1] - first;
        if (n == 0) continue;
        float *d_out = d_rows + first * D, *g = gate + first * F, *u = up + first * F, *h = glu + first * F;
        /* down: its weight gradient from the SwiGLU output, then that output's gradient in its place */
        tt_cpu_linear_backward_f32(scratch, NULL, d_down ? d_down + e * D * F : NULL, NULL, d_out, h, NULL, n, F, D,
                                   false);
        tt_cpu_linear_backward_f32(scratch, h, NULL, NULL, d_out, NULL, w_down + e * D * F, n, F, D, false);
        tt_cpu_glu_backward_f32(g, u, h, g, u, n * F, (tt_glu_activation)s->activation);
        /* gate and up: their weight gradients from the gathered inputs (in the output gradients' dead rows), then
         * the inputs' gradient in their place */
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < n; i++) memcpy(d_out + i * D, x + r.token_of[first + i] * D, sizeof(float) * (size_t)D);
        if (d_gate) tt_cpu_linear_backward_f32(scratch, NULL, d_gate + e * F * D, NULL, g, d_out, NULL, n, D, F, false);
        if (d_up) tt_cpu_linear_backward_f32(scratch, NULL, d_up + e * F * D, NULL, u, d_out, NULL, n, D, F, false);
        tt_cpu_linear_backward_f32(scratch, d_out, NULL, NULL, g, NULL, w_gate + e * F * D, n, D, F, false);
        tt_cpu_linear_backward_f32(scratch, d_out, NULL, NULL, u, NULL, w_up + e * F * D, n, D, F, true);
    }
    /* the router's: the weights' gradient through the renormalization and the softmax, to the logits */
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < N; t++) {
        const float *p = saved->probs + t * E, *w = saved->weight + t * k, *dw = d_weight + t * k;
        const int32_t *index = saved->index + t * k;
        float *dz = d_logits + t * E;
        for (int64_t e = 0; e < E; e++) dz[e] = 0; /* dz holds d p until the softmax's backward */
        float chosen = 0, dw_w = 0;
        for (int64_t j = 0; j < k; j++) {
            chosen += p[index[j]];
            dw_w += dw[j] * w[j];
        }
        for (int64_t j = 0; j < k; j++) /* w_j = p_j / S: d p_j = (d w_j - sum_i d w_i w_i) / S */
            dz[index[j]] = s->normalize ? (dw[j] - dw_w) / chosen : dw[j];
        if (saved->prob_gradient) /* the auxiliary loss's, through the same softmax */
            for (int64_t e = 0; e < E; e++) dz[e] += saved->prob_gradient[e];
        float p_dp = 0;
        for (int64_t e = 0; e < E; e++) p_dp += p[e] * dz[e];
        for (int64_t e = 0; e < E; e++) dz[e] = p[e] * (dz[e] - p_dp);
    }
    /* the router's weight gradient while x is whole, then the input gradient (dx may be x: it is read no more) */
    if (d_router) tt_cpu_linear_backward_f32(scratch, NULL, d_router, NULL, d_logits, x, NULL, N, D, E, false);
    tt_cpu_linear_backward_f32(scratch, dx, NULL, NULL, d_logits, NULL, router, N, D, E, false);
    /* the experts' share of the input gradient, each token's choices in order */
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < N; t++)
        for (int64_t j = 0; j < k; j++) {
            const float *d_in = d_rows + r.row_of[t * k + j] * D;
            for (int64_t d = 0; d < D; d++) dx[t * D + d] += d_in[d];
        }
    free_routing(&r);
}
