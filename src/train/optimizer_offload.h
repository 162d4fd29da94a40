/* Optimizer offload (Megatron's optimizer_cpu_offload, optimizer_offload_fraction,
 * overlap_cpu_optimizer_d2h_h2d): the trainable parameters from sizes.optimizer_host_start on (a run of
 * whole units at the top of the stack, size_table.h) keep their fp32 master weights and AdamW moments in
 * host memory and are updated there by the CPU AdamW (cpu_adamw.h); the others are updated on the compute
 * tier by the backend's AdamW, as without offload. The compute tier keeps the whole weight and gradient
 * buffers (the forward and backward are unchanged); the host share's gradients are copied to a host
 * staging buffer, and its new weights back.
 *
 * Without overlap, tt_optimizer_offload_update does it all after the backward: one gradient copy out, the CPU
 * AdamW over the share, one weight copy back that the next op on the compute tier waits for.
 *
 * With overlap, per unit, on the copy engine (copy_async / copy_wait / copy_host_wait), in the optimizer
 * step's last micro-batch (armed by tt_optimizer_offload_expect_gradients):
 *   - after the backward finishes a unit's gradients (tt_optimizer_offload_after_backward, on the main
 *     thread) its gradient copy out starts, ordered after the ops that wrote them, and the unit is queued;
 *     with the gradient ring (plan.gradient_ring) a decoder layer's gradients are written into one of two
 *     slots, which tt_optimizer_offload_before_backward zeroes once the slot's previous copy out is done,
 *     and their sum of squares for the gradient norm is taken before the copy out, so the compute tier
 *     never holds more than two layers' gradients of the host share. With several micro-batches per
 *     step, every micro-batch's backward copies a ringed layer's gradients out to the host staging, and
 *     the next micro-batch copies them back into its slot before that layer's backward (issued when the
 *     slot's previous copy out is, a layer ahead) instead of zeroing it: the backward's ops accumulate
 *     into them as they would into the whole buffer, the same bits;
 *   - the worker thread (started here, the only thread this module owns) takes a queued unit once the
 *     update's gradient scale is known (the lowest whose gradients have arrived, else the one whose copy out
 *     finishes first): at once with max_grad_norm 0 (so it updates while the compute
 *     goes on with the units below), else when tt_optimizer_offload_update hands over the clipping factor
 *     of the global norm (the norm needs every gradient, so with clipping no update can start earlier; the
 *     copies still run beside the backward). It waits for the unit's copy out (copy_host_wait), runs the
 *     CPU AdamW and marks the unit updated;
 *   - the main thread starts the weight copy back of every updated unit whenever it passes a hook, and
 *     before the forward reads a unit's weights (tt_optimizer_offload_before_forward) it waits for the
 *     unit's update (host) and makes the compute stream wait for its copy back (copy_wait): the lowest
 *     host units, needed first, are updated first, and the copies of the upper ones run beside the forward
 *     of the lower ones;
 *   - tt_optimizer_offload_update makes the compute stream wait for every gradient copy out of the step, so
 *     the next step's zeroing of the gradients cannot overtake them; a unit's staging buffers are rewritten
 *     only in the next step, after its copy back (the next copy out is ordered after the forward that
 *     waited for it).
 * Only the main thread issues copies; the worker only waits on them. The gradient norm is the backend's
 * sum of squares over the whole compute-tier gradient buffer, as without offload, so clipping gives the
 * same factor; with the CPU backend every fraction and both schedules give the weights of a run without
 * offload bit for bit (tests/test_optimizer_offload.c). */
#ifndef TT_TRAIN_OPTIMIZER_OFFLOAD_H
#define TT_TRAIN_OPTIMIZER_OFFLOAD_H

#include <stdbool.h>
#include <stdint.h>

#include "train/cpu_adamw.h"
#include "train/optimizer.h"
#include "train/step.h"

typedef struct tt_optimizer_offload_unit tt_optimizer_offload_unit;
struct tt_optimizer_offload_worker;

typedef struct tt_optimizer_offload {
    const tt_backend *backend;
    tt_model_state *state;
    int64_t num_layers;
    int64_t host_start, host_numel;      /* the host share, in the trainable layout */
    const int64_t *unit_start;           /* [L + 3] the model state's (tt_optimizer_unit_starts) */
    int64_t first_host_unit;             /* units from here on are the host share */
    int64_t end_unit;                    /* ... up to here: L + 2, or the end of this rank's zero_stage shard */
    float *master, *m, *v;               /* [host_numel] fp32, host memory */
    void *gradients;                     /* [host_numel] gradient precision, host staging */
    uint16_t *weights_bf16;              /* [host_numel] bf16 staging of the new weights, or NULL (fp32 compute copy:
                                       master goes back) */
    void *device_gradients;              /* the compute tier's gradients at host_start */
    size_t weight_bytes, gradient_bytes; /* per element on the compute tier */
    /* The host share's decay segments, from 0. */
    int host_segments;
    int64_t *host_segment_start;
    unsigned char *host_segment_decays;
    tt_cpu_adamw_pool *pool;
    bool overlap;
    tt_optimizer_offload_unit *units; /* [L + 2] */
    /* The gradient ring: each slot's last copy out; the copy in of a unit's partial gradients (from an earlier
     * micro-batch of the step, in the host staging) into each slot, and the unit it is for (-1: none); which
     * units have partial gradients in the host staging. */
    uint64_t ring_copy[2], ring_load[2];
    int64_t ring_load_unit[2];
    bool *ring_partial;                         /* [L + 2] */
    struct tt_optimizer_offload_worker *worker; /* with overlap */
    /* the end-of-run report: CPU AdamW time and bytes, copies */
    double adamw_seconds;
    double adamw_bytes;
    int64_t adamw_parameters;
} tt_optimizer_offload;

/* Carves the host share's buffers from state->host (sized by the size table) and starts the pool (threads:
 * 0 for every CPU) and, with overlap, the worker. NULL when the plan has no optimizer offload. */
tt_optimizer_offload *tt_optimizer_offload_create(tt_model_state *state, int threads);
void tt_optimizer_offload_free(tt_optimizer_offload *offload);

/* The next backward's gradients are the optimizer step's final ones (its last micro-batch), and the update
 * will use these settings (overlap only; otherwise nothing happens until tt_optimizer_offload_update). */
void tt_optimizer_offload_expect_gradients(tt_optimizer_offload *offload, const tt_adamw_settings *settings,
                                           float learning_rate, int64_t step);

/* The step program's hooks (NULL offload: nothing). unit: 0 the embedding, l + 1 layer l, L + 1 the final
 * norm and LM head. */
void tt_optimizer_offload_before_forward(tt_optimizer_offload *offload, int64_t unit);
/* Before the backward writes unit's gradients: with the gradient ring, its slot is zeroed once the slot's last
 * copy out is done (the compute stream waits, the host does not). */
void tt_optimizer_offload_before_backward(tt_optimizer_offload *offload, int64_t unit);
void tt_optimizer_offload_after_backward(tt_optimizer_offload *offload, int64_t unit);
/* Whether unit's gradients live in the gradient ring (so its sum of squares is taken in after_backward, before the
 * slot is reused); false for a NULL offload. */
bool tt_optimizer_offload_unit_streamed(const tt_optimizer_offload *offload, int64_t unit);

/* Where the host share's new weights of trainable element `element` are written (the bf16 staging, or with an fp32
 * compute copy the master weights): the home of a weight-offloaded layer in the host share. */
void *tt_optimizer_offload_weights_home(const tt_optimizer_offload *offload, int64_t element);

/* The optimizer step's update: the compute tier's share through the backend, the host share on the CPU (now,
 * or with overlap by the worker, which gets grad_scale here). */
/* Optimizer offload's part in a step (unit_hooks.h): before_forward at BEFORE_FORWARD (and, when the weight stream of
 * cpu_offloading_weights prefetches the next layer there, the next unit's too: the prefetch reads the home the CPU
 * AdamW writes), before_backward at BEFORE_GRADIENTS, after_backward at AFTER_BACKWARD. ctx: the offload. */
void tt_optimizer_offload_hook(void *ctx, tt_hook_point point, int64_t unit, bool train);

void tt_optimizer_offload_update(tt_optimizer_offload *offload, const tt_adamw_settings *settings, float learning_rate,
                                 int64_t step, float grad_scale);

/* Every update done and every weight copy back complete (blocks the host): before the host reads the
 * master weights, the moments or the compute tier's weights (checkpoints, the final model). */
void tt_optimizer_offload_finish(tt_optimizer_offload *offload);

/* "CPU AdamW: X GB/s over N parameters (...)" for the end-of-run report, or "" when nothing ran. */
void tt_optimizer_offload_describe(const tt_optimizer_offload *offload, char *buf, size_t size);

#endif
