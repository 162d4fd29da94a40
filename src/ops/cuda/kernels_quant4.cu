/* Dequantization of a 4-bit (QLoRA) or 8-bit (load_in_8bit) frozen weight (the layout and the rule: ops/quant4.h) into bf16 for the
 * cuBLASLt GEMM that reads it next. Each value is the fp32 product code value x block absmax, rounded once to
 * bf16: the CPU oracle's fp32 value (model/quant4.c), rounded, bit for bit. The products and the double-quantized
 * absmax use _rn intrinsics so nvcc cannot contract them into fused multiply-adds. */
#include <cuda_bf16.h>

#include "ops/cuda/cuda_check.h"
#include "ops/cuda/device_math.cuh"
#include "ops/cuda/ops_cuda.h"
#include "ops/cuda/quant4_device.cuh" /* the tables, code_value, double_quant_absmax */
#include "ops/quant4.h"

/* Values per thread and turn: four code bytes in, one 16-byte store of eight bf16 out. */
#define DEQUANT_VALUES 8
#define DEQUANT_THREADS 256
/* Blocks a launch at most (the grid strides): each block first copies the tables into shared memory, so it works
 * through many turns rather than one. */
#define DEQUANT_MAX_BLOCKS 2048

/* The tables are looked up from shared memory: in constant memory a warp's different addresses (up to 16 codes, 4
 * absmax codes a warp) are served one after another, which held the kernel to about a fifth of the memory's
 * bandwidth (H100: 0.066 ms for 16.8M values). code_table[c] is code_value(c) itself, map_table the dynamic map:
 * the same fp32 values, the same products, the same bits. */
static __global__ void __launch_bounds__(DEQUANT_THREADS)
    dequantize_4bit_kernel(tt_bf16 *out, const unsigned char *q, tt_quant4_layout l, bool nf4, bool double_quant) {
    __shared__ float code_table[16];
    __shared__ float map_table[256];
    if (threadIdx.x < 16) code_table[threadIdx.x] = code_value(threadIdx.x, nf4);
    if (double_quant)
        for (unsigned i = threadIdx.x; i < 256; i += blockDim.x) map_table[i] = dynamic_map[i];
    __syncthreads();
    const float offset = double_quant ? *(const float *)(q + l.offset) : 0.0f;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x * DEQUANT_VALUES;
    for (int64_t first = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * DEQUANT_VALUES; first < l.numel;
         first += stride) {
        /* eight values never straddle a block of 64 (first is a multiple of 8) */
        const int64_t b = first / TT_QUANT4_BLOCK;
        const float absmax =
            double_quant
                ? double_quant_absmax(map_table[q[l.absmax_codes + b]],
                                      ((const float *)(q + l.nested_absmax))[b / TT_QUANT4_NESTED_BLOCK], offset)
                : ((const float *)(q + l.absmax))[b];
        if (first + DEQUANT_VALUES <= l.numel) {
            const uint32_t codes = *(const uint32_t *)(q + first / 2);
            uint4 packed;
            tt_bf16 *o = (tt_bf16 *)&packed;
#pragma unroll
            for (int k = 0; k < DEQUANT_VALUES; k++) {
                const unsigned byte = (codes >> (8 * (k / 2))) & 0xffu;
                const unsigned code = k % 2 == 0 ? byte >> 4 : byte & 15u;
                o[k] = float_to_bf16(dequantized_value(code_table[code], absmax));
            }
            *(uint4 *)(out + first) = packed;
        } else {
            for (int64_t k = first; k < l.numel; k++) {
                const unsigned byte = q[k / 2];
                const unsigned code = k % 2 == 0 ? byte >> 4 : byte & 15u;
                out[k] = float_to_bf16(dequantized_value(code_table[code], absmax));
            }
        }
    }
}

/* The 8-bit form (load_in_8bit): a signed byte a value, code x (1/127) x block absmax, each product rounded on its own
 * as the CPU oracle rounds it; eight code bytes in, one 16-byte store of eight bf16 out. */
static __global__ void __launch_bounds__(DEQUANT_THREADS)
    dequantize_int8_kernel(tt_bf16 *out, const unsigned char *q, tt_quant4_layout l) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x * DEQUANT_VALUES;
    for (int64_t first = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * DEQUANT_VALUES; first < l.numel;
         first += stride) {
        const float absmax = ((const float *)(q + l.absmax))[first / TT_QUANT4_BLOCK];
        if (first + DEQUANT_VALUES <= l.numel) {
            const uint2 codes = *(const uint2 *)(q + first);
            const signed char *c = (const signed char *)&codes;
            uint4 packed;
            tt_bf16 *o = (tt_bf16 *)&packed;
#pragma unroll
            for (int k = 0; k < DEQUANT_VALUES; k++)
                o[k] = float_to_bf16(dequantized_value(__fmul_rn((float)c[k], TT_INT8_STEP), absmax));
            *(uint4 *)(out + first) = packed;
        } else {
            for (int64_t k = first; k < l.numel; k++)
                out[k] = float_to_bf16(dequantized_value(__fmul_rn((float)(signed char)q[k], TT_INT8_STEP), absmax));
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
    const int64_t per_block = (int64_t)DEQUANT_THREADS * DEQUANT_VALUES;
    const int64_t blocks = (numel + per_block - 1) / per_block;
    const unsigned grid = (unsigned)(blocks < DEQUANT_MAX_BLOCKS ? blocks : DEQUANT_MAX_BLOCKS);
    if (format->type == TT_QUANT_INT8) {
        dequantize_int8_kernel<<<grid, DEQUANT_THREADS, 0, stream>>>(out, (const unsigned char *)quantized, l);
        TT_CUDA_CHECK(cudaGetLastError());
        return;
    }
    dequantize_4bit_kernel<<<grid, DEQUANT_THREADS, 0, stream>>>(out, (const unsigned char *)quantized, l,
                                                                 format->type == TT_QUANT4_NF4, format->double_quant);
    TT_CUDA_CHECK(cudaGetLastError());
}
