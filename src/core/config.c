/* The run configuration. Every key is declared once, in key_table below: its type, default,
 * valid values and help. Defaults, parsing, validation, `--help`, the YAML written next to
 * checkpoints and docs/CONFIG.md all follow that table. */
#include "core/config.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "core/check.h"

typedef enum key_type {
    KEY_BOOL,
    KEY_INT,
    KEY_FLOAT,
    KEY_STRING,
    KEY_ENUM,     /* a string from a fixed list, stored as its index */
    KEY_BYTES,    /* an integer or "24GiB" */
    KEY_DATASETS, /* a list of token files */
    KEY_RESERVED, /* a feature that is not built yet: only its "off" value is accepted */
} key_type;

typedef struct key_spec {
    const char *name;
    key_type type;
    size_t offset;             /* into tt_run_config (unused for KEY_RESERVED) */
    const char *default_text;  /* parsed like a user value to set the default */
    double min, max;           /* inclusive range for numbers (NAN: unbounded) */
    bool min_exclusive;
    const char *enum_values;   /* "a|b|c" for KEY_ENUM */
    const char *unavailable;   /* KEY_ENUM values that name later features: "b|c" */
    const char *help;
} key_spec;

#define FIELD(name) offsetof(tt_run_config, name)
#define NO_LIMIT NAN, NAN, false

static const char *const unavailable_feature_note =
    "it arrives with a later version of tiertrain (activation memory, parameter memory or the CUDA backend)";

static const key_spec key_table[] = {
    /* model */
    {"base_model", KEY_STRING, FIELD(base_model), "~", NO_LIMIT, NULL, NULL,
     "Hugging Face model directory: config.json + model.safetensors or model.safetensors.index.json"},
    {"model_config", KEY_STRING, FIELD(model_config), "~", NO_LIMIT, NULL, NULL,
     "a config.json (or a directory holding one) to train from random init instead of base_model"},
    {"initializer_range", KEY_FLOAT, FIELD(initializer_range), "0", 0, 10, false, NULL, NULL,
     "std of the random init; 0 uses 0.02"},
    /* data */
    {"datasets", KEY_DATASETS, FIELD(datasets), "[]", NO_LIMIT, NULL, NULL,
     "token files: a list of {path: file.tok} or of paths (docs/token_format.md)"},
    {"val_set_size", KEY_FLOAT, FIELD(val_set_size), "0.0", 0, NAN, false, NULL, NULL,
     "held-out sequences: below 1 a fraction, from 1 a count"},
    {"sequence_len", KEY_INT, FIELD(sequence_len), "512", 2, NAN, false, NULL, NULL, "tokens per sequence"},
    {"micro_batch_size", KEY_INT, FIELD(micro_batch_size), "1", 1, NAN, false, NULL, NULL,
     "sequences per forward/backward"},
    {"gradient_accumulation_steps", KEY_INT, FIELD(gradient_accumulation_steps), "1", 1, NAN, false, NULL, NULL,
     "micro-batches per optimizer step; the loss is averaged over all their unmasked tokens"},
    /* optimisation */
    {"optimizer", KEY_ENUM, FIELD(optimizer), "adamw_torch", NO_LIMIT, "adamw_torch|adamw_torch_fused", NULL,
     "AdamW as torch.optim.AdamW (both names run the same update)"},
    {"learning_rate", KEY_FLOAT, FIELD(learning_rate), "2e-5", 0, NAN, true, NULL, NULL, "peak learning rate"},
    {"lr_scheduler", KEY_ENUM, FIELD(lr_scheduler), "cosine", NO_LIMIT, "cosine|linear|constant", NULL,
     "decay after warmup"},
    {"warmup_steps", KEY_INT, FIELD(warmup_steps), "-1", -1, NAN, false, NULL, NULL,
     "linear warmup steps; -1 uses warmup_ratio"},
    {"warmup_ratio", KEY_FLOAT, FIELD(warmup_ratio), "0.0", 0, 1, false, NULL, NULL,
     "warmup as a fraction of all steps, when warmup_steps is -1"},
    {"cosine_min_lr_ratio", KEY_FLOAT, FIELD(cosine_min_lr_ratio), "0.0", 0, 1, false, NULL, NULL,
     "the cosine schedule's floor as a fraction of learning_rate"},
    {"max_steps", KEY_INT, FIELD(max_steps), "0", 0, NAN, false, NULL, NULL,
     "optimizer steps to run; 0 runs num_epochs"},
    {"num_epochs", KEY_FLOAT, FIELD(num_epochs), "1.0", 0, NAN, true, NULL, NULL,
     "passes over the training sequences when max_steps is 0"},
    {"weight_decay", KEY_FLOAT, FIELD(weight_decay), "0.0", 0, NAN, false, NULL, NULL,
     "decoupled weight decay of matrices (biases and norm weights never decay)"},
    {"max_grad_norm", KEY_FLOAT, FIELD(max_grad_norm), "1.0", 0, NAN, false, NULL, NULL,
     "global gradient-norm clipping; 0 disables it"},
    {"adam_beta1", KEY_FLOAT, FIELD(adam_beta1), "0.9", 0, 1, false, NULL, NULL, "AdamW beta1, in [0, 1)"},
    {"adam_beta2", KEY_FLOAT, FIELD(adam_beta2), "0.999", 0, 1, false, NULL, NULL, "AdamW beta2, in [0, 1)"},
    {"adam_epsilon", KEY_FLOAT, FIELD(adam_epsilon), "1e-8", 0, NAN, true, NULL, NULL, "AdamW epsilon"},
    {"seed", KEY_INT, FIELD(seed), "42", 0, NAN, false, NULL, NULL, "seeds the init, the eval split and the shuffles"},
    /* output and evaluation */
    {"output_dir", KEY_STRING, FIELD(output_dir), "./outputs", NO_LIMIT, NULL, NULL,
     "checkpoints, the final model and metrics.jsonl"},
    {"save_steps", KEY_INT, FIELD(save_steps), "0", 0, NAN, false, NULL, NULL,
     "a checkpoint every N steps (and always at the end); 0: only at the end"},
    {"eval_steps", KEY_INT, FIELD(eval_steps), "0", 0, NAN, false, NULL, NULL,
     "eval loss every N steps (and at the end) when there is an eval set"},
    {"logging_steps", KEY_INT, FIELD(logging_steps), "1", 1, NAN, false, NULL, NULL,
     "print the progress line every N steps"},
    {"resume_from_checkpoint", KEY_STRING, FIELD(resume_from_checkpoint), "~", NO_LIMIT, NULL, NULL,
     "a checkpoint-<step> directory to continue from (--resume picks the newest in output_dir)"},
    {"max_shard_size", KEY_BYTES, FIELD(max_shard_bytes), "5GB", 1, NAN, false, NULL, NULL,
     "saved models larger than this are split into shards with an index, as transformers does"},
    /* memory */
    {"gradient_checkpointing", KEY_BOOL, FIELD(gradient_checkpointing), "false", NO_LIMIT, NULL, NULL,
     "keep only each layer's input and recompute the layer in the backward"},
    {"activation_offloading", KEY_ENUM, FIELD(activation_offloading), "false", NO_LIMIT,
     "false|true|legacy|disk|hidden_states", "true|legacy|disk|hidden_states",
     "offload saved activations (only false in this version)"},
    {"loss_chunk_size", KEY_INT, FIELD(loss_chunk_size), "1024", 1, NAN, false, NULL, NULL,
     "tokens per LM-head + cross-entropy chunk: the full logits never exist"},
    {"host_memory_budget", KEY_BYTES, FIELD(host_memory_budget), "0", 0, NAN, false, NULL, NULL,
     "bytes of host memory the plan may use (\"24GiB\"); 0: the machine's physical memory"},
    /* execution */
    {"device", KEY_ENUM, FIELD(device), "cpu", NO_LIMIT, "cpu|cuda", "cuda", "where the ops run"},
    {"num_threads", KEY_INT, FIELD(num_threads), "0", 0, NAN, false, NULL, NULL, "CPU threads; 0: all cores"},
    {"progress", KEY_BOOL, FIELD(progress), "true", NO_LIMIT, NULL, NULL, "print the progress line"},
    {"bf16", KEY_ENUM, FIELD(bf16), "auto", NO_LIMIT, "false|auto|true", "true",
     "bf16 compute (comes with the CUDA backend; auto is fp32 on the CPU)"},
    {"fp16", KEY_BOOL, FIELD(fp16), "false", NO_LIMIT, NULL, NULL, "fp16 compute (only false)"},
    {"tf32", KEY_BOOL, FIELD(tf32), "false", NO_LIMIT, NULL, NULL, "tf32 matmuls (only false: no GPU backend yet)"},
    /* features that are not built yet: any value but their "off" value is an error */
    {"adapter", KEY_RESERVED, 0, NULL, NO_LIMIT, NULL, NULL, "LoRA: adapter: lora"},
    {"lora_r", KEY_RESERVED, 0, NULL, NO_LIMIT, NULL, NULL, "LoRA rank"},
    {"lora_alpha", KEY_RESERVED, 0, NULL, NO_LIMIT, NULL, NULL, "LoRA alpha"},
    {"lora_dropout", KEY_RESERVED, 0, NULL, NO_LIMIT, NULL, NULL, "LoRA dropout"},
    {"lora_target_modules", KEY_RESERVED, 0, NULL, NO_LIMIT, NULL, NULL, "LoRA target modules"},
    {"lora_target_linear", KEY_RESERVED, 0, NULL, NO_LIMIT, NULL, NULL, "LoRA on all linear layers"},
    {"lora_model_dir", KEY_RESERVED, 0, NULL, NO_LIMIT, NULL, NULL, "a LoRA adapter to continue from"},
    {"layer_offloading", KEY_RESERVED, 0, NULL, NO_LIMIT, NULL, NULL, "stream frozen layers from pinned memory"},
    {"selective_checkpointing", KEY_RESERVED, 0, NULL, NO_LIMIT, NULL, NULL, "keep attention, recompute the rest"},
    {"gradient_checkpointing_kwargs", KEY_RESERVED, 0, NULL, NO_LIMIT, NULL, NULL, "checkpointing variants"},
    {"min_offload_size", KEY_RESERVED, 0, NULL, NO_LIMIT, NULL, NULL, "activation offloading threshold"},
    {"use_pin_memory", KEY_RESERVED, 0, NULL, NO_LIMIT, NULL, NULL, "activation offloading to pinned memory"},
    {"use_streams", KEY_RESERVED, 0, NULL, NO_LIMIT, NULL, NULL, "activation offloading on a side stream"},
    {"max_fwd_stash_size", KEY_RESERVED, 0, NULL, NO_LIMIT, NULL, NULL, "activation offloading stash"},
    {"offload_dir", KEY_RESERVED, 0, NULL, NO_LIMIT, NULL, NULL, "disk offloading directory"},
    {"cpu_offloading", KEY_RESERVED, 0, NULL, NO_LIMIT, NULL, NULL, "Megatron activation offloading"},
    {"cpu_offloading_num_layers", KEY_RESERVED, 0, NULL, NO_LIMIT, NULL, NULL, "Megatron offloaded layers"},
    {"cpu_offloading_activations", KEY_RESERVED, 0, NULL, NO_LIMIT, NULL, NULL, "Megatron activation offloading"},
    {"cpu_offloading_weights", KEY_RESERVED, 0, NULL, NO_LIMIT, NULL, NULL, "Megatron weight offloading"},
    {"cpu_offloading_double_buffering", KEY_RESERVED, 0, NULL, NO_LIMIT, NULL, NULL, "Megatron double buffering"},
    {"optimizer_cpu_offload", KEY_RESERVED, 0, NULL, NO_LIMIT, NULL, NULL, "optimizer state in host memory"},
    {"optimizer_offload_fraction", KEY_RESERVED, 0, NULL, NO_LIMIT, NULL, NULL, "share of the optimizer on the CPU"},
    {"overlap_cpu_optimizer_d2h_h2d", KEY_RESERVED, 0, NULL, NO_LIMIT, NULL, NULL, "overlapped CPU optimizer"},
    {"gpu_memory_budget", KEY_RESERVED, 0, NULL, NO_LIMIT, NULL, NULL, "GPU tier budget"},
    {"trace", KEY_RESERVED, 0, NULL, NO_LIMIT, NULL, NULL, "Chrome/Perfetto trace of copies and compute"},
};

#define KEY_COUNT ((int)(sizeof key_table / sizeof key_table[0]))

/* Where a value came from, for error messages: "run.yaml:12" or "command-line override 'k=v'". */
typedef struct origin {
    char text[512];
} origin;

static const char *type_name(key_type type) {
    switch (type) {
    case KEY_BOOL: return "bool";
    case KEY_INT: return "int";
    case KEY_FLOAT: return "float";
    case KEY_STRING: return "string";
    case KEY_ENUM: return "enum";
    case KEY_BYTES: return "bytes";
    case KEY_DATASETS: return "list";
    default: return "reserved";
    }
}

int64_t tt_parse_bytes(const char *text) {
    if (!text) return -1;
    while (isspace((unsigned char)*text)) text++;
    if (*text == '-' || *text == 0) return -1;
    errno = 0;
    char *end = NULL;
    double value = strtod(text, &end);
    if (end == text || errno || !(value >= 0)) return -1;
    while (isspace((unsigned char)*end)) end++;
    static const struct {
        const char *suffix;
        double factor;
    } units[] = {{"", 1},       {"B", 1},         {"K", 1024.0},      {"KiB", 1024.0},    {"KB", 1e3},
                 {"M", 1048576.0}, {"MiB", 1048576.0}, {"MB", 1e6},  {"G", 1073741824.0}, {"GiB", 1073741824.0},
                 {"GB", 1e9},   {"T", 1099511627776.0}, {"TiB", 1099511627776.0}, {"TB", 1e12}};
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strcmp(end, units[i].suffix) != 0) continue;
        double bytes = value * units[i].factor;
        if (bytes >= 9.2e18) return -1;
        if (units[i].factor == 1 && value != floor(value)) return -1;
        return (int64_t)bytes;
    }
    return -1;
}

static int edit_distance(const char *a, const char *b) {
    size_t n = strlen(a), m = strlen(b);
    if (n > 63 || m > 63) return 99;
    int row[64];
    for (size_t j = 0; j <= m; j++) row[j] = (int)j;
    for (size_t i = 1; i <= n; i++) {
        int diagonal = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= m; j++) {
            int above = row[j];
            int cost = a[i - 1] == b[j - 1] ? 0 : 1;
            int best = diagonal + cost;
            if (above + 1 < best) best = above + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diagonal = above;
        }
    }
    return row[m];
}

static const key_spec *find_key(const char *name) {
    for (int i = 0; i < KEY_COUNT; i++)
        if (strcmp(key_table[i].name, name) == 0) return &key_table[i];
    return NULL;
}

static noreturn void die_unknown_key(const origin *where, const char *name) {
    const key_spec *closest = NULL;
    int best = 4;
    for (int i = 0; i < KEY_COUNT; i++) {
        int d = edit_distance(name, key_table[i].name);
        if (d < best) {
            best = d;
            closest = &key_table[i];
        }
    }
    if (closest)
        tt_die("%s: unknown key '%s'; did you mean '%s'? (`tiertrain train --help` lists every key)", where->text, name,
               closest->name);
    tt_die("%s: unknown key '%s' (`tiertrain train --help` lists every key)", where->text, name);
}

/* YAML null: ~, null, Null, NULL or an empty plain scalar. */
static bool is_null_scalar(const yaml_node_t *node) {
    if (node->type != YAML_SCALAR_NODE) return false;
    const char *v = (const char *)node->data.scalar.value;
    if (node->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) return false;
    return v[0] == 0 || strcmp(v, "~") == 0 || strcmp(v, "null") == 0 || strcmp(v, "Null") == 0 ||
           strcmp(v, "NULL") == 0;
}

static const char *scalar_text(const yaml_node_t *node) { return (const char *)node->data.scalar.value; }

static bool parse_bool_text(const char *v, bool *out) {
    if (strcmp(v, "true") == 0 || strcmp(v, "True") == 0 || strcmp(v, "TRUE") == 0) {
        *out = true;
        return true;
    }
    if (strcmp(v, "false") == 0 || strcmp(v, "False") == 0 || strcmp(v, "FALSE") == 0) {
        *out = false;
        return true;
    }
    return false;
}

static void check_range(const key_spec *k, const origin *where, double value, const char *text) {
    if (!isnan(k->min) && (k->min_exclusive ? !(value > k->min) : !(value >= k->min)))
        tt_die("%s: %s must be %s %g, got %s", where->text, k->name, k->min_exclusive ? ">" : ">=", k->min, text);
    if (!isnan(k->max)) {
        bool half_open = strcmp(k->name, "adam_beta1") == 0 || strcmp(k->name, "adam_beta2") == 0;
        if (half_open ? !(value < k->max) : !(value <= k->max))
            tt_die("%s: %s must be %s %g, got %s", where->text, k->name, half_open ? "<" : "<=", k->max, text);
    }
}

static const char *require_scalar(const key_spec *k, const origin *where, const yaml_node_t *node,
                                  const char *expected) {
    if (node->type != YAML_SCALAR_NODE)
        tt_die("%s: %s: expected %s, got a %s", where->text, k->name, expected,
               node->type == YAML_SEQUENCE_NODE ? "list" : "mapping");
    return scalar_text(node);
}

/* Is `text` one of the '|'-separated names in list? Returns its index or -1. */
static int index_in_list(const char *list, const char *text) {
    int index = 0;
    size_t length = strlen(text);
    for (const char *p = list; *p; index++) {
        const char *bar = strchr(p, '|');
        size_t n = bar ? (size_t)(bar - p) : strlen(p);
        if (n == length && strncmp(p, text, n) == 0) return index;
        if (!bar) break;
        p = bar + 1;
    }
    return -1;
}

static void list_with_commas(const char *list, char *buf, size_t size) {
    size_t used = 0;
    for (const char *p = list; *p && used + 3 < size; p++) {
        if (*p == '|') {
            buf[used++] = ',';
            buf[used++] = ' ';
        } else {
            buf[used++] = *p;
        }
    }
    buf[used] = 0;
}

/* The "off" value of a reserved key: false, 0, null or an empty collection. */
static bool is_off_value(const yaml_node_t *node) {
    if (node->type == YAML_SEQUENCE_NODE) return node->data.sequence.items.start == node->data.sequence.items.top;
    if (node->type == YAML_MAPPING_NODE) return node->data.mapping.pairs.start == node->data.mapping.pairs.top;
    if (is_null_scalar(node)) return true;
    bool b;
    if (parse_bool_text(scalar_text(node), &b)) return !b;
    char *end = NULL;
    double v = strtod(scalar_text(node), &end);
    return end != scalar_text(node) && *end == 0 && v == 0;
}

static void set_datasets(tt_run_config *c, const key_spec *k, const origin *where, yaml_document_t *doc,
                         yaml_node_t *node) {
    for (int i = 0; i < c->dataset_count; i++) free(c->datasets[i]);
    c->dataset_count = 0;
    if (is_null_scalar(node)) return;
    if (node->type == YAML_SCALAR_NODE) { /* a single path */
        c->datasets[c->dataset_count++] = tt_xstrdup(scalar_text(node));
        return;
    }
    if (node->type != YAML_SEQUENCE_NODE)
        tt_die("%s: %s: expected a list of {path: file.tok} entries or of paths", where->text, k->name);
    for (yaml_node_item_t *item = node->data.sequence.items.start; item < node->data.sequence.items.top; item++) {
        yaml_node_t *entry = yaml_document_get_node(doc, *item);
        if (c->dataset_count == TT_MAX_DATASETS)
            tt_die("%s: at most %d datasets; concatenate token files or list fewer", where->text, TT_MAX_DATASETS);
        const char *path = NULL;
        if (entry->type == YAML_SCALAR_NODE) {
            path = scalar_text(entry);
        } else if (entry->type == YAML_MAPPING_NODE) {
            for (yaml_node_pair_t *pair = entry->data.mapping.pairs.start; pair < entry->data.mapping.pairs.top; pair++) {
                yaml_node_t *key = yaml_document_get_node(doc, pair->key);
                yaml_node_t *value = yaml_document_get_node(doc, pair->value);
                if (key->type != YAML_SCALAR_NODE || value->type != YAML_SCALAR_NODE)
                    tt_die("%s: datasets entries take scalar keys and values", where->text);
                const char *name = scalar_text(key);
                if (strcmp(name, "path") == 0)
                    path = scalar_text(value);
                else if (strcmp(name, "type") == 0) {
                    if (strcmp(scalar_text(value), "tokens") != 0)
                        tt_die("%s: datasets type '%s' is not supported; tiertrain reads token files (type: tokens, "
                               "see docs/token_format.md)",
                               where->text, scalar_text(value));
                } else
                    tt_die("%s: datasets entries take 'path' and 'type', not '%s'", where->text, name);
            }
        } else {
            tt_die("%s: datasets entries are paths or {path: file.tok}", where->text);
        }
        if (!path || !*path) tt_die("%s: a datasets entry has no path", where->text);
        c->datasets[c->dataset_count++] = tt_xstrdup(path);
    }
}

/* Applies one value to the config. */
static void set_key(tt_run_config *c, const key_spec *k, const origin *where, yaml_document_t *doc, yaml_node_t *node) {
    void *field = (char *)c + k->offset;
    switch (k->type) {
    case KEY_RESERVED:
        if (!is_off_value(node))
            tt_die("%s: %s is not available yet in this version of tiertrain: %s; remove it from the config",
                   where->text, k->name, unavailable_feature_note);
        return;
    case KEY_DATASETS: set_datasets(c, k, where, doc, node); return;
    case KEY_STRING: {
        char **s = field;
        if (is_null_scalar(node)) {
            free(*s);
            *s = NULL;
            return;
        }
        const char *text = require_scalar(k, where, node, "a string");
        free(*s);
        *s = tt_xstrdup(text);
        return;
    }
    case KEY_BOOL: {
        const char *text = require_scalar(k, where, node, "true or false");
        bool b;
        if (!parse_bool_text(text, &b)) tt_die("%s: %s: expected true or false, got '%s'", where->text, k->name, text);
        if (b && (strcmp(k->name, "fp16") == 0 || strcmp(k->name, "tf32") == 0))
            tt_die("%s: %s: true is not available yet: the CPU backend computes in fp32 and %s", where->text, k->name,
                   unavailable_feature_note);
        *(bool *)field = b;
        return;
    }
    case KEY_INT: {
        const char *text = require_scalar(k, where, node, "an integer");
        errno = 0;
        char *end = NULL;
        long long v = strtoll(text, &end, 10);
        if (end == text || *end || errno) tt_die("%s: %s: expected an integer, got '%s'", where->text, k->name, text);
        check_range(k, where, (double)v, text);
        *(int64_t *)field = v;
        return;
    }
    case KEY_FLOAT: {
        const char *text = require_scalar(k, where, node, "a number");
        errno = 0;
        char *end = NULL;
        double v = strtod(text, &end);
        if (end == text || *end || errno || !isfinite(v))
            tt_die("%s: %s: expected a number, got '%s'", where->text, k->name, text);
        check_range(k, where, v, text);
        *(double *)field = v;
        return;
    }
    case KEY_BYTES: {
        const char *text = require_scalar(k, where, node, "a size in bytes");
        int64_t v = tt_parse_bytes(text);
        if (v < 0)
            tt_die("%s: %s: expected a size such as 1073741824, \"24GiB\" or \"512MB\", got '%s'", where->text, k->name,
                   text);
        check_range(k, where, (double)v, text);
        *(int64_t *)field = v;
        return;
    }
    case KEY_ENUM: {
        const char *text = require_scalar(k, where, node, "a name");
        int index = index_in_list(k->enum_values, text);
        char valid[256];
        list_with_commas(k->enum_values, valid, sizeof valid);
        if (index < 0) tt_die("%s: %s must be one of %s; got '%s'", where->text, k->name, valid, text);
        if (k->unavailable && index_in_list(k->unavailable, text) >= 0) {
            if (strcmp(k->name, "device") == 0)
                tt_die("%s: device: cuda is not available yet: the CUDA backend comes with a later version; use "
                       "device: cpu",
                       where->text);
            tt_die("%s: %s: %s is not available yet in this version of tiertrain: %s; use %s: %s", where->text, k->name,
                   text, unavailable_feature_note, k->name, k->default_text);
        }
        if (strcmp(k->name, "optimizer") == 0) {
            char **s = field;
            free(*s);
            *s = tt_xstrdup(text);
        } else {
            *(int *)field = index;
        }
        return;
    }
    }
}

/* Parses text as one YAML document; dies with `what` and libyaml's problem on error. */
static void load_document(yaml_document_t *doc, const unsigned char *text, size_t size, const char *what) {
    yaml_parser_t parser;
    if (!yaml_parser_initialize(&parser)) tt_die("out of memory starting the YAML parser");
    yaml_parser_set_input_string(&parser, text, size);
    if (!yaml_parser_load(&parser, doc)) {
        tt_die("%s:%zu:%zu: malformed YAML: %s%s%s", what, parser.problem_mark.line + 1, parser.problem_mark.column + 1,
               parser.problem ? parser.problem : "syntax error", parser.context ? " " : "",
               parser.context ? parser.context : "");
    }
    yaml_parser_delete(&parser);
}

static void apply_default(tt_run_config *c, const key_spec *k) {
    if (k->type == KEY_RESERVED) return;
    yaml_document_t doc;
    load_document(&doc, (const unsigned char *)k->default_text, strlen(k->default_text), "built-in default");
    origin where;
    snprintf(where.text, sizeof where.text, "default of %s", k->name);
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    TT_CHECK(root != NULL, "default of %s does not parse", k->name);
    set_key(c, k, &where, &doc, root);
    yaml_document_delete(&doc);
}

void tt_run_config_defaults(tt_run_config *c) {
    memset(c, 0, sizeof(*c));
    for (int i = 0; i < KEY_COUNT; i++) apply_default(c, &key_table[i]);
}

static char *read_whole_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) tt_die("cannot open config %s: %s", path, strerror(errno));
    char *buf = NULL;
    size_t used = 0, capacity = 0;
    for (;;) {
        if (used + 4096 > capacity) {
            capacity = capacity ? 2 * capacity : 8192;
            if (capacity > (64u << 20)) tt_die("%s: a config file larger than 64 MiB is not a config", path);
            buf = tt_xrealloc(buf, capacity, "config file");
        }
        size_t got = fread(buf + used, 1, capacity - used - 1, f);
        used += got;
        if (got == 0) break;
    }
    bool failed = ferror(f) != 0;
    fclose(f);
    if (failed) tt_die("cannot read config %s", path);
    buf[used] = 0;
    *size = used;
    return buf;
}

void tt_run_config_load(tt_run_config *c, const char *path, int override_count, char *const *overrides) {
    if (path) {
        size_t size = 0;
        char *text = read_whole_file(path, &size);
        yaml_document_t doc;
        load_document(&doc, (const unsigned char *)text, size, path);
        yaml_node_t *root = yaml_document_get_root_node(&doc);
        if (root && !(root->type == YAML_SCALAR_NODE && is_null_scalar(root))) {
            if (root->type != YAML_MAPPING_NODE)
                tt_die("%s:%zu: the top level must be a mapping of keys to values (key: value)", path,
                       root->start_mark.line + 1);
            bool seen[KEY_COUNT] = {false};
            for (yaml_node_pair_t *pair = root->data.mapping.pairs.start; pair < root->data.mapping.pairs.top; pair++) {
                yaml_node_t *key = yaml_document_get_node(&doc, pair->key);
                yaml_node_t *value = yaml_document_get_node(&doc, pair->value);
                origin where;
                snprintf(where.text, sizeof where.text, "%s:%zu", path, key->start_mark.line + 1);
                if (key->type != YAML_SCALAR_NODE) tt_die("%s: keys must be plain names", where.text);
                const key_spec *k = find_key(scalar_text(key));
                if (!k) die_unknown_key(&where, scalar_text(key));
                int index = (int)(k - key_table);
                if (seen[index]) tt_die("%s: key '%s' appears twice", where.text, k->name);
                seen[index] = true;
                set_key(c, k, &where, &doc, value);
            }
        }
        yaml_document_delete(&doc);
        free(text);
    }
    for (int i = 0; i < override_count; i++) {
        const char *arg = overrides[i];
        origin where;
        snprintf(where.text, sizeof where.text, "command-line override '%s'", arg);
        const char *eq = strchr(arg, '=');
        if (!eq || eq == arg) tt_die("%s: overrides are written key=value", where.text);
        char name[128];
        size_t n = (size_t)(eq - arg) < sizeof name - 1 ? (size_t)(eq - arg) : sizeof name - 1;
        memcpy(name, arg, n);
        name[n] = 0;
        const key_spec *k = find_key(name);
        if (!k) die_unknown_key(&where, name);
        const char *value_text = eq + 1;
        yaml_document_t doc;
        load_document(&doc, (const unsigned char *)value_text, strlen(value_text), where.text);
        yaml_node_t *root = yaml_document_get_root_node(&doc);
        if (!root) { /* "key=" : an empty value is null */
            yaml_document_delete(&doc);
            load_document(&doc, (const unsigned char *)"~", 1, where.text);
            root = yaml_document_get_root_node(&doc);
        }
        set_key(c, k, &where, &doc, root);
        yaml_document_delete(&doc);
    }
}

void tt_run_config_validate(const tt_run_config *c) {
    if ((c->base_model == NULL) == (c->model_config == NULL))
        tt_die("set exactly one of base_model (a Hugging Face model directory to fine-tune) and model_config (a "
               "config.json to train from random init)");
    if (c->dataset_count == 0) tt_die("datasets is empty: list at least one token file (docs/token_format.md)");
    if (!c->output_dir || !*c->output_dir) tt_die("output_dir must name a directory");
}

static void write_yaml_string(FILE *out, const char *s) {
    if (!s) {
        fputs("~", out);
        return;
    }
    fputc('"', out);
    for (const char *p = s; *p; p++) {
        if (*p == '"' || *p == '\\') fputc('\\', out);
        fputc(*p, out);
    }
    fputc('"', out);
}

static void write_value(FILE *out, const tt_run_config *c, const key_spec *k) {
    const void *field = (const char *)c + k->offset;
    switch (k->type) {
    case KEY_BOOL: fputs(*(const bool *)field ? "true" : "false", out); break;
    case KEY_INT:
    case KEY_BYTES: fprintf(out, "%lld", (long long)*(const int64_t *)field); break;
    case KEY_FLOAT: fprintf(out, "%.17g", *(const double *)field); break;
    case KEY_STRING: write_yaml_string(out, *(char *const *)field); break;
    case KEY_ENUM:
        if (strcmp(k->name, "optimizer") == 0) {
            write_yaml_string(out, *(char *const *)field);
        } else {
            int index = *(const int *)field;
            const char *p = k->enum_values;
            for (int i = 0; i < index; i++) p = strchr(p, '|') + 1;
            const char *bar = strchr(p, '|');
            fprintf(out, "%.*s", bar ? (int)(bar - p) : (int)strlen(p), p);
        }
        break;
    case KEY_DATASETS:
        fputc('[', out);
        for (int i = 0; i < c->dataset_count; i++) {
            fputs(i ? ", {path: " : "{path: ", out);
            write_yaml_string(out, c->datasets[i]);
            fputc('}', out);
        }
        fputc(']', out);
        break;
    case KEY_RESERVED: break;
    }
}

void tt_run_config_write_yaml(const tt_run_config *c, FILE *out) {
    fputs("# the effective configuration of this run (tiertrain)\n", out);
    for (int i = 0; i < KEY_COUNT; i++) {
        if (key_table[i].type == KEY_RESERVED) continue;
        fprintf(out, "%s: ", key_table[i].name);
        write_value(out, c, &key_table[i]);
        fputc('\n', out);
    }
}

void tt_run_config_print_help(FILE *out) {
    fputs("configuration keys (YAML file, or key=value on the command line):\n", out);
    for (int i = 0; i < KEY_COUNT; i++) {
        const key_spec *k = &key_table[i];
        if (k->type == KEY_RESERVED) continue;
        char valid[160] = "";
        if (k->type == KEY_ENUM) list_with_commas(k->enum_values, valid, sizeof valid);
        fprintf(out, "  %-30s %-7s default %-12s %s%s%s%s\n", k->name, type_name(k->type), k->default_text, k->help,
                valid[0] ? " [" : "", valid, valid[0] ? "]" : "");
    }
    fputs("\nnot available yet (rejected unless set to their off value: false, 0 or null):\n", out);
    for (int i = 0; i < KEY_COUNT; i++)
        if (key_table[i].type == KEY_RESERVED) fprintf(out, "  %-30s %s\n", key_table[i].name, key_table[i].help);
}

void tt_run_config_free(tt_run_config *c) {
    for (int i = 0; i < KEY_COUNT; i++)
        if (key_table[i].type == KEY_STRING || (key_table[i].type == KEY_ENUM && strcmp(key_table[i].name, "optimizer") == 0)) {
            char **s = (char **)((char *)c + key_table[i].offset);
            free(*s);
            *s = NULL;
        }
    for (int i = 0; i < c->dataset_count; i++) free(c->datasets[i]);
    c->dataset_count = 0;
}
