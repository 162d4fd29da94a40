/* The CUDA backend: the backend (src/ops/backend.h) on one NVIDIA GPU, bf16 compute with fp32
 * accumulation, every op asynchronous on the context's compute stream. Any number of them may
 * exist in a process, on one device or several; each has its own stream, copy engine, library
 * handles and plans. CUDA's current device is per host thread: create, the size queries, prepare
 * and the memory entries make the backend's device current; the ops expect it to be (a thread
 * that drives backends on two devices prepares, or makes the device current, before switching). */
#ifndef TT_OPS_CUDA_BACKEND_CUDA_H
#define TT_OPS_CUDA_BACKEND_CUDA_H

#include <stdbool.h>
#include <stddef.h>

#include "ops/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* True when CUDA device `device` is usable; fills its name and free/total memory (the calling
 * thread's current device becomes it). */
bool tt_cuda_device_query(int device, char *name, size_t name_size, size_t *free_bytes, size_t *total_bytes);

/* A CUDA backend on device `device` (an index among the visible devices); dies when it is not
 * there. Its bytes_outside_arenas counts what the device's memory use grew by since create, minus
 * its arena: on a shared GPU other processes' (and other backends') use moves it too. */
tt_backend *tt_backend_cuda_create(int device);

/* The GPUs `tiertrain plan gpu=NAME` prices without a GPU (backend_cuda_offline.c). */
typedef struct tt_cuda_known_gpu {
    const char *name;        /* gpu=: "h200", "h100-80gb" */
    const char *description; /* the device's name as CUDA gives it */
    size_t total_bytes;      /* its memory */
    size_t free_bytes;       /* what is free once a CUDA backend exists: the default gpu_memory_budget */
    int sms;
} tt_cuda_known_gpu;
const tt_cuda_known_gpu *tt_cuda_known_gpu_find(const char *name); /* NULL: not known */
const char *tt_cuda_known_gpu_names(void);                         /* "h200, h100-80gb", for messages */

/* The CUDA backend's size model without a GPU: a backend whose size queries answer as the CUDA backend's would on
 * Hopper, for pricing a plan; it runs no op (prepare stops the run). */
tt_backend *tt_backend_cuda_offline_create(void);

/* The most head groups cuDNN's deterministic attention backward ran at once in the prepared run
 * (0: none ran); for tests and reports. */
int tt_backend_cuda_attention_most_lanes(const tt_backend *backend);

#ifdef __cplusplus
}
#endif

#endif
