/* The datasets key: token files, or entries {path, type, field..., chat keys} as axolotl writes them. */
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
#include "config/split_slice.h"
#include "core/check.h"
#include "core/file_names.h"
#include "core/python_format.h"

/* ---- setting values ---- */

static const char *const dataset_type_names[] = {"tokens", "completion", "alpaca", "input_output", "chat_template"};

const char *tt_dataset_type_name(tt_dataset_type type) {
    TT_CHECK(type >= 0 && type <= TT_DATASET_CHAT_TEMPLATE, "dataset type %d", (int)type);
    return dataset_type_names[type];
}

void cfg_free_strings(char **list, int count) {
    for (int i = 0; i < count; i++) free(list[i]);
    free(list);
}

static void free_dataset_spec(tt_dataset_spec *spec) {
    free(spec->format);
    free(spec->no_input_format);
    free(spec->system_format);
    free(spec->system_prompt);
    free(spec->field_system);
    free(spec->field);
    free(spec->field_instruction);
    free(spec->field_input);
    free(spec->field_output);
    free(spec->split);
    free(spec->config_name);
    free(spec->chat_template);
    free(spec->chat_template_jinja);
    free(spec->field_messages);
    free(spec->message_field_training);
    free(spec->message_field_training_detail);
    cfg_free_strings(spec->property_names, spec->property_mapping_count);
    cfg_free_strings(spec->property_fields, spec->property_mapping_count);
    cfg_free_strings(spec->role_alias_from, spec->role_alias_count);
    cfg_free_strings(spec->role_alias_to, spec->role_alias_count);
    cfg_free_strings(spec->roles_to_train, spec->roles_to_train_count);
    memset(spec, 0, sizeof(*spec));
}

void cfg_push_string(char ***list, int *count, const char *s) {
    *list = tt_xrealloc(*list, sizeof(char *) * (size_t)(*count + 1), "a list of names");
    (*list)[(*count)++] = tt_xstrdup(s);
}

/* The keys a datasets entry takes besides path and type, and the types they belong to (a bit per
 * tt_dataset_type); a key given for another type is an error, never ignored. */
#define TYPE_BIT(t) (1u << (t))
#define JSON_TYPES                                                                                       \
    (TYPE_BIT(TT_DATASET_COMPLETION) | TYPE_BIT(TT_DATASET_ALPACA) | TYPE_BIT(TT_DATASET_INPUT_OUTPUT) | \
     TYPE_BIT(TT_DATASET_CHAT_TEMPLATE))
#define CHAT TYPE_BIT(TT_DATASET_CHAT_TEMPLATE)
const entry_key cfg_entry_keys[] = {
    {"field", TYPE_BIT(TT_DATASET_COMPLETION), offsetof(tt_dataset_spec, field)},
    {"field_instruction", TYPE_BIT(TT_DATASET_ALPACA), offsetof(tt_dataset_spec, field_instruction)},
    {"field_input", TYPE_BIT(TT_DATASET_ALPACA), offsetof(tt_dataset_spec, field_input)},
    {"field_output", TYPE_BIT(TT_DATASET_ALPACA), offsetof(tt_dataset_spec, field_output)},
    {"split", JSON_TYPES, offsetof(tt_dataset_spec, split)},
    {"name", JSON_TYPES, offsetof(tt_dataset_spec, config_name)},
    {"ds_type", JSON_TYPES, 0},
    {"chat_template", CHAT, offsetof(tt_dataset_spec, chat_template)},
    {"chat_template_jinja", CHAT, offsetof(tt_dataset_spec, chat_template_jinja)},
    {"field_messages", CHAT, offsetof(tt_dataset_spec, field_messages)},
    {"message_property_mappings", CHAT, 0},
    {"message_field_role", CHAT, 0},
    {"message_field_content", CHAT, 0},
    {"roles_to_train", CHAT, 0},
    {"roles", CHAT, 0},
    {"train_on_eos", CHAT, 0},
    {"train_on_eot", CHAT, 0},
    {"drop_system_message", CHAT, 0},
    {"message_field_training", CHAT, offsetof(tt_dataset_spec, message_field_training)},
    {"message_field_training_detail", CHAT, offsetof(tt_dataset_spec, message_field_training_detail)},
    {"split_thinking", CHAT, 0},
    {"tool_call_arguments", CHAT, 0},
};
const int cfg_entry_key_count = (int)(sizeof cfg_entry_keys / sizeof cfg_entry_keys[0]);

static char *types_of(unsigned types, char *buf, size_t size) {
    buf[0] = 0;
    for (int t = 0; t <= TT_DATASET_CHAT_TEMPLATE; t++)
        if (types & TYPE_BIT(t))
            snprintf(buf + strlen(buf), size - strlen(buf), "%s%s", buf[0] ? ", " : "", dataset_type_names[t]);
    return buf;
}

/* A scalar that names something (a role, a field): not null, not empty. */
static const char *name_scalar(const source *src, const yaml_node_t *node, int index, const char *key,
                               const char *example) {
    char buf[256];
    if (node->type != YAML_SCALAR_NODE || cfg_is_null(node) || !*cfg_scalar_text(node))
        cfg_die_at(src, node, "datasets entry %d: %s: expected a name such as %s, got %s", index + 1, key, example,
                   cfg_describe_value(node, buf, sizeof buf));
    return cfg_scalar_text(node);
}

/* message_property_mappings (and the legacy message_field_role / message_field_content): each
 * property the template reads, from the message field named; a property given twice with two
 * fields is an error, as axolotl's. */
static void set_property_mapping(const source *src, const yaml_node_t *at, int index, tt_dataset_spec *spec,
                                 const char *property, const char *field) {
    for (int i = 0; i < spec->property_mapping_count; i++)
        if (strcmp(spec->property_names[i], property) == 0) {
            if (strcmp(spec->property_fields[i], field) != 0)
                cfg_die_at(src, at,
                           "datasets entry %d: the message property '%s' is mapped to '%s' and to '%s' "
                           "(message_property_mappings and message_field_%s); keep one",
                           index + 1, property, spec->property_fields[i], field, property);
            return;
        }
    int n = spec->property_mapping_count;
    cfg_push_string(&spec->property_names, &n, property);
    cfg_push_string(&spec->property_fields, &spec->property_mapping_count, field);
}

static void parse_chat_key(const source *src, yaml_document_t *doc, yaml_node_t *key, yaml_node_t *value, int index,
                           tt_dataset_spec *spec) {
    const char *name = cfg_scalar_text(key);
    char buf[256];
    if (strcmp(name, "message_property_mappings") == 0) {
        if (cfg_is_null(value)) return;
        if (value->type != YAML_MAPPING_NODE)
            cfg_die_at(src, value,
                       "datasets entry %d: message_property_mappings: expected a mapping such as {role: "
                       "from, content: value}, got %s",
                       index + 1, cfg_describe_value(value, buf, sizeof buf));
        for (yaml_node_pair_t *p = value->data.mapping.pairs.start; p < value->data.mapping.pairs.top; p++) {
            yaml_node_t *k2 = yaml_document_get_node(doc, p->key), *v2 = yaml_document_get_node(doc, p->value);
            const char *property = name_scalar(src, k2, index, "message_property_mappings", "content");
            const char *field = name_scalar(src, v2, index, "message_property_mappings", "value");
            set_property_mapping(src, v2, index, spec, property, field);
        }
    } else if (strcmp(name, "message_field_role") == 0 || strcmp(name, "message_field_content") == 0) {
        set_property_mapping(src, value, index, spec, name + strlen("message_field_"),
                             name_scalar(src, value, index, name, "from"));
    } else if (strcmp(name, "roles_to_train") == 0) {
        if (spec->roles_to_train)
            cfg_die_at(src, key, "datasets entry %d: key 'roles_to_train' appears twice", index + 1);
        if (value->type != YAML_SEQUENCE_NODE)
            cfg_die_at(src, value,
                       "datasets entry %d: roles_to_train: expected a list of roles such as [assistant], "
                       "got %s",
                       index + 1, cfg_describe_value(value, buf, sizeof buf));
        spec->roles_to_train = tt_xmalloc(sizeof(char *), "roles_to_train"); /* given, even if empty */
        for (yaml_node_item_t *it = value->data.sequence.items.start; it < value->data.sequence.items.top; it++)
            cfg_push_string(&spec->roles_to_train, &spec->roles_to_train_count,
                            name_scalar(src, yaml_document_get_node(doc, *it), index, "roles_to_train", "assistant"));
    } else if (strcmp(name, "roles") == 0) {
        if (cfg_is_null(value)) return;
        if (value->type != YAML_MAPPING_NODE)
            cfg_die_at(src, value,
                       "datasets entry %d: roles: expected a mapping from a role to the names the data uses "
                       "for it, such as {user: [human], assistant: [gpt]}, got %s",
                       index + 1, cfg_describe_value(value, buf, sizeof buf));
        spec->roles_given = true;
        for (yaml_node_pair_t *p = value->data.mapping.pairs.start; p < value->data.mapping.pairs.top; p++) {
            yaml_node_t *k2 = yaml_document_get_node(doc, p->key), *v2 = yaml_document_get_node(doc, p->value);
            const char *role = name_scalar(src, k2, index, "roles", "assistant");
            if (v2->type != YAML_SEQUENCE_NODE)
                cfg_die_at(src, v2, "datasets entry %d: roles: %s: expected a list of names such as [gpt], got %s",
                           index + 1, role, cfg_describe_value(v2, buf, sizeof buf));
            for (yaml_node_item_t *it = v2->data.sequence.items.start; it < v2->data.sequence.items.top; it++) {
                const char *from = name_scalar(src, yaml_document_get_node(doc, *it), index, "roles", "gpt");
                int n = spec->role_alias_count;
                cfg_push_string(&spec->role_alias_from, &n, from);
                cfg_push_string(&spec->role_alias_to, &spec->role_alias_count, role);
            }
        }
    } else if (strcmp(name, "train_on_eos") == 0 || strcmp(name, "train_on_eot") == 0) {
        int v = value->type != YAML_SCALAR_NODE || cfg_is_null(value)
                    ? TT_EOS_INHERIT
                    : cfg_index_in_list(VALUE_NAMES(TT_TRAIN_ON_EOS_VALUES), cfg_scalar_text(value), false);
        if (value->type != YAML_SCALAR_NODE || (v < 0 && !cfg_is_null(value)))
            cfg_die_at(src, value, "datasets entry %d: %s: expected turn, all, last or none, got %s", index + 1, name,
                       cfg_describe_value(value, buf, sizeof buf));
        *(strcmp(name, "train_on_eos") == 0 ? &spec->train_on_eos : &spec->train_on_eot) = (tt_train_on_eos)v;
    } else if (strcmp(name, "drop_system_message") == 0 || strcmp(name, "split_thinking") == 0) {
        bool b = false;
        if (value->type != YAML_SCALAR_NODE || (!cfg_is_null(value) && !cfg_parse_bool(cfg_scalar_text(value), &b)))
            cfg_die_at(src, value, "datasets entry %d: %s: expected true or false, got %s", index + 1, name,
                       cfg_describe_value(value, buf, sizeof buf));
        *(strcmp(name, "split_thinking") == 0 ? &spec->split_thinking : &spec->drop_system_message) = b;
    } else if (strcmp(name, "tool_call_arguments") == 0) {
        const int v =
            value->type == YAML_SCALAR_NODE ? cfg_index_in_list("parsed|as_given", cfg_scalar_text(value), false) : -1;
        if (v < 0)
            cfg_die_at(src, value,
                       "datasets entry %d: tool_call_arguments: expected parsed (axolotl: JSON text becomes an object) "
                       "or as_given (transformers: the text stays text), got %s",
                       index + 1, cfg_describe_value(value, buf, sizeof buf));
        spec->tool_call_arguments_as_given = v == 1;
    }
}

/* axolotl's user-defined type: `type:` a mapping of the prompt's fields and formats (UserDefinedDatasetConfig). Each
 * value a string; another key is an error naming it. */
static void parse_user_defined_type(const source *src, yaml_document_t *doc, yaml_node_t *type, int index,
                                    tt_dataset_spec *spec) {
    static const char *const names[] = {"field_instruction", "field_input", "field_output",    "field_system",
                                        "system_prompt",     "format",      "no_input_format", "system_format"};
    char **const fields[] = {&spec->field_instruction, &spec->field_input,   &spec->field_output,
                             &spec->field_system,      &spec->system_prompt, &spec->format,
                             &spec->no_input_format,   &spec->system_format};
    spec->user_defined = true;
    for (yaml_node_pair_t *pair = type->data.mapping.pairs.start; pair < type->data.mapping.pairs.top; pair++) {
        yaml_node_t *key = yaml_document_get_node(doc, pair->key);
        yaml_node_t *value = yaml_document_get_node(doc, pair->value);
        char buf[256];
        const char *name = key->type == YAML_SCALAR_NODE ? cfg_scalar_text(key) : "";
        int found = -1;
        for (int i = 0; i < (int)(sizeof names / sizeof names[0]) && found < 0; i++)
            if (strcmp(name, names[i]) == 0) found = i;
        if (found < 0)
            cfg_die_at(src, key,
                       "datasets entry %d: type: the user-defined type takes field_instruction, field_input, "
                       "field_output, field_system, system_prompt, format, no_input_format and system_format, not "
                       "'%s'",
                       index + 1, name);
        if (*fields[found]) cfg_die_at(src, key, "datasets entry %d: type: key '%s' appears twice", index + 1, name);
        if (value->type != YAML_SCALAR_NODE)
            cfg_die_at(src, value, "datasets entry %d: type: %s: expected a string, got %s", index + 1, name,
                       cfg_describe_value(value, buf, sizeof buf));
        if (cfg_is_null(value)) continue; /* its default */
        *fields[found] = tt_xstrdup(cfg_scalar_text(value));
    }
}

/* One datasets entry: a path (a token file), or a mapping {path, type, per-type keys}. */
/* pretraining: an entry of pretraining_dataset (axolotl's streamed pretraining data): type pretrain (its default) is
 * read as completion, text_column as its field. */
static void parse_dataset_entry(const source *src, yaml_document_t *doc, yaml_node_t *entry, int index, char **path_out,
                                tt_dataset_spec *spec, bool pretraining) {
    memset(spec, 0, sizeof(*spec));
    spec->train_on_eos = TT_EOS_INHERIT;
    spec->train_on_eot = TT_EOS_INHERIT;
    if (entry->type == YAML_SCALAR_NODE) {
        if (cfg_is_null(entry) || !*cfg_scalar_text(entry))
            cfg_die_at(src, entry, "datasets entry %d is empty; write a token file's path, or {path: file.tok}",
                       index + 1);
        if (tt_is_records_file(cfg_scalar_text(entry)))
            cfg_die_at(
                src, entry,
                "datasets entry %d: %s is a file of records (JSON, JSONL or Parquet); say how to read it: {path: %s, type: completion | alpaca | "
                "input_output | chat_template}",
                index + 1, cfg_scalar_text(entry), cfg_scalar_text(entry));
        *path_out = tt_xstrdup(cfg_scalar_text(entry));
        return;
    }
    if (entry->type != YAML_MAPPING_NODE)
        cfg_die_at(src, entry, "datasets entry %d is a list; entries are paths or {path: file.jsonl, type: alpaca}",
                   index + 1);
    const char *path = NULL;
    yaml_node_t *type_node = NULL;
    /* first pass: path and type, so the other keys can be checked against the type */
    for (yaml_node_pair_t *pair = entry->data.mapping.pairs.start; pair < entry->data.mapping.pairs.top; pair++) {
        yaml_node_t *key = yaml_document_get_node(doc, pair->key);
        yaml_node_t *value = yaml_document_get_node(doc, pair->value);
        char buf[256];
        if (key->type != YAML_SCALAR_NODE)
            cfg_die_at(src, key, "datasets entry %d: keys are names (path, type, field, ...), not %s", index + 1,
                       cfg_describe_value(key, buf, sizeof buf));
        const char *name = cfg_scalar_text(key);
        bool is_path = strcmp(name, "path") == 0, is_type = strcmp(name, "type") == 0;
        if (!is_path && !is_type) continue;
        if ((is_path && path) || (is_type && type_node))
            cfg_die_at(src, key, "datasets entry %d: key '%s' appears twice", index + 1, name);
        if (is_type && value->type == YAML_MAPPING_NODE) { /* axolotl's user-defined type */
            type_node = value;
            continue;
        }
        if (value->type != YAML_SCALAR_NODE || cfg_is_null(value) || !*cfg_scalar_text(value))
            cfg_die_at(src, value, "datasets entry %d: %s: expected %s, got %s", index + 1, name,
                       is_path ? "a file's path" : "completion, alpaca, input_output, chat_template or tokens",
                       cfg_describe_value(value, buf, sizeof buf));
        if (is_path) path = cfg_scalar_text(value);
        else type_node = value;
    }
    if (!path)
        cfg_die_at(src, entry, "datasets entry %d has no path; write {path: data.jsonl, type: alpaca}", index + 1);
    if (pretraining) {
        if (type_node && (type_node->type != YAML_SCALAR_NODE ||
                          cfg_index_in_list("pretrain|completion", cfg_scalar_text(type_node), false) < 0))
            cfg_die_at(src, type_node,
                       "pretraining_dataset entry %d: type is pretrain (texts, streamed and cut into sequences); put "
                       "instruction or chat data under datasets",
                       index + 1);
        spec->type = TT_DATASET_COMPLETION;
    } else if (type_node && type_node->type == YAML_MAPPING_NODE) {
        spec->type = TT_DATASET_ALPACA;
        parse_user_defined_type(src, doc, type_node, index, spec);
    } else if (type_node) {
        int t =
            cfg_index_in_list("tokens|completion|alpaca|input_output|chat_template", cfg_scalar_text(type_node), false);
        if (t < 0)
            cfg_die_at(
                src, type_node,
                "datasets entry %d: type '%s' is not supported; tiertrain reads completion, alpaca, input_output "
                "and chat_template datasets (JSON or JSONL) and token files (type: tokens); other axolotl types "
                "are not available yet",
                index + 1, cfg_scalar_text(type_node));
        spec->type = (tt_dataset_type)t;
    } else if (tt_is_records_file(path)) {
        cfg_die_at(
            src, entry,
            "datasets entry %d: %s is a file of records (JSON, JSONL or Parquet) but the entry has no type; add type: completion, "
            "alpaca, input_output or chat_template",
            index + 1, path);
    } else {
        spec->type = TT_DATASET_TOKENS;
    }
    for (yaml_node_pair_t *pair = entry->data.mapping.pairs.start; pair < entry->data.mapping.pairs.top; pair++) {
        yaml_node_t *key = yaml_document_get_node(doc, pair->key);
        yaml_node_t *value = yaml_document_get_node(doc, pair->value);
        const char *name = cfg_scalar_text(key);
        if (strcmp(name, "path") == 0 || strcmp(name, "type") == 0) continue;
        if (pretraining && strcmp(name, "text_column") == 0) name = "field"; /* pretraining's name of the field */
        const entry_key *ek = NULL;
        for (size_t i = 0; i < sizeof cfg_entry_keys / sizeof cfg_entry_keys[0]; i++)
            if (strcmp(cfg_entry_keys[i].name, name) == 0) ek = &cfg_entry_keys[i];
        char buf[256], types[128];
        if (!ek)
            cfg_die_at(
                src, key,
                "datasets entry %d: unknown key '%s'; an entry takes path, type, field (completion), "
                "field_instruction / field_input / field_output (alpaca), split, name, ds_type, and chat_template, "
                "chat_template_jinja, field_messages, message_property_mappings, roles, roles_to_train, "
                "train_on_eos, train_on_eot, drop_system_message, message_field_training, "
                "message_field_training_detail, split_thinking, tool_call_arguments (chat_template)",
                index + 1, name);
        if (!(ek->types & TYPE_BIT(spec->type)))
            cfg_die_at(src, key, "datasets entry %d: %s applies to type %s, but this entry is type %s; remove it",
                       index + 1, name, types_of(ek->types, types, sizeof types), dataset_type_names[spec->type]);
        if (!ek->offset && strcmp(name, "ds_type") != 0) {
            parse_chat_key(src, doc, key, value, index, spec);
            continue;
        }
        if (value->type != YAML_SCALAR_NODE || cfg_is_null(value) || !*cfg_scalar_text(value))
            cfg_die_at(src, value, "datasets entry %d: %s: expected a name, got %s", index + 1, name,
                       cfg_describe_value(value, buf, sizeof buf));
        const char *text = cfg_scalar_text(value);
        if (strcmp(name, "ds_type") == 0) {
            if (strcmp(text, "json") != 0)
                cfg_die_at(src, value,
                           "datasets entry %d: ds_type '%s' is not supported; local files are read as "
                           "json (JSON or JSONL, by the file's extension)",
                           index + 1, text);
            continue;
        }
        tt_split_slice slice;
        char why[256];
        if (strcmp(name, "split") == 0 && !tt_split_slice_parse(text, &slice, why, sizeof why))
            cfg_die_at(src, value, "datasets entry %d: split '%s': %s", index + 1, text, why);
        char **field = (char **)((char *)spec + ek->offset);
        if (*field) cfg_die_at(src, key, "datasets entry %d: key '%s' appears twice", index + 1, name);
        *field = tt_xstrdup(text);
    }
    /* axolotl's defaults */
    if (spec->type == TT_DATASET_COMPLETION && !spec->field) spec->field = tt_xstrdup("text");
    if (spec->type == TT_DATASET_ALPACA) {
        if (spec->user_defined) { /* axolotl's UserDefinedDatasetConfig defaults */
            if (!spec->field_system) spec->field_system = tt_xstrdup("system");
            if (!spec->system_prompt) spec->system_prompt = tt_xstrdup("");
            if (!spec->format) spec->format = tt_xstrdup("{instruction} {input} ");
            if (!spec->no_input_format) spec->no_input_format = tt_xstrdup("{instruction} ");
            if (!spec->system_format) spec->system_format = tt_xstrdup("{system}");
            /* the fields each format is given, as axolotl's prompter calls str.format */
            static const char *const turn[] = {"instruction", "input"}, *const system[] = {"system"};
            const char *const formats[3] = {spec->format, spec->no_input_format, spec->system_format};
            const char *const keys[3] = {"format", "no_input_format", "system_format"};
            const char *const *fields[3] = {turn, turn, system};
            const int field_counts[3] = {2, 1, 1};
            for (int f = 0; f < 3; f++) {
                char why[512];
                if (!tt_python_format(formats[f], fields[f], NULL, NULL, field_counts[f], NULL, NULL, why, sizeof why))
                    cfg_die_at(src, entry,
                               "datasets entry %d: type: %s: %s; it is filled as Python's str.format fills "
                               "it, with %s",
                               index + 1, keys[f], why,
                               f == 0   ? "{instruction} and {input}"
                               : f == 1 ? "{instruction}"
                                        : "{system}");
            }
        }
        if (!spec->field_instruction) spec->field_instruction = tt_xstrdup("instruction");
        if (!spec->field_input) spec->field_input = tt_xstrdup("input");
        if (!spec->field_output) spec->field_output = tt_xstrdup("output");
    }
    if (spec->type == TT_DATASET_CHAT_TEMPLATE) {
        if (!spec->field_messages) spec->field_messages = tt_xstrdup("messages");
        /* role and content are always mapped (axolotl's handle_legacy_message_fields_logic) */
        for (int p = 0; p < 2; p++) {
            const char *property = p ? "content" : "role";
            bool mapped = false;
            for (int i = 0; i < spec->property_mapping_count; i++)
                mapped |= strcmp(spec->property_names[i], property) == 0;
            if (!mapped) set_property_mapping(src, entry, index, spec, property, property);
        }
        if (!spec->roles_to_train) cfg_push_string(&spec->roles_to_train, &spec->roles_to_train_count, "assistant");
        if (spec->chat_template_jinja && !spec->chat_template) spec->chat_template = tt_xstrdup("jinja");
        if (spec->message_field_training && spec->message_field_training_detail &&
            strcmp(spec->message_field_training, spec->message_field_training_detail) == 0)
            cfg_die_at(
                src, entry,
                "datasets entry %d: message_field_training and message_field_training_detail both name "
                "the field '%s', but one is a message's true/false and the other its list of spans; name two fields",
                index + 1, spec->message_field_training);
    }
    *path_out = tt_xstrdup(path);
}

void cfg_clear_datasets(tt_run_config *c) {
    for (int i = 0; i < c->dataset_count; i++) {
        free(c->datasets[i]);
        c->datasets[i] = NULL;
        free_dataset_spec(&c->dataset_specs[i]);
    }
    c->dataset_count = 0;
}

static void set_datasets(tt_run_config *c, const source *src, yaml_document_t *doc, yaml_node_t *node,
                         bool pretraining) {
    cfg_clear_datasets(c);
    if (cfg_is_null(node)) return;
    if (node->type == YAML_SCALAR_NODE) { /* one path: datasets=corpus.tok */
        parse_dataset_entry(src, doc, node, 0, &c->datasets[0], &c->dataset_specs[0], pretraining);
        c->dataset_count = 1;
        return;
    }
    if (node->type != YAML_SEQUENCE_NODE)
        cfg_die_at(src, node, "datasets: expected a list of {path: ..., type: ...} entries or of paths, got a mapping");
    int index = 0;
    for (yaml_node_item_t *item = node->data.sequence.items.start; item < node->data.sequence.items.top;
         item++, index++) {
        yaml_node_t *entry = yaml_document_get_node(doc, *item);
        if (index == TT_MAX_DATASETS)
            cfg_die_at(src, entry, "datasets: at most %d entries; concatenate some of the files", TT_MAX_DATASETS);
        parse_dataset_entry(src, doc, entry, index, &c->datasets[index], &c->dataset_specs[index], pretraining);
        c->dataset_count = index + 1;
    }
}

void cfg_set_datasets(tt_run_config *c, const source *src, yaml_document_t *doc, yaml_node_t *node) {
    const bool empty = cfg_is_null(node) || (node->type == YAML_SEQUENCE_NODE &&
                                             node->data.sequence.items.start == node->data.sequence.items.top);
    if (c->pretraining_given) { /* datasets: null (or []) beside pretraining_dataset says "none", in either order */
        if (!empty)
            cfg_die_at(src, node,
                       "datasets and pretraining_dataset are both set; axolotl trains on one of them: keep one");
        return;
    }
    set_datasets(c, src, doc, node, false);
}

void cfg_set_pretraining_datasets(tt_run_config *c, const source *src, yaml_document_t *doc, yaml_node_t *node) {
    set_datasets(c, src, doc, node, true);
}

/* special_tokens: {bos_token, eos_token, pad_token} (axolotl's key; unk_token etc. have no use here). */
