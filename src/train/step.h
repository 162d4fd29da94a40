/* The step program: forward over layers 0..L-1, the fused LM head and loss, backward over
 * layers L-1..0, all through the backend table, with every buffer pushed onto and popped
 * off the compute tier's arena in the order the size table prices. The plan decides per
 * layer whether saved activations are kept or recomputed; whatever it decides, the
 * arithmetic is the same, so loss and gradients are bit-identical across plans. */
#ifndef TT_TRAIN_STEP_H
#define TT_TRAIN_STEP_H

#include <stdint.h>

#include "core/arena.h"
#include "memory/offload_store.h"
#include "memory/weight_stream.h"
#include "memory/plan.h"
#include "memory/residency.h"
#include "memory/size_table.h"
#include "memory/unit_hooks.h"
#include "model/arch.h"
#include "model/model_config.h"
#include "model/params.h"
#include "ops/backend.h"

/* ZeRO stage 1 (memory/optimizer_shards.h): what this rank lacks of the other ranks' shards, fetched from them (set
 * by data_parallel.c; each call is a collective, made by every rank at the same point). */
typedef struct tt_shard_exchange {
    void (*gather_host)(void *ctx, float *host);               /* host[trainable_numel]: the others' ranges */
    void (*gather_norm_partials)(void *ctx, double *partials); /* [L + 2] host: each unit's from its owner */
    /* A save's tensor at a time: whether this rank's shard holds trainable element `element`, and the host values
     * data[0 .. count) of the tensor there, from the shard's owner into every rank's data (a broadcast). */
    bool (*owns)(void *ctx, int64_t element);
    void (*share_host_range)(void *ctx, float *data, int64_t element, int64_t count);
    void *ctx;
} tt_shard_exchange;

/* Sequence parallel: the ranks' all-to-all (rank r's block b of send, bytes each, lands in rank b's recv at block r;
 * compute tier's memory), set by data_parallel.c. */
typedef struct tt_sequence_exchange {
    void (*all_to_all)(void *ctx, const void *send, void *recv, size_t bytes);
    void *ctx;
} tt_sequence_exchange;

typedef struct tt_model_state {
    tt_model_config config;
    const tt_arch *arch;          /* the model's family (config.model_type) */
    const tt_layer_slots *slots;  /* its saved slots (arch->slots) */
    const struct tt_block *block; /* the block its layers run (train/block.h) */
    float embedding_scale;        /* the embedding output's multiplier in the compute precision (1: none) */
    tt_param_table params;
    tt_plan plan;
    tt_size_table sizes;
    tt_residency_map residency; /* where each unit's weights, gradients, master and moments live (from plan and sizes) */
    const tt_backend *backend;
    tt_arena arena;          /* the compute tier: every tensor of the step lives here */
    tt_arena host;           /* host memory of offloaded blocks (pinned or pageable), empty when none */
    tt_offload_store inputs; /* offloaded layer inputs: homes, disk store, staging ring, copies */
    tt_offload_store saved;  /* offloaded kept saved activations of a layer, as one block per layer */
    /* layer_offloading: the frozen weights' pinned copy (the frozen part of the flat layout, compute
     * precision), the compute-tier buffers, and the stream that moves layers between them */
    void *frozen_host;     /* [params.trainable_start] in host (pinned) memory, or NULL */
    void *frozen_resident; /* frozen parameters outside streamed layers, compact */
    void *weight_ring[2];  /* [largest streamed layer] each */
    tt_weight_stream stream;
    /* cpu_offloading_weights: the trainable weights of the first layers in host memory (their homes: weight_home, or
     * the optimizer offload's host buffers for units of its host share), streamed through two compute-tier buffers;
     * the compute tier's trainable weights are [before | buffer 0 | buffer 1 | after] (size_table.h) */
    tt_weight_stream weight_offload;
    void *weight_home; /* [sizes.host_weight_home bytes] host memory, or NULL */
    /* The compute tier's AdamW, as pieces of the trainable layout that each have their weights in one place: one
     * piece without weight offload (the whole compute-tier share), else the elements before the offloaded layers,
     * each offloaded layer updated on the compute tier (in its buffer, then stored home), the elements after. */
    struct tt_adamw_piece *adamw_pieces;
    int adamw_piece_count;
    /* optimizer: adamw_bnb_8bit (plan.moments_8bit): where each parameter's 8-bit or fp32 moments live in adam_m and
     * adam_v (memory/adamw_8bit_layout.h), else NULL */
    struct tt_adamw_8bit_layout *adamw_8bit;

    void *weights;           /* [params.total_numel] compute precision (fp32 on the CPU, bf16 on the GPU): the
                                 frozen parameters, then the trainable ones */
    void *trainable_weights; /* weights + params.trainable_start: the part AdamW updates (with weight offload, the
                                 elements before the offloaded layers; tt_model_trainable_weights_at for others) */
    /* The trainable parameters only, in the trainable layout ([params.trainable_numel]): */
    void *gradients;       /* plan.precision.gradient */
    float *master;         /* fp32 master weights, or NULL (plan.precision.master) */
    void *adam_m, *adam_v; /* plan.precision.moment; with moments_8bit each moment's buffer of adamw_8bit's layout */
    /* With optimizer offload, master, adam_m and adam_v hold the compute tier's share only, the trainable elements
     * [0, sizes.optimizer_host_start); the rest live in host memory (optimizer_offload). */
    tt_model_view w, g;                 /* views of weights and gradients (g: NULL for frozen parameters) */
    tt_layer_view *w_layers, *g_layers; /* [L] */

    /* RoPE's tables by TT_ROPE_TABLE_* (the global one, and Gemma 3's local one; sizes.rope_tables of them):
     * [T, rotary_dim/2] each; packed documents: [B*T, rotary_dim/2], each token's row at its position */
    float *rope_cos[TT_ROPE_TABLES], *rope_sin[TT_ROPE_TABLES];
    int32_t *batch_inputs;  /* [B*T] token ids of the current micro-batch */
    int32_t *batch_targets; /* [B*T] next-token ids, TT_IGNORE_INDEX where masked */
    /* Packed documents (plan.packed_documents), else NULL: each token's position in its document [B*T] on the
     * compute tier (the attention's document mask, tt_attention_shape.positions); the host's RoPE tables
     * [T, hd/2] and the staging of a micro-batch's gathered rows ([B*T, hd/2] cos, then sin). Set with the batch
     * (tt_model_set_positions); batch_has_positions says the current batch's are there. */
    int32_t *batch_positions;
    /* [whole sequence, rotary_dim/2] each, by table; with LongRoPE the global table's with the long factors too,
     * taken by a micro-batch whose largest position reaches past original_max_position_embeddings, as transformers
     * switches */
    float *host_rope_cos[TT_ROPE_TABLES], *host_rope_sin[TT_ROPE_TABLES];
    float *host_rope_long_cos, *host_rope_long_sin;
    float *host_batch_rope;
    bool batch_has_positions;
    void *op_scratch; /* the backend's per-op scratch (sizes.op_scratch bytes) */
    /* The optimizer units (tt_optimizer_unit_starts: the embedding, layer l as unit l + 1, the final norm and LM
     * head as unit L + 1) and each one's sum of squares of its gradients, which the gradient norm adds up in unit
     * order. */
    int64_t *unit_start;          /* [L + 3] host, in the trainable layout */
    double *norm_partials;        /* [L + 2] on the compute tier */
    float *data_parallel_buckets; /* the gradient sum's scratch across processes (sizes.data_parallel_buckets), or NULL */
    double *host_norm_partials;   /* [L + 2] host */
    tt_attention_shape attention[2]; /* by whether a layer slides: [0] causal over the sequence, [1] its window */
    /* Per-step bookkeeping, allocated once so a step allocates nothing from the system. */
    void **layer_inputs;                 /* [L+1] pointers into the arena for the current micro-batch */
    struct tt_trace *trace;              /* tt_model_set_trace: records compute, copies and bytes per tier, or NULL */
    struct trace_pending *trace_pending; /* the micro-step's trace events until their marks are read */
    int64_t trace_count;
    struct saved_tensors *kept_saved; /* [L] pointers to kept layers' saved activations */
    /* LoRA dropout: the current micro-step's seed (tt_lora_dropout_seed, set by the trainer before each
     * forward/backward; every mask of the micro-step derives from it), on in training and off in
     * evaluation, and its workspace [N, widest adapted input] (sizes.lora_dropout_buffer bytes). */
    uint64_t lora_dropout_seed;
    bool lora_dropout_on;
    void *lora_dropout_buffer;
    /* output_router_logits (a mixture of experts): the auxiliary loss's statistics over a micro-step's forward (host
     * memory: [k * E] tokens by choice and expert, [E] probabilities), collected while moe_collect; its gradient [E];
     * and the last micro-step's auxiliary loss, before router_aux_loss_coef (NULL, 0: none) */
    double *moe_expert_tokens, *moe_expert_probs;
    float *moe_prob_gradient;
    bool moe_collect;
    double moe_aux_loss;
    /* QLoRA: one linear weight dequantized from 4 bits, in the compute precision, for the GEMM that reads it next
     * (sizes.dequant_buffer bytes), or NULL */
    void *dequant_buffer;
    /* Optimizer offload (optimizer_offload.h), or NULL: the host share's master weights and moments, and the hooks
     * the step calls before the forward reads a unit's weights and after the backward finished its gradients. */
    struct tt_optimizer_offload *optimizer_offload;
    const tt_shard_exchange *shards;               /* ZeRO stage 1 with several ranks, or NULL */
    const tt_sequence_exchange *sequence_exchange; /* sequence parallel, or NULL */
    /* The memory mechanisms' hooks (unit_hooks.h), called by the step program at each unit's forward and backward
     * in this order (the AFTER points in reverse): the offload stores, optimizer offload, the weight streams. */
    tt_unit_hook hooks[TT_MAX_UNIT_HOOKS];
    int hook_count;
    /* A measuring state (tt_model_state_init_measure): arenas that only count, the measuring backend, no disk file,
     * no optimizer threads, nothing written to host memory; config, plan and params are borrowed, not owned. */
    bool measuring;
    /* Generation (train/kv_cache.h), else NULL: the forward runs over the new tokens of one sequence at the cache's
     * next positions (RoPE at those positions), and each layer's attention appends their keys and values to the cache
     * and attends over it. */
    struct tt_kv_cache *kv_cache;
    /* The compute tier's bytes in use once a layer's attention backward workspace is pushed, the most over the
     * layers: what the attention workspace could grow into without raising the peak (sizes.attention_room). */
    size_t attention_phase_used;
} tt_model_state;

/* The state's memory and the step's mechanisms, from a priced plan (model_setup.h does the pricing and adds the
 * optimizer's parts): takes ownership of config, plan and params; reserves the compute tier's arena with the size
 * table's peak (an error if that exceeds budget_bytes, 0: no budget) and the host arena, pushes the persistent
 * tensors, builds the offload stores and the frozen-weight stream and adds their hooks. Weights are left zero. */
void tt_model_state_init_core(tt_model_state *state, tt_model_config *config, tt_plan *plan, tt_param_table *params,
                              const tt_size_table *sizes, const tt_backend *backend, size_t budget_bytes);
/* Frees what init_core (or init_measure) built; the optimizer's parts must be detached first
 * (tt_model_state_detach_optimizer). */
void tt_model_state_release(tt_model_state *state);

/* A state that holds no memory, for the step program's dry run (train/measure.h): its arenas count pushes and pops
 * (tt_arena_init_measure) and `measure_backend` (tt_backend_measure_init) runs no op. config, plan and params are
 * borrowed and must outlive it; sizes holds the tensor sizes (tt_size_table_tensors). */
void tt_model_state_init_measure(tt_model_state *state, const tt_model_config *config, const tt_plan *plan,
                                 const tt_param_table *params, const tt_size_table *sizes,
                                 const tt_backend *measure_backend);

/* Adds a hook the step program calls at every unit (unit_hooks.h), after the ones added before it. */
void tt_model_state_add_hook(tt_model_state *state, tt_unit_hook hook);

/* Where unit u's gradients are on the compute tier ([unit_start[u + 1] - unit_start[u]] in the gradient
 * precision). */
void *tt_model_unit_gradients(const tt_model_state *state, int64_t unit);

/* Where trainable element e's gradient is on the compute tier (outside a ring slot: the elements up to the next
 * ringed unit follow it). */
void *tt_model_gradients_at(const tt_model_state *state, int64_t element);

/* Where trainable element e's weight is on the compute tier (e outside the weight-offloaded range). */
void *tt_model_trainable_weights_at(const tt_model_state *state, int64_t element);

/* Records the steps into trace (NULL: none); the state does not own it. */
void tt_model_set_trace(tt_model_state *state, struct tt_trace *trace);

/* Runs forward and backward on batch_inputs/batch_targets, adding the gradient of
 * loss_scale * sum(token losses) into gradients. Returns the sum of token losses (double)
 * and the number of unmasked tokens through *count. */
double tt_step_forward_backward(tt_model_state *state, double loss_scale, int64_t *count);

/* The same, returning loss_so_far + the token losses: on the CPU each token's loss is added in token order
 * onto loss_so_far, as every gradient's terms are added onto the gradient, so micro-batches run one after
 * another, each continuing the sum the one before left, give the loss (and gradients) of one micro-batch of
 * all their tokens in that order, bit for bit: a packed batch of documents is its documents run one by one
 * (the trainer sums an optimizer step's micro-batches this way). */
double tt_step_forward_backward_continuing(tt_model_state *state, double loss_scale, double loss_so_far,
                                           int64_t *count);

/* The seed of a micro-step's LoRA dropout masks: a function of the run's seed, the optimizer step and the
 * micro-batch, so a resumed run draws the masks the uninterrupted one did. */
uint64_t tt_lora_dropout_seed(uint64_t run_seed, int64_t step, int64_t micro_step);

/* Forward only (evaluation, no dropout): returns the sum of token losses and the count. */
double tt_step_forward_loss(tt_model_state *state, int64_t *count);

/* Fills cos/sin[T, rotary_dim/2] of RoPE table `table` (TT_ROPE_TABLE_GLOBAL or _LOCAL) as transformers does (fp32
 * inverse frequencies and angles; llama3, linear and LongRoPE scaling); long: LongRoPE's long factors, else its short
 * ones. */
void tt_rope_tables(const tt_model_config *config, int table, bool long_factors, int64_t seq_len, float *cos_table,
                    float *sin_table);
/* Whether LongRoPE takes its long factors for sequences of `positions` positions (transformers: the largest position
 * + 1 past original_max_position_embeddings). */
bool tt_rope_long_factors(const tt_model_config *config, int64_t positions);

#endif
