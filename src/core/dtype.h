#ifndef TT_CORE_DTYPE_H
#define TT_CORE_DTYPE_H

#include <stddef.h>
#include <stdint.h>

/* TT_U8: bytes (bitsandbytes' packed 4-bit weights and quantized absmax); never a compute format. */
typedef enum tt_dtype { TT_F32, TT_BF16, TT_F16, TT_F64, TT_I32, TT_I64, TT_U8, TT_DTYPE_COUNT } tt_dtype;

size_t tt_dtype_size(tt_dtype dtype);
/* Safetensors spelling: "F32", "BF16", "F16", "F64", "I32", "I64", "U8". */
const char *tt_dtype_safetensors_name(tt_dtype dtype);
/* Returns 0 and sets *out, or -1 for a name tiertrain does not know. */
int tt_dtype_from_safetensors_name(const char *name, tt_dtype *out);
/* torch spelling in config.json: "float32", "bfloat16", "float16". -1 if unknown. */
int tt_dtype_from_torch_name(const char *name, tt_dtype *out);
const char *tt_dtype_torch_name(tt_dtype dtype);

/* Element conversions, round-to-nearest-even for narrowing. */
float tt_bf16_to_f32(uint16_t v);
uint16_t tt_f32_to_bf16(float v);
float tt_f16_to_f32(uint16_t v);
uint16_t tt_f32_to_f16(float v);
/* Converts n elements of src (any float dtype) to fp32. src and dst need no alignment (file
 * data sits at any offset). */
void tt_convert_to_f32(float *dst, const void *src, tt_dtype src_dtype, size_t n);
/* Converts n fp32 elements to dst_dtype (F32, BF16, F16). */
void tt_convert_from_f32(void *dst, tt_dtype dst_dtype, const float *src, size_t n);

#endif
