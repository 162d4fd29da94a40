/* Dequantization of a 4-bit frozen weight (QLoRA; the layout and the rule: ops/quant4.h) into bf16 for the
 * cuBLASLt GEMM that reads it next. Each value is the fp32 product code value x block absmax, rounded once to
 * bf16: the CPU oracle's fp32 value (model/quant4.c), rounded, bit for bit. The products and the double-quantized
 * absmax use _rn intrinsics so nvcc cannot contract them into fused multiply-adds. */
#include <cuda_bf16.h>

#include "ops/cuda/cuda_check.h"
#include "ops/cuda/device_math.cuh"
#include "ops/cuda/ops_cuda.h"
#include "ops/cuda/quant4_device.cuh" /* the tables, code_value, block_absmax */
#include "ops/quant4.h"

/* Values per thread: four code bytes in, one 16-byte store of eight bf16 out. */
#define DEQUANT_VALUES 8

static __global__ void dequantize_4bit_kernel(tt_bf16 *out, const unsigned char *q, tt_quant4_layout l, bool nf4,
                                              bool double_quant) {
    const int64_t first = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * DEQUANT_VALUES;
    if (first >= l.numel) return;
    /* eight values never straddle a block of 64 (first is a multiple of 8) */
    const float absmax = block_absmax(q, &l, double_quant, first / TT_QUANT4_BLOCK);
    if (first + DEQUANT_VALUES <= l.numel) {
        const uint32_t codes = *(const uint32_t *)(q + first / 2);
        uint4 packed;
        tt_bf16 *o = (tt_bf16 *)&packed;
#pragma unroll
        for (int k = 0; k < DEQUANT_VALUES; k++) {
            const unsigned byte = (codes >> (8 * (k / 2))) & 0xffu;
            const unsigned code = k % 2 == 0 ? byte >> 4 : byte & 15u;
            o[k] = float_to_bf16(dequantized_value(code_value(code, nf4), absmax));
        }
        *(uint4 *)(out + first) = packed;
    } else {
        for (int64_t k = first; k < l.numel; k++) {
            const unsigned byte = q[k / 2];
            const unsigned code = k % 2 == 0 ? byte >> 4 : byte & 15u;
            out[k] = float_to_bf16(dequantized_value(code_value(code, nf4), absmax));
        }
    }
}

extern "C" void tt_cuda_quant4_set_dynamic_map(const float *map) {
    TT_CUDA_CHECK(cudaMemcpyToSymbol(dynamic_map, map, 256 * sizeof(float)));
    tt_cuda_quant4_gemm_set_dynamic_map(map); /* the fused GEMM's own copy (quant4_device.cuh) */
}

extern "C" void tt_cuda_dequantize_4bit(tt_bf16 *out, const void *quantized, int64_t numel,
                                        const tt_quant4_format *format, cudaStream_t stream) {
    if (numel <= 0) return;
    const tt_quant4_layout l = tt_quant4_layout_of(numel, format);
    const int threads = 256;
    const int64_t per_block = (int64_t)threads * DEQUANT_VALUES;
    dequantize_4bit_kernel<<<(unsigned)((numel + per_block - 1) / per_block), threads, 0, stream>>>(
        out, (const unsigned char *)quantized, l, format->type == TT_QUANT4_NF4, format->double_quant);
    TT_CUDA_CHECK(cudaGetLastError());
}
