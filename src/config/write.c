/* The effective configuration written back as YAML (saved next to checkpoints), and --help. */
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

/* ---- writing ---- */

/* Plain if it reads back as the same string, else double-quoted with escapes. */
static void write_yaml_string(FILE *out, const char *s) {
    if (!s) {
        fputs("~", out);
        return;
    }
    bool plain = isalnum((unsigned char)s[0]) || s[0] == '.' || s[0] == '/' || s[0] == '_';
    for (const char *p = s; *p && plain; p++) plain = isalnum((unsigned char)*p) || strchr("._/-+", *p) != NULL;
    if (plain && (strcmp(s, "null") == 0 || strcmp(s, "Null") == 0 || strcmp(s, "NULL") == 0)) plain = false;
    if (plain) {
        fputs(s, out);
        return;
    }
    fputc('"', out);
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        /* One UTF-8 character (the text came through libyaml, so it is well formed). */
        uint32_t code = *p;
        int length = code < 0x80 ? 1 : code < 0xe0 ? 2 : code < 0xf0 ? 3 : 4;
        if (length > 1) code &= 0x3fu >> (length - 1);
        for (int i = 1; i < length && p[i]; i++) code = (code << 6) | (p[i] & 0x3fu);
        /* YAML's printable set; everything else is written as an escape. */
        bool printable = (code >= 0x20 && code < 0x7f) || code == 0x85 || (code >= 0xa0 && code <= 0xd7ff) ||
                         (code >= 0xe000 && code <= 0xfffd && code != 0xfeff) || (code >= 0x10000 && code <= 0x10ffff);
        if (code == '"' || code == '\\') fprintf(out, "\\%c", (char)code);
        else if (code == '\n') fputs("\\n", out);
        else if (code == '\t') fputs("\\t", out);
        else if (!printable)
            fprintf(out, code <= 0xff ? "\\x%02x" : code <= 0xffff ? "\\u%04x" : "\\U%08x", (unsigned)code);
        else fwrite(p, 1, (size_t)length, out);
        for (int i = 0; i < length && *p; i++) p++;
    }
    fputc('"', out);
}

/* A size with the largest unit that divides it exactly (24GiB, 5GB), else in bytes. */
static void write_bytes(FILE *out, int64_t bytes) {
    static const struct {
        const char *unit;
        int64_t factor;
    } units[] = {{"TiB", 1LL << 40},   {"TB", 1000000000000LL}, {"GiB", 1LL << 30},
                 {"GB", 1000000000LL}, {"MiB", 1LL << 20},      {"MB", 1000000LL}};
    for (size_t i = 0; bytes > 0 && i < sizeof units / sizeof units[0]; i++)
        if (bytes % units[i].factor == 0) {
            fprintf(out, "%lld%s", (long long)(bytes / units[i].factor), units[i].unit);
            return;
        }
    fprintf(out, "%lld", (long long)bytes);
}

/* The shortest decimal that reads back as the same double. */
static void write_double(FILE *out, double v) {
    char text[40];
    for (int precision = 1; precision <= 17; precision++) {
        snprintf(text, sizeof text, "%.*g", precision, v);
        if (strtod(text, NULL) == v) break;
    }
    fputs(text, out);
}

/* A chat_template entry's lists and mappings, in flow style. */
static void write_chat_entry(FILE *out, const tt_dataset_spec *d) {
    fputs("\n    message_property_mappings: {", out);
    for (int i = 0; i < d->property_mapping_count; i++) {
        fputs(i ? ", " : "", out);
        write_yaml_string(out, d->property_names[i]);
        fputs(": ", out);
        write_yaml_string(out, d->property_fields[i]);
    }
    fputs("}\n    roles_to_train: [", out);
    for (int i = 0; i < d->roles_to_train_count; i++) {
        fputs(i ? ", " : "", out);
        write_yaml_string(out, d->roles_to_train[i]);
    }
    fputc(']', out);
    if (d->roles_given) {
        fputs("\n    roles: {", out);
        /* the aliases grouped by role, in the order the roles first appear */
        for (int i = 0, first = 1; i < d->role_alias_count; i++) {
            bool seen = false;
            for (int j = 0; j < i; j++) seen |= strcmp(d->role_alias_to[j], d->role_alias_to[i]) == 0;
            if (seen) continue;
            fputs(first ? "" : ", ", out);
            first = 0;
            write_yaml_string(out, d->role_alias_to[i]);
            fputs(": [", out);
            for (int j = i, n = 0; j < d->role_alias_count; j++)
                if (strcmp(d->role_alias_to[j], d->role_alias_to[i]) == 0) {
                    fputs(n++ ? ", " : "", out);
                    write_yaml_string(out, d->role_alias_from[j]);
                }
            fputc(']', out);
        }
        fputc('}', out);
    }
    if (d->train_on_eos != TT_EOS_INHERIT)
        fprintf(out, "\n    train_on_eos: %s", tt_train_on_eos_name(d->train_on_eos));
    if (d->train_on_eot != TT_EOS_INHERIT)
        fprintf(out, "\n    train_on_eot: %s", tt_train_on_eos_name(d->train_on_eot));
    if (d->drop_system_message) fputs("\n    drop_system_message: true", out);
    if (d->split_thinking) fputs("\n    split_thinking: true", out);
    if (d->tool_call_arguments_as_given) fputs("\n    tool_call_arguments: as_given", out);
}

/* lora_target_modules as a flow list of PEFT names */
static void write_lora_targets(FILE *out, const tt_run_config *c) {
    fputc('[', out);
    for (int m = 0, first = 1; m < TT_LORA_MODULE_COUNT; m++)
        if ((c->lora_target_modules >> m) & 1u) {
            fprintf(out, "%s%s", first ? "" : ", ", tt_lora_module_name((tt_lora_module)m));
            first = 0;
        }
    fputc(']', out);
}

/* axolotl's user-defined type: the mapping of its fields and formats */
static void write_user_defined_type(FILE *out, const tt_dataset_spec *d) {
    const char *const names[] = {"field_instruction", "field_input", "field_output",    "field_system",
                                 "system_prompt",     "format",      "no_input_format", "system_format"};
    const char *const values[] = {d->field_instruction, d->field_input, d->field_output,    d->field_system,
                                  d->system_prompt,     d->format,      d->no_input_format, d->system_format};
    fputs("\n    type:", out);
    for (int i = 0; i < 8; i++) {
        fprintf(out, "\n      %s: ", names[i]);
        write_yaml_string(out, values[i]);
    }
}

/* datasets: a block list of entries, each with its path, type and the keys it set */
static void write_datasets(FILE *out, const tt_run_config *c) {
    if (c->dataset_count == 0) fputs("[]", out);
    for (int i = 0; i < c->dataset_count; i++) {
        const tt_dataset_spec *d = &c->dataset_specs[i];
        fputs("\n  - path: ", out);
        write_yaml_string(out, c->datasets[i]);
        if (d->user_defined) write_user_defined_type(out, d);
        else fprintf(out, "\n    type: %s", tt_dataset_type_name(d->type));
        for (int e = 0; e < cfg_entry_key_count; e++) {
            if (!cfg_entry_keys[e].offset) continue;
            if (d->user_defined && strncmp(cfg_entry_keys[e].name, "field_", 6) == 0) continue; /* in its type */
            const char *v = *(char *const *)((const char *)d + cfg_entry_keys[e].offset);
            if (!v) continue;
            fprintf(out, "\n    %s: ", cfg_entry_keys[e].name);
            write_yaml_string(out, v);
        }
        if (d->type == TT_DATASET_CHAT_TEMPLATE) write_chat_entry(out, d);
    }
}

/* a list of strings, or ~ when not given */
static void write_string_list(FILE *out, const tt_run_config *c, const key_spec *k, const void *field) {
    char *const *list = *(char **const *)field;
    const int count = *(const int *)((const char *)c + k->count_offset);
    if (!list) {
        fputs("~", out);
        return;
    }
    fputc('[', out);
    for (int i = 0; i < count; i++) {
        fputs(i ? ", " : "", out);
        write_yaml_string(out, list[i]);
    }
    fputc(']', out);
}

/* special_tokens as a flow mapping of what is set, or ~ */
static void write_special_tokens(FILE *out, const tt_run_config *c) {
    if (!c->special_bos && !c->special_eos && !c->special_pad && !c->special_unk) {
        fputs("~", out);
        return;
    }
    fputc('{', out);
    const char *names[4] = {"bos_token", "eos_token", "pad_token", "unk_token"};
    const char *values[4] = {c->special_bos, c->special_eos, c->special_pad, c->special_unk};
    for (int i = 0, first = 1; i < 4; i++)
        if (values[i]) {
            fprintf(out, "%s%s: ", first ? "" : ", ", names[i]);
            write_yaml_string(out, values[i]);
            first = 0;
        }
    fputc('}', out);
}

static void write_value(FILE *out, const tt_run_config *c, const key_spec *k) {
    const void *field = (const char *)c + k->offset;
    char name[64];
    switch (k->type) {
    case KEY_BOOL: fputs(*(const bool *)field ? "true" : "false", out); break;
    case KEY_INT: fprintf(out, "%lld", (long long)*(const int64_t *)field); break;
    case KEY_BYTES: write_bytes(out, *(const int64_t *)field); break;
    case KEY_FLOAT: write_double(out, *(const double *)field); break;
    case KEY_STRING: write_yaml_string(out, *(char *const *)field); break;
    case KEY_ENUM:
        if (k->storage == STORE_NAME) write_yaml_string(out, *(char *const *)field);
        else fputs(cfg_name_in_list(k->values, *(const int *)field, name, sizeof name), out);
        break;
    case KEY_SELECTIVE:
        fputs(c->selective_auto       ? "auto"
              : !*(const bool *)field ? "~"
              : c->selective_offload  ? "{save: [attention], offload: true}"
                                      : "{save: [attention], offload: false}",
              out);
        break;
    case KEY_CHECKPOINTING_KWARGS: fputs(*(const bool *)field ? "{use_reentrant: true}" : "~", out); break;
    case KEY_ADAPTER: {
        const tt_adapter_kind kind = *(const tt_adapter_kind *)field;
        fputs(kind == TT_ADAPTER_QLORA ? "qlora" : kind == TT_ADAPTER_LORA ? "lora" : "~", out);
        break;
    }
    case KEY_LORA_TARGETS: write_lora_targets(out, c); break;
    case KEY_LAYER_LIST:
        fputc('[', out);
        for (int64_t i = 0; i < c->frozen_layer_count; i++)
            fprintf(out, "%s%lld", i ? ", " : "", (long long)c->frozen_layers[i]);
        fputc(']', out);
        break;
    case KEY_DATASETS: write_datasets(out, c); break;
    case KEY_TEMPLATE_KWARGS: {
        const char *json = *(char *const *)field; /* JSON is YAML's flow style */
        fputs(json ? json : "~", out);
        break;
    }
    case KEY_STRING_LIST: write_string_list(out, c, k, field); break;
    case KEY_SPECIAL_TOKENS: write_special_tokens(out, c); break;
    }
}

void tt_run_config_write_yaml(const tt_run_config *c, FILE *out) {
    fputs("# The effective configuration of this run, every key (tiertrain; docs/CONFIG.md).\n"
          "# Keys of features that are not available yet are all off and not listed.\n",
          out);
    for (int i = 0; i < cfg_key_count; i++) {
        if (cfg_keys[i].availability == NOT_YET) continue;
        /* "key: value", or "key:" and the datasets entries below it */
        fprintf(out, "%s:%s", cfg_keys[i].name, cfg_keys[i].type == KEY_DATASETS && c->dataset_count > 0 ? "" : " ");
        write_value(out, c, &cfg_keys[i]);
        fputc('\n', out);
    }
}

void tt_run_config_print_help(FILE *out) {
    fputs("Configuration keys: a YAML file (--config run.yaml) and key=value overrides, the value read as YAML\n"
          "(learning_rate=1e-4, datasets=[a.tok,b.tok], base_model=null). Reference: docs/CONFIG.md.\n\n",
          out);
    fprintf(out, "  %-28s %-8s %-12s %-30s %s\n", "KEY", "TYPE", "DEFAULT", "VALID VALUES", "MEANING");
    char valid[320];
    for (int i = 0; i < cfg_key_count; i++) {
        const key_spec *k = &cfg_keys[i];
        if (k->availability == NOT_YET) continue;
        fprintf(out, "  %-28s %-8s %-12s %-30s %s\n", k->name, cfg_type_name(k), k->default_text,
                cfg_valid_text(k, valid, sizeof valid), k->help);
    }
    bool reserved = false;
    for (int i = 0; i < cfg_key_count; i++) reserved |= cfg_keys[i].availability == NOT_YET;
    if (reserved) {
        fputs("\nNot available yet (keys of later features; accepted only with an off value: ~, false, 0, [] or {}):\n",
              out);
        for (int i = 0; i < cfg_key_count; i++)
            if (cfg_keys[i].availability == NOT_YET) fprintf(out, "  %-32s %s\n", cfg_keys[i].name, cfg_keys[i].help);
    }
    fputs("\nValues not available yet:", out);
    for (int i = 0, first = 1; i < cfg_key_count; i++)
        if (cfg_keys[i].availability == AVAILABLE && cfg_keys[i].not_yet_values) {
            char later[128];
            fprintf(out, "%s %s: %s", first ? "" : ";", cfg_keys[i].name,
                    cfg_list_with_commas(cfg_keys[i].not_yet_values, later, sizeof later));
            first = 0;
        }
    fputc('\n', out);
}
