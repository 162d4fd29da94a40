#include "model/model_config.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "model/safetensors.h"

/* Readers of one key each: a missing key takes the default (or dies when required), a key of
 * the wrong JSON type dies naming the file, the key and the expected type. */
static int64_t get_int(json_t *root, const char *key, bool required, int64_t fallback, const char *path) {
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) {
        if (required) tt_die("%s: key \"%s\" is missing; a Hugging Face config.json of this model type has it", path, key);
        return fallback;
    }
    if (!json_is_integer(v)) tt_die("%s: key \"%s\" must be an integer", path, key);
    return json_integer_value(v);
}

static double get_number(json_t *root, const char *key, double fallback, const char *path) {
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) return fallback;
    if (!json_is_number(v)) tt_die("%s: key \"%s\" must be a number", path, key);
    return json_number_value(v);
}

static bool get_bool(json_t *root, const char *key, bool fallback, const char *path) {
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) return fallback;
    if (!json_is_boolean(v)) tt_die("%s: key \"%s\" must be true or false", path, key);
    return json_is_true(v);
}

/* bos/eos ids: an integer, a list (the first is used) or null. */
static int64_t get_token_id(json_t *root, const char *key, const char *path) {
    json_t *v = json_object_get(root, key);
    if (json_is_array(v)) v = json_array_get(v, 0);
    if (!v || json_is_null(v)) return -1;
    if (!json_is_integer(v)) tt_die("%s: key \"%s\" must be an integer, a list of integers or null", path, key);
    return json_integer_value(v);
}

static void read_rope(json_t *root, tt_model_config *c, const char *path) {
    /* transformers 5 keeps everything in rope_parameters; 4 uses rope_theta + rope_scaling. */
    json_t *params = json_object_get(root, "rope_parameters");
    json_t *scaling = json_object_get(root, "rope_scaling");
    json_t *source = json_is_object(params) ? params : (json_is_object(scaling) ? scaling : NULL);
    const char *where = json_is_object(params) ? "rope_parameters" : "rope_scaling";
    c->rope_theta = get_number(root, "rope_theta", 10000.0, path);
    if (json_is_object(params)) c->rope_theta = get_number(params, "rope_theta", c->rope_theta, path);
    c->rope_type = TT_ROPE_DEFAULT;
    if (!source) return;
    json_t *type = json_object_get(source, "rope_type");
    if (!type) type = json_object_get(source, "type");
    const char *name = json_is_string(type) ? json_string_value(type) : "default";
    if (strcmp(name, "default") == 0) return;
    if (strcmp(name, "llama3") != 0)
        tt_die("%s: %s.rope_type is \"%s\"; tiertrain supports \"default\" and \"llama3\" RoPE", path, where, name);
    c->rope_type = TT_ROPE_LLAMA3;
    c->rope_factor = get_number(source, "factor", 0, path);
    c->rope_low_freq_factor = get_number(source, "low_freq_factor", 0, path);
    c->rope_high_freq_factor = get_number(source, "high_freq_factor", 0, path);
    c->rope_original_max_position = get_int(source, "original_max_position_embeddings", false, 0, path);
    if (c->rope_factor <= 0 || c->rope_low_freq_factor <= 0 || c->rope_high_freq_factor <= c->rope_low_freq_factor ||
        c->rope_original_max_position <= 0)
        tt_die("%s: %s for llama3 needs factor > 0, 0 < low_freq_factor < high_freq_factor and "
               "original_max_position_embeddings > 0",
               path, where);
}

void tt_model_config_load(const char *path, tt_model_config *c) {
    memset(c, 0, sizeof(*c));
    FILE *f = fopen(path, "rb");
    if (!f) tt_die("cannot open model config %s: no such file or not readable", path);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    if (size < 0 || size > (1 << 24)) tt_die("%s: not a config.json (size %ld)", path, size);
    char *text = tt_xmalloc((size_t)size + 1, "config.json");
    size_t got = fread(text, 1, (size_t)size, f);
    fclose(f);
    text[got] = 0;
    json_error_t error;
    json_t *root = json_loadb(text, got, JSON_REJECT_DUPLICATES, &error);
    if (!root) tt_die("%s:%d:%d: not valid JSON: %s", path, error.line, error.column, error.text);
    if (!json_is_object(root)) tt_die("%s: a config.json must be a JSON object", path);
    c->json_text = text;

    json_t *type = json_object_get(root, "model_type");
    if (!json_is_string(type))
        tt_die("%s: key \"model_type\" is missing or not a string; expected one of llama, mistral, qwen2, qwen3", path);
    const char *model_type = json_string_value(type);
    if (!model_type) model_type = "";
    if (strcmp(model_type, "llama") != 0 && strcmp(model_type, "mistral") != 0 && strcmp(model_type, "qwen2") != 0 &&
        strcmp(model_type, "qwen3") != 0)
        tt_die("%s: model_type \"%s\" is not supported; tiertrain trains llama, mistral, qwen2 and qwen3 models", path,
               model_type);
    snprintf(c->model_type, sizeof c->model_type, "%s", model_type);
    const bool is_qwen = strncmp(model_type, "qwen", 4) == 0;

    c->vocab_size = get_int(root, "vocab_size", true, 0, path);
    c->hidden_size = get_int(root, "hidden_size", true, 0, path);
    c->intermediate_size = get_int(root, "intermediate_size", true, 0, path);
    c->num_layers = get_int(root, "num_hidden_layers", true, 0, path);
    c->num_heads = get_int(root, "num_attention_heads", true, 0, path);
    c->num_kv_heads = get_int(root, "num_key_value_heads", false, c->num_heads, path);
    c->head_dim = get_int(root, "head_dim", false, c->num_heads > 0 ? c->hidden_size / c->num_heads : 0, path);
    c->max_position_embeddings = get_int(root, "max_position_embeddings", false, 2048, path);
    c->rms_norm_eps = get_number(root, "rms_norm_eps", 1e-6, path);
    c->tie_word_embeddings = get_bool(root, "tie_word_embeddings", false, path);
    c->attention_bias = get_bool(root, "attention_bias", strcmp(model_type, "qwen2") == 0, path);
    c->qk_norm = strcmp(model_type, "qwen3") == 0;
    if (get_bool(root, "mlp_bias", false, path))
        tt_die("%s: mlp_bias is true; tiertrain's MLP has no biases (Llama, Mistral and Qwen checkpoints do not use them)",
               path);
    json_t *act = json_object_get(root, "hidden_act");
    if (act && json_is_string(act) && strcmp(json_string_value(act), "silu") != 0)
        tt_die("%s: hidden_act is \"%s\"; tiertrain's MLP is SwiGLU (silu)", path, json_string_value(act));
    if (strcmp(model_type, "mistral") == 0) {
        c->sliding_window = get_int(root, "sliding_window", false, 0, path);
    } else if (is_qwen && get_bool(root, "use_sliding_window", false, path)) {
        tt_die("%s: use_sliding_window is true; sliding-window attention for Qwen models is not supported yet", path);
    }
    read_rope(root, c, path);
    c->bos_token_id = get_token_id(root, "bos_token_id", path);
    c->eos_token_id = get_token_id(root, "eos_token_id", path);

    json_t *dtype = json_object_get(root, "dtype");
    if (!dtype || json_is_null(dtype)) dtype = json_object_get(root, "torch_dtype");
    c->dtype = TT_F32;
    if (dtype && !json_is_null(dtype)) {
        if (!json_is_string(dtype) || tt_dtype_from_torch_name(json_string_value(dtype), &c->dtype) != 0 ||
            (c->dtype != TT_F32 && c->dtype != TT_BF16 && c->dtype != TT_F16))
            tt_die("%s: dtype must be \"float32\", \"bfloat16\" or \"float16\"", path);
    }
    json_decref(root);
    tt_model_config_validate(c, path);
}

void tt_model_config_validate(const tt_model_config *c, const char *source) {
    if (c->vocab_size <= 0 || c->hidden_size <= 0 || c->intermediate_size <= 0 || c->num_layers <= 0 ||
        c->num_heads <= 0 || c->num_kv_heads <= 0 || c->head_dim <= 0)
        tt_die("%s: vocab_size, hidden_size, intermediate_size, num_hidden_layers, num_attention_heads, "
               "num_key_value_heads and head_dim must all be positive",
               source);
    if (c->num_heads % c->num_kv_heads != 0)
        tt_die("%s: num_attention_heads (%lld) must be a multiple of num_key_value_heads (%lld)", source,
               (long long)c->num_heads, (long long)c->num_kv_heads);
    if (c->head_dim % 2 != 0) tt_die("%s: head_dim (%lld) must be even for RoPE", source, (long long)c->head_dim);
    if (!(c->rms_norm_eps > 0)) tt_die("%s: rms_norm_eps must be positive", source);
    if (!(c->rope_theta > 0)) tt_die("%s: rope_theta must be positive", source);
    if (c->vocab_size > INT32_MAX) tt_die("%s: vocab_size %lld does not fit 32-bit token ids", source, (long long)c->vocab_size);
}

static const char *architecture_of(const char *model_type) {
    if (strcmp(model_type, "mistral") == 0) return "MistralForCausalLM";
    if (strcmp(model_type, "qwen2") == 0) return "Qwen2ForCausalLM";
    if (strcmp(model_type, "qwen3") == 0) return "Qwen3ForCausalLM";
    return "LlamaForCausalLM";
}

void tt_model_config_save(const tt_model_config *c, const char *path) {
    if (c->json_text) {
        tt_write_file_atomic(path, c->json_text, strlen(c->json_text));
        return;
    }
    json_t *root = json_object();
    json_t *architectures = json_array();
    json_array_append_new(architectures, json_string(architecture_of(c->model_type)));
    json_object_set_new(root, "architectures", architectures);
    json_object_set_new(root, "model_type", json_string(c->model_type));
    json_object_set_new(root, "vocab_size", json_integer(c->vocab_size));
    json_object_set_new(root, "hidden_size", json_integer(c->hidden_size));
    json_object_set_new(root, "intermediate_size", json_integer(c->intermediate_size));
    json_object_set_new(root, "num_hidden_layers", json_integer(c->num_layers));
    json_object_set_new(root, "num_attention_heads", json_integer(c->num_heads));
    json_object_set_new(root, "num_key_value_heads", json_integer(c->num_kv_heads));
    json_object_set_new(root, "head_dim", json_integer(c->head_dim));
    json_object_set_new(root, "max_position_embeddings", json_integer(c->max_position_embeddings));
    json_object_set_new(root, "rms_norm_eps", json_real(c->rms_norm_eps));
    json_object_set_new(root, "rope_theta", json_real(c->rope_theta));
    if (c->rope_type == TT_ROPE_LLAMA3) {
        json_t *scaling = json_object();
        json_object_set_new(scaling, "rope_type", json_string("llama3"));
        json_object_set_new(scaling, "factor", json_real(c->rope_factor));
        json_object_set_new(scaling, "low_freq_factor", json_real(c->rope_low_freq_factor));
        json_object_set_new(scaling, "high_freq_factor", json_real(c->rope_high_freq_factor));
        json_object_set_new(scaling, "original_max_position_embeddings", json_integer(c->rope_original_max_position));
        json_object_set_new(root, "rope_scaling", scaling);
    } else {
        json_object_set_new(root, "rope_scaling", json_null());
    }
    json_object_set_new(root, "tie_word_embeddings", json_boolean(c->tie_word_embeddings));
    json_object_set_new(root, "attention_bias", json_boolean(c->attention_bias));
    if (c->sliding_window > 0) json_object_set_new(root, "sliding_window", json_integer(c->sliding_window));
    json_object_set_new(root, "bos_token_id", c->bos_token_id >= 0 ? json_integer(c->bos_token_id) : json_null());
    json_object_set_new(root, "eos_token_id", c->eos_token_id >= 0 ? json_integer(c->eos_token_id) : json_null());
    json_object_set_new(root, "torch_dtype", json_string(tt_dtype_torch_name(c->dtype)));
    char *text = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(root);
    tt_write_file_atomic(path, text, strlen(text));
    free(text);
}

void tt_model_config_free(tt_model_config *c) {
    free(c->json_text);
    c->json_text = NULL;
}

int64_t tt_model_config_param_count(const tt_model_config *c) {
    const int64_t D = c->hidden_size, F = c->intermediate_size, hd = c->head_dim;
    const int64_t q = c->num_heads * hd, kv = c->num_kv_heads * hd;
    int64_t per_layer = 2 * D + q * D + 2 * kv * D + D * q + 3 * D * F;
    if (c->attention_bias) per_layer += q + 2 * kv;
    if (c->qk_norm) per_layer += 2 * hd;
    int64_t total = c->vocab_size * D + c->num_layers * per_layer + D;
    if (!c->tie_word_embeddings) total += c->vocab_size * D;
    return total;
}
