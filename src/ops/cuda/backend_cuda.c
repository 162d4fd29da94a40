/* The CUDA backend. Each entry maps the untyped table signature onto the bf16 kernels
 * (ops_cuda.h), the cuBLASLt GEMMs (gemm_cuda.h) and the fused attention, all on the context's
 * compute stream. Memory: the arena is one cudaMalloc at start (block_alloc); the ops' scratch is a
 * slice of it (prepare), laid out as [GEMM workspace | per-op scratch]. Host round trips happen
 * only where an op returns a value to the host (loss, sum of squares) or needs host work (the
 * embedding backward's sort), each with one synchronisation.
 *
 * Everything lives in the context (cuda_backend): the stream, the copy engine, the cuBLASLt
 * context, the attention plans of the prepared run, the size queries' own cache of attention
 * plans, the host buffers and the op profiler. Two contexts, on one device or two, share nothing. */
#include "ops/cuda/backend_cuda.h"
#include "ops/cuda/backend_cuda_sizes.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/arena.h"
#include "core/check.h"
#include "model/quant4.h"
#include "ops/cuda/attention_cudnn.h"
#include "ops/cuda/attention_rates.h"
#include "ops/cuda/attention_flash.h"
#include "ops/cuda/attention_hopper.h"
#include "ops/cuda/copy_engine_cuda.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/gemm_cuda.h"
#include "ops/cuda/ops_cuda.h"

/* The attention kernels and workspaces for one (requested kind, workspace limit, shape). */
typedef struct attention_choice {
    tt_attention_kind forward, backward; /* resolved: cudnn, flash or simple */
    int lanes;                           /* head groups cuDNN's deterministic backward runs at once */
    size_t forward_workspace;            /* cuDNN's forward, in the op scratch */
    size_t backward_workspace;           /* what the backward uses of attention_workspace_bytes */
    bool atomic_backward;                /* cuDNN's backward with atomic dQ adds (deterministic: false) */
    bool packed;                         /* packed documents: the own kernels with document boundaries */
    bool requested_auto;                 /* attn_implementation: auto */
    char deterministic_why_not[256];     /* why cuDNN's deterministic backward is not used ("" when it is) */
    char fused_why_not[256];             /* why no fused kernel runs ("" when one does) */
    char cudnn_forward_why_not[256];     /* auto on the own backward: why cuDNN's forward is not used ("" when it is) */
    /* attn_implementation: cudnn with deterministic: true, and cuDNN's deterministic backward cannot run at this key's
     * workspace limit: the error prepare gives ("" when it can). The size queries answer for the own kernels
     * meanwhile: the sizing of attn_workspace_limit: auto asks at its least limit before the one it settles on. */
    char cudnn_refused[512];
} attention_choice;

/* The key of a choice: what the plans depend on. */
typedef struct attention_key {
    tt_attention_kind requested;
    size_t workspace_limit;
    bool nondeterministic; /* deterministic: false */
    tt_attention_shape shape;
} attention_key;

/* One attention shape of the prepared run, its kernels and cuDNN's plans (NULL when cuDNN does not run). */
typedef struct prepared_attention {
    attention_key key;
    attention_choice choice;
    tt_cudnn_attention *cudnn;
    int lanes_reported; /* the most head groups the backward ran at once, as logged */
} prepared_attention;

/* The shapes a run attends with: every layer's, or Gemma's full and sliding layers' (tt_scratch_shape.has_sliding). */
#define PREPARED_ATTENTION_SHAPES 2

/* tiertrain's own kernels (TT_ATTENTION_FLASH), all deterministic: the pipelined wgmma kernels
 * (kernels_attention_hopper_tma.cu: TMA loads by a producer warpgroup, two consumer warpgroups taking turns, three
 * in the backward's dQ kernel) at head_dim 64 and 128, else the mma.sync flash kernels. Measured on the H100
 * (test_gpu_attention, B 1, Hq 16, Hkv 8, hd 128) at T = 16k / 64k: the pipelined forward 673 / 619 TFLOP/s (cuDNN's
 * 645 / 629), the cp.async wgmma one (the same bits, kernels_attention_hopper.cu) 441 / 452, the flash one 332 /
 * 304. */
static bool own_kernels_are_pipelined(const tt_attention_shape *shape) {
    return tt_cuda_hopper_attention_supported(shape) != 0;
}

static const char *own_kernels_name(const tt_attention_shape *shape) {
    return own_kernels_are_pipelined(shape) ? "tiertrain's pipelined wgmma kernels" : "tiertrain's flash kernels";
}

/* The pipelined backward's two schedules: dQ in a kernel of its own (D alone as workspace; 7 products a step), or dQ
 * added in key order inside the dK/dV kernel by a writer thread (5 products a step; dQ in fp32 as workspace). Runs
 * take the dQ kernel: measured on the H100 (test_gpu_attention --speed, B 1, Hq 16, Hkv 8) at 16k / 64k / 256k,
 * 483.7 / 507.3 / 500.0 TFLOP/s against 404.7 / 446.9 / 454.8 for the key order (c98e7ac, one call), which is kept,
 * tested, for the next schedule. */
size_t tt_cuda_own_attention_backward_bytes(const tt_attention_shape *shape) {
    return own_kernels_are_pipelined(shape) ? tt_cuda_hopper_attention_backward_pipelined_scratch_bytes(shape, false)
                                            : tt_cuda_flash_attention_backward_scratch_bytes(shape);
}

static void own_attention_forward(void *out, float *lse, const void *q, const void *k, const void *v,
                                  const tt_attention_shape *shape, cudaStream_t stream) {
    if (own_kernels_are_pipelined(shape)) tt_cuda_hopper_attention_forward_pipelined(out, lse, q, k, v, shape, stream);
    else tt_cuda_flash_attention_forward(out, lse, q, k, v, shape, stream);
}

static void own_attention_backward(void *dq, void *dk, void *dv, const void *dout, const void *out, const float *lse,
                                   const void *q, const void *k, const void *v, const tt_attention_shape *shape,
                                   void *scratch, size_t scratch_bytes, cudaStream_t stream) {
    if (own_kernels_are_pipelined(shape))
        tt_cuda_hopper_attention_backward_pipelined(dq, dk, dv, dout, out, lse, q, k, v, shape, scratch, scratch_bytes,
                                                    false, stream);
    else tt_cuda_flash_attention_backward(dq, dk, dv, dout, out, lse, q, k, v, shape, scratch, stream);
}

/* Answers of the size queries, kept so that asking again builds nothing; the cuDNN plans of the
 * latest answer are kept too, for prepare to adopt when it asks the same. */
#define QUERY_CACHE 8

/* side_wait's events: a ticket's event is re-recorded SIDE_EVENTS tickets later, after which waiting for it waits
 * for the later one (the side stream runs in order: later is done implies earlier is: right, but later). zero_stage
 * 1 and 2 issue a broadcast a unit after the update and wait for each in the next forward, so the ring holds more
 * than the units of the largest models (Llama-70B: 82) with sequence parallel's exchanges between them. */
#define SIDE_EVENTS 512

typedef struct cuda_backend {
    int device;
    cudaStream_t stream; /* where the ops issue: compute_stream, or between side_begin and side_end side_stream */
    cudaStream_t compute_stream;
    /* the side queue: its stream, the event it starts after, and an event per recent ticket */
    cudaStream_t side_stream;
    cudaEvent_t side_start, side_done[SIDE_EVENTS];
    uint64_t side_tickets;
    unsigned side_delay_max_us, side_delay_seed; /* race stress (copy_set_delay): each section first idles */
    tt_cuda_copy_engine *copies;
    size_t used_before; /* device bytes in use before the backend started */
    size_t arena_bytes; /* bytes handed out by block_alloc */

    /* The size queries' cache: never read by the ops. */
    attention_key query_key[QUERY_CACHE];
    attention_choice query_choice[QUERY_CACHE];
    int queries; /* entries filled, up to QUERY_CACHE; the next one written is queries % QUERY_CACHE */
    attention_key latest_key;
    tt_cudnn_attention *latest_cudnn; /* the plans of latest_key, or NULL */

    /* The prepared run. */
    bool prepared;
    tt_backend_settings settings;
    tt_scratch_shape scratch_shape;
    unsigned char *scratch; /* [GEMM workspace | op scratch] */
    size_t scratch_bytes;
    tt_cuda_gemm_context *gemm;
    prepared_attention attention[PREPARED_ATTENTION_SHAPES];
    int attention_shapes; /* entries of attention in use: 1, or 2 for a run with sliding and full layers */

    /* Host buffers of the embedding backward's sort and the loss, sized at prepare. */
    int64_t host_tokens, host_vocab;
    int32_t *host_ids, *host_order, *host_starts, *host_segment_tokens, *host_counts, *host_targets;
    double *host_chunk_sums;
    int64_t host_chunks;

    struct profiler *prof;              /* TT_CUDA_PROFILE=1, else NULL */
    tt_adamw_8bit_maps adamw_8bit_maps; /* bitsandbytes' quantization maps, built once (kernel arguments) */
} cuda_backend;

/* The backend's device for the calling thread (CUDA's current device is per thread). */
static void use_device(const cuda_backend *cuda) { TT_CUDA_CHECK(cudaSetDevice(cuda->device)); }

bool tt_cuda_device_query(int device, char *name, size_t name_size, size_t *free_bytes, size_t *total_bytes) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count <= device) {
        (void)cudaGetLastError(); /* no driver or no GPU: clear the sticky error */
        return false;
    }
    struct cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) return false;
    snprintf(name, name_size, "%s", prop.name);
    TT_CUDA_CHECK(cudaSetDevice(device));
    TT_CUDA_CHECK(cudaMemGetInfo(free_bytes, total_bytes));
    return true;
}

static size_t cuda_bytes_outside_arenas(void *ctx) {
    const cuda_backend *cuda = ctx;
    use_device(cuda);
    size_t free_bytes = 0, total_bytes = 0;
    TT_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    size_t used = total_bytes - free_bytes;
    size_t outside = cuda->used_before + cuda->arena_bytes;
    return used > outside ? used - outside : 0;
}

static bool gradient_fp32(const cuda_backend *cuda) { return cuda->settings.precision.gradient == TT_F32; }

/* ---- op profiler (TT_CUDA_PROFILE=1): device time per op kind, from CUDA events around each
 * call, printed to stderr at the end of the run. For finding where a step's time goes; off by default (the
 * events would cost launch time). It counts every call of the run, the first step's one-time costs
 * included (the first launch of each kernel: about 140 ms of a 4k Qwen3-1.7B step on an H100): the
 * steady state is the difference of two runs of different lengths. (A hang with cuDNN's head-group
 * backward seen in an earlier version no longer reproduces: 16k and 64k profiled on the device.) ---- */

#define PROFILE_EVENTS 16384
#define PROFILE_KINDS 64

typedef struct profiler {
    cudaEvent_t start[PROFILE_EVENTS], stop[PROFILE_EVENTS];
    const char *pending_name[PROFILE_EVENTS];
    int pending;
    const char *name[PROFILE_KINDS];
    double ms[PROFILE_KINDS];
    long calls[PROFILE_KINDS];
    int kinds;
} profiler;

static void profile_flush(cuda_backend *cuda) {
    profiler *prof = cuda->prof;
    if (!prof || !prof->pending) return;
    TT_CUDA_CHECK(cudaStreamSynchronize(cuda->compute_stream)); /* the ops' events are on either queue */
    TT_CUDA_CHECK(cudaStreamSynchronize(cuda->side_stream));
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

/* Printed when the run is released (the end of a run). */
static void profile_report(cuda_backend *cuda) {
    profiler *prof = cuda->prof;
    if (!prof) return;
    profile_flush(cuda);
    double total = 0;
    for (int k = 0; k < prof->kinds; k++) total += prof->ms[k];
    fprintf(stderr, "cuda op profile (device ms, all calls of the run):\n");
    for (int k = 0; k < prof->kinds; k++)
        fprintf(stderr, "  %-34s %10.1f ms %6.1f%% %8ld calls\n", prof->name[k], prof->ms[k],
                total > 0 ? 100.0 * prof->ms[k] / total : 0.0, prof->calls[k]);
    fprintf(stderr, "  %-34s %10.1f ms\n", "total", total);
}

static void profile_start_up(cuda_backend *cuda) {
    const char *env = getenv("TT_CUDA_PROFILE");
    if (!env || strcmp(env, "1") != 0) return;
    profiler *prof = tt_xcalloc(1, sizeof *prof, "the op profiler");
    for (int i = 0; i < PROFILE_EVENTS; i++) {
        TT_CUDA_CHECK(cudaEventCreate(&prof->start[i]));
        TT_CUDA_CHECK(cudaEventCreate(&prof->stop[i]));
    }
    cuda->prof = prof;
}

static void profile_shut_down(cuda_backend *cuda) {
    profiler *prof = cuda->prof;
    if (!prof) return;
    for (int i = 0; i < PROFILE_EVENTS; i++) {
        TT_CUDA_CHECK(cudaEventDestroy(prof->start[i]));
        TT_CUDA_CHECK(cudaEventDestroy(prof->stop[i]));
    }
    free(prof);
    cuda->prof = NULL;
}

static int profile_begin(cuda_backend *cuda, const char *name) {
    profiler *prof = cuda->prof;
    if (!prof) return -1;
    if (prof->pending == PROFILE_EVENTS) profile_flush(cuda);
    const int i = prof->pending++;
    prof->pending_name[i] = name;
    TT_CUDA_CHECK(cudaEventRecord(prof->start[i], cuda->stream));
    return i;
}

static void profile_end(cuda_backend *cuda, int i) {
    if (i >= 0) TT_CUDA_CHECK(cudaEventRecord(cuda->prof->stop[i], cuda->stream));
}

/* The statements after name, timed as one call of op kind `name` (on the context `cuda` in scope). */
#define TIMED(name, ...)                              \
    do {                                              \
        const int timed_ = profile_begin(cuda, name); \
        __VA_ARGS__;                                  \
        profile_end(cuda, timed_);                    \
    } while (0)

/* ---- memory ---- */

static void *cuda_block_alloc(void *ctx, size_t bytes) {
    cuda_backend *cuda = ctx;
    use_device(cuda);
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
    cuda->arena_bytes += bytes;
    return p;
}

static void cuda_block_free(void *ctx, void *base) {
    cuda_backend *cuda = ctx;
    if (!base) return;
    use_device(cuda);
    TT_CUDA_CHECK(cudaFree(base));
}

/* Page-locked host memory: page-aligned host memory (O_DIRECT disk IO needs whole pages, and
 * cudaHostAlloc does not align small blocks to pages), registered with CUDA. If the OS refuses
 * to lock it, it stays pageable, with a warning (copies from it run at a fraction of the speed:
 * 6.5-9.7 GB/s against 53 GB/s measured on the device). */
static void *cuda_pinned_alloc(void *ctx, size_t bytes) {
    use_device(ctx);
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

static void cuda_pinned_free(void *ctx, void *base) {
    (void)ctx;
    if (!base) return;
    cudaError_t status = cudaHostUnregister(base);
    if (status == cudaErrorHostMemoryNotRegistered) (void)cudaGetLastError(); /* the pageable fallback */
    else TT_CUDA_CHECK(status);
    tt_host_block_free(base);
}

static void cuda_copy(void *ctx, void *dst, const void *src, size_t bytes) {
    cuda_backend *cuda = ctx;
    if (bytes) TIMED("copy", TT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, cuda->stream)));
}

static void cuda_copy_2d(void *ctx, void *dst, size_t dst_pitch, const void *src, size_t src_pitch, size_t width,
                         size_t rows) {
    cuda_backend *cuda = ctx;
    if (width && rows)
        TIMED("copy", TT_CUDA_CHECK(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, rows,
                                                      cudaMemcpyDeviceToDevice, cuda->stream)));
}

static void cuda_zero(void *ctx, void *dst, size_t bytes) {
    cuda_backend *cuda = ctx;
    if (bytes) TIMED("zero", TT_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, cuda->stream)));
}

static void cuda_synchronize(void *ctx) {
    const cuda_backend *cuda = ctx;
    TT_CUDA_CHECK(cudaStreamSynchronize(cuda->compute_stream));
    TT_CUDA_CHECK(cudaStreamSynchronize(cuda->side_stream));
}

static void cuda_side_begin(void *ctx) {
    cuda_backend *cuda = ctx;
    TT_CHECK(cuda->stream == cuda->compute_stream, "side_begin inside the side queue");
    use_device(cuda);
    TT_CUDA_CHECK(cudaEventRecord(cuda->side_start, cuda->compute_stream));
    TT_CUDA_CHECK(cudaStreamWaitEvent(cuda->side_stream, cuda->side_start, 0));
    if (cuda->side_delay_max_us)
        tt_cuda_idle(cuda->side_stream, 1000ull * (rand_r(&cuda->side_delay_seed) % (cuda->side_delay_max_us + 1)));
    cuda->stream = cuda->side_stream;
}

static uint64_t cuda_side_end(void *ctx) {
    cuda_backend *cuda = ctx;
    TT_CHECK(cuda->stream == cuda->side_stream, "side_end without side_begin");
    const uint64_t ticket = ++cuda->side_tickets;
    TT_CUDA_CHECK(cudaEventRecord(cuda->side_done[ticket % SIDE_EVENTS], cuda->side_stream));
    cuda->stream = cuda->compute_stream;
    return ticket;
}

static void cuda_side_wait(void *ctx, uint64_t ticket) {
    cuda_backend *cuda = ctx;
    TT_CHECK(cuda->stream == cuda->compute_stream && ticket <= cuda->side_tickets,
             "side_wait for ticket %llu (%llu issued)%s", (unsigned long long)ticket,
             (unsigned long long)cuda->side_tickets,
             cuda->stream == cuda->compute_stream ? "" : " inside the side queue");
    if (ticket == 0) return;
    TT_CUDA_CHECK(cudaStreamWaitEvent(cuda->compute_stream, cuda->side_done[ticket % SIDE_EVENTS], 0));
}

static void *cuda_side_stream(void *ctx) { return ((cuda_backend *)ctx)->side_stream; }

static bool cuda_side_active(void *ctx) {
    const cuda_backend *cuda = ctx;
    return cuda->stream == cuda->side_stream;
}

/* Both wait for the copy only (on the queue the ops issue to now), not for the other queue's work: a micro-batch's
 * upload does not wait for the previous one's gradient sums. */
static void cuda_upload(void *ctx, void *dst, const void *host_src, size_t bytes) {
    const cuda_backend *cuda = ctx;
    if (!bytes) return;
    TT_CUDA_CHECK(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, cuda->stream));
    TT_CUDA_CHECK(cudaStreamSynchronize(cuda->stream));
}

static void cuda_download(void *ctx, void *host_dst, const void *src, size_t bytes) {
    const cuda_backend *cuda = ctx;
    if (!bytes) return;
    TT_CUDA_CHECK(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, cuda->stream));
    TT_CUDA_CHECK(cudaStreamSynchronize(cuda->stream));
}

/* ---- the copy engine and the timeline: the context's engine ---- */

static uint64_t cuda_copy_async(void *ctx, void *dst, const void *src, size_t bytes, bool to_host, uint64_t after) {
    return tt_cuda_copy_async(((cuda_backend *)ctx)->copies, dst, src, bytes, to_host, after);
}
static void cuda_copy_wait(void *ctx, uint64_t ticket) { tt_cuda_copy_wait(((cuda_backend *)ctx)->copies, ticket); }
static void cuda_copy_host_wait(void *ctx, uint64_t ticket) {
    tt_cuda_copy_host_wait(((cuda_backend *)ctx)->copies, ticket);
}
static bool cuda_copy_done(void *ctx, uint64_t ticket) {
    return tt_cuda_copy_done(((cuda_backend *)ctx)->copies, ticket);
}
static void cuda_copy_set_delay(void *ctx, unsigned max_us) {
    ((cuda_backend *)ctx)->side_delay_max_us = max_us;
    tt_cuda_copy_set_delay(((cuda_backend *)ctx)->copies, max_us);
}
static void cuda_copy_stats(void *ctx, size_t *to_host, size_t *to_device, double *copy_seconds,
                            double *exposed_seconds) {
    tt_cuda_copy_stats(((cuda_backend *)ctx)->copies, to_host, to_device, copy_seconds, exposed_seconds);
}
static uint64_t cuda_timestamp(void *ctx) { return tt_cuda_timestamp(((cuda_backend *)ctx)->copies); }
static double cuda_timestamp_seconds(void *ctx, uint64_t id) {
    return tt_cuda_timestamp_seconds(((cuda_backend *)ctx)->copies, id);
}
static bool cuda_copy_span(void *ctx, uint64_t ticket, double *start, double *end) {
    return tt_cuda_copy_span(((cuda_backend *)ctx)->copies, ticket, start, end);
}

/* ---- attention: which kernels, and their plans ---- */

static size_t floats(int64_t n) { return (size_t)n * sizeof(float); }

static size_t max_size(size_t a, size_t b) { return a > b ? a : b; }

static size_t align_256(size_t n) { return (n + 255) & ~(size_t)255; }

/* What the attention plans depend on (every field of the shape, compared one by one). */
static bool same_key(const attention_key *a, const attention_key *b) {
    const tt_attention_shape *x = &a->shape, *y = &b->shape;
    return a->requested == b->requested && a->workspace_limit == b->workspace_limit &&
           a->nondeterministic == b->nondeterministic && x->batch == y->batch && x->seq_len == y->seq_len &&
           x->num_heads == y->num_heads && x->num_kv_heads == y->num_kv_heads && x->head_dim == y->head_dim &&
           x->scale == y->scale && x->sliding_window == y->sliding_window && x->documents == y->documents &&
           x->softcap == y->softcap;
}

bool tt_cuda_auto_takes_own_backward(tt_attention_kind requested, bool nondeterministic,
                                     const tt_attention_shape *shape) {
    return requested == TT_ATTENTION_AUTO && !shape->documents && shape->head_dim == 128 &&
           own_kernels_are_pipelined(shape) &&
           (!nondeterministic || tt_attention_own_backward_faster_than_atomic(shape));
}

bool tt_cuda_auto_takes_own_forward(tt_attention_kind requested, bool nondeterministic,
                                    const tt_attention_shape *shape) {
    return tt_cuda_auto_takes_own_backward(requested, nondeterministic, shape) &&
           tt_attention_own_forward_faster(shape);
}

static bool auto_takes_own_backward(const attention_key *key) {
    return tt_cuda_auto_takes_own_backward(key->requested, key->nondeterministic, &key->shape);
}

/* Auto on the own backward takes the pipelined forward too where its cell of the measured table is faster than
 * cuDNN's (attention_rates.c: H200, 4k-16k at Hq 16, 4k-8k at Hq 32, and from 128k). */
static bool auto_takes_own_forward(const attention_key *key) {
    return tt_cuda_auto_takes_own_forward(key->requested, key->nondeterministic, &key->shape);
}

static attention_key key_of(const tt_backend_settings *settings, const tt_attention_shape *shape) {
    attention_key key = {.requested = settings->attention,
                         .workspace_limit = settings->attention_workspace_limit,
                         .nondeterministic = settings->nondeterministic,
                         .shape = *shape};
    key.shape.positions = NULL; /* the choice depends on the shape, not on this micro-batch's positions */
    /* no dP limit in this choice: one key (and one cuDNN build) whatever limit the sizing of attn_workspace_limit:
     * auto asks at */
    if (auto_takes_own_backward(&key)) key.workspace_limit = 0;
    return key;
}

/* cuDNN's deterministic backward within attn_workspace_limit. When one call cannot hold every head's dP,
 * the backward runs head groups one after another, and a call's engine then keeps the GPU only part busy:
 * two groups at once, each with half the limit, are faster than one with all of it (H100, 64k tokens, 16
 * heads, 8 kv: 1 GiB per call in 2 lanes 417 TFLOP/s against 2 GiB in one 376; 2 GiB in 2 lanes 442 against
 * 4 GiB in one 411). The split decides the calls and so the bits; it depends on the shape and the limit
 * only. One lane where the whole dP fits the limit, or the halves cannot run (one kv head: one group). */
#define ATTENTION_LANES 2

static tt_cudnn_attention *create_deterministic_cudnn(const attention_key *key, int *lanes, char *why_not,
                                                      size_t size) {
    const size_t limit = key->workspace_limit;
    const tt_attention_shape *shape = &key->shape;
    const double whole_dp =
        2.0 * (double)shape->batch * (double)shape->num_heads * (double)shape->seq_len * (double)shape->seq_len;
    if (whole_dp > (double)limit) {
        tt_cudnn_attention *a = tt_cudnn_attention_create(shape, 1, limit / ATTENTION_LANES, why_not, size);
        if (a && tt_cudnn_attention_lane_bytes(a) > 0 && tt_cudnn_attention_backward_is_deterministic(a)) {
            *lanes = ATTENTION_LANES;
            return a;
        }
        tt_cudnn_attention_destroy(a);
    }
    *lanes = 1;
    tt_cudnn_attention *a = tt_cudnn_attention_create(shape, 1, limit, why_not, size);
    if (a && !tt_cudnn_attention_backward_is_deterministic(a)) {
        /* the graph adds dQ without atomics, but the only engine cuDNN has for it carries its nondeterministic note:
         * not the promise deterministic: true makes */
        snprintf(why_not, size, "cuDNN's engine for the deterministic graph is noted as nondeterministic");
        tt_cudnn_attention_destroy(a);
        a = NULL;
    }
    return a;
}

/* Resolves the attention kernels for a key: the requested kind, or for auto the fastest that
 * supports the shape (cuDNN, then tiertrain's flash kernels, then the reference kernels), and
 * builds cuDNN's plans when cuDNN runs (returned through *cudnn, NULL otherwise). An explicit
 * request the shape or the device's cuDNN cannot serve is an error, never a silent fallback.
 * Logs nothing: prepare tells what the run got (log_choice). */
static attention_choice resolve_attention(const attention_key *key, tt_cudnn_attention **cudnn) {
    const tt_attention_shape *shape = &key->shape;
    const tt_attention_kind want = key->requested;
    attention_choice c = {.lanes = 1, .requested_auto = want == TT_ATTENTION_AUTO};
    char why_not[256] = "";
    const bool flash = tt_cuda_flash_attention_supported(shape);
    if (shape->documents) {
        /* packed documents: the own kernels take the document boundaries; the cuDNN graphs built here have no
         * document mask, so cuDNN is refused rather than run over the documents' boundaries */
        if (want == TT_ATTENTION_CUDNN)
            tt_die("attn_implementation: cudnn cannot run with sample_packing: its fused attention here takes no "
                   "document boundaries, so packed documents would attend to each other. Use attn_implementation: "
                   "auto (tiertrain's flash kernels with document boundaries) or remove sample_packing");
        if (want == TT_ATTENTION_FLASH && !flash)
            tt_die(
                "attn_implementation: flash needs head_dim 64 or 128, no sliding window and no soft-capping (this model: head_dim "
                "%lld, window %lld). Use attn_implementation: auto",
                (long long)shape->head_dim, (long long)shape->sliding_window);
        c.packed = true;
        c.forward = c.backward = want == TT_ATTENTION_SIMPLE || !flash ? TT_ATTENTION_SIMPLE : TT_ATTENTION_FLASH;
        c.backward_workspace = c.backward == TT_ATTENTION_FLASH
                                   ? tt_cuda_own_attention_backward_bytes(shape)
                                   : floats(shape->batch * shape->num_heads * shape->seq_len);
        *cudnn = NULL;
        return c;
    }
    if (want == TT_ATTENTION_FLASH && !flash)
        tt_die(
            "attn_implementation: flash needs head_dim 64 or 128, no sliding window and no soft-capping (this model: head_dim %lld, "
            "window %lld). Use attn_implementation: auto",
            (long long)shape->head_dim, (long long)shape->sliding_window);
    /* auto, deterministic (the default): tiertrain's pipelined deterministic backward where those kernels run at
     * head_dim 128 (sm_90, no sliding window: auto_takes_own_backward; head_dim 64 was not measured against cuDNN's
     * deterministic backward), with the forward its cell of attention_rates.c says is the faster (cuDNN's, or the
     * pipelined one: auto_takes_own_forward); elsewhere cuDNN's fused attention with its deterministic backward (dQ
     * without atomics), run on groups of heads and chunks of keys whose dP fits attn_workspace_limit, two groups at a
     * time where there are several (create_deterministic_cudnn); where cuDNN cannot, the own kernels; else the
     * reference kernels. The pipelined backward ran at 483-509 / 501-507 / 493-500 TFLOP/s at 16k / 64k / 256k on the
     * H100 (c98e7ac), cuDNN's deterministic one at 372 (16k, 1 GiB of dP), 325 (64k, 1 GiB) or 415 (64k, 4 GiB) and
     * not at all at 256k. Qwen3-1.7B at 64k under checkpointing (2026-11-27): 10879 tok/s with cuDNN's deterministic
     * backward in 8 head groups x 11 key chunks, 11017 with the pipelined kernels both ways. An explicit cudnn gets
     * cuDNN both ways, its deterministic backward unless deterministic: false; auto with deterministic: false gets
     * cuDNN's forward and atomic backward (~547 TFLOP/s from 32k on the H200, not bit-reproducible) except where the
     * cell says the pipelined kernels are faster still (4k-8k at Hq 16, 4k at Hq 32). */
    bool cudnn_backward = false;
    tt_cudnn_attention *a = NULL;
    const tt_attention_rates *cell = tt_attention_rates_for(shape);
    if (want == TT_ATTENTION_AUTO && key->nondeterministic && !auto_takes_own_backward(key)) {
        a = tt_cudnn_attention_create(shape, 0, key->workspace_limit, why_not, sizeof why_not);
        cudnn_backward = c.atomic_backward = a != NULL;
    }
    if (auto_takes_own_backward(key)) {
        if (key->nondeterministic)
            snprintf(c.deterministic_why_not, sizeof c.deterministic_why_not,
                     "with deterministic: false, tiertrain's pipelined backward is still the faster at this length "
                     "(%.0f TFLOP/s against cuDNN's atomic %.0f at %lld tokens, Hq %lld on the H200)",
                     cell->own_backward, cell->cudnn_atomic_backward, cell->seq_len, cell->num_heads);
        else
            snprintf(c.deterministic_why_not, sizeof c.deterministic_why_not,
                     "tiertrain's pipelined backward is the faster deterministic one at head_dim 128 (H100: 456 to "
                     "512 TFLOP/s at 64k against cuDNN's 325 to 415)");
        if (auto_takes_own_forward(key)) {
            snprintf(c.cudnn_forward_why_not, sizeof c.cudnn_forward_why_not,
                     "the pipelined forward is the faster at this shape (%.0f TFLOP/s against cuDNN's %.0f at %lld "
                     "tokens, Hq %lld on the H200: attention_rates.c)",
                     cell->own_forward, cell->cudnn_forward, cell->seq_len, cell->num_heads);
        } else {
            a = tt_cudnn_attention_create(shape, 0, key->workspace_limit, why_not, sizeof why_not); /* its forward */
            if (!a)
                snprintf(c.cudnn_forward_why_not, sizeof c.cudnn_forward_why_not, "cuDNN cannot run it here: %s",
                         why_not);
        }
    } else if (want == TT_ATTENTION_AUTO && !a) {
        a = create_deterministic_cudnn(key, &c.lanes, why_not, sizeof why_not);
        cudnn_backward = a != NULL;
        if (!a) {
            snprintf(c.deterministic_why_not, sizeof c.deterministic_why_not, "%s", why_not);
            a = tt_cudnn_attention_create(shape, 0, key->workspace_limit, why_not, sizeof why_not);
        }
    } else if (want == TT_ATTENTION_CUDNN && key->nondeterministic) {
        a = tt_cudnn_attention_create(shape, 0, key->workspace_limit, why_not, sizeof why_not);
        if (!a)
            tt_die("attn_implementation: cudnn is not available for this run: %s. Use attn_implementation: auto",
                   why_not);
        c.atomic_backward = true;
    } else if (want == TT_ATTENTION_CUDNN) {
        a = create_deterministic_cudnn(key, &c.lanes, why_not, sizeof why_not);
        if (!a) {
            char limit[32];
            snprintf(c.cudnn_refused, sizeof c.cudnn_refused,
                     "attn_implementation: cudnn with deterministic: true (the default) runs cuDNN's deterministic "
                     "backward, which cannot run here with attn_workspace_limit %s: %s. Use attn_implementation: auto "
                     "(tiertrain's deterministic kernels), raise attn_workspace_limit, or set deterministic: false for "
                     "cuDNN's backward that adds dQ with atomics",
                     tt_format_bytes(key->workspace_limit, limit, sizeof limit), why_not);
        }
    }
    if (want == TT_ATTENTION_CUDNN && !c.cudnn_refused[0]) {
        c.forward = c.backward = TT_ATTENTION_CUDNN;
    } else if (want == TT_ATTENTION_SIMPLE) {
        c.forward = c.backward = TT_ATTENTION_SIMPLE;
    } else {
        c.forward = a && want == TT_ATTENTION_AUTO ? TT_ATTENTION_CUDNN
                    : flash                        ? TT_ATTENTION_FLASH
                                                   : TT_ATTENTION_SIMPLE;
        c.backward = cudnn_backward && want == TT_ATTENTION_AUTO ? TT_ATTENTION_CUDNN
                     : flash                                     ? TT_ATTENTION_FLASH
                                                                 : TT_ATTENTION_SIMPLE;
        if (!a && !flash) snprintf(c.fused_why_not, sizeof c.fused_why_not, "%s", why_not);
    }
    if (c.forward != TT_ATTENTION_CUDNN && a) {
        tt_cudnn_attention_destroy(a);
        a = NULL;
    }
    c.forward_workspace = c.forward == TT_ATTENTION_CUDNN ? tt_cudnn_attention_forward_workspace_bytes(a) : 0;
    switch (c.backward) {
    case TT_ATTENTION_CUDNN:
        c.backward_workspace =
            tt_cudnn_attention_workspace_bytes(a) + (size_t)(c.lanes - 1) * tt_cudnn_attention_lane_bytes(a);
        break;
    case TT_ATTENTION_FLASH: c.backward_workspace = tt_cuda_own_attention_backward_bytes(shape); break;
    default: c.backward_workspace = floats(shape->batch * shape->num_heads * shape->seq_len); break;
    }
    *cudnn = a;
    return c;
}

/* The choice for a key, from the queries' cache or resolved into it. Pure as far as the run goes:
 * only the cache changes, and the answer for a key never does. */
static const attention_choice *cached_attention(const cuda_backend *cuda, const attention_key *key) {
    for (int i = 0; i < cuda->queries && i < QUERY_CACHE; i++)
        if (same_key(&cuda->query_key[i], key)) return &cuda->query_choice[i];
    return NULL;
}

static const attention_choice *query_attention(cuda_backend *cuda, const attention_key *key) {
    const attention_choice *cached = cached_attention(cuda, key);
    if (cached) return cached;
    use_device(cuda);
    tt_cudnn_attention *plans = NULL;
    const attention_choice choice = resolve_attention(key, &plans);
    if (cuda->latest_cudnn) tt_cudnn_attention_destroy(cuda->latest_cudnn); /* only the latest plans are kept */
    cuda->latest_cudnn = plans;
    cuda->latest_key = *key;
    const int slot = cuda->queries++ % QUERY_CACHE;
    cuda->query_key[slot] = *key;
    cuda->query_choice[slot] = choice;
    return &cuda->query_choice[slot];
}

size_t tt_cuda_op_scratch_bytes(const tt_scratch_shape *s, size_t attention_forward_workspace) {
    const int64_t N = s->tokens, hd = s->attention.head_dim;
    const int64_t q_dim = s->attention.num_heads * hd, kv_dim = s->attention.num_kv_heads * hd;
    size_t need = floats(tt_cuda_rmsnorm_backward_scratch(N, s->hidden));
    need = max_size(need, floats(tt_cuda_rmsnorm_backward_scratch(N * s->attention.num_heads, hd)));
    int64_t widest = q_dim > kv_dim ? q_dim : kv_dim;
    if (s->hidden > widest) widest = s->hidden;
    need = max_size(need, floats(tt_cuda_column_sum_scratch(N, widest)));
    need = max_size(need, sizeof(double) * (TT_CUDA_SUM_SQUARES_BLOCKS + 1));
    need = max_size(need, attention_forward_workspace); /* the backward's: attention_workspace_bytes */
    need = max_size(need, tt_cuda_attention_cached_scratch_bytes(s->attention.num_heads, hd)); /* generation */
    need = max_size(need, sizeof(int32_t) * (size_t)(3 * N + 1)); /* embedding backward order */
    const int64_t chunks = s->loss_chunk > 0 ? (N + s->loss_chunk - 1) / s->loss_chunk : 1;
    need = max_size(need, align_256(floats(s->loss_chunk)) + sizeof(double) * (size_t)chunks); /* loss */
    return align_256(need);
}

static void check_settings(const tt_backend_settings *settings) {
    const tt_precision *p = &settings->precision;
    TT_CHECK(p->activation == TT_BF16, "the CUDA backend computes in bf16");
    TT_CHECK(p->gradient == TT_F32 || p->gradient == TT_BF16, "gradients are fp32 or bf16");
    TT_CHECK(p->moment == TT_F32 || p->moment == TT_BF16, "AdamW moments are fp32 or bf16");
}

static size_t cuda_scratch_bytes(void *ctx, const tt_backend_settings *settings, const tt_scratch_shape *shape) {
    check_settings(settings);
    const attention_key key = key_of(settings, &shape->attention);
    size_t forward_workspace = query_attention(ctx, &key)->forward_workspace;
    if (shape->has_sliding) {
        const attention_key sliding = key_of(settings, &shape->sliding_attention);
        forward_workspace = max_size(forward_workspace, query_attention(ctx, &sliding)->forward_workspace);
    }
    return TT_CUDA_GEMM_WORKSPACE_BYTES + tt_cuda_op_scratch_bytes(shape, forward_workspace);
}

static size_t cuda_attention_workspace_bytes(void *ctx, const tt_backend_settings *settings,
                                             const tt_attention_shape *shape) {
    check_settings(settings);
    const attention_key key = key_of(settings, shape);
    return align_256(query_attention(ctx, &key)->backward_workspace);
}

/* ---- prepare and release ---- */

static void free_host_buffers(cuda_backend *cuda) {
    free(cuda->host_ids);
    free(cuda->host_order);
    free(cuda->host_starts);
    free(cuda->host_segment_tokens);
    free(cuda->host_counts);
    free(cuda->host_targets);
    free(cuda->host_chunk_sums);
    cuda->host_ids = cuda->host_order = cuda->host_starts = cuda->host_segment_tokens = cuda->host_counts = NULL;
    cuda->host_targets = NULL;
    cuda->host_chunk_sums = NULL;
    cuda->host_tokens = cuda->host_chunks = cuda->host_vocab = 0;
}

/* Host buffers of the ops that work on the host (the loss sum, the embedding backward's sort). */
static void allocate_host_buffers(cuda_backend *cuda, int64_t tokens, int64_t vocab, int64_t chunks) {
    cuda->host_ids = tt_xmalloc(sizeof(int32_t) * (size_t)tokens, "embedding backward ids");
    cuda->host_order = tt_xmalloc(sizeof(int32_t) * (size_t)tokens, "embedding backward order");
    cuda->host_starts = tt_xmalloc(sizeof(int32_t) * (size_t)(tokens + 1), "embedding backward starts");
    cuda->host_segment_tokens = tt_xmalloc(sizeof(int32_t) * (size_t)tokens, "embedding backward tokens");
    cuda->host_targets = tt_xmalloc(sizeof(int32_t) * (size_t)tokens, "loss targets");
    cuda->host_tokens = tokens;
    /* tt_embedding_backward_order takes counts[vocab + 1] */
    cuda->host_counts = tt_xmalloc(sizeof(int32_t) * (size_t)(vocab + 1), "embedding backward counts");
    cuda->host_vocab = vocab;
    cuda->host_chunk_sums = tt_xmalloc(sizeof(double) * (size_t)chunks, "loss chunk sums");
    cuda->host_chunks = chunks;
}

/* Tells what the run's attention got, once per prepare. */
static void log_choice(const attention_choice *c, const tt_cudnn_attention *cudnn, const tt_attention_shape *shape) {
    if (c->packed)
        tt_info("attention: packed documents (sample_packing): %s with document boundaries%s",
                c->forward == TT_ATTENTION_FLASH ? own_kernels_name(shape) : "the reference kernels",
                c->requested_auto ? " (auto; cuDNN's attention here has no document mask)" : "");
    if (c->deterministic_why_not[0])
        tt_info("attention: cuDNN's deterministic backward is not used: %s", c->deterministic_why_not);
    if (c->fused_why_not[0])
        tt_info("attention: no fused kernel for head_dim %lld%s%s (cuDNN: %s); using the reference kernels (slow)",
                (long long)shape->head_dim, shape->sliding_window ? " with a sliding window" : "",
                shape->softcap ? " with soft-capping" : "", c->fused_why_not);
    if (c->atomic_backward)
        tt_warn("deterministic: false: cuDNN's attention backward adds dQ with atomics; gradients are not "
                "bit-reproducible run to run (deterministic: true is)");
    if (c->cudnn_forward_why_not[0])
        tt_info("attention: cuDNN's forward is not used (%s); the pipelined kernels run it too",
                c->cudnn_forward_why_not);
    if (cudnn && c->backward != TT_ATTENTION_CUDNN) /* cuDNN's forward only; the description names cuDNN's version */
        tt_info("attention: %s", tt_cudnn_attention_describe_forward(cudnn));
    else if (cudnn)
        tt_info("attention: %s%s", tt_cudnn_attention_describe(cudnn), c->lanes > 1 ? "; 2 head groups at a time" : "");
    if (c->forward == TT_ATTENTION_FLASH || c->backward == TT_ATTENTION_FLASH) {
        tt_info("attention: %s%s%s (deterministic; the backward's workspace is %.1f MiB%s)", own_kernels_name(shape),
                c->forward == TT_ATTENTION_FLASH ? " forward" : "",
                c->backward == TT_ATTENTION_FLASH ? (c->forward == TT_ATTENTION_FLASH ? " and backward" : " backward")
                                                  : "",
                (double)c->backward_workspace / (1024.0 * 1024.0),
                c->backward == TT_ATTENTION_FLASH && tt_cuda_hopper_attention_supported(shape)
                    ? ", dQ in a kernel of its own"
                    : "");
    }
}

/* Lets go of the prepared run's plans, GEMM context and host buffers (the scratch is the caller's). */
static void unprepare(cuda_backend *cuda) {
    if (cuda->gemm) tt_cuda_gemm_destroy(cuda->gemm);
    cuda->gemm = NULL;
    free_host_buffers(cuda);
    for (int i = 0; i < cuda->attention_shapes; i++)
        if (cuda->attention[i].cudnn) tt_cudnn_attention_destroy(cuda->attention[i].cudnn);
    memset(cuda->attention, 0, sizeof cuda->attention);
    cuda->attention_shapes = 0;
    cuda->scratch = NULL;
    cuda->scratch_bytes = 0;
    cuda->prepared = false;
}

/* The plans of one attention shape: the ones the queries built for the same key (none to build when cuDNN does not
 * run), else built now. */
static void prepare_attention(cuda_backend *cuda, prepared_attention *p, attention_key key) {
    p->key = key;
    const attention_choice *cached = cached_attention(cuda, &key);
    if (cached && cached->forward != TT_ATTENTION_CUDNN) {
        p->choice = *cached;
    } else if (cached && cuda->latest_cudnn && same_key(&cuda->latest_key, &key)) {
        p->choice = *cached;
        p->cudnn = cuda->latest_cudnn; /* adopted: the queries keep their answer, not the plans */
        cuda->latest_cudnn = NULL;
    } else {
        p->choice = resolve_attention(&key, &p->cudnn);
    }
    if (p->choice.cudnn_refused[0]) tt_die("%s", p->choice.cudnn_refused);
    p->lanes_reported = 0;
    log_choice(&p->choice, p->cudnn, &key.shape);
}

static void cuda_prepare(void *ctx, const tt_backend_settings *settings, const tt_scratch_shape *shape, void *scratch,
                         size_t scratch_bytes) {
    cuda_backend *cuda = ctx;
    check_settings(settings);
    use_device(cuda);
    unprepare(cuda);
    cuda->settings = *settings;
    cuda->scratch_shape = *shape;
    prepare_attention(cuda, &cuda->attention[0], key_of(settings, &shape->attention));
    cuda->attention_shapes = 1;
    size_t forward_workspace = cuda->attention[0].choice.forward_workspace;
    if (shape->has_sliding) {
        prepare_attention(cuda, &cuda->attention[1], key_of(settings, &shape->sliding_attention));
        cuda->attention_shapes = 2;
        forward_workspace = max_size(forward_workspace, cuda->attention[1].choice.forward_workspace);
    }
    const size_t need = TT_CUDA_GEMM_WORKSPACE_BYTES + tt_cuda_op_scratch_bytes(shape, forward_workspace);
    TT_CHECK(scratch && scratch_bytes >= need, "the GPU op scratch is %zu bytes; the run needs %zu (scratch_bytes)",
             scratch_bytes, need);
    cuda->scratch = scratch;
    cuda->scratch_bytes = scratch_bytes;
    cuda->gemm = tt_cuda_gemm_create(scratch, TT_CUDA_GEMM_WORKSPACE_BYTES);
    /* The host side of the loss and the embedding backward, once: nothing is allocated in a step. */
    const int64_t chunk = shape->loss_chunk > 0 ? shape->loss_chunk : 1;
    allocate_host_buffers(cuda, shape->tokens, shape->vocab, (shape->tokens + chunk - 1) / chunk);
    cuda->prepared = true;
}

static void cuda_release(void *ctx) {
    cuda_backend *cuda = ctx;
    if (!cuda->prepared) return;
    use_device(cuda);
    profile_report(cuda);
    unprepare(cuda);
}

/* The op scratch (after the GEMM workspace). */
static void *op_scratch(const cuda_backend *cuda, size_t bytes, const char *what) {
    const size_t have = cuda->scratch_bytes - TT_CUDA_GEMM_WORKSPACE_BYTES;
    if (bytes > have)
        tt_check_failed(__FILE__, __LINE__, "op_scratch", "GPU op scratch too small for %s: %zu > %zu", what, bytes,
                        have);
    return cuda->scratch + TT_CUDA_GEMM_WORKSPACE_BYTES;
}

/* The attention ops run the prepared plans, for a prepared shape only. */
static prepared_attention *prepared_attention_for(cuda_backend *cuda, const tt_attention_shape *shape) {
    TT_CHECK(cuda->prepared, "attention before the backend was prepared");
    for (int i = 0; i < cuda->attention_shapes; i++) {
        attention_key key = cuda->attention[i].key;
        key.shape = *shape;
        key.shape.positions = NULL;
        if (same_key(&key, &cuda->attention[i].key)) return &cuda->attention[i];
    }
    const tt_attention_shape *prepared = &cuda->attention[0].key.shape;
    tt_check_failed(__FILE__, __LINE__, "prepared_attention_for",
                    "attention over B=%lld T=%lld window %lld, but the backend was prepared for B=%lld T=%lld window "
                    "%lld",
                    (long long)shape->batch, (long long)shape->seq_len, (long long)shape->sliding_window,
                    (long long)prepared->batch, (long long)prepared->seq_len, (long long)prepared->sliding_window);
    return NULL;
}

/* ---- ops ---- */

static void cuda_embedding_forward(void *ctx, void *out, const int32_t *ids, const void *table, int64_t N, int64_t D,
                                   float scale) {
    cuda_backend *cuda = ctx;
    TIMED("embedding forward", tt_cuda_embedding_forward(out, ids, table, N, D, scale, cuda->stream));
}

static void cuda_embedding_backward(void *ctx, void *dtable, const int32_t *ids, const void *dout, int64_t N, int64_t D,
                                    float scale) {
    cuda_backend *cuda = ctx;
    /* A stable sort of positions by token on the host gives every table row one block that adds
     * its positions in order: deterministic without atomics. The vocabulary bound is the
     * largest id + 1 (ids were validated against the vocabulary when the data was opened). */
    TT_CHECK(N <= cuda->host_tokens, "embedding backward over %lld tokens, host buffers for %lld", (long long)N,
             (long long)cuda->host_tokens);
    cuda_download(ctx, cuda->host_ids, ids, sizeof(int32_t) * (size_t)N);
    int32_t largest = 0;
    for (int64_t n = 0; n < N; n++)
        if (cuda->host_ids[n] > largest) largest = cuda->host_ids[n];
    TT_CHECK(largest < cuda->host_vocab, "token id %d outside the vocabulary of %lld", largest,
             (long long)cuda->host_vocab);
    int64_t segments = tt_embedding_backward_order(cuda->host_ids, N, (int64_t)largest + 1, cuda->host_order,
                                                   cuda->host_starts, cuda->host_segment_tokens, cuda->host_counts);
    int32_t *device = op_scratch(cuda, sizeof(int32_t) * (size_t)(3 * N + 1), "the embedding backward order");
    int32_t *order = device, *starts = device + N, *tokens = device + 2 * N + 1;
    TT_CUDA_CHECK(
        cudaMemcpyAsync(order, cuda->host_order, sizeof(int32_t) * (size_t)N, cudaMemcpyHostToDevice, cuda->stream));
    TT_CUDA_CHECK(cudaMemcpyAsync(starts, cuda->host_starts, sizeof(int32_t) * (size_t)(segments + 1),
                                  cudaMemcpyHostToDevice, cuda->stream));
    TT_CUDA_CHECK(cudaMemcpyAsync(tokens, cuda->host_segment_tokens, sizeof(int32_t) * (size_t)segments,
                                  cudaMemcpyHostToDevice, cuda->stream));
    TIMED("embedding backward", tt_cuda_embedding_backward(dtable, gradient_fp32(cuda), order, starts, tokens, segments,
                                                           dout, D, scale, cuda->stream));
    /* The host buffers are reused by the next call: wait until the copies have read them. */
    cuda_synchronize(ctx);
}

static void cuda_rmsnorm_forward(void *ctx, void *out, float *rstd, const void *x, const void *w, const void *residual,
                                 int64_t R, int64_t C, double eps, float weight_offset) {
    cuda_backend *cuda = ctx;
    TIMED("rmsnorm forward",
          tt_cuda_rmsnorm_forward(out, rstd, x, w, residual, R, C, (float)eps, weight_offset, cuda->stream));
}

static void cuda_rmsnorm_backward(void *ctx, void *dx, void *dw, const void *dout, const void *x, const void *w,
                                  const float *rstd, int64_t R, int64_t C, float weight_offset) {
    cuda_backend *cuda = ctx;
    float *scratch = op_scratch(cuda, floats(tt_cuda_rmsnorm_backward_scratch(R, C)), "the RMSNorm backward");
    TIMED("rmsnorm backward", tt_cuda_rmsnorm_backward(dx, dw, gradient_fp32(cuda), dout, x, w, rstd, R, C,
                                                       weight_offset, scratch, cuda->stream));
}

static void cuda_linear_forward(void *ctx, void *y, const void *x, const void *W, const void *b, const void *residual,
                                int64_t N, int64_t in, int64_t out) {
    cuda_backend *cuda = ctx;
    /* y[N,out] = x[N,in] @ W[out,in]^T (+ residual: cuBLASLt's C input, D = y) */
    TIMED("gemm forward",
          tt_cuda_gemm_add(cuda->gemm, false, true, N, out, in, x, in, W, in, residual, y, out, cuda->stream));
    if (b) TIMED("bias add", tt_cuda_add_bias(y, b, N, out, cuda->stream));
}

static void cuda_linear_backward(void *ctx, void *dx, void *dW, void *db, const void *dy, const void *x, const void *W,
                                 int64_t N, int64_t in, int64_t out, bool accumulate_dx) {
    cuda_backend *cuda = ctx;
    /* dW[out,in] += dy^T[out,N] @ x[N,in], first: dx may be x's memory */
    if (dW)
        TIMED("gemm backward dW", tt_cuda_gemm(cuda->gemm, true, false, out, in, N, 1.0f, dy, out, x, in, 1.0f, dW,
                                               gradient_fp32(cuda), in, cuda->stream));
    if (db) {
        float *scratch = op_scratch(cuda, floats(tt_cuda_column_sum_scratch(N, out)), "the bias gradient");
        TIMED("bias backward", tt_cuda_column_sum(db, gradient_fp32(cuda), dy, N, out, scratch, cuda->stream));
    }
    /* dx[N,in] (+)= dy[N,out] @ W[out,in] */
    if (dx)
        TIMED("gemm backward dx", tt_cuda_gemm(cuda->gemm, false, false, N, in, out, 1.0f, dy, out, W, in,
                                               accumulate_dx ? 1.0f : 0.0f, dx, false, in, cuda->stream));
}

static void cuda_rope_forward(void *ctx, void *x, const float *cos_t, const float *sin_t, int64_t B, int64_t T,
                              int64_t H, int64_t hd, int64_t rotary_dim) {
    cuda_backend *cuda = ctx;
    TIMED("rope forward", tt_cuda_rope_forward(x, cos_t, sin_t, B, T, H, hd, rotary_dim, cuda->stream));
}

static void cuda_rope_backward(void *ctx, void *dx, const float *cos_t, const float *sin_t, int64_t B, int64_t T,
                               int64_t H, int64_t hd, int64_t rotary_dim) {
    cuda_backend *cuda = ctx;
    TIMED("rope backward", tt_cuda_rope_backward(dx, cos_t, sin_t, B, T, H, hd, rotary_dim, cuda->stream));
}

static void cuda_attention_forward(void *ctx, void *out, float *lse, const void *q, const void *k, const void *v,
                                   const tt_attention_shape *shape) {
    cuda_backend *cuda = ctx;
    const prepared_attention *p = prepared_attention_for(cuda, shape);
    switch (p->choice.forward) {
    case TT_ATTENTION_CUDNN:
        TIMED("attention forward cudnn",
              tt_cudnn_attention_forward(p->cudnn, out, lse, q, k, v,
                                         op_scratch(cuda, p->choice.forward_workspace, "cuDNN attention"),
                                         cuda->stream));
        break;
    case TT_ATTENTION_FLASH:
        TIMED("attention forward own", own_attention_forward(out, lse, q, k, v, shape, cuda->stream));
        break;
    default:
        TIMED("attention forward simple", tt_cuda_attention_forward(out, lse, q, k, v, shape, cuda->stream));
        break;
    }
}

static void cuda_attention_cached(void *ctx, void *out, const void *q, const void *k_cache, const void *v_cache,
                                  int64_t start, int64_t n, const tt_attention_shape *shape) {
    cuda_backend *cuda = ctx;
    const size_t bytes = cuda->scratch_bytes - TT_CUDA_GEMM_WORKSPACE_BYTES;
    TIMED("attention cached",
          tt_cuda_attention_cached(out, q, k_cache, v_cache, start, n, shape,
                                   op_scratch(cuda, bytes, "cached attention"), bytes, cuda->stream));
}

static void cuda_attention_backward(void *ctx, void *dq, void *dk, void *dv, const void *dout, const void *out,
                                    const float *lse, const void *q, const void *k, const void *v,
                                    const tt_attention_shape *shape, void *workspace, void *spare, size_t spare_bytes) {
    cuda_backend *cuda = ctx;
    prepared_attention *p = prepared_attention_for(cuda, shape);
    void *scratch = workspace;
    TT_CHECK(scratch || p->choice.backward_workspace == 0, "the attention backward needs its workspace");
    switch (p->choice.backward) {
    case TT_ATTENTION_CUDNN:
        TIMED("attention backward cudnn",
              tt_cudnn_attention_backward(p->cudnn, dq, dk, dv, dout, out, lse, q, k, v, scratch,
                                          p->choice.backward_workspace, spare, spare_bytes, cuda->stream));
        if (tt_cudnn_attention_lane_bytes(p->cudnn) > 0 &&
            tt_cudnn_attention_most_lanes(p->cudnn) > p->lanes_reported) {
            p->lanes_reported = tt_cudnn_attention_most_lanes(p->cudnn);
            tt_info("attention backward: %d head groups at once (%d in dead layer inputs)", p->lanes_reported,
                    p->lanes_reported - p->choice.lanes);
        }
        break;
    case TT_ATTENTION_FLASH:
        TIMED("attention backward own", own_attention_backward(dq, dk, dv, dout, out, lse, q, k, v, shape, scratch,
                                                               p->choice.backward_workspace, cuda->stream));
        break;
    default:
        TIMED("attention backward simple",
              tt_cuda_attention_backward(dq, dk, dv, dout, out, lse, q, k, v, shape, scratch, cuda->stream));
        break;
    }
}

static void cuda_glu_forward(void *ctx, void *h, const void *gate, const void *up, int64_t n, tt_glu_activation act) {
    cuda_backend *cuda = ctx;
    TIMED("glu forward", tt_cuda_glu_forward(h, gate, up, n, act, cuda->stream));
}

static void cuda_glu_backward(void *ctx, void *dgate, void *dup, const void *dh, const void *gate, const void *up,
                              int64_t n, tt_glu_activation act) {
    cuda_backend *cuda = ctx;
    TIMED("glu backward", tt_cuda_glu_backward(dgate, dup, dh, gate, up, n, act, cuda->stream));
}

static void cuda_dequantize_4bit(void *ctx, void *out, const void *quantized, int64_t numel,
                                 const tt_quant4_format *format) {
    cuda_backend *cuda = ctx;
    TIMED("dequantize 4-bit", tt_cuda_dequantize_4bit(out, quantized, numel, format, cuda->stream));
}

static void cuda_add(void *ctx, void *out, const void *a, const void *b, int64_t n) {
    cuda_backend *cuda = ctx;
    TIMED("add", tt_cuda_add(out, a, b, n, cuda->stream));
}

static void cuda_dropout_scale(void *ctx, void *out, const void *x, int64_t n, float multiplier,
                               uint32_t drop_threshold, uint64_t seed) {
    cuda_backend *cuda = ctx;
    TIMED("dropout scale", tt_cuda_dropout_scale(out, x, n, multiplier, drop_threshold, seed, cuda->stream));
}

static void cuda_add_uniform_noise(void *ctx, void *x, int64_t n, float magnitude, uint64_t seed) {
    cuda_backend *cuda = ctx;
    TIMED("uniform noise", tt_cuda_add_uniform_noise(x, n, magnitude, seed, cuda->stream));
}

static double cuda_lm_head_loss(void *ctx, void *dxn, void *dW, const void *xn, const void *W, const int32_t *targets,
                                int64_t N, int64_t D, int64_t V, int64_t chunk, void *logits, double logit_scale,
                                double softcap, double scale, double loss_before, int64_t *count) {
    cuda_backend *cuda = ctx;
    const int64_t chunks = (N + chunk - 1) / chunk;
    unsigned char *scratch = op_scratch(cuda, align_256(floats(chunk)) + sizeof(double) * (size_t)chunks, "the loss");
    float *row_loss = (float *)scratch;
    double *chunk_sums = (double *)(scratch + align_256(floats(chunk)));
    const tt_bf16 *x = xn;
    for (int64_t c = 0; c < chunks; c++) {
        const int64_t first = c * chunk, rows = N - first < chunk ? N - first : chunk;
        /* logits[rows,V] = xn[rows,D] @ W[V,D]^T, in bf16 as the peer's LM head */
        TIMED("lm head gemm forward", tt_cuda_gemm(cuda->gemm, false, true, rows, V, D, 1.0f, x + first * D, D, W, D,
                                                   0.0f, logits, false, V, cuda->stream));
        TIMED("cross entropy", tt_cuda_cross_entropy_chunk(logits, row_loss, targets + first, rows, V, (float)scale,
                                                           (float)logit_scale, (float)softcap, cuda->stream);
              tt_cuda_sum(chunk_sums + c, row_loss, rows, cuda->stream));
        if (dxn) {
            /* logits now hold d loss / d logits; dW is NULL when the LM head is frozen */
            if (dW)
                TIMED("lm head gemm backward dW",
                      tt_cuda_gemm(cuda->gemm, true, false, V, D, rows, 1.0f, logits, V, x + first * D, D, 1.0f, dW,
                                   gradient_fp32(cuda), D, cuda->stream));
            TIMED("lm head gemm backward dx", tt_cuda_gemm(cuda->gemm, false, false, rows, D, V, 1.0f, logits, V, W, D,
                                                           0.0f, (tt_bf16 *)dxn + first * D, false, D, cuda->stream));
        }
    }
    TT_CHECK(N <= cuda->host_tokens && chunks <= cuda->host_chunks,
             "loss over %lld tokens in %lld chunks, host "
             "buffers for %lld and %lld",
             (long long)N, (long long)chunks, (long long)cuda->host_tokens, (long long)cuda->host_chunks);
    TT_CUDA_CHECK(cudaMemcpyAsync(cuda->host_chunk_sums, chunk_sums, sizeof(double) * (size_t)chunks,
                                  cudaMemcpyDeviceToHost, cuda->stream));
    TT_CUDA_CHECK(cudaMemcpyAsync(cuda->host_targets, targets, sizeof(int32_t) * (size_t)N, cudaMemcpyDeviceToHost,
                                  cuda->stream));
    cuda_synchronize(ctx);
    double total = loss_before;
    for (int64_t c = 0; c < chunks; c++) total += cuda->host_chunk_sums[c];
    int64_t counted = 0;
    for (int64_t n = 0; n < N; n++) counted += cuda->host_targets[n] != TT_IGNORE_INDEX;
    *count = counted;
    return total;
}

static void cuda_sum_parts(void *ctx, float *dst, const float *parts, int count, int64_t n) {
    cuda_backend *cuda = ctx;
    use_device(cuda);
    TIMED("sum of ranks' parts", tt_cuda_sum_parts(dst, parts, count, n, cuda->stream));
}

static void cuda_sum_squares(void *ctx, double *out, const void *x, int64_t n) {
    cuda_backend *cuda = ctx;
    double *scratch = op_scratch(cuda, sizeof(double) * TT_CUDA_SUM_SQUARES_BLOCKS, "the sum of squares");
    TIMED("sum of squares", tt_cuda_sum_squares(out, x, gradient_fp32(cuda), n, scratch, cuda->stream));
}

static void cuda_adamw_update(void *ctx, void *weights, float *master, const void *g, void *m, void *v,
                              const int64_t *segment_start, const unsigned char *segment_decays, int segments, float lr,
                              float beta1, float beta2, float eps, float weight_decay, int64_t step, float grad_scale) {
    cuda_backend *cuda = ctx;
    TIMED("adamw", tt_cuda_adamw(master, weights, g, gradient_fp32(cuda), m, v,
                                 cuda->settings.precision.moment == TT_BF16, segment_start, segment_decays, segments,
                                 lr, beta1, beta2, eps, weight_decay, step, grad_scale, cuda->stream));
}

static void cuda_adamw_8bit_update(void *ctx, void *weights, float *master, const void *g,
                                   const tt_adamw_8bit_moment *m, const tt_adamw_8bit_moment *v,
                                   const tt_adamw_8bit_tensor *tensors, int count,
                                   const tt_adamw_8bit_scalars *scalars) {
    cuda_backend *cuda = ctx;
    TIMED("adamw 8-bit", tt_cuda_adamw_8bit(master, weights, g, gradient_fp32(cuda), m, v, tensors, count, scalars,
                                            &cuda->adamw_8bit_maps, cuda->stream));
}

static void cuda_destroy(void *ctx) {
    cuda_backend *cuda = ctx;
    use_device(cuda);
    cuda_release(ctx);
    cuda_synchronize(ctx);
    if (cuda->latest_cudnn) tt_cudnn_attention_destroy(cuda->latest_cudnn);
    tt_cuda_copy_engine_destroy(cuda->copies);
    profile_shut_down(cuda);
    for (int i = 0; i < SIDE_EVENTS; i++) TT_CUDA_CHECK(cudaEventDestroy(cuda->side_done[i]));
    TT_CUDA_CHECK(cudaEventDestroy(cuda->side_start));
    TT_CUDA_CHECK(cudaStreamDestroy(cuda->side_stream));
    TT_CUDA_CHECK(cudaStreamDestroy(cuda->compute_stream));
    free(cuda);
}

static const tt_backend_iface cuda_iface = {
    .destroy = cuda_destroy,
    .block_alloc = cuda_block_alloc,
    .block_free = cuda_block_free,
    .copy = cuda_copy,
    .copy_2d = cuda_copy_2d,
    .pinned_alloc = cuda_pinned_alloc,
    .pinned_free = cuda_pinned_free,
    .zero = cuda_zero,
    .synchronize = cuda_synchronize,
    .side_begin = cuda_side_begin,
    .side_end = cuda_side_end,
    .side_wait = cuda_side_wait,
    .side_stream = cuda_side_stream,
    .side_active = cuda_side_active,
    .bytes_outside_arenas = cuda_bytes_outside_arenas,
    .upload = cuda_upload,
    .download = cuda_download,
    .copy_async = cuda_copy_async,
    .copy_wait = cuda_copy_wait,
    .copy_host_wait = cuda_copy_host_wait,
    .copy_done = cuda_copy_done,
    .copy_set_delay = cuda_copy_set_delay,
    .copy_stats = cuda_copy_stats,
    .timestamp = cuda_timestamp,
    .timestamp_seconds = cuda_timestamp_seconds,
    .copy_span = cuda_copy_span,
    .scratch_bytes = cuda_scratch_bytes,
    .attention_workspace_bytes = cuda_attention_workspace_bytes,
    .prepare = cuda_prepare,
    .release = cuda_release,
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
    .attention_cached = cuda_attention_cached,
    .glu_forward = cuda_glu_forward,
    .glu_backward = cuda_glu_backward,
    .add = cuda_add,
    .dequantize_4bit = cuda_dequantize_4bit,
    .dropout_scale = cuda_dropout_scale,
    .add_uniform_noise = cuda_add_uniform_noise,
    .lm_head_loss = cuda_lm_head_loss,
    .sum_squares = cuda_sum_squares,
    .sum_parts = cuda_sum_parts,
    .adamw_update = cuda_adamw_update,
    .adamw_8bit_update = cuda_adamw_8bit_update,
};

tt_backend *tt_backend_cuda_create(int device) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || device < 0 || device >= count) {
        (void)cudaGetLastError();
        tt_die("CUDA device %d is not there (%d visible; check nvidia-smi and CUDA_VISIBLE_DEVICES)", device, count);
    }
    cuda_backend *cuda = tt_xcalloc(1, sizeof *cuda, "the CUDA backend");
    cuda->device = device;
    use_device(cuda);
    TT_CUDA_CHECK(cudaStreamCreateWithFlags(&cuda->compute_stream, cudaStreamNonBlocking));
    cuda->stream = cuda->compute_stream;
    cuda->side_delay_seed = 54321;
    tt_adamw_8bit_maps_build(&cuda->adamw_8bit_maps);
    TT_CUDA_CHECK(cudaStreamCreateWithFlags(&cuda->side_stream, cudaStreamNonBlocking));
    TT_CUDA_CHECK(cudaEventCreateWithFlags(&cuda->side_start, cudaEventDisableTiming));
    for (int i = 0; i < SIDE_EVENTS; i++)
        TT_CUDA_CHECK(cudaEventCreateWithFlags(&cuda->side_done[i], cudaEventDisableTiming));
    size_t free_bytes = 0, total_bytes = 0;
    TT_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    cuda->used_before = total_bytes - free_bytes;
    cuda->copies = tt_cuda_copy_engine_create(cuda->stream);
    /* bitsandbytes' dynamic map into the device's constant memory: a fixed table, so a second context on
     * the device writes the same bytes */
    tt_cuda_quant4_set_dynamic_map(tt_quant4_dynamic_map());
    profile_start_up(cuda);
    tt_backend *backend = tt_xcalloc(1, sizeof *backend, "the CUDA backend");
    *backend = (tt_backend){.iface = &cuda_iface, .ctx = cuda, .name = "cuda", .compute_tier = TT_TIER_GPU};
    return backend;
}

int tt_backend_cuda_attention_most_lanes(const tt_backend *backend) {
    TT_CHECK(backend->iface == &cuda_iface, "not a CUDA backend: %s", backend->name);
    const cuda_backend *cuda = backend->ctx;
    int most = 0;
    for (int i = 0; i < cuda->attention_shapes; i++) {
        const prepared_attention *p = &cuda->attention[i];
        if (p->cudnn && p->choice.backward == TT_ATTENTION_CUDNN && tt_cudnn_attention_most_lanes(p->cudnn) > most)
            most = tt_cudnn_attention_most_lanes(p->cudnn);
    }
    return most;
}
