/* Device side of the 4-bit weight format (ops/quant4.h), shared by the dequantization kernel (kernels_quant4.cu) and
 * the fused 4-bit GEMM (kernels_quant4_gemm.cu), so both make the same bf16 operand values by construction: a value is
 * the fp32 product code value x block absmax, and a double-quantized absmax is dynamic[code] x nested + offset, each
 * product and sum rounded on its own (_rn intrinsics: nvcc may not contract them into fused multiply-adds, which the
 * CPU oracle in model/quant4.c does not use either). Included by .cu files only.
 *
 * The tables are `static __constant__`: every including file has its own copy. The dynamic map is uploaded into
 * each copy by tt_cuda_quant4_set_dynamic_map (kernels_quant4.cu), which calls the fused GEMM's upload below. */
#ifndef TT_OPS_CUDA_QUANT4_DEVICE_CUH
#define TT_OPS_CUDA_QUANT4_DEVICE_CUH

#include <stdint.h>

#include "ops/quant4.h"

static __constant__ float nf4_values[16] = TT_NF4_VALUES;
static __constant__ float fp4_magnitudes[8] = TT_FP4_MAGNITUDES;
/* bitsandbytes' dynamic map (the double-quantized absmax's code), uploaded once by tt_cuda_quant4_set_dynamic_map. */
static __constant__ float dynamic_map[256];

/* The fused GEMM file's copy of the dynamic map (its own __constant__ array); called by
 * tt_cuda_quant4_set_dynamic_map, not by anyone else. */
extern "C" void tt_cuda_quant4_gemm_set_dynamic_map(const float *map);

static __device__ __forceinline__ float code_value(unsigned code, bool nf4) {
    if (nf4) return nf4_values[code & 15u];
    const float sign = 1.0f - (float)(2 * ((code & 8u) >> 3));
    return __fmul_rn(fp4_magnitudes[code & 7u], sign);
}

/* A double-quantized block's absmax from its dynamic-map value, its nested block's absmax and the tensor's offset. */
static __device__ __forceinline__ float double_quant_absmax(float map_value, float nested, float offset) {
    return __fadd_rn(__fmul_rn(map_value, nested), offset);
}

/* One dequantized value: the fp32 product, which the caller rounds once to bf16. */
static __device__ __forceinline__ float dequantized_value(float code_value_of_code, float absmax) {
    return __fmul_rn(code_value_of_code, absmax);
}

#endif
