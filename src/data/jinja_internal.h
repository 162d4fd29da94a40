/* The template's syntax tree, shared by the parser (jinja_parse.c) and the evaluator
 * (jinja_eval.c). Nodes are owned by the template and freed with it. */
#ifndef TT_DATA_JINJA_INTERNAL_H
#define TT_DATA_JINJA_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "data/jinja.h"

typedef enum {
    /* statements */
    JN_TEXT,
    JN_OUTPUT,
    JN_IF,
    JN_FOR,
    JN_SET,
    JN_SET_BLOCK,
    JN_BREAK,
    JN_CONTINUE,
    JN_MACRO,
    JN_GENERATION,
    JN_BODY,
    JN_DO,
    /* expressions */
    JN_CONST_STR,
    JN_CONST_INT,
    JN_CONST_FLOAT,
    JN_CONST_BOOL,
    JN_CONST_NONE,
    JN_NAME,
    JN_LIST,
    JN_DICT,
    JN_TUPLE,
    JN_GETATTR,
    JN_GETITEM,
    JN_SLICE,
    JN_CALL,
    JN_FILTER,
    JN_TEST,
    JN_BINOP,
    JN_UNARY,
    JN_AND,
    JN_OR,
    JN_NOT,
    JN_COND,
    JN_KWARG
} tt_jnode_kind;

typedef struct tt_jnode tt_jnode;
struct tt_jnode {
    tt_jnode_kind kind;
    int line, col;
    char *str; /* text, name, attribute, operator, filter/test name */
    size_t str_len;
    int64_t ival;
    double fval;
    tt_jnode **kids; /* children (meaning depends on kind) */
    size_t nkids;
    tt_jnode *a, *b, *c, *d; /* named slots, see jinja_parse.c */
    tt_jnode *body, *else_body;
};

struct tt_jinja_template {
    tt_jnode *root;
    char *origin;
    tt_jnode **all; /* every node, for freeing */
    size_t nall, capall;
};

/* Known filter and test names (jinja_filters.c): an unknown one is a parse error, as in jinja2. */
bool tt_jinja_is_filter(const char *name);
bool tt_jinja_is_test(const char *name);

#endif
