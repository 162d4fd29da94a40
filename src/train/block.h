/* A decoder layer's arithmetic: the ops of its forward and its hand-written backward, through the backend table,
 * reading and writing the layer's saved slots (model/saved_slots.h). The step program pushes the slots, runs the
 * block and pops them; it never looks at a family's features. Each family's description (model/arch.h) names its
 * block (tt_block_kind); a block reads the description for what varies within it (q/k norms, ...).
 *
 * The contract every block keeps:
 * - forward writes each slot of `compute` with the op the family's slot table names, and the layer output x_out
 *   unless it is NULL (a recompute in the backward needs the slots only); an op runs when any of its outputs is in
 *   `compute`, reading inputs that are there (kept or computed before it); a recomputed op may rewrite a kept
 *   output beside the one wanted with the same bits (every op is deterministic);
 * - backward_mlp turns d_residual from the gradient of the layer output into that of the residual after attention
 *   and adds the MLP half's parameter gradients; it may overwrite the MLP half's slots (they are popped after it),
 *   and uses no other memory than its scratch (the gradient of down_proj's output, where that is not d_residual);
 * - backward_attention turns d_residual into the gradient of the layer input and adds the attention half's
 *   parameter gradients, with the attention backward's scratch W (size_table.h: tt_backward_slot) and spare
 *   bytes of dead compute-tier memory the attention may use as workspace. */
#ifndef TT_TRAIN_BLOCK_H
#define TT_TRAIN_BLOCK_H

#include <stddef.h>
#include <stdint.h>

#include "model/arch.h"

struct tt_model_state;

typedef struct tt_block {
    const char *name;
    /* S: the layer's slots by tt_saved_slot (NULL where absent or not pushed) */
    void (*forward)(struct tt_model_state *state, int64_t layer, const void *x_in, void *const *S, void *x_out,
                    tt_slot_set compute);
    /* scratch: sizes.mlp_backward_scratch bytes above the layer's slots (NULL when 0) */
    void (*backward_mlp)(struct tt_model_state *state, int64_t layer, void *const *S, void *scratch, void *d_residual);
    void (*backward_attention)(struct tt_model_state *state, int64_t layer, const void *x_in, void *const *S,
                               void *const *W, void *d_residual, void *spare, size_t spare_bytes);
} tt_block;

/* The blocks (block_<name>.c). */
extern const tt_block tt_block_dense, tt_block_moe;

/* The dense block's attention half, which the mixture-of-experts block shares: its forward (the slots of `compute`
 * among the attention half's) and its backward (tt_block.backward_attention). */
void tt_block_dense_attention_forward(struct tt_model_state *state, int64_t layer, const void *x_in, void *const *S,
                                      tt_slot_set compute);
void tt_block_dense_backward_attention(struct tt_model_state *state, int64_t layer, const void *x_in, void *const *S,
                                       void *const *W, void *d_residual, void *spare, size_t spare_bytes);

/* The block a family's layers run. */
const tt_block *tt_block_for(const tt_arch *arch);

#endif
