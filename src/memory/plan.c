#include "memory/plan.h"

#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "model/arch.h"

tt_backend_settings tt_plan_backend_settings(const tt_plan *plan) {
    return (tt_backend_settings){.precision = plan->precision,
                                 .attention = plan->attention,
                                 .attention_workspace_limit = plan->attention_workspace_limit,
                                 .nondeterministic = plan->nondeterministic};
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

tt_slot_set tt_recompute_cheap_ops(const tt_model_config *model) { return tt_cheap_slots(tt_layer_slots_for(model)); }

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
    if (plan->data_parallel_ranks > 1)
        fprintf(out, "  processes: this is rank %d of %d (data parallel%s)\n", plan->data_parallel_rank,
                plan->data_parallel_ranks,
                plan->zero_stage == 1   ? ", zero_stage 1: its shard of the master weights and moments"
                : plan->zero_stage == 2 ? ", zero_stage 2: its shard of the gradients, master weights and moments"
                : plan->zero_stage == 3
                    ? ", zero_stage 3: its shard of the weights, gradients, master weights and moments"
                    : "");
    if (plan->sequence_parallel > 1)
        fprintf(out,
                "  sequence parallel (Ulysses): %lld processes share each sequence of %lld tokens; this one holds %lld "
                "of them and attends over all of them for %lld of the %lld query heads\n",
                (long long)plan->sequence_parallel, (long long)tt_plan_sequence_len(plan), (long long)plan->seq_len,
                (long long)(model->num_heads / plan->sequence_parallel), (long long)model->num_heads);
    const tt_precision *p = &plan->precision;
    fprintf(out, "  precision: %s compute, %s gradients, %s AdamW moments, %s\n", tt_dtype_torch_name(p->activation),
            tt_dtype_torch_name(p->gradient), tt_dtype_torch_name(p->moment),
            p->master ? "float32 master weights" : "no master copy");
    if (plan->mlp_shards > 1)
        fprintf(out,
                "  tiled_mlp: the MLP in %lld shards of %lld tokens; its gate, up and SwiGLU outputs exist for one "
                "shard at a time, recomputed shard by shard in the backward\n",
                (long long)plan->mlp_shards, (long long)plan->mlp_shard_rows);
    int64_t offloaded = 0;
    for (int64_t l = 0; l < plan->num_layers; l++) offloaded += plan->layers[l].layer_input_tier != plan->compute_tier;
    int64_t saved_offloaded = 0;
    for (int64_t l = 0; l < plan->num_layers; l++) saved_offloaded += plan->layers[l].offloaded != 0;
    const char *how = plan->offload_streamed
                          ? "copied on side streams while compute goes on, prefetched one layer ahead"
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
