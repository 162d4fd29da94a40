/* str.format over named text fields (python_format.h). */
#include "core/python_format.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"

typedef struct text {
    char *s;
    size_t len, cap;
} text;

static void append(text *t, const char *s, size_t n) {
    if (!t) return;
    if (t->len + n + 1 > t->cap) {
        t->cap = (t->len + n + 1) * 2;
        t->s = tt_xrealloc(t->s, t->cap, "a formatted prompt");
    }
    memcpy(t->s + t->len, s, n);
    t->len += n;
    t->s[t->len] = 0;
}

static bool fail(text *t, char *err, size_t err_size, const char *why, const char *fmt, size_t at) {
    snprintf(err, err_size, "%s (at character %zu of \"%s\")", why, at + 1, fmt);
    if (t) free(t->s);
    return false;
}

bool tt_python_format(const char *fmt, const char *const *names, const char *const *values, const size_t *value_lens,
                      int count, char **out, size_t *out_len, char *err, size_t err_size) {
    text result = {0}, *t = out ? &result : NULL;
    append(t, "", 0);
    for (size_t i = 0; fmt[i];) {
        const char c = fmt[i];
        if (c == '}') {
            if (fmt[i + 1] != '}') return fail(t, err, err_size, "a single '}' (write '}}' for a brace)", fmt, i);
            append(t, "}", 1);
            i += 2;
            continue;
        }
        if (c != '{') {
            const size_t run = strcspn(fmt + i, "{}");
            append(t, fmt + i, run);
            i += run;
            continue;
        }
        if (fmt[i + 1] == '{') {
            append(t, "{", 1);
            i += 2;
            continue;
        }
        const char *close = strchr(fmt + i + 1, '}');
        if (!close) return fail(t, err, err_size, "a single '{' (write '{{' for a brace)", fmt, i);
        const size_t name_len = (size_t)(close - (fmt + i + 1));
        const char *name = fmt + i + 1;
        if (name_len == 0 || strcspn(name, ".[!:{") < name_len)
            return fail(t, err, err_size,
                        "a field other than a plain name ({instruction}); positional fields, attributes, indexes, "
                        "conversions and format specs are not filled",
                        fmt, i);
        int found = -1;
        for (int k = 0; k < count && found < 0; k++)
            if (strlen(names[k]) == name_len && memcmp(names[k], name, name_len) == 0) found = k;
        if (found < 0) {
            char why[160];
            snprintf(why, sizeof why, "the field {%.*s} is not one this format is given",
                     (int)(name_len < 64 ? name_len : 64), name);
            return fail(t, err, err_size, why, fmt, i);
        }
        append(t, values ? values[found] : "", values ? value_lens[found] : 0);
        i += name_len + 2;
    }
    if (out) {
        *out = result.s;
        *out_len = result.len;
    }
    return true;
}
