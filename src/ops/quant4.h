/* The 4-bit storage of a frozen weight (QLoRA), bit-compatible with bitsandbytes' quantize_4bit:
 * blocks of TT_QUANT4_BLOCK consecutive values (row-major), each scaled by its absmax (max |x|) and
 * mapped to one of 16 codes (NF4: quantiles of N(0, 1); FP4: a 1-2-1 float), two codes per byte with
 * the first value in the high nibble. With double quantization (bnb_4bit_use_double_quant) the
 * absmax values are themselves quantized: their mean (the offset) is subtracted and the rest stored
 * as 8-bit codes of bitsandbytes' dynamic map in blocks of TT_QUANT4_NESTED_BLOCK, each with an fp32
 * absmax of its own.
 *
 * One quantized tensor of n values is one run of bytes (tt_quant4_layout):
 *   [codes: ceil(n/2) bytes] pad to 16 |
 *   plain:  [absmax: fp32 x blocks]
 *   double: [nested absmax: fp32 x nested blocks][offset: fp32][absmax codes: u8 x blocks]
 *   pad to 16.
 * Dequantization (the CPU oracle in model/quant4.c, the CUDA kernel likewise): value k is
 * code_value(code k) * absmax(k / 64) in fp32, with absmax(b) = dynamic[q_b] * nested(b / 256) +
 * offset (two fp32 roundings) under double quantization; the GPU rounds that fp32 product to bf16.
 *
 * The same layout holds an 8-bit base (load_in_8bit, TT_QUANT_INT8): one signed byte a value, round(x / absmax x
 * 127) in the same blocks of 64 with the same fp32 absmax (no double quantization); code_value(c) is c x (1/127) in
 * fp32. That is bitsandbytes' int8 absmax rule on blocks of 64 rather than LLM.int8's rows, and tiertrain
 * dequantizes it for the GEMM as it does a 4-bit weight (LLM.int8's int8 GEMM with fp16 outlier columns is not
 * reproduced): 1.0625 bytes a weight. */
#ifndef TT_OPS_QUANT4_H
#define TT_OPS_QUANT4_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define TT_QUANT4_BLOCK 64
#define TT_QUANT4_NESTED_BLOCK 256

/* The codes' values, as initializers for the CPU oracle's tables and the CUDA kernels' constant memory alike. NF4: the
 * 16 quantiles of N(0, 1) normalised to [-1, 1] (bitsandbytes' lookup table); FP4 (a sign bit, then three bits): the
 * magnitudes by the low three bits, divided by the format's max 12. */
#define TT_NF4_VALUES                                                                                       \
    {                                                                                                       \
        -1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f, -0.28444138169288635f,    \
            -0.18477343022823334f, -0.09105003625154495f, 0.0f, 0.07958029955625534f, 0.16093020141124725f, \
            0.24611230194568634f, 0.33791524171829224f, 0.44070982933044434f, 0.5626170039176941f,          \
            0.7229568362236023f, 1.0f                                                                       \
    }
#define TT_FP4_MAGNITUDES \
    { 0.0f, 0.005208333333f, 0.66666667f, 1.0f, 0.33333333f, 0.5f, 0.16666667f, 0.25f }

typedef enum tt_quant4_type { TT_QUANT4_NF4, TT_QUANT4_FP4, TT_QUANT_INT8 } tt_quant4_type;

/* An 8-bit code's value: code x TT_INT8_STEP, one fp32 product (the CPU oracle and the kernel alike). */
#define TT_INT8_STEP (1.0f / 127.0f)

static inline const char *tt_quant4_type_name(tt_quant4_type type) {
    return type == TT_QUANT4_NF4 ? "nf4" : type == TT_QUANT4_FP4 ? "fp4" : "int8";
}

/* Bytes of codes for numel values: two 4-bit codes a byte, or one 8-bit code. */
static inline size_t tt_quant4_code_bytes(int64_t numel, tt_quant4_type type) {
    return type == TT_QUANT_INT8 ? (size_t)numel : (size_t)(numel + 1) / 2;
}

typedef struct tt_quant4_format {
    tt_quant4_type type;
    bool double_quant; /* the absmax quantized to 8 bits (bnb_4bit_use_double_quant; never with TT_QUANT_INT8) */
} tt_quant4_format;

/* Byte offsets of the parts of one quantized tensor of `numel` values. */
typedef struct tt_quant4_layout {
    int64_t numel;
    int64_t blocks;        /* ceil(numel / 64) */
    int64_t nested_blocks; /* ceil(blocks / 256) with double quantization, else 0 */
    size_t codes;          /* offset 0: ceil(numel / 2) bytes (int8: numel) */
    size_t absmax;         /* plain: fp32 [blocks] */
    size_t nested_absmax;  /* double: fp32 [nested_blocks] */
    size_t offset;         /* double: fp32 [1] */
    size_t absmax_codes;   /* double: u8 [blocks] */
    size_t bytes;          /* the whole tensor, a multiple of 16 */
} tt_quant4_layout;

static inline size_t tt_quant4_pad16(size_t bytes) { return (bytes + 15) / 16 * 16; }

static inline tt_quant4_layout tt_quant4_layout_of(int64_t numel, const tt_quant4_format *format) {
    tt_quant4_layout l;
    memset(&l, 0, sizeof l); /* C and C++ (nvcc) alike, without a partial initializer */
    l.numel = numel;
    l.blocks = (numel + TT_QUANT4_BLOCK - 1) / TT_QUANT4_BLOCK;
    l.codes = 0;
    const size_t after_codes = tt_quant4_pad16(tt_quant4_code_bytes(numel, format->type));
    if (format->double_quant) {
        l.nested_blocks = (l.blocks + TT_QUANT4_NESTED_BLOCK - 1) / TT_QUANT4_NESTED_BLOCK;
        l.nested_absmax = after_codes;
        l.offset = l.nested_absmax + (size_t)l.nested_blocks * sizeof(float);
        l.absmax_codes = l.offset + sizeof(float);
        l.bytes = tt_quant4_pad16(l.absmax_codes + (size_t)l.blocks);
    } else {
        l.absmax = after_codes;
        l.bytes = tt_quant4_pad16(l.absmax + (size_t)l.blocks * sizeof(float));
    }
    return l;
}

#endif
