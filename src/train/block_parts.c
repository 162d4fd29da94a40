#include "train/block_parts.h"

#include "core/check.h"
#include "ops/dropout_mask.h"
#include "train/lora_step.h"

tt_row_range tt_block_all_rows(const tt_model_state *s) {
    return (tt_row_range){.first = 0, .count = s->plan.micro_batch * s->plan.seq_len};
}

/* Row `first` of a [rows, width] tensor in the activation precision. */
void *tt_block_row_at(const tt_model_state *s, void *base, int64_t first, int64_t width) {
    return base ? (unsigned char *)base + (size_t)(first * width) * s->plan.activation_bytes : NULL;
}

/* Where a projection's adapter is: the adapted module (the projection's own layer, or the fused layer computing it),
 * the projection's part of it and its rows of the layer's output. */
typedef struct adapter_site {
    const tt_linear_layer *linear;
    tt_lora_module module;
    int part, parts;
    int64_t first_row, rows;
} adapter_site;

static bool adapter_site_of(const tt_model_state *s, tt_lora_module projection, adapter_site *out) {
    out->linear = tt_arch_projection(&s->config, projection, &out->part, &out->first_row, &out->rows);
    if (!out->linear) return false;
    out->module = out->linear->module;
    out->parts = out->linear->part_count ? out->linear->part_count : 1;
    return true;
}

/* Layer l's adapter of a site's module for this micro-step, B and dB its part's rows; false when the module has none.
 * The dropout mask is the module's (one input for every part). */
static bool lora_layer(const tt_model_state *s, int64_t l, const adapter_site *site, const tt_row_range *rows,
                       tt_lora_layer *out) {
    const tt_layer_view *w = &s->w_layers[l], *g = &s->g_layers[l];
    const tt_lora_module m = site->module;
    if (!w->lora_a[m]) return false;
    const int64_t r = s->params.lora_rank;
    *out = (tt_lora_layer){
        .A = w->lora_a[m],
        .B = (const unsigned char *)w->lora_b[m] + (size_t)(site->first_row * r) * s->plan.weight_bytes,
        .dA = g->lora_a[m],
        .dB = g->lora_b[m] ? (unsigned char *)g->lora_b[m] + (size_t)(site->first_row * r) * s->plan.gradient_bytes
                           : NULL,
        .in = tt_dim_size(site->linear->in, &s->config),
        .out = site->rows,
        .rank = r,
        .scaling = (float)s->params.lora_scaling};
    if (s->lora_dropout_on && s->params.lora_dropout > 0) {
        out->drop_threshold = tt_dropout_threshold(s->params.lora_dropout);
        out->drop_multiplier = (float)(1.0 / (1.0 - s->params.lora_dropout));
        out->drop_seed = tt_dropout_seed_mix(s->lora_dropout_seed, (uint64_t)(l * TT_LORA_MODULE_COUNT + m));
        out->drop_seed = tt_dropout_seed_at(out->drop_seed, (uint64_t)(rows->first * out->in));
        out->dropout_buffer = s->lora_dropout_buffer;
    }
    return true;
}

/* The rows of a module's saved down projection. */
static void *adapter_rows(const tt_model_state *s, tt_lora_module module, void *const *S, const tt_row_range *rows) {
    return tt_block_row_at(s, S[tt_lora_saved_slot(s->slots, module)], rows->first, s->params.lora_rank);
}

/* Whether projection k of a group is the first of its module's there (a module's adapter runs once a group). */
static bool first_of_module(const tt_model_state *s, const tt_lora_module *projections, int k, adapter_site *site) {
    if (!adapter_site_of(s, projections[k], site)) return false;
    for (int j = 0; j < k; j++) {
        adapter_site other;
        if (adapter_site_of(s, projections[j], &other) && other.module == site->module) return false;
    }
    return true;
}

void tt_block_adapters_down_rows(tt_model_state *s, int64_t l, const tt_lora_module *projections, int count,
                                 const void *x, void *const *S, tt_slot_set compute, const tt_row_range *rows) {
    for (int k = 0; k < count; k++) {
        adapter_site site;
        tt_lora_layer lora;
        if (!first_of_module(s, projections, k, &site)) continue;
        const tt_saved_slot slot = tt_lora_saved_slot(s->slots, site.module);
        if (((compute >> slot) & 1u) && lora_layer(s, l, &site, rows, &lora))
            tt_lora_forward_down(s->backend, &lora, x, adapter_rows(s, site.module, S, rows), rows->count);
    }
}

void tt_block_adapter_up_rows(tt_model_state *s, int64_t l, tt_lora_module projection, void *y, void *const *S,
                              const tt_row_range *rows) {
    adapter_site site;
    tt_lora_layer lora;
    if (adapter_site_of(s, projection, &site) && lora_layer(s, l, &site, rows, &lora))
        tt_lora_forward_up(s->backend, &lora, adapter_rows(s, site.module, S, rows), y, rows->count);
}

void tt_block_adapters_backward_weights_rows(tt_model_state *s, int64_t l, const tt_lora_module *projections,
                                             const void *const *dys, int count, const void *x, void *const *S,
                                             const tt_row_range *rows) {
    for (int k = 0; k < count; k++) {
        adapter_site site;
        tt_lora_layer probe;
        if (!first_of_module(s, projections, k, &site) || !lora_layer(s, l, &site, rows, &probe)) continue;
        /* the module's parts in the group, in part order (a fused layer's projections all read this input) */
        tt_lora_layer parts[3];
        const void *part_dys[3];
        int n = 0;
        for (int j = k; j < count && n < 3; j++) {
            adapter_site other;
            if (!adapter_site_of(s, projections[j], &other) || other.module != site.module) continue;
            lora_layer(s, l, &other, rows, &parts[other.part]);
            part_dys[other.part] = dys[j];
            n++;
        }
        TT_CHECK(n == site.parts, "%s: a group holds %d of %d parts of %s", s->config.model_type, n, site.parts,
                 tt_lora_module_name(site.module));
        void *u = adapter_rows(s, site.module, S, rows);
        if (n == 1) tt_lora_backward_weights(s->backend, &parts[0], part_dys[0], x, u, rows->count);
        else tt_lora_backward_weights_parts(s->backend, parts, part_dys, n, x, u, rows->count);
    }
}

void tt_block_adapters_backward_input_rows(tt_model_state *s, int64_t l, const tt_lora_module *projections, int count,
                                           void *dx, void *const *S, const tt_row_range *rows) {
    for (int k = 0; k < count; k++) {
        adapter_site site;
        tt_lora_layer lora;
        if (first_of_module(s, projections, k, &site) && lora_layer(s, l, &site, rows, &lora))
            tt_lora_backward_input(s->backend, &lora, adapter_rows(s, site.module, S, rows), dx, rows->count);
    }
}

/* The same over the whole micro-batch. */
void tt_block_adapters_down(tt_model_state *s, int64_t l, const tt_lora_module *projections, int count, const void *x,
                            void *const *S, tt_slot_set compute) {
    const tt_row_range rows = tt_block_all_rows(s);
    tt_block_adapters_down_rows(s, l, projections, count, x, S, compute, &rows);
}

void tt_block_adapter_up(tt_model_state *s, int64_t l, tt_lora_module projection, void *y, void *const *S) {
    const tt_row_range rows = tt_block_all_rows(s);
    tt_block_adapter_up_rows(s, l, projection, y, S, &rows);
}

void tt_block_adapters_backward_weights(tt_model_state *s, int64_t l, const tt_lora_module *projections,
                                        const void *const *dys, int count, const void *x, void *const *S) {
    const tt_row_range rows = tt_block_all_rows(s);
    tt_block_adapters_backward_weights_rows(s, l, projections, dys, count, x, S, &rows);
}

void tt_block_adapters_backward_input(tt_model_state *s, int64_t l, const tt_lora_module *projections, int count,
                                      void *dx, void *const *S) {
    const tt_row_range rows = tt_block_all_rows(s);
    tt_block_adapters_backward_input_rows(s, l, projections, count, dx, S, &rows);
}

/* The MLP's shards: tiled_mlp's, or one of the whole micro-batch. */
bool tt_block_mlp_tiled(const tt_model_state *s) { return s->plan.mlp_shards > 1; }

int64_t tt_block_mlp_shard_count(const tt_model_state *s) { return tt_block_mlp_tiled(s) ? s->plan.mlp_shards : 1; }

tt_row_range tt_block_mlp_shard(const tt_model_state *s, int64_t k) {
    if (!tt_block_mlp_tiled(s)) return tt_block_all_rows(s);
    const int64_t N = s->plan.micro_batch * s->plan.seq_len, first = k * s->plan.mlp_shard_rows;
    const int64_t count = N - first < s->plan.mlp_shard_rows ? N - first : s->plan.mlp_shard_rows;
    return (tt_row_range){.first = first, .count = count};
}

/* The weight a GEMM reads: the tensor itself, or with 4-bit frozen weights (QLoRA) the tensor dequantized into the
 * one shared buffer (sizes.dequant_buffer: the largest linear weight in the compute precision), which the GEMM that
 * follows reads before the next dequantization rewrites it (both on the compute stream, in order). The same
 * dequantization every time, so a recompute and every memory mode see the same weights. */
const void *tt_block_gemm_weight(tt_model_state *s, const tt_layer_view *layer, tt_param_kind kind, const void *w,
                                 int64_t numel) {
    /* a row block of a fused weight (Phi-3) stored in 4 bits: the whole weight dequantized, the block's rows of it */
    const bool in_qkv = layer->w_qkv && (kind == TT_PARAM_WQ || kind == TT_PARAM_WK || kind == TT_PARAM_WV);
    const bool in_gate_up = layer->w_gate_up && (kind == TT_PARAM_W_GATE || kind == TT_PARAM_W_UP);
    if (in_qkv || in_gate_up) {
        const tt_param_kind fused = in_qkv ? TT_PARAM_W_QKV : TT_PARAM_W_GATE_UP;
        if (!((layer->quantized >> fused) & 1u)) return w;
        const tt_model_config *c = &s->config;
        const int64_t D = c->hidden_size, q = c->num_heads * c->head_dim * D, kv = c->num_kv_heads * c->head_dim * D;
        const int64_t F = c->intermediate_size * D;
        const int64_t whole = in_qkv ? q + 2 * kv : 2 * F;
        const int64_t first = kind == TT_PARAM_WK ? q : kind == TT_PARAM_WV ? q + kv : kind == TT_PARAM_W_UP ? F : 0;
        tt_backend_dequantize_4bit(s->backend, s->dequant_buffer, in_qkv ? layer->w_qkv : layer->w_gate_up, whole,
                                   &s->params.quant_format);
        return (unsigned char *)s->dequant_buffer + (size_t)first * s->plan.weight_bytes;
    }
    if (!((layer->quantized >> kind) & 1u)) return w; /* in the compute dtype (a base that keeps it in float too) */
    tt_backend_dequantize_4bit(s->backend, s->dequant_buffer, w, numel, &s->params.quant_format);
    return s->dequant_buffer;
}

tt_rope_layout tt_block_rope_layout(const tt_model_state *s) {
    if (s->plan.packed_documents) return (tt_rope_layout){1, s->plan.micro_batch * s->plan.seq_len};
    return (tt_rope_layout){s->plan.micro_batch, s->plan.seq_len};
}