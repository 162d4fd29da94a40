/* Words for error messages about JSON values. */
#ifndef TT_CORE_JSON_DESCRIBE_H
#define TT_CORE_JSON_DESCRIBE_H

#include <jansson.h>

/* "an object", "a string", ...; "missing" for NULL. */
const char *tt_json_type_name(const json_t *value);

#endif
