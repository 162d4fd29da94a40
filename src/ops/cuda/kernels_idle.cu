/* A kernel that only waits: the race stress of the copy engine puts it in front of copies. */
#include <cuda_runtime.h>

#include "ops/cuda/cuda_check.h"

#include "ops/cuda/copy_engine_cuda.h"

static __device__ uint64_t global_nanoseconds(void) {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

static __global__ void idle_kernel(uint64_t nanoseconds) {
    const uint64_t start = global_nanoseconds();
    while (global_nanoseconds() - start < nanoseconds) __nanosleep(1000);
}

extern "C" void tt_cuda_idle(cudaStream_t stream, uint64_t nanoseconds) {
    idle_kernel<<<1, 1, 0, stream>>>(nanoseconds);
    TT_CUDA_CHECK(cudaGetLastError());
}
