#include "train/generator.h"

#include <string.h>
#include <time.h>

#include "config/run_translation.h"
#include "core/check.h"
#include "train/model_setup.h"

static double now_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The run as generation runs it: one sequence of `context` tokens, every layer's input on the compute tier, nothing
 * offloaded, tiled or shared with other processes (a shallow copy: its strings are the run's). */
static tt_run_config generation_run(const tt_run_config *run, int64_t context) {
    tt_run_config r = *run;
    r.sequence_len = context;
    r.micro_batch_size = 1;
    r.gradient_accumulation_steps = 1;
    r.sample_packing = false;
    r.gradient_checkpointing = true; /* the plan prices a training step; this keeps its activations small */
    r.selective_checkpointing = r.selective_offload = r.selective_auto = false;
    r.activation_offloading = TT_OFFLOAD_NONE;
    r.layer_offloading = false;
    r.cpu_offloading = r.cpu_offloading_weights = false;
    r.optimizer_cpu_offload = false;
    r.zero_stage = 0;
    r.sequence_parallel_degree = 1;
    r.tiled_mlp = false;
    r.optimizer = (char *)"adamw_torch";
    return r;
}

void tt_generator_open(tt_generator *g, const tt_run_config *run, const tt_device *device, int64_t context) {
    memset(g, 0, sizeof *g);
    TT_CHECK(run->base_model, "generation loads a model (base_model)");
    const tt_run_config r = generation_run(run, context);
    tt_model_config model;
    tt_load_model_config_for_run(&r, &model);
    tt_plan plan;
    tt_plan_for_run(&plan, &r, &model, device, false);
    tt_trainable_spec spec = tt_trainable_spec_for_run(&r, &model, plan.weight_bytes);
    spec.freeze_all = r.adapter == TT_ADAPTER_NONE; /* a full model: nothing trains; an adapter stays apart */
    spec.frozen_layers = NULL;
    spec.frozen_layer_count = 0;
    tt_model_state_init_trainable(&g->model, &model, &plan, &spec, device->backend, device->memory_budget);
    tt_load_run_weights(&g->model, &r);
    tt_kv_cache_init(&g->cache, &g->model);
    tt_sampling_scratch_init(&g->scratch, g->model.config.vocab_size);
}

void tt_generator_close(tt_generator *g) {
    tt_sampling_scratch_free(&g->scratch);
    tt_kv_cache_free(&g->cache, &g->model);
    tt_model_state_free(&g->model);
}

static bool is_stop(const tt_generation_request *q, int32_t id) {
    for (int i = 0; i < q->stop_count; i++)
        if (q->stop_ids[i] == id) return true;
    return false;
}

int64_t tt_generate(tt_generator *g, const tt_generation_request *q, int32_t *out, tt_generation_stats *stats) {
    tt_kv_cache *cache = &g->cache;
    memset(stats, 0, sizeof *stats);
    stats->prompt_tokens = q->prompt_count;
    if (q->prompt_count < 1) tt_die("inference: an empty prompt (no tokens to continue from)");
    for (int64_t i = 0; i < q->prompt_count; i++)
        if (q->prompt[i] < 0 || q->prompt[i] >= g->model.config.vocab_size)
            tt_die("inference: token %lld of the prompt is id %d, but the model's vocab_size is %lld (is the tokenizer "
                   "the model's?)",
                   (long long)i, q->prompt[i], (long long)g->model.config.vocab_size);
    if (q->prompt_count >= cache->capacity)
        tt_die("inference: the prompt is %lld tokens but the context holds %lld; raise --max-context (or "
               "sequence_len) or shorten the prompt",
               (long long)q->prompt_count, (long long)cache->capacity);
    /* the last new token is never fed back: prompt + new - 1 positions */
    int64_t room = cache->capacity - q->prompt_count + 1;
    const int64_t limit = q->max_new_tokens < room ? q->max_new_tokens : room;
    tt_rng rng;
    tt_rng_seed(&rng, q->seed);
    tt_kv_cache_reset(cache);
    const double start = now_seconds();
    const float *logits = tt_kv_forward(&g->model, cache, q->prompt, q->prompt_count);
    int64_t count = 0;
    double decode_start = start;
    while (count < limit) {
        const int32_t id = tt_sample_token(logits, &q->sampling, &g->scratch, &rng);
        out[count++] = id;
        if (count == 1) {
            decode_start = now_seconds();
            stats->prefill_seconds = decode_start - start;
        }
        if (q->on_token) q->on_token(q->ctx, id);
        if (is_stop(q, id)) {
            stats->stopped = true;
            break;
        }
        if (count == limit) break;
        logits = tt_kv_forward(&g->model, cache, &id, 1);
    }
    stats->new_tokens = count;
    stats->decode_seconds = count > 0 ? now_seconds() - decode_start : 0;
    return count;
}
