#include "memory/plan.h"

#include <stdlib.h>
#include <string.h>

#include "core/check.h"

tt_backend_settings tt_plan_backend_settings(const tt_plan *plan) {
    return (tt_backend_settings){.precision = plan->precision,
                                 .attention = plan->attention,
                                 .attention_workspace_limit = plan->attention_workspace_limit};
}

tt_precision tt_precision_for_run(const tt_run_config *run, bool gpu) {
    if (!gpu) return (tt_precision){.activation = TT_F32, .gradient = TT_F32, .moment = TT_F32, .master = false};
    if (run->master_weights)
        return (tt_precision){.activation = TT_BF16, .gradient = TT_F32, .moment = TT_F32, .master = true};
    return (tt_precision){.activation = TT_BF16, .gradient = TT_BF16, .moment = TT_BF16, .master = false};
}

/* Whether decoder layer l has trainable parameters (LoRA adapts every layer; full fine-tuning
 * trains every layer outside frozen_layers). */
static bool layer_trains(const tt_run_config *run, int64_t l) {
    if (run->adapter != TT_ADAPTER_NONE) return true;
    for (int64_t i = 0; i < run->frozen_layer_count; i++)
        if (run->frozen_layers[i] == l) return false;
    return true;
}

/* The recompute set of layer l from the checkpointing keys (validated together at config load):
 *   gradient_checkpointing: keep only each layer's input and recompute the layer (every_n_layers:
 *     only layers 0, N, 2N, ...; checkpoint_trainable_layers_only: only layers that train);
 *   selective_checkpointing: also keep the attention output, so attention is not recomputed;
 *   recompute_granularity full (Megatron): as gradient_checkpointing, with recompute_method
 *     block for only the first recompute_num_layers layers;
 *   recompute_granularity selective (Megatron): recompute the cheap element-wise ops only. */
static tt_slot_set layer_recompute_set(const tt_run_config *run, const tt_model_config *model, int64_t l) {
    if (run->recompute_granularity == TT_RECOMPUTE_SELECTIVE) return tt_recompute_cheap_ops(model);
    if (run->recompute_granularity == TT_RECOMPUTE_FULL) {
        if (run->recompute_method == TT_RECOMPUTE_BLOCK && l >= run->recompute_num_layers) return TT_RECOMPUTE_NOTHING;
        return run->selective_checkpointing ? TT_RECOMPUTE_ALL_BUT_ATTENTION : TT_RECOMPUTE_EVERYTHING;
    }
    if (!run->gradient_checkpointing) return TT_RECOMPUTE_NOTHING;
    if (l % run->every_n_layers != 0) return TT_RECOMPUTE_NOTHING;
    if (run->checkpoint_trainable_layers_only && !layer_trains(run, l)) return TT_RECOMPUTE_NOTHING;
    return run->selective_checkpointing ? TT_RECOMPUTE_ALL_BUT_ATTENTION : TT_RECOMPUTE_EVERYTHING;
}

void tt_plan_from_config(tt_plan *plan, const tt_run_config *run, const tt_model_config *model,
                         tt_tier compute_tier, const tt_precision *precision) {
    memset(plan, 0, sizeof(*plan));
    plan->num_layers = model->num_layers;
    plan->compute_tier = compute_tier;
    plan->micro_batch = run->micro_batch_size;
    plan->seq_len = run->sequence_len;
    plan->packed_documents = run->sample_packing;
    int64_t tokens = run->micro_batch_size * run->sequence_len;
    plan->loss_chunk = run->loss_chunk_size < tokens ? run->loss_chunk_size : tokens;
    plan->precision = *precision;
    plan->offload_dir = run->offload_dir ? run->offload_dir : "/var/tmp";
    plan->attention = (tt_attention_kind)run->attn_implementation;
    plan->attention_workspace_limit = (size_t)run->attn_workspace_limit;
    plan->activation_bytes = tt_dtype_size(precision->activation);
    plan->weight_bytes = plan->activation_bytes;
    plan->gradient_bytes = tt_dtype_size(precision->gradient);
    plan->master_bytes = precision->master ? 4 : 0;
    plan->moment_bytes = tt_dtype_size(precision->moment);
    if (run->recompute_granularity == TT_RECOMPUTE_FULL && run->recompute_method == TT_RECOMPUTE_BLOCK &&
        run->recompute_num_layers > model->num_layers)
        tt_die("recompute_num_layers is %lld but the model has %lld layers; use at most %lld (all layers)",
               (long long)run->recompute_num_layers, (long long)model->num_layers, (long long)model->num_layers);
    if (run->cpu_offloading && run->cpu_offloading_num_layers >= model->num_layers)
        tt_die("cpu_offloading_num_layers is %lld but the model has %lld layers; use 0 .. %lld (Megatron's range: the "
               "last layer's activations are needed first in the backward and stay)",
               (long long)run->cpu_offloading_num_layers, (long long)model->num_layers,
               (long long)model->num_layers - 1);
    plan->layers = tt_xcalloc((size_t)model->num_layers, sizeof(tt_layer_plan), "plan");
    const size_t input_bytes = (size_t)(tokens * model->hidden_size) * plan->activation_bytes;
    const bool offload_true = run->activation_offloading == 1;
    const tt_tier host_tier = offload_true && !run->use_pin_memory ? TT_TIER_HOST : TT_TIER_PINNED;
    for (int64_t l = 0; l < model->num_layers; l++) {
        tt_layer_plan *lp = &plan->layers[l];
        lp->recompute = layer_recompute_set(run, model, l);
        /* With LoRA, activation_offloading: true offloads instead of recomputing (the PR's rule:
         * pure offload is leaner and faster when the base is frozen) */
        if (offload_true && run->adapter != TT_ADAPTER_NONE) lp->recompute = TT_RECOMPUTE_NOTHING;
        lp->saved_activation_tier = compute_tier;
        /* Kept saved activations that live in host memory between forward and backward:
         * Megatron's cpu_offloading (all of the first layers'), activation_offloading: true on a
         * layer that keeps everything (every saved tensor, TRL's OffloadActivations), and
         * selective_checkpointing offload: true (the kept attention output and log-sum-exp). */
        const tt_slot_set kept = TT_ALL_SLOTS & ~lp->recompute;
        const bool megatron = run->cpu_offloading && run->cpu_offloading_activations && l < run->cpu_offloading_num_layers;
        lp->offloaded = megatron                                                  ? kept
                        : offload_true && lp->recompute == TT_RECOMPUTE_NOTHING   ? kept
                        : run->selective_offload && lp->recompute != TT_RECOMPUTE_NOTHING ? kept & TT_ATTENTION_SLOTS
                                                                                  : 0;
        if (lp->offloaded && host_tier != compute_tier) lp->saved_activation_tier = host_tier;
        else lp->offloaded = 0;
        /* activation_offloading: the checkpoints (layer inputs) of checkpointed layers live in host
         * memory, or in a file under offload_dir, between the forward and the backward. The LM
         * head's input (layer L's input) is never offloaded, nor an input below min_offload_size. */
        const bool checkpointed = lp->recompute != TT_RECOMPUTE_NOTHING;
        const bool large_enough = !(run->activation_offloading == 1 || run->activation_offloading == 4) ||
                                  input_bytes >= (size_t)run->min_offload_size;
        lp->layer_input_tier = !checkpointed || !large_enough ? compute_tier
                               : run->activation_offloading == 1
                                   ? (run->use_pin_memory ? TT_TIER_PINNED : TT_TIER_HOST) /* true */
                               : run->activation_offloading == 2 ? TT_TIER_PINNED         /* legacy */
                               : run->activation_offloading == 3 ? TT_TIER_DISK           /* disk */
                               : run->activation_offloading == 4 ? TT_TIER_PINNED         /* hidden_states */
                                                                 : compute_tier;
        if (megatron && checkpointed) lp->layer_input_tier = TT_TIER_PINNED;
        if (lp->layer_input_tier == TT_TIER_HOST && compute_tier == TT_TIER_HOST) lp->layer_input_tier = compute_tier;
        if (lp->layer_input_tier == TT_TIER_PINNED && compute_tier == TT_TIER_PINNED) lp->layer_input_tier = compute_tier;
    }
    const bool megatron_activations = run->cpu_offloading && run->cpu_offloading_activations;
    plan->offload_streamed = (offload_true && run->use_streams) || run->activation_offloading == 3 ||
                             run->activation_offloading == 4 || megatron_activations || run->selective_offload;
    plan->offload_ring = plan->offload_streamed ? run->max_fwd_stash_size + 1 : 2;
    plan->saved_ring = megatron_activations ? (run->cpu_offloading_double_buffering ? 2 : 1) : plan->offload_ring;
    plan->min_offload_bytes = offload_true ? (size_t)run->min_offload_size : 0;
    plan->copy_delay_us = (unsigned)run->debug_copy_delay_us;
    plan->stream_frozen_layers = run->layer_offloading;
    plan->offloaded_weight_layers = run->cpu_offloading && run->cpu_offloading_weights ? run->cpu_offloading_num_layers : 0;
    plan->optimizer_offload = run->optimizer_cpu_offload;
    plan->optimizer_offload_fraction = run->optimizer_cpu_offload ? run->optimizer_offload_fraction : 0.0;
    plan->optimizer_overlap = run->optimizer_cpu_offload && run->overlap_cpu_optimizer_d2h_h2d;
    /* with several micro-batches per step, each one's ringed gradients go out and come back for the next */
    plan->gradient_ring = plan->optimizer_overlap;
    /* tiled_mlp_num_shards unset: ceil(sequence_len / hidden_size), ALST's and axolotl's default */
    const int64_t shards = !run->tiled_mlp                ? 1
                           : run->tiled_mlp_num_shards > 0 ? run->tiled_mlp_num_shards
                                                           : (run->sequence_len + model->hidden_size - 1) / model->hidden_size;
    tt_plan_tile_mlp(plan, shards);
}

void tt_plan_tile_mlp(tt_plan *plan, int64_t shards) {
    const int64_t rows = plan->micro_batch * plan->seq_len;
    if (shards > rows) shards = rows;
    if (shards < 1) shards = 1;
    /* whole multiples of 8 rows: every shard's first row is 16-byte aligned in bf16 (cuBLASLt's kernels) */
    plan->mlp_shard_rows = ((rows + shards - 1) / shards + 7) / 8 * 8;
    plan->mlp_shards = (rows + plan->mlp_shard_rows - 1) / plan->mlp_shard_rows;
    if (plan->mlp_shards == 1) return;
    for (int64_t l = 0; l < plan->num_layers; l++) {
        plan->layers[l].recompute |= TT_MLP_SHARD_SLOTS;
        plan->layers[l].offloaded &= ~TT_MLP_SHARD_SLOTS;
    }
}

void tt_plan_free(tt_plan *plan) {
    free(plan->layers);
    memset(plan, 0, sizeof(*plan));
}

tt_slot_set tt_recompute_cheap_ops(const tt_model_config *model) {
    tt_slot_set cheap = TT_SLOT(TT_SAVED_ATTN_RSTD) | TT_SLOT(TT_SAVED_ATTN_NORMED) | TT_SLOT(TT_SAVED_MLP_RSTD) |
                        TT_SLOT(TT_SAVED_MLP_NORMED) | TT_SLOT(TT_SAVED_SWIGLU);
    if (model->qk_norm)
        cheap |= TT_SLOT(TT_SAVED_Q) | TT_SLOT(TT_SAVED_Q_RSTD) | TT_SLOT(TT_SAVED_K) | TT_SLOT(TT_SAVED_K_RSTD);
    return cheap;
}

const char *tt_recompute_name(tt_slot_set recompute, const tt_model_config *model, char *buf, size_t size) {
    if (recompute == TT_RECOMPUTE_NOTHING) return "keep";
    if (recompute == TT_RECOMPUTE_EVERYTHING) return "recompute";
    if (recompute == TT_RECOMPUTE_ALL_BUT_ATTENTION) return "keep attention";
    if (recompute == TT_MLP_SLOTS) return "recompute MLP";
    if (recompute == tt_recompute_cheap_ops(model)) return "recompute cheap ops";
    int n = 0;
    for (int i = 0; i < TT_SAVED_SLOT_COUNT; i++) n += (recompute >> i) & 1u;
    snprintf(buf, size, "recompute %d of %d slots", n, TT_SAVED_SLOT_COUNT);
    return buf;
}

void tt_plan_print(const tt_plan *plan, const tt_model_config *model, FILE *out) {
    fprintf(out, "plan: micro_batch %lld x sequence %lld, LM head in chunks of %lld tokens\n",
            (long long)plan->micro_batch, (long long)plan->seq_len, (long long)plan->loss_chunk);
    const tt_precision *p = &plan->precision;
    fprintf(out, "  precision: %s compute, %s gradients, %s AdamW moments, %s\n", tt_dtype_torch_name(p->activation),
            tt_dtype_torch_name(p->gradient), tt_dtype_torch_name(p->moment),
            p->master ? "float32 master weights" : "no master copy");
    if (plan->mlp_shards > 1)
        fprintf(out, "  tiled_mlp: the MLP in %lld shards of %lld tokens; its gate, up and SwiGLU outputs exist for one "
                     "shard at a time, recomputed shard by shard in the backward\n",
                (long long)plan->mlp_shards, (long long)plan->mlp_shard_rows);
    int64_t offloaded = 0;
    for (int64_t l = 0; l < plan->num_layers; l++) offloaded += plan->layers[l].layer_input_tier != plan->compute_tier;
    int64_t saved_offloaded = 0;
    for (int64_t l = 0; l < plan->num_layers; l++) saved_offloaded += plan->layers[l].offloaded != 0;
    const char *how = plan->offload_streamed ? "copied on side streams while compute goes on, prefetched one layer ahead"
                                             : "copied synchronously";
    if (offloaded)
        fprintf(out, "  offload: %lld layer input(s), %s, through %lld staging buffers on the %s tier\n",
                (long long)offloaded, how, (long long)plan->offload_ring, tt_tier_name(plan->compute_tier));
    if (saved_offloaded)
        fprintf(out, "  offload: the kept activations of %lld layer(s), %s, through %lld staging buffer(s)%s\n",
                (long long)saved_offloaded, how, (long long)plan->saved_ring,
                plan->min_offload_bytes ? " (tensors under min_offload_size stay)" : "");
    if (plan->stream_frozen_layers)
        fprintf(out, "  layer_offloading: frozen decoder layers live in pinned host memory and stream in through two "
                     "buffers, the next layer prefetched\n");
    /* the per-layer table, with its bytes, is tt_size_table_print_layers */
}
