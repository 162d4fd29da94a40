/* The CUDA backend's size model, for pricing a GPU run on a machine without one (`tiertrain plan device=cuda
 * gpu=h200`, or device=cuda with gpu_memory_budget): a backend whose compute tier is the GPU and whose two size
 * queries answer as the CUDA backend's would on a Hopper GPU, from the same arithmetic (backend_cuda_sizes.h), with
 * no device, driver call or library handle. Its ops are not there: it prices, it never runs.
 *
 * What it can price is what needs no cuDNN graph to size: attn_implementation auto where it takes tiertrain's
 * pipelined backward at head_dim 128 without a window or soft-capping (deterministic: true, or false at the short
 * lengths its cells of attention_rates.c favour), with cuDNN's forward (whose workspace on Hopper is
 * CUDNN_FORWARD_BYTES) or the pipelined one where its cell says so; packed documents (the own kernels both ways), flash
 * and simple. Elsewhere cuDNN sizes its own workspaces when it builds its graphs, on the GPU: the
 * model says so and stops rather than guess. */
#include "ops/cuda/backend_cuda.h"

#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "ops/cuda/attention_flash.h"
#include "ops/cuda/backend_cuda_sizes.h"
#include "ops/cuda/gemm_cuda.h"

/* cuDNN's fused attention forward (engine 2, the one it picks on Hopper for these graphs) asks this much workspace:
 * what the CUDA backend reported on an H200 for head_dim 128 from 512 to 65536 tokens (docs/benchmarks.md). */
#define CUDNN_FORWARD_BYTES ((size_t)256)

/* The CUDA backend takes CUDA_RESERVE_BYTES of a GPU's memory before its arena (the context, cuBLASLt's and cuDNN's
 * handles): total - free once it exists, measured on an H200 (driver of the `nvidia-h200` machines, CUDA 13). */
#define CUDA_RESERVE_BYTES ((size_t)556597248)

static const tt_cuda_known_gpu known_gpus[] = {
    /* NVIDIA H200, measured: cudaMemGetInfo's total; free once a CUDA backend exists (149553283072 bytes) */
    {.name = "h200",
     .description = "NVIDIA H200",
     .total_bytes = 150109880320,
     .free_bytes = 150109880320 - CUDA_RESERVE_BYTES,
     .sms = 132},
    /* NVIDIA H100 80GB HBM3, estimated, not measured: nvidia-smi's 81559 MiB less the 644939776 bytes by which
     * nvidia-smi's total passes CUDA's on the H200; give gpu_memory_budget where the budget must be exact */
    {.name = "h100-80gb",
     .description = "NVIDIA H100 80GB HBM3 (memory estimated)",
     .total_bytes = 84875870208,
     .free_bytes = 84875870208 - CUDA_RESERVE_BYTES,
     .sms = 132},
};

const tt_cuda_known_gpu *tt_cuda_known_gpu_find(const char *name) {
    for (size_t i = 0; i < sizeof known_gpus / sizeof known_gpus[0]; i++)
        if (strcmp(known_gpus[i].name, name) == 0) return &known_gpus[i];
    return NULL;
}

const char *tt_cuda_known_gpu_names(void) { return "h200, h100-80gb"; }

static size_t max_size(size_t a, size_t b) { return a > b ? a : b; }

/* The attention's forward and backward workspaces as the CUDA backend resolves them (resolve_attention), where that
 * needs no cuDNN graph. */
static void attention_sizes(const tt_backend_settings *settings, const tt_attention_shape *shape, size_t *forward,
                            size_t *backward) {
    const bool flash = tt_cuda_flash_attention_supported(shape) != 0;
    const bool own_backward = tt_cuda_auto_takes_own_backward(settings->attention, settings->nondeterministic, shape);
    *forward = 0;
    if (settings->attention == TT_ATTENTION_SIMPLE || (shape->documents && !flash)) {
        *backward = sizeof(float) * (size_t)(shape->batch * shape->num_heads * shape->seq_len);
    } else if (shape->documents || settings->attention == TT_ATTENTION_FLASH) {
        if (!flash)
            tt_die("attn_implementation: flash needs head_dim 64 or 128, no sliding window and no soft-capping (this "
                   "model: head_dim %lld, window %lld). Use attn_implementation: auto",
                   (long long)shape->head_dim, (long long)shape->sliding_window);
        *backward = tt_cuda_own_attention_backward_bytes(shape);
    } else if (own_backward) {
        *forward = tt_cuda_auto_takes_own_forward(settings->attention, settings->nondeterministic, shape)
                       ? 0
                       : CUDNN_FORWARD_BYTES;
        *backward = tt_cuda_own_attention_backward_bytes(shape);
    } else {
        tt_die("plan without a GPU: this run's attention (head_dim %lld, window %lld, soft-capping %g, "
               "attn_implementation %s%s) runs cuDNN's fused kernels, whose workspaces cuDNN sizes when it builds its "
               "graphs on the GPU; run tiertrain plan on the GPU machine (the offline plan prices head_dim 128 without "
               "a window under auto, packed documents, and attn_implementation flash or simple)",
               (long long)shape->head_dim, (long long)shape->sliding_window, shape->softcap,
               settings->attention == TT_ATTENTION_CUDNN ? "cudnn" : "auto",
               settings->nondeterministic ? ", deterministic: false" : "");
    }
}

static size_t offline_scratch_bytes(void *ctx, const tt_backend_settings *settings, const tt_scratch_shape *shape) {
    (void)ctx;
    size_t forward, backward;
    attention_sizes(settings, &shape->attention, &forward, &backward);
    if (shape->has_sliding) {
        size_t sliding_forward;
        attention_sizes(settings, &shape->sliding_attention, &sliding_forward, &backward);
        forward = max_size(forward, sliding_forward);
    }
    return TT_CUDA_GEMM_WORKSPACE_BYTES + tt_cuda_op_scratch_bytes(shape, forward);
}

static size_t offline_attention_workspace_bytes(void *ctx, const tt_backend_settings *settings,
                                                const tt_attention_shape *shape) {
    (void)ctx;
    size_t forward, backward;
    attention_sizes(settings, shape, &forward, &backward);
    return (backward + 255) & ~(size_t)255;
}

static void offline_destroy(void *ctx) { (void)ctx; }

static void offline_prepare(void *ctx, const tt_backend_settings *settings, const tt_scratch_shape *shape,
                            void *scratch, size_t scratch_bytes) {
    (void)ctx, (void)settings, (void)shape, (void)scratch, (void)scratch_bytes;
    tt_die("the offline CUDA size model prices a run; it does not run one (gpu= is for tiertrain plan)");
}

static const tt_backend_iface offline_iface = {
    .destroy = offline_destroy,
    .scratch_bytes = offline_scratch_bytes,
    .attention_workspace_bytes = offline_attention_workspace_bytes,
    .prepare = offline_prepare,
};

tt_backend *tt_backend_cuda_offline_create(void) {
    tt_backend *backend = tt_xcalloc(1, sizeof *backend, "the CUDA size model");
    *backend =
        (tt_backend){.iface = &offline_iface, .ctx = NULL, .name = "cuda (offline)", .compute_tier = TT_TIER_GPU};
    return backend;
}
