/* Sample packing on the CPU oracle, bit for bit: a packed micro-batch of documents gives exactly (memcmp) the loss
 * and every parameter gradient of the same documents run one by one, each as a sequence of its own (one sequence of
 * its own length, unpacked), in the packed batch's token order, each run adding into the gradients and continuing the
 * loss sum the one before left (gradient accumulation), with one loss scale for all (1 / their label tokens, as the
 * trainer scales an optimizer step's micro-batches).
 *
 * The packed batch: 2 sequences of 160 tokens (320 rows: more than a GEMM tile's rows and depth, so documents straddle
 * tiles and K blocks), documents of 37, 1, 53 and 61 tokens then 8 of padding, and of 97, 2 and 59 then 2 of padding,
 * so they start at rows 0, 37, 38, 91, 160, 257 and 259 (none a multiple of a vector width), with some tokens' labels
 * masked inside the documents and LM-head chunks of 40 rows that cut through them. Qwen3 (q/k norms, tied embeddings)
 * and Llama (attention biases), full fine-tuning and LoRA on every linear layer (dropout 0: a dropout mask is drawn
 * per element of the micro-batch, so it moves with the rows), and the packed batch under four memory modes (keeping
 * everything, gradient checkpointing, checkpointing with hidden_states offload, tiled_mlp with 3 shards), each
 * against the one-by-one runs that keep everything. */
#include <string.h>

#include "core/check.h"
#include "config/run_translation.h"
#include "config/run_config.h"
#include "core/rng.h"
#include "memory/plan.h"
#include "model/weights.h"
#include "ops/backend.h"
#include "test_backend.h"
#include "test_util.h"
#include "tiny_model.h"
#include "train/model_io.h"
#include "train/model_setup.h"
#include "train/step.h"

enum { SEQUENCES = 2, SEQ_LEN = 160, TOKENS = SEQUENCES * SEQ_LEN, DOCUMENTS = 7 };

/* Document d: its sequence, its first token there, its length. */
static const int document_sequence[DOCUMENTS] = {0, 0, 0, 0, 1, 1, 1};
static const int document_start[DOCUMENTS] = {0, 37, 38, 91, 0, 97, 99};
static const int document_length[DOCUMENTS] = {37, 1, 53, 61, 97, 2, 59};

/* How the packed run keeps its activations. */
typedef struct memory_mode {
    const char *name;
    bool checkpointing;
    tt_activation_offloading activation_offloading;
    int64_t mlp_shards; /* tiled_mlp (0: untiled) */
} memory_mode;

static const memory_mode keep_everything = {"keep everything", false, TT_OFFLOAD_NONE, 0};

typedef struct model_kind {
    bool qwen3, tied, lora; /* tied: the LM head is the embedding (Qwen3's small models) */
} model_kind;

static tt_model_config kind_config(model_kind kind) {
    tt_model_config config = tt_test_tiny_config(kind.qwen3);
    config.tie_word_embeddings = kind.tied;
    config.max_position_embeddings = SEQ_LEN;
    return config;
}

static const tt_trainable_spec lora_spec = {
    .lora_rank = 4, .lora_alpha = 8, .lora_dropout = 0, .lora_targets = TT_LORA_SEPARATE_MODULES};

/* A CPU model state of `sequences` x `seq_len` tokens with the test's weights (the same for every shape). */
static void open_state(tt_model_state *s, model_kind kind, int64_t sequences, int64_t seq_len, bool packed,
                       const memory_mode *mode) {
    tt_model_config config = kind_config(kind);
    tt_run_config run;
    tt_run_config_defaults(&run);
    run.micro_batch_size = sequences;
    run.sequence_len = seq_len;
    run.loss_chunk_size = 40;
    run.sample_packing = packed;
    run.gradient_checkpointing = mode->checkpointing;
    run.activation_offloading = mode->activation_offloading;
    run.tiled_mlp = mode->mlp_shards > 0;
    run.tiled_mlp_num_shards = mode->mlp_shards;
    const tt_precision precision = tt_precision_for_run(&run, false);
    tt_plan plan;
    tt_plan_from_config(&plan, &run, &config, TT_TIER_HOST, &precision);
    tt_model_state_init_trainable(s, &config, &plan, kind.lora ? &lora_spec : NULL, tt_test_cpu_backend(), 0);
    tt_run_config_free(&run);
    float *weights = calloc((size_t)s->params.total_numel, sizeof(float));
    tt_weights_init_random(weights, &s->params, 0.3, 17);
    for (int i = 0; i < s->params.count; i++) /* B != 0, so that every adapter gradient is exercised */
        if (s->params.params[i].kind == TT_PARAM_LORA_B)
            for (int64_t k = 0; k < s->params.params[i].numel; k++)
                weights[s->params.params[i].offset + k] = 0.05f * (float)((k % 7) - 3);
    tt_model_set_weights(s, weights);
    free(weights);
}

/* The documents' tokens, where they lie in the packed batch, and their targets: the next token of the same document
 * (the last one has none), masked at every 9th row as a prompt's labels would be; padding has input 0 and no target. */
typedef struct documents {
    int32_t inputs[TOKENS], targets[TOKENS], positions[TOKENS];
    int64_t label_tokens;
} documents;

/* Whether row n is padding (no document's token). */
static bool padding_at(const documents *docs, int n) {
    for (int d = 0; d < DOCUMENTS; d++) {
        const int first = document_sequence[d] * SEQ_LEN + document_start[d];
        if (n >= first && n < first + document_length[d]) return false;
    }
    return true;
}

static void make_documents(documents *docs) {
    tt_rng rng;
    tt_rng_seed(&rng, 31);
    for (int n = 0; n < TOKENS; n++) {
        docs->inputs[n] = 0;
        docs->targets[n] = TT_IGNORE_INDEX;
        docs->positions[n] = -1;
    }
    for (int d = 0; d < DOCUMENTS; d++) {
        const int first = document_sequence[d] * SEQ_LEN + document_start[d];
        for (int k = 0; k < document_length[d]; k++) {
            docs->inputs[first + k] = 1 + (int32_t)(tt_rng_next(&rng) % 49);
            docs->positions[first + k] = k;
        }
    }
    docs->label_tokens = 0;
    for (int d = 0; d < DOCUMENTS; d++) {
        const int first = document_sequence[d] * SEQ_LEN + document_start[d];
        for (int k = 0; k + 1 < document_length[d]; k++)
            if ((first + k) % 9 != 4) {
                docs->targets[first + k] = docs->inputs[first + k + 1];
                docs->label_tokens++;
            }
    }
    /* padding: a document of its own, its positions counting from 0 where it starts */
    for (int n = 0; n < TOKENS; n++)
        if (docs->positions[n] < 0) {
            const bool continues = n % SEQ_LEN > 0 && padding_at(docs, n - 1);
            docs->positions[n] = continues ? docs->positions[n - 1] + 1 : 0;
        }
}

typedef struct step_result {
    double loss;
    int64_t count;
    float *gradients;
    size_t gradient_bytes;
} step_result;

/* The packed micro-batch in one step, from zero gradients. */
static step_result run_packed(model_kind kind, const memory_mode *mode, const documents *docs) {
    tt_model_state s;
    open_state(&s, kind, SEQUENCES, SEQ_LEN, true, mode);
    tt_model_set_batch(&s, docs->inputs, docs->targets);
    tt_model_set_positions(&s, docs->positions);
    tt_backend_zero(s.backend, s.gradients, s.sizes.gradients);
    step_result out = {.gradient_bytes = s.sizes.gradients};
    out.loss = tt_step_forward_backward_continuing(&s, 1.0 / (double)docs->label_tokens, 0.0, &out.count);
    out.gradients = malloc(out.gradient_bytes);
    tt_backend_download(s.backend, out.gradients, s.gradients, out.gradient_bytes);
    tt_model_state_free(&s);
    return out;
}

/* The documents one by one in the packed batch's order, each a sequence of its own length (unpacked, keeping
 * everything): each step starts from the gradients the one before left and continues its loss sum. */
static step_result run_one_by_one(model_kind kind, const documents *docs) {
    step_result out = {0};
    for (int d = 0; d < DOCUMENTS; d++) {
        const int first = document_sequence[d] * SEQ_LEN + document_start[d], length = document_length[d];
        tt_model_state s;
        open_state(&s, kind, 1, length, false, &keep_everything);
        if (d == 0) {
            out.gradient_bytes = s.sizes.gradients;
            out.gradients = calloc(1, out.gradient_bytes);
        }
        TT_CHECK(s.sizes.gradients == out.gradient_bytes, "every shape has the same gradients");
        tt_backend_upload(s.backend, s.gradients, out.gradients, out.gradient_bytes);
        tt_model_set_batch(&s, docs->inputs + first, docs->targets + first);
        int64_t count = 0;
        out.loss = tt_step_forward_backward_continuing(&s, 1.0 / (double)docs->label_tokens, out.loss, &count);
        out.count += count;
        tt_backend_download(s.backend, out.gradients, s.gradients, out.gradient_bytes);
        tt_model_state_free(&s);
    }
    return out;
}

/* The trainable parameters of the kind, in the gradients' layout. */
static void trainable_params(model_kind kind, tt_param_table *params) {
    tt_model_config config = kind_config(kind);
    tt_param_table_build_trainable(&config, kind.lora ? &lora_spec : NULL, params);
    tt_model_config_free(&config);
}

/* The name of the trainable parameter that holds gradient element i. */
static const char *gradient_owner(const tt_param_table *params, int64_t i) {
    for (int p = 0; p < params->count; p++) {
        const tt_param_info *info = &params->params[p];
        const int64_t at = info->offset - params->trainable_start;
        if (info->trainable && i >= at && i < at + info->numel) return info->name;
    }
    return "(padding)";
}

/* The trainable parameter (if any) none of whose gradient values is nonzero: equal gradients would prove little. */
static const char *parameter_without_gradient(const tt_param_table *params, const float *gradients) {
    for (int p = 0; p < params->count; p++) {
        const tt_param_info *info = &params->params[p];
        if (!info->trainable) continue;
        bool moved = false;
        for (int64_t k = 0; k < info->numel && !moved; k++)
            moved = gradients[info->offset - params->trainable_start + k] != 0.0f;
        if (!moved) return info->name;
    }
    return NULL;
}

/* A tied embedding's gradient is two reductions over tokens into one matrix: the LM head's (at the start of the
 * backward) and the embedding's (at its end). Run one by one they alternate document by document, packed each runs
 * over all documents first, so the sums round differently (as PyTorch's autograd, which adds both per backward):
 * that matrix is compared to rounding, everything else bit for bit. */
static bool tied_gradient(model_kind kind, const tt_param_info *info) {
    return kind.tied && !kind.lora && info->kind == TT_PARAM_EMBED;
}

static void check_packed_equals_one_by_one(model_kind kind, const documents *docs, const step_result *alone,
                                           const memory_mode *mode) {
    step_result packed = run_packed(kind, mode, docs);
    tt_param_table params;
    trainable_params(kind, &params);
    int64_t differ = 0, first = -1, compared = 0;
    double tied_error = 0;
    for (int p = 0; p < params.count; p++) {
        const tt_param_info *info = &params.params[p];
        if (!info->trainable) continue;
        const float *a = packed.gradients + (info->offset - params.trainable_start);
        const float *b = alone->gradients + (info->offset - params.trainable_start);
        if (tied_gradient(kind, info)) {
            tied_error = tt_max_rel_error_f32(a, b, (size_t)info->numel);
            continue;
        }
        compared += info->numel;
        for (int64_t k = 0; k < info->numel; k++)
            if (memcmp(&a[k], &b[k], sizeof(float)) != 0) {
                differ++;
                if (first < 0) first = info->offset - params.trainable_start + k;
            }
    }
    const char *what = kind.lora ? "LoRA" : "full fine-tuning";
    const char *model = !kind.qwen3 ? "llama" : kind.tied ? "qwen3 (tied)" : "qwen3";
    TT_EXPECT(packed.gradient_bytes == alone->gradient_bytes, "%s %s: the same gradient layout", model, what);
    TT_EXPECT(packed.count == alone->count && packed.count == docs->label_tokens,
              "%s %s, %s: %lld label tokens packed, %lld one by one, %lld in the documents", model, what, mode->name,
              (long long)packed.count, (long long)alone->count, (long long)docs->label_tokens);
    TT_EXPECT(memcmp(&packed.loss, &alone->loss, sizeof(double)) == 0,
              "%s %s, %s: the packed loss sum %.17g is the one-by-one sum %.17g bit for bit", model, what, mode->name,
              packed.loss, alone->loss);
    TT_EXPECT(differ == 0,
              "%s %s, %s: %lld of %lld gradient values differ from the one-by-one run's (the first in %s: %.9g vs "
              "%.9g)",
              model, what, mode->name, (long long)differ, (long long)compared,
              first >= 0 ? gradient_owner(&params, first) : "", first >= 0 ? packed.gradients[first] : 0.0,
              first >= 0 ? alone->gradients[first] : 0.0);
    TT_EXPECT(tied_error < 1e-5, "%s %s, %s: the tied embedding's gradient differs by %.3g relative", model, what,
              mode->name, tied_error);
    const char *still = parameter_without_gradient(&params, packed.gradients);
    TT_EXPECT(!still, "%s %s, %s: every trainable parameter has a gradient (%s has none)", model, what, mode->name,
              still ? still : "");
    printf("  %-12s %-16s %-46s loss sum %.17g over %lld tokens; %lld gradient values %s", model, what, mode->name,
           packed.loss, (long long)packed.count, (long long)compared, differ ? "DIFFER" : "identical");
    if (kind.tied && !kind.lora) printf(", the tied embedding's to %.1e", tied_error);
    printf("\n");
    tt_param_table_free(&params);
    free(packed.gradients);
}

int main(void) {
    documents docs;
    make_documents(&docs);
    const memory_mode modes[] = {
        keep_everything,
        {"gradient checkpointing", true, TT_OFFLOAD_NONE, 0},
        {"gradient checkpointing, hidden_states offload", true, TT_OFFLOAD_HIDDEN_STATES, 0},
        {"tiled_mlp (3 shards)", false, TT_OFFLOAD_NONE, 3},
    };
    const model_kind kinds[] = {
        {.qwen3 = true, .tied = false, .lora = false}, {.qwen3 = true, .tied = true, .lora = false},
        {.qwen3 = true, .tied = true, .lora = true},   {.qwen3 = false, .tied = false, .lora = false},
        {.qwen3 = false, .tied = false, .lora = true},
    };
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        step_result alone = run_one_by_one(kinds[k], &docs);
        for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++)
            check_packed_equals_one_by_one(kinds[k], &docs, &alone, &modes[m]);
        free(alone.gradients);
    }
    return tt_test_summary("packing_exact");
}
