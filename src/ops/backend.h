/* The backend: every op the step program runs, behind a table of function pointers and one
 * context (ggml-backend's {iface, context}). A backend is created per device (the CPU with a
 * thread count, one CUDA GPU by index) and owns all its state in its context: streams, library
 * handles, plan caches, the copy engine, profiling counters, the op scratch it was handed.
 * Nothing of it lives in file statics, so two backends of one kind, on one device or two, exist
 * side by side in a process and give the same bits as either alone.
 *
 * Its life: create; any number of pure size queries (scratch_bytes, attention_workspace_bytes:
 * they never change what the ops do); prepare(settings, largest shapes, scratch) before the
 * first op of a run, which builds every plan the ops need; the ops; release; destroy.
 *
 * The step program calls the ops through the tt_backend_<entry>(backend, ...) wrappers below
 * and never knows which backend runs. Activation and parameter pointers are in the backend's
 * compute precision (fp32 on the CPU backend). Shapes are row-major; N = micro_batch * seq_len
 * tokens.
 *
 * Accumulation is explicit: an argument documented "+=" is added into, everything else
 * is overwritten. Every op is deterministic: the same inputs give the same bits,
 * whatever the thread count. */
#ifndef TT_OPS_BACKEND_H
#define TT_OPS_BACKEND_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/dtype.h"
#include "core/check.h"
#include "core/tier.h"
#include "ops/adamw_8bit.h"
#include "ops/quant4.h"

/* A mixture of experts' sizes (moe_forward). */
typedef struct tt_moe_shape {
    int64_t tokens, hidden; /* N, D */
    int64_t experts, top_k; /* E, k */
    int64_t intermediate;   /* Fm, an expert's */
    bool normalize;         /* the k routing weights divided by their sum (norm_topk_prob) */
    int activation;         /* tt_glu_activation of the experts' GLU */
} tt_moe_shape;

/* What moe_forward keeps for moe_backward (the layer's saved slots, saved_slots.h). */
typedef struct tt_moe_saved {
    float *probs;          /* [N, E] the router's softmax */
    int32_t *index;        /* [N, k] each token's experts, best first */
    float *weight;         /* [N, k] their routing weights */
    void *gate, *up, *glu; /* [N*k, Fm] of the routed rows, grouped by expert (in expert order, by token in one) */
    void *out;             /* [N*k, D] each routed row's expert output, before its weight */
    /* the auxiliary loss's statistics, host memory: moe_forward adds each token's choices (expert_tokens[j * E + e]:
     * tokens whose j-th choice is e) and probabilities (expert_probs[e]) to them; NULL: not kept */
    double *expert_tokens, *expert_probs;
    /* its gradient, host memory: d loss / d probs[t, e] = prob_gradient[e] for every token, which moe_backward adds
     * to the routing weights'; NULL: none */
    const float *prob_gradient;
} tt_moe_saved;

/* Marks and copies the timeline remembers (see timestamp below). */
#define TT_TIMELINE_WINDOW 4096

/* Token positions at which the loss is not taken. */
#define TT_IGNORE_INDEX (-100)

typedef struct tt_attention_shape {
    int64_t batch;          /* B sequences */
    int64_t seq_len;        /* T tokens each; causal within a sequence */
    int64_t num_heads;      /* Hq */
    int64_t num_kv_heads;   /* Hkv; query head h reads kv head h / (Hq / Hkv) */
    int64_t head_dim;       /* hd */
    double scale;           /* softmax scale, 1/sqrt(hd) */
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
    /* Gemma 2's soft-capping of the scaled scores before the mask and softmax: s = softcap * tanh(s / softcap);
     * 0: none */
    double softcap;
} tt_attention_shape;

/* The gated activation of an MLP, h = act(gate) * up. */
typedef enum tt_glu_activation {
    TT_GLU_SILU,      /* SwiGLU (Llama, Qwen, Mistral, Phi-3, ...): silu(g) = g / (1 + exp(-g)) */
    TT_GLU_GELU_TANH, /* GeGLU (Gemma): torch's gelu(g, approximate="tanh") = 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715
                         g^3))) */
} tt_glu_activation;

/* The largest shapes a plan runs, from which a backend sizes the scratch its ops need. */
typedef struct tt_scratch_shape {
    int64_t tokens; /* N = B * T */
    tt_attention_shape attention;
    /* a model whose layers attend two ways (Gemma's sliding and full layers): the sliding layers' shape too, prepared
     * beside `attention` (the full layers'); has_sliding false: every layer attends as `attention` says */
    bool has_sliding;
    tt_attention_shape sliding_attention;
    int64_t hidden;         /* D */
    int64_t intermediate;   /* F */
    int64_t loss_chunk;     /* rows per LM-head chunk */
    int64_t gradient_numel; /* the flat gradient buffer, whose norm sum_squares takes whole */
    int64_t vocab;          /* V: token ids are below it */
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

/* What a run computes with, given to the size queries and to prepare: the number formats, the
 * attention kernels, and the bytes the attention backward may keep for its calls at once
 * (attn_workspace_limit: cuDNN's deterministic backward holds dP there). The plan's
 * (tt_plan_backend_settings). */
typedef struct tt_backend_settings {
    tt_precision precision;
    tt_attention_kind attention;
    size_t attention_workspace_limit;
    /* deterministic: false: ops may add with atomics (the attention backward's dQ); by default every op's
     * sums run in a fixed order, so that a run repeats its bits */
    bool nondeterministic;
} tt_backend_settings;

/* The entries of a backend. Every one takes the backend's context first. */
typedef struct tt_backend_iface {
    /* Frees the context and everything it holds (streams, handles, caches); after release. */
    void (*destroy)(void *ctx);

    /* Memory of the compute tier: blocks for arenas, and plain copies. */
    void *(*block_alloc)(void *ctx, size_t bytes);
    void (*block_free)(void *ctx, void *base);
    void (*copy)(void *ctx, void *dst, const void *src, size_t bytes);
    /* rows rows of width bytes each, src's rows src_pitch bytes apart into dst's dst_pitch apart (sequence
     * parallel's head blocks) */
    void (*copy_2d)(void *ctx, void *dst, size_t dst_pitch, const void *src, size_t src_pitch, size_t width,
                    size_t rows);
    /* Host memory the copy engine reaches fastest (page-locked on the GPU; plain on the CPU), in
     * one block per arena, allocated at start. */
    void *(*pinned_alloc)(void *ctx, size_t bytes);
    void (*pinned_free)(void *ctx, void *base);
    void (*zero)(void *ctx, void *dst, size_t bytes);
    void (*synchronize)(void *ctx);
    /* Bytes of the compute tier this process holds outside the arenas (library handles and their
     * workspaces; the CUDA context excluded), for the end-of-run report. */
    size_t (*bytes_outside_arenas)(void *ctx);
    /* Copies between host memory (any kind) and the compute tier, on the queue the ops issue to (inside a side
     * section, the side queue); they complete before returning, after that queue's earlier ops (not the other's). */
    void (*upload)(void *ctx, void *dst, const void *host_src, size_t bytes);
    void (*download)(void *ctx, void *host_dst, const void *src, size_t bytes);
    /* The copy engine's primitives: copies between host memory and the compute tier on side
     * streams (one per direction), ordered by events rather than by blocking the host.
     * copy_async starts the copy after every op issued before it and after the copy `after`
     * (0: none; a copy back after the copy out it reads), and returns its ticket (increasing
     * from 1). copy_wait makes every op issued after it wait for the copy (the host does not
     * block); copy_host_wait blocks the calling thread (any thread) until the copy is done;
     * copy_done tells, without blocking, whether it is (any thread). The CPU backend copies at
     * once and its waits return at once. */
    uint64_t (*copy_async)(void *ctx, void *dst, const void *src, size_t bytes, bool to_host, uint64_t after);
    void (*copy_wait)(void *ctx, uint64_t ticket);
    void (*copy_host_wait)(void *ctx, uint64_t ticket);
    bool (*copy_done)(void *ctx, uint64_t ticket);
    /* Race stress (debug_copy_delay_us): each copy, and each section of the side queue, first idles its
     * stream for a random 0..max_us microseconds, so that a missing event shows up as wrong bits; 0 turns
     * it off. */
    void (*copy_set_delay)(void *ctx, unsigned max_us);
    /* Copies so far: bytes each way, seconds the copy streams were busy, and seconds the compute
     * stream stood waiting for copies (the part of the copy time not hidden behind compute).
     * Call after synchronize. */
    void (*copy_stats)(void *ctx, size_t *to_host, size_t *to_device, double *copy_seconds, double *exposed_seconds);

    /* The side queue: the ranks' collectives and the copies and sums around them, beside the compute stream (a
     * second stream on the GPU, so that a layer's gradients travel while the next layer's backward runs; on the CPU
     * every op is done when it returns and these only count tickets). The ops issued between side_begin and side_end
     * go to the side queue, after every op issued to the compute stream before side_begin (the host does not block,
     * except in an upload or download, which waits for its copy):
     * only copy, copy_2d, zero, upload, download and sum_parts, and the transport's own collectives on side_stream.
     * side_end returns the ticket of what was issued (increasing from 1); side_wait(ticket) makes the compute
     * stream's later ops wait for it (the host does not block; 0: nothing). synchronize waits for both queues.
     * side_stream is the native handle the transport issues on (a cudaStream_t; NULL on the CPU); side_active
     * tells whether the ops issue to the side queue now (what the collectives check). */
    void (*side_begin)(void *ctx);
    uint64_t (*side_end)(void *ctx);
    void (*side_wait)(void *ctx, uint64_t ticket);
    void *(*side_stream)(void *ctx);
    bool (*side_active)(void *ctx);

    /* The timeline, for the trace: timestamp() marks the point the compute stream has reached
     * (an event on the GPU; the host clock, at once, on the CPU) and returns its id;
     * timestamp_seconds(id) is that point in CLOCK_MONOTONIC seconds, and copy_span(ticket, ...)
     * a copy's start and end on its stream. Both are read after synchronize, for recent marks and
     * copies only (the last TT_TIMELINE_WINDOW of each); older ones give NaN / false. */
    uint64_t (*timestamp)(void *ctx);
    double (*timestamp_seconds)(void *ctx, uint64_t id);
    bool (*copy_span)(void *ctx, uint64_t ticket, double *start, double *end);

    /* Size queries. Pure: they answer for the settings and shape given, whatever the backend was
     * prepared for, and change nothing a later op sees (no plan of the run rebuilt, no state
     * reconfigured); asking twice gives the same answer. A backend that must build something to
     * answer (cuDNN's graphs) builds it in a cache of its context that only queries read, so that
     * pricing a hypothetical plan (the size table's dry run, the planners, `tiertrain plan`) never
     * touches the run the backend is prepared for. Both stop the run for settings the backend
     * cannot run at all (the CUDA backend naming attn_implementation).
     * scratch_bytes: the scratch ops use inside one call (partial sums, a row of attention scores
     * per thread). The size table reserves it in the compute tier's arena (class workspace) and
     * prepare hands it over, so that no op allocates during a step.
     * attention_workspace_bytes: the attention backward's own workspace (cuDNN's dP, the flash
     * kernels' partial sums), which the step pushes for the attention half of each layer's
     * backward only (after the MLP's tensors are gone) and hands to attention_backward; 0: none. */
    size_t (*scratch_bytes)(void *ctx, const tt_backend_settings *settings, const tt_scratch_shape *shape);
    size_t (*attention_workspace_bytes)(void *ctx, const tt_backend_settings *settings,
                                        const tt_attention_shape *shape);

    /* The explicit prepare step, before the first op of a run: fixes the run's settings (the
     * CPU backend accepts fp32 and its one attention only) and the largest shapes its ops see,
     * builds what the ops need for them (the attention kernels chosen and cuDNN's plans built,
     * host buffers of the ops that work on the host) and takes `scratch`, scratch_bytes(settings,
     * shape) bytes of compute-tier memory (a slice of the arena). Nothing is built lazily in the
     * middle of a step, with one exception: the CUDA backend picks a cuBLASLt algorithm per GEMM
     * shape at the first call of that shape (the shapes are only known by running the step; the
     * choice is a function of the shape, so the bits do not depend on when it is made). Preparing
     * again replaces the previous run's preparation; release ends it (the CUDA op profile, when on,
     * is printed then) and gives the scratch back to the caller. One run is prepared at a time. */
    void (*prepare)(void *ctx, const tt_backend_settings *settings, const tt_scratch_shape *shape, void *scratch,
                    size_t scratch_bytes);
    void (*release)(void *ctx);

    /* out[N,D] = table[ids[n], :] * scale (the multiply only where scale != 1: Gemma's sqrt(hidden), Granite's
     * embedding_multiplier; one rounding of the product) */
    void (*embedding_forward)(void *ctx, void *out, const int32_t *ids, const void *table, int64_t N, int64_t D,
                              float scale);
    /* dtable[V,D] += for each n in order: dtable[ids[n]] += dout[n] * scale (ids in the compute tier) */
    void (*embedding_backward)(void *ctx, void *dtable, const int32_t *ids, const void *dout, int64_t N, int64_t D,
                               float scale);

    /* out[R,C] = (residual[R,C] +) (x * rstd) * (w[C] + weight_offset); rstd[R] = 1 / sqrt(mean(x^2) + eps).
     * weight_offset 1 is Gemma's norm (1 + w), 0 everyone else's; residual (NULL: none) is the residual stream a
     * norm after a sublayer adds into (the norm's output rounded to the compute precision first, as a separate add
     * would). out NULL: rstd alone (a recompute that needs the statistics of a norm whose output it keeps). */
    void (*rmsnorm_forward)(void *ctx, void *out, float *rstd, const void *x, const void *w, const void *residual,
                            int64_t R, int64_t C, double eps, float weight_offset);
    /* dx[R,C] += d/dx; dw[C] += d/dw (rows summed in order; the CPU adds row after row onto dw's value) */
    void (*rmsnorm_backward)(void *ctx, void *dx, void *dw, const void *dout, const void *x, const void *w,
                             const float *rstd, int64_t R, int64_t C, float weight_offset);

    /* y[N,out] = x[N,in] @ W[out,in]^T (+ b[out] when b != NULL) (+ residual[N,out] when
     * residual != NULL: the residual stream's add, fused into the GEMM's epilogue on the GPU).
     * residual may be y itself: y += x W^T (a LoRA adapter's up projection). */
    void (*linear_forward)(void *ctx, void *y, const void *x, const void *W, const void *b, const void *residual,
                           int64_t N, int64_t in, int64_t out);
    /* dx[N,in] (= or += when accumulate_dx) dy @ W; dW[out,in] += dy^T @ x; db[out] += sum_n dy (the CPU
     * adds token after token onto dW's and db's values, so N cut into consecutive calls gives the bits of one).
     * Any of dx, dW, db may be NULL (not wanted; x is not read without dW or db). dW and db are
     * computed first, so dx may be x itself when not accumulating. */
    void (*linear_backward)(void *ctx, void *dx, void *dW, void *db, const void *dy, const void *x, const void *W,
                            int64_t N, int64_t in, int64_t out, bool accumulate_dx);

    /* Rotary embedding in Hugging Face's rotate-half layout, in place on x[B*T, H, hd], over the first rd
     * (rotary_dim, even, <= hd) dimensions of each head (partial rotary; the others pass through):
     * x[i] = x[i] cos - x[i+rd/2] sin, x[i+rd/2] = x[i+rd/2] cos + x[i] sin for i < rd/2,
     * with cos/sin[T, rd/2] at the token's position in its sequence. backward rotates
     * the gradient by the negative angle (in place on dx). */
    void (*rope_forward)(void *ctx, void *x, const float *cos, const float *sin, int64_t B, int64_t T, int64_t H,
                         int64_t hd, int64_t rotary_dim);
    void (*rope_backward)(void *ctx, void *dx, const float *cos, const float *sin, int64_t B, int64_t T, int64_t H,
                          int64_t hd, int64_t rotary_dim);

    /* Causal grouped-query attention with O(T) saved state:
     * out[B*T, Hq*hd]; lse[B, Hq, T] = log-sum-exp of each query's scaled scores. */
    void (*attention_forward)(void *ctx, void *out, float *lse, const void *q, const void *k, const void *v,
                              const tt_attention_shape *shape);
    /* dq[B*T,Hq*hd], dk[B*T,Hkv*hd], dv[B*T,Hkv*hd] (all overwritten), from the saved
     * out, lse and inputs; probabilities are recomputed from lse. workspace: the
     * attention_workspace_bytes(settings, shape) bytes for the prepared settings (NULL when that is
     * 0). spare: spare_bytes of compute-tier memory whose contents are dead during the call (NULL,
     * 0: none), which it may use as more workspace to run faster, never with other bits. */
    void (*attention_backward)(void *ctx, void *dq, void *dk, void *dv, const void *dout, const void *out,
                               const float *lse, const void *q, const void *k, const void *v,
                               const tt_attention_shape *shape, void *workspace, void *spare, size_t spare_bytes);

    /* Generation with a KV cache: out[n, Hq*hd] of n new queries of one sequence, q[n, Hq*hd] at positions start ..
     * start + n - 1, over k_cache, v_cache [start + n, Hkv*hd] (every position so far, the n new ones included). Query
     * i sees key j iff j <= start + i and (sliding_window == 0 or start + i - j < sliding_window); scores scaled and
     * soft-capped as attention_forward's. shape gives the heads, head_dim, scale, window and softcap (batch, seq_len
     * and documents are not read). The CPU takes its scores row from the scratch: start + n <= the prepared
     * attention's seq_len. */
    void (*attention_cached)(void *ctx, void *out, const void *q, const void *k_cache, const void *v_cache,
                             int64_t start, int64_t n, const tt_attention_shape *shape);

    /* h[N,F] = act(gate) * up */
    void (*glu_forward)(void *ctx, void *h, const void *gate, const void *up, int64_t n, tt_glu_activation act);
    /* dgate, dup (overwritten) from dh, gate, up; elementwise, so dgate may be gate and dup up */
    void (*glu_backward)(void *ctx, void *dgate, void *dup, const void *dh, const void *gate, const void *up, int64_t n,
                         tt_glu_activation act);

    /* out[numel] (compute precision) = a 4-bit frozen weight (QLoRA; the layout and the rule: ops/quant4.h)
     * dequantized, block by block: the fp32 product code value x absmax, rounded to the compute precision. */
    void (*dequantize_4bit)(void *ctx, void *out, const void *quantized, int64_t numel, const tt_quant4_format *format);

    /* out[n] = a[n] + b[n] */
    void (*add)(void *ctx, void *out, const void *a, const void *b, int64_t n);

    /* out[n] = x[n] * multiplier where the dropout mask keeps element n, else 0. The mask keeps n
     * iff tt_dropout_bits(seed, n) >= drop_threshold (src/ops/dropout_mask.h): a function of
     * (seed, n) alone, so the backward and a recompute get the forward's mask. drop_threshold 0
     * keeps every element (a plain scale). out may be x. */
    void (*dropout_scale)(void *ctx, void *out, const void *x, int64_t n, float multiplier, uint32_t drop_threshold,
                          uint64_t seed);

    /* x[n] += tt_uniform_noise(seed, i, magnitude) (dropout_mask.h), rounded to the compute precision once: NEFTune's
     * noise on the embedding output in training (neftune_noise_alpha), a function of (seed, i) alone. */
    void (*add_uniform_noise)(void *ctx, void *x, int64_t n, float magnitude, uint64_t seed);

    /* Fused LM head and cross-entropy over chunks of `chunk` tokens; logits[chunk, V] is the
     * caller's workspace, the full [N, V] logits never exist. The logits are z = xn W^T * logit_scale (Granite's
     * 1 / logits_scaling; 1 elsewhere), soft-capped where softcap > 0 (Gemma 2: softcap * tanh(z / softcap)).
     * For each n with targets[n] != TT_IGNORE_INDEX: loss_n = logsumexp(z[n]) - z[n][t].
     * Returns loss_before + the sum of loss_n (double): the CPU adds each loss_n in token order onto
     * loss_before, so a sum continued over micro-batches has the bits of one batch of all their tokens
     * (the GPU adds its chunks' sums); and the count through *count.
     * When dxn != NULL: dxn[N,D] = d(scale * sum loss_n)/dxn (overwritten),
     * dW[V,D] += d(scale * sum loss_n)/dW unless dW is NULL (a frozen LM head). */
    double (*lm_head_loss)(void *ctx, void *dxn, void *dW, const void *xn, const void *W, const int32_t *targets,
                           int64_t N, int64_t D, int64_t V, int64_t chunk, void *logits, double logit_scale,
                           double softcap, double scale, double loss_before, int64_t *count);

    /* *out (one double in the compute tier) = the sum of squares of n gradient values, in a fixed
     * order; ordered like any op, the host does not wait. */
    void (*sum_squares)(void *ctx, double *out, const void *x, int64_t n);
    /* dst[i] = (((parts[0][i] + parts[1][i]) + parts[2][i]) + ...) for i < n, fp32, the parts count floats apart:
     * the data-parallel sum of every rank's copy, added in rank order (dst may be one of the parts). */
    void (*sum_parts)(void *ctx, float *dst, const float *parts, int count, int64_t n);
    /* AdamW as torch.optim.AdamW, over the whole flat parameter buffer in one call (multi-tensor):
     * p *= 1 - lr*wd; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
     * p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps). Segment s, elements
     * [segment_start[s], segment_start[s+1]) (host arrays), decays when segment_decays[s]. The
     * gradient is first multiplied by grad_scale (clipping). With a master copy, p is master
     * (fp32) and the result is also rounded into weights; without, p is weights itself. g, m, v
     * in the precision's formats. Elementwise: the result does not depend on the segmentation. */
    void (*adamw_update)(void *ctx, void *weights, float *master, const void *g, void *m, void *v,
                         const int64_t *segment_start, const unsigned char *segment_decays, int segments, float lr,
                         float beta1, float beta2, float eps, float weight_decay, int64_t step, float grad_scale);
    /* bitsandbytes' 8-bit AdamW (optimizer: adamw_bnb_8bit; ops/adamw_8bit.h says what it computes) over
     * tensors[count] (host array), whose elements are counted from weights and g; m and v each moment's state on
     * the compute tier. Without a master copy: weights in the compute precision are what it updates. NULL on a
     * backend that has no such kernel yet (the CUDA backend: the run is refused at config load). */
    void (*adamw_8bit_update)(void *ctx, void *weights, float *master, const void *g, const tt_adamw_8bit_moment *m,
                              const tt_adamw_8bit_moment *v, const tt_adamw_8bit_tensor *tensors, int count,
                              const tt_adamw_8bit_scalars *scalars);
    /* A mixture of experts (Qwen3-MoE's) over x[N, D] (the MLP's pre-norm output), transformers' arithmetic with its
     * sums in tiertrain's order (a token's choices in choice order, not expert by expert):
     * the router's logits x router^T [N, E], their softmax in fp32, each token's k most probable experts (the lower
     * index first on a tie) with their probabilities as weights (divided by their sum with normalize); then for each
     * routed row gate = x w_gate[e]^T, up = x w_up[e]^T, glu = act(gate) * up, out = glu w_down[e]^T; and
     * y[t] = residual[t] + (weight[t, 0] out(t, 0) + weight[t, 1] out(t, 1) + ...) in choice order (y NULL: the saved
     * tensors alone, a recompute). router [E, D], w_gate and w_up [E, Fm, D], w_down [E, D, Fm]. NULL on a backend
     * without it (CUDA: the run is refused at config load). */
    void (*moe_forward)(void *ctx, void *y, const void *residual, const void *x, const void *router, const void *w_gate,
                        const void *w_up, const void *w_down, const tt_moe_shape *shape, const tt_moe_saved *saved);
    /* Its backward from dy [N, D], the gradient of y: dx [N, D] = the gradient of x (overwritten; dx may be x, written
     * after x's last read), d_router, d_gate, d_up, d_down += their weights' gradients (NULL: frozen). The saved routed rows' tensors are overwritten;
     * scratch: N*k*D activation elements, then (at the next 256-byte boundary) N*(E + k) fp32. */
    void (*moe_backward)(void *ctx, void *dx, void *d_router, void *d_gate, void *d_up, void *d_down, const void *dy,
                         const void *x, const void *router, const void *w_gate, const void *w_up, const void *w_down,
                         const tt_moe_shape *shape, const tt_moe_saved *saved, void *scratch);
} tt_backend_iface;

/* Profiling (profile: true; ops/op_profile.h says what it measures): the classes the wrappers below time their ops
 * by, and the spans a backend has recorded. */
/* Spans recorded and not yet read: their marks stay in the timeline's window (TT_TIMELINE_WINDOW). */
#define TT_OP_PROFILE_PENDING 1024

typedef enum tt_op_class {
    TT_OP_GEMM,               /* linear layers forward and backward (LoRA's and 4-bit GEMMs too) */
    TT_OP_ATTENTION_FORWARD,  /* the fused attention forward (and generation's cached attention) */
    TT_OP_ATTENTION_BACKWARD, /* its backward */
    TT_OP_LM_HEAD_LOSS,       /* the LM head's GEMMs and the cross-entropy, chunk by chunk */
    TT_OP_ELEMENTWISE,        /* norms, RoPE, SwiGLU, embedding, adds, dropout, dequantization, compute-tier copies */
    TT_OP_OPTIMIZER,          /* AdamW on the compute tier and the gradient norm's sums */
    TT_OP_COPY_WAIT,          /* the compute stream waiting for offload copies and the side stream's collectives;
                                 blocking uploads and downloads */
    TT_OP_CLASS_COUNT
} tt_op_class;

typedef struct tt_op_profile {
    pthread_t owner; /* the thread that enabled it: the only one whose ops it times (the timeline is its stream's) */
    uint64_t start[TT_OP_PROFILE_PENDING], end[TT_OP_PROFILE_PENDING]; /* pending spans' marks, oldest first */
    unsigned char op_class[TT_OP_PROFILE_PENDING];
    int pending;
    double seconds[TT_OP_CLASS_COUNT]; /* read spans since the last tt_op_profile_take */
    int64_t calls[TT_OP_CLASS_COUNT];
} tt_op_profile;

struct tt_backend;

typedef struct tt_backend {
    const tt_backend_iface *iface;
    void *ctx; /* the backend's state, passed to every entry */
    const char *name;
    tt_tier compute_tier;   /* where the backend's ops read and write */
    tt_op_profile *profile; /* the op classes' times (op_profile.h; profile: true), or NULL: not profiled */
} tt_backend;

/* The wrappers' halves (ops/op_profile.c): begin marks the timeline, end records the span of class op_class. */
uint64_t tt_op_profile_begin(const tt_backend *backend);
void tt_op_profile_end(const tt_backend *backend, tt_op_class op_class, uint64_t start_mark);

/* An op of class op_class through a wrapper: when the backend profiles, the call between two marks of its timeline. */
#define TT_BACKEND_OP(backend, op_class, call)                                               \
    do {                                                                                     \
        const uint64_t tt_op_start_ = (backend)->profile ? tt_op_profile_begin(backend) : 0; \
        call;                                                                                \
        if (tt_op_start_) tt_op_profile_end(backend, op_class, tt_op_start_);                \
    } while (0)

/* The call of each entry: tt_backend_<entry>(backend, ...) is backend->iface-><entry>(backend->ctx, ...). */

static inline void *tt_backend_block_alloc(const tt_backend *backend, size_t bytes) {
    return backend->iface->block_alloc(backend->ctx, bytes);
}

static inline void tt_backend_block_free(const tt_backend *backend, void *base) {
    backend->iface->block_free(backend->ctx, base);
}

static inline void tt_backend_copy(const tt_backend *backend, void *dst, const void *src, size_t bytes) {
    TT_BACKEND_OP(backend, TT_OP_ELEMENTWISE, backend->iface->copy(backend->ctx, dst, src, bytes));
}

static inline void tt_backend_copy_2d(const tt_backend *backend, void *dst, size_t dst_pitch, const void *src,
                                      size_t src_pitch, size_t width, size_t rows) {
    TT_BACKEND_OP(backend, TT_OP_ELEMENTWISE,
                  backend->iface->copy_2d(backend->ctx, dst, dst_pitch, src, src_pitch, width, rows));
}

static inline void *tt_backend_pinned_alloc(const tt_backend *backend, size_t bytes) {
    return backend->iface->pinned_alloc(backend->ctx, bytes);
}

static inline void tt_backend_pinned_free(const tt_backend *backend, void *base) {
    backend->iface->pinned_free(backend->ctx, base);
}

static inline void tt_backend_zero(const tt_backend *backend, void *dst, size_t bytes) {
    TT_BACKEND_OP(backend, TT_OP_ELEMENTWISE, backend->iface->zero(backend->ctx, dst, bytes));
}

static inline void tt_backend_synchronize(const tt_backend *backend) { backend->iface->synchronize(backend->ctx); }

static inline void tt_backend_side_begin(const tt_backend *backend) { backend->iface->side_begin(backend->ctx); }

static inline uint64_t tt_backend_side_end(const tt_backend *backend) { return backend->iface->side_end(backend->ctx); }

static inline void tt_backend_side_wait(const tt_backend *backend, uint64_t ticket) {
    TT_BACKEND_OP(backend, TT_OP_COPY_WAIT, backend->iface->side_wait(backend->ctx, ticket));
}

static inline void *tt_backend_side_stream(const tt_backend *backend) {
    return backend->iface->side_stream(backend->ctx);
}

static inline bool tt_backend_side_active(const tt_backend *backend) {
    return backend->iface->side_active(backend->ctx);
}

static inline size_t tt_backend_bytes_outside_arenas(const tt_backend *backend) {
    return backend->iface->bytes_outside_arenas(backend->ctx);
}

static inline void tt_backend_upload(const tt_backend *backend, void *dst, const void *host_src, size_t bytes) {
    TT_BACKEND_OP(backend, TT_OP_COPY_WAIT, backend->iface->upload(backend->ctx, dst, host_src, bytes));
}

static inline void tt_backend_download(const tt_backend *backend, void *host_dst, const void *src, size_t bytes) {
    TT_BACKEND_OP(backend, TT_OP_COPY_WAIT, backend->iface->download(backend->ctx, host_dst, src, bytes));
}

static inline uint64_t tt_backend_copy_async(const tt_backend *backend, void *dst, const void *src, size_t bytes,
                                             bool to_host, uint64_t after) {
    return backend->iface->copy_async(backend->ctx, dst, src, bytes, to_host, after);
}

static inline void tt_backend_copy_wait(const tt_backend *backend, uint64_t ticket) {
    TT_BACKEND_OP(backend, TT_OP_COPY_WAIT, backend->iface->copy_wait(backend->ctx, ticket));
}

/* a host-side wait (the optimizer offload's worker thread calls it too): not an op of the compute stream, not profiled */
static inline void tt_backend_copy_host_wait(const tt_backend *backend, uint64_t ticket) {
    backend->iface->copy_host_wait(backend->ctx, ticket);
}

static inline bool tt_backend_copy_done(const tt_backend *backend, uint64_t ticket) {
    return backend->iface->copy_done(backend->ctx, ticket);
}

static inline void tt_backend_copy_set_delay(const tt_backend *backend, unsigned max_us) {
    backend->iface->copy_set_delay(backend->ctx, max_us);
}

static inline void tt_backend_copy_stats(const tt_backend *backend, size_t *to_host, size_t *to_device,
                                         double *copy_seconds, double *exposed_seconds) {
    backend->iface->copy_stats(backend->ctx, to_host, to_device, copy_seconds, exposed_seconds);
}

static inline uint64_t tt_backend_timestamp(const tt_backend *backend) {
    return backend->iface->timestamp(backend->ctx);
}

static inline double tt_backend_timestamp_seconds(const tt_backend *backend, uint64_t id) {
    return backend->iface->timestamp_seconds(backend->ctx, id);
}

static inline bool tt_backend_copy_span(const tt_backend *backend, uint64_t ticket, double *start, double *end) {
    return backend->iface->copy_span(backend->ctx, ticket, start, end);
}

static inline size_t tt_backend_scratch_bytes(const tt_backend *backend, const tt_backend_settings *settings,
                                              const tt_scratch_shape *shape) {
    return backend->iface->scratch_bytes(backend->ctx, settings, shape);
}

static inline size_t tt_backend_attention_workspace_bytes(const tt_backend *backend,
                                                          const tt_backend_settings *settings,
                                                          const tt_attention_shape *shape) {
    return backend->iface->attention_workspace_bytes(backend->ctx, settings, shape);
}

static inline void tt_backend_prepare(const tt_backend *backend, const tt_backend_settings *settings,
                                      const tt_scratch_shape *shape, void *scratch, size_t scratch_bytes) {
    backend->iface->prepare(backend->ctx, settings, shape, scratch, scratch_bytes);
}

static inline void tt_backend_release(const tt_backend *backend) { backend->iface->release(backend->ctx); }

static inline void tt_backend_embedding_forward(const tt_backend *backend, void *out, const int32_t *ids,
                                                const void *table, int64_t N, int64_t D, float scale) {
    TT_BACKEND_OP(backend, TT_OP_ELEMENTWISE,
                  backend->iface->embedding_forward(backend->ctx, out, ids, table, N, D, scale));
}

static inline void tt_backend_embedding_backward(const tt_backend *backend, void *dtable, const int32_t *ids,
                                                 const void *dout, int64_t N, int64_t D, float scale) {
    TT_BACKEND_OP(backend, TT_OP_ELEMENTWISE,
                  backend->iface->embedding_backward(backend->ctx, dtable, ids, dout, N, D, scale));
}

static inline void tt_backend_rmsnorm_forward(const tt_backend *backend, void *out, float *rstd, const void *x,
                                              const void *w, const void *residual, int64_t R, int64_t C, double eps,
                                              float weight_offset) {
    TT_BACKEND_OP(backend, TT_OP_ELEMENTWISE,
                  backend->iface->rmsnorm_forward(backend->ctx, out, rstd, x, w, residual, R, C, eps, weight_offset));
}

static inline void tt_backend_rmsnorm_backward(const tt_backend *backend, void *dx, void *dw, const void *dout,
                                               const void *x, const void *w, const float *rstd, int64_t R, int64_t C,
                                               float weight_offset) {
    TT_BACKEND_OP(backend, TT_OP_ELEMENTWISE,
                  backend->iface->rmsnorm_backward(backend->ctx, dx, dw, dout, x, w, rstd, R, C, weight_offset));
}

static inline void tt_backend_linear_forward(const tt_backend *backend, void *y, const void *x, const void *W,
                                             const void *b, const void *residual, int64_t N, int64_t in, int64_t out) {
    TT_BACKEND_OP(backend, TT_OP_GEMM, backend->iface->linear_forward(backend->ctx, y, x, W, b, residual, N, in, out));
}

static inline void tt_backend_linear_backward(const tt_backend *backend, void *dx, void *dW, void *db, const void *dy,
                                              const void *x, const void *W, int64_t N, int64_t in, int64_t out,
                                              bool accumulate_dx) {
    TT_BACKEND_OP(backend, TT_OP_GEMM,
                  backend->iface->linear_backward(backend->ctx, dx, dW, db, dy, x, W, N, in, out, accumulate_dx));
}

static inline void tt_backend_rope_forward(const tt_backend *backend, void *x, const float *cos, const float *sin,
                                           int64_t B, int64_t T, int64_t H, int64_t hd, int64_t rotary_dim) {
    TT_BACKEND_OP(backend, TT_OP_ELEMENTWISE,
                  backend->iface->rope_forward(backend->ctx, x, cos, sin, B, T, H, hd, rotary_dim));
}

static inline void tt_backend_rope_backward(const tt_backend *backend, void *dx, const float *cos, const float *sin,
                                            int64_t B, int64_t T, int64_t H, int64_t hd, int64_t rotary_dim) {
    TT_BACKEND_OP(backend, TT_OP_ELEMENTWISE,
                  backend->iface->rope_backward(backend->ctx, dx, cos, sin, B, T, H, hd, rotary_dim));
}

static inline void tt_backend_attention_forward(const tt_backend *backend, void *out, float *lse, const void *q,
                                                const void *k, const void *v, const tt_attention_shape *shape) {
    TT_BACKEND_OP(backend, TT_OP_ATTENTION_FORWARD,
                  backend->iface->attention_forward(backend->ctx, out, lse, q, k, v, shape));
}

static inline void tt_backend_attention_backward(const tt_backend *backend, void *dq, void *dk, void *dv,
                                                 const void *dout, const void *out, const float *lse, const void *q,
                                                 const void *k, const void *v, const tt_attention_shape *shape,
                                                 void *workspace, void *spare, size_t spare_bytes) {
    TT_BACKEND_OP(backend, TT_OP_ATTENTION_BACKWARD,
                  backend->iface->attention_backward(backend->ctx, dq, dk, dv, dout, out, lse, q, k, v, shape,
                                                     workspace, spare, spare_bytes));
}

static inline void tt_backend_attention_cached(const tt_backend *backend, void *out, const void *q, const void *k_cache,
                                               const void *v_cache, int64_t start, int64_t n,
                                               const tt_attention_shape *shape) {
    TT_BACKEND_OP(backend, TT_OP_ATTENTION_FORWARD,
                  backend->iface->attention_cached(backend->ctx, out, q, k_cache, v_cache, start, n, shape));
}

static inline void tt_backend_glu_forward(const tt_backend *backend, void *h, const void *gate, const void *up,
                                          int64_t n, tt_glu_activation act) {
    TT_BACKEND_OP(backend, TT_OP_ELEMENTWISE, backend->iface->glu_forward(backend->ctx, h, gate, up, n, act));
}

static inline void tt_backend_glu_backward(const tt_backend *backend, void *dgate, void *dup, const void *dh,
                                           const void *gate, const void *up, int64_t n, tt_glu_activation act) {
    TT_BACKEND_OP(backend, TT_OP_ELEMENTWISE,
                  backend->iface->glu_backward(backend->ctx, dgate, dup, dh, gate, up, n, act));
}

static inline void tt_backend_add(const tt_backend *backend, void *out, const void *a, const void *b, int64_t n) {
    TT_BACKEND_OP(backend, TT_OP_ELEMENTWISE, backend->iface->add(backend->ctx, out, a, b, n));
}

static inline void tt_backend_dequantize_4bit(const tt_backend *backend, void *out, const void *quantized,
                                              int64_t numel, const tt_quant4_format *format) {
    TT_BACKEND_OP(backend, TT_OP_ELEMENTWISE,
                  backend->iface->dequantize_4bit(backend->ctx, out, quantized, numel, format));
}

static inline void tt_backend_dropout_scale(const tt_backend *backend, void *out, const void *x, int64_t n,
                                            float multiplier, uint32_t drop_threshold, uint64_t seed) {
    TT_BACKEND_OP(backend, TT_OP_ELEMENTWISE,
                  backend->iface->dropout_scale(backend->ctx, out, x, n, multiplier, drop_threshold, seed));
}

static inline void tt_backend_add_uniform_noise(const tt_backend *backend, void *x, int64_t n, float magnitude,
                                                uint64_t seed) {
    TT_BACKEND_OP(backend, TT_OP_ELEMENTWISE, backend->iface->add_uniform_noise(backend->ctx, x, n, magnitude, seed));
}

static inline double tt_backend_lm_head_loss(const tt_backend *backend, void *dxn, void *dW, const void *xn,
                                             const void *W, const int32_t *targets, int64_t N, int64_t D, int64_t V,
                                             int64_t chunk, void *logits, double logit_scale, double softcap,
                                             double scale, double loss_before, int64_t *count) {
    double loss;
    TT_BACKEND_OP(backend, TT_OP_LM_HEAD_LOSS,
                  loss = backend->iface->lm_head_loss(backend->ctx, dxn, dW, xn, W, targets, N, D, V, chunk, logits,
                                                      logit_scale, softcap, scale, loss_before, count));
    return loss;
}

static inline void tt_backend_sum_squares(const tt_backend *backend, double *out, const void *x, int64_t n) {
    TT_BACKEND_OP(backend, TT_OP_OPTIMIZER, backend->iface->sum_squares(backend->ctx, out, x, n));
}

static inline void tt_backend_sum_parts(const tt_backend *backend, float *dst, const float *parts, int count,
                                        int64_t n) {
    TT_BACKEND_OP(backend, TT_OP_ELEMENTWISE, backend->iface->sum_parts(backend->ctx, dst, parts, count, n));
}

static inline void tt_backend_adamw_update(const tt_backend *backend, void *weights, float *master, const void *g,
                                           void *m, void *v, const int64_t *segment_start,
                                           const unsigned char *segment_decays, int segments, float lr, float beta1,
                                           float beta2, float eps, float weight_decay, int64_t step, float grad_scale) {
    TT_BACKEND_OP(backend, TT_OP_OPTIMIZER,
                  backend->iface->adamw_update(backend->ctx, weights, master, g, m, v, segment_start, segment_decays,
                                               segments, lr, beta1, beta2, eps, weight_decay, step, grad_scale));
}

static inline void tt_backend_adamw_8bit_update(const tt_backend *backend, void *weights, float *master, const void *g,
                                                const tt_adamw_8bit_moment *m, const tt_adamw_8bit_moment *v,
                                                const tt_adamw_8bit_tensor *tensors, int count,
                                                const tt_adamw_8bit_scalars *scalars) {
    TT_CHECK(backend->iface->adamw_8bit_update, "the %s backend has no 8-bit AdamW", backend->name);
    TT_BACKEND_OP(backend, TT_OP_OPTIMIZER,
                  backend->iface->adamw_8bit_update(backend->ctx, weights, master, g, m, v, tensors, count, scalars));
}

static inline void tt_backend_moe_forward(const tt_backend *backend, void *y, const void *residual, const void *x,
                                          const void *router, const void *w_gate, const void *w_up, const void *w_down,
                                          const tt_moe_shape *shape, const tt_moe_saved *saved) {
    TT_CHECK(backend->iface->moe_forward, "the %s backend has no mixture of experts", backend->name);
    TT_BACKEND_OP(
        backend, TT_OP_GEMM,
        backend->iface->moe_forward(backend->ctx, y, residual, x, router, w_gate, w_up, w_down, shape, saved));
}

static inline void tt_backend_moe_backward(const tt_backend *backend, void *dx, void *d_router, void *d_gate,
                                           void *d_up, void *d_down, const void *dy, const void *x, const void *router,
                                           const void *w_gate, const void *w_up, const void *w_down,
                                           const tt_moe_shape *shape, const tt_moe_saved *saved, void *scratch) {
    TT_CHECK(backend->iface->moe_backward, "the %s backend has no mixture of experts", backend->name);
    TT_BACKEND_OP(backend, TT_OP_GEMM,
                  backend->iface->moe_backward(backend->ctx, dx, d_router, d_gate, d_up, d_down, dy, x, router, w_gate,
                                               w_up, w_down, shape, saved, scratch));
}

/* Frees a backend made by any of the constructors (NULL: nothing). */
void tt_backend_destroy(tt_backend *backend);

/* The CPU backend: fp32 reference kernels on pageable host memory, on `threads` OpenMP threads
 * (0: OpenMP's default for the calling thread when an op runs). The bits do not depend on it. */
tt_backend *tt_backend_cpu_create(int threads);

/* The measuring backend of `real` (its compute tier and its pure size queries; every op and copy a
 * no-op), for the step program's dry run on measuring arenas (train/measure.h). Its context is
 * `real`, borrowed: nothing to destroy. */
void tt_backend_measure_init(tt_backend *out, const tt_backend *real);

#endif
