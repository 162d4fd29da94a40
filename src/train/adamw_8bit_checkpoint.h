/* A checkpoint's optimizer.safetensors under optimizer: adamw_bnb_8bit: the 8-bit AdamW state as it is, quantized,
 * so a resumed run continues bit for bit. Per trainable parameter, in table order:
 *   master.<name>             F32 [shape]   its weights (as every optimizer.safetensors has them)
 *   an 8-bit tensor (4096 elements or more):
 *     exp_avg_codes.<name>    U8  [shape]   the first moment's codes (bitsandbytes' state1)
 *     exp_avg_absmax.<name>   F32 [blocks]  the absmax of each 256-element block (absmax1)
 *     exp_avg_sq_codes.<name>, exp_avg_sq_absmax.<name>: the second moment's (state2, absmax2)
 *   a smaller one: exp_avg.<name>, exp_avg_sq.<name> F32 [shape], as AdamW saves them
 * and first the maps the codes index: quantization_map.exp_avg (signed) and quantization_map.exp_avg_sq (unsigned),
 * F32 [256] (qmap1, qmap2); the file's metadata says "optimizer": "adamw_bnb_8bit". */
#ifndef TT_TRAIN_ADAMW_8BIT_CHECKPOINT_H
#define TT_TRAIN_ADAMW_8BIT_CHECKPOINT_H

#include "model/safetensors.h"
#include "train/step.h"

/* Writes the file at path (atomically). */
void tt_adamw_8bit_save(const tt_model_state *state, const char *path);

/* The moments from an open optimizer.safetensors into the state (the master weights are the caller's). A tensor
 * missing or of another shape, or other maps, is an error naming the file and the tensor. */
void tt_adamw_8bit_load_moments(tt_model_state *state, const tt_st_file *file);

#endif
