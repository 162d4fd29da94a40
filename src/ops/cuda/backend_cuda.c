/* The CUDA backend table. Each entry maps the untyped table signature onto the bf16 kernels
 * (ops_cuda.h), the cuBLASLt GEMMs (gemm_cuda.h) and the fused attention, all on one compute
 * stream. Memory: the arena is one cudaMalloc at start (block_alloc); the ops' scratch is a
 * slice of it (set_scratch), laid out as [GEMM workspace | per-op scratch]. Host round trips
 * happen only where an op returns a value to the host (loss, sum of squares) or needs host
 * work (the embedding backward's sort), each with one synchronisation. */
#include "ops/cuda/backend_cuda.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/arena.h"
#include "core/check.h"
#include "ops/cuda/attention_cudnn.h"
#include "ops/cuda/attention_flash.h"
#include "ops/cuda/copy_engine_cuda.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/gemm_cuda.h"
#include "ops/cuda/ops_cuda.h"

typedef struct cuda_backend_state {
    bool started;
    cudaStream_t stream;
    size_t used_before; /* device bytes in use before the backend started */
    size_t arena_bytes; /* bytes handed out by block_alloc */
    tt_precision precision;
    tt_attention_kind attention_requested;
    size_t attention_workspace_limit; /* attn_workspace_limit the attention plans were (or will be) built for */
    int attention_lanes;              /* head groups cuDNN's deterministic backward runs at once */
    int attention_lanes_reported;     /* the most it ran at once, spare memory included, as logged */

    unsigned char *scratch; /* [GEMM workspace | op scratch] */
    size_t scratch_bytes;
    tt_cuda_gemm_context *gemm;

    /* Attention: the kernels chosen for the run's shape (one shape per run). */
    tt_scratch_shape scratch_shape; /* the shape the scratch was sized for */
    tt_attention_shape attention_shape;
    tt_attention_kind attention_forward, attention_backward; /* resolved: cudnn, flash or simple */
    tt_cudnn_attention *cudnn;

    /* Host buffers of the embedding backward's sort and the loss, sized at set_scratch. */
    int64_t host_tokens, host_vocab;
    int32_t *host_ids, *host_order, *host_starts, *host_segment_tokens, *host_counts, *host_targets;
    double *host_chunk_sums;
    int64_t host_chunks;
} cuda_backend_state;

static cuda_backend_state state;

static void profile_start_up(void);

static void start(void) {
    if (state.started) return;
    TT_CUDA_CHECK(cudaSetDevice(0));
    TT_CUDA_CHECK(cudaStreamCreateWithFlags(&state.stream, cudaStreamNonBlocking));
    size_t free_bytes = 0, total_bytes = 0;
    TT_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    state.used_before = total_bytes - free_bytes;
    state.started = true;
    tt_cuda_copy_engine_start(state.stream);
    profile_start_up();
}

bool tt_cuda_device_query(char *name, size_t name_size, size_t *free_bytes, size_t *total_bytes) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        (void)cudaGetLastError(); /* no driver or no GPU: clear the sticky error */
        return false;
    }
    struct cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) return false;
    snprintf(name, name_size, "%s", prop.name);
    start();
    TT_CUDA_CHECK(cudaMemGetInfo(free_bytes, total_bytes));
    return true;
}

size_t tt_cuda_device_bytes_in_use(void) {
    size_t free_bytes = 0, total_bytes = 0;
    TT_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    size_t used = total_bytes - free_bytes;
    size_t outside = state.used_before + state.arena_bytes;
    return used > outside ? used - outside : 0;
}

static cudaStream_t S(void) { return state.stream; }

static bool gradient_fp32(void) { return state.precision.gradient == TT_F32; }

/* ---- op profiler (TT_CUDA_PROFILE=1): device time per op kind, from CUDA events around each
 * call, printed to stderr at the end of the run. For finding where a step's time goes; off by default (the
 * events would cost launch time). It counts every call of the run, the first step's one-time costs
 * included (the first launch of each kernel: about 140 ms of a 4k Qwen3-1.7B step on an H100): the
 * steady state is the difference of two runs of different lengths. (A hang with cuDNN's head-group
 * backward seen in an earlier version no longer reproduces: 16k and 64k profiled on the device.) ---- */

#define PROFILE_EVENTS 16384
#define PROFILE_KINDS 64

typedef struct profiler {
    bool on;
    cudaEvent_t start[PROFILE_EVENTS], stop[PROFILE_EVENTS];
    const char *pending_name[PROFILE_EVENTS];
    int pending;
    const char *name[PROFILE_KINDS];
    double ms[PROFILE_KINDS];
    long calls[PROFILE_KINDS];
    int kinds;
} profiler;

static profiler *prof;

static void profile_flush(void) {
    if (!prof || !prof->pending) return;
    TT_CUDA_CHECK(cudaStreamSynchronize(state.stream));
    for (int i = 0; i < prof->pending; i++) {
        float ms = 0;
        TT_CUDA_CHECK(cudaEventElapsedTime(&ms, prof->start[i], prof->stop[i]));
        int k = 0;
        while (k < prof->kinds && strcmp(prof->name[k], prof->pending_name[i]) != 0) k++;
        if (k == prof->kinds && prof->kinds < PROFILE_KINDS) prof->name[prof->kinds++] = prof->pending_name[i];
        if (k < PROFILE_KINDS) {
            prof->ms[k] += ms;
            prof->calls[k]++;
        }
    }
    prof->pending = 0;
}

/* Printed when the model state lets go of the scratch (the end of a run). */
static void profile_report(void) {
    if (!prof) return;
    profile_flush();
    double total = 0;
    for (int k = 0; k < prof->kinds; k++) total += prof->ms[k];
    fprintf(stderr, "cuda op profile (device ms, all calls of the run):\n");
    for (int k = 0; k < prof->kinds; k++)
        fprintf(stderr, "  %-34s %10.1f ms %6.1f%% %8ld calls\n", prof->name[k], prof->ms[k],
                total > 0 ? 100.0 * prof->ms[k] / total : 0.0, prof->calls[k]);
    fprintf(stderr, "  %-34s %10.1f ms\n", "total", total);
}

static void profile_start_up(void) {
    const char *env = getenv("TT_CUDA_PROFILE");
    if (!env || strcmp(env, "1") != 0) return;
    prof = tt_xcalloc(1, sizeof *prof, "the op profiler");
    for (int i = 0; i < PROFILE_EVENTS; i++) {
        TT_CUDA_CHECK(cudaEventCreate(&prof->start[i]));
        TT_CUDA_CHECK(cudaEventCreate(&prof->stop[i]));
    }
    prof->on = true;
}

static int profile_begin(const char *name) {
    if (!prof) return -1;
    if (prof->pending == PROFILE_EVENTS) profile_flush();
    const int i = prof->pending++;
    prof->pending_name[i] = name;
    TT_CUDA_CHECK(cudaEventRecord(prof->start[i], state.stream));
    return i;
}

static void profile_end(int i) {
    if (i >= 0) TT_CUDA_CHECK(cudaEventRecord(prof->stop[i], state.stream));
}

#define TIMED(name, ...)                     \
    do {                                     \
        const int timed_ = profile_begin(name); \
        __VA_ARGS__;                         \
        profile_end(timed_);                 \
    } while (0)

/* ---- memory ---- */

static void *cuda_block_alloc(size_t bytes) {
    start();
    void *p = NULL;
    cudaError_t status = cudaMalloc(&p, bytes);
    if (status != cudaSuccess) {
        (void)cudaGetLastError();
        size_t free_bytes = 0, total_bytes = 0;
        (void)cudaMemGetInfo(&free_bytes, &total_bytes);
        char want[32], have[32];
        tt_die("cannot allocate %s of GPU memory for the arena (%s free): %s. Lower sequence_len or "
               "micro_batch_size, enable gradient_checkpointing, or set master_weights: false",
               tt_format_bytes(bytes, want, sizeof want), tt_format_bytes(free_bytes, have, sizeof have),
               cudaGetErrorString(status));
    }
    state.arena_bytes += bytes;
    return p;
}

static void cuda_block_free(void *base) {
    if (base) TT_CUDA_CHECK(cudaFree(base));
}

/* Page-locked host memory: page-aligned host memory (O_DIRECT disk IO needs whole pages, and
 * cudaHostAlloc does not align small blocks to pages), registered with CUDA. If the OS refuses
 * to lock it, it stays pageable, with a warning (copies from it run at a fraction of the speed:
 * 6.5-9.7 GB/s against 53 GB/s measured on the device). */
static void *cuda_pinned_alloc(size_t bytes) {
    start();
    void *p = tt_host_block_alloc(bytes);
    if (!p) return NULL;
    const size_t whole_pages = (bytes + 4095) / 4096 * 4096;
    cudaError_t status = cudaHostRegister(p, whole_pages, cudaHostRegisterDefault);
    if (status == cudaSuccess) return p;
    (void)cudaGetLastError();
    char text[32];
    tt_warn("cannot page-lock %s of host memory for offloaded activations (%s; see ulimit -l and the free memory): "
            "using pageable memory, where copies run about 5-8x slower",
            tt_format_bytes(bytes, text, sizeof text), cudaGetErrorString(status));
    return p;
}

static void cuda_pinned_free(void *base) {
    if (!base) return;
    cudaError_t status = cudaHostUnregister(base);
    if (status == cudaErrorHostMemoryNotRegistered) (void)cudaGetLastError(); /* the pageable fallback */
    else TT_CUDA_CHECK(status);
    tt_host_block_free(base);
}

static void cuda_copy(void *dst, const void *src, size_t bytes) {
    if (bytes) TIMED("copy", TT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, S())));
}

static void cuda_zero(void *dst, size_t bytes) {
    if (bytes) TIMED("zero", TT_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, S())));
}

static void cuda_synchronize(void) { TT_CUDA_CHECK(cudaStreamSynchronize(S())); }

static void cuda_upload(void *dst, const void *host_src, size_t bytes) {
    if (!bytes) return;
    TT_CUDA_CHECK(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, S()));
    cuda_synchronize();
}

static void cuda_download(void *host_dst, const void *src, size_t bytes) {
    if (!bytes) return;
    TT_CUDA_CHECK(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, S()));
    cuda_synchronize();
}

static void destroy_cudnn(void);

static void cuda_configure(const tt_precision *p, tt_attention_kind attention, size_t attention_workspace_limit) {
    start();
    TT_CHECK(p->activation == TT_BF16, "the CUDA backend computes in bf16");
    TT_CHECK(p->gradient == TT_F32 || p->gradient == TT_BF16, "gradients are fp32 or bf16");
    TT_CHECK(p->moment == TT_F32 || p->moment == TT_BF16, "AdamW moments are fp32 or bf16");
    state.precision = *p;
    /* a new kind or limit builds the attention plans again at the next shape query */
    if (attention != state.attention_requested || attention_workspace_limit != state.attention_workspace_limit) {
        destroy_cudnn();
        state.attention_forward = state.attention_backward = TT_ATTENTION_AUTO;
    }
    state.attention_requested = attention;
    state.attention_workspace_limit = attention_workspace_limit;
}

/* ---- scratch ---- */

/* Resolves the attention kernels for a shape: the requested kind, or for auto the fastest that
 * supports it (cuDNN, then tiertrain's flash kernels, then the reference kernels). An explicit
 * request the shape or the device's cuDNN cannot serve is an error, never a silent fallback. */
static bool flash_supported(const tt_attention_shape *shape) {
    return tt_cuda_flash_attention_supported(shape);
}

static void destroy_cudnn(void) {
    if (state.cudnn) tt_cudnn_attention_destroy(state.cudnn);
    state.cudnn = NULL;
}

static size_t floats(int64_t n) { return (size_t)n * sizeof(float); }

static size_t max_size(size_t a, size_t b) { return a > b ? a : b; }

/* cuDNN's deterministic backward within attn_workspace_limit. When one call cannot hold every head's dP,
 * the backward runs head groups one after another, and a call's engine then keeps the GPU only part busy:
 * two groups at once, each with half the limit, are faster than one with all of it (H100, 64k tokens, 16
 * heads, 8 kv: 1 GiB per call in 2 lanes 417 TFLOP/s against 2 GiB in one 376; 2 GiB in 2 lanes 442 against
 * 4 GiB in one 411). The split decides the calls and so the bits; it depends on the shape and the limit
 * only. One lane where the whole dP fits the limit, or the halves cannot run (one kv head: one group). */
#define ATTENTION_LANES 2

static tt_cudnn_attention *create_deterministic_cudnn(const tt_attention_shape *shape, char *why_not, size_t size) {
    const size_t limit = state.attention_workspace_limit;
    const double whole_dp = 2.0 * (double)shape->batch * (double)shape->num_heads * (double)shape->seq_len *
                            (double)shape->seq_len;
    if (whole_dp > (double)limit) {
        tt_cudnn_attention_set_dp_limit(limit / ATTENTION_LANES);
        tt_cudnn_attention *a = tt_cudnn_attention_create(shape, 1, why_not, size);
        if (a && tt_cudnn_attention_lane_bytes(a) > 0) {
            state.attention_lanes = ATTENTION_LANES;
            return a;
        }
        tt_cudnn_attention_destroy(a);
    }
    tt_cudnn_attention_set_dp_limit(limit);
    state.attention_lanes = 1;
    return tt_cudnn_attention_create(shape, 1, why_not, size);
}

static void choose_attention(const tt_attention_shape *given) {
    /* the choice depends on the shape, not on where this micro-batch's positions are */
    tt_attention_shape key;
    memset(&key, 0, sizeof key); /* padding bytes too: the key is compared with memcmp */
    key.batch = given->batch;
    key.seq_len = given->seq_len;
    key.num_heads = given->num_heads;
    key.num_kv_heads = given->num_kv_heads;
    key.head_dim = given->head_dim;
    key.scale = given->scale;
    key.sliding_window = given->sliding_window;
    key.documents = given->documents;
    const tt_attention_shape *shape = &key;
    if (state.attention_forward != TT_ATTENTION_AUTO && memcmp(&state.attention_shape, shape, sizeof *shape) == 0)
        return;
    destroy_cudnn();
    state.attention_shape = *shape;
    const tt_attention_kind want = state.attention_requested;
    char why_not[256] = "";
    const bool flash = flash_supported(shape);
    if (shape->documents) {
        /* packed documents: the own kernels take the document boundaries; the cuDNN graphs built here have no
         * document mask, so cuDNN is refused rather than run over the documents' boundaries */
        if (want == TT_ATTENTION_CUDNN)
            tt_die("attn_implementation: cudnn cannot run with sample_packing: its fused attention here takes no "
                   "document boundaries, so packed documents would attend to each other. Use attn_implementation: "
                   "auto (tiertrain's flash kernels with document boundaries) or remove sample_packing");
        if (want == TT_ATTENTION_FLASH && !flash)
            tt_die("attn_implementation: flash needs head_dim 64 or 128 and no sliding window (this model: head_dim "
                   "%lld, window %lld). Use attn_implementation: auto",
                   (long long)shape->head_dim, (long long)shape->sliding_window);
        state.attention_lanes = 1;
        state.attention_lanes_reported = 0;
        state.attention_forward = state.attention_backward =
            want == TT_ATTENTION_SIMPLE || !flash ? TT_ATTENTION_SIMPLE : TT_ATTENTION_FLASH;
        tt_info("attention: packed documents (sample_packing): %s with document boundaries%s",
                state.attention_forward == TT_ATTENTION_FLASH ? "tiertrain's flash kernels" : "the reference kernels",
                want == TT_ATTENTION_AUTO ? " (auto; cuDNN's attention here has no document mask)" : "");
        return;
    }
    if (want == TT_ATTENTION_FLASH && !flash)
        tt_die("attn_implementation: flash needs head_dim 64 or 128 and no sliding window (this model: head_dim %lld, "
               "window %lld). Use attn_implementation: auto",
               (long long)shape->head_dim, (long long)shape->sliding_window);
    /* auto: cuDNN's fused attention with its deterministic backward (dQ without atomics), run on
     * groups of heads and chunks of keys whose dP fits attn_workspace_limit, two groups at a time
     * where there are several (create_deterministic_cudnn); where cuDNN cannot (an old library, an
     * unsupported shape), cuDNN's forward with tiertrain's deterministic flash backward; else the
     * flash kernels; else the reference kernels. Measured on the device at T = 64k: cuDNN ~630
     * TFLOP/s forward and ~420-440 deterministic backward, flash ~320 and ~220. An explicit cudnn
     * gets cuDNN's atomic backward (fastest, not bit-reproducible). */
    bool cudnn_backward = false;
    state.attention_lanes = 1;
    state.attention_lanes_reported = 0;
    if (want == TT_ATTENTION_AUTO) {
        state.cudnn = create_deterministic_cudnn(shape, why_not, sizeof why_not);
        cudnn_backward = state.cudnn != NULL;
        if (!state.cudnn) {
            tt_info("attention: cuDNN's deterministic backward is not used: %s", why_not);
            state.cudnn = tt_cudnn_attention_create(shape, 0, why_not, sizeof why_not);
        }
    } else if (want == TT_ATTENTION_CUDNN) {
        state.cudnn = tt_cudnn_attention_create(shape, 0, why_not, sizeof why_not);
        if (!state.cudnn)
            tt_die("attn_implementation: cudnn is not available for this run: %s. Use attn_implementation: auto",
                   why_not);
    }
    if (want == TT_ATTENTION_CUDNN) {
        state.attention_forward = state.attention_backward = TT_ATTENTION_CUDNN;
        tt_warn("attn_implementation: cudnn: cuDNN's attention backward accumulates dQ with atomics; gradients are "
                "not bit-reproducible run to run (attn_implementation: auto is)");
    } else if (want == TT_ATTENTION_SIMPLE) {
        state.attention_forward = state.attention_backward = TT_ATTENTION_SIMPLE;
    } else {
        state.attention_forward = state.cudnn && want == TT_ATTENTION_AUTO ? TT_ATTENTION_CUDNN
                                  : flash                                 ? TT_ATTENTION_FLASH
                                                                          : TT_ATTENTION_SIMPLE;
        state.attention_backward = cudnn_backward && want == TT_ATTENTION_AUTO ? TT_ATTENTION_CUDNN
                                   : flash                                    ? TT_ATTENTION_FLASH
                                                                              : TT_ATTENTION_SIMPLE;
        if (!state.cudnn && !flash)
            tt_info("attention: no fused kernel for head_dim %lld%s (cuDNN: %s); using the reference kernels (slow)",
                    (long long)shape->head_dim, shape->sliding_window ? " with a sliding window" : "", why_not);
    }
    if (state.attention_forward != TT_ATTENTION_CUDNN) destroy_cudnn();
    if (state.cudnn)
        tt_info("attention: cuDNN %s: %s%s", tt_cudnn_version_string(), tt_cudnn_attention_describe(state.cudnn),
                state.attention_lanes > 1 ? "; 2 head groups at a time" : "");
}


static size_t align_256(size_t n) { return (n + 255) & ~(size_t)255; }

static size_t attention_forward_scratch_bytes(void) {
    return state.attention_forward == TT_ATTENTION_CUDNN ? tt_cudnn_attention_forward_workspace_bytes(state.cudnn) : 0;
}

static size_t attention_backward_scratch_bytes(const tt_attention_shape *a) {
    switch (state.attention_backward) {
    case TT_ATTENTION_CUDNN:
        return tt_cudnn_attention_workspace_bytes(state.cudnn) +
               (size_t)(state.attention_lanes - 1) * tt_cudnn_attention_lane_bytes(state.cudnn);
    case TT_ATTENTION_FLASH: return tt_cuda_flash_attention_backward_scratch_bytes(a);
    default: return floats(a->batch * a->num_heads * a->seq_len);
    }
}

/* The per-op scratch (after the GEMM workspace): the largest any one op needs. */
static size_t op_scratch_bytes(const tt_scratch_shape *s) {
    const int64_t N = s->tokens, hd = s->attention.head_dim;
    const int64_t q_dim = s->attention.num_heads * hd, kv_dim = s->attention.num_kv_heads * hd;
    size_t need = floats(tt_cuda_rmsnorm_backward_scratch(N, s->hidden));
    need = max_size(need, floats(tt_cuda_rmsnorm_backward_scratch(N * s->attention.num_heads, hd)));
    int64_t widest = q_dim > kv_dim ? q_dim : kv_dim;
    if (s->hidden > widest) widest = s->hidden;
    need = max_size(need, floats(tt_cuda_column_sum_scratch(N, widest)));
    need = max_size(need, sizeof(double) * (TT_CUDA_SUM_SQUARES_BLOCKS + 1));
    need = max_size(need, attention_forward_scratch_bytes()); /* the backward's: attention_workspace_bytes */
    need = max_size(need, sizeof(int32_t) * (size_t)(3 * N + 1)); /* embedding backward order */
    const int64_t chunks = s->loss_chunk > 0 ? (N + s->loss_chunk - 1) / s->loss_chunk : 1;
    need = max_size(need, align_256(floats(s->loss_chunk)) + sizeof(double) * (size_t)chunks); /* loss */
    return align_256(need);
}

static size_t cuda_scratch_bytes(const tt_scratch_shape *s) {
    start();
    state.scratch_shape = *s; /* set_scratch sizes the host buffers from it */
    choose_attention(&s->attention);
    return TT_CUDA_GEMM_WORKSPACE_BYTES + op_scratch_bytes(s);
}

static size_t cuda_attention_workspace_bytes(const tt_attention_shape *shape) {
    start();
    choose_attention(shape);
    return align_256(attention_backward_scratch_bytes(shape));
}

static void free_host_buffers(void) {
    free(state.host_ids);
    free(state.host_order);
    free(state.host_starts);
    free(state.host_segment_tokens);
    free(state.host_counts);
    free(state.host_targets);
    free(state.host_chunk_sums);
    state.host_ids = state.host_order = state.host_starts = state.host_segment_tokens = state.host_counts = NULL;
    state.host_targets = NULL;
    state.host_chunk_sums = NULL;
    state.host_tokens = state.host_chunks = state.host_vocab = 0;
}

/* Host buffers of the ops that work on the host (the loss sum, the embedding backward's sort),
 * sized at set_scratch. */
static void ensure_host_buffers(int64_t tokens, int64_t vocab, int64_t chunks) {
    if (tokens > state.host_tokens) {
        free(state.host_ids);
        free(state.host_order);
        free(state.host_starts);
        free(state.host_segment_tokens);
        free(state.host_targets);
        state.host_ids = tt_xmalloc(sizeof(int32_t) * (size_t)tokens, "embedding backward ids");
        state.host_order = tt_xmalloc(sizeof(int32_t) * (size_t)tokens, "embedding backward order");
        state.host_starts = tt_xmalloc(sizeof(int32_t) * (size_t)(tokens + 1), "embedding backward starts");
        state.host_segment_tokens = tt_xmalloc(sizeof(int32_t) * (size_t)tokens, "embedding backward tokens");
        state.host_targets = tt_xmalloc(sizeof(int32_t) * (size_t)tokens, "loss targets");
        state.host_tokens = tokens;
    }
    if (vocab > state.host_vocab) {
        free(state.host_counts);
        /* tt_embedding_backward_order takes counts[vocab + 1] */
        state.host_counts = tt_xmalloc(sizeof(int32_t) * (size_t)(vocab + 1), "embedding backward counts");
        state.host_vocab = vocab;
    }
    if (chunks > state.host_chunks) {
        free(state.host_chunk_sums);
        state.host_chunk_sums = tt_xmalloc(sizeof(double) * (size_t)chunks, "loss chunk sums");
        state.host_chunks = chunks;
    }
}

static void cuda_set_scratch(void *base, size_t bytes) {
    if (state.gemm) tt_cuda_gemm_destroy(state.gemm);
    state.gemm = NULL;
    free_host_buffers();
    state.scratch = base;
    state.scratch_bytes = bytes;
    if (!base) {
        profile_report();
        destroy_cudnn();
        state.attention_forward = state.attention_backward = TT_ATTENTION_AUTO;
        return;
    }
    TT_CHECK(bytes >= TT_CUDA_GEMM_WORKSPACE_BYTES, "the scratch holds the GEMM workspace");
    state.gemm = tt_cuda_gemm_create(base, TT_CUDA_GEMM_WORKSPACE_BYTES);
    /* The host side of the loss and the embedding backward, once: nothing is allocated in a step. */
    const tt_scratch_shape *shape = &state.scratch_shape;
    const int64_t chunk = shape->loss_chunk > 0 ? shape->loss_chunk : 1;
    ensure_host_buffers(shape->tokens, shape->vocab, (shape->tokens + chunk - 1) / chunk);
}

/* The op scratch (after the GEMM workspace). */
static void *op_scratch(size_t bytes, const char *what) {
    const size_t have = state.scratch_bytes - TT_CUDA_GEMM_WORKSPACE_BYTES;
    if (bytes > have)
        tt_check_failed(__FILE__, __LINE__, "op_scratch", "GPU op scratch too small for %s: %zu > %zu", what, bytes,
                        have);
    return state.scratch + TT_CUDA_GEMM_WORKSPACE_BYTES;
}

/* ---- ops ---- */

static void cuda_embedding_forward(void *out, const int32_t *ids, const void *table, int64_t N, int64_t D) {
    TIMED("embedding forward", tt_cuda_embedding_forward(out, ids, table, N, D, S()));
}

static void cuda_embedding_backward(void *dtable, const int32_t *ids, const void *dout, int64_t N, int64_t D) {
    /* A stable sort of positions by token on the host gives every table row one block that adds
     * its positions in order: deterministic without atomics. The vocabulary bound is the
     * largest id + 1 (ids were validated against the vocabulary when the data was opened). */
    TT_CHECK(N <= state.host_tokens, "embedding backward over %lld tokens, host buffers for %lld", (long long)N,
             (long long)state.host_tokens);
    cuda_download(state.host_ids, ids, sizeof(int32_t) * (size_t)N);
    int32_t largest = 0;
    for (int64_t n = 0; n < N; n++)
        if (state.host_ids[n] > largest) largest = state.host_ids[n];
    TT_CHECK(largest < state.host_vocab, "token id %d outside the vocabulary of %lld", largest,
             (long long)state.host_vocab);
    int64_t segments = tt_embedding_backward_order(state.host_ids, N, (int64_t)largest + 1, state.host_order,
                                                   state.host_starts, state.host_segment_tokens, state.host_counts);
    int32_t *device = op_scratch(sizeof(int32_t) * (size_t)(3 * N + 1), "the embedding backward order");
    int32_t *order = device, *starts = device + N, *tokens = device + 2 * N + 1;
    TT_CUDA_CHECK(cudaMemcpyAsync(order, state.host_order, sizeof(int32_t) * (size_t)N, cudaMemcpyHostToDevice, S()));
    TT_CUDA_CHECK(cudaMemcpyAsync(starts, state.host_starts, sizeof(int32_t) * (size_t)(segments + 1),
                                  cudaMemcpyHostToDevice, S()));
    TT_CUDA_CHECK(cudaMemcpyAsync(tokens, state.host_segment_tokens, sizeof(int32_t) * (size_t)segments,
                                  cudaMemcpyHostToDevice, S()));
    TIMED("embedding backward", tt_cuda_embedding_backward(dtable, gradient_fp32(), order, starts, tokens, segments,
                                                           dout, D, S()));
    /* The host buffers are reused by the next call: wait until the copies have read them. */
    cuda_synchronize();
}

static void cuda_rmsnorm_forward(void *out, float *rstd, const void *x, const void *w, int64_t R, int64_t C,
                                 double eps) {
    TIMED("rmsnorm forward", tt_cuda_rmsnorm_forward(out, rstd, x, w, R, C, (float)eps, S()));
}

static void cuda_rmsnorm_backward(void *dx, void *dw, const void *dout, const void *x, const void *w,
                                  const float *rstd, int64_t R, int64_t C) {
    float *scratch = op_scratch(floats(tt_cuda_rmsnorm_backward_scratch(R, C)), "the RMSNorm backward");
    TIMED("rmsnorm backward", tt_cuda_rmsnorm_backward(dx, dw, gradient_fp32(), dout, x, w, rstd, R, C, scratch, S()));
}

static void cuda_linear_forward(void *y, const void *x, const void *W, const void *b, const void *residual,
                                int64_t N, int64_t in, int64_t out) {
    /* y[N,out] = x[N,in] @ W[out,in]^T (+ residual: cuBLASLt's C input, D = y) */
    TIMED("gemm forward", tt_cuda_gemm_add(state.gemm, false, true, N, out, in, x, in, W, in, residual, y, out, S()));
    if (b) TIMED("bias add", tt_cuda_add_bias(y, b, N, out, S()));
}

static void cuda_linear_backward(void *dx, void *dW, void *db, const void *dy, const void *x, const void *W,
                                 int64_t N, int64_t in, int64_t out, bool accumulate_dx) {
    /* dW[out,in] += dy^T[out,N] @ x[N,in], first: dx may be x's memory */
    if (dW)
        TIMED("gemm backward dW", tt_cuda_gemm(state.gemm, true, false, out, in, N, 1.0f, dy, out, x, in, 1.0f, dW,
                                               gradient_fp32(), in, S()));
    if (db) {
        float *scratch = op_scratch(floats(tt_cuda_column_sum_scratch(N, out)), "the bias gradient");
        TIMED("bias backward", tt_cuda_column_sum(db, gradient_fp32(), dy, N, out, scratch, S()));
    }
    /* dx[N,in] (+)= dy[N,out] @ W[out,in] */
    if (dx)
        TIMED("gemm backward dx", tt_cuda_gemm(state.gemm, false, false, N, in, out, 1.0f, dy, out, W, in,
                                               accumulate_dx ? 1.0f : 0.0f, dx, false, in, S()));
}

static void cuda_rope_forward(void *x, const float *cos_t, const float *sin_t, int64_t B, int64_t T, int64_t H,
                              int64_t hd) {
    TIMED("rope forward", tt_cuda_rope_forward(x, cos_t, sin_t, B, T, H, hd, S()));
}

static void cuda_rope_backward(void *dx, const float *cos_t, const float *sin_t, int64_t B, int64_t T, int64_t H,
                               int64_t hd) {
    TIMED("rope backward", tt_cuda_rope_backward(dx, cos_t, sin_t, B, T, H, hd, S()));
}

static void cuda_attention_forward(void *out, float *lse, const void *q, const void *k, const void *v,
                                   const tt_attention_shape *shape) {
    choose_attention(shape);
    switch (state.attention_forward) {
    case TT_ATTENTION_CUDNN:
        TIMED("attention forward cudnn",
              tt_cudnn_attention_forward(state.cudnn, out, lse, q, k, v,
                                         op_scratch(attention_forward_scratch_bytes(), "cuDNN attention"), S()));
        break;
    case TT_ATTENTION_FLASH:
        TIMED("attention forward flash", tt_cuda_flash_attention_forward(out, lse, q, k, v, shape, S()));
        break;
    default: TIMED("attention forward simple", tt_cuda_attention_forward(out, lse, q, k, v, shape, S())); break;
    }
}

static void cuda_attention_backward(void *dq, void *dk, void *dv, const void *dout, const void *out,
                                    const float *lse, const void *q, const void *k, const void *v,
                                    const tt_attention_shape *shape, void *workspace, void *spare,
                                    size_t spare_bytes) {
    choose_attention(shape);
    void *scratch = workspace;
    TT_CHECK(scratch || attention_backward_scratch_bytes(shape) == 0, "the attention backward needs its workspace");
    switch (state.attention_backward) {
    case TT_ATTENTION_CUDNN:
        TIMED("attention backward cudnn",
              tt_cudnn_attention_backward(state.cudnn, dq, dk, dv, dout, out, lse, q, k, v, scratch,
                                          attention_backward_scratch_bytes(shape), spare, spare_bytes, S()));
        if (tt_cudnn_attention_lane_bytes(state.cudnn) > 0 &&
            tt_cudnn_attention_most_lanes(state.cudnn) > state.attention_lanes_reported) {
            state.attention_lanes_reported = tt_cudnn_attention_most_lanes(state.cudnn);
            tt_info("attention backward: %d head groups at once (%d in dead layer inputs)",
                    state.attention_lanes_reported, state.attention_lanes_reported - state.attention_lanes);
        }
        break;
    case TT_ATTENTION_FLASH:
        TIMED("attention backward flash",
              tt_cuda_flash_attention_backward(dq, dk, dv, dout, out, lse, q, k, v, shape, scratch, S()));
        break;
    default:
        TIMED("attention backward simple",
              tt_cuda_attention_backward(dq, dk, dv, dout, out, lse, q, k, v, shape, scratch, S()));
        break;
    }
}

int tt_cuda_attention_most_lanes(void) {
    return state.cudnn && state.attention_backward == TT_ATTENTION_CUDNN ? tt_cudnn_attention_most_lanes(state.cudnn)
                                                                         : 0;
}

static void cuda_swiglu_forward(void *h, const void *gate, const void *up, int64_t n) {
    TIMED("swiglu forward", tt_cuda_swiglu_forward(h, gate, up, n, S()));
}

static void cuda_swiglu_backward(void *dgate, void *dup, const void *dh, const void *gate, const void *up,
                                 int64_t n) {
    TIMED("swiglu backward", tt_cuda_swiglu_backward(dgate, dup, dh, gate, up, n, S()));
}

static void cuda_add(void *out, const void *a, const void *b, int64_t n) {
    TIMED("add", tt_cuda_add(out, a, b, n, S()));
}

static void cuda_dropout_scale(void *out, const void *x, int64_t n, float multiplier, uint32_t drop_threshold,
                               uint64_t seed) {
    TIMED("dropout scale", tt_cuda_dropout_scale(out, x, n, multiplier, drop_threshold, seed, S()));
}

static double cuda_lm_head_loss(void *dxn, void *dW, const void *xn, const void *W, const int32_t *targets,
                                int64_t N, int64_t D, int64_t V, int64_t chunk, void *logits, double scale,
                                int64_t *count) {
    const int64_t chunks = (N + chunk - 1) / chunk;
    unsigned char *scratch = op_scratch(align_256(floats(chunk)) + sizeof(double) * (size_t)chunks, "the loss");
    float *row_loss = (float *)scratch;
    double *chunk_sums = (double *)(scratch + align_256(floats(chunk)));
    const tt_bf16 *x = xn;
    for (int64_t c = 0; c < chunks; c++) {
        const int64_t first = c * chunk, rows = N - first < chunk ? N - first : chunk;
        /* logits[rows,V] = xn[rows,D] @ W[V,D]^T, in bf16 as the peer's LM head */
        TIMED("lm head gemm forward", tt_cuda_gemm(state.gemm, false, true, rows, V, D, 1.0f, x + first * D, D, W, D,
                                                   0.0f, logits, false, V, S()));
        TIMED("cross entropy", tt_cuda_cross_entropy_chunk(logits, row_loss, targets + first, rows, V, (float)scale,
                                                           S());
              tt_cuda_sum(chunk_sums + c, row_loss, rows, S()));
        if (dxn) {
            /* logits now hold d loss / d logits; dW is NULL when the LM head is frozen */
            if (dW)
                TIMED("lm head gemm backward dW", tt_cuda_gemm(state.gemm, true, false, V, D, rows, 1.0f, logits, V,
                                                               x + first * D, D, 1.0f, dW, gradient_fp32(), D, S()));
            TIMED("lm head gemm backward dx", tt_cuda_gemm(state.gemm, false, false, rows, D, V, 1.0f, logits, V, W, D,
                                                           0.0f, (tt_bf16 *)dxn + first * D, false, D, S()));
        }
    }
    TT_CHECK(N <= state.host_tokens && chunks <= state.host_chunks, "loss over %lld tokens in %lld chunks, host "
             "buffers for %lld and %lld", (long long)N, (long long)chunks, (long long)state.host_tokens,
             (long long)state.host_chunks);
    TT_CUDA_CHECK(cudaMemcpyAsync(state.host_chunk_sums, chunk_sums, sizeof(double) * (size_t)chunks,
                                  cudaMemcpyDeviceToHost, S()));
    TT_CUDA_CHECK(
        cudaMemcpyAsync(state.host_targets, targets, sizeof(int32_t) * (size_t)N, cudaMemcpyDeviceToHost, S()));
    cuda_synchronize();
    double total = 0.0;
    for (int64_t c = 0; c < chunks; c++) total += state.host_chunk_sums[c];
    int64_t counted = 0;
    for (int64_t n = 0; n < N; n++) counted += state.host_targets[n] != TT_IGNORE_INDEX;
    *count = counted;
    return total;
}

static void cuda_sum_squares(double *out, const void *x, int64_t n) {
    double *scratch = op_scratch(sizeof(double) * TT_CUDA_SUM_SQUARES_BLOCKS, "the sum of squares");
    TIMED("sum of squares", tt_cuda_sum_squares(out, x, gradient_fp32(), n, scratch, S()));
}

static void cuda_adamw_update(void *weights, float *master, const void *g, void *m, void *v,
                              const int64_t *segment_start, const unsigned char *segment_decays, int segments,
                              float lr, float beta1, float beta2, float eps, float weight_decay, int64_t step,
                              float grad_scale) {
    TIMED("adamw", tt_cuda_adamw(master, weights, g, gradient_fp32(), m, v, state.precision.moment == TT_BF16,
                                 segment_start, segment_decays, segments, lr, beta1, beta2, eps, weight_decay, step,
                                 grad_scale, S()));
}

static const tt_backend cuda_backend = {
    .name = "cuda",
    .compute_tier = TT_TIER_GPU,
    .block_alloc = cuda_block_alloc,
    .block_free = cuda_block_free,
    .copy = cuda_copy,
    .pinned_alloc = cuda_pinned_alloc,
    .pinned_free = cuda_pinned_free,
    .zero = cuda_zero,
    .synchronize = cuda_synchronize,
    .bytes_outside_arenas = tt_cuda_device_bytes_in_use,
    .upload = cuda_upload,
    .download = cuda_download,
    .copy_async = tt_cuda_copy_async,
    .copy_wait = tt_cuda_copy_wait,
    .copy_host_wait = tt_cuda_copy_host_wait,
    .copy_done = tt_cuda_copy_done,
    .copy_set_delay = tt_cuda_copy_set_delay,
    .copy_stats = tt_cuda_copy_stats,
    .timestamp = tt_cuda_timestamp,
    .timestamp_seconds = tt_cuda_timestamp_seconds,
    .copy_span = tt_cuda_copy_span,
    .configure = cuda_configure,
    .scratch_bytes = cuda_scratch_bytes,
    .attention_workspace_bytes = cuda_attention_workspace_bytes,
    .set_scratch = cuda_set_scratch,
    .embedding_forward = cuda_embedding_forward,
    .embedding_backward = cuda_embedding_backward,
    .rmsnorm_forward = cuda_rmsnorm_forward,
    .rmsnorm_backward = cuda_rmsnorm_backward,
    .linear_forward = cuda_linear_forward,
    .linear_backward = cuda_linear_backward,
    .rope_forward = cuda_rope_forward,
    .rope_backward = cuda_rope_backward,
    .attention_forward = cuda_attention_forward,
    .attention_backward = cuda_attention_backward,
    .swiglu_forward = cuda_swiglu_forward,
    .swiglu_backward = cuda_swiglu_backward,
    .add = cuda_add,
    .dropout_scale = cuda_dropout_scale,
    .lm_head_loss = cuda_lm_head_loss,
    .sum_squares = cuda_sum_squares,
    .adamw_update = cuda_adamw_update,
};

const tt_backend *tt_backend_cuda(void) { return &cuda_backend; }
