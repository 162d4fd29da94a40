/* Values of the Jinja interpreter and their Python-compatible printing: str() and repr() as
 * jinja2 prints them, json.dumps as transformers' tojson filter calls it. */
#include "data/jinja_value.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"

tt_jv *tt_jv_new(tt_jarena *a, tt_jv_kind k) {
    tt_jv *v = tt_jarena_alloc(a, sizeof(tt_jv));
    v->kind = k;
    return v;
}
tt_jv *tt_jv_str(tt_jarena *a, const char *s, size_t n) {
    tt_jv *v = tt_jv_new(a, JV_STR);
    char *c = tt_jarena_alloc(a, n + 1);
    if (n) memcpy(c, s, n);
    v->s = c;
    v->n = n;
    return v;
}
tt_jv *tt_jv_int(tt_jarena *a, int64_t i) {
    tt_jv *v = tt_jv_new(a, JV_INT);
    v->i = i;
    return v;
}
tt_jv *tt_jv_float(tt_jarena *a, double f) {
    tt_jv *v = tt_jv_new(a, JV_FLOAT);
    v->f = f;
    return v;
}
tt_jv *tt_jv_bool(tt_jarena *a, bool b) {
    tt_jv *v = tt_jv_new(a, JV_BOOL);
    v->i = b;
    return v;
}
tt_jv *tt_jv_undef(tt_jarena *a, const char *name) {
    tt_jv *v = tt_jv_new(a, JV_UNDEF);
    v->s = name;
    return v;
}

static void grow(tt_jarena *a, tt_jv *c, bool with_keys) {
    if (c->n < c->cap) return;
    size_t cap = c->cap ? c->cap * 2 : 4;
    tt_jv **items = tt_jarena_alloc(a, tt_mul_size(cap, sizeof(tt_jv *), "jinja list"));
    if (c->n) memcpy(items, c->items, c->n * sizeof(tt_jv *));
    c->items = items;
    if (with_keys) {
        tt_jv **keys = tt_jarena_alloc(a, tt_mul_size(cap, sizeof(tt_jv *), "jinja dict"));
        if (c->n) memcpy(keys, c->keys, c->n * sizeof(tt_jv *));
        c->keys = keys;
    }
    c->cap = cap;
}

void tt_jv_push(tt_jarena *a, tt_jv *list, tt_jv *v) {
    grow(a, list, false);
    list->items[list->n++] = v;
}

tt_jv *tt_jv_dict_get(const tt_jv *d, const char *key, size_t n) {
    for (size_t i = 0; i < d->n; i++)
        if (d->keys[i]->n == n && memcmp(d->keys[i]->s, key, n) == 0) return d->items[i];
    return NULL;
}

void tt_jv_dict_set_name(tt_jarena *a, tt_jv *d, const char *name, size_t n, tt_jv *v) {
    for (size_t i = 0; i < d->n; i++)
        if (d->keys[i]->n == n && memcmp(d->keys[i]->s, name, n) == 0) {
            d->items[i] = v;
            return;
        }
    grow(a, d, true);
    d->keys[d->n] = tt_jv_str(a, name, n);
    d->items[d->n++] = v;
}

void tt_jv_dict_set(tt_jarena *a, tt_jv *d, tt_jv *key, tt_jv *v) {
    for (size_t i = 0; i < d->n; i++)
        if (tt_jv_equal(d->keys[i], key)) {
            d->items[i] = v;
            return;
        }
    grow(a, d, true);
    d->keys[d->n] = key;
    d->items[d->n++] = v;
}

tt_jv *tt_jv_from_json(tt_jarena *a, const json_t *j) {
    switch (json_typeof(j)) {
    case JSON_NULL: return tt_jv_new(a, JV_NONE);
    case JSON_TRUE: return tt_jv_bool(a, true);
    case JSON_FALSE: return tt_jv_bool(a, false);
    case JSON_INTEGER: return tt_jv_int(a, (int64_t)json_integer_value(j));
    case JSON_REAL: return tt_jv_float(a, json_real_value(j));
    case JSON_STRING: return tt_jv_str(a, json_string_value(j), json_string_length(j));
    case JSON_ARRAY: {
        tt_jv *l = tt_jv_new(a, JV_LIST);
        for (size_t i = 0; i < json_array_size(j); i++) tt_jv_push(a, l, tt_jv_from_json(a, json_array_get(j, i)));
        return l;
    }
    case JSON_OBJECT: {
        tt_jv *d = tt_jv_new(a, JV_DICT);
        const char *k;
        json_t *x;
        json_object_foreach((json_t *)j, k, x) {
            grow(a, d, true); /* JSON keys are unique: append without a lookup */
            d->keys[d->n] = tt_jv_str(a, k, strlen(k));
            d->items[d->n++] = tt_jv_from_json(a, x);
        }
        return d;
    }
    }
    return tt_jv_new(a, JV_NONE);
}

bool tt_jv_truthy(const tt_jv *v) {
    switch (v->kind) {
    case JV_UNDEF:
    case JV_NONE: return false;
    case JV_BOOL:
    case JV_INT: return v->i != 0;
    case JV_FLOAT: return v->f != 0.0;
    case JV_STR:
    case JV_LIST:
    case JV_DICT: return v->n != 0;
    default: return true;
    }
}

static bool is_num(const tt_jv *v) { return v->kind == JV_BOOL || v->kind == JV_INT || v->kind == JV_FLOAT; }

bool tt_jv_equal(const tt_jv *x, const tt_jv *y) {
    if (is_num(x) && is_num(y)) {
        if (x->kind != JV_FLOAT && y->kind != JV_FLOAT) return x->i == y->i;
        double a = x->kind == JV_FLOAT ? x->f : (double)x->i, b = y->kind == JV_FLOAT ? y->f : (double)y->i;
        return a == b;
    }
    if (x->kind != y->kind) return false;
    switch (x->kind) {
    case JV_UNDEF:
    case JV_NONE: return true;
    case JV_STR: return x->n == y->n && (x->n == 0 || memcmp(x->s, y->s, x->n) == 0);
    case JV_LIST:
        if (x->n != y->n || x->is_tuple != y->is_tuple) return false;
        for (size_t i = 0; i < x->n; i++)
            if (!tt_jv_equal(x->items[i], y->items[i])) return false;
        return true;
    case JV_DICT:
        if (x->n != y->n) return false;
        for (size_t i = 0; i < x->n; i++) {
            tt_jv *o = tt_jv_dict_get(y, x->keys[i]->s, x->keys[i]->n);
            if (!o || !tt_jv_equal(x->items[i], o)) return false;
        }
        return true;
    default: return x == y;
    }
}

void tt_jbuf_put(tt_jbuf *b, const char *s, size_t n) {
    if (b->over) return;
    if (b->limit && b->n + n > b->limit) {
        b->over = true;
        return;
    }
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        b->p = tt_xrealloc(b->p, cap, "jinja output");
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}
void tt_jbuf_puts(tt_jbuf *b, const char *s) { tt_jbuf_put(b, s, strlen(s)); }

/* Python's repr(float): the shortest digits that read back to the same double, in fixed
 * notation for exponents -4 <= e < 16 and scientific otherwise. */
void tt_jv_float_repr(tt_jbuf *b, double f) {
    if (isnan(f)) {
        tt_jbuf_puts(b, "nan");
        return;
    }
    if (isinf(f)) {
        tt_jbuf_puts(b, f < 0 ? "-inf" : "inf");
        return;
    }
    char tmp[64];
    int prec = 1;
    for (; prec <= 17; prec++) {
        snprintf(tmp, sizeof(tmp), "%.*e", prec - 1, f);
        if (strtod(tmp, NULL) == f) break;
    }
    /* tmp: [-]d.ddde[+-]XX */
    const char *q = tmp;
    bool neg = *q == '-';
    if (neg) q++;
    char digits[32];
    int nd = 0;
    for (; *q && *q != 'e'; q++)
        if (*q != '.') digits[nd++] = *q;
    int e = atoi(q + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    char out[64];
    int k = 0;
    if (neg) out[k++] = '-';
    if (e >= -4 && e < 16) {
        if (e < 0) {
            out[k++] = '0';
            out[k++] = '.';
            for (int i = 0; i < -e - 1; i++) out[k++] = '0';
            for (int i = 0; i < nd; i++) out[k++] = digits[i];
        } else {
            for (int i = 0; i <= e; i++) out[k++] = i < nd ? digits[i] : '0';
            out[k++] = '.';
            if (nd > e + 1)
                for (int i = e + 1; i < nd; i++) out[k++] = digits[i];
            else out[k++] = '0';
        }
        out[k] = 0;
    } else {
        out[k++] = digits[0];
        if (nd > 1) {
            out[k++] = '.';
            for (int i = 1; i < nd; i++) out[k++] = digits[i];
        }
        snprintf(out + k, sizeof(out) - (size_t)k, "e%c%02d", e < 0 ? '-' : '+', e < 0 ? -e : e);
    }
    tt_jbuf_puts(b, out);
}

static void str_repr(tt_jbuf *b, const char *s, size_t n) {
    bool has_sq = memchr(s, '\'', n) != NULL, has_dq = memchr(s, '"', n) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    tt_jbuf_put(b, &q, 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char esc[8];
        if (c == '\\') tt_jbuf_puts(b, "\\\\");
        else if (c == (unsigned char)q) {
            esc[0] = '\\';
            esc[1] = (char)c;
            tt_jbuf_put(b, esc, 2);
        } else if (c == '\n') tt_jbuf_puts(b, "\\n");
        else if (c == '\r') tt_jbuf_puts(b, "\\r");
        else if (c == '\t') tt_jbuf_puts(b, "\\t");
        else if (c < 0x20 || c == 0x7f) {
            snprintf(esc, sizeof(esc), "\\x%02x", c);
            tt_jbuf_puts(b, esc);
        } else {
            tt_jbuf_put(b, (const char *)&s[i], 1);
        }
    }
    tt_jbuf_put(b, &q, 1);
}

void tt_jv_repr_into(tt_jbuf *b, const tt_jv *v) {
    switch (v->kind) {
    case JV_STR: str_repr(b, v->s, v->n); return;
    case JV_LIST:
        tt_jbuf_puts(b, v->is_tuple ? "(" : "[");
        for (size_t i = 0; i < v->n; i++) {
            if (i) tt_jbuf_puts(b, ", ");
            tt_jv_repr_into(b, v->items[i]);
        }
        if (v->is_tuple && v->n == 1) tt_jbuf_puts(b, ",");
        tt_jbuf_puts(b, v->is_tuple ? ")" : "]");
        return;
    case JV_DICT:
        tt_jbuf_puts(b, "{");
        for (size_t i = 0; i < v->n; i++) {
            if (i) tt_jbuf_puts(b, ", ");
            tt_jv_repr_into(b, v->keys[i]);
            tt_jbuf_puts(b, ": ");
            tt_jv_repr_into(b, v->items[i]);
        }
        tt_jbuf_puts(b, "}");
        return;
    default: tt_jv_str_into(b, v); return;
    }
}

void tt_jv_str_into(tt_jbuf *b, const tt_jv *v) {
    char tmp[32];
    switch (v->kind) {
    case JV_UNDEF: return;
    case JV_NONE: tt_jbuf_puts(b, "None"); return;
    case JV_BOOL: tt_jbuf_puts(b, v->i ? "True" : "False"); return;
    case JV_INT:
        snprintf(tmp, sizeof(tmp), "%lld", (long long)v->i);
        tt_jbuf_puts(b, tmp);
        return;
    case JV_FLOAT: tt_jv_float_repr(b, v->f); return;
    case JV_STR: tt_jbuf_put(b, v->s, v->n); return;
    case JV_LIST:
    case JV_DICT: tt_jv_repr_into(b, v); return;
    case JV_NS: tt_jbuf_puts(b, "<Namespace>"); return;
    case JV_MACRO: tt_jbuf_puts(b, "<Macro>"); return;
    case JV_FUNC: tt_jbuf_puts(b, "<function>"); return;
    }
}

static void json_str(tt_jbuf *b, const char *s, size_t n) {
    tt_jbuf_puts(b, "\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char esc[8];
        switch (c) {
        case '"': tt_jbuf_puts(b, "\\\""); break;
        case '\\': tt_jbuf_puts(b, "\\\\"); break;
        case '\n': tt_jbuf_puts(b, "\\n"); break;
        case '\r': tt_jbuf_puts(b, "\\r"); break;
        case '\t': tt_jbuf_puts(b, "\\t"); break;
        case '\b': tt_jbuf_puts(b, "\\b"); break;
        case '\f': tt_jbuf_puts(b, "\\f"); break;
        default:
            if (c < 0x20) {
                snprintf(esc, sizeof(esc), "\\u%04x", c);
                tt_jbuf_puts(b, esc);
            } else {
                tt_jbuf_put(b, (const char *)&s[i], 1);
            }
        }
    }
    tt_jbuf_puts(b, "\"");
}

static void newline_indent(tt_jbuf *b, int indent, int level) {
    tt_jbuf_puts(b, "\n");
    for (int i = 0; i < indent * level; i++) tt_jbuf_put(b, " ", 1);
}

static int key_cmp(const void *x, const void *y) {
    const tt_jv *a = *(tt_jv *const *)x, *c = *(tt_jv *const *)y;
    size_t n = a->n < c->n ? a->n : c->n;
    int r = memcmp(a->s, c->s, n);
    return r ? r : (a->n < c->n ? -1 : a->n > c->n);
}

bool tt_jv_json_into(tt_jbuf *b, const tt_jv *v, int indent, const char *item_sep, const char *key_sep, bool sort_keys,
                     int depth) {
    if (depth > 200) return false;
    char tmp[32];
    switch (v->kind) {
    case JV_NONE: tt_jbuf_puts(b, "null"); return true;
    case JV_BOOL: tt_jbuf_puts(b, v->i ? "true" : "false"); return true;
    case JV_INT:
        snprintf(tmp, sizeof(tmp), "%lld", (long long)v->i);
        tt_jbuf_puts(b, tmp);
        return true;
    case JV_FLOAT:
        if (isnan(v->f)) tt_jbuf_puts(b, "NaN");
        else if (isinf(v->f)) tt_jbuf_puts(b, v->f < 0 ? "-Infinity" : "Infinity");
        else tt_jv_float_repr(b, v->f);
        return true;
    case JV_STR: json_str(b, v->s, v->n); return true;
    case JV_LIST:
        if (v->n == 0) {
            tt_jbuf_puts(b, "[]");
            return true;
        }
        tt_jbuf_puts(b, "[");
        for (size_t i = 0; i < v->n; i++) {
            if (i) tt_jbuf_puts(b, item_sep);
            if (indent >= 0) newline_indent(b, indent, depth + 1);
            if (!tt_jv_json_into(b, v->items[i], indent, item_sep, key_sep, sort_keys, depth + 1)) return false;
        }
        if (indent >= 0) newline_indent(b, indent, depth);
        tt_jbuf_puts(b, "]");
        return true;
    case JV_DICT:
    case JV_NS: {
        if (v->n == 0) {
            tt_jbuf_puts(b, "{}");
            return true;
        }
        size_t *order = tt_xmalloc(tt_mul_size(v->n, sizeof(size_t), "json keys"), "json keys");
        for (size_t i = 0; i < v->n; i++) order[i] = i;
        if (sort_keys) { /* insertion sort on indexes by key bytes: dicts here are small */
            for (size_t i = 1; i < v->n; i++)
                for (size_t j = i; j > 0 && key_cmp(&v->keys[order[j - 1]], &v->keys[order[j]]) > 0; j--) {
                    size_t t = order[j];
                    order[j] = order[j - 1];
                    order[j - 1] = t;
                }
        }
        tt_jbuf_puts(b, "{");
        bool ok = true;
        for (size_t k = 0; k < v->n && ok; k++) {
            size_t i = order[k];
            if (k) tt_jbuf_puts(b, item_sep);
            if (indent >= 0) newline_indent(b, indent, depth + 1);
            const tt_jv *key = v->keys[i];
            if (key->kind == JV_STR) json_str(b, key->s, key->n);
            else {
                tt_jbuf_puts(b, "\"");
                tt_jv_str_into(b, key);
                tt_jbuf_puts(b, "\"");
            }
            tt_jbuf_puts(b, key_sep);
            ok = tt_jv_json_into(b, v->items[i], indent, item_sep, key_sep, sort_keys, depth + 1);
        }
        free(order);
        if (!ok) return false;
        if (indent >= 0) newline_indent(b, indent, depth);
        tt_jbuf_puts(b, "}");
        return true;
    }
    default: return false;
    }
}
