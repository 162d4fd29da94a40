/* The backend table: every op the step program runs, as function pointers (ggml's
 * backend style). The step program calls through it and never knows which backend
 * runs. Activation and parameter pointers are in the backend's compute precision
 * (fp32 on the CPU backend). Shapes are row-major; N = micro_batch * seq_len tokens.
 *
 * Accumulation is explicit: an argument documented "+=" is added into, everything else
 * is overwritten. Every op is deterministic: the same inputs give the same bits,
 * whatever the thread count. */
#ifndef TT_OPS_BACKEND_H
#define TT_OPS_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/dtype.h"
#include "core/tier.h"

/* Marks and copies the timeline remembers (see timestamp below). */
#define TT_TIMELINE_WINDOW 4096

/* Token positions at which the loss is not taken. */
#define TT_IGNORE_INDEX (-100)

typedef struct tt_attention_shape {
    int64_t batch;        /* B sequences */
    int64_t seq_len;      /* T tokens each; causal within a sequence */
    int64_t num_heads;    /* Hq */
    int64_t num_kv_heads; /* Hkv; query head h reads kv head h / (Hq / Hkv) */
    int64_t head_dim;     /* hd */
    double scale;         /* softmax scale, 1/sqrt(hd) */
    int64_t sliding_window; /* 0: none; else key j visible to query i iff i - j < window */
    /* Packed documents (sample_packing): a sequence holds several documents, each a run of tokens
     * whose positions count 0, 1, 2, ... (a sequence starts one). positions[B*T] int32 on the
     * compute tier: each token's position in its document, so query i's document starts at token
     * i - positions[i] of its sequence, and key j is visible to query i iff
     * i - positions[i] <= j <= i (and the window allows it). documents says positions will be given
     * (the size queries see documents true and positions NULL); both unset: a sequence is one
     * document. */
    bool documents;
    const int32_t *positions;
} tt_attention_shape;

/* The largest shapes a plan runs, from which a backend sizes the scratch its ops need. */
typedef struct tt_scratch_shape {
    int64_t tokens;          /* N = B * T */
    tt_attention_shape attention;
    int64_t hidden;          /* D */
    int64_t intermediate;    /* F */
    int64_t loss_chunk;      /* rows per LM-head chunk */
    int64_t gradient_numel;  /* the flat gradient buffer, whose norm sum_squares takes whole */
    int64_t vocab;           /* V: token ids are below it */
} tt_scratch_shape;

/* The number formats of one run. The CPU backend computes everything in fp32; the CUDA backend
 * computes in bf16 and keeps either fp32 gradients, an fp32 master copy and fp32 AdamW moments
 * (mixed precision, the default) or bf16 for all of them with no master copy (the recipe of a
 * bf16 model trained in PyTorch). */
typedef struct tt_precision {
    tt_dtype activation; /* activations and the compute copy of the weights */
    tt_dtype gradient;   /* parameter gradients (norm, bias, embedding and GEMM weight gradients) */
    tt_dtype moment;     /* AdamW first and second moments */
    bool master;         /* an fp32 master copy of the weights is what AdamW updates */
} tt_precision;

/* Which fused attention a backend runs (attn_implementation). */
typedef enum tt_attention_kind {
    TT_ATTENTION_AUTO,   /* the fastest the backend has for the shape */
    TT_ATTENTION_CUDNN,  /* cuDNN's fused flash attention (GPU) */
    TT_ATTENTION_FLASH,  /* tiertrain's own tensor-core flash attention (GPU) */
    TT_ATTENTION_SIMPLE, /* the reference kernels: one row at a time, no tensor cores */
} tt_attention_kind;

typedef struct tt_backend {
    const char *name;
    tt_tier compute_tier; /* where the backend's ops read and write */

    /* Memory of the compute tier: blocks for arenas, and plain copies. */
    void *(*block_alloc)(size_t bytes);
    void (*block_free)(void *base);
    void (*copy)(void *dst, const void *src, size_t bytes);
    /* Host memory the copy engine reaches fastest (page-locked on the GPU; plain on the CPU), in
     * one block per arena, allocated at start. */
    void *(*pinned_alloc)(size_t bytes);
    void (*pinned_free)(void *base);
    void (*zero)(void *dst, size_t bytes);
    void (*synchronize)(void);
    /* Bytes of the compute tier this process holds outside the arenas (library handles and their
     * workspaces; the CUDA context excluded), for the end-of-run report. */
    size_t (*bytes_outside_arenas)(void);
    /* Copies between host memory (any kind) and the compute tier; they complete before returning. */
    void (*upload)(void *dst, const void *host_src, size_t bytes);
    void (*download)(void *host_dst, const void *src, size_t bytes);
    /* The copy engine's primitives: copies between host memory and the compute tier on side
     * streams (one per direction), ordered by events rather than by blocking the host.
     * copy_async starts the copy after every op issued before it and after the copy `after`
     * (0: none; a copy back after the copy out it reads), and returns its ticket (increasing
     * from 1). copy_wait makes every op issued after it wait for the copy (the host does not
     * block); copy_host_wait blocks the calling thread (any thread) until the copy is done;
     * copy_done tells, without blocking, whether it is (any thread). The CPU backend copies at
     * once and its waits return at once. */
    uint64_t (*copy_async)(void *dst, const void *src, size_t bytes, bool to_host, uint64_t after);
    void (*copy_wait)(uint64_t ticket);
    void (*copy_host_wait)(uint64_t ticket);
    bool (*copy_done)(uint64_t ticket);
    /* Race stress (debug_copy_delay_us): each copy first idles its stream for a random 0..max_us
     * microseconds, so that a missing event shows up as wrong bits; 0 turns it off. */
    void (*copy_set_delay)(unsigned max_us);
    /* Copies so far: bytes each way, seconds the copy streams were busy, and seconds the compute
     * stream stood waiting for copies (the part of the copy time not hidden behind compute).
     * Call after synchronize. */
    void (*copy_stats)(size_t *to_host, size_t *to_device, double *copy_seconds, double *exposed_seconds);

    /* The timeline, for the trace: timestamp() marks the point the compute stream has reached
     * (an event on the GPU; the host clock, at once, on the CPU) and returns its id;
     * timestamp_seconds(id) is that point in CLOCK_MONOTONIC seconds, and copy_span(ticket, ...)
     * a copy's start and end on its stream. Both are read after synchronize, for recent marks and
     * copies only (the last TT_TIMELINE_WINDOW of each); older ones give NaN / false. */
    uint64_t (*timestamp)(void);
    double (*timestamp_seconds)(uint64_t id);
    bool (*copy_span)(uint64_t ticket, double *start, double *end);

    /* The run's number formats and attention kernels, and the bytes the attention backward may
     * keep for its calls at once (attn_workspace_limit: cuDNN's deterministic backward holds dP there); set
     * before scratch_bytes and the first op (the CPU backend accepts fp32 and its one attention
     * only). */
    void (*configure)(const tt_precision *precision, tt_attention_kind attention, size_t attention_workspace_limit);

    /* Scratch that ops use inside one call (partial sums, a row of attention scores per
     * thread). The size table reserves scratch_bytes(shape) in the compute tier's arena (class
     * workspace) and the step program hands it over with set_scratch, so no op allocates
     * during a step. */
    size_t (*scratch_bytes)(const tt_scratch_shape *shape);
    void (*set_scratch)(void *base, size_t bytes);
    /* The attention backward's own workspace (cuDNN's dP, the flash kernels' partial sums), which
     * the step pushes for the attention half of each layer's backward only (after the MLP's
     * tensors are gone) and hands to attention_backward; 0: none. After configure. */
    size_t (*attention_workspace_bytes)(const tt_attention_shape *shape);

    /* out[N,D] = table[ids[n], :] */
    void (*embedding_forward)(void *out, const int32_t *ids, const void *table, int64_t N, int64_t D);
    /* dtable[V,D] += for each n in order: dtable[ids[n]] += dout[n] (ids in the compute tier) */
    void (*embedding_backward)(void *dtable, const int32_t *ids, const void *dout, int64_t N, int64_t D);

    /* out[R,C] = x / sqrt(mean(x^2) + eps) * w[C]; rstd[R] = 1 / sqrt(mean(x^2) + eps) */
    void (*rmsnorm_forward)(void *out, float *rstd, const void *x, const void *w, int64_t R, int64_t C, double eps);
    /* dx[R,C] += d/dx; dw[C] += d/dw (rows summed in order) */
    void (*rmsnorm_backward)(void *dx, void *dw, const void *dout, const void *x, const void *w,
                             const float *rstd, int64_t R, int64_t C);

    /* y[N,out] = x[N,in] @ W[out,in]^T (+ b[out] when b != NULL) (+ residual[N,out] when
     * residual != NULL: the residual stream's add, fused into the GEMM's epilogue on the GPU).
     * residual may be y itself: y += x W^T (a LoRA adapter's up projection). */
    void (*linear_forward)(void *y, const void *x, const void *W, const void *b, const void *residual, int64_t N,
                           int64_t in, int64_t out);
    /* dx[N,in] (= or += when accumulate_dx) dy @ W; dW[out,in] += dy^T @ x; db[out] += sum_n dy.
     * Any of dx, dW, db may be NULL (not wanted; x is not read without dW or db). dW and db are
     * computed first, so dx may be x itself when not accumulating. */
    void (*linear_backward)(void *dx, void *dW, void *db, const void *dy, const void *x, const void *W,
                            int64_t N, int64_t in, int64_t out, bool accumulate_dx);

    /* Rotary embedding in Hugging Face's rotate-half layout, in place on x[B*T, H, hd]:
     * x[i] = x[i] cos - x[i+hd/2] sin, x[i+hd/2] = x[i+hd/2] cos + x[i] sin for i < hd/2,
     * with cos/sin[T, hd/2] at the token's position in its sequence. backward rotates
     * the gradient by the negative angle (in place on dx). */
    void (*rope_forward)(void *x, const float *cos, const float *sin, int64_t B, int64_t T, int64_t H,
                         int64_t hd);
    void (*rope_backward)(void *dx, const float *cos, const float *sin, int64_t B, int64_t T, int64_t H,
                          int64_t hd);

    /* Causal grouped-query attention with O(T) saved state:
     * out[B*T, Hq*hd]; lse[B, Hq, T] = log-sum-exp of each query's scaled scores. */
    void (*attention_forward)(void *out, float *lse, const void *q, const void *k, const void *v,
                              const tt_attention_shape *shape);
    /* dq[B*T,Hq*hd], dk[B*T,Hkv*hd], dv[B*T,Hkv*hd] (all overwritten), from the saved
     * out, lse and inputs; probabilities are recomputed from lse. workspace: the
     * attention_workspace_bytes(shape) bytes (NULL when that is 0). spare: spare_bytes of compute-tier
     * memory whose contents are dead during the call (NULL, 0: none), which it may use as more
     * workspace to run faster, never with other bits. */
    void (*attention_backward)(void *dq, void *dk, void *dv, const void *dout, const void *out,
                               const float *lse, const void *q, const void *k, const void *v,
                               const tt_attention_shape *shape, void *workspace, void *spare, size_t spare_bytes);

    /* h[N,F] = silu(gate) * up */
    void (*swiglu_forward)(void *h, const void *gate, const void *up, int64_t n);
    /* dgate, dup (overwritten) from dh, gate, up; elementwise, so dgate may be gate and dup up */
    void (*swiglu_backward)(void *dgate, void *dup, const void *dh, const void *gate, const void *up,
                            int64_t n);

    /* out[n] = a[n] + b[n] */
    void (*add)(void *out, const void *a, const void *b, int64_t n);

    /* out[n] = x[n] * multiplier where the dropout mask keeps element n, else 0. The mask keeps n
     * iff tt_dropout_bits(seed, n) >= drop_threshold (src/ops/dropout_mask.h): a function of
     * (seed, n) alone, so the backward and a recompute get the forward's mask. drop_threshold 0
     * keeps every element (a plain scale). out may be x. */
    void (*dropout_scale)(void *out, const void *x, int64_t n, float multiplier, uint32_t drop_threshold,
                          uint64_t seed);

    /* Fused LM head and cross-entropy over chunks of `chunk` tokens; logits[chunk, V] is the
     * caller's workspace, the full [N, V] logits never exist.
     * For each n with targets[n] != TT_IGNORE_INDEX: loss_n = logsumexp(xn[n] W^T) - (xn[n] W^T)[t].
     * Returns the sum of loss_n (double) and the count through *count.
     * When dxn != NULL: dxn[N,D] = d(scale * sum loss_n)/dxn (overwritten),
     * dW[V,D] += d(scale * sum loss_n)/dW unless dW is NULL (a frozen LM head). */
    double (*lm_head_loss)(void *dxn, void *dW, const void *xn, const void *W, const int32_t *targets,
                           int64_t N, int64_t D, int64_t V, int64_t chunk, void *logits, double scale,
                           int64_t *count);

    /* *out (one double in the compute tier) = the sum of squares of n gradient values, in a fixed
     * order; ordered like any op, the host does not wait. */
    void (*sum_squares)(double *out, const void *x, int64_t n);
    /* AdamW as torch.optim.AdamW, over the whole flat parameter buffer in one call (multi-tensor):
     * p *= 1 - lr*wd; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
     * p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps). Segment s, elements
     * [segment_start[s], segment_start[s+1]) (host arrays), decays when segment_decays[s]. The
     * gradient is first multiplied by grad_scale (clipping). With a master copy, p is master
     * (fp32) and the result is also rounded into weights; without, p is weights itself. g, m, v
     * in the precision's formats. Elementwise: the result does not depend on the segmentation. */
    void (*adamw_update)(void *weights, float *master, const void *g, void *m, void *v,
                         const int64_t *segment_start, const unsigned char *segment_decays, int segments, float lr,
                         float beta1, float beta2, float eps, float weight_decay, int64_t step, float grad_scale);
} tt_backend;

const tt_backend *tt_backend_cpu(void);

/* The measuring backend of `real` (its compute tier and size queries; every op and copy a no-op), for
 * the step program's dry run on measuring arenas (train/measure.h). */
void tt_backend_measure_init(tt_backend *out, const tt_backend *real);

#endif
