/* The step program under every plan the CPU backend offers: the arena's measured peaks
 * equal the size table's estimate exactly (per class and per tier), and loss and every
 * gradient are bit-identical whether saved activations are kept or recomputed; the same with
 * LoRA adapters (with and without dropout) on a frozen base, the same on a 4-bit base (QLoRA: every frozen linear
 * weight dequantized before its GEMM, layer_offloading streaming the 4-bit bytes), with the MLP tiled (tiled_mlp:
 * 3 shards of the 14 rows, every plan against the tiled run that keeps everything, which has the untiled run's
 * bits: the CPU's weight gradients go on token after token, shards or not), and with packed documents
 * (sample_packing: two documents per sequence) in some of those variants. */
#include <string.h>

#include "core/rng.h"
#include "memory/disk_store.h"
#include "memory/plan.h"
#include "memory/spill.h"
#include "model/weights.h"
#include "ops/backend.h"
#include "test_backend.h"
#include "size_oracle.h"
#include "test_util.h"
#include "tiny_model.h"
#include "train/measure.h"
#include "train/model_setup.h"
#include "train/step.h"

/* The family of the runs below: llama, qwen3, or one of the others' tiny models (tiny_model.h). */
static const char *family = "llama";

typedef struct run_result {
    size_t host_peak;      /* the compute arena's measured peak */
    size_t pinned_peak;    /* the pinned (host) arena's measured peak */
    size_t layer_saved;    /* one layer's saved activations (the size table's) */
    tt_spill_result spill; /* what tt_plan_spill moved (spill runs only) */
    double loss;
    int64_t count;
    float *gradients;
    size_t gradient_bytes;
} run_result;

/* policies[l]: 'k' keep everything, 'r' recompute everything, 's' keep the attention output
 * (selective), 'c' recompute the cheap ops only; upper case: the same with the layer input
 * offloaded to the pinned tier between forward and backward */
/* What trains in the runs below: everything, or (lora) rank-3 adapters on q, v, o and down_proj
 * with the dropout of lora_dropout. */
static bool lora;
static double lora_dropout;
static bool stream_frozen; /* layer_offloading (LoRA runs only): frozen layers streamed from the pinned tier */
static bool quantized;     /* QLoRA (LoRA runs only): the frozen linear weights in 4 bits (NF4, double quantization) */
static int64_t mlp_shards; /* tiled_mlp: the MLP over this many row shards (1: untiled) */
static size_t pinned_spill_budget; /* spill runs: the pinned tier's budget (0: unlimited) */
/* sample_packing: the micro-batch holds several documents per sequence (positions below), each attending only to
 * itself; every recompute must see the same document boundaries and RoPE rows */
static bool packed;
static const int32_t packed_positions[14] = {0, 1, 2, 0, 1, 2, 3, 0, 1, 0, 1, 2, 3, 4};

static bool plan_streams(const tt_model_state *s) { return s->plan.stream_frozen_layers; }

static tt_trainable_spec trainable_spec(void) {
    tt_trainable_spec spec = {0};
    if (lora) {
        spec.lora_rank = 3;
        spec.lora_alpha = 6;
        spec.lora_dropout = lora_dropout;
        spec.lora_targets = (1u << TT_LORA_Q) | (1u << TT_LORA_V) | (1u << TT_LORA_O) | (1u << TT_LORA_DOWN);
        if (strcmp(family, "qwen3_moe") == 0) /* the experts take no adapters */
            spec.lora_targets = (1u << TT_LORA_Q) | (1u << TT_LORA_V) | (1u << TT_LORA_O);
        if (strcmp(family, "phi3") == 0) /* its fused layers */
            spec.lora_targets = (1u << TT_LORA_QKV) | (1u << TT_LORA_O) | (1u << TT_LORA_GATE_UP);
        if (quantized) {
            spec.quantize_base = true;
            spec.quant_format = (tt_quant4_format){.type = TT_QUANT4_NF4, .double_quant = true};
            spec.quant_storage_elem = 4;
        }
    }
    return spec;
}

/* offload_kept: 0 kept slots stay; 1 every layer's kept slots live in the pinned tier through one
 * staging buffer; 2 the same through two, slots under 1000 bytes staying on the compute tier */
static run_result run_plan_spilled(bool qwen3, const char *policies, int64_t loss_chunk, tt_tier offload_tier,
                                   size_t spill_budget, int64_t ring, bool streamed, int offload_kept) {
    tt_model_config config = tt_test_tiny_family(qwen3 ? "qwen3" : family);
    tt_plan plan;
    memset(&plan, 0, sizeof plan);
    plan.num_layers = config.num_layers;
    plan.layers = calloc((size_t)config.num_layers, sizeof(tt_layer_plan));
    for (int64_t l = 0; l < config.num_layers; l++) {
        const char p = (char)(policies[l] | 0x20); /* lower case */
        plan.layers[l].recompute = p == 'k'   ? TT_RECOMPUTE_NOTHING
                                   : p == 'r' ? TT_RECOMPUTE_EVERYTHING
                                   : p == 's' ? TT_RECOMPUTE_ALL_BUT_ATTENTION
                                              : tt_recompute_cheap_ops(&config);
        plan.layers[l].saved_activation_tier = offload_kept ? TT_TIER_PINNED : TT_TIER_HOST;
        plan.layers[l].offloaded = offload_kept ? TT_ALL_SLOTS & ~plan.layers[l].recompute : 0;
        plan.layers[l].layer_input_tier = p != policies[l] ? offload_tier : TT_TIER_HOST;
    }
    plan.compute_tier = TT_TIER_HOST;
    plan.offload_dir = "/tmp";
    plan.offload_ring = ring;
    plan.saved_ring = offload_kept == 1 ? 1 : 2;
    plan.min_offload_bytes = offload_kept == 2 ? 1000 : 0;
    plan.offload_streamed = streamed;
    plan.micro_batch = 2;
    plan.seq_len = 7;
    plan.packed_documents = packed;
    plan.loss_chunk = loss_chunk;
    plan.precision = (tt_precision){.activation = TT_F32, .gradient = TT_F32, .moment = TT_F32, .master = false};
    plan.activation_bytes = 4;
    plan.weight_bytes = 4;
    plan.gradient_bytes = 4;
    plan.moment_bytes = 4;

    plan.stream_frozen_layers = stream_frozen && lora;
    tt_plan_tile_mlp(&plan, mlp_shards);
    tt_spill_result spill = {0};
    const tt_trainable_spec spec = trainable_spec();
    if (spill_budget) {
        tt_param_table params;
        tt_param_table_build_trainable(&config, &spec, &params);
        plan.pinned_budget = pinned_spill_budget;
        const tt_plan_pricer pricer = tt_step_pricer(&config, &params, tt_test_cpu_backend());
        spill = tt_plan_spill(&plan, &pricer, spill_budget, pinned_spill_budget);
        tt_param_table_free(&params);
    }
    tt_model_state s;
    tt_model_state_init_trainable(&s, &config, &plan, &spec, tt_test_cpu_backend(), spill_budget);
    /* what train checks against offload_dir's free space (the dry run's disk peak) is what the files reserve */
    TT_EXPECT(s.sizes.tier_peak[TT_TIER_DISK] ==
                  tt_offload_store_disk_reserved_bytes(&s.inputs) + tt_offload_store_disk_reserved_bytes(&s.saved),
              "plan %s: the disk tier's peak %zu, the files %zu + %zu", policies, s.sizes.tier_peak[TT_TIER_DISK],
              tt_offload_store_disk_reserved_bytes(&s.inputs), tt_offload_store_disk_reserved_bytes(&s.saved));
    float *initial = calloc((size_t)s.params.total_numel, sizeof(float));
    tt_weights_init_random(initial, &s.params, 0.3, 11);
    if (lora) /* B starts at zero; nonzero here so that every adapter gradient is exercised */
        for (int i = 0; i < s.params.count; i++)
            if (s.params.params[i].kind == TT_PARAM_LORA_B)
                for (int64_t k = 0; k < s.params.params[i].numel; k++)
                    initial[s.params.params[i].offset + k] = 0.05f * (float)((k % 7) - 3);
    tt_model_set_weights(&s, initial);
    free(initial);
    tt_rng rng;
    tt_rng_seed(&rng, 5);
    const int64_t N = s.plan.micro_batch * s.plan.seq_len;
    for (int64_t i = 0; i < N; i++) {
        s.batch_inputs[i] = (int32_t)(tt_rng_next(&rng) % (uint64_t)s.config.vocab_size);
        s.batch_targets[i] =
            i % 5 == 3 ? TT_IGNORE_INDEX : (int32_t)(tt_rng_next(&rng) % (uint64_t)s.config.vocab_size);
    }
    if (packed) tt_model_set_positions(&s, packed_positions);
    run_result r;
    /* two micro-batches accumulate into the gradients, as gradient accumulation does */
    s.lora_dropout_seed = tt_lora_dropout_seed(3, 0, 0);
    r.loss = tt_step_forward_backward(&s, 0.05, &r.count);
    s.lora_dropout_seed = tt_lora_dropout_seed(3, 0, 1);
    r.loss += tt_step_forward_backward(&s, 0.05, &r.count);

    /* The dry run's peaks equal the closed form's. */
    char why[256];
    TT_EXPECT(tt_size_oracle_agrees(&s.sizes, &s.config, &s.params, &s.plan, why, sizeof why), "plan %s %s: %s",
              policies, s.config.model_type, why);
    /* Measured peaks equal the size table, class by class and for the whole tier. */
    for (int cls = 0; cls < TT_CLASS_COUNT; cls++)
        TT_EXPECT(s.arena.class_peak[cls] == s.sizes.class_peak[cls][TT_TIER_HOST],
                  "plan %s %s: class %s measured %zu, estimated %zu", policies, s.config.model_type, tt_class_name(cls),
                  s.arena.class_peak[cls], s.sizes.class_peak[cls][TT_TIER_HOST]);
    TT_EXPECT(s.arena.peak == s.sizes.tier_peak[TT_TIER_HOST], "plan %s: tier peak measured %zu, estimated %zu",
              policies, s.arena.peak, s.sizes.tier_peak[TT_TIER_HOST]);
    TT_EXPECT(s.arena.peak == s.arena.capacity, "the arena reserved exactly the peak");
    const tt_arena *host = &s.host;
    TT_EXPECT(host->peak == s.sizes.tier_peak[TT_TIER_PINNED] &&
                  host->class_peak[TT_CLASS_LAYER_INPUT] == s.sizes.class_peak[TT_CLASS_LAYER_INPUT][TT_TIER_PINNED],
              "plan %s: pinned tier measured %zu, estimated %zu", policies, host->peak,
              s.sizes.tier_peak[TT_TIER_PINNED]);
    TT_EXPECT(
        host->class_peak[TT_CLASS_SAVED_ACTIVATION] == s.sizes.class_peak[TT_CLASS_SAVED_ACTIVATION][TT_TIER_PINNED],
        "plan %s: offloaded kept activations measured %zu, estimated %zu", policies,
        host->class_peak[TT_CLASS_SAVED_ACTIVATION], s.sizes.class_peak[TT_CLASS_SAVED_ACTIVATION][TT_TIER_PINNED]);
    TT_EXPECT(!offload_kept || strchr(policies, 'k') == NULL || host->class_peak[TT_CLASS_SAVED_ACTIVATION] > 0,
              "plan %s: kept slots were offloaded", policies);
    TT_EXPECT(s.sizes.input_staging == (s.sizes.offloaded_inputs ? (size_t)ring * s.sizes.layer_input : 0),
              "plan %s: a ring of %lld staging buffers", policies, (long long)ring);
    if (offload_tier == TT_TIER_DISK) {
        size_t written = 0, read = 0;
        double seconds = 0;
        tt_disk_store_stats(s.inputs.disk, &written, &read, &seconds);
        const size_t expected = 2 * (size_t)s.sizes.offloaded_inputs * (size_t)(N * s.config.hidden_size) * 4;
        TT_EXPECT(written == expected && read == expected, "plan %s on disk: %zu bytes written, %zu read, %zu expected",
                  policies, written, read, expected);
        /* the file holds the blocks on disk only, a slot each (not one per layer) */
        int64_t inputs_on_disk = 0;
        for (int64_t l = 0; l < s.plan.num_layers; l++)
            inputs_on_disk += s.plan.layers[l].layer_input_tier == TT_TIER_DISK;
        const size_t slot =
            ((size_t)(N * s.config.hidden_size) * 4 + TT_DISK_ALIGNMENT - 1) / TT_DISK_ALIGNMENT * TT_DISK_ALIGNMENT;
        TT_EXPECT(tt_offload_store_disk_reserved_bytes(&s.inputs) == (size_t)inputs_on_disk * slot,
                  "plan %s on disk: a file of %zu bytes for %lld blocks of %zu", policies,
                  tt_offload_store_disk_reserved_bytes(&s.inputs), (long long)inputs_on_disk, slot);
    }
    if (plan_streams(&s)) {
        TT_EXPECT(s.sizes.frozen_weights < s.sizes.streamed_weights_host && s.stream.loaded_bytes > 0,
                  "plan %s streamed: %zu frozen bytes on the compute tier of %zu, %zu bytes streamed", policies,
                  s.sizes.frozen_weights, s.sizes.streamed_weights_host, s.stream.loaded_bytes);
    }
    for (int i = 0; quantized && i < s.params.count;
         i++) { /* 4.5 bits a value at these small shapes, padding included */
        const tt_param_info *p = &s.params.params[i];
        TT_EXPECT(p->quantized == tt_param_kind_is_linear_weight(p->kind) &&
                      (!p->quantized || (p->storage_numel * 4 * 8 <= p->numel * 5 && s.sizes.dequant_buffer > 0)),
                  "plan %s: %s quantized %d in %lld fp32 elements for %lld values", policies, p->name, p->quantized,
                  (long long)p->storage_numel, (long long)p->numel);
    }
    /* Eval fits in what training reserved. */
    int64_t eval_count = 0;
    double eval_loss = tt_step_forward_loss(&s, &eval_count);
    TT_EXPECT(eval_count > 0 && eval_loss > 0, "eval loss %g over %lld tokens", eval_loss, (long long)eval_count);

    r.host_peak = s.arena.peak;
    r.pinned_peak = s.host.peak;
    r.layer_saved = s.sizes.layer_saved;
    r.spill = spill;
    r.gradient_bytes = s.sizes.gradients;
    r.gradients = malloc(r.gradient_bytes);
    memcpy(r.gradients, s.gradients, r.gradient_bytes);
    tt_model_state_free(&s);
    return r;
}

static run_result run_plan(bool qwen3, const char *policies, int64_t loss_chunk, tt_tier offload_tier) {
    return run_plan_spilled(qwen3, policies, loss_chunk, offload_tier, 0, 2, false, 0);
}

/* variants: llama (the family's model), qwen3, then both again with LoRA (no dropout), then with LoRA and dropout,
 * then LoRA with dropout and the frozen layers streamed (layer_offloading); 8-15 the same with the
 * MLP tiled; 16-19 QLoRA (4-bit NF4 base, double quantization): with dropout, then streamed too. The other families
 * run the even variants on their own tiny model (tiny_model.h), the first packed too. */
static void run_variants(const char *model_type) {
    family = model_type;
    const bool another_family = strcmp(model_type, "llama") != 0;
    run_result untiled[8];
    for (int variant = 0; variant < 20; variant++) {
        if (another_family && variant % 2 == 1) continue;
        if (strcmp(model_type, "qwen3_moe") == 0 && variant >= 8) continue; /* not tiled, not QLoRA: refused */
        bool qwen3 = variant % 2 == 1;
        quantized = variant >= 16;
        lora = variant % 8 >= 2 || quantized;
        lora_dropout = variant % 8 >= 4 || quantized ? 0.25 : 0.0;
        mlp_shards = variant >= 8 && !quantized ? 3 : 1;
        stream_frozen = variant % 8 >= 6;
        packed = variant % 8 == 1 || variant % 8 == 2 || variant % 8 == 7 || /* qwen3, LoRA, LoRA streamed */
                 (another_family && variant % 8 == 0);
        stream_frozen = false; /* the reference keeps every weight on the compute tier */
        run_result keep = run_plan(qwen3, "kkk", 14, TT_TIER_HOST);
        stream_frozen = variant % 8 >= 6 || variant >= 18;
        const char *others[] = {"rrr", "krk", "rkr", "kkr", "sss", "ccc", "src",
                                "csk", "kcs", "RRR", "RkS", "kCr", "SSS"};
        for (size_t i = 0; i < 5 * sizeof others / sizeof *others; i++) {
            /* upper-case layers offload their input: to the pinned tier synchronously (legacy), then
             * (second round) to disk, then (third) to the pinned tier streamed through a ring of 3;
             * rounds four and five also offload every layer's kept slots (one staging buffer; two,
             * small slots staying) */
            const size_t count = sizeof others / sizeof *others;
            const char *plan_name = others[i % count];
            const int round = (int)(i / count);
            if ((round == 1 || round == 2) && strpbrk(plan_name, "RSCK") == NULL) continue;
            run_result other = run_plan_spilled(qwen3, plan_name, 14, round == 1 ? TT_TIER_DISK : TT_TIER_PINNED, 0,
                                                round == 2 ? 3 : 2, round > 0, round >= 3 ? round - 2 : 0);
            TT_EXPECT(memcmp(&keep.loss, &other.loss, sizeof(double)) == 0, "loss differs: keep %.17g, %s %.17g",
                      keep.loss, plan_name, other.loss);
            TT_EXPECT(keep.gradient_bytes == other.gradient_bytes &&
                          memcmp(keep.gradients, other.gradients, keep.gradient_bytes) == 0,
                      "gradients of plan %s (offload round %d) differ from keeping everything", plan_name, round);
            free(other.gradients);
        }
        /* A host budget just under what checkpointing needs: the layer inputs spill to disk until it
         * fits (the first move costs the two staging buffers, so all three go), same bits. */
        run_result full = run_plan(qwen3, "rrr", 14, TT_TIER_HOST);
        run_result spilled = run_plan_spilled(qwen3, "rrr", 14, TT_TIER_HOST, full.host_peak - 1, 2, false, 0);
        TT_EXPECT(spilled.spill.fits && spilled.spill.to_disk == 3 && spilled.spill.to_pinned == 0,
                  "spill: fits %d, %lld to disk, %lld to pinned", spilled.spill.fits, (long long)spilled.spill.to_disk,
                  (long long)spilled.spill.to_pinned);
        TT_EXPECT(spilled.host_peak < full.host_peak, "spilled peak %zu under the budget %zu", spilled.host_peak,
                  full.host_peak - 1);
        TT_EXPECT(memcmp(keep.gradients, spilled.gradients, keep.gradient_bytes) == 0 &&
                      memcmp(&keep.loss, &spilled.loss, sizeof(double)) == 0,
                  "a spilled plan gives the same bits");
        free(full.gradients);
        free(spilled.gradients);
        /* Keeping everything under a budget half a layer's saved activations below its peak: the
         * layer inputs go to disk first, then the layers' kept activations, as blocks (the first ones
         * only pay for the staging ring of two), until it fits; same bits. */
        run_result keep_here = run_plan(qwen3, "kkk", 14, TT_TIER_HOST); /* with this variant's streaming */
        const size_t kept_budget = keep_here.host_peak - keep_here.layer_saved / 2;
        free(keep_here.gradients);
        run_result kept_spill = run_plan_spilled(qwen3, "kkk", 14, TT_TIER_HOST, kept_budget, 2, false, 0);
        TT_EXPECT(kept_spill.spill.fits && kept_spill.spill.to_disk == 3 && kept_spill.spill.kept_to_disk == 3 &&
                      kept_spill.host_peak <= kept_budget,
                  "kept spill: fits %d, %lld inputs and %lld kept blocks to disk, peak %zu of budget %zu",
                  kept_spill.spill.fits, (long long)kept_spill.spill.to_disk, (long long)kept_spill.spill.kept_to_disk,
                  kept_spill.host_peak, kept_budget);
        TT_EXPECT(memcmp(keep.gradients, kept_spill.gradients, keep.gradient_bytes) == 0 &&
                      memcmp(&keep.loss, &kept_spill.loss, sizeof(double)) == 0,
                  "kept activations spilled to disk give the same bits");
        free(kept_spill.gradients);
        /* Kept activations in the pinned tier with a pinned budget too small for all of them: the
         * last layers' blocks move on to disk; same bits. */
        run_result pinned_all = run_plan_spilled(qwen3, "kkk", 14, TT_TIER_HOST, 0, 2, true, 1);
        pinned_spill_budget = pinned_all.pinned_peak - 1;
        run_result pinned_spill = run_plan_spilled(qwen3, "kkk", 14, TT_TIER_HOST, (size_t)1 << 40, 2, true, 1);
        pinned_spill_budget = 0;
        TT_EXPECT(pinned_spill.spill.fits && pinned_spill.spill.kept_to_disk > 0 &&
                      pinned_spill.pinned_peak <= pinned_all.pinned_peak - 1,
                  "pinned kept spill: fits %d, %lld kept blocks to disk, pinned peak %zu of %zu",
                  pinned_spill.spill.fits, (long long)pinned_spill.spill.kept_to_disk, pinned_spill.pinned_peak,
                  pinned_all.pinned_peak);
        TT_EXPECT(memcmp(keep.gradients, pinned_spill.gradients, keep.gradient_bytes) == 0 &&
                      memcmp(&keep.loss, &pinned_spill.loss, sizeof(double)) == 0,
                  "kept activations spilled from the pinned tier to disk give the same bits");
        free(pinned_all.gradients);
        free(pinned_spill.gradients);
        /* The LM-head chunk size only changes the schedule of the same row-wise arithmetic, and the head's weight
         * gradient and the loss go on token after token across chunks: the same bits. */
        run_result chunked = run_plan(qwen3, "rrr", 4, TT_TIER_HOST);
        TT_EXPECT(chunked.count == keep.count, "token count %lld vs %lld", (long long)chunked.count,
                  (long long)keep.count);
        TT_EXPECT(memcmp(&chunked.loss, &keep.loss, sizeof(double)) == 0 &&
                      memcmp(chunked.gradients, keep.gradients, keep.gradient_bytes) == 0,
                  "LM-head chunks of 4 rows: loss %.17g vs %.17g and the gradients bit for bit", chunked.loss,
                  keep.loss);
        free(chunked.gradients);
        if (variant < 8) {
            untiled[variant] = keep;
            continue;
        }
        if (quantized) {
            free(keep.gradients);
            continue;
        }
        /* Tiled, the weight gradients go on shard after shard, token after token, and a row's arithmetic does not
         * depend on its shard: the bits of the untiled run. */
        const run_result *whole = &untiled[variant - 8];
        TT_EXPECT(memcmp(&whole->loss, &keep.loss, sizeof(double)) == 0 &&
                      memcmp(whole->gradients, keep.gradients, keep.gradient_bytes) == 0,
                  "variant %d: tiled MLP loss %.17g vs %.17g untiled, and the gradients bit for bit", variant,
                  keep.loss, whole->loss);
        free(untiled[variant - 8].gradients);
        free(keep.gradients);
    }
    if (strcmp(model_type, "qwen3_moe") == 0) /* no tiled variant took them */
        for (int variant = 0; variant < 8; variant += 2) free(untiled[variant].gradients);
}

int main(void) {
    static const char *const families[] = {"llama",   "gemma3_text", "gemma2", "olmo2",
                                           "smollm3", "granite",     "phi3",   "qwen3_moe"};
    for (size_t i = 0; i < sizeof families / sizeof families[0]; i++) run_variants(families[i]);
    return tt_test_summary("step_plans");
}
