#include "model/config_reader.h"

#include "core/check.h"
#include "core/json_describe.h"

json_t *tt_config_value(const tt_config_reader *r, const char *key) {
    json_t *v = json_object_get(r->object, key);
    return json_is_null(v) ? NULL : v;
}

int64_t tt_config_int(const tt_config_reader *r, const char *key, bool required, int64_t fallback) {
    json_t *v = tt_config_value(r, key);
    if (!v) {
        if (required)
            tt_die("%s: key \"%s%s\" is missing; a Hugging Face config.json of this model type has it (an integer)",
                   r->path, r->prefix, key);
        return fallback;
    }
    if (!json_is_integer(v))
        tt_die("%s: key \"%s%s\" must be an integer, not %s", r->path, r->prefix, key, tt_json_type_name(v));
    return (int64_t)json_integer_value(v);
}

double tt_config_number(const tt_config_reader *r, const char *key, bool required, double fallback) {
    json_t *v = tt_config_value(r, key);
    if (!v) {
        if (required) tt_die("%s: key \"%s%s\" is missing; it is required here (a number)", r->path, r->prefix, key);
        return fallback;
    }
    if (!json_is_number(v))
        tt_die("%s: key \"%s%s\" must be a number, not %s", r->path, r->prefix, key, tt_json_type_name(v));
    return json_number_value(v);
}

bool tt_config_bool(const tt_config_reader *r, const char *key, bool fallback) {
    json_t *v = tt_config_value(r, key);
    if (!v) return fallback;
    if (!json_is_boolean(v))
        tt_die("%s: key \"%s%s\" must be true or false, not %s", r->path, r->prefix, key, tt_json_type_name(v));
    return json_is_true(v);
}

const char *tt_config_string(const tt_config_reader *r, const char *key) {
    json_t *v = tt_config_value(r, key);
    if (!v) return NULL;
    if (!json_is_string(v))
        tt_die("%s: key \"%s%s\" must be a string, not %s", r->path, r->prefix, key, tt_json_type_name(v));
    return json_string_value(v);
}
