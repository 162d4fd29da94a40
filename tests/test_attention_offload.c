/* selective_checkpointing: auto's plan pass (memory/attention_offload.h): which checkpointed layers keep their
 * attention output and log-sum-exp in pinned memory instead of recomputing the attention. A stand-in pricer gives
 * the GPU tier a base peak plus two staging buffers once any layer offloads, and the pinned tier a base plus each
 * offloading layer's slots, so the budgets decide the count; the size table itself prices selective offload in
 * test_step_plans and on the GPU in test_gpu_model. */
#include <string.h>

#include "config/run_config.h"
#include "memory/attention_offload.h"
#include "model/saved_slots.h"
#include "test_util.h"
#include "train/trainer.h"

#define LAYERS 6
#define MANY_LAYERS 64
#define GPU_BASE ((size_t)1000)
#define STAGING ((size_t)100)
#define PINNED_BASE ((size_t)50)
#define PER_LAYER ((size_t)10)

static int prices; /* how many times the pass priced a plan */

/* the attention's span when every query sees the whole sequence (no sliding window) */
#define SPAN(plan) tt_attention_span(&(plan), 0)

static void fake_price(const tt_plan_pricer *self, tt_size_table *table, const tt_plan *plan) {
    (void)self;
    prices++;
    memset(table, 0, sizeof(*table));
    size_t offloading = 0;
    for (int64_t l = 0; l < plan->num_layers; l++)
        offloading += plan->layers[l].offloaded && plan->layers[l].saved_activation_tier == TT_TIER_PINNED;
    table->tier_peak[TT_TIER_GPU] = GPU_BASE + (offloading ? STAGING : 0);
    table->tier_peak[TT_TIER_PINNED] = PINNED_BASE + offloading * PER_LAYER;
}

static const tt_plan_pricer pricer = {.price = fake_price};

/* A checkpointed plan of n layers on `tier`, sequences of seq_len tokens a rank (sp ranks a sequence). */
static tt_plan checkpointed_n(tt_layer_plan *layers, int n, tt_tier tier, int64_t seq_len, int64_t sp) {
    for (int l = 0; l < n; l++)
        layers[l] = (tt_layer_plan){
            .recompute = TT_RECOMPUTE_EVERYTHING, .saved_activation_tier = tier, .layer_input_tier = tier};
    return (tt_plan){.num_layers = n,
                     .layers = layers,
                     .compute_tier = tier,
                     .micro_batch = 1,
                     .seq_len = seq_len,
                     .sequence_parallel = sp};
}

static tt_plan checkpointed(tt_layer_plan *layers, tt_tier tier, int64_t seq_len, int64_t sp) {
    return checkpointed_n(layers, LAYERS, tier, seq_len, sp);
}

static bool offloads_attention(const tt_layer_plan *lp) {
    return lp->recompute == TT_RECOMPUTE_ALL_BUT_ATTENTION && lp->offloaded == TT_ATTENTION_SLOTS &&
           lp->saved_activation_tier == TT_TIER_PINNED;
}

static bool recomputes_everything(const tt_layer_plan *lp, tt_tier tier) {
    return lp->recompute == TT_RECOMPUTE_EVERYTHING && lp->offloaded == 0 && lp->saved_activation_tier == tier;
}

int main(void) {
    tt_layer_plan layers[LAYERS];

    /* the CPU backend's plans, and short sequences, stay as they are (without pricing) */
    tt_plan plan = checkpointed(layers, TT_TIER_HOST, 65536, 1);
    prices = 0;
    TT_EXPECT(tt_plan_offload_attention(&plan, &pricer, 0, 0, SPAN(plan)) == 0 && prices == 0,
              "host compute tier: nothing");
    plan = checkpointed(layers, TT_TIER_GPU, TT_ATTENTION_OFFLOAD_MIN_TOKENS - 1024, 1);
    TT_EXPECT(tt_plan_offload_attention(&plan, &pricer, 0, 0, SPAN(plan)) == 0 && prices == 0,
              "short sequence: nothing");
    TT_EXPECT(recomputes_everything(&layers[0], TT_TIER_GPU) && !plan.offload_streamed, "... and the plan unchanged");

    /* room for everything: every checkpointed layer keeps its attention in pinned memory, streamed */
    plan = checkpointed(layers, TT_TIER_GPU, 65536, 1);
    TT_EXPECT(tt_plan_offload_attention(&plan, &pricer, 0, 0, SPAN(plan)) == LAYERS, "no budgets: every layer");
    bool all = true;
    for (int l = 0; l < LAYERS; l++) all &= offloads_attention(&layers[l]);
    TT_EXPECT(all && plan.offload_streamed, "every layer offloads its attention slots, on the copy streams");

    /* the pinned budget holds three layers' slots: the top three switch */
    plan = checkpointed(layers, TT_TIER_GPU, 65536, 1);
    prices = 0;
    TT_EXPECT(tt_plan_offload_attention(&plan, &pricer, 0, PINNED_BASE + 3 * PER_LAYER + PER_LAYER / 2, SPAN(plan)) ==
                  3,
              "pinned room for three layers: three");
    TT_EXPECT(offloads_attention(&layers[5]) && offloads_attention(&layers[4]) && offloads_attention(&layers[3]) &&
                  recomputes_everything(&layers[2], TT_TIER_GPU) && recomputes_everything(&layers[0], TT_TIER_GPU),
              "... the top three, the others as they were");

    /* 64 layers, pinned room for 23: the top 23, found by bisection (a layer at a time would price 24 times) */
    tt_layer_plan many[MANY_LAYERS];
    plan = checkpointed_n(many, MANY_LAYERS, TT_TIER_GPU, 65536, 1);
    prices = 0;
    TT_EXPECT(tt_plan_offload_attention(&plan, &pricer, 0, PINNED_BASE + 23 * PER_LAYER + PER_LAYER / 2, SPAN(plan)) ==
                  23,
              "pinned room for 23 of 64 layers: 23");
    bool top = true;
    for (int l = 0; l < MANY_LAYERS; l++)
        top &= l >= MANY_LAYERS - 23 ? offloads_attention(&many[l]) : recomputes_everything(&many[l], TT_TIER_GPU);
    TT_EXPECT(top, "... the top 23, the others as they were");
    TT_EXPECT(prices <= 9, "a bisection over 64 layers: at most log2(65) + 2 prices, not one a layer (%d)", prices);

    /* the GPU budget cannot hold the staging buffers: nothing, and the plan as it was */
    plan = checkpointed(layers, TT_TIER_GPU, 65536, 1);
    TT_EXPECT(tt_plan_offload_attention(&plan, &pricer, GPU_BASE + STAGING - 1, 0, SPAN(plan)) == 0,
              "no GPU room: nothing");
    all = true;
    for (int l = 0; l < LAYERS; l++) all &= recomputes_everything(&layers[l], TT_TIER_GPU);
    TT_EXPECT(all && !plan.offload_streamed, "... every layer recomputes as before, nothing streamed");

    /* layers that keep something already (keep_free's top layers, a layer without checkpointing) are left alone */
    plan = checkpointed(layers, TT_TIER_GPU, 65536, 1);
    layers[5].recompute = TT_MLP_SLOTS;
    layers[1].recompute = TT_RECOMPUTE_NOTHING;
    TT_EXPECT(tt_plan_offload_attention(&plan, &pricer, 0, 0, SPAN(plan)) == 4,
              "four layers recompute everything: four");
    TT_EXPECT(layers[5].recompute == TT_MLP_SLOTS && layers[5].offloaded == 0 &&
                  layers[1].recompute == TT_RECOMPUTE_NOTHING && offloads_attention(&layers[4]) &&
                  offloads_attention(&layers[0]),
              "the others stay as they were");

    /* the disk tier in use (a spilled layer input): nothing */
    plan = checkpointed(layers, TT_TIER_GPU, 65536, 1);
    layers[2].layer_input_tier = TT_TIER_DISK;
    TT_EXPECT(tt_plan_offload_attention(&plan, &pricer, 0, 0, SPAN(plan)) == 0, "a layer input on disk: nothing");

    /* a sliding window shorter than the threshold (the recompute costs T x window), packed documents: nothing */
    plan = checkpointed(layers, TT_TIER_GPU, 65536, 1);
    TT_EXPECT(tt_plan_offload_attention(&plan, &pricer, 0, 0, 4096) == 0, "a 4096-token window at 64k: nothing");
    plan.packed_documents = true;
    TT_EXPECT(tt_plan_offload_attention(&plan, &pricer, 0, 0, SPAN(plan)) == 0, "packed documents: nothing");

    /* the span: the whole sequence, every rank's tokens with sequence parallel, or a shorter sliding window */
    plan = checkpointed(layers, TT_TIER_GPU, 8192, 4);
    TT_EXPECT(tt_attention_span(&plan, 0) == 32768 && tt_attention_span(&plan, 65536) == 32768 &&
                  tt_attention_span(&plan, 4096) == 4096,
              "span at 4 x 8192 tokens: %lld, %lld with a longer window, %lld with a 4096 one",
              (long long)tt_attention_span(&plan, 0), (long long)tt_attention_span(&plan, 65536),
              (long long)tt_attention_span(&plan, 4096));

    /* the keys under which the pass runs: auto, with the activations left to the plan or as hidden_states */
    tt_run_config run;
    tt_run_config_defaults(&run);
    TT_EXPECT(run.selective_auto && tt_selective_auto_applies(&run), "the default: auto runs");
    run.activation_offloading = TT_OFFLOAD_HIDDEN_STATES;
    TT_EXPECT(tt_selective_auto_applies(&run), "hidden_states: auto runs");
    const tt_activation_offloading own_rules[] = {TT_OFFLOAD_TRUE, TT_OFFLOAD_LEGACY, TT_OFFLOAD_DISK};
    for (int i = 0; i < 3; i++) {
        run.activation_offloading = own_rules[i];
        TT_EXPECT(!tt_selective_auto_applies(&run), "activation_offloading %d (its own rule): auto does not run", i);
    }
    run.activation_offloading = TT_OFFLOAD_NONE;
    run.cpu_offloading = run.cpu_offloading_activations = true;
    TT_EXPECT(!tt_selective_auto_applies(&run), "Megatron's cpu_offloading of activations: auto does not run");
    run.cpu_offloading_activations = false;
    TT_EXPECT(tt_selective_auto_applies(&run), "cpu_offloading of weights only: auto runs");
    run.selective_auto = false;
    TT_EXPECT(!tt_selective_auto_applies(&run), "selective_checkpointing ~ or explicit: auto does not run");
    tt_run_config_free(&run);

    /* sequence parallel: the attention's sequence is the whole one (4 ranks of 8192 tokens) */
    plan = checkpointed(layers, TT_TIER_GPU, 8192, 4);
    TT_EXPECT(tt_plan_offload_attention(&plan, &pricer, 0, 0, SPAN(plan)) == LAYERS,
              "sequence parallel 4 x 8192: every layer");
    return tt_test_summary("attention offload");
}
