/* What the files of src/config/ share: the key table's types, and where a value came from. */
#ifndef TT_CONFIG_INTERNAL_H
#define TT_CONFIG_INTERNAL_H

#include <setjmp.h>
#include <stdbool.h>
#include <stddef.h>
#include <yaml.h>

#include "config/run_config.h"

typedef enum key_type {
    KEY_BOOL,
    KEY_INT,
    KEY_FLOAT,
    KEY_STRING,               /* ~ (null) leaves it unset (NULL) */
    KEY_ENUM,                 /* a name from a fixed list */
    KEY_BYTES,                /* an integer or a size with a unit: "24GiB", "512MB" */
    KEY_DATASETS,             /* a list of token files or {path, type, ...} entries */
    KEY_SPECIAL_TOKENS,       /* special_tokens: {bos_token: ..., eos_token: ..., pad_token: ...} */
    KEY_SELECTIVE,            /* selective_checkpointing: {save: [attention], offload: false} */
    KEY_CHECKPOINTING_KWARGS, /* gradient_checkpointing_kwargs: {use_reentrant: false} */
    KEY_ADAPTER,              /* adapter: lora, or ~ */
    KEY_LORA_TARGETS,         /* lora_target_modules: a list of module names (tt_lora_module) */
    KEY_LAYER_LIST,           /* frozen_layers: a list of decoder-layer indices */
    KEY_TEMPLATE_KWARGS,      /* chat_template_kwargs: a mapping of any YAML values, kept as a JSON object's text */
    KEY_STRING_LIST,          /* eot_tokens: a list of strings (char ** at offset, int count at count_offset) */
} key_type;

typedef enum availability {
    AVAILABLE,
    NOT_YET, /* a key of a later feature: only its off value is accepted (is_off_value) */
} availability;

typedef enum enum_storage {
    STORE_INDEX, /* an int (or a C enum) field: the value's index in `values` */
    STORE_NAME,  /* a char * field: a copy of the value's name */
} enum_storage;

/* A closed, open or half-open interval; a bound that is absent is unlimited. */
typedef struct value_range {
    double min, max;
    bool has_min, has_max, min_open, max_open;
} value_range;

#define AT_LEAST(a) \
    { .min = (a), .has_min = true }
#define ABOVE(a) \
    { .min = (a), .has_min = true, .min_open = true }
#define CLOSED(a, b) \
    { .min = (a), .max = (b), .has_min = true, .has_max = true }
#define HALF_OPEN(a, b) \
    { .min = (a), .max = (b), .has_min = true, .has_max = true, .max_open = true }

typedef struct key_spec {
    const char *name;
    key_type type;
    availability availability;
    size_t offset;              /* of the field in tt_run_config */
    size_t count_offset;        /* KEY_STRING_LIST: of the int count of the list's strings */
    const char *default_text;   /* YAML, parsed like a user's value */
    value_range range;          /* KEY_INT, KEY_FLOAT, KEY_BYTES */
    bool minus_one_unset;       /* KEY_INT: -1 (or ~) means "not given" besides the range */
    bool null_is_default;       /* ~ (or nothing) sets the default, as axolotl's templates write unused keys */
    const char *values;         /* KEY_ENUM: "a|b|c" */
    enum_storage storage;       /* KEY_ENUM */
    const char *not_yet_values; /* KEY_BOOL/KEY_ENUM values that belong to later features: "true|disk" */
    const char *not_yet_reason; /* completes "<key>: <value> is not available yet..." */
    const char *help;
    const char *known_as; /* what other tools call this key ("a|b"); only to answer an unknown key */
} key_spec;

#define FIELD(member) offsetof(tt_run_config, member)
#define RESERVED(key, what) \
    { .name = (key), .availability = NOT_YET, .help = (what) }

/* "a|b|c" from an enum's X-macro list (run_config.h): the key table's value list is the enum's own, in
 * the enum's order, so a STORE_INDEX key stores the member itself. */
#define CFG_VALUE_TEXT(member, name) "|" name
#define VALUE_NAMES(list) (&list(CFG_VALUE_TEXT)[1])
/* A STORE_INDEX key's field is written through an int. */
#define TIE_VALUES(type) _Static_assert(sizeof(type) == sizeof(int), #type " is stored as an int index")

typedef struct source {
    const char *path;     /* the config file, or NULL */
    const char *override; /* the "key=value" text when path is NULL */
    bool built_in;        /* a key's default, not the user's value */
} source;

/* Dies with a message that names where the value came from: "run.yaml:12: ..." or
 * "command-line override 'seed=x': ...". node may be NULL (the file's first line). */
void cfg_die_at(const source *src, const yaml_node_t *node, const char *fmt, ...)
    __attribute__((__noreturn__, format(printf, 3, 4)));

/* Where a load collects its errors (load.c): while a list is armed, cfg_die_at appends its message and jumps to
 * `resume` (the key loop, which goes on with the next key) instead of dying; the load then dies once, naming them all.
 * One message per jump: the list is disarmed by each error and re-armed for the next key. */
typedef struct cfg_error_list {
    jmp_buf resume;
    char *text; /* the messages, one per line */
    size_t length, capacity;
    int count; /* all errors, also those past the kept text's bound */
} cfg_error_list;
void cfg_collect_errors(cfg_error_list *list); /* NULL: errors die at once */

/* yaml_values.c: scalars */
const char *cfg_scalar_text(const yaml_node_t *node);
/* deepspeed: the DeepSpeed JSON's ZeRO settings onto the run's keys (deepspeed.c); after the file and overrides. */
void cfg_apply_deepspeed(tt_run_config *c);
bool cfg_is_null(const yaml_node_t *node);
bool cfg_parse_bool(const char *v, bool *out);
int cfg_parse_int64(const char *text, int64_t *out);
int cfg_parse_double(const char *text, double *out);
/* "true", "[1, 2]", "a mapping": the value as an error message shows it */
const char *cfg_describe_value(const yaml_node_t *node, char *buf, size_t size);
/* "<key>: expected <expected>, got <value>" */
void cfg_die_type(const source *src, const yaml_node_t *node, const key_spec *k, const char *expected)
    __attribute__((__noreturn__));
/* "<key>: <value> is not available yet" */
void cfg_die_not_yet(const source *src, const yaml_node_t *node, const key_spec *k, const char *value)
    __attribute__((__noreturn__));
void cfg_check_range(const source *src, const yaml_node_t *node, const key_spec *k, double value, const char *text);
/* false, 0, ~ or an empty list: the value a key of a later feature may take */
bool cfg_is_off_value(const yaml_node_t *node);
/* chat_template_kwargs: a YAML mapping kept as a JSON object's text */
void cfg_set_template_kwargs(tt_run_config *c, const key_spec *k, const source *src, yaml_document_t *doc,
                             yaml_node_t *node);

/* load.c: one value (a node of doc) applied to the config through its key */
void cfg_apply_key(tt_run_config *c, const key_spec *k, const source *src, yaml_document_t *doc, yaml_node_t *node);

/* foreign_keys.c: axolotl's keys that tiertrain has under no name of its own: applied (accepted with a note, or
 * refused with what to use instead), or false when no tool documents `name`. */
bool cfg_apply_foreign_key(tt_run_config *c, const source *src, yaml_document_t *doc, const char *name,
                           yaml_node_t *value);
/* axolotl's values of tiertrain's keys (attn_implementation: flash_attention_2, gradient_checkpointing: offload,
 * optimizer: adamw_bnb_8bit, tf32: true): applied or refused (true), or not one of them (false) */
bool cfg_apply_foreign_value(tt_run_config *c, const key_spec *k, const source *src, yaml_node_t *node);

/* keys.c: the table and lookups */
extern const key_spec cfg_keys[];
extern const int cfg_key_count;
const key_spec *cfg_find_key(const char *name);
/* Dies naming the unknown key and the nearest known ones (or what other tools call it). */
void cfg_die_unknown_key(const source *src, const yaml_node_t *node, const char *name) __attribute__((__noreturn__));
/* The index of text in "a|b|c", or -1 */
int cfg_index_in_list(const char *list, const char *text, bool ignore_case);
const char *cfg_name_in_list(const char *list, int index, char *buf, size_t size);
/* "a|b|c" as "a, b, c" */
const char *cfg_list_with_commas(const char *list, char *buf, size_t size);
const char *cfg_available_values(const key_spec *k, char *buf, size_t size);
const char *cfg_range_text(const value_range *r, char *buf, size_t size);
bool cfg_in_range(const value_range *r, double v);
const char *cfg_type_name(const key_spec *k);
const char *cfg_valid_text(const key_spec *k, char *buf, size_t size);

/* datasets.c */
typedef struct entry_key {
    const char *name;
    unsigned types;
    size_t offset; /* of a char * in tt_dataset_spec; 0 for keys with their own parser */
} entry_key;
extern const entry_key cfg_entry_keys[]; /* the keys a datasets entry takes besides path and type */
extern const int cfg_entry_key_count;
void cfg_set_datasets(tt_run_config *c, const source *src, yaml_document_t *doc, yaml_node_t *node);
/* axolotl's pretraining_dataset: entries of texts (type pretrain, text_column) read as completion datasets */
void cfg_set_pretraining_datasets(tt_run_config *c, const source *src, yaml_document_t *doc, yaml_node_t *node);
void cfg_clear_datasets(tt_run_config *c);
void cfg_free_strings(char **list, int count);
void cfg_push_string(char ***list, int *count, const char *s);

/* structured_keys.c */
void cfg_set_special_tokens(tt_run_config *c, const key_spec *k, const source *src, yaml_document_t *doc,
                            yaml_node_t *node);
void cfg_set_selective(tt_run_config *c, const key_spec *k, const source *src, yaml_document_t *doc, yaml_node_t *node);
void cfg_set_checkpointing_kwargs(tt_run_config *c, const key_spec *k, const source *src, yaml_document_t *doc,
                                  yaml_node_t *node);
void cfg_set_adapter(tt_run_config *c, const source *src, yaml_node_t *node);
void cfg_set_lora_targets(tt_run_config *c, const source *src, yaml_document_t *doc, yaml_node_t *node);
void cfg_set_layer_list(tt_run_config *c, const key_spec *k, const source *src, yaml_document_t *doc,
                        yaml_node_t *node);
void cfg_set_string_list(tt_run_config *c, const key_spec *k, const source *src, yaml_document_t *doc,
                         yaml_node_t *node);

#endif
