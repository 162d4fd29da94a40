/* The step program's parts that live in files of their own (they belong to step.c's module).
 *
 * sequence_parallel.c: Ulysses sequence parallel (sequence_parallel_degree N, plan.sequence_parallel): each of the N processes holds 1/N of
 * every sequence's tokens through the whole layer (norms, projections, MLP, LM head and loss run on its tokens
 * alone) and trades tokens for heads around attention: an all-to-all turns its q, k, v ([B, T/N, H*hd]) into the
 * whole sequence for H/N heads ([B, T, H/N*hd]), the attention runs there (the plan's attention shape), and a second
 * all-to-all turns the output back. The backward does the same with the gradients, exchanging the saved q, k, v and
 * output again rather than keeping their exchanged copies. The ranks' gradients are then summed as data parallel's.
 *
 * The exchanged copies and two staging buffers live on the compute tier's arena only around each attention call
 * (size table: sequence_parallel_q / _kv); the dry run prices them like any other push. */
#ifndef TT_TRAIN_STEP_INTERNAL_H
#define TT_TRAIN_STEP_INTERNAL_H

#include "train/step.h"

/* The attention forward of a layer: out [B, T/N, H*hd] and lse from this rank's q [B, T/N, H*hd], k, v
 * [B, T/N, Hkv*hd]; lse in the exchanged layout (only the backward reads it). */
void tt_sequence_parallel_attention_forward(tt_model_state *state, const tt_attention_shape *shape, void *out,
                                            float *lse, const void *q, const void *k, const void *v);
/* Its backward: dq, dk, dv in this rank's layout from d_out and the saved out, lse, q, k, v. */
void tt_sequence_parallel_attention_backward(tt_model_state *state, const tt_attention_shape *shape, void *dq, void *dk,
                                             void *dv, const void *d_out, const void *out, const float *lse,
                                             const void *q, const void *k, const void *v, void *workspace, void *spare,
                                             size_t spare_bytes);

/* Pointers to one layer's saved activations (NULL for absent slots). */
typedef struct saved_tensors {
    void *slot[TT_SAVED_SLOT_COUNT];
    tt_arena_mark mark;     /* the arena before they were pushed: popping to it releases them */
    tt_arena_mark mlp_mark; /* before the MLP's slots (the last ones): popping to it releases those */
    size_t bytes;           /* pushed */
} saved_tensors;

/* Pushes the slots of `which` (absent slots skipped) in slot order, so the MLP's come last; slots outside `which` are
 * left NULL. */
void tt_step_push_slots(tt_model_state *state, saved_tensors *out, tt_slot_set which);

/* Calls the state's hooks at `point` of unit u (the embedding 0, layer l as l + 1, the head L + 1), the AFTER points
 * in reverse order. */
void tt_step_run_hooks(tt_model_state *state, tt_hook_point point, int64_t u, bool train);

#endif
