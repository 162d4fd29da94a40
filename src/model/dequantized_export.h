/* `tiertrain dequantize`: a Hugging Face model whose q/k/v/o/gate/up/down weights are what a QLoRA run computes with,
 * the 4-bit weights dequantized (fp32 products code value x block absmax, the CPU oracle's values), so that tools
 * without bitsandbytes (transformers + peft on any machine) can run a QLoRA adapter on exactly tiertrain's base
 * (tests/peft_load_check.py). */
#ifndef TT_MODEL_DEQUANTIZED_EXPORT_H
#define TT_MODEL_DEQUANTIZED_EXPORT_H

#include <stddef.h>

#include "ops/quant4.h"

/* base_dir: a Hugging Face model in a float dtype, whose linear weights are quantized to `format` first as adapter:
 * qlora does at load, or one saved in bitsandbytes' 4-bit format, whose weights are dequantized as they are (format
 * NULL, or the checkpoint's: another is an error). Writes out_dir (which exists): every tensor in F32, config.json
 * without quantization_config, the tokenizer and generation files copied. The model streams from the checkpoint to
 * the output a piece at a time: the host holds one linear weight in fp32 at most (quantized at once, as QLoRA does). */
void tt_export_dequantized(const char *base_dir, const tt_quant4_format *format, const char *out_dir,
                           size_t max_shard_bytes);

#endif
