#include "memory/size_table.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "dist/comm.h"
#include "memory/adamw_8bit_layout.h"
#include "memory/disk_store.h"
#include "memory/optimizer_shards.h"
#include "memory/weight_stream.h"
#include "model/arch.h"

static size_t bytes_of(int64_t elements, size_t elem_bytes) {
    if (elements <= 0) return 0;
    return tt_align_up(tt_mul_size((size_t)elements, elem_bytes, "a tensor size"));
}

size_t tt_data_parallel_gradient_bytes(const tt_param_table *params, const tt_plan *plan) {
    return bytes_of(params->trainable_numel, plan->gradient_bytes);
}

tt_slot_set tt_offloaded_slots(const tt_size_table *t, const tt_plan *plan, int64_t l) {
    const tt_layer_plan *lp = &plan->layers[l];
    if (lp->saved_activation_tier == plan->compute_tier) return 0;
    tt_slot_set slots = 0;
    for (int i = 0; i < TT_SAVED_SLOT_COUNT; i++)
        if (((lp->offloaded & ~lp->recompute) >> i) & 1u && t->saved_slot[i] &&
            t->saved_slot[i] >= plan->min_offload_bytes)
            slots |= TT_SLOT(i);
    return slots;
}

size_t tt_offloaded_block_bytes(const tt_size_table *t, const tt_plan *plan, int64_t l) {
    const tt_slot_set slots = tt_offloaded_slots(t, plan, l);
    size_t bytes = 0;
    for (int i = 0; i < TT_SAVED_SLOT_COUNT; i++)
        if ((slots >> i) & 1u) bytes += t->saved_slot[i];
    return bytes;
}

void tt_optimizer_unit_starts(const tt_param_table *params, int64_t num_layers, int64_t *start) {
    const int64_t units = num_layers + 2;
    for (int64_t u = 0; u <= units; u++) start[u] = params->trainable_numel;
    for (int i = 0; i < params->count; i++) {
        const tt_param_info *p = &params->params[i];
        if (!p->trainable) continue;
        const int64_t u = tt_param_unit(p, num_layers), at = p->offset - params->trainable_start;
        if (at < start[u]) start[u] = at;
    }
    /* an empty unit starts where the next one does */
    for (int64_t u = units - 1; u >= 0; u--)
        if (start[u] > start[u + 1]) start[u] = start[u + 1];
    /* the parameter table keeps each unit contiguous and in this order (params.h) */
    for (int i = 0; i < params->count; i++) {
        const tt_param_info *p = &params->params[i];
        if (!p->trainable) continue;
        const int64_t u = tt_param_unit(p, num_layers), at = p->offset - params->trainable_start;
        TT_CHECK(at >= start[u] && at + p->numel <= start[u + 1], "parameter %s lies outside its optimizer unit",
                 p->name);
    }
}

int64_t tt_optimizer_first_host_unit(const int64_t *start, int64_t num_layers, double fraction) {
    return tt_optimizer_first_host_unit_in(start, 0, num_layers + 2, fraction);
}

void tt_optimizer_host_units(const int64_t *start, const tt_plan *plan, const tt_size_table *t,
                             int64_t *first_host_unit, int64_t *end_unit) {
    int64_t first = 0;
    tt_optimizer_shard_units(start, plan->num_layers + 2, t->optimizer_shard_start, t->optimizer_shard_end, &first,
                             end_unit);
    *first_host_unit = tt_optimizer_first_host_unit_in(start, first, *end_unit, plan->optimizer_offload_fraction);
}

int64_t tt_optimizer_first_host_unit_in(const int64_t *start, int64_t first_unit, int64_t end_unit, double fraction) {
    const int64_t total = start[end_unit] - start[first_unit];
    int64_t best = end_unit;
    double best_error = fraction * (double)total; /* nothing on the host */
    for (int64_t u = end_unit - 1; u >= first_unit; u--) {
        const double error = fabs((double)(start[end_unit] - start[u]) - fraction * (double)total);
        if (error < best_error) {
            best_error = error;
            best = u;
        }
    }
    return best;
}

bool tt_size_table_projection_gradient(const tt_model_config *model) {
    return tt_arch_of(model)->norm_placement != TT_NORM_PRE || tt_model_residual_scale(model) != 1.0;
}

tt_scratch_shape tt_size_table_scratch_shape(const tt_model_config *m, const tt_param_table *params,
                                             const tt_plan *plan) {
    const int64_t N = plan->micro_batch * plan->seq_len;
    bool some_slide = false;
    for (int64_t l = 0; l < m->num_layers && !some_slide; l++) some_slide = tt_model_layer_attention(m, l).sliding;
    const bool every_slides = tt_model_every_layer_slides(m);
    const tt_attention_shape sliding = tt_plan_attention_shape(plan, m, true);
    return (tt_scratch_shape){
        .tokens = N,
        .attention = tt_plan_attention_shape(plan, m, every_slides),
        .has_sliding = some_slide && !every_slides && sliding.sliding_window != 0,
        .sliding_attention = sliding,
        .hidden = m->hidden_size,
        .intermediate = m->intermediate_size,
        .loss_chunk = plan->loss_chunk,
        .gradient_numel = params->trainable_numel,
        .vocab = m->vocab_size,
    };
}

void tt_size_table_tensors(tt_size_table *t, const tt_model_config *m, const tt_param_table *params,
                           const tt_plan *plan, const tt_backend *backend) {
    memset(t, 0, sizeof(*t));
    const int64_t N = plan->micro_batch * plan->seq_len, D = m->hidden_size, F = m->intermediate_size;
    const int64_t q_dim = m->num_heads * m->head_dim, kv_dim = m->num_kv_heads * m->head_dim;
    const size_t a = plan->activation_bytes;

    /* tiled_mlp: the MLP's intermediates hold one shard of rows */
    const int64_t mlp_rows = plan->mlp_shards > 1 ? plan->mlp_shard_rows : N;
    /* every slot from its shape and dtype in the architecture's table; a LoRA slot (an adapted layer's down
     * projection, [N, r]) only where its module is adapted */
    const tt_layer_slots *slots = tt_layer_slots_for(m);
    const tt_slot_dims dims = {.tokens = N,
                               .mlp_rows = mlp_rows,
                               .num_heads = m->num_heads,
                               .num_kv_heads = m->num_kv_heads,
                               .head_dim = m->head_dim,
                               .hidden = D,
                               .intermediate = F,
                               .lora_rank = params->lora_rank,
                               .experts = m->num_experts,
                               .experts_per_token = m->num_experts_per_tok,
                               .moe_intermediate = m->moe_intermediate_size};
    for (int i = 0; i < TT_SAVED_SLOT_COUNT; i++) {
        const tt_saved_slot_info *info = &slots->slot[i];
        const bool adapted =
            info->lora_module < 0 || (params->lora_rank > 0 && ((params->lora_targets >> info->lora_module) & 1u));
        t->saved_slot[i] = adapted ? bytes_of(tt_saved_slot_elements(info, &dims), info->fp32 ? 4 : a) : 0;
    }
    /* LoRA with dropout: one [N, in] workspace holds an adapter's dropped input (forward, weight gradient) or its
     * input gradient; QLoRA: the largest linear weight dequantized, in the precision the GEMMs read weights */
    const tt_arch *arch = tt_arch_of(m);
    int64_t largest_lora_input = 0; /* elements: rows x in (the MLP's output projection's rows are a shard's) */
    int64_t largest_linear = 0;
    for (int i = 0; i < arch->linear_layer_count; i++) {
        const tt_linear_layer *linear = &arch->linear_layers[i];
        const int64_t in = tt_dim_size(linear->in, m), out = tt_dim_size(linear->out, m);
        const bool adapted = params->lora_rank > 0 && ((params->lora_targets >> linear->module) & 1u);
        const int64_t input = (linear->module == TT_LORA_DOWN ? mlp_rows : N) * in;
        if (adapted && input > largest_lora_input) largest_lora_input = input;
        if (in * out > largest_linear) largest_linear = in * out;
    }
    t->lora_dropout_buffer = params->lora_dropout > 0 ? bytes_of(largest_lora_input, a) : 0;
    t->dequant_buffer = params->quantized ? bytes_of(largest_linear, plan->weight_bytes) : 0;
    for (int i = 0; i < TT_SAVED_SLOT_COUNT; i++) t->layer_saved += t->saved_slot[i];

    const tt_scratch_shape scratch_shape = tt_size_table_scratch_shape(m, params, plan);
    const tt_backend_settings settings = tt_plan_backend_settings(plan);
    t->backward_slot[TT_BACKWARD_D_ATTN_OUT] = bytes_of(N * q_dim, a);
    t->backward_slot[TT_BACKWARD_D_Q] = bytes_of(N * q_dim, a);
    t->backward_slot[TT_BACKWARD_D_K] = bytes_of(N * kv_dim, a);
    t->backward_slot[TT_BACKWARD_D_V] = bytes_of(N * kv_dim, a);
    size_t attention_workspace = tt_backend_attention_workspace_bytes(backend, &settings, &scratch_shape.attention);
    if (scratch_shape.has_sliding) { /* the layers that slide may take more */
        const size_t sliding =
            tt_backend_attention_workspace_bytes(backend, &settings, &scratch_shape.sliding_attention);
        if (sliding > attention_workspace) attention_workspace = sliding;
    }
    t->backward_slot[TT_BACKWARD_ATTENTION] = tt_align_up(attention_workspace);
    t->backward_slot[TT_BACKWARD_D_ATTN_PROJ] = tt_size_table_projection_gradient(m) ? bytes_of(N * D, a) : 0;
    t->mlp_backward_scratch = tt_size_table_projection_gradient(m) ? bytes_of(N * D, a) : 0;
    if (m->num_experts > 0) /* the experts' backward: the routed rows' output gradient, the routing's in fp32 */
        t->mlp_backward_scratch =
            bytes_of(N * m->num_experts_per_tok * D, a) + bytes_of(N * (m->num_experts + m->num_experts_per_tok), 4);
    for (int i = 0; i < TT_BACKWARD_SLOT_COUNT; i++) t->layer_backward += t->backward_slot[i];
    t->sequence_parallel_q = plan->sequence_parallel > 1 ? bytes_of(N * q_dim, a) : 0;
    t->sequence_parallel_kv = plan->sequence_parallel > 1 ? bytes_of(N * kv_dim, a) : 0;

    t->layer_input = bytes_of(N * D, a);
    t->head_rstd = bytes_of(N, 4);
    t->head_normed = bytes_of(N * D, a);
    t->logits_chunk = bytes_of(plan->loss_chunk * m->vocab_size, a);
    t->d_head = bytes_of(N * D, a);
    t->d_residual = bytes_of(N * D, a);
    /* packed documents: the micro-batch's own rows of the tables, gathered at each token's position */
    t->rope_table = bytes_of((plan->packed_documents ? N : plan->seq_len) * (tt_model_rotary_dim(m) / 2), 4);
    t->rope_tables = m->rope_local_theta > 0 ? 2 : 1;
    t->batch_ids = bytes_of(N, 4);
    /* the whole sequences' (sequence parallel: the attention's document mask spans every rank's tokens) */
    t->batch_positions = plan->packed_documents ? bytes_of(plan->micro_batch * tt_plan_sequence_len(plan), 4) : 0;
    t->op_scratch = tt_align_up(tt_backend_scratch_bytes(backend, &settings, &scratch_shape));
    t->norm_partials = bytes_of(m->num_layers + 2, sizeof(double));
    /* Frozen parameters have weights only (in compute precision); gradients, the master copy and
     * the AdamW moments exist for the trainable ones. */
    t->frozen_weights = bytes_of(params->trainable_start, plan->weight_bytes);
    /* layer_offloading: the frozen weights live in pinned host memory; the compute tier keeps the
     * frozen parameters outside streamed layers and two buffers of the largest streamed layer */
    if (plan->stream_frozen_layers) {
        size_t largest = 0;
        for (int64_t l = 0; l < plan->num_layers; l++) {
            const size_t block = tt_weight_stream_block_bytes(params, l, plan->weight_bytes);
            if (block > largest) largest = block;
        }
        t->streamed_weights_host = t->frozen_weights;
        t->weight_ring = largest;
        t->frozen_resident = tt_weight_stream_resident_bytes(params, plan->num_layers, plan->weight_bytes);
        t->frozen_weights = t->frozen_resident + 2 * t->weight_ring;
    }
    t->weights = bytes_of(params->trainable_numel, plan->weight_bytes);
    t->gradients = bytes_of(params->trainable_numel, plan->gradient_bytes);
    /* Optimizer offload moves the master weights and moments of a trailing run of whole units to host memory,
     * fp32 whatever the compute tier keeps, with staging for the gradients and (when the compute copy is not
     * fp32: the fp32 master is what goes back otherwise) the new weights. */
    int64_t *start = tt_xcalloc((size_t)m->num_layers + 3, sizeof(int64_t), "optimizer units");
    tt_optimizer_unit_starts(params, m->num_layers, start);
    /* ZeRO stage 1: this rank's shard of whole units */
    t->optimizer_shard_start = 0;
    t->optimizer_shard_end = params->trainable_numel;
    if (tt_plan_shards_optimizer(plan)) {
        int64_t *bounds = tt_xcalloc((size_t)plan->data_parallel_ranks + 1, sizeof(int64_t), "optimizer shards");
        tt_optimizer_shard_bounds(start, m->num_layers + 2, plan->data_parallel_ranks, bounds);
        t->optimizer_shard_start = bounds[plan->data_parallel_rank];
        t->optimizer_shard_end = bounds[plan->data_parallel_rank + 1];
        free(bounds);
    }
    /* the host share: the top of the shard (of the model, unsharded) */
    t->optimizer_host_start = t->optimizer_shard_end;
    t->gradient_ring_first = m->num_layers + 1;
    int64_t first_host_unit = m->num_layers + 2, host_end_unit = m->num_layers + 2;
    if (plan->optimizer_offload) {
        tt_optimizer_host_units(start, plan, t, &first_host_unit, &host_end_unit);
        t->optimizer_host_start = start[first_host_unit];
    }
    t->optimizer_host_numel = t->optimizer_shard_end - t->optimizer_host_start;
    /* The gradient ring: the host share's decoder layers (three at least, or two slots save nothing), from the
     * first host unit (not the embedding: with tied weights the LM head writes its gradient first) */
    if (plan->gradient_ring && t->optimizer_host_numel > 0) {
        const int64_t first = first_host_unit < 1 ? 1 : first_host_unit;
        size_t slot = 0;
        int64_t layers = 0; /* with gradients (frozen layers have none) */
        for (int64_t u = first; u <= m->num_layers; u++) {
            const size_t unit = bytes_of(start[u + 1] - start[u], plan->gradient_bytes);
            if (unit > slot) slot = unit;
            layers += unit > 0;
        }
        if (layers >= 3) {
            t->gradient_ring_first = first;
            t->gradient_ring_slot = slot;
            t->gradients = bytes_of(start[first], plan->gradient_bytes) + 2 * slot +
                           bytes_of(params->trainable_numel - start[m->num_layers + 1], plan->gradient_bytes);
        }
    }
    /* Weight offload: units 1 .. K (layers 0 .. K - 1) in host memory, two of their size on the compute tier */
    t->weight_offload_first = t->weight_offload_end = params->trainable_numel;
    if (plan->offloaded_weight_layers > 0) {
        const int64_t K = plan->offloaded_weight_layers;
        t->weight_offload_first = start[1];
        t->weight_offload_end = start[K + 1];
        for (int64_t u = 1; u <= K; u++) {
            const size_t unit = bytes_of(start[u + 1] - start[u], plan->weight_bytes);
            if (unit > t->weight_offload_slot) t->weight_offload_slot = unit;
        }
        t->weights = bytes_of(t->weight_offload_first, plan->weight_bytes) + 2 * t->weight_offload_slot +
                     bytes_of(params->trainable_numel - t->weight_offload_end, plan->weight_bytes);
        /* the host share's units live in the optimizer's host buffers already */
        const int64_t home_end = plan->optimizer_offload && t->optimizer_host_start < t->weight_offload_end
                                     ? t->optimizer_host_start
                                     : t->weight_offload_end;
        if (home_end > t->weight_offload_first)
            t->host_weight_home = bytes_of(home_end - t->weight_offload_first, plan->weight_bytes);
    }
    if (tt_plan_shards_gradients(plan)) { /* zero_stage 2 and 3: the other ranks' layers through two ring slots */
        const size_t units = (size_t)m->num_layers + 2;
        size_t *offset = tt_xcalloc(units, sizeof(size_t), "sharded layout");
        int *slot = tt_xcalloc(units, sizeof(int), "sharded layout");
        t->gradients = tt_sharded_unit_layout(start, m->num_layers, t->optimizer_shard_start, t->optimizer_shard_end,
                                              plan->gradient_bytes, offset, slot, &t->sharded_gradient_slot);
        if (tt_plan_shards_weights(plan))
            t->weights = tt_sharded_unit_layout(start, m->num_layers, t->optimizer_shard_start, t->optimizer_shard_end,
                                                plan->weight_bytes, offset, slot, &t->sharded_weight_slot);
        free(offset);
        free(slot);
    }
    /* data parallel: the buckets of the gradients' sums, the same on every rank */
    t->data_parallel_buckets = plan->data_parallel_ranks > 1
                                   ? tt_align_up(tt_comm_scratch_bytes(plan->data_parallel_ranks,
                                                                       tt_data_parallel_gradient_bytes(params, plan)))
                                   : 0;
    free(start);
    /* the compute tier's share of this rank's shard */
    const int64_t compute_end =
        t->optimizer_shard_end < t->optimizer_host_start ? t->optimizer_shard_end : t->optimizer_host_start;
    t->master = bytes_of(compute_end - t->optimizer_shard_start, plan->master_bytes);
    t->optimizer_state = 2 * bytes_of(compute_end - t->optimizer_shard_start, plan->moment_bytes);
    if (plan->moments_8bit) { /* the whole trainable layout's, in one share (config load refuses the others) */
        TT_CHECK(t->optimizer_shard_start == 0 && compute_end == params->trainable_numel,
                 "8-bit AdamW moments with an optimizer shard or offload");
        t->optimizer_state = 2 * tt_adamw_8bit_moment_bytes(params);
    }
    t->host_master = bytes_of(t->optimizer_host_numel, sizeof(float));
    t->host_optimizer_state = 2 * bytes_of(t->optimizer_host_numel, sizeof(float));
    t->host_gradients = bytes_of(t->optimizer_host_numel, plan->gradient_bytes);
    t->host_weights = plan->weight_bytes != sizeof(float) ? bytes_of(t->optimizer_host_numel, plan->weight_bytes) : 0;

    /* Where offloaded blocks and inputs go, and the compute-tier staging they pass through. */
    const tt_tier c = plan->compute_tier;
    const int64_t L = plan->num_layers;
    t->host_tier = TT_TIER_PINNED;
    size_t largest_block = 0, largest_disk_block = 0;
    for (int64_t l = 0; l < L; l++) {
        const size_t block = tt_offloaded_block_bytes(t, plan, l);
        if (block > largest_block) largest_block = block;
        if (!block) continue;
        if (plan->layers[l].saved_activation_tier == TT_TIER_DISK) {
            if (block > largest_disk_block) largest_disk_block = block;
        } else {
            t->host_tier = plan->layers[l].saved_activation_tier;
        }
    }
    t->saved_staging = largest_block ? (size_t)plan->saved_ring * largest_block : 0;
    t->saved_disk_slot = (largest_disk_block + TT_DISK_ALIGNMENT - 1) / TT_DISK_ALIGNMENT * TT_DISK_ALIGNMENT;
    if (largest_disk_block) t->host_tier = TT_TIER_PINNED; /* the disk's pinned buffers */
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
    t->disk_slot = to_disk ? (t->layer_input + TT_DISK_ALIGNMENT - 1) / TT_DISK_ALIGNMENT * TT_DISK_ALIGNMENT : 0;
    if (to_disk) t->host_tier = TT_TIER_PINNED;
}

void tt_size_table_print(const tt_size_table *t, FILE *out, const tt_arena *const measured[TT_TIER_COUNT]) {
    bool used_tier[TT_TIER_COUNT] = {0};
    for (int tier = 0; tier < TT_TIER_COUNT; tier++) used_tier[tier] = t->tier_peak[tier] > 0;
    char buf[32], buf2[32];
    fprintf(out, "  %-20s", measured ? "memory (peak)" : "memory (estimate)");
    for (int tier = 0; tier < TT_TIER_COUNT; tier++)
        if (used_tier[tier]) {
            if (measured && measured[tier]) fprintf(out, " %12s %-4s %12s", tt_tier_name(tier), "est.", "measured");
            else fprintf(out, " %12s", tt_tier_name(tier));
        }
    fputc('\n', out);
    for (int cls = 0; cls < TT_CLASS_COUNT; cls++) {
        bool any = false;
        for (int tier = 0; tier < TT_TIER_COUNT; tier++)
            if (t->class_peak[cls][tier] || (measured && measured[tier] && measured[tier]->class_peak[cls])) any = true;
        if (!any) continue;
        fprintf(out, "  %-20s", tt_class_name(cls));
        for (int tier = 0; tier < TT_TIER_COUNT; tier++) {
            if (!used_tier[tier]) continue;
            fprintf(out, " %12s", tt_format_bytes(t->class_peak[cls][tier], buf, sizeof buf));
            if (measured && measured[tier])
                fprintf(out, " %-4s %12s", "", tt_format_bytes(measured[tier]->class_peak[cls], buf2, sizeof buf2));
        }
        fputc('\n', out);
    }
    fprintf(out, "  %-20s", "total (tier peak)");
    for (int tier = 0; tier < TT_TIER_COUNT; tier++) {
        if (!used_tier[tier]) continue;
        fprintf(out, " %12s", tt_format_bytes(t->tier_peak[tier], buf, sizeof buf));
        if (measured && measured[tier])
            fprintf(out, " %-4s %12s", "", tt_format_bytes(measured[tier]->peak, buf2, sizeof buf2));
    }
    fputc('\n', out);
}

void tt_size_table_print_layers(const tt_size_table *t, const tt_plan *plan, const tt_model_config *model, FILE *out) {
    char kept_text[32], again_text[32], name[48];
    fprintf(out, "  %-8s %-26s %-8s %-12s %12s %12s\n", "layer", "saved activations", "where", "layer input", "kept",
            "recomputed");
    int64_t l = 0;
    while (l < plan->num_layers) {
        /* runs of identical layers print as one row (bytes per layer) */
        const tt_layer_plan *a = &plan->layers[l];
        int64_t end = l;
        while (end + 1 < plan->num_layers && memcmp(&plan->layers[end + 1], a, sizeof *a) == 0) end++;
        size_t kept = 0, again = 0;
        for (int i = 0; i < TT_SAVED_SLOT_COUNT; i++)
            *(((a->recompute >> i) & 1u) ? &again : &kept) += t->saved_slot[i];
        /* tiled_mlp's shard slots are in every layer's recompute set; the name is the plan's choice */
        const tt_slot_set chosen = plan->mlp_shards > 1 ? a->recompute & ~TT_MLP_SHARD_SLOTS : a->recompute;
        char range[48];
        if (end == l) snprintf(range, sizeof range, "%lld", (long long)l);
        else snprintf(range, sizeof range, "%lld-%lld", (long long)l, (long long)end);
        fprintf(out, "  %-8s %-26s %-8s %-12s %12s %12s\n", range, tt_recompute_name(chosen, model, name, sizeof name),
                kept ? tt_tier_name(a->saved_activation_tier) : "-", tt_tier_name(a->layer_input_tier),
                tt_format_bytes(kept, kept_text, sizeof kept_text),
                tt_format_bytes(again, again_text, sizeof again_text));
        l = end + 1;
    }
}

void tt_size_table_print_weight_offload(const tt_size_table *t, const tt_plan *plan, const tt_param_table *params,
                                        FILE *out) {
    if (plan->offloaded_weight_layers <= 0) return;
    const int64_t numel = t->weight_offload_end - t->weight_offload_first;
    char slot[32], home[32], where[128];
    tt_format_bytes(t->host_weight_home, home, sizeof home);
    if (plan->optimizer_offload && t->optimizer_host_start < t->weight_offload_end) /* some in its host share */
        snprintf(where, sizeof where, "%s of their own, the rest in the optimizer offload's weight staging", home);
    else snprintf(where, sizeof where, "%s", home);
    fprintf(out,
            "  weight offload (cpu_offloading_weights): the trainable weights of layers 0-%lld (%.3fM of %.3fM "
            "trainable parameters) live in %s memory (%s) and stream to the %s through two buffers of %s\n",
            (long long)(plan->offloaded_weight_layers - 1), (double)numel / 1e6, (double)params->trainable_numel / 1e6,
            tt_tier_name(t->host_tier), where, tt_tier_name(plan->compute_tier),
            tt_format_bytes(t->weight_offload_slot, slot, sizeof slot));
}

void tt_size_table_print_moments_8bit(const tt_size_table *t, const tt_plan *plan, const tt_param_table *params,
                                      FILE *out) {
    if (!plan->moments_8bit) return;
    tt_adamw_8bit_layout layout;
    tt_adamw_8bit_layout_build(&layout, params);
    int quantized = 0;
    for (int i = 0; i < layout.count; i++) quantized += layout.tensors[i].quantized;
    char moments[32], fp32[32];
    fprintf(out,
            "  optimizer: bitsandbytes' 8-bit AdamW: %d of %d trainable tensors (%.3fM of %.3fM parameters) keep 8-bit "
            "moments (a byte per element and an fp32 absmax per %d-element block each), the %d below %d elements "
            "fp32 moments; moments %s (fp32 AdamW: %s)\n",
            quantized, layout.count, (double)layout.quantized_numel / 1e6,
            (double)(layout.quantized_numel + layout.fp32_numel) / 1e6, TT_ADAMW_8BIT_BLOCK, layout.count - quantized,
            TT_ADAMW_8BIT_MIN_NUMEL, tt_format_bytes(t->optimizer_state, moments, sizeof moments),
            tt_format_bytes(2 * bytes_of(params->trainable_numel, sizeof(float)), fp32, sizeof fp32));
    tt_adamw_8bit_layout_free(&layout);
}

void tt_size_table_print_optimizer(const tt_size_table *t, const tt_plan *plan, const tt_param_table *params,
                                   FILE *out) {
    if (!plan->optimizer_offload) return;
    const int64_t L = plan->num_layers, n = params->trainable_numel;
    int64_t *start = tt_xcalloc((size_t)L + 3, sizeof(int64_t), "optimizer units");
    tt_optimizer_unit_starts(params, L, start);
    int64_t first = 0, end = 0;
    tt_optimizer_host_units(start, plan, t, &first, &end);
    free(start);
    char what[96];
    if (t->optimizer_host_numel == 0) snprintf(what, sizeof what, "nothing");
    else if (tt_plan_shards_optimizer(plan))
        snprintf(what, sizeof what, "units %lld-%lld of this rank's zero_stage shard", (long long)first,
                 (long long)(end - 1));
    else if (first == 0) snprintf(what, sizeof what, "everything");
    else if (first == L) snprintf(what, sizeof what, "layer %lld, final norm and LM head", (long long)(L - 1));
    else if (first < L)
        snprintf(what, sizeof what, "layers %lld-%lld, final norm and LM head", (long long)(first - 1),
                 (long long)(L - 1));
    else snprintf(what, sizeof what, "final norm and LM head");
    char master[32], moments[32], gradients[32], weights[32], device_master[32], device_moments[32];
    fprintf(out,
            "  optimizer offload (optimizer_offload_fraction %g): %s, %.3fM of %.3fM trainable parameters (%.1f%%), "
            "updated by the CPU AdamW %s; %s memory: master %s, moments %s, gradient staging %s, weight staging %s; "
            "%s: master %s, moments %s\n",
            plan->optimizer_offload_fraction, what, (double)t->optimizer_host_numel / 1e6, (double)n / 1e6,
            n ? 100.0 * (double)t->optimizer_host_numel / (double)n : 0.0,
            plan->optimizer_overlap ? "layer by layer beside the compute (overlap_cpu_optimizer_d2h_h2d)"
                                    : "after the backward",
            tt_tier_name(t->host_tier), tt_format_bytes(t->host_master, master, sizeof master),
            tt_format_bytes(t->host_optimizer_state, moments, sizeof moments),
            tt_format_bytes(t->host_gradients, gradients, sizeof gradients),
            tt_format_bytes(t->host_weights, weights, sizeof weights), tt_tier_name(plan->compute_tier),
            tt_format_bytes(t->master, device_master, sizeof device_master),
            tt_format_bytes(t->optimizer_state, device_moments, sizeof device_moments));
    if (t->gradient_ring_first <= L) {
        char slot[32];
        fprintf(out,
                "  gradient ring: the gradients of layers %lld-%lld stream to %s memory as each layer's backward "
                "finishes, through two slots of %s on the %s\n",
                (long long)(t->gradient_ring_first - 1), (long long)(L - 1), tt_tier_name(t->host_tier),
                tt_format_bytes(t->gradient_ring_slot, slot, sizeof slot), tt_tier_name(plan->compute_tier));
    } else if (plan->optimizer_overlap && t->optimizer_host_numel > 0) {
        fprintf(out, "  gradients stay whole on the %s (%s)\n", tt_tier_name(plan->compute_tier),
                "fewer than three layers with gradients in the host share");
    }
}
