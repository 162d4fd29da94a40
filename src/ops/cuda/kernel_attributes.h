/* A kernel's dynamic shared-memory limit, set once per kernel and device: the attribute belongs to the device (the
 * kernel keeps it for every later launch there), so the launchers ask here instead of calling cudaFuncSetAttribute
 * before each launch, a driver call each. */
#ifndef TT_OPS_CUDA_KERNEL_ATTRIBUTES_H
#define TT_OPS_CUDA_KERNEL_ATTRIBUTES_H

#ifdef __cplusplus
extern "C" {
#endif

/* cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes) on the current device, unless
 * this kernel was given these bytes there before. */
void tt_cuda_kernel_shared_bytes(const void *kernel, int bytes);

#ifdef __cplusplus
}
#endif

#endif
