/* Scalars of the YAML document: booleans, integers, floats, null, as the keys read them; where a
 * value came from, for error messages; and YAML values written as JSON text (chat_template_kwargs). */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <yaml.h>

#include "config/config_internal.h"
#include "core/check.h"

/* A growing string (the collected errors, chat_template_kwargs' JSON text). */
typedef struct text_buffer {
    char *text;
    size_t length, capacity;
} text_buffer;

static void text_append(text_buffer *b, const char *s, size_t n) {
    if (b->length + n + 1 > b->capacity) {
        size_t capacity = b->capacity ? b->capacity : 64;
        while (b->length + n + 1 > capacity) capacity *= 2;
        b->text = tt_xrealloc(b->text, capacity, "config text");
        b->capacity = capacity;
    }
    memcpy(b->text + b->length, s, n);
    b->length += n;
    b->text[b->length] = 0;
}

static cfg_error_list *collecting;

void cfg_collect_errors(cfg_error_list *list) { collecting = list; }

/* The messages kept for the final error: enough for any real file; the count goes on past them. */
#define MAX_KEPT_ERROR_BYTES (64u << 10)

void cfg_die_at(const source *src, const yaml_node_t *node, const char *fmt, ...) {
    char message[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    char located[1536];
    if (src->path)
        snprintf(located, sizeof located, "%s:%zu: %s", src->path, node ? node->start_mark.line + 1 : (size_t)1,
                 message);
    else snprintf(located, sizeof located, "command-line override '%.400s': %s", src->override, message);
    cfg_error_list *list = collecting;
    if (!list) tt_die("%s", located);
    collecting = NULL; /* until the loader re-arms it for the next key */
    const size_t n = strlen(located);
    if (list->length + n + 2 <= MAX_KEPT_ERROR_BYTES) {
        text_buffer kept = {list->text, list->length, list->capacity};
        text_append(&kept, located, n);
        text_append(&kept, "\n", 1);
        list->text = kept.text;
        list->length = kept.length;
        list->capacity = kept.capacity;
    }
    list->count++;
    longjmp(list->resume, 1);
}

/* ---- scalars ---- */

const char *cfg_scalar_text(const yaml_node_t *node) { return (const char *)node->data.scalar.value; }

/* YAML null: ~, null, Null, NULL or nothing, unquoted. */
bool cfg_is_null(const yaml_node_t *node) {
    if (node->type != YAML_SCALAR_NODE || node->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) return false;
    const char *v = cfg_scalar_text(node);
    return v[0] == 0 || strcmp(v, "~") == 0 || strcmp(v, "null") == 0 || strcmp(v, "Null") == 0 ||
           strcmp(v, "NULL") == 0;
}

bool cfg_parse_bool(const char *v, bool *out) {
    if (strcmp(v, "true") == 0 || strcmp(v, "True") == 0) {
        *out = true;
        return true;
    }
    if (strcmp(v, "false") == 0 || strcmp(v, "False") == 0) {
        *out = false;
        return true;
    }
    return false;
}

/* YAML 1.1's digit separators, as PyYAML reads them (axolotl's configs write 500_000): text without the underscores
 * that stand between two digits, into buf; false when an underscore stands elsewhere or the text is too long. */
static bool without_digit_separators(const char *text, char *buf, size_t size) {
    size_t n = 0;
    for (const char *p = text; *p; p++) {
        if (*p == '_') {
            if (p == text || !isdigit((unsigned char)p[-1]) || !isdigit((unsigned char)p[1])) return false;
            continue;
        }
        if (n + 1 >= size) return false;
        buf[n++] = *p;
    }
    buf[n] = 0;
    return true;
}

/* 0: ok; 1: not an integer; 2: outside int64. Decimal digits with an optional sign only (and 1_000 separators). */
int cfg_parse_int64(const char *text, int64_t *out) {
    char digits[512];
    if (!without_digit_separators(text, digits, sizeof digits)) return 1;
    const char *p = digits;
    if (*p == '+' || *p == '-') p++;
    if (!*p) return 1;
    for (const char *q = p; *q; q++)
        if (!isdigit((unsigned char)*q)) return 1;
    errno = 0;
    long long v = strtoll(digits, NULL, 10);
    if (errno == ERANGE) return 2;
    *out = v;
    return 0;
}

/* 0: ok; 1: not a number; 2: outside double. Decimal notation: 3, -0.5, 1e-4, 1.0E+3, .5 (and 1_000 separators) */
int cfg_parse_double(const char *text, double *out) {
    char number[512];
    if (!without_digit_separators(text, number, sizeof number)) return 1;
    const char *p = number;
    if (*p == '+' || *p == '-') p++;
    int digits = 0;
    while (isdigit((unsigned char)*p)) p++, digits++;
    if (*p == '.') {
        p++;
        while (isdigit((unsigned char)*p)) p++, digits++;
    }
    if (digits == 0) return 1;
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '+' || *p == '-') p++;
        if (!isdigit((unsigned char)*p)) return 1;
        while (isdigit((unsigned char)*p)) p++;
    }
    if (*p) return 1;
    errno = 0;
    double v = strtod(number, NULL);
    if (!isfinite(v)) return 2; /* underflow gives 0 or a denormal: a number all the same */
    *out = v;
    return 0;
}

/* "got 'abc'", "got a list", "got nothing (null)". */
const char *cfg_describe_value(const yaml_node_t *node, char *buf, size_t size) {
    if (node->type == YAML_SEQUENCE_NODE) return "a list";
    if (node->type == YAML_MAPPING_NODE) return "a mapping";
    if (cfg_is_null(node)) return "nothing (null)";
    snprintf(buf, size, "'%.200s'", cfg_scalar_text(node));
    return buf;
}

void cfg_die_type(const source *src, const yaml_node_t *node, const key_spec *k, const char *expected) {
    char buf[256];
    cfg_die_at(src, node, "%s: expected %s, got %s", k->name, expected, cfg_describe_value(node, buf, sizeof buf));
}

void cfg_die_not_yet(const source *src, const yaml_node_t *node, const key_spec *k, const char *value) {
    cfg_die_at(src, node, "%s: %s is not available yet%s; use %s: %s", k->name, value, k->not_yet_reason, k->name,
               k->default_text);
}

void cfg_check_range(const source *src, const yaml_node_t *node, const key_spec *k, double value, const char *text) {
    if (cfg_in_range(&k->range, value)) return;
    char range[96];
    cfg_die_at(src, node, "%s must be %s%s, got %s", k->name, cfg_range_text(&k->range, range, sizeof range),
               k->minus_one_unset ? " (or -1: not given)" : "", text);
}

/* The off value of a key of a later feature: null (~, null or nothing), false / False, a number
 * equal to zero (0, 0.0), or an empty list or mapping ([] or {}). Anything else, including
 * "no", "off" and "", is the feature switched on or configured, and is rejected. */
bool cfg_is_off_value(const yaml_node_t *node) {
    if (node->type == YAML_SEQUENCE_NODE) return node->data.sequence.items.start == node->data.sequence.items.top;
    if (node->type == YAML_MAPPING_NODE) return node->data.mapping.pairs.start == node->data.mapping.pairs.top;
    if (cfg_is_null(node)) return true;
    bool b;
    if (cfg_parse_bool(cfg_scalar_text(node), &b)) return !b;
    double v;
    return cfg_parse_double(cfg_scalar_text(node), &v) == 0 && v == 0;
}

/* ---- chat_template_kwargs: YAML values kept as JSON text (the chat template reads JSON) ---- */

static void text_append_str(text_buffer *b, const char *s) { text_append(b, s, strlen(s)); }

/* A JSON string literal: quotes, backslashes and control characters escaped (the text is libyaml's, so UTF-8). */
static void text_append_json_string(text_buffer *b, const char *s) {
    text_append_str(b, "\"");
    for (const char *p = s; *p; p++) {
        const unsigned char ch = (unsigned char)*p;
        if (ch == '"' || ch == '\\') {
            char escaped[2] = {'\\', (char)ch};
            text_append(b, escaped, 2);
        } else if (ch < 0x20) {
            char escaped[8];
            snprintf(escaped, sizeof escaped, "\\u%04x", ch);
            text_append_str(b, escaped);
        } else {
            text_append(b, p, 1);
        }
    }
    text_append_str(b, "\"");
}

/* One YAML value as JSON: plain scalars by tiertrain's rules for values (null, true/false, integers, decimal
 * numbers; the rest text), quoted scalars as text, lists and mappings as arrays and objects. YAML 1.1's other
 * booleans (yes, no, on, off), which axolotl's PyYAML reads as booleans and tiertrain as text, are refused rather
 * than read either way silently. */
/* Bounds of chat_template_kwargs' JSON: YAML aliases repeat their value where they stand, so a chain of them grows
 * exponentially (a "billion laughs") and an alias inside its own value never ends; the walk stops at these. */
#define KWARGS_MAX_DEPTH 64
#define KWARGS_MAX_BYTES (1u << 20)
#define KWARGS_MAX_NODES 100000
#define KWARGS_MAX_PAIRS 4096 /* names per mapping: each is compared with those before it */

typedef struct kwargs_walk {
    int64_t nodes;
} kwargs_walk;

static void yaml_value_to_json(const source *src, yaml_document_t *doc, yaml_node_t *node, const char *path,
                               text_buffer *out, int depth, kwargs_walk *walk) {
    char buf[256];
    if (depth > KWARGS_MAX_DEPTH)
        cfg_die_at(src, node,
                   "%s: values nested more than %d deep (a YAML alias inside its own value?); write the values out",
                   path, KWARGS_MAX_DEPTH);
    if (++walk->nodes > KWARGS_MAX_NODES || out->length > KWARGS_MAX_BYTES)
        cfg_die_at(src, node,
                   "%s: the values expand to more than %d nodes or %u bytes of JSON (YAML aliases repeat their value "
                   "where they stand, and a chain of them grows exponentially); write the values out",
                   path, KWARGS_MAX_NODES, KWARGS_MAX_BYTES);
    if (node->type == YAML_SEQUENCE_NODE) {
        text_append_str(out, "[");
        int index = 0;
        yaml_node_item_t *it = node->data.sequence.items.start;
        for (; it < node->data.sequence.items.top; it++, index++) {
            char item_path[512];
            snprintf(item_path, sizeof item_path, "%s[%d]", path, index);
            text_append_str(out, index ? ", " : "");
            yaml_value_to_json(src, doc, yaml_document_get_node(doc, *it), item_path, out, depth + 1, walk);
        }
        text_append_str(out, "]");
        return;
    }
    if (node->type == YAML_MAPPING_NODE) {
        text_append_str(out, "{");
        if (node->data.mapping.pairs.top - node->data.mapping.pairs.start > KWARGS_MAX_PAIRS)
            cfg_die_at(src, node, "%s: a mapping of more than %d names; a chat template takes a few", path,
                       KWARGS_MAX_PAIRS);
        for (yaml_node_pair_t *p = node->data.mapping.pairs.start; p < node->data.mapping.pairs.top; p++) {
            yaml_node_t *key = yaml_document_get_node(doc, p->key), *value = yaml_document_get_node(doc, p->value);
            if (key->type != YAML_SCALAR_NODE || cfg_is_null(key) || !*cfg_scalar_text(key))
                cfg_die_at(src, key, "%s: the names of a mapping are text such as enable_thinking, not %s", path,
                           cfg_describe_value(key, buf, sizeof buf));
            if (strlen(cfg_scalar_text(key)) != key->data.scalar.length)
                cfg_die_at(src, key, "%s: a name holds a NUL byte (after '%s')", path, cfg_scalar_text(key));
            for (yaml_node_pair_t *q = node->data.mapping.pairs.start; q < p; q++)
                if (strcmp(cfg_scalar_text(yaml_document_get_node(doc, q->key)), cfg_scalar_text(key)) == 0)
                    cfg_die_at(src, key, "%s: '%s' appears twice; keep one", path, cfg_scalar_text(key));
            char item_path[512];
            snprintf(item_path, sizeof item_path, "%s.%s", path, cfg_scalar_text(key));
            text_append_str(out, p > node->data.mapping.pairs.start ? ", " : "");
            text_append_json_string(out, cfg_scalar_text(key));
            text_append_str(out, ": ");
            yaml_value_to_json(src, doc, value, item_path, out, depth + 1, walk);
        }
        text_append_str(out, "}");
        return;
    }
    const char *text = cfg_scalar_text(node);
    if (node->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) {
        text_append_json_string(out, text);
        return;
    }
    if (cfg_is_null(node)) {
        text_append_str(out, "null");
        return;
    }
    if (cfg_index_in_list("true|True|TRUE|false|False|FALSE", text, false) >= 0) {
        text_append_str(out, text[0] == 't' || text[0] == 'T' ? "true" : "false");
        return;
    }
    if (cfg_index_in_list("yes|Yes|YES|no|No|NO|on|On|ON|off|Off|OFF", text, false) >= 0)
        cfg_die_at(src, node,
                   "%s: '%s' is a boolean to YAML 1.1 (axolotl) and text to tiertrain; write true or false, or "
                   "quote it (\"%s\") for the text",
                   path, text, text);
    int64_t integer;
    int status = cfg_parse_int64(text, &integer);
    if (status == 2) cfg_die_at(src, node, "%s: %s is outside the 64-bit integer range", path, text);
    if (status == 0) {
        snprintf(buf, sizeof buf, "%lld", (long long)integer);
        text_append_str(out, buf);
        return;
    }
    double number;
    status = cfg_parse_double(text, &number);
    if (status == 2) cfg_die_at(src, node, "%s: %s is outside the range of a double", path, text);
    if (status == 0) { /* written so that it reads back as a float, not an integer */
        snprintf(buf, sizeof buf, "%.17g", number);
        if (!strpbrk(buf, ".e")) strcat(buf, ".0");
        text_append_str(out, buf);
        return;
    }
    if (cfg_index_in_list(".inf|.Inf|.INF|-.inf|-.Inf|-.INF|+.inf|.nan|.NaN|.NAN", text, false) >= 0)
        cfg_die_at(src, node,
                   "%s: %s is not a finite number, which a chat template cannot be given; quote it (\"%s\") for "
                   "the text",
                   path, text, text);
    text_append_json_string(out, text);
}

/* chat_template_kwargs: {name: value, ...}; ~ or {}: none. The names transformers sets itself are refused. */
void cfg_set_template_kwargs(tt_run_config *c, const key_spec *k, const source *src, yaml_document_t *doc,
                             yaml_node_t *node) {
    char **field = (char **)((char *)c + k->offset);
    free(*field);
    *field = NULL;
    if (cfg_is_null(node) || (node->type == YAML_MAPPING_NODE && cfg_is_off_value(node))) return; /* ~ or {} */
    if (node->type != YAML_MAPPING_NODE)
        cfg_die_type(src, node, k, "a mapping of template variables such as {enable_thinking: false}, or ~");
    for (yaml_node_pair_t *p = node->data.mapping.pairs.start; p < node->data.mapping.pairs.top; p++) {
        yaml_node_t *key = yaml_document_get_node(doc, p->key);
        const char *name = key->type == YAML_SCALAR_NODE ? cfg_scalar_text(key) : "";
        if (cfg_index_in_list("messages|tools|documents|add_generation_prompt|chat_template", name, false) >= 0)
            cfg_die_at(src, key,
                       "%s: '%s' is set for every render by tiertrain (as apply_chat_template sets it: the "
                       "record's messages and tools, no documents, add_generation_prompt false); remove it",
                       k->name, name);
    }
    text_buffer out = {0};
    kwargs_walk walk = {0};
    yaml_value_to_json(src, doc, node, k->name, &out, 0, &walk);
    *field = out.text;
}

/* eot_tokens-style lists of strings: [a, b]; ~: not given (NULL); [] given and empty. */
