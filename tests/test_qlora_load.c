/* Loading a QLoRA base: random init and quantization give the same bytes whatever the thread count and the same as
 * drawing the fp32 matrix and quantizing it (the values of before the fused path); the 4-bit weights take exactly
 * their bytes in the layout; the piece-by-piece loader (tt_model_loader) puts the same bits where a whole fp32 flat
 * buffer would, on the compute tier and in layer_offloading's pinned copy. A checkpoint saved in bitsandbytes' 4-bit
 * format (tests/fixtures/quant4/model, tools/make_nf4_fixture.py --model-dirs) loads as the same bytes as quantizing
 * its bf16 source, dequantizes to the same values, and each corruption of it is a clear error. */
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "memory/plan.h"
#include "config/run_translation.h"
#include "model/dequantized_export.h"
#include "model/model_config.h"
#include "model/params.h"
#include "model/safetensors.h"
#include "model/quant4.h"
#include "model/weights.h"
#include "test_backend.h"
#include "test_util.h"
#include "tiny_model.h"
#include "train/model_setup.h"
#include "train/step.h"

/* A shape whose matrices span several init blocks (65536 values) and whose odd sizes end blocks short. */
static tt_model_config wide_config(void) {
    tt_model_config c = tt_test_tiny_config(true);
    c.hidden_size = 200;
    c.intermediate_size = 333 * 2;
    c.num_heads = 5;
    c.num_kv_heads = 1;
    c.head_dim = 40;
    c.num_layers = 2;
    return c;
}

static tt_trainable_spec qlora_spec(bool double_quant, tt_quant4_type type, size_t elem) {
    return (tt_trainable_spec){.lora_rank = 2,
                               .lora_alpha = 4,
                               .lora_targets = TT_LORA_SEPARATE_MODULES,
                               .quantize_base = true,
                               .quant_format = {.type = type, .double_quant = double_quant},
                               .quant_storage_elem = elem};
}

static float *init_flat(const tt_param_table *t, int threads) {
    const int outer = omp_get_max_threads();
    omp_set_num_threads(threads);
    float *flat = calloc((size_t)t->total_numel, sizeof(float));
    tt_weights_init_random(flat, t, 0.02, 77);
    omp_set_num_threads(outer);
    return flat;
}

static void check_init_bytes(bool double_quant, tt_quant4_type type) {
    const tt_model_config config = wide_config();
    const tt_trainable_spec spec = qlora_spec(double_quant, type, 4);
    tt_param_table quantized, plain;
    tt_param_table_build_trainable(&config, &spec, &quantized);
    tt_trainable_spec lora = spec;
    lora.quantize_base = false;
    tt_param_table_build_trainable(&config, &lora, &plain);
    float *one = init_flat(&quantized, 1), *three = init_flat(&quantized, 3), *values = init_flat(&plain, 2);
    TT_EXPECT(memcmp(one, three, sizeof(float) * (size_t)quantized.total_numel) == 0,
              "random init: the same bytes with 1 and 3 threads (%s, double %d)", type == TT_QUANT4_NF4 ? "nf4" : "fp4",
              double_quant);
    /* each 4-bit weight is the drawn fp32 matrix quantized whole; everything else the same values */
    int checked = 0;
    for (int i = 0; i < quantized.count; i++) {
        const tt_param_info *q = &quantized.params[i], *p = &plain.params[i];
        if (!q->quantized) {
            TT_EXPECT(memcmp(one + q->offset, values + p->offset, sizeof(float) * (size_t)p->numel) == 0,
                      "%s: the values of the unquantized table", q->name);
            continue;
        }
        const size_t bytes = tt_quant4_layout_of(q->numel, &quantized.quant_format).bytes;
        unsigned char *expected = malloc(bytes);
        tt_quant4_quantize(expected, values + p->offset, p->numel, &quantized.quant_format);
        TT_EXPECT(memcmp(expected, one + q->offset, bytes) == 0, "%s: drawn then quantized whole", q->name);
        free(expected);
        checked++;
    }
    TT_EXPECT(checked == 14, "%d 4-bit weights", checked);
    free(one);
    free(three);
    free(values);
    tt_param_table_free(&quantized);
    tt_param_table_free(&plain);
}

/* In a bf16 layout the 4-bit weights of a layer sit back to back and take exactly their bytes. */
static void check_layout(void) {
    const tt_model_config config = wide_config();
    const tt_trainable_spec spec = qlora_spec(true, TT_QUANT4_NF4, 2);
    tt_param_table t;
    tt_param_table_build_trainable(&config, &spec, &t);
    size_t four_bit = 0, other = 0, others = 0;
    const tt_param_info *previous = NULL;
    for (int i = 0; i < t.count; i++) {
        const tt_param_info *p = &t.params[i];
        if (p->trainable) continue;
        if (p->quantized) {
            const size_t bytes = tt_quant4_layout_of(p->numel, &t.quant_format).bytes;
            TT_EXPECT((size_t)p->storage_numel * 2 == bytes && p->offset * 2 % 16 == 0,
                      "%s: %lld elements for %zu bytes", p->name, (long long)p->storage_numel, bytes);
            if (previous && previous->quantized)
                TT_EXPECT(p->offset == previous->offset + previous->storage_numel, "%s follows %s with no gap", p->name,
                          previous->name);
            four_bit += bytes;
        } else {
            TT_EXPECT(p->offset % 64 == 0, "%s 64-element aligned", p->name);
            other += (size_t)p->numel * 2;
            others++;
        }
        previous = p;
    }
    /* the only gaps: the 64-element (128-byte) alignment of the bf16 parameters and of the part's end */
    const size_t frozen = (size_t)t.trainable_start * 2;
    TT_EXPECT(frozen >= four_bit + other && frozen - four_bit - other < 128 * (others + 2),
              "frozen part %zu bytes: %zu of 4-bit weights, %zu of bf16", frozen, four_bit, other);
    tt_param_table_free(&t);
}

static void open_state(tt_model_state *s, bool stream_frozen) {
    tt_model_config config = wide_config();
    tt_run_config run;
    tt_run_config_defaults(&run);
    run.micro_batch_size = 1;
    run.sequence_len = 6;
    run.loss_chunk_size = 6;
    const tt_precision fp32 = tt_precision_for_run(&run, false);
    tt_plan plan;
    tt_plan_from_config(&plan, &run, &config, TT_TIER_HOST, &fp32);
    tt_run_config_free(&run);
    plan.stream_frozen_layers = stream_frozen;
    const tt_trainable_spec spec = qlora_spec(true, TT_QUANT4_NF4, 4);
    tt_model_state_init_trainable(s, &config, &plan, &spec, tt_test_cpu_backend(), 0);
}

/* The loader against tt_model_set_weights of a whole fp32 flat buffer: the same frozen bytes and trainable values. */
static void check_loader(bool stream_frozen) {
    tt_model_state whole, pieces;
    open_state(&whole, stream_frozen);
    open_state(&pieces, stream_frozen);
    float *flat = calloc((size_t)whole.params.total_numel, sizeof(float));
    tt_weights_init_random(flat, &whole.params, 0.02, 5);
    tt_model_set_weights(&whole, flat);
    float *trainable = calloc((size_t)pieces.params.trainable_numel, sizeof(float));
    tt_model_loader loader;
    const tt_weight_sink sink = tt_model_loader_begin(&loader, &pieces, trainable);
    tt_weights_init_random_to(&pieces.params, 0.02, 5, &sink);
    tt_model_loader_end(&loader);
    TT_EXPECT(memcmp(trainable, flat + pieces.params.trainable_start,
                     sizeof(float) * (size_t)pieces.params.trainable_numel) == 0,
              "the adapters' values");
    tt_model_set_trainable_weights(&pieces, trainable);
    if (!stream_frozen) {
        TT_EXPECT(memcmp(whole.weights, pieces.weights, sizeof(float) * (size_t)whole.params.total_numel) == 0,
                  "the compute tier's weights");
    } else {
        TT_EXPECT(memcmp(whole.frozen_host, pieces.frozen_host, whole.sizes.streamed_weights_host) == 0 &&
                      whole.sizes.streamed_weights_host == 4 * (size_t)whole.params.trainable_start,
                  "layer_offloading's pinned copy");
        TT_EXPECT(memcmp(whole.trainable_weights, pieces.trainable_weights,
                         sizeof(float) * (size_t)whole.params.trainable_numel) == 0,
                  "the compute tier's adapters");
    }
    /* and the same step */
    int64_t count = 0;
    for (int64_t i = 0; i < 6; i++) {
        whole.batch_inputs[i] = pieces.batch_inputs[i] = (int32_t)(i * 7 % whole.config.vocab_size);
        whole.batch_targets[i] = pieces.batch_targets[i] = (int32_t)(i * 3 % whole.config.vocab_size);
    }
    const double a = tt_step_forward_loss(&whole, &count), b = tt_step_forward_loss(&pieces, &count);
    TT_EXPECT(a == b && a > 0, "loss %.9g and %.9g (layer_offloading %d)", a, b, stream_frozen);
    free(flat);
    free(trainable);
    tt_model_state_free(&whole);
    tt_model_state_free(&pieces);
}

static const char *source_dir;

static char *fixture(const char *name) {
    char *path = malloc(4200);
    snprintf(path, 4200, "%s/tests/fixtures/quant4/model/%s", source_dir, name);
    return path;
}

static void load_config(const char *dir, tt_model_config *config) {
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", dir);
    tt_model_config_load(path, config);
}

/* The table of a QLoRA run on dir's model in `format` (fp32 layout), and its weights loaded from dir. */
static float *load_qlora(const char *dir, const tt_quant4_format *format, tt_param_table *table) {
    tt_model_config config;
    load_config(dir, &config);
    const tt_trainable_spec spec = qlora_spec(format->double_quant, format->type, 4);
    tt_param_table_build_trainable(&config, &spec, table);
    float *flat = calloc((size_t)table->total_numel, sizeof(float));
    tt_weights_load_hf(flat, table, dir);
    tt_model_config_free(&config);
    return flat;
}

/* The bitsandbytes checkpoint against its bf16 source quantized here: the same bytes, the other tensors the same values,
 * the same dequantized weights; and dequantized by a table that keeps it in fp32 (merge, tiertrain dequantize). */
static void check_checkpoint(const char *name, tt_quant4_type type, bool double_quant) {
    char *bnb = fixture(name), *bf16 = fixture("bf16");
    tt_model_config config;
    load_config(bnb, &config);
    TT_EXPECT(config.quantization.present && strcmp(config.quantization.method, "bitsandbytes") == 0 &&
                  config.quantization.load_in_4bit && config.quantization.format.type == type &&
                  config.quantization.format.double_quant == double_quant,
              "%s: quantization_config read", name);
    const tt_quant4_format format = config.quantization.format;
    tt_param_table from_bnb, from_bf16;
    float *a = load_qlora(bnb, &format, &from_bnb), *b = load_qlora(bf16, &format, &from_bf16);
    TT_EXPECT(from_bnb.total_numel == from_bf16.total_numel &&
                  memcmp(a, b, sizeof(float) * (size_t)from_bnb.total_numel) == 0,
              "%s: the same bytes as quantizing the bf16 model", name);
    /* dequantized: the fp32 loader's values are the 4-bit weights dequantized */
    tt_param_table plain;
    tt_param_table_build(&config, &plain);
    float *values = calloc((size_t)plain.total_numel, sizeof(float));
    tt_weights_load_hf(values, &plain, bnb);
    int quantized = 0;
    for (int i = 0; i < from_bnb.count; i++) {
        const tt_param_info *q = &from_bnb.params[i];
        const tt_param_info *p = tt_param_table_find(&plain, q->kind, q->layer);
        if (!q->quantized || !p) continue;
        float *expected = malloc(sizeof(float) * (size_t)q->numel);
        tt_quant4_dequantize(expected, b + q->offset, q->numel, &format);
        TT_EXPECT(memcmp(expected, values + p->offset, sizeof(float) * (size_t)q->numel) == 0,
                  "%s: %s dequantized as quantizing the bf16 weight gives", name, q->name);
        free(expected);
        quantized++;
    }
    TT_EXPECT(quantized == 7, "%s: %d 4-bit weights", name, quantized);
    /* tiertrain dequantize: the same model from the checkpoint and from its bf16 source */
    char *out_bnb = tt_test_path(name), *out_bf16 = tt_test_path("dequantized_bf16");
    mkdir(out_bnb, 0755);
    mkdir(out_bf16, 0755);
    tt_export_dequantized(bnb, NULL, out_bnb, 0);
    tt_export_dequantized(bf16, &format, out_bf16, 0);
    char pa[4300], pb[4300];
    snprintf(pa, sizeof pa, "%s/model.safetensors", out_bnb);
    snprintf(pb, sizeof pb, "%s/model.safetensors", out_bf16);
    tt_st_file fa, fb;
    tt_st_open(pa, &fa);
    tt_st_open(pb, &fb);
    bool same = fa.count == fb.count && fa.count > 0;
    for (int i = 0; same && i < fa.count; i++) {
        const tt_st_tensor *t = tt_st_find(&fb, fa.tensors[i].name);
        same = t && t->bytes == fa.tensors[i].bytes && memcmp(t->data, fa.tensors[i].data, t->bytes) == 0;
    }
    TT_EXPECT(same, "%s: tiertrain dequantize gives the same model from the checkpoint and from the bf16 one", name);
    snprintf(pa, sizeof pa, "%s/config.json", out_bnb);
    tt_model_config written;
    tt_model_config_load(pa, &written);
    TT_EXPECT(!written.quantization.present, "%s: the dequantized model's config.json has no quantization_config",
              name);
    tt_model_config_free(&written);
    tt_st_close(&fa);
    tt_st_close(&fb);
    free(out_bnb);
    free(out_bf16);
    free(values);
    free(a);
    free(b);
    tt_param_table_free(&plain);
    tt_param_table_free(&from_bnb);
    tt_param_table_free(&from_bf16);
    tt_model_config_free(&config);
    free(bnb);
    free(bf16);
}

static const char *load_skip_dir;

static void load_without_mask(void *arg) {
    (void)arg;
    tt_param_table table;
    float *flat = load_qlora(load_skip_dir, &(tt_quant4_format){.type = TT_QUANT4_NF4, .double_quant = true}, &table);
    free(flat);
}

/* A checkpoint that keeps some linear weights in bf16 (llm_int8_skip_modules: down_proj of layer 0 and every
 * v_proj, as Unsloth's dynamic 4-bit saves keep some layers): read from its tensors, those two stay bf16 in the
 * layout with the bf16 source's values, the five others are the bytes of quantizing the bf16 source, and a table that
 * quantizes every linear weight (a run that ignored the mask) is refused by name. */
static void check_float_linear(void) {
    char *skip = fixture("bnb_nf4_skip"), *dq = fixture("bnb_nf4_dq");
    tt_model_config config;
    load_config(skip, &config);
    TT_EXPECT(config.quantization.float_linear == NULL, "the mask is read from the tensors, not config.json");
    tt_weights_find_float_linear(&config, skip);
    TT_EXPECT(config.quantization.float_linear &&
                  config.quantization.float_linear[0] == ((1u << TT_PARAM_WV) | (1u << TT_PARAM_W_DOWN)),
              "v_proj and down_proj of layer 0 are kept in float (mask %#x)",
              config.quantization.float_linear ? config.quantization.float_linear[0] : 0u);
    tt_model_config every_4bit;
    load_config(dq, &every_4bit);
    tt_weights_find_float_linear(&every_4bit, dq);
    TT_EXPECT(every_4bit.quantization.float_linear == NULL, "a checkpoint with every linear weight in 4 bits: none");

    tt_trainable_spec spec = qlora_spec(true, TT_QUANT4_NF4, 4);
    spec.float_linear = config.quantization.float_linear;
    tt_param_table table, reference;
    tt_param_table_build_trainable(&config, &spec, &table);
    float *got = calloc((size_t)table.total_numel, sizeof(float));
    tt_weights_load_hf(got, &table, skip);
    float *want = load_qlora(dq, &config.quantization.format, &reference);
    tt_param_table plain;
    tt_param_table_build(&config, &plain);
    char *bf16 = fixture("bf16");
    float *values = calloc((size_t)plain.total_numel, sizeof(float));
    tt_weights_load_hf(values, &plain, bf16);
    int kept = 0, quantized = 0;
    for (int i = 0; i < table.count; i++) {
        const tt_param_info *p = &table.params[i];
        if (!tt_param_kind_is_linear_weight(p->kind)) continue;
        const tt_param_info *r = tt_param_table_find(&reference, p->kind, p->layer);
        const tt_param_info *v = tt_param_table_find(&plain, p->kind, p->layer);
        if (p->quantized) {
            quantized++;
            TT_EXPECT(r && r->quantized &&
                          memcmp(got + p->offset, want + r->offset, sizeof(float) * (size_t)p->storage_numel) == 0,
                      "%s: the bytes of quantizing the bf16 weight", p->name);
        } else {
            kept++;
            TT_EXPECT(p->storage_numel == p->numel && v &&
                          memcmp(got + p->offset, values + v->offset, sizeof(float) * (size_t)p->numel) == 0,
                      "%s: kept in bf16 with the source's values", p->name);
        }
    }
    TT_EXPECT(kept == 2 && quantized == 5, "%d kept in float, %d in 4 bits", kept, quantized);
    /* without the mask every linear weight is 4-bit in the layout: the checkpoint's bf16 v_proj is refused */
    load_skip_dir = skip;
    tt_expect_die(load_without_mask, NULL, "is BF16 in a 4-bit checkpoint");
    free(values);
    free(got);
    free(want);
    free(bf16);
    tt_param_table_free(&plain);
    tt_param_table_free(&table);
    tt_param_table_free(&reference);
    tt_model_config_free(&every_4bit);
    tt_model_config_free(&config);
    free(skip);
    free(dq);
}

/* A corrupted copy of the NF4 checkpoint: one tensor left out (drop), or replaced by dtype/shape/data (name), or the
 * config.json text with one substring replaced. */
typedef struct variant {
    const char *tag;
    const char *drop;
    const char *name;
    tt_dtype dtype;
    int ndim;
    int64_t shape[2];
    const void *data;
    const char *config_from, *config_to;
} variant;

static char *make_variant(const variant *v) {
    char *src = fixture("bnb_nf4_dq"), path[4300];
    char *dir = tt_test_path(v->tag);
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/model.safetensors", src);
    tt_st_file f;
    tt_st_open(path, &f);
    tt_st_writer w;
    tt_st_writer_init(&w);
    for (int i = 0; i < f.count; i++) {
        const tt_st_tensor *t = &f.tensors[i];
        if (v->drop && strcmp(t->name, v->drop) == 0) continue;
        if (v->name && strcmp(t->name, v->name) == 0)
            tt_st_writer_add(&w, t->name, v->dtype, v->ndim, v->shape, v->data);
        else tt_st_writer_add(&w, t->name, t->dtype, t->ndim, t->shape, t->data);
    }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    tt_st_writer_commit(&w, path);
    tt_st_writer_free(&w);
    tt_st_close(&f);
    snprintf(path, sizeof path, "%s/config.json", src);
    FILE *in = fopen(path, "rb");
    char text[8192];
    const size_t n = fread(text, 1, sizeof text - 1, in);
    fclose(in);
    text[n] = 0;
    char out[8400];
    const char *at = v->config_from ? strstr(text, v->config_from) : NULL;
    if (at) snprintf(out, sizeof out, "%.*s%s%s", (int)(at - text), text, v->config_to, at + strlen(v->config_from));
    else snprintf(out, sizeof out, "%s", text);
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *o = fopen(path, "wb");
    fputs(out, o);
    fclose(o);
    free(src);
    return dir;
}

static void load_as_qlora(void *dir) {
    tt_model_config config;
    load_config(dir, &config);
    char path[4300];
    snprintf(path, sizeof path, "%s/config.json", (const char *)dir);
    tt_model_config_check_quantization(&config, path);
    tt_param_table table;
    free(load_qlora(dir, &config.quantization.format, &table));
}

static void check_corruptions(void) {
    char *src = fixture("bnb_nf4_dq"), path[4300];
    snprintf(path, sizeof path, "%s/model.safetensors", src);
    tt_st_file f;
    tt_st_open(path, &f);
    const char *q = "model.layers.0.self_attn.q_proj.weight";
    char key[160];
    snprintf(key, sizeof key, "%s.quant_state.bitsandbytes__nf4", q);
    const tt_st_tensor *state = tt_st_find(&f, key);
    const tt_st_tensor *codes = tt_st_find(&f, q);
    TT_EXPECT(state && codes, "the fixture has %s and its quant_state", q);
    if (!state || !codes) return;
    /* quant_state JSON variants: blocksize 128, another shape, no nested_offset, not JSON */
    char json[1024];
    snprintf(json, sizeof json, "%.*s", (int)state->bytes, (const char *)state->data);
    char blocksize[1024], shape[1024], offsetless[1024], plain[1024];
    char *at = strstr(json, "\"blocksize\": 64");
    snprintf(blocksize, sizeof blocksize, "%.*s\"blocksize\": 128%s", (int)(at - json), json, at + 15);
    at = strstr(json, "\"shape\": [64, 64]");
    snprintf(shape, sizeof shape, "%.*s\"shape\": [32, 128]%s", (int)(at - json), json, at + 17);
    at = strstr(json, ", \"nested_offset\"");
    snprintf(offsetless, sizeof offsetless, "%.*s}", (int)(at - json), json);
    at = strstr(json, ", \"nested_blocksize\"");
    snprintf(plain, sizeof plain, "%.*s}", (int)(at - json), json);
    const char *garbage = "{\"quant_type\": \"nf4\", \"blocksize\": 6";
    float map[16];
    memcpy(map, tt_st_find(&f, "model.layers.0.self_attn.q_proj.weight.quant_map")->data, sizeof map);
    map[3] *= 1.01f;
    const float absmax_f32[64] = {0};
    char mlp_state[160];
    snprintf(mlp_state, sizeof mlp_state, "model.layers.0.mlp.up_proj.weight.quant_state.bitsandbytes__nf4");
    uint16_t bf16_weight[128 * 64] = {0}; /* up_proj: [intermediate 128, hidden 64] */
    char absmax_name[160], nested_name[160], nested_map_name[160], map_name[160];
    snprintf(absmax_name, sizeof absmax_name, "%s.absmax", q);
    snprintf(nested_name, sizeof nested_name, "%s.nested_absmax", q);
    snprintf(nested_map_name, sizeof nested_map_name, "%s.nested_quant_map", q);
    snprintf(map_name, sizeof map_name, "%s.quant_map", q);
    const struct {
        variant v;
        const char *needle;
    } cases[] = {
        {{.tag = "short_codes", .name = q, .dtype = TT_U8, .ndim = 2, .shape = {2047, 1}, .data = codes->data},
         "packs into 2048 bytes"},
        {{.tag = "no_absmax", .drop = absmax_name},
         "q_proj.weight.absmax' (the 8-bit codes of each block's absmax) is missing"},
        {{.tag = "absmax_f32", .name = absmax_name, .dtype = TT_F32, .ndim = 1, .shape = {64}, .data = absmax_f32},
         "needs U8 with 64 elements"},
        {{.tag = "no_nested", .drop = nested_name}, "nested_absmax' (each absmax block's scale) is missing"},
        {{.tag = "no_nested_map", .drop = nested_map_name}, "nested_quant_map' (the dynamic map) is missing"},
        {{.tag = "no_map", .drop = map_name}, "quant_map' (the 4-bit code's values) is missing"},
        {{.tag = "bad_map", .name = map_name, .dtype = TT_F32, .ndim = 1, .shape = {16}, .data = map},
         "gives code 3 the value"},
        {{.tag = "no_state", .drop = key}, "its quant_state, is missing"},
        {{.tag = "bad_json",
          .name = key,
          .dtype = TT_U8,
          .ndim = 1,
          .shape = {(int64_t)strlen(garbage)},
          .data = garbage},
         "is not a JSON object"},
        {{.tag = "blocksize",
          .name = key,
          .dtype = TT_U8,
          .ndim = 1,
          .shape = {(int64_t)strlen(blocksize)},
          .data = blocksize},
         "quantized in blocks of 128 values"},
        {{.tag = "state_shape", .name = key, .dtype = TT_U8, .ndim = 1, .shape = {(int64_t)strlen(shape)}, .data = shape},
         "has shape [32,128] in its quant_state but config.json implies [64, 64]"},
        {{.tag = "no_offset",
          .name = key,
          .dtype = TT_U8,
          .ndim = 1,
          .shape = {(int64_t)strlen(offsetless)},
          .data = offsetless},
         "has nested_blocksize but no finite number \"nested_offset\""},
        {{.tag = "no_nested_keys",
          .name = key,
          .dtype = TT_U8,
          .ndim = 1,
          .shape = {(int64_t)strlen(plain)},
          .data = plain},
         "has a nested_absmax but its quant_state has no nested_offset"},
        {{.tag = "fp4_config",
          .config_from = "\"bnb_4bit_quant_type\": \"nf4\"",
          .config_to = "\"bnb_4bit_quant_type\": \"fp4\""},
         "is nf4 with double quantization but config.json's quantization_config says fp4"},
        {{.tag = "bf16_in_4bit",
          .drop = mlp_state,
          .name = "model.layers.0.mlp.up_proj.weight",
          .dtype = TT_BF16,
          .ndim = 2,
          .shape = {128, 64},
          .data = bf16_weight},
         "in a 4-bit checkpoint"},
        {{.tag = "int8", .config_from = "\"load_in_8bit\": false", .config_to = "\"load_in_8bit\": true"},
         "8-bit (LLM.int8, load_in_8bit)"},
        {{.tag = "gptq", .config_from = "\"quant_method\": \"bitsandbytes\"", .config_to = "\"quant_method\": \"gptq\""},
         "quant_method is \"gptq\""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *dir = make_variant(&cases[i].v);
        if (!tt_expect_die(load_as_qlora, dir, cases[i].needle)) fprintf(stderr, "  (variant %s)\n", cases[i].v.tag);
        free(dir);
    }
    tt_st_close(&f);
    free(src);
}

int main(int argc, char **argv) {
    source_dir = argc > 1 ? argv[1] : ".";
    tt_test_scratch_open("qlora-load");
    check_init_bytes(true, TT_QUANT4_NF4);
    check_init_bytes(false, TT_QUANT4_FP4);
    check_layout();
    check_loader(false);
    check_loader(true);
    check_checkpoint("bnb_nf4_dq", TT_QUANT4_NF4, true);
    check_checkpoint("bnb_fp4", TT_QUANT4_FP4, false);
    check_float_linear();
    check_corruptions();
    tt_test_scratch_close();
    return tt_test_summary("test_qlora_load");
}
