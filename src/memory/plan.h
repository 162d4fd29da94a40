/* The plan: data, not control flow. For every decoder layer it says what happens to the
 * tensors its backward needs (kept from the forward, or recomputed from the layer input
 * in the backward) and in which tier each lives. The step program reads the plan; the
 * size table prices it; `tiertrain plan` prints it. The user's config keys are translated
 * into a plan here and nowhere else. */
#ifndef TT_MEMORY_PLAN_H
#define TT_MEMORY_PLAN_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "core/tier.h"
#include "model/saved_slots.h"
#include "model/model_config.h"
#include "ops/backend.h"

/* Named recompute sets. A layer's backward needs every saved slot; the plan says per slot
 * whether it is kept from the forward or recomputed from the layer input (which is always kept)
 * and the kept slots: any set gives the same bits, only memory and time change. */
#define TT_RECOMPUTE_NOTHING ((tt_slot_set)0) /* keep everything: no checkpointing */
#define TT_RECOMPUTE_EVERYTHING TT_ALL_SLOTS  /* full per-layer checkpointing */
/* selective checkpointing: keep the attention output and its log-sum-exp (the O(T^2) part),
 * recompute the rest */
#define TT_RECOMPUTE_ALL_BUT_ATTENTION (TT_ALL_SLOTS & ~(TT_SLOT(TT_SAVED_ATTN_OUT) | TT_SLOT(TT_SAVED_LSE)))
/* Recompute only the cheap element-wise ops (norms, RoPE, SwiGLU) and keep every GEMM and the
 * attention output. Without q/k norms, q and k come straight out of GEMMs (RoPE is in place),
 * so they are kept too. */
tt_slot_set tt_recompute_cheap_ops(const tt_model_config *model);

typedef struct tt_layer_plan {
    tt_slot_set recompute;         /* saved slots recomputed in the backward; the rest are kept */
    tt_tier saved_activation_tier; /* where the offloaded kept slots live (the compute tier: none offloaded) */
    tt_slot_set offloaded;         /* kept slots that live there between forward and backward (those of at
                                      least min_offload_bytes; the others stay on the compute tier) */
    tt_tier layer_input_tier;      /* where the layer input (the checkpoint) lives */
} tt_layer_plan;

typedef struct tt_plan {
    int64_t num_layers;
    tt_layer_plan *layers; /* [num_layers] */
    tt_tier compute_tier;  /* where ops read and write */
    int64_t micro_batch;   /* B */
    int64_t seq_len;       /* T: the tokens of a sequence this rank holds (with sequence parallel, its share) */
    /* Ulysses sequence parallel (sequence_parallel_degree): the ranks sharing each sequence, 1: none. Rank r holds
     * tokens [r * seq_len, (r + 1) * seq_len) of every sequence and attends over all sequence_parallel * seq_len of
     * them for its num_heads / sequence_parallel heads. */
    int64_t sequence_parallel;
    int64_t sequence_parallel_rank; /* this rank's place in its group: which share of each sequence it holds */
    /* sample_packing: a sequence holds several documents, each attending only to itself with positions from 0;
     * every micro-batch brings each token's position (tt_attention_shape.positions) */
    bool packed_documents;
    int64_t loss_chunk; /* tokens per LM-head chunk, <= B*T */
    /* tiled_mlp: the MLP runs over mlp_shards row shards of mlp_shard_rows rows of the B*T (the last one
     * shorter); its gate, up and SwiGLU outputs (TT_MLP_SHARD_SLOTS, in every layer's recompute set) exist
     * for one shard at a time. 1 shard: the whole micro-batch at once (untiled). */
    int64_t mlp_shards, mlp_shard_rows;
    tt_precision precision;           /* number formats; the byte counts below follow from it */
    tt_attention_kind attention;      /* attn_implementation */
    size_t attention_workspace_limit; /* attn_workspace_limit: dP bytes of the attention backward's calls at once */
    bool nondeterministic;            /* deterministic: false: kernels that add with atomics allowed */
    /* NEFTune (neftune_noise_alpha): in training, uniform noise in +-alpha / sqrt(T D) on the embedding output (T the
     * whole sequence, D hidden_size), as transformers' neftune hook adds it; 0: none */
    double neftune_noise_alpha;
    size_t pinned_budget; /* host memory the pinned tier may take (0: unlimited) */
    /* Offload copies: streamed ones run on the copy engine's side streams while compute goes on
     * (true, hidden_states, disk); the others block until done (legacy, use_streams: false). */
    bool offload_streamed;
    int64_t offload_ring;      /* compute-tier buffers offloaded layer inputs rotate through (>= 2) */
    int64_t saved_ring;        /* compute-tier buffers offloaded kept activations rotate through (>= 1) */
    size_t min_offload_bytes;  /* smaller kept slots are not offloaded (activation_offloading: true) */
    unsigned copy_delay_us;    /* race stress: random delay before each copy (debug_copy_delay_us) */
    bool stream_frozen_layers; /* layer_offloading: frozen decoder layers live in pinned host memory */
    /* cpu_offloading_weights: the trainable weights of layers 0 .. offloaded_weight_layers - 1 live in host memory
     * and are streamed to the compute tier through two layer buffers (size_table.h); 0: none */
    int64_t offloaded_weight_layers;
    const char *offload_dir;   /* where the disk tier's file goes (borrowed from the run config) */
    int offload_dir_processes; /* the run's processes on this host, each reserving its own file under offload_dir (a
                                  network directory shared by other hosts is not counted); 0 counts as 1 */
    /* Optimizer offload (optimizer_cpu_offload): about optimizer_offload_fraction of the trainable parameters,
     * whole units from the top of the stack (size_table.h), keep fp32 master weights and AdamW moments in host
     * memory and are updated by the CPU AdamW; optimizer_overlap: per unit, beside the compute. */
    bool optimizer_offload;
    double optimizer_offload_fraction;
    bool optimizer_overlap;
    int data_parallel_ranks; /* processes summing their gradients (train/data_parallel.h); 0 or 1: one */
    int data_parallel_rank;  /* this process's rank among them */
    /* ZeRO stage (zero_stage): 1 with several ranks shards the master weights and moments (optimizer_shards.h) */
    int zero_stage;
    /* With overlap: the host share's decoder-layer gradients live on the compute tier as a ring of two layers,
     * each streamed out once its backward is done (and, with several micro-batches per step, back in before the
     * next one's backward of that layer) (size_table.h). */
    bool gradient_ring;
    size_t activation_bytes; /* bytes per activation element (4 on the CPU backend, 2 in bf16) */
    size_t weight_bytes;     /* bytes per parameter of the compute copy the ops read */
    size_t gradient_bytes;   /* bytes per parameter gradient */
    size_t master_bytes;     /* bytes per fp32 master weight; 0 without a master copy */
    size_t moment_bytes;     /* bytes per AdamW moment (two per parameter) */
    /* optimizer: adamw_bnb_8bit: bitsandbytes' 8-bit AdamW, whose moments are laid out by
     * memory/adamw_8bit_layout.h (moment_bytes does not apply); the CPU backend only, without optimizer offload or
     * zero_stage sharding */
    bool moments_8bit;
} tt_plan;

/* What the plan asks of the backend: its number formats, attention kernels and attention workspace
 * limit (the settings of the backend's size queries and of its prepare step). */
tt_backend_settings tt_plan_backend_settings(const tt_plan *plan);

void tt_plan_free(tt_plan *plan);
/* The whole sequence's tokens (seq_len unless sequence parallel splits it). */
static inline int64_t tt_plan_sequence_len(const tt_plan *plan) {
    return plan->seq_len * (plan->sequence_parallel > 1 ? plan->sequence_parallel : 1);
}
/* The attention a rank runs in a layer that slides or not: the whole sequence, its share of the heads (sequence
 * parallel), else the model's; the model's scale, window and soft-capping. */
static inline tt_attention_shape tt_plan_attention_shape(const tt_plan *plan, const tt_model_config *model,
                                                         bool sliding) {
    const int64_t sp = plan->sequence_parallel > 1 ? plan->sequence_parallel : 1;
    /* a window of the sequence's length or more hides no key (Phi-4-mini's 262144): causal, the faster kernels' shape */
    const bool window = sliding && model->sliding_window > 0 && model->sliding_window < plan->seq_len * sp;
    return (tt_attention_shape){.batch = plan->micro_batch,
                                .seq_len = plan->seq_len * sp,
                                .num_heads = model->num_heads / sp,
                                .num_kv_heads = model->num_kv_heads / sp,
                                .head_dim = model->head_dim,
                                .scale = tt_model_attention_scale(model),
                                .sliding_window = window ? model->sliding_window : 0,
                                .documents = plan->packed_documents,
                                .softcap = model->attention_softcap};
}
/* Whether every decoder layer of the model slides (Mistral with a window): then the backend prepares the sliding
 * shape, else the full one (the scratch shape's). */
static inline bool tt_model_every_layer_slides(const tt_model_config *model) {
    for (int64_t l = 0; l < model->num_layers; l++)
        if (!tt_model_layer_attention(model, l).sliding) return false;
    return model->num_layers > 0;
}
/* ZeRO stage 1 with several ranks: each keeps its shard of the master weights and moments (optimizer_shards.h). */
static inline bool tt_plan_shards_optimizer(const tt_plan *plan) {
    return plan->zero_stage >= 1 && plan->data_parallel_ranks > 1;
}
/* ZeRO stage 2 with several ranks: each also keeps only its shard's gradients (and two ring slots). */
static inline bool tt_plan_shards_gradients(const tt_plan *plan) {
    return plan->zero_stage >= 2 && plan->data_parallel_ranks > 1;
}
/* ZeRO stage 3 with several ranks: and only its shard's trainable weights (the embedding and head everywhere). */
static inline bool tt_plan_shards_weights(const tt_plan *plan) {
    return plan->zero_stage >= 3 && plan->data_parallel_ranks > 1;
}
/* tiled_mlp with `shards` row shards (clamped to the B*T rows; 1: untiled): sets mlp_shards and
 * mlp_shard_rows and puts the MLP's intermediates in every layer's recompute set (never kept, never
 * offloaded). Call after the layers' plans are set. */
void tt_plan_tile_mlp(tt_plan *plan, int64_t shards);
/* The plan's summary lines: micro-batch, sequence, loss chunks, precision. */
void tt_plan_print(const tt_plan *plan, const tt_model_config *model, FILE *out);
/* "keep", "recompute", "keep attention", "recompute cheap ops" or "recompute <n> of <m> slots" */
const char *tt_recompute_name(tt_slot_set recompute, const tt_model_config *model, char *buf, size_t size);

#endif
