/* config.json of Llama 3.x, Mistral, Qwen2/2.5 and Qwen3 models, in the transformers 4 and 5
 * spellings; see model_config.h. */
#include "model/model_config.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/check.h"

#define TT_MODEL_MAX_LAYERS 4096
#include "core/json_describe.h"
#include "model/arch.h"
#include "model/config_reader.h"
#include "model/model_config_internal.h"
#include "model/safetensors.h"

#define TT_CONFIG_MAX_BYTES (16 * 1024 * 1024)
/* The MLP's activation (hidden_act, or Gemma's hidden_activation) is the family's. */
static void check_activation(const tt_config_reader *r, const tt_arch *arch) {
    const char *want = arch->activation == TT_GLU_SILU ? "silu" : "gelu_pytorch_tanh";
    static const char *const keys[] = {"hidden_act", "hidden_activation"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        const char *act = tt_config_string(r, keys[i]);
        if (act && strcmp(act, want) != 0)
            tt_die("%s: %s is \"%s\"; %s models' MLP here is %s and needs \"%s\"", r->path, keys[i], act,
                   arch->model_type, arch->activation == TT_GLU_SILU ? "SwiGLU" : "GeGLU (tanh gelu)", want);
    }
}

/* bos/eos ids: an integer, a list of integers (the first is used), or absent/null (-1). */
static int64_t get_token_id(const tt_config_reader *r, const char *key) {
    json_t *v = tt_config_value(r, key);
    if (json_is_array(v)) {
        for (size_t i = 0; i < json_array_size(v); i++)
            if (!json_is_integer(json_array_get(v, i)))
                tt_die("%s: key \"%s\"[%zu] must be an integer, not %s", r->path, key, i,
                       tt_json_type_name(json_array_get(v, i)));
        v = json_array_get(v, 0);
    }
    if (!v) return -1;
    if (!json_is_integer(v))
        tt_die("%s: key \"%s\" must be an integer, a list of integers or null, not %s", r->path, key,
               tt_json_type_name(v));
    return (int64_t)json_integer_value(v);
}

/* A list of numbers of config.json into a new float array of `count` (LongRoPE's factors). */
static float *read_factors(const tt_config_reader *r, const char *key, int64_t count) {
    json_t *list = tt_config_value(r, key);
    if (!json_is_array(list))
        tt_die("%s: key \"%s%s\" must be a list of %lld numbers (LongRoPE), not %s", r->path, r->prefix, key,
               (long long)count, list ? tt_json_type_name(list) : "missing");
    if ((int64_t)json_array_size(list) != count)
        tt_die("%s: key \"%s%s\" has %zu factors; LongRoPE needs one per rotated pair, rotary_dim / 2 = %lld", r->path,
               r->prefix, key, json_array_size(list), (long long)count);
    float *factors = tt_xmalloc(sizeof(float) * (size_t)(count > 0 ? count : 1), "LongRoPE factors");
    for (int64_t i = 0; i < count; i++) {
        json_t *v = json_array_get(list, (size_t)i);
        if (!json_is_number(v) || !(json_number_value(v) > 0)) {
            free(factors);
            tt_die("%s: key \"%s%s\"[%lld] must be a positive number", r->path, r->prefix, key, (long long)i);
        }
        factors[i] = (float)json_number_value(v);
    }
    return factors;
}

/* partial_rotary_factor (Phi-4-mini's 0.75), at the top or among the RoPE settings: the rotated dimensions of each head,
 * int(head_dim * factor) as transformers takes them. */
static void read_rotary_dim(const tt_config_reader *top, const tt_config_reader *rope, tt_model_config *c) {
    double factor = tt_config_number(top, "partial_rotary_factor", false, 1.0);
    if (rope) factor = tt_config_number(rope, "partial_rotary_factor", false, factor);
    if (!(factor > 0 && factor <= 1))
        tt_die("%s: partial_rotary_factor is %g; it must be in (0, 1]", top->path, factor);
    c->rotary_dim = factor == 1.0 ? 0 : (int64_t)((double)c->head_dim * factor);
    if (c->rotary_dim && (c->rotary_dim < 2 || c->rotary_dim % 2 != 0))
        tt_die("%s: partial_rotary_factor %g of head_dim %lld rotates %lld dimensions; RoPE needs an even number of "
               "them",
               top->path, factor, (long long)c->head_dim, (long long)c->rotary_dim);
}

/* transformers 5 keeps everything in rope_parameters; 4 uses rope_theta + rope_scaling. Default, llama3, linear and
 * LongRoPE ("su" its older name); a family with RoPE per layer type (Gemma 3) reads its own (arch_gemma.c). */
void tt_model_config_read_rope(const tt_config_reader *top, json_t *source, const char *prefix, tt_model_config *c) {
    const tt_config_reader r = {top->path, source, prefix};
    if (source) c->rope_theta = tt_config_number(&r, "rope_theta", false, c->rope_theta);
    c->rope_type = TT_ROPE_DEFAULT;
    read_rotary_dim(top, source ? &r : NULL, c);
    if (!source) return;
    const char *name = tt_config_string(&r, "rope_type");
    if (!name) name = tt_config_string(&r, "type");
    if (!name || strcmp(name, "default") == 0) return;
    if (strcmp(name, "linear") == 0) {
        c->rope_type = TT_ROPE_LINEAR;
        c->rope_factor = tt_config_number(&r, "factor", true, 0);
        if (!(c->rope_factor > 0))
            tt_die("%s: linear RoPE in \"%.*s\" needs factor > 0 (got %g)", top->path, (int)strlen(prefix) - 1, prefix,
                   c->rope_factor);
        return;
    }
    if (strcmp(name, "longrope") == 0 || strcmp(name, "su") == 0) {
        /* transformers takes the top-level original_max_position_embeddings over the one beside the factors */
        c->rope_type = TT_ROPE_LONGROPE;
        c->rope_original_max_position = tt_config_int(top, "original_max_position_embeddings", false, 0);
        if (!c->rope_original_max_position)
            c->rope_original_max_position = tt_config_int(&r, "original_max_position_embeddings", true, 0);
        if (c->rope_original_max_position <= 0)
            tt_die("%s: LongRoPE needs original_max_position_embeddings > 0", top->path);
        const int64_t pairs = (c->rotary_dim ? c->rotary_dim : c->head_dim) / 2;
        c->rope_short_factor = read_factors(&r, "short_factor", pairs);
        c->rope_long_factor = read_factors(&r, "long_factor", pairs);
        /* the attention factor: given, or sqrt(1 + ln(factor) / ln(original)) with factor the given one or
         * max_position_embeddings / original (1 where that is <= 1) */
        c->rope_attention_factor = tt_config_number(&r, "attention_factor", false, 0);
        if (!c->rope_attention_factor) {
            const double factor = tt_config_number(
                &r, "factor", false, (double)c->max_position_embeddings / (double)c->rope_original_max_position);
            c->rope_attention_factor =
                factor <= 1.0 ? 1.0 : sqrt(1.0 + log(factor) / log((double)c->rope_original_max_position));
        }
        return;
    }
    if (strcmp(name, "llama3") != 0)
        tt_die("%s: key \"%srope_type\" is \"%s\"; tiertrain supports \"default\", \"llama3\", \"linear\" and "
               "\"longrope\" RoPE (dynamic, yarn and the others are not)",
               top->path, r.prefix, name);
    c->rope_type = TT_ROPE_LLAMA3;
    c->rope_factor = tt_config_number(&r, "factor", true, 0);
    c->rope_low_freq_factor = tt_config_number(&r, "low_freq_factor", true, 0);
    c->rope_high_freq_factor = tt_config_number(&r, "high_freq_factor", true, 0);
    c->rope_original_max_position = tt_config_int(&r, "original_max_position_embeddings", true, 0);
    if (!(c->rope_factor > 0) || !(c->rope_low_freq_factor > 0) ||
        !(c->rope_high_freq_factor > c->rope_low_freq_factor) || c->rope_original_max_position <= 0)
        tt_die("%s: llama3 RoPE in \"%.*s\" needs factor > 0, 0 < low_freq_factor < high_freq_factor and "
               "original_max_position_embeddings > 0 (got %g, %g, %g, %lld)",
               top->path, (int)strlen(r.prefix) - 1, r.prefix, c->rope_factor, c->rope_low_freq_factor,
               c->rope_high_freq_factor, (long long)c->rope_original_max_position);
}

/* The model's RoPE settings: rope_parameters (transformers 5) or rope_theta and rope_scaling (4); theta_default where
 * neither gives a theta (a family's own default). */
static void read_rope(const tt_config_reader *top, tt_model_config *c, double theta_default) {
    json_t *params = tt_config_value(top, "rope_parameters");
    json_t *scaling = tt_config_value(top, "rope_scaling");
    if (params && !json_is_object(params))
        tt_die("%s: key \"rope_parameters\" must be an object or null, not %s", top->path, tt_json_type_name(params));
    if (scaling && !json_is_object(scaling))
        tt_die("%s: key \"rope_scaling\" must be an object or null, not %s", top->path, tt_json_type_name(scaling));
    c->rope_theta = tt_config_number(top, "rope_theta", false, theta_default);
    tt_model_config_read_rope(top, params ? params : scaling, params ? "rope_parameters." : "rope_scaling.", c);
}

/* transformers' quantization_config. Only what tiertrain needs to tell a checkpoint it reads (bitsandbytes 4-bit) from
 * one it does not is read; the refusals are tt_model_config_check_quantization's, so `tiertrain plan` and the loaders
 * decide where they apply. */
static void read_quantization(const tt_config_reader *top, tt_model_quantization *q) {
    memset(q, 0, sizeof(*q));
    json_t *config = tt_config_value(top, "quantization_config");
    if (!config) return;
    if (!json_is_object(config))
        tt_die("%s: key \"quantization_config\" must be an object or null, not %s", top->path,
               tt_json_type_name(config));
    const tt_config_reader r = {top->path, config, "quantization_config."};
    q->present = true;
    const char *method = tt_config_string(&r, "quant_method");
    snprintf(q->method, sizeof q->method, "%s", method ? method : "");
    q->load_in_4bit = tt_config_bool(&r, "load_in_4bit", false);
    q->load_in_8bit = tt_config_bool(&r, "load_in_8bit", false);
    const char *type = tt_config_string(&r, "bnb_4bit_quant_type");
    if (type && strcmp(type, "nf4") != 0 && strcmp(type, "fp4") != 0)
        tt_die("%s: quantization_config.bnb_4bit_quant_type is \"%s\"; bitsandbytes' 4-bit types are nf4 and fp4",
               top->path, type);
    q->format.type = type && strcmp(type, "fp4") == 0 ? TT_QUANT4_FP4 : TT_QUANT4_NF4;
    q->format.double_quant = tt_config_bool(&r, "bnb_4bit_use_double_quant", false);
    json_t *skip = tt_config_value(&r, "llm_int8_skip_modules");
    if (skip && !json_is_array(skip))
        tt_die("%s: quantization_config.llm_int8_skip_modules must be a list of module names or null, not %s",
               top->path, tt_json_type_name(skip));
    for (size_t i = 0; skip && i < json_array_size(skip); i++)
        if (!json_string_value(json_array_get(skip, i)))
            tt_die("%s: quantization_config.llm_int8_skip_modules[%zu] must be a string, not %s", top->path, i,
                   tt_json_type_name(json_array_get(skip, i)));
    /* which weights they keep in float is read from the checkpoint itself (tt_bnb_find_float_linear): transformers'
     * matching of these names has changed between its versions, the saved tensors say what it did */
}

void tt_model_config_check_quantization(const tt_model_config *c, const char *source) {
    const tt_model_quantization *q = &c->quantization;
    if (!q->present) return;
    if (strcmp(q->method, "bitsandbytes") != 0)
        tt_die("%s: quantization_config.quant_method is \"%s\"; tiertrain reads checkpoints in bf16, fp16 or fp32, and "
               "bitsandbytes 4-bit ones. Train from the original model (adapter: qlora quantizes it at load)",
               source, q->method[0] ? q->method : "(none)");
    if (q->load_in_8bit || !q->load_in_4bit)
        tt_die("%s: the checkpoint is saved in bitsandbytes' %s format; tiertrain reads its 4-bit format only (int8 "
               "weights with their SCB scales are not read). Train from the original model, or from a 4-bit save",
               source, q->load_in_8bit ? "8-bit (LLM.int8, load_in_8bit)" : "quantized (neither load_in_4bit)");
}

/* The whole file as a NUL-terminated string. */
/* O_NONBLOCK: opening a FIFO without it waits for a writer forever; a regular file ignores the
 * flag, and anything else is refused by the fstat check right after. Every error path closes
 * the descriptor first. */
static char *read_text(const char *path, size_t *bytes) {
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) tt_die("cannot open model config %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int error = errno;
        close(fd);
        tt_die("cannot read model config %s: %s", path, strerror(error));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        tt_die("model config %s is not a regular file (%s); expected a config.json", path,
               S_ISDIR(st.st_mode)    ? "a directory"
               : S_ISFIFO(st.st_mode) ? "a FIFO"
                                      : "a device or special file");
    }
    if (st.st_size > TT_CONFIG_MAX_BYTES) {
        close(fd);
        tt_die("%s: %lld bytes is too large for a config.json; point model_config at the model's config.json", path,
               (long long)st.st_size);
    }
    int flags = fcntl(fd, F_GETFL);
    if (flags >= 0) fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    size_t size = (size_t)st.st_size, got = 0;
    char *text = tt_xmalloc(size + 1, "config.json");
    while (got < size) {
        ssize_t n = read(fd, text + got, size - got);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            int error = errno;
            close(fd);
            free(text);
            tt_die("cannot read model config %s: %s", path, strerror(error));
        }
        if (n == 0) break;
        got += (size_t)n;
    }
    close(fd);
    text[got] = 0;
    *bytes = got;
    return text;
}

void tt_model_config_load(const char *path, tt_model_config *c) {
    memset(c, 0, sizeof(*c));
    size_t bytes = 0;
    char *text = read_text(path, &bytes);
    /* kept in c at once, so tt_model_config_free releases it even after a tt_die below */
    c->json_text = text;
    json_error_t error;
    json_t *root = json_loadb(text, bytes, JSON_REJECT_DUPLICATES, &error);
    if (!root)
        tt_die("%s:%d:%d: not valid JSON: %s; fix the file or re-download the model's config.json", path, error.line,
               error.column, error.text);
    if (!json_is_object(root)) tt_die("%s: a config.json must be a JSON object, not %s", path, tt_json_type_name(root));
    const tt_config_reader top = {path, root, ""};

    json_t *type = json_object_get(root, "model_type");
    if (!type || json_is_null(type))
        tt_die("%s: key \"model_type\" is missing; expected one of %s", path, tt_arch_supported_types());
    if (!json_is_string(type))
        tt_die("%s: key \"model_type\" must be a string (one of %s), not %s", path, tt_arch_supported_types(),
               tt_json_type_name(type));
    const char *model_type = json_string_value(type);
    const tt_arch *arch = tt_arch_find(model_type);
    if (!arch)
        tt_die("%s: model_type \"%s\" is not supported; tiertrain trains %s models", path, model_type,
               tt_arch_supported_types());
    snprintf(c->model_type, sizeof c->model_type, "%s", model_type);
    /* a model inside a larger one (Gemma 3's language model in Gemma3ForConditionalGeneration): its own config */
    tt_config_reader r = top;
    if (arch->text_config) {
        json_t *text_config = tt_config_value(&top, arch->text_config);
        if (!json_is_object(text_config))
            tt_die("%s: key \"%s\" must be the language model's config (an object), not %s", path, arch->text_config,
                   text_config ? tt_json_type_name(text_config) : "missing");
        r = (tt_config_reader){path, text_config, arch->text_config_prefix};
    }

    c->vocab_size = tt_config_int(&r, "vocab_size", true, 0);
    c->hidden_size = tt_config_int(&r, "hidden_size", true, 0);
    c->intermediate_size = tt_config_int(&r, "intermediate_size", true, 0);
    c->num_layers = tt_config_int(&r, "num_hidden_layers", true, 0);
    c->num_heads = tt_config_int(&r, "num_attention_heads", true, 0);
    c->num_kv_heads = tt_config_int(&r, "num_key_value_heads", false, c->num_heads);
    c->head_dim = tt_config_int(&r, "head_dim", false, c->num_heads > 0 ? c->hidden_size / c->num_heads : 0);
    c->max_position_embeddings = tt_config_int(&r, "max_position_embeddings", false, 2048);
    c->rms_norm_eps = tt_config_number(&r, "rms_norm_eps", false, 1e-6);
    c->initializer_range = tt_config_number(&r, "initializer_range", false, 0.02);
    c->tie_word_embeddings = tt_config_bool(&r, "tie_word_embeddings", arch->tied_by_default);
    c->attention_bias = tt_config_bool(&r, "attention_bias", false);
    if (tt_config_bool(&r, "mlp_bias", false))
        tt_die("%s: mlp_bias is true; tiertrain's MLP has no biases (no checkpoint of the families it trains uses "
               "them)",
               path);
    check_activation(&r, arch);
    read_rope(&r, c, arch->rope_theta_default ? arch->rope_theta_default : 10000.0);
    if (arch->read_config) arch->read_config(&r, c);
    read_quantization(&top, &c->quantization);
    c->bos_token_id = get_token_id(&r, "bos_token_id");
    c->eos_token_id = get_token_id(&r, "eos_token_id");
    if (c->bos_token_id < 0) c->bos_token_id = get_token_id(&top, "bos_token_id");
    if (c->eos_token_id < 0) c->eos_token_id = get_token_id(&top, "eos_token_id");

    /* transformers 5 writes "dtype", 4 wrote "torch_dtype". */
    const tt_config_reader *dtype_reader =
        tt_config_value(&top, "dtype") || tt_config_value(&top, "torch_dtype") ? &top : &r;
    const char *dtype_key = tt_config_value(dtype_reader, "dtype") ? "dtype" : "torch_dtype";
    const char *dtype = tt_config_string(dtype_reader, dtype_key);
    c->dtype = TT_F32;
    if (dtype && (tt_dtype_from_torch_name(dtype, &c->dtype) != 0 ||
                  (c->dtype != TT_F32 && c->dtype != TT_BF16 && c->dtype != TT_F16)))
        tt_die("%s: key \"%s\" is \"%s\"; expected \"float32\", \"bfloat16\" or \"float16\"", path, dtype_key, dtype);
    json_decref(root);
    tt_model_config_validate(c, path);
}

void tt_model_config_validate(const tt_model_config *c, const char *source) {
    struct {
        const char *key;
        int64_t value;
    } sizes[] = {{"vocab_size", c->vocab_size},
                 {"hidden_size", c->hidden_size},
                 {"intermediate_size", c->intermediate_size},
                 {"num_hidden_layers", c->num_layers},
                 {"num_attention_heads", c->num_heads},
                 {"num_key_value_heads", c->num_kv_heads},
                 {"head_dim", c->head_dim},
                 {"max_position_embeddings", c->max_position_embeddings}};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (sizes[i].value <= 0)
            tt_die("%s: %s is %lld; it must be positive", source, sizes[i].key, (long long)sizes[i].value);
    if (c->num_heads % c->num_kv_heads != 0)
        tt_die("%s: num_attention_heads (%lld) must be a multiple of num_key_value_heads (%lld)", source,
               (long long)c->num_heads, (long long)c->num_kv_heads);
    if (c->head_dim % 2 != 0)
        tt_die("%s: head_dim (%lld) must be even for rotary position embeddings", source, (long long)c->head_dim);
    /* every published model has 64 to 256; a head of a million dimensions (a fuzzed config had one)
     * would make the random init and the rotary tables the run's work, not a refusal */
    if (c->head_dim > TT_MAX_HEAD_DIM)
        tt_die("%s: head_dim (%lld) is more than %d; no model of this family has such heads: the file is corrupt",
               source, (long long)c->head_dim, TT_MAX_HEAD_DIM);
    if (!(c->rms_norm_eps > 0)) tt_die("%s: rms_norm_eps (%g) must be positive", source, c->rms_norm_eps);
    if (!(c->initializer_range >= 0) || !isfinite(c->initializer_range))
        tt_die("%s: initializer_range (%g) must be a finite number >= 0", source, c->initializer_range);
    if (!(c->rope_theta > 0)) tt_die("%s: rope_theta (%g) must be positive", source, c->rope_theta);
    if (c->sliding_window < 0)
        tt_die("%s: sliding_window (%lld) must not be negative", source, (long long)c->sliding_window);
    if (c->vocab_size > INT32_MAX)
        tt_die("%s: vocab_size %lld does not fit 32-bit token ids", source, (long long)c->vocab_size);
    /* Sizes whose products overflow are not models but corrupt files. */
    const int64_t limit = (int64_t)1 << 40;
    if (c->hidden_size > limit / c->vocab_size || c->hidden_size > limit / c->intermediate_size ||
        c->head_dim > limit / c->num_heads)
        tt_die("%s: the model's sizes are implausibly large; the file is corrupt", source);
    /* The deepest published decoders have under 200 layers; the planner's work grows with the depth. */
    if (c->num_layers > TT_MODEL_MAX_LAYERS)
        tt_die("%s: num_hidden_layers %lld is more than %d; no published decoder is that deep: the file is corrupt",
               source, (long long)c->num_layers, TT_MODEL_MAX_LAYERS);
    /* The parameter count in doubles (no overflow, ample precision for a bound): at most 2^50
     * parameters, so that tt_model_config_param_count's int64 products, every one of them a
     * term of this sum, cannot overflow (a fuzzed config with hidden_size 2^39 did). */
    const tt_arch *arch = tt_arch_find(c->model_type);
    if (!arch)
        tt_die("%s: model_type \"%s\" is not one tiertrain trains (%s)", source, c->model_type,
               tt_arch_supported_types());
    const double D = (double)c->hidden_size;
    double per_layer = 0;
    for (int i = 0; i < arch->layer_param_count; i++)
        per_layer += (double)tt_layer_param_copies(&arch->layer_params[i], c) *
                     (double)tt_dim_size(arch->layer_params[i].rows, c) *
                     (double)tt_dim_size(arch->layer_params[i].cols, c);
    if (!(2 * (double)c->vocab_size * D + (double)c->num_layers * per_layer + D <= 0x1p50))
        tt_die("%s: the model's sizes imply more than 2^50 parameters; the file is corrupt", source);
}

/* The fewest significant digits (15 to 17) that print every value so it reads back exactly,
 * so 1e-05 stays "1e-05" rather than "1.0000000000000001e-05". */
static int real_precision(const double *values, int count) {
    for (int precision = 15; precision < 17; precision++) {
        bool exact = true;
        for (int i = 0; i < count && exact; i++) {
            char buf[64];
            snprintf(buf, sizeof buf, "%.*g", precision, values[i]);
            exact = strtod(buf, NULL) == values[i];
        }
        if (exact) return precision;
    }
    return 17;
}

/* Whether config.json's text ties the LM head to the embedding (at the top, or in a text_config). */
static bool text_ties_head(json_t *root, bool by_default) {
    json_t *text = json_object_get(root, "text_config");
    json_t *tie = json_object_get(json_is_object(text) && json_object_get(text, "tie_word_embeddings") ? text : root,
                                  "tie_word_embeddings");
    return tie ? json_is_true(tie) : by_default;
}

void tt_model_config_save(const tt_model_config *c, const char *path) {
    json_t *read = c->json_text ? json_loads(c->json_text, JSON_REJECT_DUPLICATES, NULL) : NULL;
    const bool untied = read && c->tie_word_embeddings != text_ties_head(read, tt_arch_of(c)->tied_by_default);
    json_decref(read);
    if (c->json_text && (c->quantization.present || untied)) {
        /* what tiertrain saves is in a float dtype (a merged or dequantized model): the original text without its
         * quantization_config, which transformers would otherwise follow to read 4-bit tensors that are not there;
         * and an LM head of its own where the text tied it (a merge of PEFT's modules_to_save of a tied model) */
        json_t *root = json_loads(c->json_text, JSON_REJECT_DUPLICATES, NULL);
        TT_CHECK(root != NULL, "the config.json text read before");
        json_object_del(root, "quantization_config");
        if (untied) {
            json_object_set_new(root, "tie_word_embeddings", json_boolean(c->tie_word_embeddings));
            json_t *text = json_object_get(root, "text_config");
            if (json_is_object(text))
                json_object_set_new(text, "tie_word_embeddings", json_boolean(c->tie_word_embeddings));
        }
        char *text = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        json_decref(root);
        if (!text) tt_die("out of host memory encoding %s", path);
        tt_write_file_atomic(path, text, strlen(text));
        free(text);
        return;
    }
    if (c->json_text) {
        tt_write_file_atomic(path, c->json_text, strlen(c->json_text));
        return;
    }
    /* a config built in code: the common keys and the family's own (families whose keys have no writer are read from
     * a config.json, whose text is kept and written back) */
    TT_CHECK(!tt_arch_of(c)->read_config || tt_arch_of(c)->write_config,
             "%s: a config.json written from the fields alone (no writer of the family's own keys)", c->model_type);
    json_t *root = json_object();
    json_t *architectures = json_array();
    const tt_arch *arch = tt_arch_of(c);
    json_array_append_new(architectures, json_string(arch->architecture));
    json_object_set_new(root, "architectures", architectures);
    json_object_set_new(root, "model_type", json_string(c->model_type));
    json_object_set_new(root, "vocab_size", json_integer(c->vocab_size));
    json_object_set_new(root, "hidden_size", json_integer(c->hidden_size));
    json_object_set_new(root, "intermediate_size", json_integer(c->intermediate_size));
    json_object_set_new(root, "num_hidden_layers", json_integer(c->num_layers));
    json_object_set_new(root, "num_attention_heads", json_integer(c->num_heads));
    json_object_set_new(root, "num_key_value_heads", json_integer(c->num_kv_heads));
    json_object_set_new(root, "head_dim", json_integer(c->head_dim));
    json_object_set_new(root, "hidden_act", json_string("silu"));
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
    json_object_set_new(root, "mlp_bias", json_false());
    if (arch->write_config) arch->write_config(root, c);
    json_object_set_new(root, "bos_token_id", c->bos_token_id >= 0 ? json_integer(c->bos_token_id) : json_null());
    json_object_set_new(root, "eos_token_id", c->eos_token_id >= 0 ? json_integer(c->eos_token_id) : json_null());
    json_object_set_new(root, "torch_dtype", json_string(tt_dtype_torch_name(c->dtype)));
    const double reals[] = {c->rms_norm_eps, c->rope_theta, c->rope_factor, c->rope_low_freq_factor,
                            c->rope_high_freq_factor};
    char *text =
        json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER |
                             JSON_REAL_PRECISION(real_precision(reals, (int)(sizeof reals / sizeof reals[0]))));
    json_decref(root);
    if (!text) tt_die("out of host memory encoding %s", path);
    const size_t n = strlen(text);
    char *file_text = tt_xmalloc(n + 1, "config.json");
    memcpy(file_text, text, n);
    file_text[n] = '\n';
    free(text);
    tt_write_file_atomic(path, file_text, n + 1);
    free(file_text);
}

void tt_model_config_free(tt_model_config *c) {
    free(c->json_text);
    c->json_text = NULL;
    free(c->rope_short_factor);
    free(c->rope_long_factor);
    free(c->layer_attention);
    c->rope_short_factor = c->rope_long_factor = NULL;
    c->layer_attention = NULL;
    free(c->quantization.float_linear);
    c->quantization.float_linear = NULL;
}

int64_t tt_model_config_param_count(const tt_model_config *c) {
    const tt_arch *arch = tt_arch_of(c);
    int64_t per_layer = 0;
    for (int i = 0; i < arch->layer_param_count; i++)
        if (tt_layer_param_present(&arch->layer_params[i], c))
            per_layer += tt_layer_param_copies(&arch->layer_params[i], c) * tt_dim_size(arch->layer_params[i].rows, c) *
                         tt_dim_size(arch->layer_params[i].cols, c);
    int64_t total = c->vocab_size * c->hidden_size + c->num_layers * per_layer + c->hidden_size;
    if (!c->tie_word_embeddings) total += c->vocab_size * c->hidden_size;
    return total;
}
