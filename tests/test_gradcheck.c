/* The CPU kernels against finite differences, naive references, each other and themselves.
 *
 *  1. Gradient check in double (the _f64 kernels): for every op with a backward, the scalar
 *     objective L = sum(out .* R) for a random R (the loss itself for lm_head_loss), central
 *     differences with h = 1e-6 against the analytic backward; relative error
 *     max|analytic - numeric| / max|numeric| < 1e-6. Forwards are checked against naive
 *     formulas written out here, "+=" arguments against their starting values, and overwritten
 *     outputs are filled with NaN first.
 *  2. The f32 kernels agree with the f64 kernels within 1e-5 (relative, as above).
 *  3. Determinism: every op of the CPU backend gives the same bits on 1, 2 and 3 threads, with the
 *     three backends alive side by side in the process. */
#include <cblas.h>
#include <fcntl.h>
#include <math.h>
#include <omp.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "ops/backend.h"
#include "ops/cpu/gemm_cpu.h"
#include "ops/cpu/ops_cpu.h"
#include "ops/dropout_mask.h"
#include "test_util.h"
#include "train/lora_step.h"

#define FD_STEP 1e-6
#define GRAD_TOL 1e-6 /* finite differences vs backward, in double */
#define REF_TOL 1e-12 /* f64 forward vs a naive formula in double */
#define F32_TOL 1e-5  /* f32 kernels vs f64 kernels */

static tt_rng g_rng;

/* ------------------------------------------------------------------ helpers */

static double *dnew(int64_t n) { return calloc((size_t)(n > 0 ? n : 1), sizeof(double)); }
static float *fnew(int64_t n) { return calloc((size_t)(n > 0 ? n : 1), sizeof(float)); }

static double *drandn(int64_t n, double s) {
    double *a = dnew(n);
    for (int64_t i = 0; i < n; i++) a[i] = s * tt_rng_normal(&g_rng);
    return a;
}

static double *dcopy(const double *a, int64_t n) {
    double *b = dnew(n);
    memcpy(b, a, (size_t)n * sizeof(double));
    return b;
}

/* a - b, a new array */
static double *dsub(const double *a, const double *b, int64_t n) {
    double *c = dnew(n);
    for (int64_t i = 0; i < n; i++) c[i] = a[i] - b[i];
    return c;
}

static float *to_f32(const double *a, int64_t n) {
    float *b = fnew(n);
    for (int64_t i = 0; i < n; i++) b[i] = (float)a[i];
    return b;
}

static void dnan(double *a, int64_t n) {
    for (int64_t i = 0; i < n; i++) a[i] = NAN;
}

static void fnan(float *a, int64_t n) {
    for (int64_t i = 0; i < n; i++) a[i] = NAN;
}

static double ddot(const double *a, const double *b, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* max|a - ref| / max|ref|; NaN anywhere counts as infinite error. */
static double rel_err_d(const double *a, const double *ref, int64_t n) {
    double diff = 0, mag = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs(a[i] - ref[i]);
        if (isnan(d)) d = INFINITY;
        if (d > diff) diff = d;
        if (fabs(ref[i]) > mag) mag = fabs(ref[i]);
    }
    return diff / (mag > 1e-30 ? mag : 1e-30);
}

static double rel_err_fd(const float *a, const double *ref, int64_t n) {
    double diff = 0, mag = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - ref[i]);
        if (isnan(d)) d = INFINITY;
        if (d > diff) diff = d;
        if (fabs(ref[i]) > mag) mag = fabs(ref[i]);
    }
    return diff / (mag > 1e-30 ? mag : 1e-30);
}

static void expect_close(const char *what, const double *got, const double *ref, int64_t n, double tol) {
    double e = rel_err_d(got, ref, n);
    TT_EXPECT(e < tol, "%s: relative error %.3g (tolerance %.0e)", what, e, tol);
}

static void expect_close_f32(const char *what, const float *got, const double *ref, int64_t n) {
    double e = rel_err_fd(got, ref, n);
    TT_EXPECT(e < F32_TOL, "f32 vs f64 %s: relative error %.3g (tolerance %.0e)", what, e, F32_TOL);
}

typedef double (*objective_fn)(void *ctx);

/* Central differences of f with respect to x[0..n). */
static double *numeric_grad(objective_fn f, void *ctx, double *x, int64_t n) {
    double *g = dnew(n);
    for (int64_t i = 0; i < n; i++) {
        const double saved = x[i];
        x[i] = saved + FD_STEP;
        const double fp = f(ctx);
        x[i] = saved - FD_STEP;
        const double fm = f(ctx);
        x[i] = saved;
        g[i] = (fp - fm) / (2 * FD_STEP);
    }
    return g;
}

static void expect_grad(const char *what, objective_fn f, void *ctx, double *x, int64_t n, const double *analytic) {
    double *num = numeric_grad(f, ctx, x, n);
    double e = rel_err_d(analytic, num, n);
    TT_EXPECT(e < GRAD_TOL, "gradcheck %s: relative error %.3g (tolerance %.0e)", what, e, GRAD_TOL);
    free(num);
}

/* ------------------------------------------------------------------ embedding */

typedef struct {
    int64_t V, D, N;
    double scale;
    int32_t *ids;
    double *table, *out, *R;
} emb_ctx;

static double emb_objective(void *p) {
    emb_ctx *c = p;
    dnan(c->out, c->N * c->D);
    tt_cpu_embedding_forward_f64(c->out, c->ids, c->table, c->N, c->D, c->scale);
    return ddot(c->out, c->R, c->N * c->D);
}

/* scale: the output's multiplier (Gemma's sqrt(hidden), Granite's embedding_multiplier; 1: a plain lookup) */
static void test_embedding(double scale) {
    int32_t ids[] = {3, 1, 3, 0, 6, 3, 2, 1, 5};
    emb_ctx c = {.V = 7, .D = 5, .N = 9, .scale = scale, .ids = ids};
    const int64_t V = c.V, D = c.D, N = c.N;
    c.table = drandn(V * D, 1);
    c.out = dnew(N * D);
    c.R = drandn(N * D, 1);

    emb_objective(&c);
    bool rows_ok = true;
    for (int64_t n = 0; n < N; n++)
        for (int64_t d = 0; d < D; d++) rows_ok &= c.out[n * D + d] == c.table[ids[n] * D + d] * scale;
    TT_EXPECT(rows_ok, "embedding forward copies table rows (times %g)", scale);

    double *base = drandn(V * D, 1), *dtable = dcopy(base, V * D);
    tt_cpu_embedding_backward_f64(dtable, ids, c.R, N, D, scale);
    double *grad = dsub(dtable, base, V * D);
    expect_grad("embedding dtable", emb_objective, &c, c.table, V * D, grad);

    float *tf = to_f32(c.table, V * D), *outf = fnew(N * D), *Rf = to_f32(c.R, N * D);
    float *dtf = to_f32(base, V * D);
    fnan(outf, N * D);
    tt_cpu_embedding_forward_f32(outf, ids, tf, N, D, (float)scale);
    emb_objective(&c);
    expect_close_f32("embedding forward", outf, c.out, N * D);
    tt_cpu_embedding_backward_f32(dtf, ids, Rf, N, D, (float)scale);
    expect_close_f32("embedding backward", dtf, dtable, V * D);

    free(c.table), free(c.out), free(c.R), free(base), free(dtable), free(grad);
    free(tf), free(outf), free(Rf), free(dtf);
}

/* ------------------------------------------------------------------ RMSNorm */

typedef struct {
    int64_t R, C;
    double eps, offset;
    double *x, *w, *out, *rstd, *Ro;
} rms_ctx;

static double rms_objective(void *p) {
    rms_ctx *c = p;
    dnan(c->out, c->R * c->C);
    dnan(c->rstd, c->R);
    tt_cpu_rmsnorm_forward_f64(c->out, c->rstd, c->x, c->w, NULL, c->R, c->C, c->eps, c->offset);
    return ddot(c->out, c->Ro, c->R * c->C);
}

/* offset: the weight's offset (Gemma's (1 + w): 1, its weights near 0; 0 elsewhere, weights near 1) */
static void test_rmsnorm(int64_t R, int64_t C, double offset) {
    rms_ctx c = {.R = R, .C = C, .eps = 1e-6, .offset = offset};
    c.x = drandn(R * C, 1);
    c.w = drandn(C, 0.3);
    for (int64_t i = 0; i < C; i++) c.w[i] += 1 - offset;
    c.out = dnew(R * C);
    c.rstd = dnew(R);
    c.Ro = drandn(R * C, 1);

    rms_objective(&c);
    double *ref = dnew(R * C), *ref_rstd = dnew(R);
    for (int64_t r = 0; r < R; r++) {
        double ms = 0;
        for (int64_t i = 0; i < C; i++) ms += c.x[r * C + i] * c.x[r * C + i];
        ref_rstd[r] = 1 / sqrt(ms / (double)C + c.eps);
        for (int64_t i = 0; i < C; i++) ref[r * C + i] = (c.w[i] + offset) * c.x[r * C + i] * ref_rstd[r];
    }
    expect_close("rmsnorm forward", c.out, ref, R * C, REF_TOL);
    expect_close("rmsnorm rstd", c.rstd, ref_rstd, R, REF_TOL);

    /* a residual added (a norm after a sublayer joining the residual stream): exactly residual + the norm's output;
     * no output: the rstd alone, the same */
    double *res = drandn(R * C, 1), *joined = dnew(R * C), *rstd_again = dnew(R);
    tt_cpu_rmsnorm_forward_f64(joined, rstd_again, c.x, c.w, res, R, C, c.eps, offset);
    bool joined_ok = true;
    for (int64_t i = 0; i < R * C; i++) joined_ok &= joined[i] == res[i] + c.out[i];
    dnan(rstd_again, R);
    tt_cpu_rmsnorm_forward_f64(NULL, rstd_again, c.x, c.w, res, R, C, c.eps, offset);
    TT_EXPECT(joined_ok && memcmp(rstd_again, c.rstd, (size_t)R * sizeof(double)) == 0,
              "rmsnorm forward with a residual adds it; with no output writes the same rstd");
    free(res), free(joined), free(rstd_again);

    /* "+=" into random starting values; the difference is the gradient. */
    double *base_x = drandn(R * C, 1), *base_w = drandn(C, 1);
    double *dx = dcopy(base_x, R * C), *dw = dcopy(base_w, C);
    tt_cpu_rmsnorm_backward_f64(NULL, dx, dw, c.Ro, c.x, c.w, c.rstd, R, C, offset);
    double *gx = dsub(dx, base_x, R * C), *gw = dsub(dw, base_w, C);

    /* dx and dw may each be skipped. */
    double *dx_only = dcopy(base_x, R * C), *dw_only = dcopy(base_w, C);
    tt_cpu_rmsnorm_backward_f64(NULL, dx_only, NULL, c.Ro, c.x, c.w, c.rstd, R, C, offset);
    tt_cpu_rmsnorm_backward_f64(NULL, NULL, dw_only, c.Ro, c.x, c.w, c.rstd, R, C, offset);
    TT_EXPECT(memcmp(dx_only, dx, (size_t)(R * C) * sizeof(double)) == 0 &&
                  memcmp(dw_only, dw, (size_t)C * sizeof(double)) == 0,
              "rmsnorm backward with dw or dx NULL gives the same dx and dw");

    /* dx may be the buffer of dout (dx = dout + gradient). */
    double *alias = dcopy(c.Ro, R * C), *dx_sep = dcopy(c.Ro, R * C), *dw_alias = dcopy(base_w, C);
    tt_cpu_rmsnorm_backward_f64(NULL, dx_sep, NULL, c.Ro, c.x, c.w, c.rstd, R, C, offset);
    tt_cpu_rmsnorm_backward_f64(NULL, alias, dw_alias, alias, c.x, c.w, c.rstd, R, C, offset);
    TT_EXPECT(memcmp(alias, dx_sep, (size_t)(R * C) * sizeof(double)) == 0 &&
                  memcmp(dw_alias, dw, (size_t)C * sizeof(double)) == 0,
              "rmsnorm backward with dx == dout");
    free(alias), free(dx_sep), free(dw_alias);

    char what[64];
    snprintf(what, sizeof what, "rmsnorm dx [%lld,%lld] offset %g", (long long)R, (long long)C, offset);
    expect_grad(what, rms_objective, &c, c.x, R * C, gx);
    snprintf(what, sizeof what, "rmsnorm dw [%lld,%lld] offset %g", (long long)R, (long long)C, offset);
    expect_grad(what, rms_objective, &c, c.w, C, gw);

    float *xf = to_f32(c.x, R * C), *wf = to_f32(c.w, C), *Rf = to_f32(c.Ro, R * C);
    float *outf = fnew(R * C), *rstdf = fnew(R), *dxf = to_f32(base_x, R * C), *dwf = to_f32(base_w, C);
    fnan(outf, R * C);
    fnan(rstdf, R);
    tt_cpu_rmsnorm_forward_f32(outf, rstdf, xf, wf, NULL, R, C, c.eps, (float)offset);
    rms_objective(&c);
    expect_close_f32("rmsnorm forward", outf, c.out, R * C);
    expect_close_f32("rmsnorm rstd", rstdf, c.rstd, R);
    tt_cpu_rmsnorm_backward_f32(NULL, dxf, dwf, Rf, xf, wf, rstdf, R, C, (float)offset);
    expect_close_f32("rmsnorm dx", dxf, dx, R * C);
    expect_close_f32("rmsnorm dw", dwf, dw, C);

    free(c.x), free(c.w), free(c.out), free(c.rstd), free(c.Ro), free(ref), free(ref_rstd);
    free(base_x), free(base_w), free(dx), free(dw), free(gx), free(gw), free(dx_only), free(dw_only);
    free(xf), free(wf), free(Rf), free(outf), free(rstdf), free(dxf), free(dwf);
}

/* ------------------------------------------------------------------ linear */

typedef struct {
    int64_t N, in, out;
    double *x, *W, *b, *y, *Ry;
} lin_ctx;

static double lin_objective(void *p) {
    lin_ctx *c = p;
    dnan(c->y, c->N * c->out);
    tt_cpu_linear_forward_f64(NULL, c->y, c->x, c->W, c->b, c->N, c->in, c->out, false);
    return ddot(c->y, c->Ry, c->N * c->out);
}

static void test_linear(bool bias) {
    lin_ctx c = {.N = 5, .in = 6, .out = 4};
    const int64_t N = c.N, in = c.in, out = c.out;
    c.x = drandn(N * in, 1);
    c.W = drandn(out * in, 1);
    c.b = bias ? drandn(out, 1) : NULL;
    c.y = dnew(N * out);
    c.Ry = drandn(N * out, 1);

    lin_objective(&c);
    double *ref = dnew(N * out);
    for (int64_t n = 0; n < N; n++)
        for (int64_t o = 0; o < out; o++) ref[n * out + o] = (bias ? c.b[o] : 0) + ddot(c.x + n * in, c.W + o * in, in);
    expect_close(bias ? "linear forward (bias)" : "linear forward", c.y, ref, N * out, REF_TOL);

    double *y0 = drandn(N * out, 1), *yacc = dcopy(y0, N * out), *ref_acc = dnew(N * out);
    tt_cpu_linear_forward_f64(NULL, yacc, c.x, c.W, c.b, N, in, out, true);
    for (int64_t i = 0; i < N * out; i++) ref_acc[i] = y0[i] + ref[i];
    expect_close(bias ? "linear forward += (bias)" : "linear forward +=", yacc, ref_acc, N * out, REF_TOL);

    double *dx = dnew(N * in), *base_W = drandn(out * in, 1), *dW = dcopy(base_W, out * in);
    double *base_b = drandn(out, 1), *db = dcopy(base_b, out);
    dnan(dx, N * in);
    tt_cpu_linear_backward_f64(NULL, dx, dW, bias ? db : NULL, c.Ry, c.x, c.W, N, in, out, false);
    double *gW = dsub(dW, base_W, out * in), *gb = dsub(db, base_b, out);
    if (!bias) TT_EXPECT(memcmp(db, base_b, (size_t)out * sizeof(double)) == 0, "db untouched");

    double *base_dx = drandn(N * in, 1), *dx_acc = dcopy(base_dx, N * in);
    tt_cpu_linear_backward_f64(NULL, dx_acc, NULL, NULL, c.Ry, c.x, c.W, N, in, out, true);
    double *gx_acc = dsub(dx_acc, base_dx, N * in);
    expect_close("linear dx +=", gx_acc, dx, N * in, 1e-14);

    double *dW2 = dcopy(base_W, out * in);
    tt_cpu_linear_backward_f64(NULL, NULL, dW2, NULL, c.Ry, c.x, c.W, N, in, out, false);
    TT_EXPECT(memcmp(dW2, dW, (size_t)(out * in) * sizeof(double)) == 0, "linear backward with dx NULL");

    expect_grad("linear dx", lin_objective, &c, c.x, N * in, dx);
    expect_grad("linear dW", lin_objective, &c, c.W, out * in, gW);
    if (bias) expect_grad("linear db", lin_objective, &c, c.b, out, gb);

    float *xf = to_f32(c.x, N * in), *Wf = to_f32(c.W, out * in), *bf = bias ? to_f32(c.b, out) : NULL;
    float *yf = fnew(N * out), *Ryf = to_f32(c.Ry, N * out), *dxf = fnew(N * in);
    float *dWf = to_f32(base_W, out * in), *dbf = to_f32(base_b, out);
    fnan(yf, N * out);
    fnan(dxf, N * in);
    tt_cpu_linear_forward_f32(NULL, yf, xf, Wf, bf, N, in, out, false);
    expect_close_f32("linear forward", yf, ref, N * out);
    tt_cpu_linear_backward_f32(NULL, dxf, dWf, bias ? dbf : NULL, Ryf, xf, Wf, N, in, out, false);
    expect_close_f32("linear dx", dxf, dx, N * in);
    expect_close_f32("linear dW", dWf, dW, out * in);
    if (bias) expect_close_f32("linear db", dbf, db, out);

    free(c.x), free(c.W), free(c.b), free(c.y), free(c.Ry), free(ref), free(y0), free(yacc), free(ref_acc);
    free(dx), free(base_W), free(dW), free(base_b), free(db), free(gW), free(gb), free(base_dx), free(dx_acc);
    free(gx_acc), free(dW2), free(xf), free(Wf), free(bf), free(yf), free(Ryf), free(dxf), free(dWf), free(dbf);
}

/* ------------------------------------------------------------------ LoRA adapter */

/* The step's adapter code (src/train/lora_step.c) runs through a backend table; here, one of the
 * f64 kernels, so that the composition itself is checked in double against finite differences. */
static void f64_linear_forward(void *ctx, void *y, const void *x, const void *W, const void *b, const void *residual,
                               int64_t N, int64_t in, int64_t out) {
    if (residual && residual != y) memcpy(y, residual, sizeof(double) * (size_t)(N * out));
    tt_cpu_linear_forward_f64(NULL, y, x, W, b, N, in, out, residual != NULL);
}
static void f64_linear_backward(void *ctx, void *dx, void *dW, void *db, const void *dy, const void *x, const void *W,
                                int64_t N, int64_t in, int64_t out, bool accumulate_dx) {
    tt_cpu_linear_backward_f64(NULL, dx, dW, db, dy, x, W, N, in, out, accumulate_dx);
}
static void f64_dropout_scale(void *ctx, void *out, const void *x, int64_t n, float multiplier, uint32_t threshold,
                              uint64_t seed) {
    tt_cpu_dropout_scale_f64(out, x, n, multiplier, threshold, seed);
}
static void f64_add(void *ctx, void *out, const void *a, const void *b, int64_t n) { tt_cpu_add_f64(out, a, b, n); }
/* The entries the LoRA adapter code calls, in double; no context. */
static const tt_backend_iface f64_iface = {.linear_forward = f64_linear_forward,
                                           .linear_backward = f64_linear_backward,
                                           .dropout_scale = f64_dropout_scale,
                                           .add = f64_add};
static const tt_backend f64_backend = {.iface = &f64_iface, .name = "cpu f64", .compute_tier = TT_TIER_HOST};

typedef struct {
    int64_t N;
    tt_lora_layer lora;
    double *x, *W, *A, *B, *u, *y, *R;
} lora_ctx;

/* L = sum(R .* (x W^T + scaling B A dropout(x))) */
static double lora_objective(void *p) {
    lora_ctx *c = p;
    dnan(c->y, c->N * c->lora.out);
    dnan(c->u, c->N * c->lora.rank);
    tt_cpu_linear_forward_f64(NULL, c->y, c->x, c->W, NULL, c->N, c->lora.in, c->lora.out, false);
    tt_lora_forward_down(&f64_backend, &c->lora, c->x, c->u, c->N);
    tt_lora_forward_up(&f64_backend, &c->lora, c->u, c->y, c->N);
    return ddot(c->y, c->R, c->N * c->lora.out);
}

static void test_lora_adapter(double dropout) {
    const int64_t N = 7, in = 9, out = 5, r = 3;
    lora_ctx c = {.N = N};
    c.x = drandn(N * in, 1);
    c.W = drandn(out * in, 1);
    c.A = drandn(r * in, 0.5);
    c.B = drandn(out * r, 0.5);
    c.u = dnew(N * r);
    c.y = dnew(N * out);
    c.R = drandn(N * out, 1);
    double *dA = dnew(r * in), *dB = dnew(out * r), *dropped = dnew(N * in);
    c.lora = (tt_lora_layer){.A = c.A, .B = c.B, .dA = dA, .dB = dB, .in = in, .out = out, .rank = r, .scaling = 1.5f};
    if (dropout > 0) {
        c.lora.drop_threshold = tt_dropout_threshold(dropout);
        c.lora.drop_multiplier = (float)(1.0 / (1.0 - dropout));
        c.lora.drop_seed = 77;
        c.lora.dropout_buffer = dropped;
    }
    const char *tag = dropout > 0 ? "LoRA with dropout" : "LoRA";
    char what[96];

    /* forward against the formula, the mask drawn element by element */
    lora_objective(&c);
    double *ref = dnew(N * out);
    for (int64_t n = 0; n < N; n++)
        for (int64_t o = 0; o < out; o++) {
            double adapter = 0;
            for (int64_t k = 0; k < r; k++) {
                double ax = 0;
                for (int64_t i = 0; i < in; i++) {
                    const bool keep =
                        tt_dropout_bits(c.lora.drop_seed, (uint64_t)(n * in + i)) >= c.lora.drop_threshold;
                    const double scale = c.lora.drop_threshold ? (double)c.lora.drop_multiplier : 1.0;
                    ax += c.A[k * in + i] * (keep ? c.x[n * in + i] * scale : 0.0);
                }
                adapter += c.B[o * r + k] * (1.5 * ax);
            }
            ref[n * out + o] = ddot(c.x + n * in, c.W + o * in, in) + adapter;
        }
    snprintf(what, sizeof what, "%s forward", tag);
    expect_close(what, c.y, ref, N * out, REF_TOL);

    /* backward: the base dx, then the adapter's pieces in the step's order */
    double *dx = dnew(N * in);
    tt_cpu_linear_backward_f64(NULL, dx, NULL, NULL, c.R, NULL, c.W, N, in, out, false);
    tt_lora_backward_weights(&f64_backend, &c.lora, c.R, c.x, c.u, N);
    tt_lora_backward_input(&f64_backend, &c.lora, c.u, dx, N);
    snprintf(what, sizeof what, "%s dA", tag);
    expect_grad(what, lora_objective, &c, c.A, r * in, dA);
    snprintf(what, sizeof what, "%s dB", tag);
    expect_grad(what, lora_objective, &c, c.B, out * r, dB);
    snprintf(what, sizeof what, "%s dx", tag);
    expect_grad(what, lora_objective, &c, c.x, N * in, dx);

    free(c.x), free(c.W), free(c.A), free(c.B), free(c.u), free(c.y), free(c.R), free(dA), free(dB), free(dropped);
    free(ref), free(dx);
}

/* The mask: about p of the elements dropped, the same ones in f32 and f64, a plain scale at threshold 0. */
static void test_dropout_mask(void) {
    const int64_t n = 100000;
    double *x = dnew(n), *y = dnew(n);
    float *xf = fnew(n), *yf = fnew(n);
    for (int64_t i = 0; i < n; i++) x[i] = xf[i] = (float)(1 + i % 3);
    const uint32_t threshold = tt_dropout_threshold(0.3);
    tt_cpu_dropout_scale_f64(y, x, n, 2.0, threshold, 123);
    tt_cpu_dropout_scale_f32(yf, xf, n, 2.0f, threshold, 123);
    int64_t dropped = 0, agree = 0;
    for (int64_t i = 0; i < n; i++) {
        dropped += y[i] == 0;
        agree += (y[i] == 0) == (yf[i] == 0) && (y[i] == 0 || y[i] == 2 * x[i]);
    }
    TT_EXPECT(dropped > 29000 && dropped < 31000, "dropout 0.3 drops %lld of %lld", (long long)dropped, (long long)n);
    TT_EXPECT(agree == n, "f32 and f64 masks agree and kept elements are scaled (%lld of %lld)", (long long)agree,
              (long long)n);
    tt_cpu_dropout_scale_f32(yf, xf, n, 0.5f, 0, 9);
    bool plain = true;
    for (int64_t i = 0; i < n; i++) plain = plain && yf[i] == 0.5f * xf[i];
    TT_EXPECT(plain, "threshold 0 is a plain scale");
    TT_EXPECT(tt_dropout_threshold(0) == 0 && tt_dropout_threshold(0.5) == 2147483648u, "thresholds");
    /* a slice from element 37123 on (tiled_mlp's shards) draws the whole tensor's mask there */
    tt_cpu_dropout_scale_f32(yf, xf, n, 2.0f, threshold, 123);
    float *slice = fnew(n);
    const int64_t offset = 37123;
    tt_cpu_dropout_scale_f32(slice, xf + offset, n - offset, 2.0f, threshold, tt_dropout_seed_at(123, offset));
    TT_EXPECT(memcmp(slice, yf + offset, sizeof(float) * (size_t)(n - offset)) == 0,
              "tt_dropout_seed_at: a slice's mask is the whole tensor's at its elements");
    free(slice);
    free(x), free(y), free(xf), free(yf);
}

/* Column reductions over more rows than one block (128): rmsnorm dw and linear db. */
static void test_column_sums(void) {
    const int64_t R = 300, C = 7;
    double *x = drandn(R * C, 1), *w = drandn(C, 1), *g = drandn(R * C, 1), *rstd = drandn(R, 1);
    double *dw = dnew(C), *db = dnew(C), *ref_dw = dnew(C), *ref_db = dnew(C);
    for (int64_t r = 0; r < R; r++)
        for (int64_t i = 0; i < C; i++) {
            ref_dw[i] += g[r * C + i] * x[r * C + i] * rstd[r];
            ref_db[i] += g[r * C + i];
        }
    tt_cpu_rmsnorm_backward_f64(NULL, NULL, dw, g, x, w, rstd, R, C, 0.0);
    tt_cpu_linear_backward_f64(NULL, NULL, NULL, db, g, x, x, R, C, C, false);
    expect_close("rmsnorm dw over 300 rows", dw, ref_dw, C, REF_TOL);
    expect_close("linear db over 300 rows", db, ref_db, C, REF_TOL);
    free(x), free(w), free(g), free(rstd), free(dw), free(db), free(ref_dw), free(ref_db);
}

/* ------------------------------------------------------------------ RoPE */

typedef struct {
    int64_t B, T, H, hd, rd;
    double *x, *work, *cs, *sn, *Rx;
} rope_ctx;

static double rope_objective(void *p) {
    rope_ctx *c = p;
    const int64_t n = c->B * c->T * c->H * c->hd;
    memcpy(c->work, c->x, (size_t)n * sizeof(double));
    tt_cpu_rope_forward_f64(c->work, c->cs, c->sn, c->B, c->T, c->H, c->hd, c->rd);
    return ddot(c->work, c->Rx, n);
}

/* rd: the rotated dimensions of each head (partial rotary below hd: the others pass through) */
static void test_rope(int64_t hd, int64_t rd) {
    rope_ctx c = {.B = 2, .T = 3, .H = 2, .hd = hd, .rd = rd};
    const int64_t B = c.B, T = c.T, H = c.H, half = rd / 2, n = B * T * H * hd;
    c.x = drandn(n, 1);
    c.work = dnew(n);
    c.Rx = drandn(n, 1);
    c.cs = dnew(T * half);
    c.sn = dnew(T * half);
    for (int64_t t = 0; t < T; t++)
        for (int64_t i = 0; i < half; i++) {
            double angle = (double)(t + 1) * pow(10000.0, -2.0 * (double)i / (double)rd);
            c.cs[t * half + i] = cos(angle);
            c.sn[t * half + i] = sin(angle);
        }

    rope_objective(&c);
    double *ref = dcopy(c.x, n);
    for (int64_t row = 0; row < B * T; row++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < half; i++) {
                const int64_t t = row % T, o = (row * H + h) * hd;
                const double x1 = c.x[o + i], x2 = c.x[o + i + half];
                ref[o + i] = x1 * c.cs[t * half + i] - x2 * c.sn[t * half + i];
                ref[o + i + half] = x2 * c.cs[t * half + i] + x1 * c.sn[t * half + i];
            }
    expect_close("rope forward", c.work, ref, n, REF_TOL);

    double *back = dcopy(c.work, n);
    tt_cpu_rope_backward_f64(back, c.cs, c.sn, B, T, H, hd, rd);
    expect_close("rope backward undoes forward", back, c.x, n, 1e-14);

    double *g = dcopy(c.Rx, n);
    tt_cpu_rope_backward_f64(g, c.cs, c.sn, B, T, H, hd, rd);
    char what[64];
    snprintf(what, sizeof what, "rope dx (%lld of %lld dimensions)", (long long)rd, (long long)hd);
    expect_grad(what, rope_objective, &c, c.x, n, g);

    float *xf = to_f32(c.x, n), *csf = to_f32(c.cs, T * half), *snf = to_f32(c.sn, T * half);
    float *gf = to_f32(c.Rx, n);
    tt_cpu_rope_forward_f32(xf, csf, snf, B, T, H, hd, rd);
    expect_close_f32("rope forward", xf, ref, n);
    tt_cpu_rope_backward_f32(gf, csf, snf, B, T, H, hd, rd);
    expect_close_f32("rope backward", gf, g, n);

    free(c.x), free(c.work), free(c.Rx), free(c.cs), free(c.sn), free(ref), free(back), free(g);
    free(xf), free(csf), free(snf), free(gf);
}

/* ------------------------------------------------------------------ attention */

typedef struct {
    tt_attention_shape s;
    double *q, *k, *v, *out, *lse, *Ro;
} attn_ctx;

static int64_t attn_q_elems(const tt_attention_shape *s) { return s->batch * s->seq_len * s->num_heads * s->head_dim; }
static int64_t attn_kv_elems(const tt_attention_shape *s) {
    return s->batch * s->seq_len * s->num_kv_heads * s->head_dim;
}

static double attn_objective(void *p) {
    attn_ctx *c = p;
    dnan(c->out, attn_q_elems(&c->s));
    dnan(c->lse, c->s.batch * c->s.num_heads * c->s.seq_len);
    tt_cpu_attention_forward_f64(NULL, c->out, c->lse, c->q, c->k, c->v, &c->s);
    return ddot(c->out, c->Ro, attn_q_elems(&c->s));
}

/* Naive attention: full score rows with the mask written as in backend.h. */
static void attn_reference(double *out, double *lse, const double *q, const double *k, const double *v,
                           const tt_attention_shape *s) {
    const int64_t B = s->batch, T = s->seq_len, Hq = s->num_heads, Hkv = s->num_kv_heads, hd = s->head_dim;
    double *sc = dnew(T);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < Hq; h++)
            for (int64_t i = 0; i < T; i++) {
                const int64_t kvh = h / (Hq / Hkv);
                const double *qi = q + ((b * T + i) * Hq + h) * hd;
                double m = -INFINITY, sum = 0;
                for (int64_t j = 0; j < T; j++) {
                    bool visible = j <= i && (s->sliding_window == 0 || i - j < s->sliding_window);
                    double u = s->scale * ddot(qi, k + ((b * T + j) * Hkv + kvh) * hd, hd);
                    if (s->softcap > 0) u = s->softcap * tanh(u / s->softcap);
                    sc[j] = visible ? u : -INFINITY;
                    if (sc[j] > m) m = sc[j];
                }
                for (int64_t j = 0; j < T; j++) sum += exp(sc[j] - m);
                lse[(b * Hq + h) * T + i] = m + log(sum);
                double *oi = out + ((b * T + i) * Hq + h) * hd;
                for (int64_t d = 0; d < hd; d++) oi[d] = 0;
                for (int64_t j = 0; j < T; j++)
                    for (int64_t d = 0; d < hd; d++)
                        oi[d] += exp(sc[j] - m) / sum * v[((b * T + j) * Hkv + kvh) * hd + d];
            }
    free(sc);
}

/* softcap: Gemma 2's soft-capping of the scores (0: none) */
static void test_attention(int64_t window, double softcap) {
    attn_ctx c = {.s = {.batch = 2,
                        .seq_len = 5,
                        .num_heads = 4,
                        .num_kv_heads = 2,
                        .head_dim = 4,
                        .scale = 0.5,
                        .sliding_window = window,
                        .softcap = softcap}};
    const int64_t nq = attn_q_elems(&c.s), nkv = attn_kv_elems(&c.s), nl = c.s.batch * c.s.num_heads * c.s.seq_len;
    c.q = drandn(nq, 1.5);
    c.k = drandn(nkv, 1.5);
    c.v = drandn(nkv, 1);
    c.out = dnew(nq);
    c.lse = dnew(nl);
    c.Ro = drandn(nq, 1);
    char what[96];

    attn_objective(&c);
    double *ref = dnew(nq), *ref_lse = dnew(nl);
    attn_reference(ref, ref_lse, c.q, c.k, c.v, &c.s);
    snprintf(what, sizeof what, "attention forward (window %lld, softcap %g)", (long long)window, softcap);
    expect_close(what, c.out, ref, nq, REF_TOL);
    snprintf(what, sizeof what, "attention lse (window %lld, softcap %g)", (long long)window, softcap);
    expect_close(what, c.lse, ref_lse, nl, REF_TOL);

    double *dq = dnew(nq), *dk = dnew(nkv), *dv = dnew(nkv);
    dnan(dq, nq), dnan(dk, nkv), dnan(dv, nkv);
    tt_cpu_attention_backward_f64(NULL, dq, dk, dv, c.Ro, c.out, c.lse, c.q, c.k, c.v, &c.s);

    float *qf = to_f32(c.q, nq), *kf = to_f32(c.k, nkv), *vf = to_f32(c.v, nkv), *Rf = to_f32(c.Ro, nq);
    float *outf = fnew(nq), *lsef = fnew(nl), *dqf = fnew(nq), *dkf = fnew(nkv), *dvf = fnew(nkv);
    fnan(outf, nq), fnan(lsef, nl), fnan(dqf, nq), fnan(dkf, nkv), fnan(dvf, nkv);
    tt_cpu_attention_forward_f32(NULL, outf, lsef, qf, kf, vf, &c.s);
    tt_cpu_attention_backward_f32(NULL, dqf, dkf, dvf, Rf, outf, lsef, qf, kf, vf, &c.s);
    expect_close_f32("attention forward", outf, c.out, nq);
    expect_close_f32("attention lse", lsef, c.lse, nl);
    expect_close_f32("attention dv", dvf, dv, nkv);
    if (window == 1) {
        /* Each query sees only itself: out = v, so dq and dk are zero up to rounding; a
         * relative error would compare rounding noise with rounding noise. */
        double worst = 0;
        for (int64_t i = 0; i < nq; i++) worst = fmax(worst, fmax(fabs(dq[i]), fabs((double)dqf[i])));
        for (int64_t i = 0; i < nkv; i++) worst = fmax(worst, fmax(fabs(dk[i]), fabs((double)dkf[i])));
        TT_EXPECT(worst < 1e-6, "attention (window 1) dq, dk vanish: max %.3g", worst);
    } else {
        expect_close_f32("attention dq", dqf, dq, nq);
        expect_close_f32("attention dk", dkf, dk, nkv);
        snprintf(what, sizeof what, "attention dq (window %lld, softcap %g)", (long long)window, softcap);
        expect_grad(what, attn_objective, &c, c.q, nq, dq);
        snprintf(what, sizeof what, "attention dk (window %lld, softcap %g)", (long long)window, softcap);
        expect_grad(what, attn_objective, &c, c.k, nkv, dk);
    }
    snprintf(what, sizeof what, "attention dv (window %lld, softcap %g)", (long long)window, softcap);
    expect_grad(what, attn_objective, &c, c.v, nkv, dv);

    free(c.q), free(c.k), free(c.v), free(c.out), free(c.lse), free(c.Ro), free(ref), free(ref_lse);
    free(dq), free(dk), free(dv), free(qf), free(kf), free(vf), free(Rf), free(outf), free(lsef);
    free(dqf), free(dkf), free(dvf);
}

/* ------------------------------------------------------------------ gated activations, add */

typedef struct {
    int64_t n;
    tt_glu_activation act;
    double *gate, *up, *h, *Rh;
} glu_ctx;

static double glu_objective(void *p) {
    glu_ctx *c = p;
    dnan(c->h, c->n);
    tt_cpu_glu_forward_f64(c->h, c->gate, c->up, c->n, c->act);
    return ddot(c->h, c->Rh, c->n);
}

/* silu(g) = g / (1 + exp(-g)); gelu tanh(g) = 0.5 g (1 + tanh(sqrt(2 / pi) (g + 0.044715 g^3))) */
static double glu_reference(double g, tt_glu_activation act) {
    return act == TT_GLU_SILU ? g / (1 + exp(-g)) : 0.5 * g * (1 + tanh(sqrt(2 / M_PI) * (g + 0.044715 * g * g * g)));
}

static void test_glu(tt_glu_activation act) {
    const char *name = act == TT_GLU_SILU ? "swiglu" : "geglu";
    glu_ctx c = {.n = 24, .act = act};
    const int64_t n = c.n;
    c.gate = drandn(n, 3);
    c.gate[0] = -30; /* exp(30): the large-negative tail */
    c.gate[1] = 25;
    c.up = drandn(n, 1);
    c.h = dnew(n);
    c.Rh = drandn(n, 1);
    char what[64];

    glu_objective(&c);
    double *ref = dnew(n);
    for (int64_t i = 0; i < n; i++) ref[i] = glu_reference(c.gate[i], act) * c.up[i];
    snprintf(what, sizeof what, "%s forward", name);
    expect_close(what, c.h, ref, n, REF_TOL);

    double *dg = dnew(n), *du = dnew(n);
    dnan(dg, n), dnan(du, n);
    tt_cpu_glu_backward_f64(dg, du, c.Rh, c.gate, c.up, n, act);
    snprintf(what, sizeof what, "%s dgate", name);
    expect_grad(what, glu_objective, &c, c.gate, n, dg);
    snprintf(what, sizeof what, "%s dup", name);
    expect_grad(what, glu_objective, &c, c.up, n, du);

    float *gf = to_f32(c.gate, n), *uf = to_f32(c.up, n), *Rf = to_f32(c.Rh, n);
    float *hf = fnew(n), *dgf = fnew(n), *duf = fnew(n);
    fnan(hf, n), fnan(dgf, n), fnan(duf, n);
    tt_cpu_glu_forward_f32(hf, gf, uf, n, act);
    tt_cpu_glu_backward_f32(dgf, duf, Rf, gf, uf, n, act);
    snprintf(what, sizeof what, "%s forward", name);
    expect_close_f32(what, hf, ref, n);
    snprintf(what, sizeof what, "%s dgate", name);
    expect_close_f32(what, dgf, dg, n);
    snprintf(what, sizeof what, "%s dup", name);
    expect_close_f32(what, duf, du, n);

    free(c.gate), free(c.up), free(c.h), free(c.Rh), free(ref), free(dg), free(du);
    free(gf), free(uf), free(Rf), free(hf), free(dgf), free(duf);
}

static void test_add(void) {
    const int64_t n = 37;
    double *a = drandn(n, 1), *b = drandn(n, 1), *out = dnew(n);
    dnan(out, n);
    tt_cpu_add_f64(out, a, b, n);
    bool ok = true;
    for (int64_t i = 0; i < n; i++) ok &= out[i] == a[i] + b[i];
    TT_EXPECT(ok, "add f64");
    float *af = to_f32(a, n), *bf = to_f32(b, n), *of = fnew(n);
    fnan(of, n);
    tt_cpu_add_f32(of, af, bf, n);
    expect_close_f32("add", of, out, n);
    free(a), free(b), free(out), free(af), free(bf), free(of);
}

/* ------------------------------------------------------------------ LM head + loss */

typedef struct {
    int64_t N, D, V, chunk;
    double scale, logit_scale, softcap;
    int32_t *targets;
    double *xn, *W, *logits;
} lm_ctx;

static double lm_objective(void *p) {
    lm_ctx *c = p;
    int64_t count = -1;
    dnan(c->logits, c->chunk * c->V);
    return c->scale * tt_cpu_lm_head_loss_f64(NULL, NULL, NULL, c->xn, c->W, c->targets, c->N, c->D, c->V, c->chunk,
                                              c->logits, c->logit_scale, c->softcap, c->scale, 0.0, &count);
}

static void lm_bad_target(void) {
    int32_t targets[2] = {1, 11};
    double xn[6] = {0}, W[33] = {0}, logits[33];
    int64_t count;
    tt_cpu_lm_head_loss_f64(NULL, NULL, NULL, xn, W, targets, 2, 3, 11, 1, logits, 1.0, 0.0, 1.0, 0.0, &count);
}

/* The logits z = xn W^T * logit_scale (Granite's 1 / logits_scaling), soft-capped at softcap > 0 (Gemma 2). */
static double lm_logit(const lm_ctx *c, int64_t n, int64_t j) {
    const double z = c->logit_scale * ddot(c->xn + n * c->D, c->W + j * c->D, c->D);
    return c->softcap > 0 ? c->softcap * tanh(z / c->softcap) : z;
}

static void test_lm_head(double logit_scale, double softcap) {
    int32_t targets[] = {2, TT_IGNORE_INDEX, 10, 0, TT_IGNORE_INDEX, 5, 7};
    lm_ctx c = {.N = 7,
                .D = 5,
                .V = 11,
                .chunk = 3,
                .scale = 0.37,
                .logit_scale = logit_scale,
                .softcap = softcap,
                .targets = targets};
    const double ls = logit_scale, cap = softcap;
    const int64_t N = c.N, D = c.D, V = c.V;
    c.xn = drandn(N * D, 1.5);
    c.W = drandn(V * D, 1);
    c.logits = dnew(N * V);

    double ref = 0;
    int64_t ref_count = 0;
    for (int64_t n = 0; n < N; n++) {
        if (targets[n] == TT_IGNORE_INDEX) continue;
        double sum = 0;
        for (int64_t j = 0; j < V; j++) sum += exp(lm_logit(&c, n, j));
        ref += log(sum) - lm_logit(&c, n, targets[n]);
        ref_count++;
    }
    int64_t count = -1;
    double loss = tt_cpu_lm_head_loss_f64(NULL, NULL, NULL, c.xn, c.W, targets, N, D, V, c.chunk, c.logits, ls, cap,
                                          c.scale, 0.0, &count);
    TT_EXPECT(fabs(loss - ref) < REF_TOL * fabs(ref), "lm_head loss %.17g vs %.17g", loss, ref);
    TT_EXPECT(count == ref_count, "lm_head count %lld vs %lld", (long long)count, (long long)ref_count);

    double *dxn = dnew(N * D), *base_W = drandn(V * D, 1), *dW = dcopy(base_W, V * D);
    dnan(dxn, N * D);
    dnan(c.logits, c.chunk * V);
    count = -1;
    double loss2 = tt_cpu_lm_head_loss_f64(NULL, dxn, dW, c.xn, c.W, targets, N, D, V, c.chunk, c.logits, ls, cap,
                                           c.scale, 0.0, &count);
    TT_EXPECT(loss2 == loss && count == ref_count, "lm_head loss with gradients %.17g vs %.17g", loss2, loss);
    double *gW = dsub(dW, base_W, V * D);
    bool ignored_zero = true;
    for (int64_t n = 0; n < N; n++)
        if (targets[n] == TT_IGNORE_INDEX)
            for (int64_t d = 0; d < D; d++) ignored_zero &= dxn[n * D + d] == 0;
    TT_EXPECT(ignored_zero, "lm_head dxn of ignored tokens is zero");

    /* One chunk holding every token gives the same loss and gradients. */
    double *dxn1 = dnew(N * D), *dW1 = dcopy(base_W, V * D), *logits1 = dnew(16 * V);
    dnan(dxn1, N * D);
    double loss1 = tt_cpu_lm_head_loss_f64(NULL, dxn1, dW1, c.xn, c.W, targets, N, D, V, 16, logits1, ls, cap, c.scale,
                                           0.0, &count);
    TT_EXPECT(fabs(loss1 - loss) < 1e-14 * fabs(loss), "lm_head loss with chunk 16: %.17g vs %.17g", loss1, loss);
    expect_close("lm_head dxn with chunk 16", dxn1, dxn, N * D, 1e-14);
    expect_close("lm_head dW with chunk 16", dW1, dW, V * D, 1e-14);

    /* dxn may be the buffer of xn. */
    double *alias = dcopy(c.xn, N * D), *dW_alias = dcopy(base_W, V * D);
    tt_cpu_lm_head_loss_f64(NULL, alias, dW_alias, alias, c.W, targets, N, D, V, c.chunk, c.logits, ls, cap, c.scale,
                            0.0, &count);
    TT_EXPECT(memcmp(alias, dxn, (size_t)(N * D) * sizeof(double)) == 0 &&
                  memcmp(dW_alias, dW, (size_t)(V * D) * sizeof(double)) == 0,
              "lm_head with dxn == xn");
    free(alias), free(dW_alias);

    char what[80];
    snprintf(what, sizeof what, "lm_head dxn (logit scale %g, softcap %g)", ls, cap);
    expect_grad(what, lm_objective, &c, c.xn, N * D, dxn);
    snprintf(what, sizeof what, "lm_head dW (logit scale %g, softcap %g)", ls, cap);
    expect_grad(what, lm_objective, &c, c.W, V * D, gW);

    float *xf = to_f32(c.xn, N * D), *Wf = to_f32(c.W, V * D), *dxf = fnew(N * D), *dWf = to_f32(base_W, V * D);
    float *lf = fnew(c.chunk * V);
    fnan(dxf, N * D);
    int64_t countf = -1;
    double lossf =
        tt_cpu_lm_head_loss_f32(NULL, dxf, dWf, xf, Wf, targets, N, D, V, c.chunk, lf, ls, cap, c.scale, 0.0, &countf);
    TT_EXPECT(fabs(lossf - loss) < F32_TOL * fabs(loss) && countf == ref_count, "f32 vs f64 lm_head loss %.9g vs %.9g",
              lossf, loss);
    expect_close_f32("lm_head dxn", dxf, dxn, N * D);
    expect_close_f32("lm_head dW", dWf, dW, V * D);

    /* fp32: the tokens cut into two calls, the second continuing the first's loss sum and dW, give the bits of one
     * call over all of them (the loss and dW go on token after token; a row's arithmetic is its own). */
    float *dx_split = fnew(N * D), *dW_split = to_f32(base_W, V * D);
    int64_t count_a = -1, count_b = -1;
    const int64_t cut = 4;
    double loss_split = tt_cpu_lm_head_loss_f32(NULL, dx_split, dW_split, xf, Wf, targets, cut, D, V, c.chunk, lf, ls,
                                                cap, c.scale, 0.0, &count_a);
    loss_split = tt_cpu_lm_head_loss_f32(NULL, dx_split + cut * D, dW_split, xf + cut * D, Wf, targets + cut, N - cut,
                                         D, V, c.chunk, lf, ls, cap, c.scale, loss_split, &count_b);
    TT_EXPECT(memcmp(&loss_split, &lossf, sizeof(double)) == 0 && count_a + count_b == countf &&
                  memcmp(dx_split, dxf, sizeof(float) * (size_t)(N * D)) == 0 &&
                  memcmp(dW_split, dWf, sizeof(float) * (size_t)(V * D)) == 0,
              "f32 lm_head over two calls continuing the loss and dW: %.17g vs %.17g, the same bits", loss_split,
              lossf);
    free(dx_split), free(dW_split);

    /* A target outside [0, V) is an internal error (TT_CHECK aborts). */
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open("/dev/null", O_WRONLY);
        if (fd >= 0) dup2(fd, 2);
        lm_bad_target();
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    TT_EXPECT(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT, "lm_head with target == V aborts (status %d)",
              status);

    free(c.xn), free(c.W), free(c.logits), free(dxn), free(base_W), free(dW), free(gW), free(dxn1), free(dW1);
    free(logits1), free(xf), free(Wf), free(dxf), free(dWf), free(lf);
}

/* ------------------------------------------------------------------ optimizer */

static void test_sum_squares(void) {
    const int64_t n = 10001; /* three blocks of 4096, the last partial */
    double *x = drandn(n, 1), ref = 0;
    for (int64_t i = 0; i < n; i++) ref += x[i] * x[i];
    double got = tt_cpu_sum_squares_f64(NULL, x, n);
    TT_EXPECT(fabs(got - ref) < REF_TOL * ref, "sum_squares %.17g vs %.17g", got, ref);
    TT_EXPECT(tt_cpu_sum_squares_f64(NULL, x, 0) == 0, "sum_squares of nothing");
    float *xf = to_f32(x, n);
    double reff = 0;
    for (int64_t i = 0; i < n; i++) reff += (double)xf[i] * (double)xf[i];
    double gotf = tt_cpu_sum_squares_f32(NULL, xf, n);
    TT_EXPECT(fabs(gotf - reff) < REF_TOL * reff, "sum_squares f32 %.17g vs %.17g", gotf, reff);
    TT_EXPECT(fabs(gotf - got) < F32_TOL * got, "f32 vs f64 sum_squares %.17g vs %.17g", gotf, got);
    free(x), free(xf);
}

/* The CPU backend's one set of settings. */
static const tt_backend_settings fp32 = {
    .precision = {.activation = TT_F32, .gradient = TT_F32, .moment = TT_F32, .master = false}};

/* The scratch area the size table reserves fits the gradient norm of a model whose flat gradient
 * buffer dwarfs its activations (Qwen3-0.6B at 64 tokens asked 1.1 MB of a 0.3 MB area). */
static void test_sum_squares_in_reserved_scratch(void) {
    const tt_scratch_shape shape = {
        .tokens = 4,
        .attention = {.batch = 1, .seq_len = 4, .num_heads = 2, .num_kv_heads = 1, .head_dim = 4, .scale = 0.5},
        .hidden = 8,
        .intermediate = 16,
        .loss_chunk = 4,
        .gradient_numel = 3000000,
        .vocab = 32};
    tt_backend *be = tt_backend_cpu_create(2);
    const size_t bytes = tt_backend_scratch_bytes(be, &fp32, &shape);
    void *area = malloc(bytes);
    float *g = calloc((size_t)shape.gradient_numel, sizeof(float));
    for (int64_t i = 0; i < shape.gradient_numel; i += 1000) g[i] = 1.0f;
    tt_backend_prepare(be, &fp32, &shape, area, bytes);
    double sum = 0;
    tt_backend_sum_squares(be, &sum, g, shape.gradient_numel);
    tt_backend_release(be);
    tt_backend_destroy(be);
    TT_EXPECT(sum == 3000.0, "sum of squares over a %lld-value gradient buffer in a %zu-byte scratch area: %.17g",
              (long long)shape.gradient_numel, bytes, sum);
    free(area), free(g);
}

/* One AdamW step against the formula in double. */
static void test_adamw_case(int64_t step, bool zero_moments) {
    const int64_t n = 64;
    const float lr = 1e-2f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f, gs = 0.7f;
    float *p = fnew(n), *m = fnew(n), *v = fnew(n), *gf = fnew(n);
    double *g = dnew(n), *rp = dnew(n), *rm = dnew(n), *rv = dnew(n), *rdelta = dnew(n), *delta = dnew(n);
    for (int64_t i = 0; i < n; i++) {
        p[i] = (float)tt_rng_normal(&g_rng);
        m[i] = zero_moments ? 0 : (float)(0.1 * tt_rng_normal(&g_rng));
        v[i] = zero_moments ? 0 : (float)(0.01 * fabs(tt_rng_normal(&g_rng)));
        gf[i] = (float)tt_rng_normal(&g_rng);
        g[i] = gf[i];
        const double gi = (double)gf[i] * gs;
        rm[i] = b1 * (double)m[i] + (1 - (double)b1) * gi;
        rv[i] = b2 * (double)v[i] + (1 - (double)b2) * gi * gi;
        const double bc1 = 1 - pow(b1, (double)step), bc2 = 1 - pow(b2, (double)step);
        rp[i] = (double)p[i] * (1 - (double)lr * wd) - lr / bc1 * rm[i] / (sqrt(rv[i]) / sqrt(bc2) + eps);
        rdelta[i] = rp[i] - p[i];
    }
    float *p64 = fnew(n), *m64 = fnew(n), *v64 = fnew(n);
    memcpy(p64, p, (size_t)n * sizeof(float)), memcpy(m64, m, (size_t)n * sizeof(float));
    memcpy(v64, v, (size_t)n * sizeof(float));
    float *p0 = fnew(n);
    memcpy(p0, p, (size_t)n * sizeof(float));

    tt_cpu_adamw_update_f32(p, gf, m, v, n, lr, b1, b2, eps, wd, step, gs);
    for (int64_t i = 0; i < n; i++) delta[i] = (double)p[i] - (double)p0[i];
    TT_EXPECT(rel_err_fd(p, rp, n) < 1e-6, "adamw p (step %lld): %.3g", (long long)step, rel_err_fd(p, rp, n));
    /* The update itself (about lr) to float rounding of p (about 6e-8 of |p|). */
    TT_EXPECT(rel_err_d(delta, rdelta, n) < 1e-4, "adamw update (step %lld): %.3g", (long long)step,
              rel_err_d(delta, rdelta, n));
    TT_EXPECT(rel_err_fd(m, rm, n) < 1e-6, "adamw m (step %lld): %.3g", (long long)step, rel_err_fd(m, rm, n));
    TT_EXPECT(rel_err_fd(v, rv, n) < 1e-6, "adamw v (step %lld): %.3g", (long long)step, rel_err_fd(v, rv, n));

    /* The f64 variant on the same (float-valued) gradient gives the same bits. */
    tt_cpu_adamw_update_f64(p64, g, m64, v64, n, lr, b1, b2, eps, wd, step, gs);
    TT_EXPECT(memcmp(p64, p, (size_t)n * sizeof(float)) == 0 && memcmp(m64, m, (size_t)n * sizeof(float)) == 0 &&
                  memcmp(v64, v, (size_t)n * sizeof(float)) == 0,
              "adamw f64 variant matches f32 (step %lld)", (long long)step);

    free(p), free(m), free(v), free(gf), free(g), free(rp), free(rm), free(rv), free(rdelta), free(delta);
    free(p64), free(m64), free(v64), free(p0);
}

/* ------------------------------------------------------------------ determinism */

/* Each runs one op (forward and backward) of the CPU backend `be` on inputs drawn from a fixed
 * seed and writes every output into res. */
typedef void (*det_fn)(const tt_backend *be, float *res);

static float *frand(tt_rng *r, int64_t n, double s) {
    float *a = fnew(n);
    for (int64_t i = 0; i < n; i++) a[i] = (float)(s * tt_rng_normal(r));
    return a;
}

#define DET_EMB_V 50
#define DET_EMB_D 200
#define DET_EMB_N 300
static void det_embedding(const tt_backend *be, float *res) {
    tt_rng r;
    tt_rng_seed(&r, 1);
    int32_t ids[DET_EMB_N];
    for (int i = 0; i < DET_EMB_N; i++) ids[i] = (int32_t)(tt_rng_next(&r) % DET_EMB_V);
    float *table = frand(&r, DET_EMB_V * DET_EMB_D, 1), *dout = frand(&r, DET_EMB_N * DET_EMB_D, 1);
    float *out = res, *dtable = res + DET_EMB_N * DET_EMB_D;
    fnan(out, DET_EMB_N * DET_EMB_D);
    tt_backend_embedding_forward(be, out, ids, table, DET_EMB_N, DET_EMB_D, 1.75f);
    memcpy(dtable, table, sizeof(float) * DET_EMB_V * DET_EMB_D);
    tt_backend_embedding_backward(be, dtable, ids, dout, DET_EMB_N, DET_EMB_D, 1.75f);
    free(table), free(dout);
}

#define DET_RMS_R 1000
#define DET_RMS_C 96
static void det_rmsnorm(const tt_backend *be, float *res) {
    tt_rng r;
    tt_rng_seed(&r, 2);
    const int64_t R = DET_RMS_R, C = DET_RMS_C;
    float *x = frand(&r, R * C, 1), *w = frand(&r, C, 1), *dout = frand(&r, R * C, 1);
    float *out = res, *rstd = out + R * C, *dx = rstd + R, *dw = dx + R * C, *joined = dw + C;
    fnan(out, R * C), fnan(rstd, R);
    tt_backend_rmsnorm_forward(be, out, rstd, x, w, NULL, R, C, 1e-6, 0.0f);
    tt_backend_rmsnorm_forward(be, joined, rstd, x, w, dout, R, C, 1e-6, 1.0f); /* Gemma's, joining a residual */
    memcpy(dx, dout, sizeof(float) * (size_t)(R * C));
    memcpy(dw, w, sizeof(float) * (size_t)C);
    tt_backend_rmsnorm_backward(be, dx, dw, dout, x, w, rstd, R, C, 0.0f);
    free(x), free(w), free(dout);
}

#define DET_LIN_N 300
#define DET_LIN_IN 64
#define DET_LIN_OUT 48
static void det_linear(const tt_backend *be, float *res) {
    tt_rng r;
    tt_rng_seed(&r, 3);
    const int64_t N = DET_LIN_N, in = DET_LIN_IN, out = DET_LIN_OUT;
    float *x = frand(&r, N * in, 1), *W = frand(&r, out * in, 1), *b = frand(&r, out, 1), *dy = frand(&r, N * out, 1);
    float *y = res, *yacc = y + N * out, *dx = yacc + N * out, *dW = dx + N * in, *db = dW + out * in;
    fnan(y, N * out), fnan(dx, N * in);
    tt_backend_linear_forward(be, y, x, W, b, NULL, N, in, out);
    tt_backend_linear_forward(be, yacc, x, W, NULL, dy, N, in, out); /* dy as the residual */
    memcpy(dW, W, sizeof(float) * (size_t)(out * in));
    memcpy(db, b, sizeof(float) * (size_t)out);
    tt_backend_linear_backward(be, dx, dW, db, dy, x, W, N, in, out, false);
    free(x), free(W), free(b), free(dy);
}

#define DET_ROPE_B 2
#define DET_ROPE_T 64
#define DET_ROPE_H 4
#define DET_ROPE_HD 32
static void det_rope(const tt_backend *be, float *res) {
    tt_rng r;
    tt_rng_seed(&r, 4);
    const int64_t n = DET_ROPE_B * DET_ROPE_T * DET_ROPE_H * DET_ROPE_HD, nt = DET_ROPE_T * DET_ROPE_HD / 2;
    float *x = frand(&r, n, 1), *g = frand(&r, n, 1), *cs = frand(&r, nt, 1), *sn = frand(&r, nt, 1);
    memcpy(res, x, sizeof(float) * (size_t)n);
    memcpy(res + n, g, sizeof(float) * (size_t)n);
    tt_backend_rope_forward(be, res, cs, sn, DET_ROPE_B, DET_ROPE_T, DET_ROPE_H, DET_ROPE_HD, DET_ROPE_HD);
    tt_backend_rope_backward(be, res + n, cs, sn, DET_ROPE_B, DET_ROPE_T, DET_ROPE_H, DET_ROPE_HD, DET_ROPE_HD / 2);
    free(x), free(g), free(cs), free(sn);
}

#define DET_ATT_B 2
#define DET_ATT_T 64
#define DET_ATT_HQ 4
#define DET_ATT_HKV 2
#define DET_ATT_HD 16
#define DET_ATT_NQ (DET_ATT_B * DET_ATT_T * DET_ATT_HQ * DET_ATT_HD)
#define DET_ATT_NKV (DET_ATT_B * DET_ATT_T * DET_ATT_HKV * DET_ATT_HD)
#define DET_ATT_NL (DET_ATT_B * DET_ATT_HQ * DET_ATT_T)
#define DET_ATT_RES (2 * DET_ATT_NQ + DET_ATT_NL + 2 * DET_ATT_NKV)
static void det_attention_window(const tt_backend *be, float *res, int64_t window, double softcap) {
    tt_rng r;
    tt_rng_seed(&r, 5);
    tt_attention_shape s = {.batch = DET_ATT_B,
                            .seq_len = DET_ATT_T,
                            .num_heads = DET_ATT_HQ,
                            .num_kv_heads = DET_ATT_HKV,
                            .head_dim = DET_ATT_HD,
                            .scale = 0.25,
                            .sliding_window = window,
                            .softcap = softcap};
    float *q = frand(&r, DET_ATT_NQ, 1), *k = frand(&r, DET_ATT_NKV, 1), *v = frand(&r, DET_ATT_NKV, 1);
    float *dout = frand(&r, DET_ATT_NQ, 1);
    float *out = res, *lse = out + DET_ATT_NQ, *dq = lse + DET_ATT_NL, *dk = dq + DET_ATT_NQ, *dv = dk + DET_ATT_NKV;
    fnan(res, DET_ATT_RES);
    tt_backend_attention_forward(be, out, lse, q, k, v, &s);
    tt_backend_attention_backward(be, dq, dk, dv, dout, out, lse, q, k, v, &s, NULL, NULL, 0);
    free(q), free(k), free(v), free(dout);
}
static void det_attention(const tt_backend *be, float *res) { det_attention_window(be, res, 0, 0.0); }
static void det_attention_sliding(const tt_backend *be, float *res) { det_attention_window(be, res, 17, 1.5); }

#define DET_ELEM_N 10000
static void det_glu_add(const tt_backend *be, float *res) {
    tt_rng r;
    tt_rng_seed(&r, 6);
    const int64_t n = DET_ELEM_N;
    float *g = frand(&r, n, 3), *u = frand(&r, n, 1), *dh = frand(&r, n, 1);
    fnan(res, 7 * n);
    tt_backend_glu_forward(be, res, g, u, n, TT_GLU_SILU);
    tt_backend_glu_backward(be, res + n, res + 2 * n, dh, g, u, n, TT_GLU_SILU);
    tt_backend_add(be, res + 3 * n, g, u, n);
    tt_backend_glu_forward(be, res + 4 * n, g, u, n, TT_GLU_GELU_TANH);
    tt_backend_glu_backward(be, res + 5 * n, res + 6 * n, dh, g, u, n, TT_GLU_GELU_TANH);
    free(g), free(u), free(dh);
}

#define DET_LM_N 100
#define DET_LM_D 32
#define DET_LM_V 500
#define DET_LM_CHUNK 48
#define DET_LM_RES (4 + DET_LM_N * DET_LM_D + DET_LM_V * DET_LM_D)
static void det_lm_head(const tt_backend *be, float *res) {
    tt_rng r;
    tt_rng_seed(&r, 7);
    int32_t targets[DET_LM_N];
    for (int i = 0; i < DET_LM_N; i++)
        targets[i] = i % 7 == 3 ? TT_IGNORE_INDEX : (int32_t)(tt_rng_next(&r) % DET_LM_V);
    float *xn = frand(&r, DET_LM_N * DET_LM_D, 1), *W = frand(&r, DET_LM_V * DET_LM_D, 1);
    float *logits = fnew(DET_LM_CHUNK * DET_LM_V);
    float *dxn = res + 4, *dW = dxn + DET_LM_N * DET_LM_D;
    fnan(dxn, DET_LM_N * DET_LM_D);
    memcpy(dW, W, sizeof(float) * DET_LM_V * DET_LM_D);
    int64_t count = 0;
    double loss = tt_backend_lm_head_loss(be, dxn, dW, xn, W, targets, DET_LM_N, DET_LM_D, DET_LM_V, DET_LM_CHUNK,
                                          logits, 0.8, 6.0, 1.0 / 86, 0.0, &count);
    memcpy(res, &loss, sizeof loss);
    memcpy(res + 2, &count, sizeof count);
    free(xn), free(W), free(logits);
}

#define DET_OPT_N 100000
static void det_optimizer(const tt_backend *be, float *res) {
    tt_rng r;
    tt_rng_seed(&r, 8);
    const int64_t n = DET_OPT_N;
    float *g = frand(&r, n, 1), *p = res + 2, *m = p + n, *v = m + n;
    double ss = 0;
    tt_backend_sum_squares(be, &ss, g, n);
    memcpy(res, &ss, sizeof ss);
    for (int64_t i = 0; i < n; i++) {
        p[i] = (float)tt_rng_normal(&r);
        m[i] = (float)(0.1 * tt_rng_normal(&r));
        v[i] = (float)(0.01 * fabs(tt_rng_normal(&r)));
    }
    const int64_t segment_start[3] = {0, n / 2, n};
    const unsigned char segment_decays[2] = {1, 0};
    tt_backend_adamw_update(be, p, NULL, g, m, v, segment_start, segment_decays, 2, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f,
                            7, 0.5f);
    free(g);
}

/* The op on three CPU backends that exist side by side, on 1, 2 and 3 threads, with the caller's
 * own OpenMP setting at 1 (each backend runs its ops on its own count and gives the caller's back). */
static void check_threads(const char *name, det_fn fn, int64_t n) {
    const int saved_omp = omp_get_max_threads();
    tt_backend *backends[3]; /* (each sets OpenBLAS, process-wide, to one thread: GEMMs are tiled over OpenMP's) */
    for (int t = 1; t <= 3; t++) backends[t - 1] = tt_backend_cpu_create(t);
    omp_set_num_threads(1);
    float *ref = fnew(n), *got = fnew(n);
    fn(backends[0], ref);
    for (int t = 2; t <= 3; t++) {
        fnan(got, n);
        fn(backends[t - 1], got);
        TT_EXPECT(memcmp(ref, got, (size_t)n * sizeof(float)) == 0, "%s: 1 and %d threads differ", name, t);
        TT_EXPECT(omp_get_max_threads() == 1, "%s: the backend on %d threads gave the caller's count back", name, t);
    }
    for (int t = 1; t <= 3; t++) tt_backend_destroy(backends[t - 1]);
    omp_set_num_threads(saved_omp);
    free(ref), free(got);
}

/* The size queries answer for the context's thread count: one row of attention scores per thread, and the GEMM's
 * packing buffers per thread, which the LM head takes beside its chunk's row losses (here the larger). */
static void test_scratch_per_thread_count(void) {
    const tt_scratch_shape shape = {
        .tokens = 512,
        .attention = {.batch = 1, .seq_len = 512, .num_heads = 1, .num_kv_heads = 1, .head_dim = 2, .scale = 0.5},
        .hidden = 2,
        .intermediate = 2,
        .loss_chunk = 1,
        .gradient_numel = 1,
        .vocab = 2};
    tt_backend *one = tt_backend_cpu_create(1), *three = tt_backend_cpu_create(3);
    const size_t bytes_one = tt_backend_scratch_bytes(one, &fp32, &shape);
    const size_t bytes_three = tt_backend_scratch_bytes(three, &fp32, &shape);
    const size_t row_losses = 64; /* one double, aligned */
    TT_EXPECT(bytes_one == row_losses + tt_cpu_gemm_scratch_bytes(1) &&
                  bytes_three == row_losses + tt_cpu_gemm_scratch_bytes(3) &&
                  tt_cpu_gemm_scratch_bytes(1) > 3 * 512 * sizeof(float),
              "scratch for 1 and 3 threads: %zu and %zu bytes", bytes_one, bytes_three);
    TT_EXPECT(tt_backend_scratch_bytes(one, &fp32, &shape) == bytes_one, "a size query repeats");
    tt_backend_destroy(one);
    tt_backend_destroy(three);
}

static void test_determinism(void) {
    tt_backend *be = tt_backend_cpu_create(0);
    TT_EXPECT(strcmp(be->name, "cpu") == 0 && be->compute_tier == TT_TIER_HOST, "cpu backend identity");
    const tt_backend_iface *i = be->iface;
    TT_EXPECT(i->destroy && i->block_alloc && i->block_free && i->copy && i->zero && i->synchronize &&
                  i->scratch_bytes && i->attention_workspace_bytes && i->prepare && i->release &&
                  i->embedding_forward && i->embedding_backward && i->rmsnorm_forward && i->rmsnorm_backward &&
                  i->linear_forward && i->linear_backward && i->rope_forward && i->rope_backward &&
                  i->attention_forward && i->attention_backward && i->glu_forward && i->glu_backward && i->add &&
                  i->lm_head_loss && i->sum_squares && i->adamw_update,
              "cpu backend table is complete");
    float *blk = tt_backend_block_alloc(be, 1000);
    tt_backend_zero(be, blk, 1000);
    float src[4] = {1, 2, 3, 4};
    tt_backend_copy(be, blk + 10, src, sizeof src);
    tt_backend_synchronize(be);
    TT_EXPECT(blk[0] == 0 && blk[249] == 0 && blk[12] == 3, "cpu backend memory functions");
    tt_backend_block_free(be, blk);
    tt_backend_destroy(be);

    test_scratch_per_thread_count();
    check_threads("embedding", det_embedding, DET_EMB_N * DET_EMB_D + DET_EMB_V * DET_EMB_D);
    check_threads("rmsnorm", det_rmsnorm, 3 * DET_RMS_R * DET_RMS_C + DET_RMS_R + DET_RMS_C);
    check_threads("linear", det_linear,
                  2 * DET_LIN_N * DET_LIN_OUT + DET_LIN_N * DET_LIN_IN + DET_LIN_OUT * DET_LIN_IN + DET_LIN_OUT);
    check_threads("rope", det_rope, 2 * DET_ROPE_B * DET_ROPE_T * DET_ROPE_H * DET_ROPE_HD);
    check_threads("attention", det_attention, DET_ATT_RES);
    check_threads("attention (sliding window)", det_attention_sliding, DET_ATT_RES);
    check_threads("glu and add", det_glu_add, 7 * DET_ELEM_N);
    check_threads("lm_head_loss", det_lm_head, DET_LM_RES);
    check_threads("sum_squares and adamw", det_optimizer, 2 + 3 * DET_OPT_N);
}

int main(int argc, char **argv) {
    (void)argc, (void)argv;
    tt_rng_seed(&g_rng, 20240607);

    test_embedding(1.0);
    test_embedding(2.5);
    test_rmsnorm(6, 8, 0.0);
    test_rmsnorm(24, 4, 0.0); /* the per-head q/k norm shape: R = N * H rows of head_dim */
    test_rmsnorm(6, 8, 1.0);  /* Gemma's (1 + w) */
    test_column_sums();
    test_linear(true);
    test_linear(false);
    test_rope(6, 6);
    test_rope(8, 6); /* partial rotary (Phi-4-mini's 0.75) */
    test_attention(0, 0.0);
    test_attention(3, 0.0);
    test_attention(1, 0.0);
    test_attention(0, 1.5); /* Gemma 2's soft-capping */
    test_attention(3, 1.5);
    test_glu(TT_GLU_SILU);
    test_glu(TT_GLU_GELU_TANH);
    test_add();
    test_dropout_mask();
    test_lora_adapter(0.0);
    test_lora_adapter(0.3);
    test_lm_head(1.0, 0.0);
    test_lm_head(0.4, 0.0); /* Granite's 1 / logits_scaling */
    test_lm_head(1.0, 2.0); /* Gemma 2's final soft-capping */
    test_lm_head(0.7, 1.5);
    test_sum_squares();
    test_sum_squares_in_reserved_scratch();
    test_adamw_case(1, true);
    test_adamw_case(3, false);
    test_determinism();

    return tt_test_summary("gradcheck");
}
