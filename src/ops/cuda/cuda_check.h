/* Checks for CUDA runtime and cuBLAS calls: a failure names the call, file and line. */
#ifndef TT_OPS_CUDA_CUDA_CHECK_H
#define TT_OPS_CUDA_CUDA_CHECK_H

#include <cuda_runtime_api.h>

#include "core/check.h"

#define TT_CUDA_CHECK(call)                                                                       \
    do {                                                                                          \
        cudaError_t tt_cuda_status = (call);                                                      \
        if (tt_cuda_status != cudaSuccess)                                                        \
            tt_check_failed(__FILE__, __LINE__, #call, "%s", cudaGetErrorString(tt_cuda_status)); \
    } while (0)

#endif
