/* Python's str.format over named text fields, as axolotl fills its user-defined prompt formats
 * ("[INST] {instruction} [/INST]"): {name} is the named value, {{ and }} are literal braces. What Python would raise
 * on is an error here: a name not given (KeyError), a lone brace (ValueError), and what tiertrain does not fill:
 * positional fields ({0}, {}), attributes and indexes ({a.b}, {a[0]}), conversions and format specs ({a!r}, {a:>9}). */
#ifndef TT_CORE_PYTHON_FORMAT_H
#define TT_CORE_PYTHON_FORMAT_H

#include <stdbool.h>
#include <stddef.h>

/* fmt with each {names[i]} replaced by values[i] (value_lens[i] bytes): into *out (malloc'd, NUL-terminated) and
 * *out_len, true; or false with why in err (and *out NULL). out NULL: only checks fmt. */
bool tt_python_format(const char *fmt, const char *const *names, const char *const *values, const size_t *value_lens,
                      int count, char **out, size_t *out_len, char *err, size_t err_size);

#endif
