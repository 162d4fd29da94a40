/* The pieces the decoder-layer blocks (block.h) are made of, shared by every block: row ranges of the
 * micro-batch and the MLP's shards (tiled_mlp), the weight a GEMM reads (dequantized with QLoRA), a LoRA adapter's
 * four steps around its base layer, and how RoPE's table rows map to the tokens. */
#ifndef TT_TRAIN_BLOCK_PARTS_H
#define TT_TRAIN_BLOCK_PARTS_H

#include <stdbool.h>
#include <stdint.h>

#include "train/step.h"

/* Rows [first, first + count) of the micro-batch's B*T: all of them, or one shard of the MLP's
 * (tiled_mlp). An adapter's saved down projection [N, r] is sliced to the rows, and its dropout
 * mask is the whole micro-batch's at those rows. */
typedef struct tt_row_range {
    int64_t first, count;
} tt_row_range;

tt_row_range tt_block_all_rows(const tt_model_state *state);
/* Row `first` of a [rows, width] tensor in the activation precision (NULL stays NULL). */
void *tt_block_row_at(const tt_model_state *state, void *base, int64_t first, int64_t width);

/* The MLP's shards: tiled_mlp's, or one of the whole micro-batch. */
bool tt_block_mlp_tiled(const tt_model_state *state);
int64_t tt_block_mlp_shard_count(const tt_model_state *state);
tt_row_range tt_block_mlp_shard(const tt_model_state *state, int64_t shard);

/* The weight a GEMM reads: the tensor itself, or with 4-bit frozen weights (QLoRA) the tensor dequantized into the
 * one shared buffer (sizes.dequant_buffer), which the GEMM that follows reads before the next dequantization
 * rewrites it. */
const void *tt_block_gemm_weight(tt_model_state *state, const tt_layer_view *layer, tt_param_kind kind, const void *w,
                                 int64_t numel);

/* Layer l's LoRA adapters around their base layers, by the projections they adapt (TT_LORA_Q ... TT_LORA_DOWN: the
 * module of a projection's own layer, or the fused layer computing it with others: Phi-3's qkv_proj, gate_up_proj),
 * over rows (S: the layer's saved slots, whose slot of a module holds its down projection); each does nothing where a
 * module is not adapted. A group is the projections that read one input (q, k, v; gate, up; o; down), so that a
 * fused layer's one adapter runs once a group:
 *   down: the down projections of x into their slots, when a slot is in `compute`;
 *   up: y += projection p's part of its adapter's up projection (after the base layer wrote y);
 *   backward_weights: the adapters' weight gradients from each projection's dy (dys, in the group's order) and the
 *     input x (before the base backward overwrites x), leaving each slot's gradient in the slot;
 *   backward_input: dx += the adapters' share of the input gradient (after the base layer's). */
void tt_block_adapters_down_rows(tt_model_state *state, int64_t l, const tt_lora_module *projections, int count,
                                 const void *x, void *const *S, tt_slot_set compute, const tt_row_range *rows);
void tt_block_adapter_up_rows(tt_model_state *state, int64_t l, tt_lora_module projection, void *y, void *const *S,
                              const tt_row_range *rows);
void tt_block_adapters_backward_weights_rows(tt_model_state *state, int64_t l, const tt_lora_module *projections,
                                             const void *const *dys, int count, const void *x, void *const *S,
                                             const tt_row_range *rows);
void tt_block_adapters_backward_input_rows(tt_model_state *state, int64_t l, const tt_lora_module *projections,
                                           int count, void *dx, void *const *S, const tt_row_range *rows);
/* The same over the whole micro-batch. */
void tt_block_adapters_down(tt_model_state *state, int64_t l, const tt_lora_module *projections, int count,
                            const void *x, void *const *S, tt_slot_set compute);
void tt_block_adapter_up(tt_model_state *state, int64_t l, tt_lora_module projection, void *y, void *const *S);
void tt_block_adapters_backward_weights(tt_model_state *state, int64_t l, const tt_lora_module *projections,
                                        const void *const *dys, int count, const void *x, void *const *S);
void tt_block_adapters_backward_input(tt_model_state *state, int64_t l, const tt_lora_module *projections, int count,
                                      void *dx, void *const *S);

/* How the RoPE tables' rows map to the micro-batch's B*T tokens: token t of each sequence takes row t of [T, hd/2]
 * (B sequences of T rows), or with packed documents token n takes row n of the micro-batch's gathered [N, hd/2]
 * (one "sequence" of N rows). */
typedef struct tt_rope_layout {
    int64_t sequences, rows;
} tt_rope_layout;

tt_rope_layout tt_block_rope_layout(const tt_model_state *state);

#endif
