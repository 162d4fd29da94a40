#include "train/step.h"
#include "train/step_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/trace.h"
#include "ops/dropout_mask.h"
#include "train/block.h"

/* NEFTune's noise draws from the micro-step's seed with this counter (the adapters' masks take layer x module ones) */
#define NEFTUNE_SEED_COUNTER 0x4E4546544E45ull

typedef struct backward_scratch {
    void *slot[TT_BACKWARD_SLOT_COUNT];
} backward_scratch;

static const char *const backward_slot_names[TT_BACKWARD_SLOT_COUNT] = {
    "d attention output", "d q", "d k", "d v", "attention backward workspace", "d o_proj output"};

void tt_step_push_slots(tt_model_state *s, saved_tensors *out, tt_slot_set which) {
    out->mark = tt_arena_get_mark(&s->arena);
    out->mlp_mark = out->mark;
    out->bytes = 0;
    for (int i = 0; i < TT_SAVED_SLOT_COUNT; i++) {
        out->slot[i] = NULL;
        if (i == TT_SAVED_FIRST_MLP_SLOT) out->mlp_mark = tt_arena_get_mark(&s->arena);
        if (!((which >> i) & 1u) || !s->sizes.saved_slot[i]) continue;
        out->slot[i] =
            tt_arena_push(&s->arena, s->sizes.saved_slot[i], TT_CLASS_SAVED_ACTIVATION, s->slots->slot[i].name);
        out->bytes += s->sizes.saved_slot[i];
    }
}

/* The slots of layer l that live in its staging buffer of the saved-activation ring. */
static tt_slot_set ring_slots(const tt_model_state *s, int64_t l) {
    return tt_offload_store_offloaded(&s->saved, l) ? tt_offloaded_slots(&s->sizes, &s->plan, l) : 0;
}

/* Layer l's kept slots: the others pushed, and the offloaded ones carved in slot order out of its
 * staging buffer in the saved-activation ring (one block, copied out and back whole); in
 * evaluation, where nothing is kept, those slots still use the buffer, as the size table has it. */
static void place_kept_slots(tt_model_state *s, int64_t l, saved_tensors *out, tt_slot_set kept) {
    const tt_slot_set offloaded = ring_slots(s, l);
    tt_step_push_slots(s, out, kept & ~offloaded);
    if (!offloaded) return;
    unsigned char *block = tt_offload_store_buffer(&s->saved, l);
    for (int i = 0; i < TT_SAVED_SLOT_COUNT; i++)
        if ((offloaded >> i) & 1u) {
            out->slot[i] = block;
            block += s->sizes.saved_slot[i];
        }
}

/* One layer's slots, from the kept and the recomputed sets. */
static saved_tensors merge_slots(const saved_tensors *kept, const saved_tensors *recomputed) {
    saved_tensors all = *kept;
    for (int i = 0; i < TT_SAVED_SLOT_COUNT; i++)
        if (!all.slot[i]) all.slot[i] = recomputed->slot[i];
    return all;
}

/* Where the MLP slots on top of the stack begin once a layer's MLP backward is done (the attention
 * backward's scratch goes there): the recomputed ones', when the layer recomputes any of its
 * attention half (those lie below the recomputed MLP slots); else the kept ones' too, which lie
 * below the recomputed region. The size table prices the same. */
static tt_arena_mark mlp_top_mark(const saved_tensors *kept, const saved_tensors *recomputed) {
    bool attention_recomputed = false;
    for (int i = 0; i < TT_SAVED_FIRST_MLP_SLOT; i++) attention_recomputed |= recomputed->slot[i] != NULL;
    return attention_recomputed ? recomputed->mlp_mark : kept->mlp_mark;
}

static void push_backward(tt_model_state *s, backward_scratch *out) {
    for (int i = 0; i < TT_BACKWARD_SLOT_COUNT; i++)
        out->slot[i] = s->sizes.backward_slot[i] ? tt_arena_push(&s->arena, s->sizes.backward_slot[i],
                                                                 TT_CLASS_WORKSPACE, backward_slot_names[i])
                                                 : NULL;
}

bool tt_rope_long_factors(const tt_model_config *c, int64_t positions) {
    return c->rope_type == TT_ROPE_LONGROPE && positions > c->rope_original_max_position;
}

void tt_rope_tables(const tt_model_config *c, int table, bool long_factors, int64_t T, float *cos_table,
                    float *sin_table) {
    const int64_t rd = tt_model_rotary_dim(c), half = rd / 2;
    const bool local = table == TT_ROPE_TABLE_LOCAL;
    const float theta = (float)(local ? c->rope_local_theta : c->rope_theta);
    const tt_rope_type type = local ? TT_ROPE_DEFAULT : c->rope_type;
    /* transformers computes inverse frequencies and angles in fp32; so do we, so that the
     * GPU backend and the PyTorch peer see the same tables. */
    float *inv_freq = tt_xmalloc(sizeof(float) * (size_t)half, "RoPE frequencies");
    for (int64_t i = 0; i < half; i++) {
        const float exponent = (float)(2 * i) / (float)rd, power = powf(theta, exponent);
        if (type == TT_ROPE_LONGROPE) /* 1 / (ext_i base^(2i/d)), in that order */
            inv_freq[i] = 1.0f / ((long_factors ? c->rope_long_factor : c->rope_short_factor)[i] * power);
        else inv_freq[i] = 1.0f / power;
    }
    if (type == TT_ROPE_LINEAR)
        for (int64_t i = 0; i < half; i++) inv_freq[i] /= (float)c->rope_factor;
    if (type == TT_ROPE_LLAMA3) {
        const float old_len = (float)c->rope_original_max_position;
        const float low_wavelen = old_len / (float)c->rope_low_freq_factor;
        const float high_wavelen = old_len / (float)c->rope_high_freq_factor;
        const float factor = (float)c->rope_factor;
        for (int64_t i = 0; i < half; i++) {
            float wavelen = 2.0f * (float)M_PI / inv_freq[i];
            float f = wavelen > low_wavelen ? inv_freq[i] / factor : inv_freq[i];
            if (!(wavelen < high_wavelen) && !(wavelen > low_wavelen)) {
                float smooth = (old_len / wavelen - (float)c->rope_low_freq_factor) /
                               (float)(c->rope_high_freq_factor - c->rope_low_freq_factor);
                f = (1.0f - smooth) * f / factor + smooth * f;
            }
            inv_freq[i] = f;
        }
    }
    /* LongRoPE's attention factor multiplies cos and sin (fp32) */
    const bool scaled = type == TT_ROPE_LONGROPE && c->rope_attention_factor && c->rope_attention_factor != 1.0;
    const float attention_factor = (float)c->rope_attention_factor;
    for (int64_t p = 0; p < T; p++)
        for (int64_t i = 0; i < half; i++) {
            float angle = (float)p * inv_freq[i];
            cos_table[p * half + i] = scaled ? cosf(angle) * attention_factor : cosf(angle);
            sin_table[p * half + i] = scaled ? sinf(angle) * attention_factor : sinf(angle);
        }
    free(inv_freq);
}

/* The host arena of offloaded blocks (pinned, or pageable with use_pin_memory: false), sized by
 * the size table and checked against host_memory_budget, and the two offload stores on it: layer
 * inputs and kept saved activations (each possibly partly on disk: their disk buffers first,
 * page-aligned). */
static void init_offload(tt_model_state *s) {
    const tt_plan *plan = &s->plan;
    const tt_backend *backend = s->backend;
    const int64_t L = plan->num_layers;
    const tt_tier tier = s->sizes.host_tier;
    const size_t host = s->sizes.tier_peak[tier];
    if (s->measuring && tier != plan->compute_tier) {
        tt_arena_init_measure(&s->host, tier);
    } else if (host && tier != plan->compute_tier) {
        if (plan->pinned_budget && host > plan->pinned_budget) {
            char need[32], have[32];
            tt_die("%s needs %s of %s host memory but host_memory_budget allows %s; raise "
                   "host_memory_budget, lower sequence_len, or offload less (activation_offloading, "
                   "cpu_offloading_num_layers, selective_checkpointing offload, optimizer_offload_fraction)",
                   s->sizes.optimizer_host_numel ? "offloading (optimizer_cpu_offload's master weights and moments "
                                                   "included)"
                                                 : "activation offloading",
                   tt_format_bytes(host, need, sizeof need), tt_tier_name(tier),
                   tt_format_bytes(plan->pinned_budget, have, sizeof have));
        }
        const bool pinned = tier == TT_TIER_PINNED;
        tt_arena_init(&s->host, tier, pinned ? tt_backend_pinned_alloc(backend, host) : tt_host_block_alloc(host), host,
                      plan->pinned_budget ? plan->pinned_budget : host,
                      pinned ? backend->iface->pinned_free : tt_host_block_release, backend->ctx);
    }
    /* both stores' disk buffers (whole pages) first, from the page-aligned base, then the homes */
    tt_tier *input_tiers = tt_xcalloc((size_t)L + 1, sizeof(tt_tier), "offload plan");
    tt_tier *saved_tiers = tt_xcalloc((size_t)L + 1, sizeof(tt_tier), "offload plan");
    size_t *bytes = tt_xcalloc((size_t)L + 1, sizeof(size_t), "offload plan");
    const size_t input_bytes =
        (size_t)(plan->micro_batch * plan->seq_len * s->config.hidden_size) * plan->activation_bytes;
    for (int64_t l = 0; l < L; l++) {
        input_tiers[l] = plan->layers[l].layer_input_tier;
        bytes[l] = input_bytes;
    }
    tt_offload_store_init(&s->inputs, backend, L, input_tiers, plan->compute_tier, bytes, plan->offload_ring,
                          plan->offload_streamed, true, &s->host, TT_CLASS_LAYER_INPUT, plan->offload_dir,
                          s->sizes.disk_slot);
    for (int64_t l = 0; l < L; l++) {
        saved_tiers[l] = plan->layers[l].saved_activation_tier;
        bytes[l] = tt_offloaded_block_bytes(&s->sizes, plan, l);
    }
    tt_offload_store_init(&s->saved, backend, L, saved_tiers, plan->compute_tier, bytes, plan->saved_ring,
                          plan->offload_streamed, false, &s->host, TT_CLASS_SAVED_ACTIVATION, plan->offload_dir,
                          s->sizes.saved_disk_slot);
    tt_offload_store_place_homes(&s->inputs, input_tiers, &s->host, TT_CLASS_LAYER_INPUT);
    tt_offload_store_place_homes(&s->saved, saved_tiers, &s->host, TT_CLASS_SAVED_ACTIVATION);
    free(input_tiers);
    free(saved_tiers);
    free(bytes);
    tt_backend_copy_set_delay(backend, plan->copy_delay_us);
    if (tt_offload_store_any(&s->inputs))
        tt_model_state_add_hook(
            s, (tt_unit_hook){.name = "wait for input", .call = tt_offload_store_hook, .ctx = &s->inputs});
    if (tt_offload_store_any(&s->saved))
        tt_model_state_add_hook(
            s, (tt_unit_hook){.name = "wait for kept activations", .call = tt_offload_store_hook, .ctx = &s->saved});
}

void tt_model_state_add_hook(tt_model_state *s, tt_unit_hook hook) {
    TT_CHECK(s->hook_count < TT_MAX_UNIT_HOOKS, "more than %d unit hooks", TT_MAX_UNIT_HOOKS);
    s->hooks[s->hook_count++] = hook;
}

void *tt_model_gradients_at(const tt_model_state *s, int64_t e) {
    const tt_residency_map *map = &s->residency;
    int64_t u = map->units - 1;
    while (u > 0 && (map->unit[u].start > e || map->unit[u].start == map->unit[u].end)) u--;
    const tt_unit_residency *r = &map->unit[u];
    return (unsigned char *)s->gradients + r->gradients_offset + (size_t)(e - r->start) * s->plan.gradient_bytes;
}

void *tt_model_trainable_weights_at(const tt_model_state *s, int64_t e) {
    /* the unit holding e (the last one that starts at or before it: e may be the end of the layout) */
    const tt_residency_map *map = &s->residency;
    int64_t u = map->units - 1;
    while (u > 0 && (map->unit[u].start > e || map->unit[u].start == map->unit[u].end)) u--;
    const tt_unit_residency *r = &map->unit[u];
    TT_CHECK(r->weights_buffer < 0, "trainable element %lld is in the weight-offloaded layers", (long long)e);
    TT_CHECK(r->weights_slot < 0 || e == r->start, "trainable element %lld is in another rank's shard (zero_stage 3)",
             (long long)e);
    return (unsigned char *)s->trainable_weights + r->weights_offset + (size_t)(e - r->start) * s->plan.weight_bytes;
}

static void model_state_build(tt_model_state *s);

void tt_model_state_init_core(tt_model_state *s, tt_model_config *config, tt_plan *plan, tt_param_table *params,
                              const tt_size_table *sizes, const tt_backend *backend, size_t budget_bytes) {
    memset(s, 0, sizeof(*s));
    s->config = *config;
    memset(config, 0, sizeof(*config));
    s->plan = *plan;
    memset(plan, 0, sizeof(*plan));
    s->params = *params;
    memset(params, 0, sizeof(*params));
    s->sizes = *sizes;
    s->backend = backend;

    const tt_tier tier = s->plan.compute_tier;
    size_t capacity = s->sizes.tier_peak[tier];
    if (budget_bytes && capacity > budget_bytes) {
        char need[32], have[32];
        tt_die("the plan needs %s of %s memory but its budget is %s; lower sequence_len or micro_batch_size, "
               "enable gradient_checkpointing, or raise %s_memory_budget (run `tiertrain plan` to see the table)",
               tt_format_bytes(capacity, need, sizeof need), tt_tier_name(tier),
               tt_format_bytes(budget_bytes, have, sizeof have), tt_tier_name(tier));
    }
    tt_arena_init(&s->arena, tier, tt_backend_block_alloc(backend, capacity), capacity,
                  budget_bytes ? budget_bytes : capacity, backend->iface->block_free, backend->ctx);
    model_state_build(s);
}

void tt_model_state_init_measure(tt_model_state *s, const tt_model_config *config, const tt_plan *plan,
                                 const tt_param_table *params, const tt_size_table *sizes,
                                 const tt_backend *measure_backend) {
    memset(s, 0, sizeof(*s));
    s->measuring = true;
    s->config = *config;
    s->plan = *plan;
    s->params = *params;
    s->sizes = *sizes;
    s->backend = measure_backend;
    tt_arena_init_measure(&s->arena, s->plan.compute_tier);
    model_state_build(s);
}

/* The rest of a state once its config, plan, params, sizes, backend and compute-tier arena are set: the persistent
 * tensors, the offload stores and streams, the views. */
/* The persistent tensors of the compute tier, pushed in the order the size table's dry run measures them. */
static void push_persistent_tensors(tt_model_state *s) {
    /* The frozen weights and the trainable ones are one buffer in two classes: the frozen part is a
     * whole number of arena units (tt_param_table_build), so the second push continues the first.
     * With layer_offloading the frozen part lives in pinned host memory instead (init_offload) and
     * the compute tier holds the frozen parameters outside streamed layers and two layer buffers. */
    void *frozen = NULL;
    if (s->plan.stream_frozen_layers) {
        s->frozen_resident = s->sizes.frozen_resident ? tt_arena_push(&s->arena, s->sizes.frozen_resident,
                                                                      TT_CLASS_FROZEN_WEIGHT, "resident frozen weights")
                                                      : NULL;
        for (int i = 0; i < 2; i++)
            s->weight_ring[i] =
                tt_arena_push(&s->arena, s->sizes.weight_ring, TT_CLASS_FROZEN_WEIGHT, "streamed layer");
    } else if (s->sizes.frozen_weights) {
        frozen = tt_arena_push(&s->arena, s->sizes.frozen_weights, TT_CLASS_FROZEN_WEIGHT, "frozen weights");
    }
    s->trainable_weights =
        tt_arena_push(&s->arena, s->sizes.weights, tt_trainable_weight_class(&s->params), "trainable weights");
    TT_CHECK(!frozen || (unsigned char *)frozen + s->sizes.frozen_weights == s->trainable_weights,
             "the trainable weights continue the frozen ones");
    s->weights = frozen ? frozen : s->trainable_weights;
    s->gradients = tt_arena_push(&s->arena, s->sizes.gradients, TT_CLASS_GRADIENT, "gradients");
    s->master = s->sizes.master ? tt_arena_push(&s->arena, s->sizes.master, TT_CLASS_MASTER, "master weights") : NULL;
    const size_t moment_bytes = s->sizes.optimizer_state / 2;
    s->adam_m = tt_arena_push(&s->arena, moment_bytes, TT_CLASS_OPTIMIZER_STATE, "AdamW first moment");
    s->adam_v = tt_arena_push(&s->arena, moment_bytes, TT_CLASS_OPTIMIZER_STATE, "AdamW second moment");
    for (int k = 0; k < s->sizes.rope_tables; k++) {
        s->rope_cos[k] = tt_arena_push(&s->arena, s->sizes.rope_table, TT_CLASS_WORKSPACE, "RoPE cos table");
        s->rope_sin[k] = tt_arena_push(&s->arena, s->sizes.rope_table, TT_CLASS_WORKSPACE, "RoPE sin table");
    }
    s->batch_inputs = tt_arena_push(&s->arena, s->sizes.batch_ids, TT_CLASS_WORKSPACE, "batch inputs");
    s->batch_targets = tt_arena_push(&s->arena, s->sizes.batch_ids, TT_CLASS_WORKSPACE, "batch targets");
    s->batch_positions = s->sizes.batch_positions
                             ? tt_arena_push(&s->arena, s->sizes.batch_positions, TT_CLASS_WORKSPACE, "batch positions")
                             : NULL;
    s->op_scratch = tt_arena_push(&s->arena, s->sizes.op_scratch, TT_CLASS_WORKSPACE, "op scratch");
    s->lora_dropout_buffer = s->sizes.lora_dropout_buffer ? tt_arena_push(&s->arena, s->sizes.lora_dropout_buffer,
                                                                          TT_CLASS_WORKSPACE, "LoRA dropout buffer")
                                                          : NULL;
    s->dequant_buffer = s->sizes.dequant_buffer ? tt_arena_push(&s->arena, s->sizes.dequant_buffer, TT_CLASS_WORKSPACE,
                                                                "dequantized 4-bit weight")
                                                : NULL;
    s->norm_partials =
        tt_arena_push(&s->arena, s->sizes.norm_partials, TT_CLASS_WORKSPACE, "gradient norm partial sums");
    s->data_parallel_buckets =
        s->sizes.data_parallel_buckets
            ? tt_arena_push(&s->arena, s->sizes.data_parallel_buckets, TT_CLASS_WORKSPACE, "data-parallel buckets")
            : NULL;
}

/* Weights, gradients, master copy, moments and the norm's partial sums start at zero (weights are loaded after). */
static void zero_persistent_tensors(tt_model_state *s) {
    const tt_backend *backend = s->backend;
    if (s->plan.stream_frozen_layers) {
        tt_backend_zero(backend, s->frozen_resident, s->sizes.frozen_resident);
        tt_backend_zero(backend, s->weight_ring[0], 2 * s->sizes.weight_ring);
        tt_backend_zero(backend, s->trainable_weights, s->sizes.weights);
    } else {
        tt_backend_zero(backend, s->weights, s->sizes.frozen_weights + s->sizes.weights);
    }
    tt_backend_zero(backend, s->gradients, s->sizes.gradients);
    if (s->master) tt_backend_zero(backend, s->master, s->sizes.master);
    tt_backend_zero(backend, s->norm_partials, s->sizes.norm_partials);
    tt_backend_zero(backend, s->adam_m, s->sizes.optimizer_state / 2);
    tt_backend_zero(backend, s->adam_v, s->sizes.optimizer_state / 2);
}

/* RoPE's cos and sin tables: uploaded once, or with packed documents kept on the host, whose rows each micro-batch
 * gathers at its tokens' positions. */
static void init_rope_tables(tt_model_state *s) {
    if (s->measuring) return;
    /* [whole sequence, rotary_dim/2] on the host; the compute tier gets this rank's rows ([T, rotary_dim/2]: all of
     * them, or with sequence parallel its share's), or with packed documents the host keeps them and each micro-batch
     * gathers the rows of its tokens' positions (tt_model_set_positions) */
    const int64_t whole = tt_plan_sequence_len(&s->plan), half = tt_model_rotary_dim(&s->config) / 2;
    const size_t whole_bytes = sizeof(float) * (size_t)(whole * half);
    for (int k = 0; k < s->sizes.rope_tables; k++) {
        float *host_cos = tt_xmalloc(whole_bytes, "RoPE table");
        float *host_sin = tt_xmalloc(whole_bytes, "RoPE table");
        tt_rope_tables(&s->config, k, tt_rope_long_factors(&s->config, whole), whole, host_cos, host_sin);
        if (s->plan.packed_documents) {
            s->host_rope_cos[k] = host_cos;
            s->host_rope_sin[k] = host_sin;
            continue;
        }
        const int64_t first = s->plan.sequence_parallel_rank * s->plan.seq_len * half;
        const size_t table_bytes = sizeof(float) * (size_t)(s->plan.seq_len * half);
        tt_backend_upload(s->backend, s->rope_cos[k], host_cos + first, table_bytes);
        tt_backend_upload(s->backend, s->rope_sin[k], host_sin + first, table_bytes);
        free(host_cos);
        free(host_sin);
    }
    if (!s->plan.packed_documents) return;
    s->host_batch_rope = tt_xmalloc(2 * s->sizes.rope_table, "RoPE rows of a micro-batch");
    /* LongRoPE: a micro-batch of short documents takes the short factors, as transformers does */
    if (tt_rope_long_factors(&s->config, whole)) {
        s->host_rope_long_cos = s->host_rope_cos[TT_ROPE_TABLE_GLOBAL];
        s->host_rope_long_sin = s->host_rope_sin[TT_ROPE_TABLE_GLOBAL];
        s->host_rope_cos[TT_ROPE_TABLE_GLOBAL] = tt_xmalloc(whole_bytes, "RoPE table");
        s->host_rope_sin[TT_ROPE_TABLE_GLOBAL] = tt_xmalloc(whole_bytes, "RoPE table");
        tt_rope_tables(&s->config, TT_ROPE_TABLE_GLOBAL, false, whole, s->host_rope_cos[TT_ROPE_TABLE_GLOBAL],
                       s->host_rope_sin[TT_ROPE_TABLE_GLOBAL]);
    }
}

/* The optimizer units, the offload stores, the views of every layer's weights and gradients (the gradient ring's
 * units where it places them), and the weight stream with layer_offloading. */
static void bind_layers(tt_model_state *s) {
    const tt_backend *backend = s->backend;
    const int64_t L = s->config.num_layers;
    s->unit_start = tt_xcalloc((size_t)L + 3, sizeof(int64_t), "optimizer units");
    tt_optimizer_unit_starts(&s->params, L, s->unit_start);
    s->host_norm_partials = tt_xcalloc((size_t)L + 2, sizeof(double), "gradient norm partial sums");
    init_offload(s);
    s->w_layers = tt_xcalloc((size_t)L, sizeof(tt_layer_view), "layer views");
    s->g_layers = tt_xcalloc((size_t)L, sizeof(tt_layer_view), "layer views");
    s->layer_inputs = tt_xcalloc((size_t)L + 1, sizeof(void *), "layer input pointers");
    s->kept_saved = tt_xcalloc((size_t)L, sizeof(*s->kept_saved), "saved activation pointers");
    if (s->config.num_experts > 0 && s->config.output_router_logits) { /* the auxiliary loss's host arrays */
        s->moe_expert_tokens = tt_xcalloc((size_t)(s->config.num_experts_per_tok * s->config.num_experts),
                                          sizeof(double), "the routers' statistics");
        s->moe_expert_probs = tt_xcalloc((size_t)s->config.num_experts, sizeof(double), "the routers' statistics");
        s->moe_prob_gradient = tt_xcalloc((size_t)s->config.num_experts, sizeof(float), "the auxiliary gradient");
    }
    if (s->plan.stream_frozen_layers) {
        int64_t streamed = 0;
        for (int64_t l = 0; l < L; l++) streamed += tt_weight_stream_layer_streamed(&s->params, l);
        if (!streamed)
            tt_die("layer_offloading streams frozen decoder layers, but every layer trains; use adapter: lora or "
                   "frozen_layers, or remove layer_offloading");
        s->frozen_host = s->sizes.streamed_weights_host ? tt_arena_push(&s->host, s->sizes.streamed_weights_host,
                                                                        TT_CLASS_FROZEN_WEIGHT, "frozen weights")
                                                        : NULL;
        if (!s->measuring) memset(s->frozen_host, 0, s->sizes.streamed_weights_host);
        tt_model_view_bind_trainable(&s->w, s->w_layers, &s->params, &s->config, s->trainable_weights,
                                     s->plan.weight_bytes);
        tt_weight_stream_init(&s->stream, backend, &s->params, L, s->plan.weight_bytes, s->frozen_host,
                              s->weight_ring[0], s->weight_ring[1], s->frozen_resident, &s->w);
        tt_model_state_add_hook(s, (tt_unit_hook){.call = tt_weight_stream_hook, .ctx = &s->stream});
    } else {
        tt_model_view_bind(&s->w, s->w_layers, &s->params, &s->config, s->weights, s->plan.weight_bytes);
    }
    /* zero_stage 3: the trainable weights in the sharded layout (another rank's layers in ring slots) */
    if (tt_plan_shards_weights(&s->plan))
        for (int64_t u = 0; u <= L + 1; u++)
            tt_model_view_bind_range(&s->w, &s->params, s->unit_start[u], s->unit_start[u + 1],
                                     (unsigned char *)s->trainable_weights + s->residency.unit[u].weights_offset,
                                     s->plan.weight_bytes);
    tt_model_view_bind_trainable(&s->g, s->g_layers, &s->params, &s->config, s->gradients, s->plan.gradient_bytes);
    /* units placed elsewhere than the flat layout (a gradient ring; zero_stage 2's layout) */
    for (int64_t u = 0; u <= L + 1; u++)
        if (s->residency.unit[u].gradients_offset != (size_t)s->unit_start[u] * s->plan.gradient_bytes)
            tt_model_view_bind_range(&s->g, &s->params, s->unit_start[u], s->unit_start[u + 1],
                                     tt_model_unit_gradients(s, u), s->plan.gradient_bytes);
}

/* The embedding's multiplier: 1, the model's, or the model's rounded to the compute precision first (Gemma's
 * normalizer, a tensor of the activations' dtype in transformers). */
static float embedding_scale_of(const tt_model_config *c, tt_dtype compute) {
    if (!c->embedding_scale) return 1.0f;
    const float scale = (float)c->embedding_scale;
    return c->embedding_scale_in_compute_dtype && compute == TT_BF16 ? tt_bf16_to_f32(tt_f32_to_bf16(scale)) : scale;
}

static void model_state_build(tt_model_state *s) {
    s->arch = tt_arch_of(&s->config);
    s->slots = s->arch->slots;
    s->block = tt_block_for(s->arch);
    s->embedding_scale = embedding_scale_of(&s->config, s->plan.precision.activation);
    tt_residency_build(&s->residency, &s->params, &s->plan, &s->sizes);
    push_persistent_tensors(s);
    /* the explicit prepare step: the backend builds its plans for this run before the first op */
    const tt_backend_settings settings = tt_plan_backend_settings(&s->plan);
    const tt_scratch_shape scratch_shape = tt_size_table_scratch_shape(&s->config, &s->params, &s->plan);
    tt_backend_prepare(s->backend, &settings, &scratch_shape, s->op_scratch, s->sizes.op_scratch);

    zero_persistent_tensors(s);
    init_rope_tables(s);
    bind_layers(s);
    for (int sliding = 0; sliding < 2; sliding++) {
        s->attention[sliding] = tt_plan_attention_shape(&s->plan, &s->config, sliding);
        s->attention[sliding].positions = s->batch_positions;
    }
}

void tt_model_state_release(tt_model_state *s) {
    TT_CHECK(!s->optimizer_offload && !s->adamw_pieces, "the optimizer's parts are detached first");
    tt_backend_release(s->backend);
    tt_offload_store_free(&s->inputs);
    tt_offload_store_free(&s->saved);
    tt_weight_stream_free(&s->stream);
    tt_arena_destroy(&s->host);
    tt_arena_destroy(&s->arena);
    free(s->w_layers);
    free(s->g_layers);
    free(s->layer_inputs);
    free(s->kept_saved);
    free(s->moe_expert_tokens);
    free(s->moe_expert_probs);
    free(s->moe_prob_gradient);
    free(s->trace_pending);
    free(s->unit_start);
    free(s->host_norm_partials);
    for (int k = 0; k < TT_ROPE_TABLES; k++) {
        free(s->host_rope_cos[k]);
        free(s->host_rope_sin[k]);
    }
    free(s->host_rope_long_cos);
    free(s->host_rope_long_sin);
    free(s->host_batch_rope);
    tt_residency_free(&s->residency);
    if (!s->measuring) { /* a measuring state borrows them */
        tt_param_table_free(&s->params);
        tt_plan_free(&s->plan);
        tt_model_config_free(&s->config);
    }
    memset(s, 0, sizeof(*s));
}

void *tt_model_unit_gradients(const tt_model_state *s, int64_t u) {
    return (unsigned char *)s->gradients + s->residency.unit[u].gradients_offset;
}

uint64_t tt_lora_dropout_seed(uint64_t run_seed, int64_t step, int64_t micro_step) {
    return tt_dropout_seed_mix(tt_dropout_seed_mix(run_seed, (uint64_t)step), (uint64_t)micro_step);
}

/* The layer inputs above layer l, x[l+1..L], are dead from layer l's recompute on (the head and the layers
 * above are done with them; the recompute writes no output). Where they are one run of compute-tier buffers,
 * layer l's attention backward may take them as more workspace. That holds for every l + 1 from the start of the
 * longest such run ending at x[L] (an offloaded input passes through the staging ring and ends it): its index,
 * found once per backward (the backward asks for every layer: per layer, the scan was quadratic in the depth). */
static int64_t first_dead_run_input(const tt_model_state *s, void *const *x) {
    const int64_t L = s->config.num_layers;
    const size_t stride = tt_align_up(s->sizes.layer_input);
    if (tt_offload_store_in_ring(&s->inputs, L)) return L + 1;
    int64_t first = L;
    while (first > 0 && !tt_offload_store_in_ring(&s->inputs, first - 1) &&
           (const char *)x[first] == (const char *)x[first - 1] + stride)
        first--;
    return first;
}

/* The dead inputs above layer l as workspace, or NULL (*bytes 0) where they are not one run (first_dead_run_input). */
static void *dead_inputs_above(const tt_model_state *s, void *const *x, int64_t l, int64_t first_run, size_t *bytes) {
    const int64_t L = s->config.num_layers;
    *bytes = 0;
    if (l + 1 > L || l + 1 < first_run) return NULL;
    *bytes = (size_t)(L - l) * tt_align_up(s->sizes.layer_input);
    return x[l + 1];
}

/* The trace: spans and counters are marks on the backend's timeline (device events on the GPU),
 * kept until the end of the micro-step and written once the marks have happened. */
typedef struct trace_pending {
    const char *track; /* NULL: a bytes-in-use counter */
    char name[48];
    uint64_t start, end; /* timeline marks (a counter uses start) */
    double bytes[2];     /* compute tier, host memory */
} trace_pending;

#define TRACE_PENDING_PER_LAYER 8

static uint64_t trace_mark(tt_model_state *s) { return s->trace ? tt_backend_timestamp(s->backend) : 0; }

void tt_model_set_trace(tt_model_state *s, struct tt_trace *trace) {
    s->trace = trace;
    if (trace && !s->trace_pending) /* allocated here, not inside a step */
        s->trace_pending = tt_xcalloc((size_t)(s->config.num_layers + 2) * TRACE_PENDING_PER_LAYER,
                                      sizeof(trace_pending), "trace events");
}

static trace_pending *trace_push(tt_model_state *s) {
    TT_CHECK(s->trace_count < (s->config.num_layers + 2) * TRACE_PENDING_PER_LAYER, "too many trace events");
    return &s->trace_pending[s->trace_count++];
}

/* A span named "<what> <layer>" (no layer when l < 0) on a track, from mark start to now. */
static void trace_layer(tt_model_state *s, const char *track, const char *what, int64_t l, uint64_t start) {
    if (!s->trace) return;
    trace_pending *p = trace_push(s);
    p->track = track;
    if (l >= 0) snprintf(p->name, sizeof p->name, "%s %lld", what, (long long)l);
    else snprintf(p->name, sizeof p->name, "%s", what);
    p->start = start;
    p->end = trace_mark(s);
}

static void trace_memory(tt_model_state *s) {
    if (!s->trace) return;
    trace_pending *p = trace_push(s);
    p->track = NULL;
    p->start = trace_mark(s);
    p->bytes[0] = (double)s->arena.used;
    p->bytes[1] = (double)s->host.used;
}

/* Writes the micro-step's events, and the copies of the offloaded inputs on their streams. */
static void trace_flush(tt_model_state *s, bool copies) {
    if (!s->trace) return;
    const tt_backend *b = s->backend;
    tt_backend_synchronize(b);
    const char *series[2] = {tt_tier_name(s->arena.tier), "host memory"};
    for (int64_t i = 0; i < s->trace_count; i++) {
        const trace_pending *p = &s->trace_pending[i];
        if (p->track)
            tt_trace_span(s->trace, p->track, p->name, tt_backend_timestamp_seconds(b, p->start),
                          tt_backend_timestamp_seconds(b, p->end));
        else tt_trace_counter(s->trace, "bytes in use", tt_backend_timestamp_seconds(b, p->start), series, p->bytes, 2);
    }
    s->trace_count = 0;
    for (int64_t l = 0; copies && l < s->config.num_layers; l++)
        for (int which = 0; which < 2; which++) {
            const tt_offload_store *store = which ? &s->saved : &s->inputs;
            if (!tt_offload_store_offloaded(store, l)) continue;
            const char *what = which ? "kept activations" : "input";
            char name[64];
            double start, end;
            snprintf(name, sizeof name, "offload %s %lld", what, (long long)l);
            if (tt_backend_copy_span(b, store->copied_out[l], &start, &end))
                tt_trace_span(s->trace, "copies to host", name, start, end);
            snprintf(name, sizeof name, "restore %s %lld", what, (long long)l);
            if (tt_backend_copy_span(b, store->copied_back[l], &start, &end))
                tt_trace_span(s->trace, "copies to the compute tier", name, start, end);
        }
}

/* Every hook at one point of unit u (unit_hooks.h): in the order added, the AFTER points in reverse. A named hook's
 * BEFORE_BACKWARD call (a wait for copies) shows in the trace as "<name> <layer>". */
void tt_step_run_hooks(tt_model_state *s, tt_hook_point point, int64_t u, bool train) {
    const bool reverse = point == TT_HOOK_AFTER_FORWARD || point == TT_HOOK_AFTER_BACKWARD;
    for (int k = 0; k < s->hook_count; k++) {
        const tt_unit_hook *h = &s->hooks[reverse ? s->hook_count - 1 - k : k];
        const uint64_t start = point == TT_HOOK_BEFORE_BACKWARD && h->name ? trace_mark(s) : 0;
        h->call(h->ctx, point, u, train);
        if (point == TT_HOOK_BEFORE_BACKWARD && h->name) trace_layer(s, "compute", h->name, u - 1, start);
    }
}

/* Forward through the decoder layers, leaving x[0..L] filled. In training, kept[l] receives
 * layer l's kept slots (those outside the plan's recompute set), which stay on the arena; the
 * others are pushed for the layer and popped after it. In evaluation nothing is kept. */
static void forward_layers(tt_model_state *s, void **x, saved_tensors *kept, bool train) {
    const int64_t N = s->plan.micro_batch * s->plan.seq_len;
    tt_step_run_hooks(s, TT_HOOK_BEFORE_FORWARD, 0, train);
    tt_backend_embedding_forward(s->backend, x[0], s->batch_inputs, s->w.embed, N, s->config.hidden_size,
                                 s->embedding_scale);
    if (train && s->plan.neftune_noise_alpha > 0) { /* NEFTune: the layers' input is the noisy embedding */
        const double dims = (double)tt_plan_sequence_len(&s->plan) * (double)s->config.hidden_size;
        tt_backend_add_uniform_noise(s->backend, x[0], N * s->config.hidden_size,
                                     (float)(s->plan.neftune_noise_alpha / sqrt(dims)),
                                     tt_dropout_seed_mix(s->lora_dropout_seed, NEFTUNE_SEED_COUNTER));
    }
    tt_step_run_hooks(s, TT_HOOK_AFTER_FORWARD, 0, train);
    for (int64_t l = 0; l < s->config.num_layers; l++) {
        const tt_slot_set recompute = train ? s->plan.layers[l].recompute : TT_ALL_SLOTS;
        saved_tensors kept_here, temporary;
        place_kept_slots(s, l, &kept_here, TT_ALL_SLOTS & ~recompute);
        tt_step_push_slots(s, &temporary, recompute & ~ring_slots(s, l));
        const saved_tensors all = merge_slots(&kept_here, &temporary);
        tt_step_run_hooks(s, TT_HOOK_BEFORE_FORWARD, l + 1, train);
        const uint64_t start = trace_mark(s);
        s->block->forward(s, l, x[l], all.slot, x[l + 1], TT_ALL_SLOTS);
        trace_memory(s);
        trace_layer(s, "compute", train ? "forward" : "eval forward", l, start);
        tt_arena_pop_to(&s->arena, temporary.mark);
        if (train) kept[l] = kept_here;
        tt_step_run_hooks(s, TT_HOOK_AFTER_FORWARD, l + 1, train); /* its kept activations and its output may leave */
    }
}

/* The layer inputs of a micro-step: a compute-tier buffer each, except for offloaded ones, which
 * rotate through the input store's ring of staging buffers (consecutive offloaded inputs never
 * share one) and live in host memory or on disk between their forward and backward. */
static void **push_layer_inputs(tt_model_state *s) {
    void **x = s->layer_inputs;
    const int64_t L = s->config.num_layers;
    if (s->sizes.input_staging)
        for (int64_t i = 0; i < s->plan.offload_ring; i++)
            s->inputs.ring[i] =
                tt_arena_push(&s->arena, s->sizes.layer_input, TT_CLASS_LAYER_INPUT, "layer input staging");
    if (s->sizes.saved_staging)
        for (int64_t i = 0; i < s->plan.saved_ring; i++)
            s->saved.ring[i] = tt_arena_push(&s->arena, s->sizes.saved_staging / (size_t)s->plan.saved_ring,
                                             TT_CLASS_SAVED_ACTIVATION, "saved activation staging");
    for (int64_t l = 0; l <= L; l++)
        x[l] = tt_offload_store_in_ring(&s->inputs, l)
                   ? tt_offload_store_buffer(&s->inputs, l)
                   : tt_arena_push(&s->arena, s->sizes.layer_input, TT_CLASS_LAYER_INPUT, "layer input");
    return x;
}

/* output_router_logits: the routers' statistics of a training forward, from zero */
static void begin_router_statistics(tt_model_state *s) {
    if (!s->moe_expert_tokens) return;
    const tt_model_config *c = &s->config;
    memset(s->moe_expert_tokens, 0, sizeof(double) * (size_t)(c->num_experts_per_tok * c->num_experts));
    memset(s->moe_expert_probs, 0, sizeof(double) * (size_t)c->num_experts);
    s->moe_collect = true;
}

/* The auxiliary loss of the forward's routing, as transformers' load_balancing_loss_func computes it without an
 * attention mask (every position of every layer together, M of them, padding included: a Trainer that passes one
 * leaves the padding out): E x sum over choices j and experts e of (tokens whose j-th choice is e / M) x (the mean
 * probability of e); and its gradient with respect to each token's probabilities, the same for all:
 * router_aux_loss_coef x E x (tokens choosing e, all choices) / M^2. */
static void finish_router_statistics(tt_model_state *s) {
    if (!s->moe_expert_tokens) return;
    s->moe_collect = false;
    const tt_model_config *c = &s->config;
    const int64_t E = c->num_experts, k = c->num_experts_per_tok;
    const double M = (double)(c->num_layers * s->plan.micro_batch * s->plan.seq_len);
    double aux = 0;
    for (int64_t e = 0; e < E; e++) {
        double chosen = 0; /* tokens choosing e, any choice */
        for (int64_t j = 0; j < k; j++) chosen += s->moe_expert_tokens[j * E + e];
        aux += chosen * s->moe_expert_probs[e];
        s->moe_prob_gradient[e] = (float)(c->router_aux_loss_coef * (double)E * chosen / (M * M));
    }
    s->moe_aux_loss = (double)E * aux / (M * M);
}

double tt_step_forward_backward(tt_model_state *s, double loss_scale, int64_t *count) {
    return tt_step_forward_backward_continuing(s, loss_scale, 0.0, count);
}

double tt_step_forward_backward_continuing(tt_model_state *s, double loss_scale, double loss_so_far, int64_t *count) {
    const tt_backend *b = s->backend;
    const tt_model_config *c = &s->config;
    const int64_t L = c->num_layers, N = s->plan.micro_batch * s->plan.seq_len, D = c->hidden_size;
    TT_CHECK(!s->plan.packed_documents || s->measuring || s->batch_has_positions,
             "packed documents: the micro-batch's positions are set (tt_model_set_positions) before its step");
    const tt_arena_mark step_mark = tt_arena_get_mark(&s->arena);
    s->lora_dropout_on = true; /* training: adapters drop their inputs (lora_dropout) */

    void **x = push_layer_inputs(s);
    void *d_residual = tt_arena_push(&s->arena, s->sizes.d_residual, TT_CLASS_WORKSPACE, "d residual stream");
    saved_tensors *kept = s->kept_saved;
    begin_router_statistics(s);
    forward_layers(s, x, kept, true);
    finish_router_statistics(s);

    /* Head: final norm, LM head and cross-entropy, and their backward, in one go: the loss is
     * the last op, so its gradient is known as soon as it is computed (the hooks' BEFORE_FORWARD of the head
     * starts the top offloaded blocks' way back). */
    const uint64_t head_start = trace_mark(s);
    const tt_arena_mark head_mark = tt_arena_get_mark(&s->arena);
    float *head_rstd = tt_arena_push(&s->arena, s->sizes.head_rstd, TT_CLASS_SAVED_ACTIVATION, "final norm rstd");
    void *head_normed = tt_arena_push(&s->arena, s->sizes.head_normed, TT_CLASS_SAVED_ACTIVATION, "final norm output");
    void *logits = tt_arena_push(&s->arena, s->sizes.logits_chunk, TT_CLASS_LOGITS, "logits chunk");
    void *d_head = tt_arena_push(&s->arena, s->sizes.d_head, TT_CLASS_WORKSPACE, "d final norm output");
    tt_step_run_hooks(s, TT_HOOK_BEFORE_FORWARD, L + 1, true);
    tt_step_run_hooks(s, TT_HOOK_BEFORE_GRADIENTS, L + 1, true);
    tt_backend_rmsnorm_forward(b, head_normed, head_rstd, x[L], s->w.final_norm, NULL, N, D, c->rms_norm_eps,
                               s->arch->norm_weight_offset);
    double loss_sum = tt_backend_lm_head_loss(b, d_head, s->g.lm_head, head_normed, s->w.lm_head, s->batch_targets, N,
                                              D, c->vocab_size, s->plan.loss_chunk, logits, tt_model_logit_scale(c),
                                              c->final_logit_softcap, loss_scale, loss_so_far, count);
    tt_backend_zero(b, d_residual, (size_t)(N * D) * s->plan.activation_bytes);
    tt_backend_rmsnorm_backward(b, d_residual, s->g.final_norm, d_head, x[L], s->w.final_norm, head_rstd, N, D,
                                s->arch->norm_weight_offset);
    tt_step_run_hooks(s, TT_HOOK_AFTER_BACKWARD, L + 1, true);
    trace_memory(s);
    trace_layer(s, "compute", "LM head and loss", -1, head_start);
    tt_arena_pop_to(&s->arena, head_mark);

    const int64_t first_run = first_dead_run_input(s, x);
    for (int64_t l = L - 1; l >= 0; l--) {
        /* What the layer reads comes back first (an offloaded checkpoint and kept activations, its weights;
         * the next ones below start their way); the layer's kept slots are on top of the stack; its
         * recomputed slots go above them. */
        tt_step_run_hooks(s, TT_HOOK_BEFORE_BACKWARD, l + 1, true);
        const tt_slot_set recompute = s->plan.layers[l].recompute;
        saved_tensors recomputed;
        tt_step_push_slots(s, &recomputed, recompute);
        const saved_tensors all = merge_slots(&kept[l], &recomputed);
        const uint64_t start = trace_mark(s);
        if (recomputed.bytes) {
            s->block->forward(s, l, x[l], all.slot, NULL, recompute);
            trace_layer(s, "compute", "recompute", l, start);
        }
        const uint64_t backward_start = trace_mark(s);
        trace_memory(s);
        /* The top region's MLP slots are the last ones pushed: once the MLP backward is done they
         * go, and the attention backward's scratch takes their place. */
        tt_step_run_hooks(s, TT_HOOK_BEFORE_GRADIENTS, l + 1, true);
        void *mlp_scratch = s->sizes.mlp_backward_scratch ? tt_arena_push(&s->arena, s->sizes.mlp_backward_scratch,
                                                                          TT_CLASS_WORKSPACE, "d down_proj output")
                                                          : NULL;
        s->block->backward_mlp(s, l, all.slot, mlp_scratch, d_residual);
        tt_arena_pop_to(&s->arena, mlp_top_mark(&kept[l], &recomputed));
        backward_scratch scratch;
        push_backward(s, &scratch);
        if (s->arena.used > s->attention_phase_used) s->attention_phase_used = s->arena.used;
        size_t spare_bytes;
        void *spare = dead_inputs_above(s, x, l, first_run, &spare_bytes);
        s->block->backward_attention(s, l, x[l], all.slot, scratch.slot, d_residual, spare, spare_bytes);
        trace_memory(s);
        trace_layer(s, "compute", "backward", l, backward_start);
        tt_arena_pop_to(&s->arena, kept[l].mark);
        tt_step_run_hooks(s, TT_HOOK_AFTER_BACKWARD, l + 1, true);
    }
    tt_step_run_hooks(s, TT_HOOK_BEFORE_BACKWARD, 0, true);
    tt_step_run_hooks(s, TT_HOOK_BEFORE_GRADIENTS, 0, true);
    if (s->g.embed) tt_backend_embedding_backward(b, s->g.embed, s->batch_inputs, d_residual, N, D, s->embedding_scale);
    tt_step_run_hooks(s, TT_HOOK_AFTER_BACKWARD, 0, true);

    trace_flush(s, true);
    tt_arena_pop_to(&s->arena, step_mark);
    return loss_sum;
}

double tt_step_forward_loss(tt_model_state *s, int64_t *count) {
    const tt_backend *b = s->backend;
    const tt_model_config *c = &s->config;
    const int64_t L = c->num_layers, N = s->plan.micro_batch * s->plan.seq_len, D = c->hidden_size;
    TT_CHECK(!s->plan.packed_documents || s->measuring || s->batch_has_positions,
             "packed documents: the micro-batch's positions are set (tt_model_set_positions) before its step");
    const tt_arena_mark step_mark = tt_arena_get_mark(&s->arena);
    s->lora_dropout_on = false; /* evaluation: no dropout, as PEFT in eval mode */
    void **x = push_layer_inputs(s);
    forward_layers(s, x, NULL, false);
    float *head_rstd = tt_arena_push(&s->arena, s->sizes.head_rstd, TT_CLASS_SAVED_ACTIVATION, "final norm rstd");
    void *head_normed = tt_arena_push(&s->arena, s->sizes.head_normed, TT_CLASS_SAVED_ACTIVATION, "final norm output");
    void *logits = tt_arena_push(&s->arena, s->sizes.logits_chunk, TT_CLASS_LOGITS, "logits chunk");
    tt_step_run_hooks(s, TT_HOOK_BEFORE_FORWARD, L + 1, false);
    tt_backend_rmsnorm_forward(b, head_normed, head_rstd, x[L], s->w.final_norm, NULL, N, D, c->rms_norm_eps,
                               s->arch->norm_weight_offset);
    double loss_sum = tt_backend_lm_head_loss(b, NULL, NULL, head_normed, s->w.lm_head, s->batch_targets, N, D,
                                              c->vocab_size, s->plan.loss_chunk, logits, tt_model_logit_scale(c),
                                              c->final_logit_softcap, 0.0, 0.0, count);
    trace_flush(s, false);
    tt_arena_pop_to(&s->arena, step_mark);
    return loss_sum;
}
