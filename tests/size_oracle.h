/* The size table's peaks in closed form: the step program's push and pop order (src/train/step.c) written
 * as sums, as the size table computed them before the step program's dry run (src/train/measure.c) measured
 * them. A test oracle: a second description of the same order, so that a change to the step program that
 * moves a peak shows up as a difference to explain (then update both), not as a silent change of every
 * estimate. */
#ifndef TT_TESTS_SIZE_ORACLE_H
#define TT_TESTS_SIZE_ORACLE_H

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "memory/disk_store.h"
#include "memory/size_table.h"

/* Fills the peaks (class_peak, tier_peak, attention_room) of t, whose tensor sizes are set
 * (tt_size_table_tensors), for plan. */
static inline void tt_size_oracle_peaks(tt_size_table *t, const tt_model_config *m, const tt_param_table *params,
                                        const tt_plan *plan) {
    (void)m;
    memset(t->class_peak, 0, sizeof t->class_peak);
    memset(t->tier_peak, 0, sizeof t->tier_peak);
    t->attention_room = 0;
    /* The step program's order on the compute tier (see step.c):
     *   persistent: frozen weights, trainable weights, gradients, master, m, v, rope cos/sin, batch
     *     ids/targets, op scratch, LoRA dropout buffer
     *   per micro-step: L+1 layer inputs, d_residual, then
     *     forward layer l: its kept slots (K(l) bytes) pushed and left; its recomputed slots
     *       (R(l) bytes) pushed and popped around it;
     *     head: final-norm rstd and output, logits chunk, d_head, pushed then popped;
     *     backward layer l (L-1..0): the recomputed slots pushed again on top of the kept ones;
     *       the MLP backward; the MLP slots on top (M(l) bytes: the recomputed ones, and the kept ones
     *       too when nothing of the attention half was recomputed) popped; the attention
     *       backward's scratch pushed; then everything of the layer popped.
     * With P(l) the kept bytes of layers 0..l-1, layer l's forward holds P(l) + K(l) + R(l)
     * saved bytes and its backward at most that, or that - M(l) + the scratch. */
    const tt_tier c = plan->compute_tier;
    const int64_t L = plan->num_layers;
    /* Offloaded kept slots live in host memory, or on disk (spilled there: two pinned page-aligned
     * buffers carry them, and the disk holds a slot of the largest disk block per layer), and, on the
     * compute tier, in a ring of staging buffers (each as large as the largest layer's block) pushed
     * with the layer inputs. */
    t->host_tier = TT_TIER_PINNED;
    size_t largest_block = 0, blocks = 0, largest_disk_block = 0;
    int64_t blocks_on_disk = 0;
    for (int64_t l = 0; l < L; l++) {
        const size_t block = tt_offloaded_block_bytes(t, plan, l);
        if (block > largest_block) largest_block = block;
        if (!block) continue;
        if (plan->layers[l].saved_activation_tier == TT_TIER_DISK) {
            blocks_on_disk++;
            if (block > largest_disk_block) largest_disk_block = block;
        } else {
            blocks += block;
            t->host_tier = plan->layers[l].saved_activation_tier;
        }
    }
    t->saved_staging = largest_block ? (size_t)plan->saved_ring * largest_block : 0;
    t->saved_disk_slot = (largest_disk_block + TT_DISK_ALIGNMENT - 1) / TT_DISK_ALIGNMENT * TT_DISK_ALIGNMENT;
    if (blocks_on_disk) {
        blocks += 2 * t->saved_disk_slot;
        t->host_tier = TT_TIER_PINNED;
    }
    size_t kept_before = 0, saved_peak = 0, layer_peak = 0, attention_peak = 0;
    for (int64_t l = 0; l < L; l++) {
        size_t kept = 0, recomputed = 0, kept_mlp = 0, recomputed_mlp = 0, recomputed_attention = 0;
        const tt_slot_set offloaded = tt_offloaded_slots(t, plan, l);
        for (int i = 0; i < TT_SAVED_SLOT_COUNT; i++) {
            if ((offloaded >> i) & 1u) continue; /* in the staging ring */
            const bool again = (plan->layers[l].recompute >> i) & 1u, mlp = i >= TT_SAVED_FIRST_MLP_SLOT;
            *(again ? &recomputed : &kept) += t->saved_slot[i];
            if (mlp) *(again ? &recomputed_mlp : &kept_mlp) += t->saved_slot[i];
            if (again && !mlp) recomputed_attention += t->saved_slot[i];
        }
        const size_t held = kept_before + kept + recomputed;
        /* the MLP slots on top of the stack (step.c: mlp_top_mark) */
        const size_t top_mlp = recomputed_attention > 0 ? recomputed_mlp : kept_mlp + recomputed_mlp;
        const size_t attention_phase = held - top_mlp + t->layer_backward;
        if (held > saved_peak) saved_peak = held;
        if (held > layer_peak) layer_peak = held;
        /* the MLP backward's scratch above the layer's slots (a norm after the MLP, a scaled residual) */
        if (held + t->mlp_backward_scratch > layer_peak) layer_peak = held + t->mlp_backward_scratch;
        if (attention_phase > layer_peak) layer_peak = attention_phase;
        if (attention_phase > attention_peak) attention_peak = attention_phase;
        kept_before += kept;
    }
    const size_t saved_at_head = kept_before + t->head_rstd + t->head_normed;
    /* Offloaded layer inputs: host memory (pinned, or pageable with use_pin_memory: false) or the
     * disk holds them; the compute tier keeps the others, the LM head's input, and the ring of
     * staging buffers offloaded inputs pass through (at least two: a layer's input and output). */
    int64_t to_host = 0, to_disk = 0;
    for (int64_t l = 0; l < L; l++) {
        const tt_tier tier = plan->layers[l].layer_input_tier;
        if ((tier == TT_TIER_PINNED || tier == TT_TIER_HOST) && tier != c) {
            to_host++;
            t->host_tier = tier;
        }
        to_disk += tier == TT_TIER_DISK;
    }
    t->offloaded_inputs = to_host + to_disk;
    t->input_staging = t->offloaded_inputs ? (size_t)plan->offload_ring * t->layer_input : 0;
    /* the LM head's input takes a staging buffer when the last layer's input is offloaded */
    const bool head_input_in_ring = L > 0 && plan->layers[L - 1].layer_input_tier != c;
    const size_t inputs_on_compute =
        (size_t)(L + 1 - t->offloaded_inputs - head_input_in_ring) * t->layer_input + t->input_staging;
    /* the disk tier holds whole pages per input, and two pinned page-aligned buffers carry them */
    t->disk_slot = to_disk ? (t->layer_input + TT_DISK_ALIGNMENT - 1) / TT_DISK_ALIGNMENT * TT_DISK_ALIGNMENT : 0;
    if (to_disk) t->host_tier = TT_TIER_PINNED;
    const size_t host_inputs = (size_t)to_host * t->layer_input + (to_disk ? 2 * t->disk_slot : 0);
    t->class_peak[TT_CLASS_LAYER_INPUT][t->host_tier] = host_inputs;
    t->class_peak[TT_CLASS_SAVED_ACTIVATION][t->host_tier] = blocks;
    t->class_peak[TT_CLASS_MASTER][t->host_tier] = t->host_master;
    t->class_peak[TT_CLASS_OPTIMIZER_STATE][t->host_tier] = t->host_optimizer_state;
    t->class_peak[TT_CLASS_GRADIENT][t->host_tier] = t->host_gradients;
    t->class_peak[tt_trainable_weight_class(params)][t->host_tier] = t->host_weights + t->host_weight_home;
    t->tier_peak[t->host_tier] = host_inputs + blocks + t->host_master + t->host_optimizer_state + t->host_gradients +
                                 t->host_weights + t->host_weight_home;
    if (t->streamed_weights_host) { /* the pinned copy of the frozen weights (layer_offloading) */
        t->class_peak[TT_CLASS_FROZEN_WEIGHT][TT_TIER_PINNED] = t->streamed_weights_host;
        t->tier_peak[TT_TIER_PINNED] += t->streamed_weights_host;
    }
    t->class_peak[TT_CLASS_LAYER_INPUT][TT_TIER_DISK] = (size_t)to_disk * t->disk_slot;
    t->class_peak[TT_CLASS_SAVED_ACTIVATION][TT_TIER_DISK] = (size_t)blocks_on_disk * t->saved_disk_slot;
    t->tier_peak[TT_TIER_DISK] = (size_t)to_disk * t->disk_slot + (size_t)blocks_on_disk * t->saved_disk_slot;
    const size_t persistent_workspace = 2 * (size_t)t->rope_tables * t->rope_table + 2 * t->batch_ids +
                                        t->batch_positions + t->op_scratch + t->lora_dropout_buffer +
                                        t->dequant_buffer + t->norm_partials;

    t->class_peak[TT_CLASS_FROZEN_WEIGHT][c] = t->frozen_weights;
    t->class_peak[tt_trainable_weight_class(params)][c] = t->weights;
    t->class_peak[TT_CLASS_GRADIENT][c] = t->gradients;
    t->class_peak[TT_CLASS_MASTER][c] = t->master;
    t->class_peak[TT_CLASS_OPTIMIZER_STATE][c] = t->optimizer_state;
    t->class_peak[TT_CLASS_LAYER_INPUT][c] = inputs_on_compute;
    t->class_peak[TT_CLASS_SAVED_ACTIVATION][c] =
        t->saved_staging + (saved_peak > saved_at_head ? saved_peak : saved_at_head);
    t->class_peak[TT_CLASS_LOGITS][c] = t->logits_chunk;
    size_t transient_workspace = t->layer_backward > t->d_head ? t->layer_backward : t->d_head;
    if (t->mlp_backward_scratch > transient_workspace) transient_workspace = t->mlp_backward_scratch;
    t->class_peak[TT_CLASS_WORKSPACE][c] = persistent_workspace + t->d_residual + transient_workspace;

    size_t base = t->frozen_weights + t->weights + t->gradients + t->master + t->optimizer_state +
                  persistent_workspace + inputs_on_compute + t->saved_staging + t->d_residual;
    size_t at_head = saved_at_head + t->logits_chunk + t->d_head;
    t->tier_peak[c] = base + (layer_peak > at_head ? layer_peak : at_head);
    t->attention_room = t->tier_peak[c] - (base + attention_peak);
}

/* Whether the measured table's peaks equal the closed form's; if not, why names the first class and tier that
 * differ. */
static inline bool tt_size_oracle_agrees(const tt_size_table *measured, const tt_model_config *m,
                                         const tt_param_table *params, const tt_plan *plan, char *why, size_t size) {
    tt_size_table oracle = *measured;
    tt_size_oracle_peaks(&oracle, m, params, plan);
    for (int tier = 0; tier < TT_TIER_COUNT; tier++) {
        for (int cls = 0; cls < TT_CLASS_COUNT; cls++)
            if (oracle.class_peak[cls][tier] != measured->class_peak[cls][tier]) {
                snprintf(why, size, "class %s on %s: measured %zu, closed form %zu", tt_class_name(cls),
                         tt_tier_name(tier), measured->class_peak[cls][tier], oracle.class_peak[cls][tier]);
                return false;
            }
        if (oracle.tier_peak[tier] != measured->tier_peak[tier]) {
            snprintf(why, size, "tier %s: measured %zu, closed form %zu", tt_tier_name(tier), measured->tier_peak[tier],
                     oracle.tier_peak[tier]);
            return false;
        }
    }
    if (oracle.attention_room != measured->attention_room) {
        snprintf(why, size, "attention room: measured %zu, closed form %zu", measured->attention_room,
                 oracle.attention_room);
        return false;
    }
    return true;
}

#endif
