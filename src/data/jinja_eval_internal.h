/* The render state shared by the evaluator (jinja_eval.c) and the filters, tests and methods
 * (jinja_filters.c). */
#ifndef TT_DATA_JINJA_EVAL_INTERNAL_H
#define TT_DATA_JINJA_EVAL_INTERNAL_H

#include <stdbool.h>

#include "data/jinja_value.h"

typedef struct tt_jrender {
    tt_jarena arena;
    tt_jbuf out;
    tt_jv **frames; /* scope dicts, innermost last */
    size_t nframes, capframes;
    size_t *spans;
    size_t nspans, capspans;
    const char *origin;
    char *err;
    size_t err_size;
    bool failed;
    int control; /* 1 break, 2 continue */
    int call_depth;
    uint64_t iterations;
} tt_jrender;

/* Arguments of a filter, test or call, evaluated. */
typedef struct tt_jargs {
    tt_jv **pos;
    size_t npos;
    tt_jv **kwv;
    const char **kwn;
    size_t nkw;
} tt_jargs;

void tt_jrender_error(tt_jrender *r, const tt_jnode *at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* An argument by position or keyword, or NULL. */
tt_jv *tt_jargs_get(const tt_jargs *a, size_t index, const char *name);

bool tt_jinja_is_filter(const char *name);
bool tt_jinja_is_test(const char *name);
tt_jv *tt_jinja_filter(tt_jrender *r, const tt_jnode *at, const char *name, tt_jv *v, const tt_jargs *args);
/* Returns 0 or 1, or -1 on an error. */
int tt_jinja_test(tt_jrender *r, const tt_jnode *at, const char *name, tt_jv *v, const tt_jargs *args);
/* A method call obj.name(args) on a str or dict; *handled false when obj has no such method. */
tt_jv *tt_jinja_method(tt_jrender *r, const tt_jnode *at, tt_jv *obj, const char *name, const tt_jargs *args,
                       bool *handled);

/* Shared helpers. */
tt_jv *tt_jinja_to_str(tt_jrender *r, const tt_jv *v);
size_t tt_jinja_utf8_len(const char *s, size_t n);
/* Items of an iterable (list, tuple, dict keys, string characters); NULL with an error otherwise. */
tt_jv *tt_jinja_iter_list(tt_jrender *r, const tt_jnode *at, tt_jv *v);
const char *tt_jinja_type_name(const tt_jv *v);
/* Python ordering for sort; returns false (with an error) for unorderable pairs. */
bool tt_jinja_less(tt_jrender *r, const tt_jnode *at, const tt_jv *x, const tt_jv *y, bool *less);
/* Raises jinja2's UndefinedError for v (an undefined), returns NULL. */
tt_jv *tt_jinja_undefined_error(tt_jrender *r, const tt_jnode *at, const tt_jv *v);

#endif
