/* jinja2's built-in filters and tests that chat templates use, transformers' tojson, and the
 * Python str and dict methods templates call (message.content.strip(), tools.items(), ...). */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "data/jinja_eval_internal.h"
#include "data/jinja_unicode.h"

static const char *const filter_names[] = {
    "length", "count", "trim",    "tojson",    "upper",      "lower",      "title",  "capitalize", "replace",  "join",
    "first",  "last",  "default", "d",         "list",       "string",     "int",    "float",      "abs",      "round",
    "items",  "map",   "select",  "reject",    "selectattr", "rejectattr", "unique", "sort",       "reverse",  "safe",
    "escape", "e",     "indent",  "wordcount", "batch",      "max",        "min",    "sum",        "dictsort", NULL};
static const char *const test_names[] = {
    "defined",  "undefined", "none",        "string",   "number", "integer", "float", "mapping",
    "iterable", "sequence",  "boolean",     "true",     "false",  "equalto", "eq",    "==",
    "ne",       "!=",        "odd",         "even",     "in",     "lower",   "upper", "divisibleby",
    "sameas",   "callable",  "gt",          "lt",       "ge",     "le",      ">",     "<",
    ">=",       "<=",        "greaterthan", "lessthan", NULL};

static bool in_list(const char *const *l, const char *s) {
    for (size_t i = 0; l[i]; i++)
        if (!strcmp(l[i], s)) return true;
    return false;
}
bool tt_jinja_is_filter(const char *name) { return in_list(filter_names, name); }
bool tt_jinja_is_test(const char *name) { return in_list(test_names, name); }

static tt_jv *str_of(tt_jrender *r, const char *s, size_t n) { return tt_jv_str(&r->arena, s, n); }
static tt_jv *buf_str(tt_jrender *r, tt_jbuf *b) {
    tt_jv *v = tt_jv_str(&r->arena, b->p ? b->p : "", b->n);
    free(b->p);
    return v;
}
static tt_jv *need_str(tt_jrender *r, const tt_jnode *at, tt_jv *v, const char *what) {
    if (v->kind == JV_UNDEF) return tt_jinja_undefined_error(r, at, v);
    if (v->kind != JV_STR) {
        tt_jrender_error(r, at, "%s needs a string, got '%s'", what, tt_jinja_type_name(v));
        return NULL;
    }
    return v;
}

/* Python's str.strip / lstrip / rstrip: whitespace (str.isspace), or any code point of chars. */
static bool in_chars(const tt_jv *chars, int32_t cp) {
    for (size_t at = 0; at < chars->n;)
        if (tt_py_next(chars->s, chars->n, &at) == cp) return true;
    return false;
}

static tt_jv *strip(tt_jrender *r, tt_jv *s, tt_jv *chars, bool left, bool right) {
    const bool by_chars = chars && chars->kind == JV_STR;
    size_t a = 0, b = s->n;
    while (left && a < b) {
        size_t next = a;
        const int32_t cp = tt_py_next(s->s, b, &next);
        if (!(by_chars ? in_chars(chars, cp) : tt_py_isspace(cp))) break;
        a = next;
    }
    while (right && b > a) {
        size_t start;
        const int32_t cp = tt_py_prev(s->s, b, &start);
        if (start < a || !(by_chars ? in_chars(chars, cp) : tt_py_isspace(cp))) break;
        b = start;
    }
    return str_of(r, s->s + a, b - a);
}

static tt_jv *map_case(tt_jrender *r, tt_jv *s, tt_py_case mode) {
    tt_jbuf b = {0};
    tt_py_map_case(&b, s->s, s->n, mode);
    return buf_str(r, &b);
}

static tt_jv *replace(tt_jrender *r, tt_jv *s, tt_jv *old, tt_jv *neu, int64_t count) {
    tt_jbuf b = {0};
    size_t i = 0;
    int64_t done = 0;
    if (old->n == 0) { /* Python inserts between every character */
        for (size_t k = 0; k <= s->n; k++) {
            if (count < 0 || done < count) {
                tt_jbuf_put(&b, neu->s, neu->n);
                done++;
            }
            if (k < s->n) tt_jbuf_put(&b, s->s + k, 1);
        }
        return buf_str(r, &b);
    }
    while (i < s->n) {
        if ((count < 0 || done < count) && i + old->n <= s->n && memcmp(s->s + i, old->s, old->n) == 0) {
            tt_jbuf_put(&b, neu->s, neu->n);
            i += old->n;
            done++;
        } else {
            tt_jbuf_put(&b, s->s + i, 1);
            i++;
        }
    }
    return buf_str(r, &b);
}

static tt_jv *split(tt_jrender *r, tt_jv *s, tt_jv *sep, int64_t maxsplit) {
    tt_jv *l = tt_jv_new(&r->arena, JV_LIST);
    int64_t done = 0;
    if (!sep || sep->kind == JV_NONE) { /* runs of Python's whitespace */
        size_t i = 0;
        for (;;) {
            for (size_t next = i; i < s->n && tt_py_isspace(tt_py_next(s->s, s->n, &next)); next = i) i = next;
            if (i >= s->n) break;
            if (maxsplit >= 0 && done >= maxsplit) {
                size_t e = s->n, start;
                while (e > i && tt_py_isspace(tt_py_prev(s->s, e, &start))) e = start;
                tt_jv_push(&r->arena, l, str_of(r, s->s + i, e - i));
                break;
            }
            size_t j = i;
            for (size_t next = j; j < s->n && !tt_py_isspace(tt_py_next(s->s, s->n, &next)); next = j) j = next;
            tt_jv_push(&r->arena, l, str_of(r, s->s + i, j - i));
            done++;
            i = j;
        }
        return l;
    }
    size_t i = 0, start = 0;
    while (i + sep->n <= s->n && (maxsplit < 0 || done < maxsplit)) {
        if (memcmp(s->s + i, sep->s, sep->n) == 0) {
            tt_jv_push(&r->arena, l, str_of(r, s->s + start, i - start));
            i += sep->n;
            start = i;
            done++;
        } else {
            i++;
        }
    }
    tt_jv_push(&r->arena, l, str_of(r, s->s + start, s->n - start));
    return l;
}

static bool affix(const tt_jv *s, const tt_jv *p, bool suffix) {
    if (p->n > s->n) return false;
    return memcmp(s->s + (suffix ? s->n - p->n : 0), p->s, p->n) == 0;
}

static int64_t find(const tt_jv *s, const tt_jv *sub) {
    if (sub->n == 0) return 0;
    for (size_t i = 0; i + sub->n <= s->n; i++)
        if (memcmp(s->s + i, sub->s, sub->n) == 0) return (int64_t)tt_jinja_utf8_len(s->s, i);
    return -1;
}

static tt_jv *items_of(tt_jrender *r, tt_jv *d) {
    tt_jv *l = tt_jv_new(&r->arena, JV_LIST);
    for (size_t i = 0; i < d->n; i++) {
        tt_jv *t = tt_jv_new(&r->arena, JV_LIST);
        t->is_tuple = true;
        tt_jv_push(&r->arena, t, d->keys[i]);
        tt_jv_push(&r->arena, t, d->items[i]);
        tt_jv_push(&r->arena, l, t);
    }
    return l;
}

tt_jv *tt_jinja_method(tt_jrender *r, const tt_jnode *at, tt_jv *obj, const char *name, const tt_jargs *args,
                       bool *handled) {
    tt_jarena *a = &r->arena;
    *handled = true;
    tt_jv *a0 = tt_jargs_get(args, 0, NULL), *a1 = tt_jargs_get(args, 1, NULL);
    if (obj->kind == JV_STR) {
        if (!strcmp(name, "strip")) return strip(r, obj, a0, true, true);
        if (!strcmp(name, "lstrip")) return strip(r, obj, a0, true, false);
        if (!strcmp(name, "rstrip")) return strip(r, obj, a0, false, true);
        if (!strcmp(name, "upper")) return map_case(r, obj, TT_PY_UPPER);
        if (!strcmp(name, "lower")) return map_case(r, obj, TT_PY_LOWER);
        if (!strcmp(name, "title")) return map_case(r, obj, TT_PY_JINJA_TITLE);
        if (!strcmp(name, "capitalize")) return map_case(r, obj, TT_PY_CAPITALIZE);
        if (!strcmp(name, "split")) {
            tt_jv *sep = tt_jargs_get(args, 0, "sep"), *mx = tt_jargs_get(args, 1, "maxsplit");
            if (sep && sep->kind == JV_STR && sep->n == 0) {
                tt_jrender_error(r, at, "empty separator");
                return NULL;
            }
            if (sep && sep->kind != JV_STR && sep->kind != JV_NONE) goto bad_args;
            return split(r, obj, sep, mx && mx->kind == JV_INT ? mx->i : -1);
        }
        if (!strcmp(name, "startswith") || !strcmp(name, "endswith")) {
            if (!a0) goto bad_args;
            bool suffix = name[0] == 'e';
            if (a0->kind == JV_STR) return tt_jv_bool(a, affix(obj, a0, suffix));
            if (a0->kind == JV_LIST) {
                for (size_t i = 0; i < a0->n; i++)
                    if (a0->items[i]->kind == JV_STR && affix(obj, a0->items[i], suffix)) return tt_jv_bool(a, true);
                return tt_jv_bool(a, false);
            }
            goto bad_args;
        }
        if (!strcmp(name, "replace")) {
            if (!a0 || !a1 || a0->kind != JV_STR || a1->kind != JV_STR) goto bad_args;
            tt_jv *c = tt_jargs_get(args, 2, "count");
            return replace(r, obj, a0, a1, c && c->kind == JV_INT ? c->i : -1);
        }
        if (!strcmp(name, "find") || !strcmp(name, "count") || !strcmp(name, "index")) {
            if (!a0 || a0->kind != JV_STR) goto bad_args;
            if (name[0] == 'c') {
                int64_t c = 0;
                if (a0->n == 0) return tt_jv_int(a, (int64_t)tt_jinja_utf8_len(obj->s, obj->n) + 1);
                for (size_t i = 0; i + a0->n <= obj->n;)
                    if (memcmp(obj->s + i, a0->s, a0->n) == 0) {
                        c++;
                        i += a0->n;
                    } else {
                        i++;
                    }
                return tt_jv_int(a, c);
            }
            int64_t f = find(obj, a0);
            if (f < 0 && name[0] == 'i') {
                tt_jrender_error(r, at, "substring not found");
                return NULL;
            }
            return tt_jv_int(a, f);
        }
        if (!strcmp(name, "join")) {
            if (!a0) goto bad_args;
            tt_jv *l = tt_jinja_iter_list(r, at, a0);
            if (!l) return NULL;
            tt_jbuf b = {0};
            for (size_t i = 0; i < l->n; i++) {
                if (l->items[i]->kind != JV_STR) {
                    free(b.p);
                    tt_jrender_error(r, at, "sequence item %zu: expected str instance, %s found", i,
                                     tt_jinja_type_name(l->items[i]));
                    return NULL;
                }
                if (i) tt_jbuf_put(&b, obj->s, obj->n);
                tt_jbuf_put(&b, l->items[i]->s, l->items[i]->n);
            }
            return buf_str(r, &b);
        }
        if (!strcmp(name, "isdigit") || !strcmp(name, "isspace") || !strcmp(name, "isalpha")) {
            bool ok = obj->n > 0;
            for (size_t pos = 0; ok && pos < obj->n;) {
                const int32_t cp = tt_py_next(obj->s, obj->n, &pos);
                ok = name[2] == 'd' ? tt_py_isdigit(cp) : name[2] == 's' ? tt_py_isspace(cp) : tt_py_isalpha(cp);
            }
            return tt_jv_bool(a, ok);
        }
    } else if (obj->kind == JV_DICT) {
        if (!strcmp(name, "items")) return items_of(r, obj);
        if (!strcmp(name, "keys") || !strcmp(name, "values")) {
            tt_jv *l = tt_jv_new(a, JV_LIST);
            for (size_t i = 0; i < obj->n; i++) tt_jv_push(a, l, name[0] == 'k' ? obj->keys[i] : obj->items[i]);
            return l;
        }
        if (!strcmp(name, "get")) {
            if (!a0) goto bad_args;
            for (size_t i = 0; i < obj->n; i++)
                if (tt_jv_equal(obj->keys[i], a0)) return obj->items[i];
            return a1 ? a1 : tt_jv_new(a, JV_NONE);
        }
    } else if (obj->kind == JV_LIST) {
        if (!strcmp(name, "append") || !strcmp(name, "pop") || !strcmp(name, "insert") || !strcmp(name, "extend")) {
            /* transformers' ImmutableSandboxedEnvironment refuses to mutate lists */
            tt_jrender_error(r, at, "access to attribute '%s' of 'list' object is unsafe.", name);
            return NULL;
        }
        if (!strcmp(name, "index")) {
            for (size_t i = 0; a0 && i < obj->n; i++)
                if (tt_jv_equal(obj->items[i], a0)) return tt_jv_int(a, (int64_t)i);
            tt_jrender_error(r, at, "value is not in list");
            return NULL;
        }
    }
    *handled = false;
    return NULL;
bad_args:
    tt_jrender_error(r, at, "bad arguments to %s.%s()", tt_jinja_type_name(obj), name);
    return NULL;
}

/* ---- tests ---- */

int tt_jinja_test(tt_jrender *r, const tt_jnode *at, const char *name, tt_jv *v, const tt_jargs *args) {
    tt_jv *a0 = tt_jargs_get(args, 0, NULL);
    tt_jv_kind k = v->kind;
    if (!strcmp(name, "defined")) return k != JV_UNDEF;
    if (!strcmp(name, "undefined")) return k == JV_UNDEF;
    if (!strcmp(name, "none")) return k == JV_NONE;
    if (!strcmp(name, "string")) return k == JV_STR;
    if (!strcmp(name, "number")) return k == JV_INT || k == JV_FLOAT || k == JV_BOOL;
    if (!strcmp(name, "integer")) return k == JV_INT;
    if (!strcmp(name, "float")) return k == JV_FLOAT;
    if (!strcmp(name, "boolean")) return k == JV_BOOL;
    if (!strcmp(name, "true")) return k == JV_BOOL && v->i;
    if (!strcmp(name, "false")) return k == JV_BOOL && !v->i;
    if (!strcmp(name, "mapping")) return k == JV_DICT;
    if (!strcmp(name, "iterable")) return k == JV_LIST || k == JV_DICT || k == JV_STR || k == JV_UNDEF;
    if (!strcmp(name, "sequence")) return k == JV_LIST || k == JV_DICT || k == JV_STR || k == JV_UNDEF;
    if (!strcmp(name, "callable")) return k == JV_MACRO || k == JV_FUNC;
    if (!strcmp(name, "lower") || !strcmp(name, "upper")) {
        if (k != JV_STR) return 0;
        bool cased = false; /* Python's str.islower / isupper: some cased character, none of the other case */
        for (size_t pos = 0; pos < v->n;) {
            const int32_t cp = tt_py_next(v->s, v->n, &pos);
            if (!tt_py_is_cased(cp)) continue;
            cased = true;
            if (name[0] == 'l' ? tt_py_is_upper(cp) : tt_py_is_lower(cp)) return 0;
        }
        return cased;
    }
    if (!strcmp(name, "odd") || !strcmp(name, "even") || !strcmp(name, "divisibleby")) {
        if (k == JV_UNDEF) return tt_jinja_undefined_error(r, at, v) ? 0 : -1;
        if (k != JV_INT && k != JV_BOOL) {
            tt_jrender_error(r, at, "test '%s' needs an integer, got '%s'", name, tt_jinja_type_name(v));
            return -1;
        }
        if (name[0] == 'o') return (v->i & 1) != 0;
        if (name[0] == 'e') return (v->i & 1) == 0;
        if (!a0 || a0->kind != JV_INT || a0->i == 0) {
            tt_jrender_error(r, at, "divisibleby needs a nonzero integer");
            return -1;
        }
        return v->i % a0->i == 0;
    }
    if (!a0) {
        tt_jrender_error(r, at, "test '%s' needs an argument", name);
        return -1;
    }
    if (!strcmp(name, "equalto") || !strcmp(name, "eq") || !strcmp(name, "==")) return tt_jv_equal(v, a0);
    if (!strcmp(name, "ne") || !strcmp(name, "!=")) return !tt_jv_equal(v, a0);
    if (!strcmp(name, "sameas")) {
        if (k != a0->kind) return 0;
        if (k == JV_NONE || k == JV_UNDEF) return 1;
        if (k == JV_BOOL || k == JV_INT) return v->i == a0->i;
        return v == a0;
    }
    if (!strcmp(name, "in")) {
        if (a0->kind == JV_STR && k == JV_STR) return find(a0, v) >= 0;
        if (a0->kind == JV_LIST || a0->kind == JV_DICT) {
            tt_jv *l = tt_jinja_iter_list(r, at, a0);
            for (size_t i = 0; l && i < l->n; i++)
                if (tt_jv_equal(l->items[i], v)) return 1;
            return 0;
        }
        tt_jrender_error(r, at, "test 'in' needs a container");
        return -1;
    }
    bool lt;
    if (!strcmp(name, "lt") || !strcmp(name, "<") || !strcmp(name, "lessthan"))
        return tt_jinja_less(r, at, v, a0, &lt) ? lt : -1;
    if (!strcmp(name, "gt") || !strcmp(name, ">") || !strcmp(name, "greaterthan"))
        return tt_jinja_less(r, at, a0, v, &lt) ? lt : -1;
    if (!strcmp(name, "le") || !strcmp(name, "<=")) return tt_jinja_less(r, at, a0, v, &lt) ? !lt : -1;
    if (!strcmp(name, "ge") || !strcmp(name, ">=")) return tt_jinja_less(r, at, v, a0, &lt) ? !lt : -1;
    tt_jrender_error(r, at, "no test named '%s'", name);
    return -1;
}

/* ---- filters ---- */

static tt_jv *attr_path(tt_jrender *r, tt_jv *v, const tt_jv *attr) {
    /* jinja2's make_attrgetter: "a.b" walks keys, integers index lists */
    if (attr->kind == JV_INT) {
        if (v->kind == JV_LIST && attr->i >= 0 && (size_t)attr->i < v->n) return v->items[attr->i];
        return tt_jv_undef(&r->arena, "no such item");
    }
    const char *s = attr->s;
    size_t n = attr->n;
    while (n > 0) {
        const char *dot = memchr(s, '.', n);
        size_t part = dot ? (size_t)(dot - s) : n;
        tt_jv *next = NULL;
        if (v->kind == JV_DICT || v->kind == JV_NS) next = tt_jv_dict_get(v, s, part);
        if (!next) return tt_jv_undef(&r->arena, "attribute is undefined");
        v = next;
        if (!dot) break;
        s += part + 1;
        n -= part + 1;
    }
    return v;
}

/* Python-ish sort key comparison with jinja2's case-insensitive default for strings. */
typedef struct {
    tt_jrender *r;
    const tt_jnode *at;
    bool fold, failed;
} sort_ctx;

static tt_jv *fold_key(tt_jrender *r, tt_jv *v, bool fold) {
    if (!fold || v->kind != JV_STR) return v;
    return map_case(r, v, TT_PY_LOWER);
}

static bool less_keys(sort_ctx *c, tt_jv *x, tt_jv *y) {
    bool lt = false;
    if (!c->failed && !tt_jinja_less(c->r, c->at, fold_key(c->r, x, c->fold), fold_key(c->r, y, c->fold), &lt))
        c->failed = true;
    return lt;
}

/* Stable merge sort by key (Python's sort is stable). */
static void merge_sort(sort_ctx *c, tt_jv **items, tt_jv **keys, size_t n, tt_jv **ti, tt_jv **tk) {
    if (n < 2) return;
    size_t h = n / 2;
    merge_sort(c, items, keys, h, ti, tk);
    merge_sort(c, items + h, keys + h, n - h, ti, tk);
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n) {
        if (less_keys(c, keys[j], keys[i])) {
            ti[k] = items[j];
            tk[k++] = keys[j++];
        } else {
            ti[k] = items[i];
            tk[k++] = keys[i++];
        }
    }
    while (i < h) {
        ti[k] = items[i];
        tk[k++] = keys[i++];
    }
    while (j < n) {
        ti[k] = items[j];
        tk[k++] = keys[j++];
    }
    memcpy(items, ti, n * sizeof(*items));
    memcpy(keys, tk, n * sizeof(*keys));
}

static tt_jv *copy_list(tt_jrender *r, const tt_jv *l) {
    tt_jv *c = tt_jv_new(&r->arena, JV_LIST);
    for (size_t i = 0; i < l->n; i++) tt_jv_push(&r->arena, c, l->items[i]);
    return c;
}

static int64_t to_int_or(const tt_jv *v, int64_t dflt) {
    return v && (v->kind == JV_INT || v->kind == JV_BOOL) ? v->i : dflt;
}

static tt_jv *select_filter(tt_jrender *r, const tt_jnode *at, const char *name, tt_jv *v, const tt_jargs *args) {
    bool by_attr = strstr(name, "attr") != NULL, reject = name[0] == 'r';
    tt_jv *l = tt_jinja_iter_list(r, at, v);
    if (!l) return NULL;
    size_t first = 0;
    tt_jv *attr = NULL;
    if (by_attr) {
        attr = tt_jargs_get(args, 0, NULL);
        if (!attr || (attr->kind != JV_STR && attr->kind != JV_INT)) {
            tt_jrender_error(r, at, "%s needs an attribute name", name);
            return NULL;
        }
        first = 1;
    }
    tt_jv *test = tt_jargs_get(args, first, NULL);
    if (test && (test->kind != JV_STR || !tt_jinja_is_test(test->s))) {
        tt_jrender_error(r, at, "%s: no test named '%.*s'", name, test->kind == JV_STR ? (int)test->n : 1,
                         test->kind == JV_STR ? test->s : "?");
        return NULL;
    }
    tt_jargs targs = {0};
    if (args->npos > first + 1) {
        targs.pos = args->pos + first + 1;
        targs.npos = args->npos - first - 1;
    }
    tt_jv *out = tt_jv_new(&r->arena, JV_LIST);
    for (size_t i = 0; i < l->n; i++) {
        tt_jv *x = by_attr ? attr_path(r, l->items[i], attr) : l->items[i];
        int t;
        if (test) {
            t = tt_jinja_test(r, at, test->s, x, &targs);
            if (t < 0) return NULL;
        } else {
            t = tt_jv_truthy(x);
        }
        if (t != reject) tt_jv_push(&r->arena, out, l->items[i]);
    }
    return out;
}

static tt_jv *tojson(tt_jrender *r, const tt_jnode *at, tt_jv *v, const tt_jargs *args) {
    tt_jv *ind = tt_jargs_get(args, 0, "indent"), *seps = tt_jargs_get(args, 99, "separators"),
          *sk = tt_jargs_get(args, 99, "sort_keys"), *ea = tt_jargs_get(args, 99, "ensure_ascii");
    if (ea && tt_jv_truthy(ea)) {
        tt_jrender_error(r, at, "tojson(ensure_ascii=True) is not supported");
        return NULL;
    }
    int indent = ind && ind->kind == JV_INT ? (int)(ind->i < 0 ? 0 : ind->i > 64 ? 64 : ind->i) : -1;
    const char *item_sep = indent >= 0 ? "," : ", ", *key_sep = ": ";
    if (seps && seps->kind == JV_LIST) {
        if (seps->n != 2 || seps->items[0]->kind != JV_STR || seps->items[1]->kind != JV_STR) {
            tt_jrender_error(r, at, "tojson separators must be two strings");
            return NULL;
        }
        item_sep = seps->items[0]->s;
        key_sep = seps->items[1]->s;
    }
    tt_jbuf b = {0};
    if (!tt_jv_json_into(&b, v, indent, item_sep, key_sep, sk && tt_jv_truthy(sk), 0)) {
        free(b.p);
        if (v->kind == JV_UNDEF) return tt_jinja_undefined_error(r, at, v);
        tt_jrender_error(r, at, "Object of type %s is not JSON serializable", tt_jinja_type_name(v));
        return NULL;
    }
    return buf_str(r, &b);
}

static tt_jv *indent_filter(tt_jrender *r, tt_jv *s, const tt_jargs *args) {
    tt_jv *w = tt_jargs_get(args, 0, "width"), *first = tt_jargs_get(args, 1, "first"),
          *blank = tt_jargs_get(args, 2, "blank");
    tt_jbuf ind = {0};
    if (w && w->kind == JV_STR) tt_jbuf_put(&ind, w->s, w->n);
    else
        for (int64_t i = 0; i < to_int_or(w, 4) && i < 1024; i++) tt_jbuf_put(&ind, " ", 1);
    /* jinja2: s + "\n" split into lines; the first line unindented unless first=True; empty
     * lines stay empty unless blank=True */
    tt_jbuf b = {0};
    size_t i = 0, line = 0;
    while (i <= s->n) { /* every '\n'-separated segment, the empty last one included */
        size_t j = i;
        while (j < s->n && s->s[j] != '\n') j++;
        if (line > 0) tt_jbuf_put(&b, "\n", 1);
        bool empty = j == i;
        if (line == 0 ? first && tt_jv_truthy(first) : !empty || (blank && tt_jv_truthy(blank)))
            tt_jbuf_put(&b, ind.p ? ind.p : "", ind.n);
        tt_jbuf_put(&b, s->s + i, j - i);
        line++;
        i = j + 1;
    }
    free(ind.p);
    return buf_str(r, &b);
}

/* A filter: the value (a string for the string filters), its arguments; NULL after an error reported. */
typedef tt_jv *(*filter_fn)(tt_jrender *r, const tt_jnode *at, const char *name, tt_jv *v, const tt_jargs *args);
typedef struct filter_entry {
    const char *name;
    filter_fn apply;
} filter_entry;

static tt_jv *filter_default(tt_jrender *r, const tt_jnode *at, const char *name, tt_jv *v, const tt_jargs *args) {
    tt_jv *dv = tt_jargs_get(args, 0, "default_value"), *bo = tt_jargs_get(args, 1, "boolean");
    bool use = v->kind == JV_UNDEF || (bo && tt_jv_truthy(bo) && !tt_jv_truthy(v));
    return use ? (dv ? dv : str_of(r, "", 0)) : v;
}

static tt_jv *filter_safe(tt_jrender *r, const tt_jnode *at, const char *name, tt_jv *v, const tt_jargs *args) {
    return v;
}

static tt_jv *filter_string(tt_jrender *r, const tt_jnode *at, const char *name, tt_jv *v, const tt_jargs *args) {
    return tt_jinja_to_str(r, v);
}

static tt_jv *filter_length(tt_jrender *r, const tt_jnode *at, const char *name, tt_jv *v, const tt_jargs *args) {
    tt_jarena *a = &r->arena;
    if (v->kind == JV_UNDEF) return tt_jv_int(a, 0);
    if (v->kind == JV_STR) return tt_jv_int(a, (int64_t)tt_jinja_utf8_len(v->s, v->n));
    if (v->kind == JV_LIST || v->kind == JV_DICT) return tt_jv_int(a, (int64_t)v->n);
    tt_jrender_error(r, at, "object of type '%s' has no len()", tt_jinja_type_name(v));
    return NULL;
}

static tt_jv *filter_tojson(tt_jrender *r, const tt_jnode *at, const char *name, tt_jv *v, const tt_jargs *args) {
    return tojson(r, at, v, args);
}

static tt_jv *filter_list(tt_jrender *r, const tt_jnode *at, const char *name, tt_jv *v, const tt_jargs *args) {
    tt_jv *l = tt_jinja_iter_list(r, at, v);
    return l ? copy_list(r, l) : NULL;
}

static tt_jv *filter_first(tt_jrender *r, const tt_jnode *at, const char *name, tt_jv *v, const tt_jargs *args) {
    tt_jarena *a = &r->arena;
    tt_jv *l = tt_jinja_iter_list(r, at, v);
    if (!l) return NULL;
    if (!l->n) return tt_jv_undef(a, "No first item, sequence was empty.");
    return name[0] == 'f' ? l->items[0] : l->items[l->n - 1];
}

static tt_jv *filter_int(tt_jrender *r, const tt_jnode *at, const char *name, tt_jv *v, const tt_jargs *args) {
    tt_jarena *a = &r->arena;
    int64_t dflt = to_int_or(tt_jargs_get(args, 0, "default"), 0);
    if (v->kind == JV_INT || v->kind == JV_BOOL) return tt_jv_int(a, v->i);
    if (v->kind == JV_FLOAT) return tt_jv_int(a, isfinite(v->f) && fabs(v->f) < 9.2e18 ? (int64_t)v->f : dflt);
    if (v->kind == JV_STR) {
        char *end;
        tt_jv *s = strip(r, v, NULL, true, true);
        long long x = strtoll(s->s, &end, 10);
        if (s->n && *end == 0) return tt_jv_int(a, x);
        double f = strtod(s->s, &end);
        if (s->n && *end == 0 && isfinite(f) && fabs(f) < 9.2e18) return tt_jv_int(a, (int64_t)f);
    }
    return tt_jv_int(a, dflt);
}

static tt_jv *filter_float(tt_jrender *r, const tt_jnode *at, const char *name, tt_jv *v, const tt_jargs *args) {
    tt_jarena *a = &r->arena;
    tt_jv *d = tt_jargs_get(args, 0, "default");
    if (v->kind == JV_INT || v->kind == JV_BOOL) return tt_jv_float(a, (double)v->i);
    if (v->kind == JV_FLOAT) return v;
    if (v->kind == JV_STR) {
        char *end;
        tt_jv *s = strip(r, v, NULL, true, true);
        double f = strtod(s->s, &end);
        if (s->n && *end == 0) return tt_jv_float(a, f);
    }
    return d ? d : tt_jv_float(a, 0.0);
}

static tt_jv *filter_abs(tt_jrender *r, const tt_jnode *at, const char *name, tt_jv *v, const tt_jargs *args) {
    tt_jarena *a = &r->arena;
    if (v->kind == JV_INT || v->kind == JV_BOOL) {
        if (v->i == INT64_MIN) {
            tt_jrender_error(r, at, "integer overflow in abs");
            return NULL;
        }
        return tt_jv_int(a, v->i < 0 ? -v->i : v->i);
    }
    if (v->kind == JV_FLOAT) return tt_jv_float(a, fabs(v->f));
    tt_jrender_error(r, at, "bad operand type for abs(): '%s'", tt_jinja_type_name(v));
    return NULL;
}

static tt_jv *filter_round(tt_jrender *r, const tt_jnode *at, const char *name, tt_jv *v, const tt_jargs *args) {
    tt_jarena *a = &r->arena;
    int64_t prec = to_int_or(tt_jargs_get(args, 0, "precision"), 0);
    tt_jv *m = tt_jargs_get(args, 1, "method");
    if (v->kind != JV_INT && v->kind != JV_BOOL && v->kind != JV_FLOAT) {
        tt_jrender_error(r, at, "round needs a number, got '%s'", tt_jinja_type_name(v));
        return NULL;
    }
    double x = v->kind == JV_FLOAT ? v->f : (double)v->i, sc = pow(10.0, (double)(prec > 15    ? 15
                                                                                  : prec < -15 ? -15
                                                                                               : prec));
    const char *method = m && m->kind == JV_STR ? m->s : "common";
    double y = x * sc;
    if (!strcmp(method, "floor")) y = floor(y);
    else if (!strcmp(method, "ceil")) y = ceil(y);
    else if (prec >= 0 && prec <= 15) {
        /* Python's round() rounds the exact binary value (2.675 is 2.67499..., so 2.67);
         * glibc's printf does the same, ties to even */
        char tmp[400];
        snprintf(tmp, sizeof(tmp), "%.*f", (int)prec, x);
        return tt_jv_float(a, strtod(tmp, NULL));
    } else {
        y = nearbyint(y);
    }
    return tt_jv_float(a, y / sc);
}

static tt_jv *filter_items(tt_jrender *r, const tt_jnode *at, const char *name, tt_jv *v, const tt_jargs *args) {
    tt_jarena *a = &r->arena;
    if (v->kind == JV_UNDEF) return tt_jv_new(a, JV_LIST);
    if (v->kind != JV_DICT) {
        tt_jrender_error(r, at, "items needs a mapping, got '%s'", tt_jinja_type_name(v));
        return NULL;
    }
    return items_of(r, v);
}

static tt_jv *filter_dictsort(tt_jrender *r, const tt_jnode *at, const char *name, tt_jv *v, const tt_jargs *args) {
    tt_jarena *a = &r->arena;
    if (v->kind != JV_DICT) {
        tt_jrender_error(r, at, "dictsort needs a mapping");
        return NULL;
    }
    tt_jv *l = items_of(r, v);
    tt_jv **keys = tt_jarena_alloc(a, (l->n + 1) * sizeof(tt_jv *));
    for (size_t i = 0; i < l->n; i++) keys[i] = l->items[i]->items[0];
    sort_ctx c = {r, at, true, false};
    tt_jv **ti = tt_jarena_alloc(a, (l->n + 1) * sizeof(tt_jv *)),
          **tk = tt_jarena_alloc(a, (l->n + 1) * sizeof(tt_jv *));
    merge_sort(&c, l->items, keys, l->n, ti, tk);
    return c.failed ? NULL : l;
}

static tt_jv *filter_map(tt_jrender *r, const tt_jnode *at, const char *name, tt_jv *v, const tt_jargs *args) {
    tt_jarena *a = &r->arena;
    tt_jv *a0 = tt_jargs_get(args, 0, NULL);
    tt_jv *l = tt_jinja_iter_list(r, at, v);
    if (!l) return NULL;
    tt_jv *attr = tt_jargs_get(args, 99, "attribute"), *dflt = tt_jargs_get(args, 99, "default");
    tt_jv *out = tt_jv_new(a, JV_LIST);
    if (attr) {
        for (size_t i = 0; i < l->n; i++) {
            tt_jv *x = attr_path(r, l->items[i], attr);
            tt_jv_push(a, out, x->kind == JV_UNDEF && dflt ? dflt : x);
        }
        return out;
    }
    if (!a0 || a0->kind != JV_STR || !tt_jinja_is_filter(a0->s) || !strcmp(a0->s, "map")) {
        tt_jrender_error(r, at, "map needs attribute= or a filter name");
        return NULL;
    }
    tt_jargs fargs = {0};
    if (args->npos > 1) {
        fargs.pos = args->pos + 1;
        fargs.npos = args->npos - 1;
    }
    for (size_t i = 0; i < l->n; i++) {
        tt_jv *x = tt_jinja_filter(r, at, a0->s, l->items[i], &fargs);
        if (!x) return NULL;
        tt_jv_push(a, out, x);
    }
    return out;
}

static tt_jv *filter_select(tt_jrender *r, const tt_jnode *at, const char *name, tt_jv *v, const tt_jargs *args) {

    return select_filter(r, at, name, v, args);
}

static tt_jv *filter_unique(tt_jrender *r, const tt_jnode *at, const char *name, tt_jv *v, const tt_jargs *args) {
    tt_jarena *a = &r->arena;
    tt_jv *l = tt_jinja_iter_list(r, at, v);
    if (!l) return NULL;
    tt_jv *out = tt_jv_new(a, JV_LIST);
    for (size_t i = 0; i < l->n; i++) {
        bool seen = false;
        tt_jv *ki = fold_key(r, l->items[i], true);
        for (size_t j = 0; j < out->n && !seen; j++) seen = tt_jv_equal(fold_key(r, out->items[j], true), ki);
        if (!seen) tt_jv_push(a, out, l->items[i]);
    }
    return out;
}

static tt_jv *filter_sort(tt_jrender *r, const tt_jnode *at, const char *name, tt_jv *v, const tt_jargs *args) {
    tt_jarena *a = &r->arena;
    tt_jv *l = tt_jinja_iter_list(r, at, v);
    if (!l) return NULL;
    l = copy_list(r, l);
    tt_jv *rev = tt_jargs_get(args, 0, "reverse"), *cs = tt_jargs_get(args, 1, "case_sensitive"),
          *attr = tt_jargs_get(args, 2, "attribute");
    tt_jv **keys = tt_jarena_alloc(a, (l->n + 1) * sizeof(tt_jv *));
    for (size_t i = 0; i < l->n; i++) keys[i] = attr ? attr_path(r, l->items[i], attr) : l->items[i];
    sort_ctx c = {r, at, !(cs && tt_jv_truthy(cs)), false};
    tt_jv **ti = tt_jarena_alloc(a, (l->n + 1) * sizeof(tt_jv *)),
          **tk = tt_jarena_alloc(a, (l->n + 1) * sizeof(tt_jv *));
    bool reverse = rev && tt_jv_truthy(rev);
    if (reverse) /* Python's reverse sort keeps equal items in order: sort reversed, reverse back */
        for (size_t i = 0; i < l->n / 2; i++) {
            tt_jv *t = l->items[i];
            l->items[i] = l->items[l->n - 1 - i];
            l->items[l->n - 1 - i] = t;
            t = keys[i];
            keys[i] = keys[l->n - 1 - i];
            keys[l->n - 1 - i] = t;
        }
    merge_sort(&c, l->items, keys, l->n, ti, tk);
    if (reverse)
        for (size_t i = 0; i < l->n / 2; i++) {
            tt_jv *t = l->items[i];
            l->items[i] = l->items[l->n - 1 - i];
            l->items[l->n - 1 - i] = t;
        }
    return c.failed ? NULL : l;
}

static tt_jv *filter_reverse(tt_jrender *r, const tt_jnode *at, const char *name, tt_jv *v, const tt_jargs *args) {
    tt_jarena *a = &r->arena;
    tt_jv *l = tt_jinja_iter_list(r, at, v);
    if (!l) return NULL;
    tt_jv *out = tt_jv_new(a, JV_LIST);
    for (size_t i = l->n; i-- > 0;) tt_jv_push(a, out, l->items[i]);
    if (v->kind != JV_STR) return out;
    tt_jbuf b = {0};
    for (size_t i = 0; i < out->n; i++) tt_jbuf_put(&b, out->items[i]->s, out->items[i]->n);
    return buf_str(r, &b);
}

static tt_jv *filter_join(tt_jrender *r, const tt_jnode *at, const char *name, tt_jv *v, const tt_jargs *args) {
    tt_jv *l = tt_jinja_iter_list(r, at, v);
    if (!l) return NULL;
    tt_jv *sep = tt_jargs_get(args, 0, "d"), *attr = tt_jargs_get(args, 1, "attribute");
    tt_jbuf b = {0};
    for (size_t i = 0; i < l->n; i++) {
        if (i && sep) tt_jv_str_into(&b, sep);
        tt_jv_str_into(&b, attr ? attr_path(r, l->items[i], attr) : l->items[i]);
    }
    return buf_str(r, &b);
}

static tt_jv *filter_sum(tt_jrender *r, const tt_jnode *at, const char *name, tt_jv *v, const tt_jargs *args) {
    tt_jarena *a = &r->arena;
    tt_jv *l = tt_jinja_iter_list(r, at, v);
    if (!l) return NULL;
    tt_jv *attr = tt_jargs_get(args, 99, "attribute");
    if (name[0] == 's') {
        tt_jv *acc = tt_jargs_get(args, 99, "start");
        int64_t si = 0;
        double sf = 0;
        bool fl = acc && acc->kind == JV_FLOAT;
        if (acc) si = acc->i, sf = acc->f;
        for (size_t i = 0; i < l->n; i++) {
            tt_jv *x = attr ? attr_path(r, l->items[i], attr) : l->items[i];
            if (x->kind == JV_FLOAT) {
                if (!fl) sf = (double)si;
                fl = true;
                sf += x->f;
            } else if (x->kind == JV_INT || x->kind == JV_BOOL) {
                if (fl) sf += (double)x->i;
                else if (__builtin_add_overflow(si, x->i, &si)) {
                    tt_jrender_error(r, at, "integer overflow in sum");
                    return NULL;
                }
            } else {
                tt_jrender_error(r, at, "sum needs numbers, got '%s'", tt_jinja_type_name(x));
                return NULL;
            }
        }
        return fl ? tt_jv_float(a, sf) : tt_jv_int(a, si);
    }
    if (!l->n) return tt_jv_undef(a, "No aggregated item, sequence was empty.");
    tt_jv *best = l->items[0];
    for (size_t i = 1; i < l->n; i++) {
        tt_jv *x = l->items[i];
        bool lt;
        tt_jv *kx = fold_key(r, attr ? attr_path(r, x, attr) : x, true),
              *kb = fold_key(r, attr ? attr_path(r, best, attr) : best, true);
        if (!tt_jinja_less(r, at, kx, kb, &lt)) return NULL;
        if (name[1] == 'i' ? lt : (!lt && !tt_jv_equal(kx, kb))) best = x;
    }
    return best;
}

static tt_jv *filter_batch(tt_jrender *r, const tt_jnode *at, const char *name, tt_jv *v, const tt_jargs *args) {
    tt_jarena *a = &r->arena;
    tt_jv *a0 = tt_jargs_get(args, 0, NULL);
    int64_t size = to_int_or(a0, 0);
    if (size <= 0) {
        tt_jrender_error(r, at, "batch needs a positive size");
        return NULL;
    }
    tt_jv *fill = tt_jargs_get(args, 1, "fill_with");
    tt_jv *l = tt_jinja_iter_list(r, at, v);
    if (!l) return NULL;
    tt_jv *out = tt_jv_new(a, JV_LIST), *cur = NULL;
    for (size_t i = 0; i < l->n && !a->over; i++) {
        if (!cur || (int64_t)cur->n == size) {
            cur = tt_jv_new(a, JV_LIST);
            tt_jv_push(a, out, cur);
        }
        tt_jv_push(a, cur, l->items[i]);
    }
    /* the fill grows one list to the batch size in this one call: the memory bound is checked per item */
    while (fill && cur && (int64_t)cur->n < size && !a->over) tt_jv_push(a, cur, fill);
    if (a->over) {
        tt_jrender_error(r, at, "batch(%lld) needs more memory than a render may take", (long long)size);
        return NULL;
    }
    return out;
}

static tt_jv *filter_trim(tt_jrender *r, const tt_jnode *at, const char *name, tt_jv *s, const tt_jargs *args) {
    tt_jv *a0 = tt_jargs_get(args, 0, NULL);
    return strip(r, s, a0, true, true);
}

static tt_jv *filter_upper(tt_jrender *r, const tt_jnode *at, const char *name, tt_jv *s, const tt_jargs *args) {
    return map_case(r, s, TT_PY_UPPER);
}

static tt_jv *filter_lower(tt_jrender *r, const tt_jnode *at, const char *name, tt_jv *s, const tt_jargs *args) {
    return map_case(r, s, TT_PY_LOWER);
}

static tt_jv *filter_title(tt_jrender *r, const tt_jnode *at, const char *name, tt_jv *s, const tt_jargs *args) {
    return map_case(r, s, TT_PY_JINJA_TITLE);
}

static tt_jv *filter_capitalize(tt_jrender *r, const tt_jnode *at, const char *name, tt_jv *s, const tt_jargs *args) {
    return map_case(r, s, TT_PY_CAPITALIZE);
}

static tt_jv *filter_replace(tt_jrender *r, const tt_jnode *at, const char *name, tt_jv *s, const tt_jargs *args) {
    tt_jv *o = tt_jargs_get(args, 0, "old"), *nw = tt_jargs_get(args, 1, "new"), *c = tt_jargs_get(args, 2, "count");
    if (!o || !nw) {
        tt_jrender_error(r, at, "replace needs old and new strings");
        return NULL;
    }
    return replace(r, s, tt_jinja_to_str(r, o), tt_jinja_to_str(r, nw), to_int_or(c, -1));
}

static tt_jv *filter_escape(tt_jrender *r, const tt_jnode *at, const char *name, tt_jv *s, const tt_jargs *args) {
    tt_jbuf b = {0};
    for (size_t i = 0; i < s->n; i++) {
        switch (s->s[i]) {
        case '&': tt_jbuf_puts(&b, "&amp;"); break;
        case '<': tt_jbuf_puts(&b, "&lt;"); break;
        case '>': tt_jbuf_puts(&b, "&gt;"); break;
        case '"': tt_jbuf_puts(&b, "&#34;"); break;
        case '\'': tt_jbuf_puts(&b, "&#39;"); break;
        default: tt_jbuf_put(&b, s->s + i, 1);
        }
    }
    return buf_str(r, &b);
}

static tt_jv *filter_indent(tt_jrender *r, const tt_jnode *at, const char *name, tt_jv *s, const tt_jargs *args) {
    return indent_filter(r, s, args);
}

static tt_jv *filter_wordcount(tt_jrender *r, const tt_jnode *at, const char *name, tt_jv *s, const tt_jargs *args) {
    tt_jarena *a = &r->arena;
    int64_t words = 0;
    bool in = false;
    for (size_t i = 0; i < s->n; i++) {
        unsigned char c = (unsigned char)s->s[i];
        bool w = isalnum(c) || c == '_' || c >= 0x80;
        if (w && !in) words++;
        in = w;
    }
    return tt_jv_int(a, words);
}

/* Filters of any value, by name. */
static const filter_entry value_filters[] = {
    {"default", filter_default},   {"d", filter_default},     {"safe", filter_safe},     {"string", filter_string},
    {"length", filter_length},     {"count", filter_length},  {"tojson", filter_tojson}, {"list", filter_list},
    {"first", filter_first},       {"last", filter_first},    {"int", filter_int},       {"float", filter_float},
    {"abs", filter_abs},           {"round", filter_round},   {"items", filter_items},   {"dictsort", filter_dictsort},
    {"map", filter_map},           {"select", filter_select}, {"reject", filter_select}, {"selectattr", filter_select},
    {"rejectattr", filter_select}, {"unique", filter_unique}, {"sort", filter_sort},     {"reverse", filter_reverse},
    {"join", filter_join},         {"sum", filter_sum},       {"max", filter_sum},       {"min", filter_sum},
    {"batch", filter_batch},
};

/* Filters of the value as a string (str() first, as jinja2), by name. */
static const filter_entry string_filters[] = {
    {"trim", filter_trim},
    {"upper", filter_upper},
    {"lower", filter_lower},
    {"title", filter_title},
    {"capitalize", filter_capitalize},
    {"replace", filter_replace},
    {"escape", filter_escape},
    {"e", filter_escape},
    {"indent", filter_indent},
    {"wordcount", filter_wordcount},
};

static filter_fn find_filter(const filter_entry *table, size_t count, const char *name) {
    for (size_t i = 0; i < count; i++)
        if (!strcmp(table[i].name, name)) return table[i].apply;
    return NULL;
}

tt_jv *tt_jinja_filter(tt_jrender *r, const tt_jnode *at, const char *name, tt_jv *v, const tt_jargs *args) {
    filter_fn apply = find_filter(value_filters, sizeof value_filters / sizeof value_filters[0], name);
    if (apply) return apply(r, at, name, v, args);
    /* the rest work on strings; jinja2 converts the value with str() first */
    if (v->kind == JV_UNDEF && strcmp(name, "wordcount") != 0 && strcmp(name, "trim") != 0) {
        if (!strcmp(name, "escape") || !strcmp(name, "e")) return str_of(r, "", 0);
    }
    tt_jv *s = tt_jinja_to_str(r, v);
    apply = find_filter(string_filters, sizeof string_filters / sizeof string_filters[0], name);
    if (apply) return apply(r, at, name, s, args);
    (void)need_str;
    tt_jrender_error(r, at, "no filter named '%s'", name);
    return NULL;
}
