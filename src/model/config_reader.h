/* Reading config.json's keys one at a time, for model_config.c and the families' own keys (arch_*.c): a missing
 * (or null) key takes its default or dies when required; a key of the wrong JSON type dies naming the file, the
 * key and the type expected. */
#ifndef TT_MODEL_CONFIG_READER_H
#define TT_MODEL_CONFIG_READER_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

/* Where keys are read from: the file (for messages), an object, and the prefix that names the object in
 * messages ("" at the top level, "rope_scaling." inside it). */
typedef struct tt_config_reader {
    const char *path;
    json_t *object;
    const char *prefix;
} tt_config_reader;

/* The key's value, NULL when absent or null. */
json_t *tt_config_value(const tt_config_reader *r, const char *key);
int64_t tt_config_int(const tt_config_reader *r, const char *key, bool required, int64_t fallback);
double tt_config_number(const tt_config_reader *r, const char *key, bool required, double fallback);
bool tt_config_bool(const tt_config_reader *r, const char *key, bool fallback);
/* NULL when absent or null. */
const char *tt_config_string(const tt_config_reader *r, const char *key);

#endif
