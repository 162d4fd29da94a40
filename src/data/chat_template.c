/* Which template a chat dataset renders with (chat_template.h): axolotl's get_chat_template
 * (axolotl/utils/chat_templates/base.py) over the dataset's keys, else the top level's. */
#include "data/chat_template.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/check.h"
#include "core/input_file.h"

#define FALLBACK_PREFIX "tokenizer_default_fallback_"

/* A whole text file, or NULL when it does not exist. */
static char *read_text_file(const char *path, const char *what) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (errno == ENOENT) return NULL;
        tt_die("cannot open %s (%s): %s", path, what, strerror(errno));
    }
    char *text = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 4096 + 1 > cap) {
            cap = cap ? 2 * cap : 8192;
            if (cap > (64u << 20)) tt_die("%s (%s) is larger than 64 MiB; that is not a chat template", path, what);
            text = tt_xrealloc(text, cap, "a chat template");
        }
        size_t got = fread(text + len, 1, cap - len - 1, f);
        len += got;
        if (got == 0) break;
    }
    if (ferror(f)) tt_die("cannot read %s (%s): %s", path, what, strerror(errno));
    fclose(f);
    text[len] = 0;
    if (strlen(text) != len) tt_die("%s (%s) contains a NUL byte; a chat template is text", path, what);
    return text;
}

/* The tokenizer's own template, as transformers loads it: chat_template.jinja beside
 * tokenizer.json wins; else tokenizer_config.json's chat_template, a string or a list of
 * {name, template} of which "default" is used. NULL when there is none. */
static char *tokenizer_template(const char *dir, char *origin, size_t origin_size) {
    char path[4200];
    snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
    char *text = read_text_file(path, "the tokenizer's chat template");
    if (text) {
        snprintf(origin, origin_size, "%s", path);
        return text;
    }
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    struct stat st;
    if (stat(path, &st) != 0) return NULL;
    json_error_t error;
    json_t *config =
        tt_json_load_regular_file(path, JSON_DECODE_INT_AS_REAL, 64u << 20, "a tokenizer_config.json", &error);
    if (!config)
        tt_die("%s:%d: not valid JSON (%s); fix the file, or set chat_template to a built-in (%s)", path, error.line,
               error.text, tt_chat_builtin_names());
    json_t *value = json_object_get(config, "chat_template");
    char *found = NULL;
    if (json_is_string(value)) {
        found = tt_xstrdup(json_string_value(value));
        snprintf(origin, origin_size, "%s: chat_template", path);
    } else if (json_is_array(value)) {
        size_t i;
        json_t *entry;
        json_array_foreach(value, i, entry) {
            const char *name = json_string_value(json_object_get(entry, "name"));
            const char *template = json_string_value(json_object_get(entry, "template"));
            if (!name || !template)
                tt_die("%s: chat_template[%zu] is not {\"name\": ..., \"template\": ...}; fix the file, or set "
                       "chat_template to a built-in (%s) or to jinja with chat_template_jinja",
                       path, i, tt_chat_builtin_names());
            if (strcmp(name, "default") == 0) {
                found = tt_xstrdup(template);
                snprintf(origin, origin_size, "%s: chat_template \"default\"", path);
            }
        }
        if (!found)
            tt_die("%s: chat_template is a list of named templates without one named \"default\" (transformers' rule); "
                   "copy the one you want into a file and set chat_template: jinja, chat_template_jinja: FILE",
                   path);
    } else if (value && !json_is_null(value)) {
        tt_die("%s: chat_template is neither a string nor a list of {name, template}; fix the file or set "
               "chat_template to a built-in (%s)",
               path, tt_chat_builtin_names());
    }
    json_decref(config);
    return found;
}

char *tt_chat_template_text(const tt_run_config *run, int entry, const char *tokenizer_dir, char *origin,
                            size_t origin_size) {
    const tt_dataset_spec *spec = &run->dataset_specs[entry];
    /* axolotl's extract_chat_template_args: the dataset's pair when it names a template */
    const char *choice = spec->chat_template ? spec->chat_template : run->chat_template;
    const char *jinja = spec->chat_template ? spec->chat_template_jinja : run->chat_template_jinja;
    if (!choice) choice = jinja ? "jinja" : "tokenizer_default";
    if (strcmp(choice, "jinja") == 0) {
        if (!jinja)
            tt_die("datasets entry %d (%s): chat_template is jinja, but chat_template_jinja is not set; set it to the "
                   "template or to a file holding it",
                   entry + 1, run->datasets[entry]);
        /* axolotl: a path to an existing file is read, anything else is the template itself */
        struct stat st;
        if (stat(jinja, &st) == 0 && S_ISREG(st.st_mode)) {
            snprintf(origin, origin_size, "%s", jinja);
            char *text = read_text_file(jinja, "chat_template_jinja");
            TT_CHECK(text, "%s vanished", jinja);
            return text;
        }
        snprintf(origin, origin_size, "chat_template_jinja");
        return tt_xstrdup(jinja);
    }
    bool fallback = strncmp(choice, FALLBACK_PREFIX, strlen(FALLBACK_PREFIX)) == 0;
    if (strcmp(choice, "tokenizer_default") == 0 || fallback) {
        char *text = tokenizer_template(tokenizer_dir, origin, origin_size);
        if (text) return text;
        if (!fallback)
            tt_die("datasets entry %d (%s): chat_template is tokenizer_default, but the tokenizer in %s has no chat "
                   "template (no chat_template.jinja, no chat_template in tokenizer_config.json); set chat_template "
                   "to a built-in (%s), to tokenizer_default_fallback_<built-in>, or to jinja with chat_template_jinja",
                   entry + 1, run->datasets[entry], tokenizer_dir, tt_chat_builtin_names());
        choice += strlen(FALLBACK_PREFIX);
        tt_warn("the tokenizer in %s has no chat template: datasets entry %d renders with the built-in %s (axolotl "
                "recommends train_on_inputs: true for a model to learn a new template)",
                tokenizer_dir, entry + 1, choice);
    }
    const char *builtin = tt_chat_builtin_template(choice);
    if (!builtin)
        tt_die("datasets entry %d (%s): chat_template '%s' is not known; use tokenizer_default (the model's own), "
               "tokenizer_default_fallback_<name>, jinja (with chat_template_jinja: the template or a file), or a "
               "built-in: %s. axolotl's other named templates are not built in: pass their text with "
               "chat_template_jinja",
               entry + 1, run->datasets[entry], choice, tt_chat_builtin_names());
    snprintf(origin, origin_size, "the built-in chat template %s", choice);
    return tt_xstrdup(builtin);
}
