/* Runtime values of the Jinja interpreter: Python's types as templates see them (None, bool,
 * int, float, str, list, dict) plus jinja2's Undefined, namespaces, macros, and the loop object.
 * Every value of a render lives in the render's arena and is freed with it, so values are plain
 * pointers with no reference counts; lists, dicts and namespaces are the only mutable ones. */
#ifndef TT_DATA_JINJA_VALUE_H
#define TT_DATA_JINJA_VALUE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "data/jinja_internal.h"

typedef enum {
    JV_UNDEF,
    JV_NONE,
    JV_BOOL,
    JV_INT,
    JV_FLOAT,
    JV_STR,
    JV_LIST,
    JV_DICT,
    JV_NS,
    JV_MACRO,
    JV_FUNC
} tt_jv_kind;

typedef struct tt_jv tt_jv;
struct tt_jv {
    tt_jv_kind kind;
    bool is_tuple;
    int64_t i; /* bool, int; JV_FUNC: which global */
    double f;
    const char *s; /* str bytes; JV_UNDEF: the missing name (for messages) */
    size_t n;      /* str length; list/dict count */
    size_t cap;
    tt_jv **items; /* list items; dict values */
    tt_jv **keys;  /* dict keys (strings) */
    const tt_jnode *macro;
};

/* A render's values, freed together (jinja_arena.c): bump-allocated from chunks that renders pass on to the next
 * (a malloc a value, and fresh pages a render, made memory the render's cost), a large request its own block. */
typedef struct tt_jarena {
    void **chunks, **large; /* [chunk_count], [large_count] */
    size_t chunk_count, chunk_cap, large_count, large_cap;
    size_t chunk_used;   /* bytes taken from the last chunk */
    size_t bytes, limit; /* bytes asked for; the render's bound */
    bool over;
} tt_jarena;

void *tt_jarena_alloc(tt_jarena *a, size_t bytes);
void tt_jarena_free(tt_jarena *a);

tt_jv *tt_jv_new(tt_jarena *a, tt_jv_kind k);
tt_jv *tt_jv_str(tt_jarena *a, const char *s, size_t n);
tt_jv *tt_jv_int(tt_jarena *a, int64_t i);
tt_jv *tt_jv_float(tt_jarena *a, double f);
tt_jv *tt_jv_bool(tt_jarena *a, bool b);
tt_jv *tt_jv_undef(tt_jarena *a, const char *name);
void tt_jv_push(tt_jarena *a, tt_jv *list, tt_jv *v);
/* Sets key (a string value) in a dict or namespace, replacing an existing key in place. */
void tt_jv_dict_set(tt_jarena *a, tt_jv *d, tt_jv *key, tt_jv *v);
/* tt_jv_dict_set by the key's bytes: a key string allocated only when the key is new (a scope's variables are set
 * again each loop iteration). */
void tt_jv_dict_set_name(tt_jarena *a, tt_jv *d, const char *name, size_t n, tt_jv *v);
tt_jv *tt_jv_dict_get(const tt_jv *d, const char *key, size_t n);
tt_jv *tt_jv_from_json(tt_jarena *a, const json_t *j);

bool tt_jv_truthy(const tt_jv *v);
bool tt_jv_equal(const tt_jv *x, const tt_jv *y);

/* A growing byte buffer (in the arena's accounting it is not: it is malloc'd). */
typedef struct tt_jbuf {
    char *p;
    size_t n, cap, limit;
    bool over;
} tt_jbuf;
void tt_jbuf_put(tt_jbuf *b, const char *s, size_t n);
void tt_jbuf_puts(tt_jbuf *b, const char *s);

/* Python's str() (as jinja2 prints a value) and repr() (as str() prints items of a list). */
void tt_jv_str_into(tt_jbuf *b, const tt_jv *v);
void tt_jv_repr_into(tt_jbuf *b, const tt_jv *v);
/* json.dumps(v, ensure_ascii=False, indent=indent (<0: None), separators, sort_keys). Returns
 * false when v holds something JSON cannot (undefined, a macro). */
bool tt_jv_json_into(tt_jbuf *b, const tt_jv *v, int indent, const char *item_sep, const char *key_sep, bool sort_keys,
                     int depth);
/* Python's repr(float). */
void tt_jv_float_repr(tt_jbuf *b, double f);

#endif
