/* The CUDA backend: the backend table (src/ops/backend.h) on one NVIDIA GPU, bf16 compute with
 * fp32 accumulation, every op asynchronous on one compute stream. */
#ifndef TT_OPS_CUDA_BACKEND_CUDA_H
#define TT_OPS_CUDA_BACKEND_CUDA_H

#include <stdbool.h>
#include <stddef.h>

#include "ops/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* True when a CUDA GPU is usable; fills its name and free/total memory. */
bool tt_cuda_device_query(char *name, size_t name_size, size_t *free_bytes, size_t *total_bytes);

const tt_backend *tt_backend_cuda(void);

/* Bytes of device memory in use by this process outside the arena (library handles and their
 * workspaces, the CUDA context excluded): what cudaMemGetInfo reports as used, minus what was used
 * when the backend started, minus the arena. On a shared GPU other processes' use moves it too. */
size_t tt_cuda_device_bytes_in_use(void);

/* The most head groups cuDNN's deterministic attention backward ran at once since its plans were built
 * (0: none ran); for tests and reports. */
int tt_cuda_attention_most_lanes(void);

#ifdef __cplusplus
}
#endif

#endif
