/* Device selection: the one place that knows whether tiertrain was built with CUDA
 * (TT_HAVE_CUDA). Every combination of device, bf16, master_weights and attn_implementation
 * either maps to a backend that does exactly that, or is an error naming the keys. */
#include <stdio.h>
#include <stdlib.h>

#include "core/check.h"
#include "core/host_memory.h"
#include "train/trainer.h"
#ifdef TT_HAVE_CUDA
#include "ops/cuda/backend_cuda.h"
#endif

/* device: auto without a GPU: a config written for a GPU (axolotl's bf16: true, bnb_4bit_compute_dtype: bfloat16) runs
 * on the CPU backend in its fp32, said in one line; device: cpu with them is a contradiction, an error. */
static void select_cpu(const tt_run_config *run, tt_device *device, const char *why) {
    const bool automatic = run->device == TT_DEVICE_AUTO;
    if (run->bf16 == TT_BF16_ON && !automatic)
        tt_die("bf16: true needs device: cuda (%s); the CPU backend computes in fp32. Set bf16: auto or false", why);
    if (automatic && (run->bf16 == TT_BF16_ON || run->bnb_4bit_compute_dtype == TT_COMPUTE_DTYPE_BF16))
        printf("device: auto found no GPU (%s): the CPU backend trains in fp32, not in the bf16 that %s asks of a GPU "
               "(device: cuda makes a missing GPU an error)\n",
               why, run->bf16 == TT_BF16_ON ? "bf16: true" : "bnb_4bit_compute_dtype: bfloat16");
    if (!run->master_weights)
        tt_die("master_weights: false (bf16 parameters and AdamW state) needs device: cuda (%s); the CPU backend "
               "trains in fp32. Remove master_weights or run on a GPU",
               why);
    if (run->attn_implementation != TT_ATTN_AUTO && run->attn_implementation != TT_ATTN_SIMPLE)
        tt_die("attn_implementation: cudnn and flash are GPU kernels (%s); the CPU backend has one attention. "
               "Set attn_implementation: auto",
               why);
    if (run->bnb_4bit_compute_dtype == TT_COMPUTE_DTYPE_BF16 && !automatic)
        tt_die(
            "bnb_4bit_compute_dtype: bfloat16, but the CPU backend (%s) computes in float32 and dequantizes the 4-bit "
            "weights to float32; set bnb_4bit_compute_dtype: auto or float32, or run on a GPU",
            why);
    device->backend = tt_backend_cpu_create(run->num_threads > 0 ? (int)run->num_threads : 0);
    /* the host's processes share its memory: each plans for its part */
    device->memory_budget = run->host_memory_budget > 0 ? (size_t)run->host_memory_budget
                                                        : tt_host_memory_default_budget(device->host_processes);
    const char *wait = getenv("OMP_WAIT_POLICY");
    snprintf(device->description, sizeof device->description, "cpu (%s; OpenMP threads wait %s)", why,
             wait ? wait : "as OpenMP's default");
}

#ifdef TT_HAVE_CUDA
/* gpu=NAME, or device: cuda with gpu_memory_budget on a machine without a GPU: the CUDA backend's size model, for
 * tiertrain plan (train refuses it: src/cli/main.c) */
static void select_offline_gpu(const tt_run_config *run, tt_device *device) {
    const tt_cuda_known_gpu *known = run->gpu ? tt_cuda_known_gpu_find(run->gpu) : NULL;
    if (run->gpu && !known)
        tt_die("gpu: '%s' is not a GPU tiertrain knows; use one of %s, or device: cuda with gpu_memory_budget",
               run->gpu, tt_cuda_known_gpu_names());
    if (run->device == TT_DEVICE_CPU) tt_die("gpu: %s prices a GPU run; set device: cuda (or auto), not cpu", run->gpu);
    if (run->bf16 == TT_BF16_OFF)
        tt_die("bf16: false, but the CUDA backend computes in bf16; set bf16: auto, or device: cpu for fp32");
    device->backend = tt_backend_cuda_offline_create();
    device->memory_budget = run->gpu_memory_budget > 0 ? (size_t)run->gpu_memory_budget : known->free_bytes;
    if (known && device->memory_budget > known->total_bytes) {
        char want[32], have[32];
        tt_die("gpu_memory_budget is %s but the %s has %s; lower gpu_memory_budget",
               tt_format_bytes(device->memory_budget, want, sizeof want), known->description,
               tt_format_bytes(known->total_bytes, have, sizeof have));
    }
    char total[32];
    if (known)
        snprintf(device->description, sizeof device->description, "cuda, priced without a GPU: %s, %s",
                 known->description, tt_format_bytes(known->total_bytes, total, sizeof total));
    else
        snprintf(device->description, sizeof device->description,
                 "cuda, priced without a GPU: a Hopper GPU with gpu_memory_budget");
}
#endif

void tt_select_device(const tt_run_config *run, int gpu, int host_processes, tt_device *device) {
    *device = (tt_device){.host_processes = host_processes > 1 ? host_processes : 1};
    if (run->device == TT_DEVICE_CPU) {
        select_cpu(run, device, "device: cpu");
        return;
    }
#ifdef TT_HAVE_CUDA
    char name[128];
    size_t free_bytes = 0, total_bytes = 0;
    if (run->gpu || (run->device == TT_DEVICE_CUDA && run->gpu_memory_budget > 0 &&
                     !tt_cuda_device_query(gpu, name, sizeof name, &free_bytes, &total_bytes))) {
        select_offline_gpu(run, device);
        return;
    }
    if (!tt_cuda_device_query(gpu, name, sizeof name, &free_bytes, &total_bytes)) {
        if (run->device == TT_DEVICE_CUDA)
            tt_die("device: cuda, but no CUDA GPU is visible (check nvidia-smi and CUDA_VISIBLE_DEVICES), or set "
                   "device: cpu");
        select_cpu(run, device, "no CUDA GPU visible");
        return;
    }
    if (run->bf16 == TT_BF16_OFF)
        tt_die("bf16: false, but the CUDA backend computes in bf16 (with fp32 accumulation and, by default, fp32 "
               "master weights); set bf16: auto, or device: cpu for fp32");
    if (run->bnb_4bit_compute_dtype == TT_COMPUTE_DTYPE_F32)
        tt_die("bnb_4bit_compute_dtype: float32, but the CUDA backend computes in bfloat16 and dequantizes the 4-bit "
               "weights to bfloat16 for its GEMMs; set bnb_4bit_compute_dtype: auto or bfloat16, or device: cpu");
    device->backend = tt_backend_cuda_create(gpu);
    /* the free memory once the backend's streams and handles exist */
    (void)tt_cuda_device_query(gpu, name, sizeof name, &free_bytes, &total_bytes);
    device->memory_budget = run->gpu_memory_budget > 0 ? (size_t)run->gpu_memory_budget : free_bytes;
    if (device->memory_budget > free_bytes) {
        char want[32], have[32];
        tt_die("gpu_memory_budget is %s but the GPU (%s) has only %s free; lower gpu_memory_budget",
               tt_format_bytes(device->memory_budget, want, sizeof want), name,
               tt_format_bytes(free_bytes, have, sizeof have));
    }
    char total[32];
    snprintf(device->description, sizeof device->description, "cuda: %s, %s", name,
             tt_format_bytes(total_bytes, total, sizeof total));
#else
    if (run->gpu)
        tt_die("gpu: %s prices a run with the CUDA backend's sizes, but this tiertrain was built without CUDA "
               "(nvcc was not found at build time); rebuild where the CUDA toolkit is, or leave gpu out",
               run->gpu);
    if (run->device == TT_DEVICE_CUDA)
        tt_die("device: cuda, but this tiertrain was built without CUDA (nvcc was not found at build time); "
               "rebuild on a machine with the CUDA toolkit, or set device: cpu");
    (void)gpu;
    select_cpu(run, device, "built without CUDA");
#endif
}

void tt_release_device(tt_device *device) {
    tt_backend_destroy(device->backend);
    device->backend = NULL;
}
