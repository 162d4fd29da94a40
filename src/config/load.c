/* Loading: the YAML file, then key=value overrides; each value applied through the key table. Error
 * messages name where the value came from ("run.yaml:12" or "command-line override 'seed=x'"), the key,
 * what was wrong and the valid values. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <yaml.h>

#include "config/config_internal.h"
#include "core/check.h"
#include "core/hf_cache.h"
#include "core/input_file.h"

static void apply_default(tt_run_config *c, const key_spec *k);

/* KEY_STRING: a string, or ~ (unset) */
static void set_string(void *field, const key_spec *k, const source *src, yaml_node_t *node) {
    char **s = field;
    if (cfg_is_null(node)) {
        free(*s);
        *s = NULL;
        return;
    }
    if (node->type != YAML_SCALAR_NODE || !*cfg_scalar_text(node)) cfg_die_type(src, node, k, "a string (or ~: unset)");
    free(*s);
    *s = tt_xstrdup(cfg_scalar_text(node));
    return;
}

/* KEY_BOOL: true or false; the table's not-yet values refused */
static void set_bool(void *field, const key_spec *k, const source *src, yaml_node_t *node) {
    bool b;
    if (node->type != YAML_SCALAR_NODE || !cfg_parse_bool(cfg_scalar_text(node), &b))
        cfg_die_type(src, node, k, "true or false");
    if (b && cfg_index_in_list(k->not_yet_values, "true", false) >= 0) cfg_die_not_yet(src, node, k, "true");
    *(bool *)field = b;
    return;
}

/* KEY_INT: a 64-bit integer in the key's range (-1 or ~ where it means "not given") */
static void set_int(void *field, const key_spec *k, const source *src, yaml_node_t *node) {
    int64_t v = 0;
    if (k->minus_one_unset && cfg_is_null(node)) {
        *(int64_t *)field = -1;
        return;
    }
    if (node->type != YAML_SCALAR_NODE) cfg_die_type(src, node, k, "an integer");
    int status = cfg_parse_int64(cfg_scalar_text(node), &v);
    if (status == 1) cfg_die_type(src, node, k, "an integer");
    if (status == 2)
        cfg_die_at(src, node, "%s: %s is outside the 64-bit integer range", k->name, cfg_scalar_text(node));
    if (!(k->minus_one_unset && v == -1)) cfg_check_range(src, node, k, (double)v, cfg_scalar_text(node));
    *(int64_t *)field = v;
    return;
}

/* KEY_FLOAT: a double in the key's range */
static void set_float(void *field, const key_spec *k, const source *src, yaml_node_t *node) {
    double v = 0;
    if (node->type != YAML_SCALAR_NODE) cfg_die_type(src, node, k, "a number");
    int status = cfg_parse_double(cfg_scalar_text(node), &v);
    if (status == 1) cfg_die_type(src, node, k, "a number");
    if (status == 2) cfg_die_at(src, node, "%s: %s is outside the range of a double", k->name, cfg_scalar_text(node));
    cfg_check_range(src, node, k, v, cfg_scalar_text(node));
    *(double *)field = v;
    return;
}

/* KEY_BYTES: a size: bytes, or with a unit (24GiB, 512MB) */
static void set_bytes(void *field, const key_spec *k, const source *src, yaml_node_t *node) {
    int64_t v = node->type == YAML_SCALAR_NODE ? tt_parse_bytes(cfg_scalar_text(node)) : -1;
    if (v < 0) cfg_die_type(src, node, k, "a size in bytes such as 1073741824, 24GiB or 512MB");
    cfg_check_range(src, node, k, (double)v, cfg_scalar_text(node));
    *(int64_t *)field = v;
    return;
}

/* KEY_ENUM: a name of the key's list: its index (STORE_INDEX) or a copy of the name (STORE_NAME) */
static void set_enum(void *field, const key_spec *k, const source *src, yaml_node_t *node) {
    char valid[256];
    cfg_list_with_commas(k->values, valid, sizeof valid);
    if (node->type != YAML_SCALAR_NODE || cfg_is_null(node)) {
        char expected[300];
        snprintf(expected, sizeof expected, "one of %s", valid);
        cfg_die_type(src, node, k, expected);
    }
    const char *text = cfg_scalar_text(node);
    bool b;
    if (cfg_parse_bool(text, &b)) text = b ? "true" : "false"; /* True/False as YAML writes booleans */
    int index = cfg_index_in_list(k->values, text, false);
    if (index < 0) cfg_die_at(src, node, "%s must be one of %s; got '%s'", k->name, valid, cfg_scalar_text(node));
    if (cfg_index_in_list(k->not_yet_values, text, false) >= 0) cfg_die_not_yet(src, node, k, text);
    if (k->storage == STORE_NAME) {
        char **s = field;
        free(*s);
        *s = tt_xstrdup(text);
    } else {
        *(int *)field = index;
    }
    return;
}

void cfg_apply_key(tt_run_config *c, const key_spec *k, const source *src, yaml_document_t *doc, yaml_node_t *node) {
    void *field = (char *)c + k->offset;
    char buf[256];
    /* axolotl's templates write unused keys with nothing after the colon (fp16:, warmup_steps:), meaning the default;
     * a string key's null is unset, its own value */
    const bool scalar = k->type == KEY_BOOL || k->type == KEY_INT || k->type == KEY_FLOAT || k->type == KEY_ENUM ||
                        k->type == KEY_BYTES;
    if (cfg_is_null(node) && (k->null_is_default || (scalar && !k->minus_one_unset && !src->built_in))) {
        apply_default(c, k);
        return;
    }
    if (!src->built_in && cfg_apply_foreign_value(c, k, src, node)) return;
    /* A LoRA setting without adapter: lora is a mistake validate names (off values are what axolotl's
     * full fine-tuning templates carry, and are fine). */
    if (!src->built_in && strncmp(k->name, "lora_", 5) == 0 && k->availability == AVAILABLE &&
        !cfg_is_off_value(node) && !c->lora_key_given)
        c->lora_key_given = k->name;
    if (!src->built_in && strncmp(k->name, "bnb_4bit_", 9) == 0 && !cfg_is_null(node) && !c->bnb_key_given)
        c->bnb_key_given = k->name;
    if (k->availability == NOT_YET) {
        if (!cfg_is_off_value(node))
            cfg_die_at(src, node,
                       "%s is not available yet in this version of tiertrain; remove it from the config (got %s; it is "
                       "for %s; only an off value, ~, false, 0, [] or {}, is accepted today)",
                       k->name, cfg_describe_value(node, buf, sizeof buf), k->help);
        return;
    }
    switch (k->type) {
    case KEY_DATASETS: cfg_set_datasets(c, src, doc, node); return;
    case KEY_SPECIAL_TOKENS: cfg_set_special_tokens(c, k, src, doc, node); return;
    case KEY_SELECTIVE: cfg_set_selective(c, k, src, doc, node); return;
    case KEY_CHECKPOINTING_KWARGS: cfg_set_checkpointing_kwargs(c, k, src, doc, node); return;
    case KEY_ADAPTER: cfg_set_adapter(c, src, node); return;
    case KEY_LORA_TARGETS: cfg_set_lora_targets(c, src, doc, node); return;
    case KEY_LAYER_LIST: cfg_set_layer_list(c, k, src, doc, node); return;
    case KEY_TEMPLATE_KWARGS: cfg_set_template_kwargs(c, k, src, doc, node); return;
    case KEY_STRING_LIST: cfg_set_string_list(c, k, src, doc, node); return;
    case KEY_STRING: set_string(field, k, src, node); return;
    case KEY_BOOL: set_bool(field, k, src, node); return;
    case KEY_INT: set_int(field, k, src, node); return;
    case KEY_FLOAT: set_float(field, k, src, node); return;
    case KEY_BYTES: set_bytes(field, k, src, node); return;
    case KEY_ENUM: set_enum(field, k, src, node); return;
    }
}

/* ---- documents ---- */

/* Deeper nesting than any key needs (datasets: a list of mappings holding lists) is refused before
 * libyaml builds the document: its scanner re-checks every open flow level on each token, so a
 * list nested 100000 deep would take quadratic time (and the loader as many nodes) for nothing. */
#define TT_CONFIG_MAX_NESTING 64

/* One pass over the events, stopping at the first list or mapping past TT_CONFIG_MAX_NESTING (false, with the
 * message); a syntax error ends the pass quietly (the load that follows reports it with its position). */
static bool nesting_ok(const char *text, size_t size, const source *src, char *message, size_t capacity) {
    yaml_parser_t parser;
    if (!yaml_parser_initialize(&parser)) tt_die("out of memory starting the YAML parser");
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, size);
    int depth = 0;
    bool ok = true;
    for (;;) {
        yaml_event_t event;
        if (!yaml_parser_parse(&parser, &event)) break;
        const yaml_event_type_t type = event.type;
        const size_t line = event.start_mark.line + 1;
        yaml_event_delete(&event);
        if (type == YAML_SEQUENCE_START_EVENT || type == YAML_MAPPING_START_EVENT) {
            if (++depth > TT_CONFIG_MAX_NESTING) {
                if (src->path)
                    snprintf(message, capacity,
                             "%s:%zu: lists and mappings nested more than %d deep; no key takes more than 3 levels",
                             src->path, line, TT_CONFIG_MAX_NESTING);
                else
                    snprintf(message, capacity,
                             "command-line override '%s': lists and mappings nested more than %d deep; no key takes "
                             "more than 3 levels",
                             src->override, TT_CONFIG_MAX_NESTING);
                ok = false;
                break;
            }
        } else if (type == YAML_SEQUENCE_END_EVENT || type == YAML_MAPPING_END_EVENT) {
            depth--;
        } else if (type == YAML_STREAM_END_EVENT) {
            break;
        }
    }
    yaml_parser_delete(&parser);
    return ok;
}

/* Parses one YAML document into *doc, or returns false with the message (a malformed text with libyaml's problem and
 * where it is, lists nested too deep, or a second document after the first, which would otherwise be ignored) and
 * nothing held: the caller releases its own buffers before it dies, so a caller that survives tt_die (the fuzzer)
 * keeps neither the parser's buffers nor the text. */
static bool parse_document(yaml_document_t *doc, const char *text, size_t size, const source *src, char *message,
                           size_t capacity) {
    if (!nesting_ok(text, size, src, message, capacity)) return false;
    yaml_parser_t parser;
    if (!yaml_parser_initialize(&parser)) tt_die("out of memory starting the YAML parser");
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, size);
    bool ok = yaml_parser_load(&parser, doc); /* on an error libyaml deletes the document itself */
    yaml_document_t next;
    bool next_ok = ok && yaml_parser_load(&parser, &next);
    bool parsed = true;
    if (!ok || !next_ok) {
        char context[200] = "";
        if (parser.context)
            snprintf(context, sizeof context, " (%s, line %zu)", parser.context, parser.context_mark.line + 1);
        const char *problem = parser.problem ? parser.problem : "cannot be parsed";
        if (src->path)
            snprintf(message, capacity, "%s:%zu:%zu: malformed YAML: %s%s; fix the syntax there", src->path,
                     parser.problem_mark.line + 1, parser.problem_mark.column + 1, problem, context);
        else
            snprintf(message, capacity,
                     "command-line override '%s': malformed YAML value: %s%s; quote the value if it is text",
                     src->override, problem, context);
        if (ok) yaml_document_delete(doc); /* the second load failed: the first document is whole */
        parsed = false;
    } else {
        yaml_node_t *second = yaml_document_get_root_node(&next);
        if (second && src->path)
            snprintf(message, capacity,
                     "%s:%zu: a second YAML document starts here; a config is one document (remove the '---')",
                     src->path, second->start_mark.line + 1);
        else if (second)
            snprintf(message, capacity, "command-line override '%s': the value holds more than one YAML document",
                     src->override);
        yaml_document_delete(&next);
        if (second) {
            yaml_document_delete(doc);
            parsed = false;
        }
    }
    yaml_parser_delete(&parser);
    return parsed;
}

/* A config file's path and a message fit (paths are at most PATH_MAX). */
#define LOAD_MESSAGE_BYTES 4800

static void load_document(yaml_document_t *doc, const char *text, size_t size, const source *src) {
    char message[LOAD_MESSAGE_BYTES];
    if (!parse_document(doc, text, size, src, message, sizeof message)) tt_die("%s", message);
}

static void apply_default(tt_run_config *c, const key_spec *k) {
    if (k->availability == NOT_YET) return;
    char label[160];
    snprintf(label, sizeof label, "built-in default %s=%s", k->name, k->default_text);
    source src = {.path = NULL, .override = label, .built_in = true};
    yaml_document_t doc;
    load_document(&doc, k->default_text, strlen(k->default_text), &src);
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    TT_CHECK(root != NULL, "the default of %s does not parse", k->name);
    cfg_apply_key(c, k, &src, &doc, root);
    yaml_document_delete(&doc);
}

void tt_run_config_defaults(tt_run_config *c) {
    memset(c, 0, sizeof(*c));
    for (int i = 0; i < cfg_key_count; i++) apply_default(c, &cfg_keys[i]);
}

static char *read_config_file(const char *path, size_t *size) {
    FILE *f = tt_fopen_regular_file(path, "a run config (YAML)");
    if (!f) tt_die("cannot open config %s: %s; check the --config path", path, strerror(errno));
    char *buf = NULL;
    size_t used = 0, capacity = 0;
    for (;;) {
        if (used + 4096 > capacity) {
            capacity = capacity ? 2 * capacity : 8192;
            if (capacity > (16u << 20)) tt_die("%s: larger than 16 MiB; that is not a run config", path);
            buf = tt_xrealloc(buf, capacity, "config file");
        }
        size_t got = fread(buf + used, 1, capacity - used - 1, f);
        used += got;
        if (got == 0) break;
    }
    int error = ferror(f) ? errno : 0;
    fclose(f);
    if (error) tt_die("cannot read config %s: %s", path, strerror(error));
    buf[used] = 0;
    *size = used;
    return buf;
}

/* One key of the file and its value: a key of tiertrain's, or of another tool (foreign_keys.c), or unknown. */
static void apply_pair(tt_run_config *c, const source *src, yaml_document_t *doc, const yaml_node_pair_t *pair,
                       size_t *first_line) {
    yaml_node_t *key = yaml_document_get_node(doc, pair->key);
    yaml_node_t *value = yaml_document_get_node(doc, pair->value);
    if (key->type != YAML_SCALAR_NODE) cfg_die_at(src, key, "keys must be names, not a list or a mapping");
    const char *name = cfg_scalar_text(key);
    if (strlen(name) != key->data.scalar.length)
        cfg_die_at(src, key, "a key holds a NUL byte (after '%s'); keys are names", name);
    const key_spec *k = cfg_find_key(name);
    if (!k) {
        if (!cfg_apply_foreign_key(c, src, doc, name, value)) cfg_die_unknown_key(src, key, name);
        return;
    }
    size_t line = key->start_mark.line + 1, *first = &first_line[k - cfg_keys];
    if (*first) cfg_die_at(src, key, "key '%s' appears twice (first on line %zu); keep one", k->name, *first);
    *first = line;
    cfg_apply_key(c, k, src, doc, value);
}

/* apply_pair with its errors kept in errors: nothing of this frame changes between the setjmp and an error's jump */
static void apply_pair_collecting(tt_run_config *c, const source *src, yaml_document_t *doc,
                                  const yaml_node_pair_t *pair, size_t *first_line, cfg_error_list *errors) {
    if (setjmp(errors->resume) == 0) {
        cfg_collect_errors(errors);
        apply_pair(c, src, doc, pair, first_line);
    }
    cfg_collect_errors(NULL);
}

/* Every key of the file is applied; the errors of all of them are kept in errors (the caller dies naming them). */
static void load_file(tt_run_config *c, const char *path, cfg_error_list *errors) {
    size_t size = 0;
    char *text = read_config_file(path, &size);
    source src = {.path = path, .override = NULL};
    yaml_document_t doc;
    char message[LOAD_MESSAGE_BYTES];
    const bool parsed = parse_document(&doc, text, size, &src, message, sizeof message);
    free(text); /* the document holds copies of its scalars */
    if (!parsed) tt_die("%s", message);
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (root && !cfg_is_null(root)) { /* an empty file is all defaults */
        if (root->type != YAML_MAPPING_NODE)
            cfg_die_at(&src, root, "the top level must be a mapping of keys to values (key: value), not %s",
                       root->type == YAML_SEQUENCE_NODE ? "a list" : "a single value");
        size_t *first_line = tt_xcalloc((size_t)cfg_key_count, sizeof(size_t), "config keys");
        for (yaml_node_pair_t *pair = root->data.mapping.pairs.start; pair < root->data.mapping.pairs.top; pair++)
            apply_pair_collecting(c, &src, &doc, pair, first_line, errors);
        free(first_line);
    }
    yaml_document_delete(&doc);
}

/* An override's value, parsed: the caller releases it, also after an error (which jumps back to the caller). */
typedef struct override_value {
    yaml_document_t doc;
    bool loaded;
} override_value;

static void apply_override(tt_run_config *c, const char *arg, override_value *held) {
    source src = {.path = NULL, .override = arg};
    const char *eq = strchr(arg, '=');
    if (!eq) cfg_die_at(&src, NULL, "expected key=value, e.g. learning_rate=1e-4");
    if (eq == arg) cfg_die_at(&src, NULL, "no key before '='; expected key=value, e.g. learning_rate=1e-4");
    char name[128];
    snprintf(name, sizeof name, "%.*s", (int)(eq - arg) < 127 ? (int)(eq - arg) : 127, arg);
    const char *value = eq + 1;
    load_document(&held->doc, value, strlen(value), &src);
    if (!yaml_document_get_root_node(&held->doc)) { /* "key=": nothing, i.e. null */
        yaml_document_delete(&held->doc);
        load_document(&held->doc, "~", 1, &src);
    }
    held->loaded = true;
    yaml_node_t *root = yaml_document_get_root_node(&held->doc);
    const key_spec *k = cfg_find_key(name);
    if (k) cfg_apply_key(c, k, &src, &held->doc, root);
    else if (!cfg_apply_foreign_key(c, &src, &held->doc, name, root)) cfg_die_unknown_key(&src, NULL, name);
}

/* apply_override with its errors kept in errors, and its value released after an error too */
static void apply_override_collecting(tt_run_config *c, const char *arg, cfg_error_list *errors) {
    override_value *held = tt_xcalloc(1, sizeof *held, "an override");
    if (setjmp(errors->resume) == 0) {
        cfg_collect_errors(errors);
        apply_override(c, arg, held);
    }
    cfg_collect_errors(NULL);
    if (held->loaded) yaml_document_delete(&held->doc);
    free(held);
}

/* The collected errors as one: a single one as it is (file:line: message), several one per line. */
static void die_with_errors(cfg_error_list *errors) {
    if (errors->count == 0) return;
    if (errors->length > 0) errors->text[errors->length - 1] = 0; /* the last newline */
    if (errors->count == 1) tt_die("%s", errors->text);
    size_t lines = 1;
    for (const char *p = errors->text; *p; p++) lines += *p == '\n';
    char *indented = tt_xmalloc(errors->length + 2 * lines + 1, "config errors");
    size_t n = 0;
    for (const char *p = errors->text; *p; p++) {
        indented[n++] = *p;
        if (*p == '\n') indented[n++] = ' ', indented[n++] = ' ';
    }
    indented[n] = 0;
    char more[64] = "";
    if ((size_t)errors->count > lines) snprintf(more, sizeof more, "\n  (and %zu more)", (size_t)errors->count - lines);
    tt_die("the configuration has %d problems; nothing was run. Each of them:\n  %s%s", errors->count, indented, more);
}

/* A path key given a Hub name (not a path here) that the local Hugging Face cache holds becomes its snapshot
 * directory; one the cache lacks stays as it is, and the run stops where it first opens it (tt_hf_check_path), so
 * that loading a configuration needs none of its paths. */
static void resolve_hub_name(char **value, tt_hf_repo_kind kind, const char *revision, char **repo_id) {
    char *snapshot = *value ? tt_hf_cached_path(*value, kind, revision) : NULL;
    if (!snapshot) return;
    if (repo_id) *repo_id = *value;
    else free(*value);
    *value = snapshot;
}

static void resolve_hub_names(tt_run_config *c) {
    resolve_hub_name(&c->base_model, TT_HF_MODEL, c->revision_of_model, &c->base_model_repo_id);
    resolve_hub_name(&c->tokenizer_config, TT_HF_MODEL, NULL, NULL);
    resolve_hub_name(&c->lora_model_dir, TT_HF_MODEL, NULL, NULL);
    if (c->reinit_weights) { /* the architecture from random init: a model_config run */
        if (c->model_config)
            tt_die("reinit_weights: true and model_config are both set; reinit_weights trains base_model's config.json "
                   "from random init, model_config names the config.json itself: keep one");
        if (!c->base_model)
            tt_die("reinit_weights: true needs base_model, the model whose config.json trains from random init");
        tt_hf_check_path(c->base_model, TT_HF_MODEL, c->revision_of_model, "base_model");
        if (!c->tokenizer_config) c->tokenizer_config = tt_xstrdup(c->base_model);
        c->model_config = c->base_model;
        c->base_model = NULL;
        free(c->base_model_repo_id); /* no base model's weights: the card names none */
        c->base_model_repo_id = NULL;
    }
}

void tt_run_config_load(tt_run_config *c, const char *path, int override_count, char *const *overrides) {
    cfg_error_list errors = {.count = 0};
    cfg_collect_errors(NULL); /* a load that a caller's tt_die left (the fuzzer survives it) is over */
    if (path) load_file(c, path, &errors);
    for (int i = 0; i < override_count; i++) apply_override_collecting(c, overrides[i], &errors);
    die_with_errors(&errors);
    free(errors.text);
    cfg_apply_deepspeed(c);
    resolve_hub_names(c);
}

unsigned tt_run_config_modules_to_save(const tt_run_config *run) {
    unsigned set = 0;
    for (int i = 0; i < run->lora_modules_to_save_count; i++) {
        const char *name = run->lora_modules_to_save[i];
        if (strcmp(name, "embed_tokens") == 0) set |= TT_SAVE_EMBED_TOKENS;
        else if (strcmp(name, "lm_head") == 0) set |= TT_SAVE_LM_HEAD;
        else
            tt_die("lora_modules_to_save lists '%s'; tiertrain trains embed_tokens and lm_head whole beside LoRA "
                   "adapters (the decoder layers' linear layers take adapters: lora_target_modules)",
                   name);
    }
    return set;
}

unsigned tt_run_config_lora_targets(const tt_run_config *c) {
    return c->lora_target_linear ? TT_LORA_ALL_MODULES : c->lora_target_modules;
}

bool tt_run_config_optimizer_8bit(const tt_run_config *c) {
    return c->optimizer && cfg_index_in_list("adamw_bnb_8bit|adamw_8bit|paged_adamw_8bit", c->optimizer, false) >= 0;
}

void tt_run_config_free(tt_run_config *c) {
    free(c->base_model_repo_id);
    c->base_model_repo_id = NULL;
    for (int i = 0; i < c->foreign_note_count; i++) free(c->foreign_note_items[i]);
    free(c->foreign_note_items);
    free((void *)c->foreign_note_reasons);
    c->foreign_note_items = NULL;
    c->foreign_note_reasons = NULL;
    c->foreign_note_count = 0;
    for (int i = 0; i < cfg_key_count; i++) {
        const key_spec *k = &cfg_keys[i];
        if (k->availability == AVAILABLE && (k->type == KEY_STRING || k->type == KEY_TEMPLATE_KWARGS ||
                                             (k->type == KEY_ENUM && k->storage == STORE_NAME))) {
            char **s = (char **)((char *)c + k->offset);
            free(*s);
            *s = NULL;
        }
        if (k->availability == AVAILABLE && k->type == KEY_STRING_LIST) {
            char ***list = (char ***)((char *)c + k->offset);
            int *count = (int *)((char *)c + k->count_offset);
            cfg_free_strings(*list, *count);
            *list = NULL;
            *count = 0;
        }
    }
    cfg_clear_datasets(c);
    free(c->special_bos);
    free(c->special_eos);
    free(c->special_pad);
    free(c->special_unk);
    c->special_bos = c->special_eos = c->special_pad = c->special_unk = NULL;
    free(c->frozen_layers);
    c->frozen_layers = NULL;
    c->frozen_layer_count = 0;
}
