/* bitsandbytes' 4-bit quantization on the host (the layout and the rules: ops/quant4.h): quantize
 * a frozen weight at load, and dequantize it to fp32 (the CPU backend's oracle, merge, checks).
 * Everything is plain fp32 arithmetic in a fixed order, so the same input gives the same bytes on
 * every machine. */
#ifndef TT_MODEL_QUANT4_H
#define TT_MODEL_QUANT4_H

#include <stdint.h>

#include "ops/quant4.h"

/* bitsandbytes' create_dynamic_map(signed=True, max_exponent_bits=7, total_bits=8), sorted: the
 * 8-bit code of the double-quantized absmax (computed once; safe from any thread). */
const float *tt_quant4_dynamic_map(void);
/* The value code (0..15) stands for, in [-1, 1] (NF4's table; FP4's as bitsandbytes' kernel
 * dequantizes it: sign times its table). */
float tt_quant4_code_value(tt_quant4_type type, unsigned code);
/* The code of a value already divided by its block's absmax: bitsandbytes' comparison tree
 * (dQuantizeNF4 / dQuantizeFP4), NaN giving what the tree gives it. */
unsigned tt_quant4_code_of(tt_quant4_type type, float normalized);

/* dst: tt_quant4_layout_of(numel, format).bytes bytes (the padding zeroed). src: numel values. Threads over blocks
 * (OpenMP), the same bytes whatever their count. */
void tt_quant4_quantize(void *dst, const float *src, int64_t numel, const tt_quant4_format *format);
/* The same in pieces, for callers that make the values piece by piece (random init, a checkpoint's tensor converted
 * a slice at a time): dst zeroed first; blocks [first_block, first_block + block_count) of the tensor of numel
 * values, theirs at src (the tensor's last block may be short): their codes into dst and each block's absmax into
 * absmax[block], which is the tensor's own (dst + layout.absmax) without double quantization and otherwise an fp32
 * array of every block for tt_quant4_quantize_nested, called once all are done. No threads of its own. */
void tt_quant4_quantize_blocks(void *dst, float *absmax, int64_t numel, tt_quant4_type type, int64_t first_block,
                               int64_t block_count, const float *src);
/* Double quantization of the absmax[blocks] of a tensor of numel values into dst: nested absmax, offset, codes. */
void tt_quant4_quantize_nested(void *dst, const float *absmax, int64_t numel);
/* Block b's absmax as dequantization uses it (with double quantization: decoded from its 8 bits). */
float tt_quant4_block_absmax(const void *src, const tt_quant4_layout *layout, const tt_quant4_format *format,
                             int64_t block);
/* dst[numel] fp32 = the dequantized values (threads over blocks; each value one product, the same bits). */
void tt_quant4_dequantize(float *dst, const void *src, int64_t numel, const tt_quant4_format *format);
/* Blocks [first_block, first_block + block_count) of it: dst[their values], from the block's first value on. */
void tt_quant4_dequantize_blocks(float *dst, const void *src, int64_t numel, const tt_quant4_format *format,
                                 int64_t first_block, int64_t block_count);

#endif
