/* Generation from a trained model (tiertrain inference): a run's model (its base with the run's LoRA adapter, or a
 * full fine-tune's output as the base) in a model state built for one sequence of up to `context` positions, nothing
 * of it trainable beyond the adapters, its KV cache, and the loop that feeds a prompt in one forward and then one
 * token at a time. */
#ifndef TT_TRAIN_GENERATOR_H
#define TT_TRAIN_GENERATOR_H

#include <stdbool.h>
#include <stdint.h>

#include "config/run_config.h"
#include "core/rng.h"
#include "train/kv_cache.h"
#include "train/sampling.h"
#include "train/trainer.h"

typedef struct tt_generator {
    tt_model_state model;
    tt_kv_cache cache;
    tt_sampling_scratch scratch;
} tt_generator;

/* One prompt's generation. */
typedef struct tt_generation_request {
    const int32_t *prompt; /* [prompt_count] ids, the chat template's render or the raw text's */
    int64_t prompt_count;
    int64_t max_new_tokens;
    const int32_t *stop_ids; /* generation ends after any of these (it is returned) */
    int stop_count;
    tt_sampling sampling;
    uint64_t seed; /* of the draws (sampling only) */
    /* called with each new token as soon as it is chosen (streaming), or NULL */
    void (*on_token)(void *ctx, int32_t id);
    void *ctx;
} tt_generation_request;

typedef struct tt_generation_stats {
    int64_t prompt_tokens, new_tokens;
    double prefill_seconds; /* the prompt's forward and the first token */
    double decode_seconds;  /* every later token's forward */
    bool stopped;           /* ended at a stop id (else at max_new_tokens or the context's end) */
} tt_generation_stats;

/* The run's model (base_model, and lora_model_dir where adapter is set) loaded for generation on the device, with a
 * cache of `context` positions. The run's memory keys are not used: one sequence, nothing offloaded. */
void tt_generator_open(tt_generator *g, const tt_run_config *run, const tt_device *device, int64_t context);
void tt_generator_close(tt_generator *g);

/* Generates after the prompt into out[max_new_tokens]; returns how many tokens it wrote. A prompt that leaves no room
 * in the context is an error naming both lengths. */
int64_t tt_generate(tt_generator *g, const tt_generation_request *request, int32_t *out, tt_generation_stats *stats);

#endif
