/* Python's str methods on the UTF-8 strings of the template interpreter (jinja_unicode.c), as chat templates call
 * them through jinja2's filters (trim, upper, lower, title, capitalize) and str methods (strip, split, isspace,
 * isalpha, isdigit, isupper, islower): whitespace is Python's str.isspace (bidirectional class WS, B or S, or category
 * Zs: U+3000, U+00A0, U+0085 ... count), case maps are Unicode's (utf8proc) with the special cases Python applies
 * (ß upper-cased to SS, the fi/fl ligatures, İ lower-cased to i + U+0307, a final sigma lower-cased to ς). A byte
 * that starts no valid UTF-8 sequence passes through unchanged. */
#ifndef TT_DATA_JINJA_UNICODE_H
#define TT_DATA_JINJA_UNICODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "data/jinja_value.h"

/* The code point at s[*at], *at advanced past it; a byte that starts no valid sequence: -1 - that byte. */
int32_t tt_py_next(const char *s, size_t n, size_t *at);
/* The code point that ends before s[end] (its start into *start); as tt_py_next for invalid bytes. */
int32_t tt_py_prev(const char *s, size_t end, size_t *start);

bool tt_py_isspace(int32_t cp);
bool tt_py_isalpha(int32_t cp);
bool tt_py_isdigit(int32_t cp);
bool tt_py_is_cased(int32_t cp); /* a letter with case: Lu, Ll or Lt */
bool tt_py_is_upper(int32_t cp); /* Lu or Lt */
bool tt_py_is_lower(int32_t cp); /* Ll */

typedef enum tt_py_case {
    TT_PY_LOWER,       /* str.lower() */
    TT_PY_UPPER,       /* str.upper() */
    TT_PY_JINJA_TITLE, /* jinja2's title filter: each word (after whitespace, -, (, {, [ or <) upper-cased first */
    TT_PY_CAPITALIZE,  /* str.capitalize(): the first character title-cased, the rest lower-cased */
} tt_py_case;

/* s[0 .. n) case-mapped into out. */
void tt_py_map_case(tt_jbuf *out, const char *s, size_t n, tt_py_case mode);

#endif
