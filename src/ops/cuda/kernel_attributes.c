/* Kernels' shared-memory limits set once per device (kernel_attributes.h). */
#include "ops/cuda/kernel_attributes.h"

#include <pthread.h>

#include "ops/cuda/cuda_check.h"

/* The (kernel, device, bytes) already set: a few dozen kernel instances exist, on a handful of devices. */
#define SET_CAPACITY 256

typedef struct set_attribute {
    const void *kernel;
    int device, bytes;
} set_attribute;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static set_attribute set[SET_CAPACITY];
static int set_count;

void tt_cuda_kernel_shared_bytes(const void *kernel, int bytes) {
    int device = 0;
    TT_CUDA_CHECK(cudaGetDevice(&device));
    pthread_mutex_lock(&lock);
    for (int i = 0; i < set_count; i++)
        if (set[i].kernel == kernel && set[i].device == device && set[i].bytes == bytes) {
            pthread_mutex_unlock(&lock);
            return;
        }
    pthread_mutex_unlock(&lock);
    TT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
    pthread_mutex_lock(&lock);
    if (set_count < SET_CAPACITY) set[set_count++] = (set_attribute){kernel, device, bytes};
    pthread_mutex_unlock(&lock);
}
