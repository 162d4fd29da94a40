#include "model/weights.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "core/check.h"
#include "core/input_file.h"
#include "core/rng.h"
#include "model/bnb_checkpoint.h"
#include "model/quant4.h"
#include "model/safetensors.h"

static bool is_adapter(const tt_param_info *p) { return p->kind == TT_PARAM_LORA_A || p->kind == TT_PARAM_LORA_B; }

/* Values handed to a sink at a time: 16 MiB of fp32, a whole number of init blocks and of 64-value 4-bit blocks.
 * Work smaller than one run of THREAD_RUN values stays on the calling thread: no fork-join for a norm weight (and
 * no OpenMP in a process forked after threads ran, where libgomp would hang: the tests' tt_expect_die). */
#define PIECE_VALUES ((int64_t)1 << 22)
/* A piece's conversion or quantization is cut into runs of this many values for the threads. */
#define THREAD_RUN ((int64_t)1 << 16)

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* The largest 4-bit weight of the table: its bytes and its blocks (0 when none is quantized). */
static void largest_quantized(const tt_param_table *table, size_t *bytes, int64_t *blocks) {
    *bytes = 0;
    *blocks = 0;
    for (int i = 0; i < table->count; i++) {
        const tt_param_info *p = &table->params[i];
        if (!p->quantized) continue;
        const tt_quant4_layout l = tt_quant4_layout_of(p->numel, &table->quant_format);
        if (l.bytes > *bytes) *bytes = l.bytes;
        if (l.blocks > *blocks) *blocks = l.blocks;
    }
}

/* Buffers of one load or init: a piece of fp32 values, and one 4-bit weight being made with its absmax. */
typedef struct weight_buffers {
    float *piece;             /* [PIECE_VALUES] */
    unsigned char *quantized; /* the largest 4-bit weight's bytes, or NULL */
    float *absmax;            /* its blocks' absmax before double quantization, or NULL */
} weight_buffers;

static void buffers_init(weight_buffers *b, const tt_param_table *table) {
    size_t bytes;
    int64_t blocks;
    largest_quantized(table, &bytes, &blocks);
    b->piece = tt_xmalloc(sizeof(float) * (size_t)PIECE_VALUES, "a piece of weights");
    b->quantized = bytes ? tt_xmalloc(bytes, "a 4-bit weight") : NULL;
    b->absmax = bytes && table->quant_format.double_quant
                    ? tt_xmalloc(sizeof(float) * (size_t)blocks, "the absmax of a 4-bit weight")
                    : NULL;
}

static void buffers_free(weight_buffers *b) {
    free(b->piece);
    free(b->quantized);
    free(b->absmax);
}

/* Where block absmax values go while quantizing into b->quantized: the weight's own, or the array the double
 * quantization reads. */
static float *absmax_while_quantizing(const weight_buffers *b, const tt_param_info *p, const tt_quant4_format *format) {
    return format->double_quant ? b->absmax : (float *)(b->quantized + tt_quant4_layout_of(p->numel, format).absmax);
}

/* dst[count] fp32 from src of dtype, by the threads in runs. */
static void convert_piece(float *dst, const void *src, tt_dtype dtype, int64_t count) {
    const size_t elem = tt_dtype_size(dtype);
#pragma omp parallel for schedule(static) if (count > THREAD_RUN)
    for (int64_t first = 0; first < count; first += THREAD_RUN)
        tt_convert_to_f32(dst + first, (const unsigned char *)src + (size_t)first * elem, dtype,
                          (size_t)min64(THREAD_RUN, count - first));
}

/* Quantizes values [first, first + count) of p (whole blocks, or the tensor's end) held at values. */
static void quantize_piece(const weight_buffers *b, const tt_param_info *p, const tt_quant4_format *format,
                           int64_t first, int64_t count, const float *values) {
    float *absmax = absmax_while_quantizing(b, p, format);
#pragma omp parallel for schedule(static) if (count > THREAD_RUN)
    for (int64_t run = 0; run < count; run += THREAD_RUN) {
        const int64_t n = min64(THREAD_RUN, count - run);
        tt_quant4_quantize_blocks(b->quantized, absmax, p->numel, format->type, (first + run) / TT_QUANT4_BLOCK,
                                  (n + TT_QUANT4_BLOCK - 1) / TT_QUANT4_BLOCK, values + run);
    }
}

static void finish_quantized(const weight_buffers *b, const tt_param_info *p, const tt_quant4_format *format,
                             const tt_weight_sink *sink) {
    if (format->double_quant) tt_quant4_quantize_nested(b->quantized, b->absmax, p->numel);
    sink->quantized(sink->ctx, p, b->quantized);
}

static void format_shape(char *buf, size_t size, int ndim, const int64_t *shape) {
    size_t used = (size_t)snprintf(buf, size, "[");
    for (int i = 0; i < ndim && used < size; i++)
        used += (size_t)snprintf(buf + used, size - used, i ? ", %lld" : "%lld", (long long)shape[i]);
    if (used < size) snprintf(buf + used, size - used, "]");
}

/* A 4-bit weight of the checkpoint: into the table's 4-bit format as it is, or dequantized to fp32 values for a table
 * that keeps it in the compute dtype (tiertrain merge, tiertrain dequantize). */
static void load_4bit(const weight_buffers *b, const tt_param_table *table, const tt_param_info *p,
                      const tt_st_model *model, const tt_weight_sink *sink) {
    tt_bnb_weight w;
    tt_bnb_weight_find(&w, model, p->name, p->shape[0], p->ndim == 2 ? p->shape[1] : 1);
    if (p->quantized) {
        if (w.format.type != table->quant_format.type || w.format.double_quant != table->quant_format.double_quant)
            tt_die("%s: weight '%s' is %s%s but config.json's quantization_config says %s%s; the weights and "
                   "config.json do not belong together",
                   w.file, p->name, tt_quant4_type_name(w.format.type),
                   w.format.double_quant ? " with double quantization" : " without double quantization",
                   tt_quant4_type_name(table->quant_format.type),
                   table->quant_format.double_quant ? " with double quantization" : " without double quantization");
        tt_bnb_weight_copy(&w, b->quantized);
        sink->quantized(sink->ctx, p, b->quantized);
        return;
    }
    const tt_quant4_layout l = tt_quant4_layout_of(p->numel, &w.format);
    unsigned char *bytes = tt_xmalloc(l.bytes, "a 4-bit weight");
    tt_bnb_weight_copy(&w, bytes);
    for (int64_t first = 0; first < p->numel; first += PIECE_VALUES) {
        const int64_t count = min64(PIECE_VALUES, p->numel - first);
        tt_quant4_dequantize_blocks(b->piece, bytes, p->numel, &w.format, first / TT_QUANT4_BLOCK,
                                    (count + TT_QUANT4_BLOCK - 1) / TT_QUANT4_BLOCK);
        sink->values(sink->ctx, p, first, count, b->piece);
    }
    free(bytes);
}

void tt_weights_find_float_linear(tt_model_config *config, const char *dir) {
    _Static_assert(TT_PARAM_KIND_COUNT <= 32, "a bit per parameter kind");
    tt_param_table table;
    tt_param_table_build(config, &table);
    tt_st_model model;
    tt_st_model_open(dir, &model);
    uint32_t *float_linear = NULL;
    for (int i = 0; i < table.count; i++) {
        const tt_param_info *p = &table.params[i];
        if (!tt_param_kind_is_linear_weight(p->kind) || !tt_st_model_find(&model, p->name, NULL) ||
            tt_bnb_weight_present(&model, p->name))
            continue; /* 4-bit, or missing (the loader names it) */
        if (!float_linear) float_linear = tt_xcalloc((size_t)config->num_layers, sizeof(uint32_t), "float weights");
        float_linear[p->layer] |= 1u << p->kind;
    }
    tt_st_model_close(&model);
    tt_param_table_free(&table);
    free(config->quantization.float_linear);
    config->quantization.float_linear = float_linear;
}

/* An expert's projection in a checkpoint that keeps a layer's experts as 3-D tensors, as transformers 5 holds them
 * (<layer>.mlp.experts.gate_up_proj [E, 2 Fm, D], gate's rows then up's; <layer>.mlp.experts.down_proj [E, D, Fm]):
 * a view of p's part of it in *view, or false when the checkpoint has no such tensor. A fused tensor of another shape
 * is an error naming it. */
static bool fused_expert(const tt_st_model *model, const tt_param_table *table, const tt_param_info *p, const char *dir,
                         tt_st_tensor *view, const char **file_out) {
    const char *stem_end = strstr(p->name, ".experts.");
    if (!tt_param_kind_is_expert(p->kind) || !stem_end) return false;
    const bool down = p->kind == TT_PARAM_EXPERT_DOWN;
    char name[160];
    snprintf(name, sizeof name, "%.*s.experts.%s", (int)(stem_end - p->name), p->name,
             down ? "down_proj" : "gate_up_proj");
    const char *file = NULL;
    const tt_st_tensor *t = tt_st_model_find(model, name, &file);
    if (!t) return false;
    *file_out = file;
    const int64_t parts = down ? 1 : 2; /* gate_up_proj: gate's rows, then up's */
    int64_t experts = 0;                /* the layer's, as the config makes them */
    for (int i = 0; i < table->count; i++)
        experts += table->params[i].kind == p->kind && table->params[i].layer == p->layer;
    if (t->ndim != 3 || t->shape[0] != experts || t->shape[1] != parts * p->shape[0] || t->shape[2] != p->shape[1])
        tt_die("%s: tensor '%s' has %d dimensions [%lld, %lld, ...]; a layer's fused experts are [num_experts, %lld, "
               "%lld] (config.json's num_experts, moe_intermediate_size and hidden_size)",
               file ? file : dir, name, t->ndim, (long long)t->shape[0], (long long)(t->ndim > 1 ? t->shape[1] : 0),
               (long long)(parts * p->shape[0]), (long long)p->shape[1]);
    const size_t elem = tt_dtype_size(t->dtype);
    const int64_t part = p->kind == TT_PARAM_EXPERT_UP ? 1 : 0;
    *view = *t;
    view->ndim = 2;
    view->shape[0] = p->shape[0];
    view->shape[1] = p->shape[1];
    view->data = (const unsigned char *)t->data + (size_t)((p->expert * parts + part) * p->numel) * elem;
    view->bytes = (size_t)p->numel * elem;
    return true;
}

void tt_weights_load_hf_to(const tt_param_table *table, const char *dir, const tt_weight_sink *sink) {
    tt_st_model model;
    tt_st_model_open(dir, &model);
    const bool checkpoint_4bit = tt_bnb_checkpoint_is_4bit(&model);
    weight_buffers b;
    buffers_init(&b, table);
    for (int i = 0; i < table->count; i++) {
        const tt_param_info *p = &table->params[i];
        if (is_adapter(p)) continue;
        const char *file = NULL;
        /* a head untied from a tied model starts as the embedding's copy (transformers ties them before peft copies
         * them: a stale lm_head.weight in the checkpoint is not read) */
        const bool untied_head = p->kind == TT_PARAM_LM_HEAD && table->lm_head_untied;
        const tt_st_tensor *t = tt_st_model_find(
            &model, untied_head ? tt_param_table_find(table, TT_PARAM_EMBED, -1)->name : p->name, &file);
        tt_st_tensor fused;
        if (!t && fused_expert(&model, table, p, dir, &fused, &file)) t = &fused; /* the experts as 3-D tensors */
        if (!t)
            tt_die("%s: tensor '%s' is missing from the checkpoint; its config.json describes a model that has it "
                   "(check model_type, num_hidden_layers, attention_bias and tie_word_embeddings)",
                   dir, p->name);
        if (p->ndim == 2 && tt_bnb_weight_present(&model, p->name)) {
            load_4bit(&b, table, p, &model, sink);
            continue;
        }
        bool same = t->ndim == p->ndim;
        for (int d = 0; same && d < p->ndim; d++) same = t->shape[d] == p->shape[d];
        if (!same) {
            char want[64], got[64];
            format_shape(want, sizeof want, p->ndim, p->shape);
            format_shape(got, sizeof got, t->ndim, t->shape);
            tt_die("%s: tensor '%s' has shape %s but config.json implies %s; the weights and config.json do not "
                   "belong together",
                   file, p->name, got, want);
        }
        if (t->dtype != TT_F32 && t->dtype != TT_BF16 && t->dtype != TT_F16)
            tt_die("%s: tensor '%s' is %s; tiertrain loads F32, BF16 and F16 weights, and bitsandbytes 4-bit ones",
                   file, p->name, tt_dtype_safetensors_name(t->dtype));
        if (p->quantized && checkpoint_4bit)
            tt_die("%s: tensor '%s' is %s in a 4-bit checkpoint (quantization_config's llm_int8_skip_modules kept it "
                   "unquantized), but QLoRA stores every q/k/v/o/gate/up/down weight in 4 bits; train from the "
                   "original model (adapter: qlora quantizes it at load)",
                   file, p->name, tt_dtype_safetensors_name(t->dtype));
        if (p->quantized) memset(b.quantized, 0, tt_quant4_layout_of(p->numel, &table->quant_format).bytes);
        const size_t elem = tt_dtype_size(t->dtype);
        for (int64_t first = 0; first < p->numel; first += PIECE_VALUES) {
            const int64_t count = min64(PIECE_VALUES, p->numel - first);
            convert_piece(b.piece, (const unsigned char *)t->data + (size_t)first * elem, t->dtype, count);
            if (p->quantized) quantize_piece(&b, p, &table->quant_format, first, count, b.piece);
            else sink->values(sink->ctx, p, first, count, b.piece);
        }
        if (p->quantized) finish_quantized(&b, p, &table->quant_format, sink);
    }
    buffers_free(&b);
    tt_st_model_close(&model);
}

/* PEFT's init of a LoRA adapter: A ~ kaiming_uniform(a = sqrt(5)), i.e. uniform in
 * [-1/sqrt(in), 1/sqrt(in)) for A [r, in]; B = 0, so training starts from the base model. Values [first, first +
 * count) of one stream drawn in order, into dst[count]. */
static void init_adapter(float *dst, const tt_param_info *p, tt_rng *rng, int64_t count) {
    const double bound = 1.0 / sqrt((double)p->shape[1]);
    for (int64_t k = 0; k < count; k++)
        dst[k] = p->kind == TT_PARAM_LORA_A ? (float)(bound * (2.0 * tt_rng_uniform(rng) - 1.0)) : 0.0f;
}

/* Each parameter draws from its own stream (seed, table index), so adding a parameter kind does not
 * change the others' values; adapters come after the base in the table, so they leave its streams alone. */
static tt_rng parameter_stream(uint64_t seed, int index) {
    tt_rng rng;
    tt_rng_seed(&rng, seed * 0x100000001b3ull + (uint64_t)index);
    return rng;
}

void tt_weights_init_lora(float *trainable, const tt_param_table *table, uint64_t seed) {
    for (int i = 0; i < table->count; i++)
        if (is_adapter(&table->params[i])) {
            tt_rng rng = parameter_stream(seed, i);
            init_adapter(trainable + table->params[i].offset - table->trainable_start, &table->params[i], &rng,
                         table->params[i].numel);
        }
}

/* A normal init of one matrix, std * N(0, 1), in blocks of INIT_BLOCK values: block b draws from its
 * own stream (the parameter's stream seed, b), so the blocks run in parallel and the values do not
 * depend on the thread count. An 8B model is 8.2G values: one thread took minutes. */
#define INIT_BLOCK 65536

/* Values of init block b (count of them, INIT_BLOCK but the tensor's last) into dst[count]. */
static void init_normal_block(float *dst, int64_t b, int64_t count, double std, uint64_t stream_seed) {
    tt_rng rng;
    tt_rng_seed(&rng, stream_seed ^ ((uint64_t)b * 0x9e3779b97f4a7c15ull));
    for (int64_t k = 0; k < count; k += 2) {
        double pair[2];
        tt_rng_normal_pair(&rng, pair);
        dst[k] = (float)(std * pair[0]);
        if (k + 1 < count) dst[k + 1] = (float)(std * pair[1]);
    }
}

/* Values [first, first + count) of a matrix of numel values (first a multiple of INIT_BLOCK) into dst[count]. */
static void init_normal_piece(float *dst, int64_t first, int64_t count, double std, uint64_t stream_seed) {
    const int64_t blocks = (count + INIT_BLOCK - 1) / INIT_BLOCK;
#pragma omp parallel for schedule(dynamic) if (blocks > 1)
    for (int64_t i = 0; i < blocks; i++)
        init_normal_block(dst + i * INIT_BLOCK, first / INIT_BLOCK + i, min64(INIT_BLOCK, count - i * INIT_BLOCK), std,
                          stream_seed);
}

/* A 4-bit weight drawn and quantized block by block: each thread draws an init block into its own buffer (a quarter
 * MiB, in cache) and quantizes it at once, so the values never exist whole; the bytes are those of quantizing the
 * drawn matrix, whatever the thread count. */
static void init_normal_quantized(const weight_buffers *b, const tt_param_info *p, const tt_quant4_format *format,
                                  double std, uint64_t stream_seed) {
    const int64_t blocks = (p->numel + INIT_BLOCK - 1) / INIT_BLOCK;
    float *absmax = absmax_while_quantizing(b, p, format);
    memset(b->quantized, 0, tt_quant4_layout_of(p->numel, format).bytes);
#pragma omp parallel if (blocks > 1)
    {
        float *values = tt_xmalloc(sizeof(float) * INIT_BLOCK, "an init block");
#pragma omp for schedule(dynamic)
        for (int64_t i = 0; i < blocks; i++) {
            const int64_t count = min64(INIT_BLOCK, p->numel - i * INIT_BLOCK);
            init_normal_block(values, i, count, std, stream_seed);
            tt_quant4_quantize_blocks(b->quantized, absmax, p->numel, format->type, i * (INIT_BLOCK / TT_QUANT4_BLOCK),
                                      (count + TT_QUANT4_BLOCK - 1) / TT_QUANT4_BLOCK, values);
        }
        free(values);
    }
}

void tt_weights_init_random_to(const tt_param_table *table, double std, uint64_t seed, const tt_weight_sink *sink) {
    weight_buffers b;
    buffers_init(&b, table);
    for (int i = 0; i < table->count; i++) {
        const tt_param_info *p = &table->params[i];
        tt_rng stream = parameter_stream(seed, i);
        if (p->quantized) {
            init_normal_quantized(&b, p, &table->quant_format, std, tt_rng_next(&stream));
            finish_quantized(&b, p, &table->quant_format, sink);
            continue;
        }
        const bool is_norm = tt_param_kind_is_norm(p->kind);
        const uint64_t stream_seed = is_adapter(p) || is_norm || p->ndim == 1 ? 0 : tt_rng_next(&stream);
        for (int64_t first = 0; first < p->numel; first += PIECE_VALUES) {
            const int64_t count = min64(PIECE_VALUES, p->numel - first);
            if (is_adapter(p)) init_adapter(b.piece, p, &stream, count); /* one stream in order, piece after piece */
            else if (is_norm || p->ndim == 1)
                for (int64_t k = 0; k < count; k++) b.piece[k] = is_norm ? table->norm_init : 0.0f;
            else init_normal_piece(b.piece, first, count, std, stream_seed);
            sink->values(sink->ctx, p, first, count, b.piece);
        }
    }
    buffers_free(&b);
}

/* The sink of the flat fp32 layout: values at their offsets, a 4-bit weight's bytes at its offset. */
typedef struct flat_sink {
    float *flat;
    const tt_param_table *table;
} flat_sink;

static void flat_values(void *ctx, const tt_param_info *p, int64_t first, int64_t count, const float *values) {
    const flat_sink *f = ctx;
    memcpy(f->flat + p->offset + first, values, sizeof(float) * (size_t)count);
}

static void flat_quantized(void *ctx, const tt_param_info *p, const void *bytes) {
    const flat_sink *f = ctx;
    memcpy(f->flat + p->offset, bytes, tt_quant4_layout_of(p->numel, &f->table->quant_format).bytes);
}

void tt_weights_load_hf(float *flat, const tt_param_table *table, const char *dir) {
    flat_sink f = {flat, table};
    const tt_weight_sink sink = {.values = flat_values, .quantized = flat_quantized, .ctx = &f};
    tt_weights_load_hf_to(table, dir, &sink);
}

void tt_weights_init_random(float *flat, const tt_param_table *table, double std, uint64_t seed) {
    flat_sink f = {flat, table};
    const tt_weight_sink sink = {.values = flat_values, .quantized = flat_quantized, .ctx = &f};
    tt_weights_init_random_to(table, std, seed, &sink);
}

/* Removes model files a previous save left in dir that this save does not overwrite, so a
 * directory never holds both a single file and an index (transformers would pick one). */
static void remove_stale_model_files(const char *dir, bool sharded) {
    char path[4200];
    if (sharded) {
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        unlink(path);
    } else {
        snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
        unlink(path);
    }
}

/* A Hugging Face model written a piece at a time (weights.h). */
struct tt_hf_writer {
    const tt_param_table *table;
    tt_dtype dtype;
    size_t elem;
    char *dir;
    int *shard_of;          /* [table->count]: shards are filled greedily in parameter order, as transformers does */
    int shard_count, shard; /* shard: the one open, -1 none */
    size_t total_bytes;
    tt_st_writer writer;
    json_t *weight_map;
    void *converted; /* a piece in dtype */
    int next;        /* the parameter whose values come next (table order, adapters skipped) */
    int64_t next_first;
    /* Tensors of the base checkpoint beside the language model (a vision tower, a projector), written as they are
     * after the parameters: the base's mapping, the tensors and the shard of each. */
    tt_st_model base;
    bool has_base;
    const tt_st_tensor **kept;
    int *kept_shard;
    int kept_count;
};

/* Values are converted and written in pieces of at most this many elements. */
#define HF_WRITER_PIECE ((int64_t)1 << 20)

static const char *shard_file_name(const tt_hf_writer *w, int shard, char *name, size_t size) {
    if (w->shard_count == 1) snprintf(name, size, "model.safetensors");
    else snprintf(name, size, "model-%05d-of-%05d.safetensors", shard + 1, w->shard_count);
    return name;
}

/* The next base-model parameter at or after i (table->count when none). */
static int next_base_param(const tt_param_table *t, int i) {
    while (i < t->count && is_adapter(&t->params[i])) i++;
    return i;
}

static void open_shard(tt_hf_writer *w, int shard) {
    char name[128], path[4200];
    shard_file_name(w, shard, name, sizeof name);
    tt_st_writer_init(&w->writer);
    for (int i = 0; i < w->table->count; i++) {
        const tt_param_info *p = &w->table->params[i];
        if (w->shard_of[i] != shard || is_adapter(p)) continue;
        tt_st_writer_add(&w->writer, p->name, w->dtype, p->ndim, p->shape, NULL);
        json_object_set_new(w->weight_map, p->name, json_string(name));
    }
    for (int k = 0; k < w->kept_count; k++) {
        const tt_st_tensor *t = w->kept[k];
        if (w->kept_shard[k] != shard) continue;
        tt_st_writer_add(&w->writer, t->name, t->dtype, t->ndim, t->shape, NULL);
        json_object_set_new(w->weight_map, t->name, json_string(name));
    }
    tt_st_writer_add_metadata(&w->writer, "format", "pt");
    snprintf(path, sizeof path, "%s/%s", w->dir, name);
    tt_st_writer_begin(&w->writer, path);
    w->shard = shard;
}

static void close_shard(tt_hf_writer *w) {
    if (w->shard < 0) return;
    tt_st_writer_finish(&w->writer);
    tt_st_writer_free(&w->writer);
    w->shard = -1;
}

/* Whether a checkpoint tensor belongs to the language model the table describes: its first name component is one of
 * the table's ("model" and "lm_head"; "language_model" inside a multimodal checkpoint). */
static bool in_language_model(const tt_param_table *table, const char *name) {
    const size_t head = strcspn(name, ".");
    for (int i = 0; i < table->count; i++) {
        const char *owned = table->params[i].name;
        if (strcspn(owned, ".") == head && strncmp(owned, name, head) == 0) return true;
    }
    return false;
}

/* The base checkpoint's tensors beside the language model, in its files' order, each given a shard after the
 * parameters' (filling them on as open does). */
static void keep_base_tensors(tt_hf_writer *w, const char *base_dir, size_t max_shard_bytes, size_t shard_bytes) {
    tt_st_model_open(base_dir, &w->base);
    w->has_base = true;
    int total = 0;
    for (int f = 0; f < w->base.file_count; f++) total += w->base.files[f].count;
    w->kept = tt_xcalloc((size_t)(total ? total : 1), sizeof *w->kept, "the base's other tensors");
    w->kept_shard = tt_xcalloc((size_t)(total ? total : 1), sizeof *w->kept_shard, "the base's other tensors");
    for (int f = 0; f < w->base.file_count; f++)
        for (int i = 0; i < w->base.files[f].count; i++) {
            const tt_st_tensor *t = &w->base.files[f].tensors[i];
            if (in_language_model(w->table, t->name)) continue;
            if (shard_bytes > 0 && shard_bytes + t->bytes > max_shard_bytes) {
                w->shard_count++;
                shard_bytes = 0;
            }
            w->kept[w->kept_count] = t;
            w->kept_shard[w->kept_count++] = w->shard_count - 1;
            shard_bytes += t->bytes;
            w->total_bytes += t->bytes;
        }
}

/* Writes the kept tensors' bytes, shard by shard, after the last parameter. */
static void write_kept_tensors(tt_hf_writer *w) {
    for (int k = 0; k < w->kept_count; k++) {
        if (w->shard != w->kept_shard[k]) {
            close_shard(w);
            open_shard(w, w->kept_shard[k]);
        }
        tt_st_writer_write(&w->writer, w->kept[k]->data, w->kept[k]->bytes);
    }
}

tt_hf_writer *tt_hf_writer_open(const tt_param_table *table, tt_dtype dtype, const char *dir, size_t max_shard_bytes,
                                const char *base_dir) {
    TT_CHECK(!table->quantized, "saving a 4-bit base as a Hugging Face model (a QLoRA run saves its adapters)");
    tt_hf_writer *w = tt_xcalloc(1, sizeof *w, "a model writer");
    w->table = table;
    w->dtype = dtype;
    w->elem = tt_dtype_size(dtype);
    w->dir = tt_xstrdup(dir);
    if (max_shard_bytes == 0) max_shard_bytes = TT_DEFAULT_MAX_SHARD_BYTES;
    w->shard_of = tt_xcalloc((size_t)table->count, sizeof(int), "shard assignment");
    w->shard_count = 1;
    size_t shard_bytes = 0;
    for (int i = 0; i < table->count; i++) {
        if (is_adapter(&table->params[i])) continue; /* the base model only: adapters go to PEFT's files */
        const size_t bytes = (size_t)table->params[i].numel * w->elem;
        if (shard_bytes > 0 && shard_bytes + bytes > max_shard_bytes) {
            w->shard_count++;
            shard_bytes = 0;
        }
        w->shard_of[i] = w->shard_count - 1;
        shard_bytes += bytes;
        w->total_bytes += bytes;
    }
    if (base_dir) keep_base_tensors(w, base_dir, max_shard_bytes, shard_bytes);
    w->shard = -1;
    w->weight_map = json_object();
    if (dtype != TT_F32) w->converted = tt_xmalloc((size_t)HF_WRITER_PIECE * w->elem, "converted weights");
    w->next = next_base_param(table, 0);
    return w;
}

void tt_hf_writer_values(tt_hf_writer *w, const tt_param_info *p, int64_t first, int64_t count, const float *values) {
    const int i = (int)(p - w->table->params);
    TT_CHECK(i == w->next && first == w->next_first && count >= 0 && first + count <= p->numel,
             "values of %s [%lld, %lld) out of order (next: parameter %d from %lld)", p->name, (long long)first,
             (long long)(first + count), w->next, (long long)w->next_first);
    if (w->shard != w->shard_of[i]) {
        close_shard(w);
        open_shard(w, w->shard_of[i]);
    }
    for (int64_t at = 0; at < count; at += HF_WRITER_PIECE) {
        const int64_t n = count - at < HF_WRITER_PIECE ? count - at : HF_WRITER_PIECE;
        if (w->converted) tt_convert_from_f32(w->converted, w->dtype, values + at, (size_t)n);
        tt_st_writer_write(&w->writer, w->converted ? w->converted : (const void *)(values + at), (size_t)n * w->elem);
    }
    w->next_first = first + count;
    if (w->next_first == p->numel) {
        w->next = next_base_param(w->table, i + 1);
        w->next_first = 0;
    }
}

void tt_hf_writer_close(tt_hf_writer *w, const tt_model_config *config) {
    TT_CHECK(w->next == w->table->count, "the model writer closed before parameter %d", w->next);
    write_kept_tensors(w);
    close_shard(w);
    char path[4200];
    if (w->shard_count > 1) {
        json_t *index = json_object();
        json_t *metadata = json_object();
        json_object_set_new(metadata, "total_size", json_integer((json_int_t)w->total_bytes));
        json_object_set_new(index, "metadata", metadata);
        json_object_set_new(index, "weight_map", w->weight_map);
        char *text = json_dumps(index, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        snprintf(path, sizeof path, "%s/model.safetensors.index.json", w->dir);
        tt_write_file_atomic(path, text, strlen(text));
        free(text);
        json_decref(index);
    } else {
        json_decref(w->weight_map);
    }
    remove_stale_model_files(w->dir, w->shard_count > 1);
    snprintf(path, sizeof path, "%s/config.json", w->dir);
    tt_model_config_save(config, path);
    free(w->shard_of);
    free(w->converted);
    free(w->dir);
    free(w->kept);
    free(w->kept_shard);
    if (w->has_base) tt_st_model_close(&w->base);
    free(w);
}

void tt_weights_save_hf(const float *flat, const tt_param_table *table, const tt_model_config *config, tt_dtype dtype,
                        const char *dir, size_t max_shard_bytes, const char *base_dir) {
    tt_hf_writer *w = tt_hf_writer_open(table, dtype, dir, max_shard_bytes, base_dir);
    for (int i = next_base_param(table, 0); i < table->count; i = next_base_param(table, i + 1)) {
        const tt_param_info *p = &table->params[i];
        tt_hf_writer_values(w, p, 0, p->numel, flat + p->offset);
    }
    tt_hf_writer_close(w, config);
}

static void copy_file_if_present(const char *from_dir, const char *to_dir, const char *name) {
    char from[4200], to[4200];
    snprintf(from, sizeof from, "%s/%s", from_dir, name);
    snprintf(to, sizeof to, "%s/%s", to_dir, name);
    FILE *f = tt_fopen_regular_file(from, name);
    if (!f) return;
    char *data = NULL;
    size_t size = 0, capacity = 0;
    for (;;) {
        if (size == capacity) data = tt_xrealloc(data, capacity = capacity ? 2 * capacity : 65536, name);
        const size_t got = fread(data + size, 1, capacity - size, f);
        size += got;
        if (got == 0) break;
    }
    const int failed = ferror(f);
    fclose(f);
    if (failed) tt_die("cannot read %s", from);
    tt_write_file_atomic(to, data, size);
    free(data);
}

void tt_weights_copy_companion_files(const char *from_dir, const char *to_dir) {
    static const char *const companions[] = {"generation_config.json",  "tokenizer.json", "tokenizer_config.json",
                                             "special_tokens_map.json", "vocab.json",     "merges.txt",
                                             "tokenizer.model"};
    for (size_t i = 0; i < sizeof companions / sizeof companions[0]; i++)
        copy_file_if_present(from_dir, to_dir, companions[i]);
}
