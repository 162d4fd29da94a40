/* The evaluator: walks the syntax tree with jinja2's semantics (scopes, Undefined, Python
 * operators) and writes the output, recording {% generation %} spans. Every render is bounded:
 * output bytes, memory, loop iterations and macro call depth, each with its own message. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/check.h"
#include "data/jinja_eval_internal.h"

#define TT_JINJA_MAX_OUTPUT ((size_t)64 << 20)
#define TT_JINJA_MAX_MEMORY ((size_t)256 << 20)
#define TT_JINJA_MAX_ITERATIONS ((uint64_t)10000000)
#define TT_JINJA_MAX_CALL_DEPTH 100

enum { FUNC_RAISE = 1, FUNC_STRFTIME, FUNC_NAMESPACE, FUNC_RANGE, FUNC_DICT };

void tt_jrender_error(tt_jrender *r, const tt_jnode *at, const char *fmt, ...) {
    if (r->failed) return;
    r->failed = true;
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (r->err && r->err_size) {
        if (at) snprintf(r->err, r->err_size, "%s:%d: %s", r->origin, at->line, msg);
        else snprintf(r->err, r->err_size, "%s", msg);
    }
}

tt_jv *tt_jinja_undefined_error(tt_jrender *r, const tt_jnode *at, const tt_jv *v) {
    tt_jrender_error(r, at, "%s", v->s ? v->s : "value is undefined");
    return NULL;
}

tt_jv *tt_jargs_get(const tt_jargs *a, size_t index, const char *name) {
    if (index < a->npos) return a->pos[index];
    for (size_t i = 0; name && i < a->nkw; i++)
        if (!strcmp(a->kwn[i], name)) return a->kwv[i];
    return NULL;
}

const char *tt_jinja_type_name(const tt_jv *v) {
    switch (v->kind) {
    case JV_UNDEF: return "Undefined";
    case JV_NONE: return "NoneType";
    case JV_BOOL: return "bool";
    case JV_INT: return "int";
    case JV_FLOAT: return "float";
    case JV_STR: return "str";
    case JV_LIST: return v->is_tuple ? "tuple" : "list";
    case JV_DICT: return "dict";
    case JV_NS: return "Namespace";
    default: return "function";
    }
}

size_t tt_jinja_utf8_len(const char *s, size_t n) {
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        if (((unsigned char)s[i] & 0xC0) != 0x80) c++;
    return c;
}

tt_jv *tt_jinja_to_str(tt_jrender *r, const tt_jv *v) {
    if (v->kind == JV_STR) return (tt_jv *)v;
    tt_jbuf b = {0};
    tt_jv_str_into(&b, v);
    tt_jv *s = tt_jv_str(&r->arena, b.p ? b.p : "", b.n);
    free(b.p);
    return s;
}

tt_jv *tt_jinja_iter_list(tt_jrender *r, const tt_jnode *at, tt_jv *v) {
    tt_jarena *a = &r->arena;
    switch (v->kind) {
    case JV_UNDEF: return tt_jv_new(a, JV_LIST); /* jinja2's Undefined iterates as empty */
    case JV_LIST: return v;
    case JV_DICT: {
        tt_jv *l = tt_jv_new(a, JV_LIST);
        for (size_t i = 0; i < v->n; i++) tt_jv_push(a, l, v->keys[i]);
        return l;
    }
    case JV_STR: {
        tt_jv *l = tt_jv_new(a, JV_LIST);
        for (size_t i = 0; i < v->n;) {
            size_t j = i + 1;
            while (j < v->n && ((unsigned char)v->s[j] & 0xC0) == 0x80) j++;
            tt_jv_push(a, l, tt_jv_str(a, v->s + i, j - i));
            i = j;
        }
        return l;
    }
    default: tt_jrender_error(r, at, "'%s' object is not iterable", tt_jinja_type_name(v)); return NULL;
    }
}

static bool is_num(const tt_jv *v) { return v->kind == JV_BOOL || v->kind == JV_INT || v->kind == JV_FLOAT; }
static double num_f(const tt_jv *v) { return v->kind == JV_FLOAT ? v->f : (double)v->i; }

bool tt_jinja_less(tt_jrender *r, const tt_jnode *at, const tt_jv *x, const tt_jv *y, bool *less) {
    if (is_num(x) && is_num(y)) {
        if (x->kind != JV_FLOAT && y->kind != JV_FLOAT) *less = x->i < y->i;
        else *less = num_f(x) < num_f(y);
        return true;
    }
    if (x->kind == JV_STR && y->kind == JV_STR) {
        size_t n = x->n < y->n ? x->n : y->n;
        int c = n ? memcmp(x->s, y->s, n) : 0;
        *less = c < 0 || (c == 0 && x->n < y->n);
        return true;
    }
    if (x->kind == JV_LIST && y->kind == JV_LIST) {
        for (size_t i = 0; i < x->n && i < y->n; i++) {
            if (tt_jv_equal(x->items[i], y->items[i])) continue;
            return tt_jinja_less(r, at, x->items[i], y->items[i], less);
        }
        *less = x->n < y->n;
        return true;
    }
    if (x->kind == JV_UNDEF) return tt_jinja_undefined_error(r, at, x) != NULL;
    if (y->kind == JV_UNDEF) return tt_jinja_undefined_error(r, at, y) != NULL;
    tt_jrender_error(r, at, "'<' not supported between instances of '%s' and '%s'", tt_jinja_type_name(x),
                     tt_jinja_type_name(y));
    return false;
}

/* ---- scopes ---- */

static void push_frame(tt_jrender *r) {
    if (r->nframes == r->capframes) {
        r->capframes = r->capframes ? r->capframes * 2 : 16;
        r->frames = tt_xrealloc(r->frames, tt_mul_size(r->capframes, sizeof(tt_jv *), "jinja scopes"), "jinja scopes");
    }
    r->frames[r->nframes++] = tt_jv_new(&r->arena, JV_DICT);
}

static tt_jv *lookup(tt_jrender *r, const char *name, size_t n) {
    for (size_t i = r->nframes; i-- > 0;) {
        tt_jv *v = tt_jv_dict_get(r->frames[i], name, n);
        if (v) return v;
    }
    return NULL;
}

static void assign(tt_jrender *r, const char *name, tt_jv *v) {
    tt_jv_dict_set_name(&r->arena, r->frames[r->nframes - 1], name, strlen(name), v);
}

static tt_jv *undef_msg(tt_jrender *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static tt_jv *undef_msg(tt_jrender *r, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    tt_jv *s = tt_jv_str(&r->arena, msg, strlen(msg));
    return tt_jv_undef(&r->arena, s->s);
}

/* ---- expressions ---- */

static tt_jv *eval(tt_jrender *r, const tt_jnode *n);
static void render_body(tt_jrender *r, const tt_jnode *body);

static bool eval_args(tt_jrender *r, const tt_jnode *n, tt_jargs *a) {
    memset(a, 0, sizeof(*a));
    if (!n->nkids) return true;
    a->pos = tt_jarena_alloc(&r->arena, n->nkids * sizeof(tt_jv *));
    a->kwv = tt_jarena_alloc(&r->arena, n->nkids * sizeof(tt_jv *));
    a->kwn = tt_jarena_alloc(&r->arena, n->nkids * sizeof(char *));
    for (size_t i = 0; i < n->nkids; i++) {
        const tt_jnode *k = n->kids[i];
        if (k->kind == JN_KWARG) {
            tt_jv *v = eval(r, k->a);
            if (!v) return false;
            a->kwn[a->nkw] = k->str;
            a->kwv[a->nkw++] = v;
        } else {
            tt_jv *v = eval(r, k);
            if (!v) return false;
            a->pos[a->npos++] = v;
        }
    }
    return true;
}

static tt_jv *get_attr(tt_jrender *r, const tt_jnode *at, tt_jv *obj, const char *name, size_t n) {
    if (obj->kind == JV_UNDEF) return tt_jinja_undefined_error(r, at, obj);
    if (obj->kind == JV_DICT || obj->kind == JV_NS) {
        tt_jv *v = tt_jv_dict_get(obj, name, n);
        if (v) return v;
        return undef_msg(r, "'%s' has no attribute '%.*s'", obj->kind == JV_DICT ? "dict object" : "Namespace", (int)n,
                         name);
    }
    return undef_msg(r, "'%s object' has no attribute '%.*s'", tt_jinja_type_name(obj), (int)n, name);
}

/* Byte offset of code point index ci in s (clamped to n). */
static size_t cp_offset(const char *s, size_t n, int64_t ci) {
    size_t i = 0;
    for (int64_t c = 0; c < ci && i < n; c++) {
        i++;
        while (i < n && ((unsigned char)s[i] & 0xC0) == 0x80) i++;
    }
    return i;
}

static tt_jv *get_item(tt_jrender *r, const tt_jnode *at, tt_jv *obj, tt_jv *key) {
    if (obj->kind == JV_UNDEF) return tt_jinja_undefined_error(r, at, obj);
    if (key->kind == JV_UNDEF) return tt_jinja_undefined_error(r, at, key);
    if (obj->kind == JV_DICT || obj->kind == JV_NS) {
        for (size_t i = 0; i < obj->n; i++)
            if (tt_jv_equal(obj->keys[i], key)) return obj->items[i];
        if (key->kind == JV_STR) return undef_msg(r, "'dict object' has no attribute '%.*s'", (int)key->n, key->s);
        tt_jbuf b = {0};
        tt_jv_repr_into(&b, key);
        tt_jv *u = undef_msg(r, "'dict object' has no attribute %s", b.p ? b.p : "");
        free(b.p);
        return u;
    }
    if ((obj->kind == JV_LIST || obj->kind == JV_STR) && (key->kind == JV_INT || key->kind == JV_BOOL)) {
        int64_t len = obj->kind == JV_LIST ? (int64_t)obj->n : (int64_t)tt_jinja_utf8_len(obj->s, obj->n);
        int64_t i = key->i < 0 ? key->i + len : key->i;
        if (i < 0 || i >= len)
            return undef_msg(r, "%s object has no element %lld", tt_jinja_type_name(obj), (long long)key->i);
        if (obj->kind == JV_LIST) return obj->items[i];
        size_t a = cp_offset(obj->s, obj->n, i), b = cp_offset(obj->s, obj->n, i + 1);
        return tt_jv_str(&r->arena, obj->s + a, b - a);
    }
    if (key->kind == JV_STR) return get_attr(r, at, obj, key->s, key->n);
    return undef_msg(r, "'%s object' has no attribute", tt_jinja_type_name(obj));
}

static bool slice_bound(tt_jrender *r, const tt_jnode *n, tt_jv **out) {
    *out = NULL;
    if (!n) return true;
    tt_jv *v = eval(r, n);
    if (!v) return false;
    if (v->kind == JV_NONE) return true;
    if (v->kind != JV_INT && v->kind != JV_BOOL) {
        tt_jrender_error(r, n, "slice indices must be integers or None");
        return false;
    }
    *out = v;
    return true;
}

static tt_jv *eval_slice(tt_jrender *r, const tt_jnode *n) {
    tt_jv *obj = eval(r, n->a);
    if (!obj) return NULL;
    tt_jv *lo, *hi, *st;
    if (!slice_bound(r, n->b, &lo) || !slice_bound(r, n->c, &hi) || !slice_bound(r, n->d, &st)) return NULL;
    if (obj->kind == JV_UNDEF) return tt_jinja_undefined_error(r, n, obj);
    if (obj->kind != JV_LIST && obj->kind != JV_STR) {
        tt_jrender_error(r, n, "'%s' object is not subscriptable", tt_jinja_type_name(obj));
        return NULL;
    }
    tt_jv *items = obj->kind == JV_LIST ? obj : tt_jinja_iter_list(r, n, obj);
    int64_t len = (int64_t)items->n, step = st ? st->i : 1;
    if (step == 0) {
        tt_jrender_error(r, n, "slice step cannot be zero");
        return NULL;
    }
    /* Python's slice.indices */
    int64_t start, stop;
    if (step > 0) {
        start = lo ? (lo->i < 0 ? (lo->i + len < 0 ? 0 : lo->i + len) : (lo->i > len ? len : lo->i)) : 0;
        stop = hi ? (hi->i < 0 ? (hi->i + len < 0 ? 0 : hi->i + len) : (hi->i > len ? len : hi->i)) : len;
    } else {
        start = lo ? (lo->i < 0 ? (lo->i + len < 0 ? -1 : lo->i + len) : (lo->i >= len ? len - 1 : lo->i)) : len - 1;
        stop = hi ? (hi->i < 0 ? (hi->i + len < 0 ? -1 : hi->i + len) : (hi->i >= len ? len - 1 : hi->i)) : -1;
    }
    tt_jv *res = tt_jv_new(&r->arena, JV_LIST);
    res->is_tuple = obj->is_tuple;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) tt_jv_push(&r->arena, res, items->items[i]);
    if (obj->kind == JV_LIST) return res;
    tt_jbuf b = {0};
    for (size_t i = 0; i < res->n; i++) tt_jbuf_put(&b, res->items[i]->s, res->items[i]->n);
    tt_jv *s = tt_jv_str(&r->arena, b.p ? b.p : "", b.n);
    free(b.p);
    return s;
}

static tt_jv *arith(tt_jrender *r, const tt_jnode *n, const char *op, tt_jv *x, tt_jv *y) {
    tt_jarena *a = &r->arena;
    if (x->kind == JV_UNDEF) return tt_jinja_undefined_error(r, n, x);
    if (y->kind == JV_UNDEF) return tt_jinja_undefined_error(r, n, y);
    if (is_num(x) && is_num(y)) {
        bool ints = x->kind != JV_FLOAT && y->kind != JV_FLOAT;
        int64_t res;
        switch (op[0]) {
        case '+':
            if (ints) {
                if (__builtin_add_overflow(x->i, y->i, &res)) goto overflow;
                return tt_jv_int(a, res);
            }
            return tt_jv_float(a, num_f(x) + num_f(y));
        case '-':
            if (ints) {
                if (__builtin_sub_overflow(x->i, y->i, &res)) goto overflow;
                return tt_jv_int(a, res);
            }
            return tt_jv_float(a, num_f(x) - num_f(y));
        case '*':
            if (op[1] == '*') {
                if (ints && y->i >= 0) {
                    int64_t acc = 1;
                    for (int64_t k = 0; k < y->i; k++) {
                        if (__builtin_mul_overflow(acc, x->i, &acc)) goto overflow;
                        if (acc == 0 || acc == 1) break;
                    }
                    if (acc == 1 && x->i == -1 && (y->i & 1)) acc = -1;
                    return tt_jv_int(a, acc);
                }
                return tt_jv_float(a, pow(num_f(x), num_f(y)));
            }
            if (ints) {
                if (__builtin_mul_overflow(x->i, y->i, &res)) goto overflow;
                return tt_jv_int(a, res);
            }
            return tt_jv_float(a, num_f(x) * num_f(y));
        case '/':
        case '%':
            if (num_f(y) == 0.0) {
                tt_jrender_error(r, n, op[0] == '%' ? "integer modulo by zero" : "division by zero");
                return NULL;
            }
            if (op[0] == '/' && op[1] == 0) return tt_jv_float(a, num_f(x) / num_f(y));
            if (ints) {
                if (x->i == INT64_MIN && y->i == -1) goto overflow;
                int64_t q = x->i / y->i, m = x->i % y->i;
                if (m != 0 && ((m < 0) != (y->i < 0))) {
                    q--;
                    m += y->i;
                }
                return tt_jv_int(a, op[0] == '%' ? m : q);
            } else {
                double fx = num_f(x), fy = num_f(y);
                double m = fmod(fx, fy);
                if (m != 0 && ((m < 0) != (fy < 0))) m += fy;
                if (op[0] == '%') return tt_jv_float(a, m);
                return tt_jv_float(a, floor(fx / fy));
            }
        default: break;
        }
    }
    if (op[0] == '+' && x->kind == JV_STR && y->kind == JV_STR) {
        tt_jv *s = tt_jv_str(a, "", 0);
        char *c = tt_jarena_alloc(a, x->n + y->n + 1);
        memcpy(c, x->s, x->n);
        memcpy(c + x->n, y->s, y->n);
        s->s = c;
        s->n = x->n + y->n;
        return s;
    }
    if (op[0] == '+' && x->kind == JV_LIST && y->kind == JV_LIST) {
        tt_jv *l = tt_jv_new(a, JV_LIST);
        l->is_tuple = x->is_tuple;
        for (size_t i = 0; i < x->n; i++) tt_jv_push(a, l, x->items[i]);
        for (size_t i = 0; i < y->n; i++) tt_jv_push(a, l, y->items[i]);
        return l;
    }
    if (op[0] == '*' && op[1] == 0 && (x->kind == JV_STR || x->kind == JV_LIST) && y->kind == JV_INT) {
        if (y->i > 0 && (uint64_t)y->i * (x->n + 1) > TT_JINJA_MAX_OUTPUT) {
            tt_jrender_error(r, n, "repetition result is too large");
            return NULL;
        }
        tt_jv *l = tt_jv_new(a, JV_LIST);
        tt_jbuf b = {0};
        for (int64_t k = 0; k < y->i; k++) {
            if (x->kind == JV_STR) tt_jbuf_put(&b, x->s, x->n);
            else
                for (size_t i = 0; i < x->n; i++) tt_jv_push(a, l, x->items[i]);
        }
        if (x->kind == JV_LIST) return l;
        tt_jv *s = tt_jv_str(a, b.p ? b.p : "", b.n);
        free(b.p);
        return s;
    }
    if (x->kind == JV_STR && y->kind != JV_STR && op[0] == '+') {
        tt_jrender_error(r, n, "can only concatenate str (not \"%s\") to str", tt_jinja_type_name(y));
        return NULL;
    }
    if (x->kind == JV_LIST && y->kind != JV_LIST && op[0] == '+') {
        tt_jrender_error(r, n, "can only concatenate list (not \"%s\") to list", tt_jinja_type_name(y));
        return NULL;
    }
    tt_jrender_error(r, n, "unsupported operand type(s) for %s: '%s' and '%s'", op, tt_jinja_type_name(x),
                     tt_jinja_type_name(y));
    return NULL;
overflow:
    tt_jrender_error(r, n, "integer overflow in '%s'", op);
    return NULL;
}

static int contains(tt_jrender *r, const tt_jnode *n, tt_jv *needle, tt_jv *hay) {
    if (hay->kind == JV_UNDEF) return tt_jinja_undefined_error(r, n, hay) ? 0 : -1;
    if (hay->kind == JV_STR) {
        if (needle->kind != JV_STR) {
            tt_jrender_error(r, n, "'in <string>' requires string as left operand, not %s", tt_jinja_type_name(needle));
            return -1;
        }
        if (needle->n == 0) return 1;
        if (needle->n > hay->n) return 0;
        for (size_t i = 0; i + needle->n <= hay->n; i++)
            if (memcmp(hay->s + i, needle->s, needle->n) == 0) return 1;
        return 0;
    }
    if (hay->kind == JV_LIST) {
        for (size_t i = 0; i < hay->n; i++)
            if (tt_jv_equal(hay->items[i], needle)) return 1;
        return 0;
    }
    if (hay->kind == JV_DICT || hay->kind == JV_NS) {
        for (size_t i = 0; i < hay->n; i++)
            if (tt_jv_equal(hay->keys[i], needle)) return 1;
        return 0;
    }
    tt_jrender_error(r, n, "argument of type '%s' is not iterable", tt_jinja_type_name(hay));
    return -1;
}

static tt_jv *eval_binop(tt_jrender *r, const tt_jnode *n) {
    tt_jv *x = eval(r, n->a);
    if (!x) return NULL;
    tt_jv *y = eval(r, n->b);
    if (!y) return NULL;
    tt_jarena *a = &r->arena;
    const char *op = n->str;
    if (!strcmp(op, "==")) return tt_jv_bool(a, tt_jv_equal(x, y));
    if (!strcmp(op, "!=")) return tt_jv_bool(a, !tt_jv_equal(x, y));
    if (!strcmp(op, "in") || !strcmp(op, "notin")) {
        int c = contains(r, n, x, y);
        if (c < 0) return NULL;
        return tt_jv_bool(a, op[0] == 'i' ? c : !c);
    }
    if (op[0] == '<' || op[0] == '>') {
        bool lt;
        if (op[0] == '<' ? !tt_jinja_less(r, n, x, y, &lt) : !tt_jinja_less(r, n, y, x, &lt)) return NULL;
        if (op[1] == '=') lt = lt || tt_jv_equal(x, y);
        return tt_jv_bool(a, lt);
    }
    if (!strcmp(op, "~")) {
        tt_jbuf b = {0};
        tt_jv_str_into(&b, x);
        tt_jv_str_into(&b, y);
        tt_jv *s = tt_jv_str(a, b.p ? b.p : "", b.n);
        free(b.p);
        return s;
    }
    return arith(r, n, op, x, y);
}

static tt_jv *call_macro(tt_jrender *r, const tt_jnode *at, const tt_jnode *m, const tt_jargs *args) {
    if (r->call_depth >= TT_JINJA_MAX_CALL_DEPTH) {
        tt_jrender_error(r, at, "macro calls nested deeper than %d (runaway recursion?)", TT_JINJA_MAX_CALL_DEPTH);
        return NULL;
    }
    if (args->npos > m->nkids) {
        tt_jrender_error(r, at, "macro '%s' takes not more than %zu argument(s)", m->str, m->nkids);
        return NULL;
    }
    tt_jbuf saved = r->out;
    tt_jbuf local = {0};
    local.limit = TT_JINJA_MAX_OUTPUT;
    r->out = local;
    r->call_depth++;
    push_frame(r);
    for (size_t i = 0; i < m->nkids && !r->failed; i++) {
        const tt_jnode *prm = m->kids[i];
        tt_jv *v = tt_jargs_get(args, i, prm->str);
        if (!v && prm->a) v = eval(r, prm->a);
        if (!v && !r->failed) v = undef_msg(r, "'%s' is undefined", prm->str);
        if (v) assign(r, prm->str, v);
    }
    if (!r->failed) render_body(r, m->body);
    r->control = 0;
    r->nframes--;
    r->call_depth--;
    local = r->out;
    r->out = saved;
    if (local.over && !r->failed) tt_jrender_error(r, at, "output exceeds %zu bytes", TT_JINJA_MAX_OUTPUT);
    tt_jv *res = r->failed ? NULL : tt_jv_str(&r->arena, local.p ? local.p : "", local.n);
    free(local.p);
    return res;
}

static tt_jv *call_func(tt_jrender *r, const tt_jnode *n, tt_jv *fn, const tt_jargs *args) {
    tt_jarena *a = &r->arena;
    switch (fn->i) {
    case FUNC_RAISE: {
        tt_jv *m = tt_jargs_get(args, 0, "message");
        tt_jv *s = m ? tt_jinja_to_str(r, m) : tt_jv_str(a, "", 0);
        /* the template's own message, as transformers' TemplateError carries it */
        tt_jrender_error(r, NULL, "%.*s", (int)s->n, s->s);
        return NULL;
    }
    case FUNC_STRFTIME: {
        tt_jv *f = tt_jargs_get(args, 0, "format");
        if (!f || f->kind != JV_STR) {
            tt_jrender_error(r, n, "strftime_now() needs a format string");
            return NULL;
        }
        time_t now = time(NULL);
        struct tm tmv;
        localtime_r(&now, &tmv);
        char buf[512];
        size_t k = strftime(buf, sizeof(buf), f->s, &tmv);
        return tt_jv_str(a, buf, k);
    }
    case FUNC_NAMESPACE:
    case FUNC_DICT: {
        tt_jv *d = tt_jv_new(a, fn->i == FUNC_NAMESPACE ? JV_NS : JV_DICT);
        for (size_t i = 0; i < args->npos; i++) {
            if (args->pos[i]->kind != JV_DICT) {
                tt_jrender_error(r, n, "%s() takes keyword arguments or a dict",
                                 fn->i == FUNC_DICT ? "dict" : "namespace");
                return NULL;
            }
            for (size_t k = 0; k < args->pos[i]->n; k++)
                tt_jv_dict_set(a, d, args->pos[i]->keys[k], args->pos[i]->items[k]);
        }
        for (size_t i = 0; i < args->nkw; i++)
            tt_jv_dict_set(a, d, tt_jv_str(a, args->kwn[i], strlen(args->kwn[i])), args->kwv[i]);
        return d;
    }
    case FUNC_RANGE: {
        int64_t v[3] = {0, 0, 1};
        if (args->npos < 1 || args->npos > 3) {
            tt_jrender_error(r, n, "range() takes 1 to 3 integer arguments");
            return NULL;
        }
        for (size_t i = 0; i < args->npos; i++) {
            if (args->pos[i]->kind != JV_INT && args->pos[i]->kind != JV_BOOL) {
                tt_jrender_error(r, n, "range() takes integers, not '%s'", tt_jinja_type_name(args->pos[i]));
                return NULL;
            }
        }
        if (args->npos == 1) v[1] = args->pos[0]->i;
        else {
            v[0] = args->pos[0]->i;
            v[1] = args->pos[1]->i;
            if (args->npos == 3) v[2] = args->pos[2]->i;
        }
        if (v[2] == 0) {
            tt_jrender_error(r, n, "range() arg 3 must not be zero");
            return NULL;
        }
        tt_jv *l = tt_jv_new(a, JV_LIST);
        for (int64_t i = v[0]; v[2] > 0 ? i < v[1] : i > v[1]; i += v[2]) {
            if (l->n >= TT_JINJA_MAX_ITERATIONS) {
                tt_jrender_error(r, n, "range() is longer than %llu items",
                                 (unsigned long long)TT_JINJA_MAX_ITERATIONS);
                return NULL;
            }
            if (a->over) { /* checked per item: the list is built in this one call */
                tt_jrender_error(r, n, "render needs more than %zu bytes of memory (range() of %lld items)",
                                 TT_JINJA_MAX_MEMORY, (long long)l->n);
                return NULL;
            }
            tt_jv_push(a, l, tt_jv_int(a, i));
            if ((v[2] > 0 && i > INT64_MAX - v[2]) || (v[2] < 0 && i < INT64_MIN - v[2])) break;
        }
        return l;
    }
    }
    tt_jrender_error(r, n, "not callable");
    return NULL;
}

static tt_jv *eval_call(tt_jrender *r, const tt_jnode *n) {
    if (n->a->kind == JN_GETATTR) {
        tt_jv *obj = eval(r, n->a->a);
        if (!obj) return NULL;
        if (obj->kind == JV_UNDEF) return tt_jinja_undefined_error(r, n, obj);
        tt_jargs args;
        if (!eval_args(r, n, &args)) return NULL;
        bool handled = false;
        tt_jv *v = tt_jinja_method(r, n, obj, n->a->str, &args, &handled);
        if (handled || r->failed) return v;
        tt_jv *f = get_attr(r, n, obj, n->a->str, n->a->str_len);
        if (!f) return NULL;
        if (f->kind == JV_MACRO) return call_macro(r, n, f->macro, &args);
        if (f->kind == JV_FUNC) return call_func(r, n, f, &args);
        if (f->kind == JV_UNDEF) {
            tt_jrender_error(r, n, "'%s object' has no method '%s'", tt_jinja_type_name(obj), n->a->str);
            return NULL;
        }
        tt_jrender_error(r, n, "'%s' object is not callable", tt_jinja_type_name(f));
        return NULL;
    }
    tt_jv *f = eval(r, n->a);
    if (!f) return NULL;
    tt_jargs args;
    if (!eval_args(r, n, &args)) return NULL;
    if (f->kind == JV_MACRO) return call_macro(r, n, f->macro, &args);
    if (f->kind == JV_FUNC) return call_func(r, n, f, &args);
    if (f->kind == JV_UNDEF) return tt_jinja_undefined_error(r, n, f);
    tt_jrender_error(r, n, "'%s' object is not callable", tt_jinja_type_name(f));
    return NULL;
}

static tt_jv *eval(tt_jrender *r, const tt_jnode *n) {
    if (r->failed) return NULL;
    if (r->arena.over) {
        tt_jrender_error(r, n, "render needs more than %zu bytes of memory", TT_JINJA_MAX_MEMORY);
        return NULL;
    }
    tt_jarena *a = &r->arena;
    switch (n->kind) {
    case JN_CONST_STR: {
        tt_jv *v = tt_jv_new(a, JV_STR);
        v->s = n->str; /* the template outlives the render */
        v->n = n->str_len;
        return v;
    }
    case JN_CONST_INT: return tt_jv_int(a, n->ival);
    case JN_CONST_FLOAT: return tt_jv_float(a, n->fval);
    case JN_CONST_BOOL: return tt_jv_bool(a, n->ival != 0);
    case JN_CONST_NONE: return tt_jv_new(a, JV_NONE);
    case JN_NAME: {
        tt_jv *v = lookup(r, n->str, n->str_len);
        return v ? v : undef_msg(r, "'%s' is undefined", n->str);
    }
    case JN_LIST:
    case JN_TUPLE: {
        tt_jv *l = tt_jv_new(a, JV_LIST);
        l->is_tuple = n->kind == JN_TUPLE;
        for (size_t i = 0; i < n->nkids; i++) {
            tt_jv *v = eval(r, n->kids[i]);
            if (!v) return NULL;
            tt_jv_push(a, l, v);
        }
        return l;
    }
    case JN_DICT: {
        tt_jv *d = tt_jv_new(a, JV_DICT);
        for (size_t i = 0; i + 1 < n->nkids; i += 2) {
            tt_jv *k = eval(r, n->kids[i]);
            if (!k) return NULL;
            tt_jv *v = eval(r, n->kids[i + 1]);
            if (!v) return NULL;
            if (k->kind != JV_STR) {
                tt_jrender_error(r, n, "dict keys must be strings here, not '%s'", tt_jinja_type_name(k));
                return NULL;
            }
            tt_jv_dict_set(a, d, k, v);
        }
        return d;
    }
    case JN_GETATTR: {
        tt_jv *o = eval(r, n->a);
        return o ? get_attr(r, n, o, n->str, n->str_len) : NULL;
    }
    case JN_GETITEM: {
        tt_jv *o = eval(r, n->a);
        if (!o) return NULL;
        tt_jv *k = eval(r, n->b);
        return k ? get_item(r, n, o, k) : NULL;
    }
    case JN_SLICE: return eval_slice(r, n);
    case JN_CALL: return eval_call(r, n);
    case JN_FILTER: {
        tt_jv *v = eval(r, n->a);
        if (!v) return NULL;
        tt_jargs args;
        if (!eval_args(r, n, &args)) return NULL;
        return tt_jinja_filter(r, n, n->str, v, &args);
    }
    case JN_TEST: {
        tt_jv *v = eval(r, n->a);
        if (!v) return NULL;
        tt_jargs args;
        if (!eval_args(r, n, &args)) return NULL;
        int t = tt_jinja_test(r, n, n->str, v, &args);
        if (t < 0) return NULL;
        return tt_jv_bool(a, n->ival ? !t : t);
    }
    case JN_BINOP: return eval_binop(r, n);
    case JN_UNARY: {
        tt_jv *v = eval(r, n->a);
        if (!v) return NULL;
        if (v->kind == JV_UNDEF) return tt_jinja_undefined_error(r, n, v);
        if (!is_num(v)) {
            tt_jrender_error(r, n, "bad operand type for unary %s: '%s'", n->str, tt_jinja_type_name(v));
            return NULL;
        }
        if (n->str[0] == '+') return v->kind == JV_BOOL ? tt_jv_int(a, v->i) : v;
        if (v->kind == JV_FLOAT) return tt_jv_float(a, -v->f);
        if (v->i == INT64_MIN) {
            tt_jrender_error(r, n, "integer overflow in unary -");
            return NULL;
        }
        return tt_jv_int(a, -v->i);
    }
    case JN_NOT: {
        tt_jv *v = eval(r, n->a);
        return v ? tt_jv_bool(a, !tt_jv_truthy(v)) : NULL;
    }
    case JN_AND:
    case JN_OR: {
        tt_jv *x = eval(r, n->a);
        if (!x) return NULL;
        bool t = tt_jv_truthy(x);
        if (n->kind == JN_AND ? !t : t) return x; /* Python returns the deciding operand */
        return eval(r, n->b);
    }
    case JN_COND: {
        tt_jv *c = eval(r, n->b);
        if (!c) return NULL;
        if (tt_jv_truthy(c)) return eval(r, n->a);
        if (n->c) return eval(r, n->c);
        return undef_msg(r, "the inline if-expression evaluated to false and no else section was defined.");
    }
    default: tt_jrender_error(r, n, "internal: not an expression"); return NULL;
    }
}

/* ---- statements ---- */

static void output_value(tt_jrender *r, const tt_jv *v) { tt_jv_str_into(&r->out, v); }

static bool assign_target(tt_jrender *r, const tt_jnode *t, tt_jv *v) {
    if (t->kind == JN_NAME) {
        assign(r, t->str, v);
        return true;
    }
    /* ns.attr = v */
    tt_jv *ns = lookup(r, t->a->str, t->a->str_len);
    if (!ns || ns->kind != JV_NS) {
        tt_jrender_error(r, t, "cannot assign attribute on non-namespace object '%s'", t->a->str);
        return false;
    }
    tt_jv_dict_set(&r->arena, ns, tt_jv_str(&r->arena, t->str, t->str_len), v);
    return true;
}

static bool unpack(tt_jrender *r, const tt_jnode *at, tt_jnode *const *targets, size_t nt, tt_jv *v) {
    if (nt == 1) return assign_target(r, targets[0], v);
    tt_jv *items = tt_jinja_iter_list(r, at, v);
    if (!items) return false;
    if (items->n != nt) {
        tt_jrender_error(r, at,
                         items->n < nt ? "not enough values to unpack (expected %zu, got %zu)"
                                       : "too many values to unpack (expected %zu, got %zu)",
                         nt, items->n);
        return false;
    }
    for (size_t i = 0; i < nt; i++)
        if (!assign_target(r, targets[i], items->items[i])) return false;
    return true;
}

static void render_for(tt_jrender *r, const tt_jnode *n) {
    tt_jv *seq = eval(r, n->a);
    if (!seq) return;
    tt_jv *items = tt_jinja_iter_list(r, n->a, seq);
    if (!items) return;
    tt_jarena *a = &r->arena;
    push_frame(r);
    if (n->b) { /* `for x in xs if cond`: filter first, so loop.length counts what is left */
        tt_jv *kept = tt_jv_new(a, JV_LIST);
        for (size_t i = 0; i < items->n && !r->failed; i++) {
            if (!unpack(r, n, n->kids, n->nkids, items->items[i])) break;
            tt_jv *c = eval(r, n->b);
            if (c && tt_jv_truthy(c)) tt_jv_push(a, kept, items->items[i]);
        }
        items = kept;
    }
    size_t len = items->n;
    enum { LOOP_FIXED = 9, LOOP_KEYS = 11 };
    static const char *const loop_names[LOOP_KEYS] = {"index",  "index0", "revindex", "revindex0", "first",   "last",
                                                      "length", "depth",  "depth0",   "previtem",  "nextitem"};
    tt_jv **keys_with_previous = tt_jarena_alloc(a, sizeof(tt_jv *) * LOOP_KEYS);
    tt_jv **keys_without_previous = tt_jarena_alloc(a, sizeof(tt_jv *) * (LOOP_KEYS - 1));
    tt_jv *const loop_length = tt_jv_int(a, (int64_t)len), *const loop_depth = tt_jv_int(a, 1),
                 *const loop_depth0 = tt_jv_int(a, 0), *const loop_true = tt_jv_bool(a, true),
                 *const loop_false = tt_jv_bool(a, false); /* the same every iteration */
    for (size_t k = 0; k < LOOP_KEYS; k++) {
        keys_with_previous[k] = tt_jv_str(a, loop_names[k], strlen(loop_names[k]));
        if (k != LOOP_FIXED) keys_without_previous[k - (k > LOOP_FIXED)] = keys_with_previous[k];
    }
    for (size_t i = 0; i < len && !r->failed; i++) {
        if (++r->iterations > TT_JINJA_MAX_ITERATIONS) {
            tt_jrender_error(r, n, "more than %llu loop iterations", (unsigned long long)TT_JINJA_MAX_ITERATIONS);
            break;
        }
        if (!unpack(r, n, n->kids, n->nkids, items->items[i])) break;
        /* the loop object: its keys made once a loop, its arrays sized once (no search, no growth) */
        tt_jv *loop = tt_jv_new(a, JV_DICT);
        loop->keys = i > 0 ? keys_with_previous : keys_without_previous;
        loop->items = tt_jarena_alloc(a, sizeof(tt_jv *) * LOOP_KEYS);
        tt_jv *fixed[LOOP_FIXED] = {tt_jv_int(a, (int64_t)i + 1),
                                    tt_jv_int(a, (int64_t)i),
                                    tt_jv_int(a, (int64_t)(len - i)),
                                    tt_jv_int(a, (int64_t)(len - i - 1)),
                                    i == 0 ? loop_true : loop_false,
                                    i + 1 == len ? loop_true : loop_false,
                                    loop_length,
                                    loop_depth,
                                    loop_depth0};
        for (size_t k = 0; k < LOOP_FIXED; k++) loop->items[loop->n++] = fixed[k];
        if (i > 0) loop->items[loop->n++] = items->items[i - 1]; /* previtem and nextitem where there is one */
        if (i + 1 < len) loop->items[loop->n++] = items->items[i + 1];
        loop->cap = loop->n; /* a change would copy the arrays, never write the shared keys */
        assign(r, "loop", loop);
        render_body(r, n->body);
        if (r->control == 1) {
            r->control = 0;
            break;
        }
        r->control = 0;
    }
    r->nframes--;
    if (len == 0 && n->else_body && !r->failed) render_body(r, n->else_body);
}

static void render_node(tt_jrender *r, const tt_jnode *n) {
    switch (n->kind) {
    case JN_TEXT: tt_jbuf_put(&r->out, n->str, n->str_len); break;
    case JN_OUTPUT: {
        tt_jv *v = eval(r, n->a);
        if (v) output_value(r, v);
        break;
    }
    case JN_IF: {
        tt_jv *c = eval(r, n->a);
        if (!c) return;
        if (tt_jv_truthy(c)) render_body(r, n->body);
        else if (n->else_body) render_body(r, n->else_body);
        break;
    }
    case JN_FOR: render_for(r, n); break;
    case JN_SET: {
        tt_jv *v = eval(r, n->a);
        if (v) unpack(r, n, n->kids, n->nkids, v);
        break;
    }
    case JN_SET_BLOCK: {
        tt_jbuf saved = r->out;
        tt_jbuf local = {0};
        local.limit = TT_JINJA_MAX_OUTPUT;
        r->out = local;
        render_body(r, n->body);
        local = r->out;
        r->out = saved;
        if (!r->failed) assign_target(r, n->kids[0], tt_jv_str(&r->arena, local.p ? local.p : "", local.n));
        free(local.p);
        break;
    }
    case JN_MACRO: {
        tt_jv *m = tt_jv_new(&r->arena, JV_MACRO);
        m->macro = n;
        assign(r, n->str, m);
        break;
    }
    case JN_GENERATION: {
        size_t start = r->out.n;
        render_body(r, n->body);
        if (r->nspans == r->capspans) {
            r->capspans = r->capspans ? r->capspans * 2 : 8;
            r->spans =
                tt_xrealloc(r->spans, tt_mul_size(r->capspans, 2 * sizeof(size_t), "jinja spans"), "jinja spans");
        }
        r->spans[2 * r->nspans] = start;
        r->spans[2 * r->nspans + 1] = r->out.n;
        r->nspans++;
        break;
    }
    case JN_BREAK: r->control = 1; break;
    case JN_CONTINUE: r->control = 2; break;
    case JN_BODY: render_body(r, n); break;
    default: tt_jrender_error(r, n, "internal: not a statement"); break;
    }
    if (r->out.over) tt_jrender_error(r, n, "output exceeds %zu bytes", TT_JINJA_MAX_OUTPUT);
}

static void render_body(tt_jrender *r, const tt_jnode *body) {
    for (size_t i = 0; i < body->nkids && !r->failed && !r->control; i++) render_node(r, body->kids[i]);
}

bool tt_jinja_render(const tt_jinja_template *t, const json_t *context, tt_jinja_output *out, char *err,
                     size_t err_size) {
    memset(out, 0, sizeof(*out));
    if (err && err_size) err[0] = 0;
    tt_jrender r = {0};
    r.origin = t->origin;
    r.err = err;
    r.err_size = err_size;
    r.arena.limit = TT_JINJA_MAX_MEMORY;
    r.out.limit = TT_JINJA_MAX_OUTPUT;
    push_frame(&r); /* globals */
    static const struct {
        const char *name;
        int id;
    } funcs[] = {{"raise_exception", FUNC_RAISE},
                 {"strftime_now", FUNC_STRFTIME},
                 {"namespace", FUNC_NAMESPACE},
                 {"range", FUNC_RANGE},
                 {"dict", FUNC_DICT}};
    for (size_t i = 0; i < sizeof(funcs) / sizeof(*funcs); i++) {
        tt_jv *f = tt_jv_new(&r.arena, JV_FUNC);
        f->i = funcs[i].id;
        assign(&r, funcs[i].name, f);
    }
    push_frame(&r); /* the context */
    if (context && json_is_object(context)) {
        const char *k;
        json_t *x;
        json_object_foreach((json_t *)context, k, x) assign(&r, k, tt_jv_from_json(&r.arena, x));
    } else if (context) {
        tt_jrender_error(&r, NULL, "render context must be a JSON object");
    }
    push_frame(&r); /* the template's own top-level sets */
    if (!r.failed) render_body(&r, t->root);
    bool ok = !r.failed;
    if (ok) {
        out->text = r.out.p ? r.out.p : tt_xstrdup("");
        out->len = r.out.n;
        out->generation_spans = r.spans;
        out->span_count = (int64_t)r.nspans;
    } else {
        free(r.out.p);
        free(r.spans);
    }
    free(r.frames);
    tt_jarena_free(&r.arena);
    return ok;
}

void tt_jinja_output_free(tt_jinja_output *out) {
    if (!out) return;
    free(out->text);
    free(out->generation_spans);
    memset(out, 0, sizeof(*out));
}
