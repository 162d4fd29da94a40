#include "model/lora.h"

#include <cblas.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/check.h"
#include "core/input_file.h"
#include "model/arch.h"
#include "model/safetensors.h"
#include "model/weights.h"

/* adapter_config.json is a few hundred bytes; anything past this is not one */
#define TT_ADAPTER_CONFIG_MAX_BYTES ((size_t)16 << 20)

static bool is_adapter(const tt_param_info *p) { return p->kind == TT_PARAM_LORA_A || p->kind == TT_PARAM_LORA_B; }

/* A number as JSON: an integer when it is one (PEFT writes r and lora_alpha as ints), else a real. */
static json_t *json_number(double v) {
    if (v == floor(v) && fabs(v) < 1e15) return json_integer((json_int_t)v);
    return json_real(v);
}

static void write_json(const char *path, json_t *root) {
    char *text = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    TT_CHECK(text != NULL, "JSON for %s", path);
    const size_t length = strlen(text);
    char *with_newline = tt_xmalloc(length + 2, "a JSON file");
    memcpy(with_newline, text, length);
    with_newline[length] = '\n';
    tt_write_file_atomic(path, with_newline, length + 1);
    free(with_newline);
    free(text);
}

/* PEFT's module path of the decoder layers when it is the default one: target_modules is then the list of module
 * names, which peft matches at the end of every module's name. */
static bool default_layers(const tt_param_table *table) {
    return !table->lora_layers || strcmp(table->lora_layers, "model.layers.") == 0;
}

/* Elsewhere (a multimodal checkpoint's language model) the list would adapt the vision tower's q/k/v too: a regex
 * that peft matches against the whole module name, the decoder layers' adapted modules only, e.g.
 * model\.language_model\.layers\.\d+\.(self_attn\.q_proj|mlp\.down_proj). */
static void target_regex(const tt_param_table *table, char *out, size_t size) {
    size_t n = 0;
    out[0] = 0;
    for (const char *c = table->lora_layers; *c && n + 3 < size; c++) {
        if (*c == '.') out[n++] = '\\';
        out[n++] = *c;
    }
    out[n] = 0;
    n += (size_t)snprintf(out + n, size - n, "\\d+\\.(");
    bool first = true;
    for (int m = 0; m < TT_LORA_MODULE_COUNT && n < size; m++) {
        if (!((table->lora_targets >> m) & 1u)) continue;
        if (!first) n += (size_t)snprintf(out + n, size - n, "|");
        first = false;
        for (const char *c = tt_lora_module_path((tt_lora_module)m); *c && n + 3 < size; c++) {
            if (*c == '.') out[n++] = '\\';
            out[n++] = *c;
        }
        out[n] = 0;
    }
    if (n < size) snprintf(out + n, size - n, ")");
}

/* The name of a trainable tensor in PEFT's adapter_model.safetensors: an adapter's own, or a module_to_save's
 * "base_model.model.<its name in the model>" (PEFT drops the modules_to_save.<adapter> of the wrapper when saving). */
static const char *peft_name(const tt_param_info *p, char *buf, size_t size) {
    if (is_adapter(p)) return p->name;
    snprintf(buf, size, "base_model.model.%s", p->name);
    return buf;
}

static const char *const saved_module_names[2] = {"embed_tokens", "lm_head"};

/* adapter_config.json's modules_to_save: the list, or null. */
static json_t *modules_to_save_json(unsigned set) {
    if (!set) return json_null();
    json_t *list = json_array();
    for (int i = 0; i < 2; i++)
        if ((set >> i) & 1u) json_array_append_new(list, json_string(saved_module_names[i]));
    return list;
}

/* adapter_config.json's modules_to_save as a set of tt_saved_module; another module is an error naming the file. */
static unsigned modules_to_save_of(json_t *root, const char *path) {
    json_t *list = json_object_get(root, "modules_to_save");
    if (!list || json_is_null(list)) return 0;
    if (!json_is_array(list)) tt_die("%s: modules_to_save must be a list of module names or null", path);
    unsigned set = 0;
    for (size_t i = 0; i < json_array_size(list); i++) {
        const char *name = json_string_value(json_array_get(list, i));
        int found = -1;
        for (int m = 0; name && m < 2 && found < 0; m++)
            if (strcmp(name, saved_module_names[m]) == 0) found = m;
        if (found < 0)
            tt_die("%s: modules_to_save lists '%s'; tiertrain loads adapters whose modules_to_save are embed_tokens "
                   "and lm_head",
                   path, name ? name : "?");
        set |= 1u << found;
    }
    return set;
}

void tt_lora_save_peft(const float *trainable, const tt_param_table *table, tt_dtype dtype, const char *base_model,
                       const char *dir) {
    TT_CHECK(table->lora_rank > 0, "saving adapters of a model without any");
    TT_CHECK(dtype == TT_F32 || dtype == TT_BF16, "adapters are saved as F32 or BF16");
    const size_t elem = tt_dtype_size(dtype);
    void *converted = NULL;
    if (dtype != TT_F32) {
        converted =
            tt_xmalloc(tt_mul_size((size_t)table->trainable_numel, elem, "converted adapters"), "converted adapters");
        tt_convert_from_f32(converted, dtype, trainable, (size_t)table->trainable_numel);
    }
    tt_st_writer writer;
    tt_st_writer_init(&writer);
    char saved_name[160];
    for (int i = 0; i < table->count; i++) {
        const tt_param_info *p = &table->params[i];
        if (!p->trainable) continue; /* the adapters, and the modules_to_save */
        const int64_t at = p->offset - table->trainable_start;
        const void *data =
            converted ? (const unsigned char *)converted + (size_t)at * elem : (const void *)(trainable + at);
        tt_st_writer_add(&writer, peft_name(p, saved_name, sizeof saved_name), dtype, p->ndim, p->shape, data);
    }
    tt_st_writer_add_metadata(&writer, "format", "pt");
    char path[4200];
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    tt_st_writer_commit(&writer, path);
    tt_st_writer_free(&writer);
    free(converted);

    /* LoraConfig's fields, as peft's save_pretrained writes them */
    json_t *root = json_object();
    json_object_set_new(root, "alpha_pattern", json_object());
    json_object_set_new(root, "auto_mapping", json_null());
    json_object_set_new(root, "base_model_name_or_path", base_model ? json_string(base_model) : json_null());
    json_object_set_new(root, "bias", json_string("none"));
    json_object_set_new(root, "fan_in_fan_out", json_false());
    json_object_set_new(root, "inference_mode", json_true());
    json_object_set_new(root, "init_lora_weights", json_true());
    json_object_set_new(root, "layers_pattern", json_null());
    json_object_set_new(root, "layers_to_transform", json_null());
    json_object_set_new(root, "lora_alpha", json_number(table->lora_alpha));
    json_object_set_new(root, "lora_dropout", json_real(table->lora_dropout));
    json_object_set_new(root, "modules_to_save", modules_to_save_json(table->lora_modules_to_save));
    json_object_set_new(root, "peft_type", json_string("LORA"));
    json_object_set_new(root, "r", json_integer((json_int_t)table->lora_rank));
    json_object_set_new(root, "rank_pattern", json_object());
    json_object_set_new(root, "revision", json_null());
    if (default_layers(table)) {
        json_t *targets = json_array();
        for (int m = 0; m < TT_LORA_MODULE_COUNT; m++)
            if ((table->lora_targets >> m) & 1u) json_array_append_new(targets, json_string(tt_lora_module_name(m)));
        json_object_set_new(root, "target_modules", targets);
    } else {
        char regex[512];
        target_regex(table, regex, sizeof regex);
        json_object_set_new(root, "target_modules", json_string(regex));
    }
    json_object_set_new(root, "task_type", json_string("CAUSAL_LM"));
    json_object_set_new(root, "use_dora", json_false());
    json_object_set_new(root, "use_rslora", json_boolean(table->lora_rslora));
    snprintf(path, sizeof path, "%s/adapter_config.json", dir);
    write_json(path, root);
    json_decref(root);
}

void tt_lora_load_peft(float *trainable, const tt_param_table *table, const char *dir) {
    char path[4200];
    snprintf(path, sizeof path, "%s/adapter_model.safetensors", dir);
    tt_st_file file;
    tt_st_open(path, &file);
    int found = 0;
    char saved_name[160];
    for (int i = 0; i < table->count; i++) {
        const tt_param_info *p = &table->params[i];
        if (!p->trainable) continue; /* the adapters, and the modules_to_save */
        const char *name = peft_name(p, saved_name, sizeof saved_name);
        const tt_st_tensor *t = tt_st_find(&file, name);
        if (!t)
            tt_die("%s: tensor '%s' is missing; the adapter has other target modules or modules_to_save, or another "
                   "model than this run (lora_target_modules, lora_modules_to_save)",
                   path, name);
        if (t->ndim != 2 || t->shape[0] != p->shape[0] || t->shape[1] != p->shape[1])
            tt_die(
                "%s: tensor '%s' has shape [%lld, %lld], this run's is [%lld, %lld] (check lora_r and the base model)",
                path, name, (long long)t->shape[0], (long long)(t->ndim == 2 ? t->shape[1] : 0), (long long)p->shape[0],
                (long long)p->shape[1]);
        if (t->dtype != TT_F32 && t->dtype != TT_BF16 && t->dtype != TT_F16)
            tt_die("%s: tensor '%s' is %s; adapters are F32, BF16 or F16", path, name,
                   tt_dtype_safetensors_name(t->dtype));
        tt_convert_to_f32(trainable + (p->offset - table->trainable_start), t->data, t->dtype, (size_t)p->numel);
        found++;
    }
    if (found != file.count)
        tt_die("%s: holds %d tensors, of which this run's adapters and modules_to_save are %d; the adapter targets "
               "more modules than lora_target_modules and lora_modules_to_save list",
               path, file.count, found);
    tt_st_close(&file);
}

void tt_lora_read_peft_settings(const char *dir, tt_peft_settings *out) {
    memset(out, 0, sizeof *out);
    snprintf(out->path, sizeof out->path, "%s/adapter_config.json", dir);
    const char *path = out->path;
    json_error_t error;
    json_t *root = tt_json_load_regular_file(path, 0, TT_ADAPTER_CONFIG_MAX_BYTES, "an adapter_config.json", &error);
    if (!root)
        tt_die("%s:%d: cannot read the adapter's config: %s (a PEFT adapter directory holds it)", path, error.line,
               error.text);
    json_t *r = json_object_get(root, "r"), *alpha = json_object_get(root, "lora_alpha");
    if (!json_is_integer(r) || json_integer_value(r) < 1 || !json_is_number(alpha))
        tt_die("%s: r (a positive integer) and lora_alpha (a number) are needed", path);
    out->rank = json_integer_value(r);
    out->alpha = json_number_value(alpha);
    out->rslora = json_is_true(json_object_get(root, "use_rslora"));
    out->modules_to_save = modules_to_save_of(root, path);
    json_t *list = json_object_get(root, "target_modules");
    if (json_is_string(list)) { /* a regex (a multimodal checkpoint's language model): the module names it names */
        snprintf(out->regex, sizeof out->regex, "%s", json_string_value(list));
        out->targets_regex = true;
        for (int m = 0; m < TT_LORA_MODULE_COUNT; m++)
            if (strstr(out->regex, tt_lora_module_name((tt_lora_module)m))) out->targets |= 1u << m;
    } else {
        if (!json_is_array(list)) tt_die("%s: target_modules (a list of module names, or a regex) is needed", path);
        for (size_t i = 0; i < json_array_size(list); i++) {
            const char *name = json_string_value(json_array_get(list, i));
            int found = -1;
            for (int m = 0; name && m < TT_LORA_MODULE_COUNT && found < 0; m++)
                if (strcmp(name, tt_lora_module_name((tt_lora_module)m)) == 0) found = m;
            if (found < 0)
                tt_die("%s: target module '%s' is not one tiertrain adapts (q_proj ... down_proj)", path,
                       name ? name : "?");
            out->targets |= 1u << found;
        }
    }
    json_decref(root);
}

void tt_lora_check_peft_config(const tt_param_table *table, const char *dir) {
    tt_peft_settings a;
    tt_lora_read_peft_settings(dir, &a);
    const char *path = a.path;
    if (a.rank != table->lora_rank)
        tt_die("%s: r is %lld but lora_r is %lld; set lora_r: %lld to continue from this adapter", path,
               (long long)a.rank, (long long)table->lora_rank, (long long)a.rank);
    if (a.alpha != table->lora_alpha)
        tt_die("%s: lora_alpha is %g but the run's lora_alpha is %g; set lora_alpha: %g to continue from this adapter",
               path, a.alpha, table->lora_alpha, a.alpha);
    if (a.rslora != table->lora_rslora)
        tt_die(
            "%s: use_rslora is %s but the run's peft_use_rslora is %s; set peft_use_rslora: %s to continue from this "
            "adapter",
            path, a.rslora ? "true" : "false", table->lora_rslora ? "true" : "false", a.rslora ? "true" : "false");
    if (a.modules_to_save != table->lora_modules_to_save)
        tt_die("%s: modules_to_save is not the run's lora_modules_to_save; set lora_modules_to_save to the adapter's "
               "list to continue from it",
               path);
    if (a.targets_regex) { /* the one this run would write (a multimodal checkpoint's language model) */
        char regex[512];
        target_regex(table, regex, sizeof regex);
        if (default_layers(table) || strcmp(a.regex, regex) != 0)
            tt_die("%s: target_modules is the regex '%s'; tiertrain continues from adapters whose target_modules "
                   "list module names%s%s",
                   path, a.regex, default_layers(table) ? "" : ", or is this run's regex ",
                   default_layers(table) ? "" : regex);
        return;
    }
    if (a.targets != table->lora_targets)
        tt_die("%s: the adapter's target_modules are not the run's; set lora_target_modules to the adapter's list",
               path);
}

/* ---- merge ---- */

/* adapter_config.json: the scaling, after refusing what a plain W + s B A merge would get wrong. */
static double read_adapter_scaling(const char *adapter_dir, unsigned *modules_to_save) {
    char path[4200];
    snprintf(path, sizeof path, "%s/adapter_config.json", adapter_dir);
    json_error_t error;
    json_t *root = tt_json_load_regular_file(path, 0, TT_ADAPTER_CONFIG_MAX_BYTES, "an adapter_config.json", &error);
    if (!root)
        tt_die("%s:%d: cannot read the adapter's config: %s (a PEFT adapter directory has adapter_config.json)", path,
               error.line, error.text);
    const char *type = json_string_value(json_object_get(root, "peft_type"));
    if (!type || strcmp(type, "LORA") != 0)
        tt_die("%s: peft_type is %s; tiertrain merges LoRA adapters (peft_type LORA)", path, type ? type : "missing");
    json_t *r = json_object_get(root, "r"), *alpha = json_object_get(root, "lora_alpha");
    if (!json_is_integer(r) || json_integer_value(r) < 1) tt_die("%s: r must be an integer >= 1", path);
    if (!json_is_number(alpha) || !(json_number_value(alpha) > 0)) tt_die("%s: lora_alpha must be a number > 0", path);
    const char *bias = json_string_value(json_object_get(root, "bias"));
    if (bias && strcmp(bias, "none") != 0)
        tt_die("%s: bias is '%s'; tiertrain merges adapters with bias \"none\" only", path, bias);
    if (json_is_true(json_object_get(root, "fan_in_fan_out")))
        tt_die("%s: fan_in_fan_out is true (GPT-2 style Conv1D weights); tiertrain's models store W as [out, in]",
               path);
    if (json_is_true(json_object_get(root, "use_dora")))
        tt_die("%s: use_dora is true; DoRA adapters are not a plain W + s B A and tiertrain cannot merge them", path);
    *modules_to_save = modules_to_save_of(root, path); /* embed_tokens and lm_head: their tensors replace the base's */
    json_t *patterns[2] = {json_object_get(root, "rank_pattern"), json_object_get(root, "alpha_pattern")};
    for (int i = 0; i < 2; i++)
        if (patterns[i] && json_is_object(patterns[i]) && json_object_size(patterns[i]) > 0)
            tt_die("%s: %s is set (per-module ranks or alphas); tiertrain merges adapters with one r and lora_alpha",
                   path, i ? "alpha_pattern" : "rank_pattern");
    const double rank = (double)json_integer_value(r), a = json_number_value(alpha);
    const double scaling = json_is_true(json_object_get(root, "use_rslora")) ? a / sqrt(rank) : a / rank;
    json_decref(root);
    return scaling;
}

/* "base_model.model.<layers><l>.<path>.lora_<A|B>.weight" -> layer, module and which; false if not one. */
static bool parse_adapter_name(const char *name, const char *layers, int64_t *layer, tt_lora_module *module,
                               bool *is_a) {
    char prefix[128];
    snprintf(prefix, sizeof prefix, "base_model.model.%s", layers);
    if (strncmp(name, prefix, strlen(prefix)) != 0) return false;
    char *end = NULL;
    errno = 0;
    const long long l = strtoll(name + strlen(prefix), &end, 10);
    if (errno || end == name + strlen(prefix) || *end != '.' || l < 0) return false;
    for (int m = 0; m < TT_LORA_MODULE_COUNT; m++) {
        char tail[96];
        for (int which = 0; which < 2; which++) {
            snprintf(tail, sizeof tail, ".%s.lora_%c.weight", tt_lora_module_path(m), which ? 'B' : 'A');
            if (strcmp(end, tail) == 0) {
                *layer = l;
                *module = (tt_lora_module)m;
                *is_a = which == 0;
                return true;
            }
        }
    }
    return false;
}

/* A module_to_save's tensor ("base_model.model.<a base parameter's name>": the embedding or the LM head) in place of
 * the base's; false when the tensor is no such module. */
static bool replace_saved_module(const tt_param_table *table, float *flat, const tt_st_tensor *t, const char *path) {
    const char *prefix = "base_model.model.";
    if (strncmp(t->name, prefix, strlen(prefix)) != 0) return false;
    for (int i = 0; i < table->count; i++) {
        const tt_param_info *p = &table->params[i];
        if ((p->kind != TT_PARAM_EMBED && p->kind != TT_PARAM_LM_HEAD) || strcmp(t->name + strlen(prefix), p->name))
            continue;
        if (t->ndim != 2 || t->shape[0] != p->shape[0] || t->shape[1] != p->shape[1])
            tt_die("%s: tensor '%s' has shape [%lld, %lld], the base's %s is [%lld, %lld]; the adapter belongs to "
                   "another model",
                   path, t->name, (long long)t->shape[0], (long long)(t->ndim == 2 ? t->shape[1] : 0), p->name,
                   (long long)p->shape[0], (long long)p->shape[1]);
        if (t->dtype != TT_F32 && t->dtype != TT_BF16 && t->dtype != TT_F16)
            tt_die("%s: tensor '%s' is %s; modules_to_save are F32, BF16 or F16", path, t->name,
                   tt_dtype_safetensors_name(t->dtype));
        tt_convert_to_f32(flat + p->offset, t->data, t->dtype, (size_t)p->numel);
        return true;
    }
    return false;
}

void tt_lora_merge(const char *base_dir, const char *adapter_dir, const char *out_dir, size_t max_shard_bytes) {
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", base_dir);
    tt_model_config config;
    tt_model_config_load(path, &config);
    tt_model_config_check_quantization(&config, path); /* a 4-bit base is merged into its dequantized weights */
    unsigned modules_to_save = 0;
    const double scaling = read_adapter_scaling(adapter_dir, &modules_to_save);
    /* modules_to_save on a tied base: PEFT trained the embedding and the head apart, so the merged model unties them
     * (an LM head of its own, the embedding's copy where the adapter does not replace it) */
    const tt_trainable_spec untie = {.untie_lm_head = modules_to_save != 0 && config.tie_word_embeddings};
    tt_param_table table;
    tt_param_table_build_trainable(&config, &untie, &table);
    if (untie.untie_lm_head) config.tie_word_embeddings = false;
    float *flat = tt_xcalloc((size_t)table.total_numel, sizeof(float), "the base model");
    tt_weights_load_hf(flat, &table, base_dir);
    const char *layers = tt_arch_of(&config)->peft_layers ? tt_arch_of(&config)->peft_layers : "model.layers.";

    snprintf(path, sizeof path, "%s/adapter_model.safetensors", adapter_dir);
    tt_st_file adapters;
    tt_st_open(path, &adapters);
    int merged = 0, replaced = 0;
    for (int i = 0; i < adapters.count; i++) {
        const tt_st_tensor *a = &adapters.tensors[i];
        int64_t layer;
        tt_lora_module module;
        bool is_a;
        if (replace_saved_module(&table, flat, a, path)) {
            replaced++;
            continue;
        }
        if (!parse_adapter_name(a->name, layers, &layer, &module, &is_a))
            tt_die("%s: tensor '%s' is not a LoRA adapter of a decoder layer's linear layer "
                   "(base_model.model.%s<l>.<self_attn|mlp>.<module>.lora_A|lora_B.weight) nor a module_to_save "
                   "(embed_tokens, lm_head); tiertrain merges those only",
                   path, a->name, layers);
        if (!is_a) continue; /* each pair is merged from its A */
        const tt_linear_layer *linear = tt_arch_linear_layer(&config, module);
        if (!linear)
            tt_die("%s: tensor '%s' adapts %s, but %s models in %s have no such layer; the adapter belongs to another "
                   "model",
                   path, a->name, tt_lora_module_name(module), config.model_type, base_dir);
        const tt_param_info *w = tt_param_table_find(&table, linear->weight, layer);
        if (!w)
            tt_die("%s: tensor '%s' adapts layer %lld, but the base model in %s has %lld layers", path, a->name,
                   (long long)layer, base_dir, (long long)config.num_layers);
        char b_name[160];
        snprintf(b_name, sizeof b_name, "base_model.model.%s%lld.%s.lora_B.weight", layers, (long long)layer,
                 tt_lora_module_path(module));
        const tt_st_tensor *b = tt_st_find(&adapters, b_name);
        if (!b) tt_die("%s: tensor '%s' has no '%s'; an adapter is a pair", path, a->name, b_name);
        const int64_t out = w->shape[0], in = w->shape[1];
        if (a->ndim != 2 || b->ndim != 2 || a->shape[1] != in || b->shape[0] != out || a->shape[0] != b->shape[1])
            tt_die("%s: the adapter of %s has A [%lld, %lld] and B [%lld, %lld], but the base weight is [%lld, %lld] "
                   "(A must be [r, %lld] and B [%lld, r]); the adapter belongs to another model",
                   path, w->name, (long long)a->shape[0], (long long)(a->ndim == 2 ? a->shape[1] : 0),
                   (long long)b->shape[0], (long long)(b->ndim == 2 ? b->shape[1] : 0), (long long)out, (long long)in,
                   (long long)in, (long long)out);
        for (int k = 0; k < 2; k++) {
            const tt_st_tensor *t = k ? b : a;
            if (t->dtype != TT_F32 && t->dtype != TT_BF16 && t->dtype != TT_F16)
                tt_die("%s: tensor '%s' is %s; adapters are F32, BF16 or F16", path, t->name,
                       tt_dtype_safetensors_name(t->dtype));
        }
        const int64_t r = a->shape[0];
        float *A = tt_xmalloc(sizeof(float) * (size_t)(r * in), "an adapter");
        float *B = tt_xmalloc(sizeof(float) * (size_t)(out * r), "an adapter");
        tt_convert_to_f32(A, a->data, a->dtype, (size_t)(r * in));
        tt_convert_to_f32(B, b->data, b->dtype, (size_t)(out * r));
        /* W[out, in] += scaling * B[out, r] A[r, in], in fp32 */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)out, (int)in, (int)r, (float)scaling, B, (int)r, A,
                    (int)in, 1.0f, flat + w->offset, (int)in);
        free(A);
        free(B);
        merged++;
    }
    tt_st_close(&adapters);
    if (merged == 0) tt_die("%s: no LoRA adapters in it; nothing to merge", path);

    tt_weights_save_hf(flat, &table, &config, config.dtype, out_dir, max_shard_bytes, base_dir);
    tt_weights_copy_companion_files(base_dir, out_dir);
    tt_info("merged %d LoRA adapters (scaling %g)%s into %s: %s", merged, scaling,
            replaced ? " and the adapter's modules_to_save" : "", base_dir, out_dir);
    free(flat);
    tt_param_table_free(&table);
    tt_model_config_free(&config);
}
