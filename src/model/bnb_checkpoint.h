/* Reading a weight saved in bitsandbytes' 4-bit format, as transformers saves a model loaded with
 * BitsAndBytesConfig(load_in_4bit=True) (bitsandbytes' Linear4bit state dict, QuantState.as_dict(packed=True)):
 *
 *   <name>                              U8 [(n + 1) / 2, 1]: the packed codes, the first value in the high nibble
 *                                       (another bnb_4bit_quant_storage dtype holds the same bytes)
 *   <name>.absmax                       F32 [blocks], or with double quantization U8 [blocks]: the absmax codes
 *   <name>.quant_map                    F32 [16]: the values of the 16 codes (NF4's or FP4's table)
 *   <name>.nested_absmax                F32 [nested blocks]        (double quantization)
 *   <name>.nested_quant_map             F32 [256]: the dynamic map (double quantization)
 *   <name>.quant_state.bitsandbytes__nf4 (or __fp4)
 *                                       U8 [bytes]: UTF-8 JSON {"quant_type", "blocksize", "dtype", "shape", and with
 *                                       double quantization "nested_blocksize", "nested_dtype", "nested_offset"}
 *
 * with n = out x in values in blocks of 64 (blocks = ceil(n / 64), nested blocks = ceil(blocks / 256)); config.json
 * carries quantization_config (model_config.h). Every part is checked against tiertrain's format (ops/quant4.h):
 * block sizes 64 and 256, the standard code tables, the shapes; what differs is an error naming the file, the
 * tensor, what was found and what to do. The bytes are then the checkpoint's own, copied into tiertrain's layout. */
#ifndef TT_MODEL_BNB_CHECKPOINT_H
#define TT_MODEL_BNB_CHECKPOINT_H

#include <stdbool.h>
#include <stdint.h>

#include "model/safetensors.h"
#include "ops/quant4.h"

/* Whether any tensor of the checkpoint is a 4-bit weight (has a quant_state). */
bool tt_bnb_checkpoint_is_4bit(const tt_st_model *model);
/* Whether weight `name` is stored 4-bit: it has a quant_state, or it is U8 (then find says what is missing). */
bool tt_bnb_weight_present(const tt_st_model *model, const char *name);

/* One 4-bit weight of the checkpoint, checked (the tensors point into the mapping). */
typedef struct tt_bnb_weight {
    char name[128];
    const char *file; /* the file holding <name> */
    tt_quant4_format format;
    int64_t numel;
    const tt_st_tensor *codes;         /* ceil(numel / 2) bytes */
    const tt_st_tensor *absmax;        /* F32 [blocks], or U8 [blocks] with double quantization */
    const tt_st_tensor *nested_absmax; /* F32 [nested blocks], or NULL */
    float nested_offset;
} tt_bnb_weight;

/* Finds and checks weight `name` of shape [rows, cols] (the model's); dies naming what is missing or differs. */
void tt_bnb_weight_find(tt_bnb_weight *weight, const tt_st_model *model, const char *name, int64_t rows, int64_t cols);
/* Writes the weight in tiertrain's layout (tt_quant4_layout_of(numel, &weight->format).bytes, padding zeroed). */
void tt_bnb_weight_copy(const tt_bnb_weight *weight, void *dst);

#endif
