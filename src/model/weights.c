#include "model/weights.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "core/check.h"
#include "core/rng.h"
#include "model/quant4.h"
#include "model/safetensors.h"

static void format_shape(char *buf, size_t size, int ndim, const int64_t *shape) {
    size_t used = (size_t)snprintf(buf, size, "[");
    for (int i = 0; i < ndim && used < size; i++)
        used += (size_t)snprintf(buf + used, size - used, i ? ", %lld" : "%lld", (long long)shape[i]);
    if (used < size) snprintf(buf + used, size - used, "]");
}

static bool is_adapter(const tt_param_info *p) { return p->kind == TT_PARAM_LORA_A || p->kind == TT_PARAM_LORA_B; }

/* A 4-bit weight's place in the host flat buffer: its bytes (the compute copy's, see params.h). */
static void *quantized_home(float *flat, const tt_param_info *p) { return flat + p->offset; }

/* A quantized parameter goes through fp32 values of one tensor at a time, quantized into its place: the whole
 * model never exists in 16 or 32 bits on the host. */
static float *quantize_scratch(const tt_param_table *table) {
    int64_t largest = 0;
    for (int i = 0; i < table->count; i++)
        if (table->params[i].quantized && table->params[i].numel > largest) largest = table->params[i].numel;
    return largest ? tt_xmalloc(tt_mul_size((size_t)largest, sizeof(float), "a weight to quantize"), "a weight to quantize")
                   : NULL;
}

void tt_weights_load_hf(float *flat, const tt_param_table *table, const char *dir) {
    tt_st_model model;
    tt_st_model_open(dir, &model);
    float *scratch = quantize_scratch(table);
    for (int i = 0; i < table->count; i++) {
        const tt_param_info *p = &table->params[i];
        if (is_adapter(p)) continue;
        const char *file = NULL;
        const tt_st_tensor *t = tt_st_model_find(&model, p->name, &file);
        if (!t)
            tt_die("%s: tensor '%s' is missing from the checkpoint; its config.json describes a model that has it "
                   "(check model_type, num_hidden_layers, attention_bias and tie_word_embeddings)",
                   dir, p->name);
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
            tt_die("%s: tensor '%s' is %s; tiertrain loads F32, BF16 and F16 weights", file, p->name,
                   tt_dtype_safetensors_name(t->dtype));
        if (p->quantized) {
            tt_convert_to_f32(scratch, t->data, t->dtype, (size_t)p->numel);
            tt_quant4_quantize(quantized_home(flat, p), scratch, p->numel, &table->quant_format);
        } else {
            tt_convert_to_f32(flat + p->offset, t->data, t->dtype, (size_t)p->numel);
        }
    }
    free(scratch);
    tt_st_model_close(&model);
}

/* PEFT's init of a LoRA adapter: A ~ kaiming_uniform(a = sqrt(5)), i.e. uniform in
 * [-1/sqrt(in), 1/sqrt(in)) for A [r, in]; B = 0, so training starts from the base model. */
static void init_adapter(float *dst, const tt_param_info *p, tt_rng *rng) {
    const double bound = 1.0 / sqrt((double)p->shape[1]);
    for (int64_t k = 0; k < p->numel; k++)
        dst[k] = p->kind == TT_PARAM_LORA_A ? (float)(bound * (2.0 * tt_rng_uniform(rng) - 1.0)) : 0.0f;
}

/* Each parameter draws from its own stream (seed, table index), so adding a parameter kind does not
 * change the others' values; adapters come after the base in the table, so they leave its streams alone. */
static tt_rng parameter_stream(uint64_t seed, int index) {
    tt_rng rng;
    tt_rng_seed(&rng, seed * 0x100000001b3ull + (uint64_t)index);
    return rng;
}

void tt_weights_init_lora(float *flat, const tt_param_table *table, uint64_t seed) {
    for (int i = 0; i < table->count; i++)
        if (is_adapter(&table->params[i])) {
            tt_rng rng = parameter_stream(seed, i);
            init_adapter(flat + table->params[i].offset, &table->params[i], &rng);
        }
}

/* A normal init of one matrix, std * N(0, 1), in blocks of INIT_BLOCK values: block b draws from its
 * own stream (the parameter's stream seed, b), so the blocks run in parallel and the values do not
 * depend on the thread count. An 8B model is 8.2G values: one thread took minutes. */
#define INIT_BLOCK 65536

static void init_normal(float *dst, int64_t numel, double std, uint64_t stream_seed) {
    const int64_t blocks = (numel + INIT_BLOCK - 1) / INIT_BLOCK;
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < blocks; b++) {
        tt_rng rng;
        tt_rng_seed(&rng, stream_seed ^ ((uint64_t)b * 0x9e3779b97f4a7c15ull));
        const int64_t end = (b + 1) * INIT_BLOCK < numel ? (b + 1) * INIT_BLOCK : numel;
        for (int64_t k = b * INIT_BLOCK; k < end; k += 2) {
            double pair[2];
            tt_rng_normal_pair(&rng, pair);
            dst[k] = (float)(std * pair[0]);
            if (k + 1 < end) dst[k + 1] = (float)(std * pair[1]);
        }
    }
}

void tt_weights_init_random(float *flat, const tt_param_table *table, double std, uint64_t seed) {
    float *scratch = quantize_scratch(table);
    for (int i = 0; i < table->count; i++) {
        const tt_param_info *p = &table->params[i];
        float *dst = p->quantized ? scratch : flat + p->offset; /* a 4-bit weight: drawn as before, then quantized */
        if (is_adapter(p)) {
            tt_rng rng = parameter_stream(seed, i);
            init_adapter(dst, p, &rng);
            continue;
        }
        const bool is_norm = p->kind == TT_PARAM_ATTN_NORM || p->kind == TT_PARAM_MLP_NORM ||
                             p->kind == TT_PARAM_Q_NORM || p->kind == TT_PARAM_K_NORM ||
                             p->kind == TT_PARAM_FINAL_NORM;
        if (is_norm || p->ndim == 1) {
            for (int64_t k = 0; k < p->numel; k++) dst[k] = is_norm ? 1.0f : 0.0f;
            continue;
        }
        tt_rng stream = parameter_stream(seed, i);
        init_normal(dst, p->numel, std, tt_rng_next(&stream));
        if (p->quantized) tt_quant4_quantize(quantized_home(flat, p), scratch, p->numel, &table->quant_format);
    }
    free(scratch);
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

void tt_weights_save_hf(const float *flat, const tt_param_table *table, const tt_model_config *config,
                        tt_dtype dtype, const char *dir, size_t max_shard_bytes) {
    TT_CHECK(!table->quantized, "saving a 4-bit base as a Hugging Face model (a QLoRA run saves its adapters)");
    const size_t elem = tt_dtype_size(dtype);
    if (max_shard_bytes == 0) max_shard_bytes = TT_DEFAULT_MAX_SHARD_BYTES;
    void *converted = NULL;
    if (dtype != TT_F32) {
        converted = tt_xmalloc(tt_mul_size((size_t)table->total_numel, elem, "converted weights"), "converted weights");
        tt_convert_from_f32(converted, dtype, flat, (size_t)table->total_numel);
    }
    /* Shards are filled greedily in parameter order, as transformers does. */
    int *shard_of = tt_xcalloc((size_t)table->count, sizeof(int), "shard assignment");
    int shard_count = 1;
    size_t shard_bytes = 0, total_bytes = 0;
    for (int i = 0; i < table->count; i++) {
        if (is_adapter(&table->params[i])) continue; /* the base model only: adapters go to PEFT's files */
        size_t bytes = (size_t)table->params[i].numel * elem;
        if (shard_bytes > 0 && shard_bytes + bytes > max_shard_bytes) {
            shard_count++;
            shard_bytes = 0;
        }
        shard_of[i] = shard_count - 1;
        shard_bytes += bytes;
        total_bytes += bytes;
    }
    char path[4200], file_name[128];
    json_t *weight_map = json_object();
    for (int shard = 0; shard < shard_count; shard++) {
        tt_st_writer writer;
        tt_st_writer_init(&writer);
        if (shard_count == 1)
            snprintf(file_name, sizeof file_name, "model.safetensors");
        else
            snprintf(file_name, sizeof file_name, "model-%05d-of-%05d.safetensors", shard + 1, shard_count);
        for (int i = 0; i < table->count; i++) {
            if (shard_of[i] != shard || is_adapter(&table->params[i])) continue;
            const tt_param_info *p = &table->params[i];
            const void *data = converted ? (const unsigned char *)converted + (size_t)p->offset * elem
                                         : (const void *)(flat + p->offset);
            tt_st_writer_add(&writer, p->name, dtype, p->ndim, p->shape, data);
            json_object_set_new(weight_map, p->name, json_string(file_name));
        }
        tt_st_writer_add_metadata(&writer, "format", "pt");
        snprintf(path, sizeof path, "%s/%s", dir, file_name);
        tt_st_writer_commit(&writer, path);
        tt_st_writer_free(&writer);
    }
    if (shard_count > 1) {
        json_t *index = json_object();
        json_t *metadata = json_object();
        json_object_set_new(metadata, "total_size", json_integer((json_int_t)total_bytes));
        json_object_set_new(index, "metadata", metadata);
        json_object_set_new(index, "weight_map", weight_map);
        char *text = json_dumps(index, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
        tt_write_file_atomic(path, text, strlen(text));
        free(text);
        json_decref(index);
    } else {
        json_decref(weight_map);
    }
    remove_stale_model_files(dir, shard_count > 1);
    free(shard_of);
    free(converted);
    snprintf(path, sizeof path, "%s/config.json", dir);
    tt_model_config_save(config, path);
}
