/* The size table: the bytes of every tensor, and the peak of every tensor class per tier, from the
 * model config, the micro-batch, the sequence length and the plan. The tensor sizes are computed
 * here (tt_size_table_tensors); the peaks are measured by running the step program itself against
 * arenas that only count (tt_size_table_measure, train/measure.h), so the order in which buffers are
 * pushed is described once, by the code that pushes them. The arenas are reserved with exactly these
 * peaks, `tiertrain plan` prints them, and tests check that a real run's arenas reach exactly them and
 * that a closed-form sum of the same order (tests/size_oracle.h) agrees. */
#ifndef TT_MEMORY_SIZE_TABLE_H
#define TT_MEMORY_SIZE_TABLE_H

#include <stddef.h>
#include <stdio.h>

#include "core/arena.h"
#include "memory/plan.h"
#include "model/saved_slots.h"
#include "model/model_config.h"
#include "model/params.h"
#include "ops/backend.h"

/* Scratch of one layer's attention backward (class workspace), pushed after the MLP's saved
 * tensors are popped. The MLP's gradients, both norm outputs' gradients and the q/k norms' input
 * gradients need none: they overwrite tensors that are dead by then (see train/block_dense.c). */
typedef enum tt_backward_slot {
    TT_BACKWARD_D_ATTN_OUT, /* [N, Hq*hd] */
    TT_BACKWARD_D_Q,        /* [N, Hq*hd] */
    TT_BACKWARD_D_K,        /* [N, Hkv*hd] */
    TT_BACKWARD_D_V,        /* [N, Hkv*hd] */
    TT_BACKWARD_ATTENTION,  /* the backend's attention backward workspace (tt_backend.attention_workspace_bytes) */
    /* [N, D] the gradient of o_proj's output where it is not the residual stream's (a norm after attention, Granite's
     * residual_multiplier: tt_size_table_projection_gradient), else absent */
    TT_BACKWARD_D_ATTN_PROJ,
    TT_BACKWARD_SLOT_COUNT
} tt_backward_slot;

typedef struct tt_size_table {
    /* Per-tensor sizes (bytes, rounded to TT_ALIGNMENT; 0 = absent) */
    size_t saved_slot[TT_SAVED_SLOT_COUNT];
    size_t backward_slot[TT_BACKWARD_SLOT_COUNT];
    size_t layer_saved;       /* sum of saved_slot: one layer's saved activations */
    size_t layer_backward;    /* sum of backward_slot */
    size_t layer_input;       /* one layer input [N, D] */
    int64_t offloaded_inputs; /* layer inputs kept in host memory or on disk between forward and backward */
    tt_tier host_tier;        /* where offloaded inputs live in host memory: pinned, or host (pageable) */
    size_t input_staging;     /* compute-tier buffers offloaded layer inputs rotate through (plan.offload_ring
                                inputs, or 0) */
    size_t disk_slot;         /* one layer input on disk (whole pages), 0 without disk offload */
    size_t saved_staging;     /* compute-tier ring the offloaded kept activations pass through (plan.saved_ring
                                blocks of the largest layer's), or 0 */
    size_t saved_disk_slot;   /* the largest kept block on disk, whole pages (a disk slot and each of the two
                                pinned buffers that carry them), 0 without kept blocks on disk */
    size_t head_rstd;         /* [N] fp32 final-norm 1/rms */
    size_t head_normed;       /* [N, D] final-norm output */
    size_t logits_chunk;      /* [loss_chunk, V] activation precision */
    size_t d_head;            /* [N, D] gradient of the final-norm output */
    size_t d_residual;        /* [N, D] gradient of the residual stream, lives through the backward */
    size_t
        rope_table; /* [T, rotary_dim/2] fp32, cos and sin each; packed documents: [N, rotary_dim/2], the batch's rows */
    int rope_tables; /* the RoPE tables (each a cos and a sin): the global one, and Gemma 3's local one; 0 without RoPE */
    /* [N, D] the gradient of down_proj's output where it is not the residual stream's (as TT_BACKWARD_D_ATTN_PROJ),
     * pushed for the MLP half's backward above its slots, else 0 */
    size_t mlp_backward_scratch;
    size_t batch_ids;             /* [N] int32, inputs and targets each */
    size_t batch_positions;       /* [N] int32, each token's position in its document; 0 unless packed */
    size_t op_scratch;            /* the backend's scratch for one op call (tt_backend.scratch_bytes) */
    size_t norm_partials;         /* [L + 2] double: each optimizer unit's sum of squares of its gradients */
    size_t data_parallel_buckets; /* the gradient sum's buckets across processes (tt_comm_sum_scratch_bytes), or 0 */
    size_t lora_dropout_buffer;   /* [N, widest input of an adapted layer]: lora_dropout's workspace, or 0 */
    size_t dequant_buffer; /* QLoRA: [largest linear weight] in the compute precision, dequantized from 4 bits, or 0 */
    /* sequence parallel (train/sequence_parallel.c): one exchanged q-sized ([N, Hq*hd]) and kv-sized ([N, Hkv*hd])
     * buffer, pushed around each attention call; 0 without */
    size_t sequence_parallel_q, sequence_parallel_kv;
    /* Whole-model buffers: the frozen parameters' weights, and the trainable parameters' weights,
     * gradients, fp32 master copy and AdamW moments (params->trainable_numel elements each). */
    size_t frozen_weights, weights, gradients, master, optimizer_state;
    /* layer_offloading: the frozen weights' pinned copy, one streaming buffer (the largest
     * streamed layer; two are pushed) and the frozen parameters that stay on the compute tier;
     * frozen_weights is then resident + two buffers. 0 without layer_offloading. */
    size_t streamed_weights_host, weight_ring, frozen_resident;
    /* Optimizer offload: the trainable parameters from optimizer_host_start on (trainable layout, a unit
     * boundary; trainable_numel when nothing is offloaded) keep their fp32 master weights and AdamW moments in
     * host memory (host_tier), with host staging buffers for their gradients (gradient precision) and, when the
     * compute copy is not fp32, their new weights; master and optimizer_state above count the compute tier's
     * share, [0, optimizer_host_start). */
    int64_t optimizer_host_start, optimizer_host_numel;
    /* ZeRO stage 1 (optimizer_shards.h): the trainable elements whose master weights and moments this rank keeps
     * and updates, [optimizer_shard_start, optimizer_shard_end) (all of them otherwise); master and optimizer_state
     * count the compute tier's share of these only. */
    int64_t optimizer_shard_start, optimizer_shard_end;
    /* ZeRO stage 2 (tt_sharded_unit_layout): one of the two ring slots of the other ranks' decoder layers'
     * gradients (`gradients` is then that layout's bytes), or 0 */
    size_t sharded_gradient_slot;
    /* ZeRO stage 3: the same for the trainable weights (`weights` is then that layout's bytes), or 0 */
    size_t sharded_weight_slot;
    /* The gradient ring (plan.gradient_ring): units gradient_ring_first .. L (decoder layers of the host share;
     * L + 1 when there is no ring) have their gradients in one of two slots of gradient_ring_slot bytes (unit u in
     * slot u % 2) instead of the flat buffer; the compute tier's gradients are then [the units before
     * gradient_ring_first | slot 0 | slot 1 | unit L + 1], `gradients` bytes in all. */
    int64_t gradient_ring_first;
    size_t gradient_ring_slot;
    size_t host_master, host_optimizer_state, host_gradients, host_weights;
    /* Weight offload (plan.offloaded_weight_layers, cpu_offloading_weights): the trainable weights of units
     * 1 .. offloaded_weight_layers, the trainable elements [weight_offload_first, weight_offload_end), live in host
     * memory and pass through two compute-tier buffers of weight_offload_slot bytes (the largest such unit); the
     * compute tier's trainable weights are then [elements before | buffer 0 | buffer 1 | elements after], `weights`
     * bytes in all. In host memory, the units of the optimizer's host share live in its weight staging (or, with
     * an fp32 compute copy, its master weights), the others in host_weight_home (compute precision). Without
     * weight offload the range is empty, at trainable_numel. */
    int64_t weight_offload_first, weight_offload_end;
    size_t weight_offload_slot, host_weight_home;

    /* Peaks: per class and tier (each class at its own worst moment), and per tier (the
     * arena's high-water mark: the bytes it reserves). */
    size_t class_peak[TT_CLASS_COUNT][TT_TIER_COUNT];
    size_t tier_peak[TT_TIER_COUNT];
    /* Bytes the attention backward's workspace could grow by without raising the compute tier's peak (the
     * MLP's tensors, the forward or the head set it). */
    size_t attention_room;
} tt_size_table;

/* attn_workspace_limit auto (0): at least this much for cuDNN's dP, more where the step leaves room. */
#define TT_ATTENTION_WORKSPACE_LEAST ((size_t)1 << 30)

/* Whether a half's output projection gets a gradient of its own in the backward, not the residual stream's: behind a
 * norm after the half (Gemma, OLMo 2) or scaled before the add (Granite's residual_multiplier). */
bool tt_size_table_projection_gradient(const tt_model_config *model);

/* The class of the trainable weights: LoRA adapters when the run trains adapters, else weights. */
static inline tt_class tt_trainable_weight_class(const tt_param_table *params) {
    return params->lora_rank > 0 ? TT_CLASS_LORA : TT_CLASS_WEIGHT;
}

/* Layer l's kept slots that live off the compute tier (the plan's offloaded set, without slots
 * under min_offload_bytes), and their bytes: the block that moves. Valid once saved_slot is set. */
tt_slot_set tt_offloaded_slots(const tt_size_table *table, const tt_plan *plan, int64_t l);
size_t tt_offloaded_block_bytes(const tt_size_table *table, const tt_plan *plan, int64_t l);

/* Optimizer offload's units, in the order of the trainable layout: the embedding (unit 0), decoder layer l
 * (unit l + 1; its adapters with LoRA) and the final norm with the LM head (unit L + 1). Unit u is the
 * trainable elements [start[u], start[u + 1]) (padding included; empty where nothing trains); start has
 * num_layers + 3 entries. The backward finishes their gradients from the last unit down, so the host share is a
 * run of whole units at the end. */
/* The whole model's gradients in bytes, which data parallel's buckets are sized by on every rank alike. */
size_t tt_data_parallel_gradient_bytes(const tt_param_table *params, const tt_plan *plan);
void tt_optimizer_unit_starts(const tt_param_table *params, int64_t num_layers, int64_t *start);
/* The first unit of the host share: the unit boundary whose trailing share of the trainable parameters is nearest
 * to fraction (ties: the smaller share); num_layers + 2 when nothing is offloaded. */
int64_t tt_optimizer_first_host_unit(const int64_t *start, int64_t num_layers, double fraction);
/* The same within units [first_unit, end_unit) (a zero_stage shard): the share is of their elements; end_unit when
 * nothing is offloaded. */
int64_t tt_optimizer_first_host_unit_in(const int64_t *start, int64_t first_unit, int64_t end_unit, double fraction);
/* The first host unit and the end of the host share's units for this plan's shard (the whole model unsharded). */
void tt_optimizer_host_units(const int64_t *start, const tt_plan *plan, const struct tt_size_table *sizes,
                             int64_t *first_host_unit, int64_t *end_unit);

/* The largest shapes the ops of a plan see, from which the backend sizes its scratch and prepares. */
tt_scratch_shape tt_size_table_scratch_shape(const tt_model_config *model, const tt_param_table *params,
                                             const tt_plan *plan);

/* The sizes of the tensors of a plan: every field above but the peaks (class_peak, tier_peak,
 * attention_room), which the step program's dry run measures (tt_size_table_measure, train/measure.h).
 * The backend's pure size queries give its scratch and attention workspace for the plan's settings
 * (tt_plan_backend_settings). */
void tt_size_table_tensors(tt_size_table *table, const tt_model_config *model, const tt_param_table *params,
                           const tt_plan *plan, const tt_backend *backend);

/* Prices a plan: fills its whole size table, peaks included. The planners in this directory
 * (spill.c, free_keep.c) try plans through it; the trainer passes the step program's dry run
 * (tt_step_pricer, train/measure.h), so a planner never knows how the step pushes its buffers. */
typedef struct tt_plan_pricer {
    void (*price)(const struct tt_plan_pricer *self, tt_size_table *table, const tt_plan *plan);
    const tt_model_config *model;
    const tt_param_table *params;
    const tt_backend *backend;
} tt_plan_pricer;

/* The plan per layer (runs of equal layers as one row): what is kept and where, and the bytes of
 * one layer's saved activations kept from the forward and recomputed in the backward. */
void tt_size_table_print_layers(const tt_size_table *table, const tt_plan *plan, const tt_model_config *model,
                                FILE *out);

/* Prints per class and tier. measured (indexed by tier, NULL entries skipped) adds the
 * arenas' measured peaks beside the estimate. */
void tt_size_table_print(const tt_size_table *table, FILE *out, const tt_arena *const measured[TT_TIER_COUNT]);

/* One line on the 8-bit AdamW's moments (nothing without optimizer: adamw_bnb_8bit): which tensors keep 8-bit moments,
 * and the bytes against fp32 AdamW's. */
void tt_size_table_print_moments_8bit(const tt_size_table *table, const tt_plan *plan, const tt_param_table *params,
                                      FILE *out);

/* One line on optimizer offload (nothing when it is off): which units, how many parameters, the bytes on each
 * tier. */
void tt_size_table_print_optimizer(const tt_size_table *table, const tt_plan *plan, const tt_param_table *params,
                                   FILE *out);

/* One line on weight offload (nothing when it is off): which layers, the bytes in host memory, the buffers. */
void tt_size_table_print_weight_offload(const tt_size_table *table, const tt_plan *plan, const tt_param_table *params,
                                        FILE *out);

#endif
