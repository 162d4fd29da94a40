#include "train/block_parts.h"

#include "ops/dropout_mask.h"
#include "train/lora_step.h"

tt_row_range tt_block_all_rows(const tt_model_state *s) {
    return (tt_row_range){.first = 0, .count = s->plan.micro_batch * s->plan.seq_len};
}

/* Row `first` of a [rows, width] tensor in the activation precision. */
void *tt_block_row_at(const tt_model_state *s, void *base, int64_t first, int64_t width) {
    return base ? (unsigned char *)base + (size_t)(first * width) * s->plan.activation_bytes : NULL;
}

/* Layer l's adapter on module m for this micro-step; false when the module has none. */
static bool lora_layer(const tt_model_state *s, int64_t l, tt_lora_module m, const tt_row_range *rows,
                       tt_lora_layer *out) {
    const tt_layer_view *w = &s->w_layers[l], *g = &s->g_layers[l];
    if (!w->lora_a[m]) return false;
    *out = (tt_lora_layer){.A = w->lora_a[m],
                           .B = w->lora_b[m],
                           .dA = g->lora_a[m],
                           .dB = g->lora_b[m],
                           .rank = s->params.lora_rank,
                           .scaling = (float)s->params.lora_scaling};
    tt_arch_linear_shape(&s->config, m, &out->in, &out->out);
    if (s->lora_dropout_on && s->params.lora_dropout > 0) {
        out->drop_threshold = tt_dropout_threshold(s->params.lora_dropout);
        out->drop_multiplier = (float)(1.0 / (1.0 - s->params.lora_dropout));
        out->drop_seed = tt_dropout_seed_mix(s->lora_dropout_seed, (uint64_t)(l * TT_LORA_MODULE_COUNT + m));
        out->drop_seed = tt_dropout_seed_at(out->drop_seed, (uint64_t)(rows->first * out->in));
        out->dropout_buffer = s->lora_dropout_buffer;
    }
    return true;
}

/* The rows of module m's saved down projection. */
static void *adapter_rows(const tt_model_state *s, tt_saved_slot slot, void *const *S, const tt_row_range *rows) {
    return tt_block_row_at(s, S[slot], rows->first, s->params.lora_rank);
}

/* The adapter's down projection into its saved slot, when the slot is wanted and the module adapted
 * (x: the rows' input). */
void tt_block_adapter_down_rows(tt_model_state *s, int64_t l, tt_lora_module m, const void *x, void *const *S,
                                tt_slot_set compute, const tt_row_range *rows) {
    const tt_saved_slot slot = tt_lora_saved_slot(s->slots, m);
    tt_lora_layer lora;
    if (((compute >> slot) & 1u) && lora_layer(s, l, m, rows, &lora))
        tt_lora_forward_down(s->backend, &lora, x, adapter_rows(s, slot, S, rows), rows->count);
}

/* y += the adapter's up projection of its slot (after the base layer wrote y's rows). */
void tt_block_adapter_up_rows(tt_model_state *s, int64_t l, tt_lora_module m, void *y, void *const *S,
                              const tt_row_range *rows) {
    const tt_saved_slot slot = tt_lora_saved_slot(s->slots, m);
    tt_lora_layer lora;
    if (lora_layer(s, l, m, rows, &lora))
        tt_lora_forward_up(s->backend, &lora, adapter_rows(s, slot, S, rows), y, rows->count);
}

void tt_block_adapter_backward_weights_rows(tt_model_state *s, int64_t l, tt_lora_module m, const void *dy,
                                            const void *x, void *const *S, const tt_row_range *rows) {
    const tt_saved_slot slot = tt_lora_saved_slot(s->slots, m);
    tt_lora_layer lora;
    if (lora_layer(s, l, m, rows, &lora))
        tt_lora_backward_weights(s->backend, &lora, dy, x, adapter_rows(s, slot, S, rows), rows->count);
}

void tt_block_adapter_backward_input_rows(tt_model_state *s, int64_t l, tt_lora_module m, void *dx, void *const *S,
                                          const tt_row_range *rows) {
    const tt_saved_slot slot = tt_lora_saved_slot(s->slots, m);
    tt_lora_layer lora;
    if (lora_layer(s, l, m, rows, &lora))
        tt_lora_backward_input(s->backend, &lora, adapter_rows(s, slot, S, rows), dx, rows->count);
}

/* The same over the whole micro-batch. */
void tt_block_adapter_down(tt_model_state *s, int64_t l, tt_lora_module m, const void *x, void *const *S,
                           tt_slot_set compute) {
    const tt_row_range rows = tt_block_all_rows(s);
    tt_block_adapter_down_rows(s, l, m, x, S, compute, &rows);
}

void tt_block_adapter_up(tt_model_state *s, int64_t l, tt_lora_module m, void *y, void *const *S) {
    const tt_row_range rows = tt_block_all_rows(s);
    tt_block_adapter_up_rows(s, l, m, y, S, &rows);
}

void tt_block_adapter_backward_weights(tt_model_state *s, int64_t l, tt_lora_module m, const void *dy, const void *x,
                                       void *const *S) {
    const tt_row_range rows = tt_block_all_rows(s);
    tt_block_adapter_backward_weights_rows(s, l, m, dy, x, S, &rows);
}

void tt_block_adapter_backward_input(tt_model_state *s, int64_t l, tt_lora_module m, void *dx, void *const *S) {
    const tt_row_range rows = tt_block_all_rows(s);
    tt_block_adapter_backward_input_rows(s, l, m, dx, S, &rows);
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
    if (!((layer->quantized >> kind) & 1u)) return w; /* in the compute dtype (a base that keeps it in float too) */
    tt_backend_dequantize_4bit(s->backend, s->dequant_buffer, w, numel, &s->params.quant_format);
    return s->dequant_buffer;
}

tt_rope_layout tt_block_rope_layout(const tt_model_state *s) {
    if (s->plan.packed_documents) return (tt_rope_layout){1, s->plan.micro_batch * s->plan.seq_len};
    return (tt_rope_layout){s->plan.micro_batch, s->plan.seq_len};
}