/* Records -> conversations (chat_template.h), as axolotl's ChatTemplateStrategy reads them:
 * get_conversation_thread and transform_message. Every check dies naming the record, the
 * message and the field. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/json_describe.h"
#include "data/chat_internal.h"

/* axolotl's role aliases when a dataset gives no roles: (ChatTemplatePrompter) */
static const char *const default_alias_from[] = {"human", "user", "assistant", "gpt", "system", "tool"};
static const char *const default_alias_to[] = {"user", "user", "assistant", "assistant", "system", "tool"};

static char *copy_or_null(const char *s) { return s ? tt_xstrdup(s) : NULL; }

tt_chat_format *tt_chat_format_open(const tt_chat_settings *settings, const tt_tokenizer *tok) {
    tt_chat_format *f = tt_xcalloc(1, sizeof *f, "a chat format");
    f->settings = *settings;
    f->template_text = tt_xstrdup(settings->template_text);
    f->template_origin = tt_xstrdup(settings->template_origin);
    f->bos_token = copy_or_null(settings->bos_token);
    f->eos_token = copy_or_null(settings->eos_token);
    f->unk_token = copy_or_null(settings->unk_token);
    f->pad_token = copy_or_null(settings->pad_token);
    f->settings.template_text = f->template_text;
    f->settings.template_origin = f->template_origin;
    f->settings.bos_token = f->bos_token;
    f->settings.eos_token = f->eos_token;
    f->settings.unk_token = f->unk_token;
    f->settings.pad_token = f->pad_token;
    f->tok = tok;
    char err[1024];
    f->template = tt_jinja_parse(f->template_text, strlen(f->template_text), f->template_origin, err, sizeof err);
    if (!f->template)
        tt_die("the chat template (%s) does not parse: %s; fix it or choose another with chat_template",
               f->template_origin, err);
    f->has_generation = tt_jinja_has_generation(f->template);
    if (settings->template_kwargs) {
        json_error_t error;
        f->template_kwargs = json_loads(settings->template_kwargs, 0, &error);
        TT_CHECK(json_is_object(f->template_kwargs), "chat_template_kwargs is not a JSON object: %s (%s)",
                 settings->template_kwargs, error.text);
    }
    tt_chat_resolve_eot(f);
    /* the caller's strings may go: f->template_kwargs and f->eot_ids hold what they said */
    f->settings.template_kwargs = NULL;
    f->settings.eot_tokens = NULL;
    const tt_dataset_spec *spec = settings->spec;
    if (spec->roles_given) {
        f->alias_count = spec->role_alias_count;
        f->alias_from = (const char *const *)spec->role_alias_from;
        f->alias_to = (const char *const *)spec->role_alias_to;
    } else {
        f->alias_count = (int)(sizeof default_alias_from / sizeof default_alias_from[0]);
        f->alias_from = default_alias_from;
        f->alias_to = default_alias_to;
    }
    return f;
}

void tt_chat_format_free(tt_chat_format *f) {
    if (!f) return;
    tt_jinja_free(f->template);
    json_decref(f->template_kwargs);
    free(f->eot_ids);
    free(f->template_text);
    free(f->template_origin);
    free(f->bos_token);
    free(f->eos_token);
    free(f->unk_token);
    free(f->pad_token);
    free(f);
}

bool tt_chat_format_has_generation(const tt_chat_format *f) { return f->has_generation; }

/* The role a name stands for (an alias's target, else the name itself). */
static const char *aliased_role(const tt_chat_format *f, const char *role) {
    for (int i = 0; i < f->alias_count; i++)
        if (strcmp(f->alias_from[i], role) == 0) return f->alias_to[i];
    return role;
}

/* A role the template can be expected to handle: a standard one, an alias's target, one of
 * roles_to_train, or one the template's text names in quotes ('ipython', "developer"). A name
 * outside all of these is most likely a role the data spells differently (ShareGPT's
 * "observation") or a typo, which would render as the template's fallback, silently. */
static bool known_role(const tt_chat_format *f, const char *role) {
    static const char *const standard[] = {"system", "user", "assistant", "tool"};
    for (size_t i = 0; i < sizeof standard / sizeof standard[0]; i++)
        if (strcmp(standard[i], role) == 0) return true;
    for (int i = 0; i < f->alias_count; i++)
        if (strcmp(f->alias_to[i], role) == 0) return true;
    const tt_dataset_spec *spec = f->settings.spec;
    for (int i = 0; i < spec->roles_to_train_count; i++)
        if (strcmp(aliased_role(f, spec->roles_to_train[i]), role) == 0) return true;
    size_t n = strlen(role);
    for (const char *p = f->template_text; (p = strstr(p, role)) != NULL; p += n)
        if (p > f->template_text && (p[-1] == '\'' || p[-1] == '"') && p[n] == p[-1]) return true;
    return false;
}

static const char *mapped_field(const tt_dataset_spec *spec, const char *property) {
    for (int i = 0; i < spec->property_mapping_count; i++)
        if (strcmp(spec->property_names[i], property) == 0) return spec->property_fields[i];
    return property;
}

static bool is_mapped_field(const tt_dataset_spec *spec, const char *field) {
    for (int i = 0; i < spec->property_mapping_count; i++)
        if (strcmp(spec->property_fields[i], field) == 0) return true;
    return false;
}

/* A JSON string that holds JSON (tool arguments, tool parameters) parsed, as axolotl's json.loads parses them
 * (prompt_strategies/chat_template.py at 067b021, transform_message: a string tool_calls[].function.arguments is
 * json.loads'ed, a string that is not JSON raises), so that the labels are axolotl's: a template that wants the text
 * (DeepSeek-V3's concatenates it) fails on such a record there too, unless the entry says tool_call_arguments:
 * as_given (transformers' apply_chat_template passes the text). Returns whether it parsed one. */
static bool parse_json_string_field(json_t *object, const char *key, const char *where, const char *field_name) {
    json_t *v = json_object_get(object, key);
    if (!json_is_string(v)) return false;
    json_error_t error;
    json_t *parsed = json_loadb(json_string_value(v), json_string_length(v), JSON_DECODE_ANY, &error);
    if (!parsed)
        tt_die("%s: %s is a string that is not JSON (%s at character %d); write the object itself or valid JSON text",
               where, field_name, error.text, error.position);
    json_object_set_new(object, key, parsed);
    return true;
}

/* One message through message_property_mappings and the role aliases; the other fields pass
 * through as they are (axolotl passes those the template reads; the others change nothing). */
static json_t *transform_message(const tt_chat_format *f, json_t *message, const char *where, size_t index,
                                 bool *parsed_arguments) {
    const tt_dataset_spec *spec = f->settings.spec;
    const char *list = spec->field_messages;
    if (!json_is_object(message))
        tt_die("%s: %s[%zu] is %s; each message is an object such as {\"role\": \"user\", \"content\": \"...\"}", where,
               list, index, tt_json_type_name(message));
    json_t *out = json_object();
    for (int i = 0; i < spec->property_mapping_count; i++) {
        json_t *v = json_object_get(message, spec->property_fields[i]);
        if (v) json_object_set_new(out, spec->property_names[i], json_deep_copy(v)); /* null stays None */
    }
    json_t *role = json_object_get(out, "role");
    const char *role_field = mapped_field(spec, "role");
    if (!role)
        tt_die("%s: %s[%zu] has no field '%s' (its role%s); fix the record, or map the role with "
               "message_property_mappings: {role: FIELD}",
               where, list, index, role_field, strcmp(role_field, "role") ? ", by message_property_mappings" : "");
    if (!json_is_string(role))
        tt_die("%s: %s[%zu].%s is %s; a role is a string such as \"user\"", where, list, index, role_field,
               tt_json_type_name(role));
    json_object_set_new(out, "role", json_string(aliased_role(f, json_string_value(role))));
    const char *key;
    json_t *v;
    json_object_foreach(message, key, v) {
        if (!is_mapped_field(spec, key)) json_object_set_new(out, key, json_deep_copy(v));
    }
    const char *final_role = json_string_value(json_object_get(out, "role"));
    if (!json_is_string(json_object_get(out, "role")))
        tt_die("%s: %s[%zu].role is %s; a role is a string such as \"user\"", where, list, index,
               tt_json_type_name(json_object_get(out, "role")));
    if (!*final_role)
        tt_die("%s: %s[%zu].%s is \"\"; a message needs a role such as \"user\"", where, list, index, role_field);
    if (!known_role(f, final_role))
        tt_die("%s: %s[%zu].%s is '%s', a role that is not system, user, assistant or tool, not one of roles_to_train, "
               "not a target of the role aliases (%s) and not named by the chat template (%s); map it with roles: "
               "{assistant: [%s]} (or the role it stands for), or fix the record",
               where, list, index, role_field, final_role,
               spec->roles_given ? "the dataset's roles:"
                                 : "human, user -> user; gpt, assistant -> assistant; system; "
                                   "tool",
               f->template_origin, final_role);
    json_t *tool_calls = json_object_get(out, "tool_calls");
    json_t *content = json_object_get(out, "content");
    const char *content_field = mapped_field(spec, "content");
    const bool has_calls = json_is_array(tool_calls) && json_array_size(tool_calls) > 0;
    if ((!content || (json_is_null(content) && !has_calls)) && !has_calls)
        tt_die("%s: %s[%zu] (%s) has no field '%s' (its content%s); fix the record, or map the content with "
               "message_property_mappings: {content: FIELD}",
               where, list, index, final_role, content_field,
               strcmp(content_field, "content") ? ", by message_property_mappings" : "");
    if (content && !json_is_string(content) && !json_is_array(content) && !(json_is_null(content) && has_calls))
        tt_die("%s: %s[%zu].%s is %s; a message's content is a string (or a list of parts such as {\"type\": \"text\", "
               "\"text\": ...})",
               where, list, index, content_field, tt_json_type_name(content));
    if (json_is_string(content) && memchr(json_string_value(content), 0, json_string_length(content)))
        tt_die("%s: %s[%zu].%s contains a NUL character (\\u0000); remove it", where, list, index, content_field);
    if (spec->split_thinking) tt_chat_split_thinking(out);
    if (json_is_array(tool_calls) && !spec->tool_call_arguments_as_given) {
        size_t i;
        json_t *call;
        json_array_foreach(tool_calls, i, call) {
            json_t *function = json_object_get(call, "function");
            char name[160];
            snprintf(name, sizeof name, "%s[%zu].tool_calls[%zu].function.arguments", list, index, i);
            if (json_is_object(function))
                *parsed_arguments |= parse_json_string_field(function, "arguments", where, name);
        }
    }
    return out;
}

/* The record's tools (axolotl's field_tools, "tools"), parameters given as JSON text parsed. */
static json_t *record_tools(json_t *record, const char *where) {
    json_t *tools = json_object_get(record, "tools");
    if (!tools || json_is_null(tools)) return NULL;
    if (!json_is_array(tools))
        tt_die("%s: field 'tools' is %s; it must be a list of tool definitions such as {\"type\": \"function\", "
               "\"function\": {...}}",
               where, tt_json_type_name(tools));
    tools = json_deep_copy(tools);
    size_t i;
    json_t *tool;
    json_array_foreach(tools, i, tool) {
        json_t *function = json_object_get(tool, "function");
        char name[64];
        snprintf(name, sizeof name, "tools[%zu].function.parameters", i);
        if (json_is_object(function)) parse_json_string_field(function, "parameters", where, name);
    }
    return tools;
}

void tt_chat_record(const tt_chat_format *f, json_t *record, const char *where, tt_chat_example *out) {
    memset(out, 0, sizeof *out);
    const tt_dataset_spec *spec = f->settings.spec;
    const char *field = spec->field_messages;
    json_t *messages = json_object_get(record, field);
    if (!messages || json_is_null(messages)) {
        const char *other = strcmp(field, "conversations") == 0 ? "messages" : "conversations";
        if (json_object_get(record, other))
            tt_die("%s: the record has no field '%s' but has '%s'; set field_messages: %s in the datasets entry", where,
                   field, other, other);
        tt_die("%s: the record has no field '%s', the list of messages a chat_template dataset reads; fix the record, "
               "or name the field with field_messages",
               where, field);
    }
    if (!json_is_array(messages))
        tt_die("%s: field '%s' is %s; a chat_template dataset needs a list of messages such as [{\"role\": \"user\", "
               "\"content\": \"...\"}]",
               where, field, tt_json_type_name(messages));
    if (json_array_size(messages) == 0)
        tt_die("%s: empty conversation: field '%s' is []; remove the record", where, field);
    json_t *turns = json_array();
    /* per turn: the message's own training (-1: none) and its spans (or null) */
    json_t *training = json_array(), *details = json_array();
    size_t i;
    json_t *message;
    json_array_foreach(messages, i, message) {
        json_t *turn = transform_message(f, message, where, i, &out->parsed_arguments);
        json_t *spans;
        int trains = tt_chat_message_training(f, message, json_object_get(turn, "content"), where, i, &spans);
        json_array_append_new(turns, turn);
        json_array_append_new(training, json_integer(trains));
        json_array_append_new(details, spans ? spans : json_null());
    }
    /* axolotl: a record's "system" text becomes the first turn unless the messages start with one */
    json_t *system = json_object_get(record, "system");
    const char *first_role = json_string_value(json_object_get(json_array_get(turns, 0), "role"));
    if (system && !json_is_null(system) && strcmp(first_role, "system") != 0) {
        if (!json_is_string(system))
            tt_die("%s: field 'system' is %s; it must be the system prompt's text", where, tt_json_type_name(system));
        json_t *turn = json_object();
        json_object_set_new(turn, "role", json_string("system"));
        json_object_set_new(turn, "content", json_deep_copy(system));
        json_array_insert_new(turns, 0, turn);
        json_array_insert_new(training, 0, json_integer(-1));
        json_array_insert_new(details, 0, json_null());
    }
    if (spec->drop_system_message &&
        strcmp(json_string_value(json_object_get(json_array_get(turns, 0), "role")), "system") == 0) {
        json_array_remove(turns, 0);
        json_array_remove(training, 0);
        json_array_remove(details, 0);
    }
    if (json_array_size(turns) == 0)
        tt_die("%s: empty conversation: only a system message, which drop_system_message leaves out; remove the record",
               where); /* (turns, training and details are freed at exit) */
    out->messages = turns;
    out->tools = record_tools(record, where);
    out->trains = tt_xcalloc(json_array_size(turns), sizeof(bool), "turns");
    json_array_foreach(turns, i, message) {
        const char *role = json_string_value(json_object_get(message, "role"));
        bool trains = f->settings.train_on_inputs;
        for (int r = 0; r < spec->roles_to_train_count && !trains; r++)
            trains = strcmp(aliased_role(f, spec->roles_to_train[r]), role) == 0;
        const json_int_t own = json_integer_value(json_array_get(training, i)); /* axolotl: the message's own wins */
        out->trains[i] = own >= 0 ? own == 1 : trains;
    }
    json_decref(training);
    out->details = details;
    out->where = tt_xstrdup(where);
}

void tt_chat_example_free(tt_chat_example *ex) {
    json_decref(ex->messages);
    json_decref(ex->tools);
    json_decref(ex->details);
    free(ex->trains);
    free(ex->where);
    free(ex->error);
    memset(ex, 0, sizeof *ex);
}
