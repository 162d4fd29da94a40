/* Apache Thrift's compact protocol, read from a byte buffer: what Parquet's footer (FileMetaData) and page headers are
 * written in. A reader walks a struct's fields one at a time; a field it does not want is skipped whole. Every read is
 * bounded by the buffer and nesting is bounded: a malformed buffer sets the reader's error (the first one stays) and
 * every later read returns zeros, so a caller checks once, after the struct. */
#ifndef TT_DATA_THRIFT_COMPACT_H
#define TT_DATA_THRIFT_COMPACT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* compact protocol's types */
enum {
    TT_THRIFT_STOP = 0,
    TT_THRIFT_TRUE = 1,
    TT_THRIFT_FALSE = 2,
    TT_THRIFT_BYTE = 3,
    TT_THRIFT_I16 = 4,
    TT_THRIFT_I32 = 5,
    TT_THRIFT_I64 = 6,
    TT_THRIFT_DOUBLE = 7,
    TT_THRIFT_BINARY = 8,
    TT_THRIFT_LIST = 9,
    TT_THRIFT_SET = 10,
    TT_THRIFT_MAP = 11,
    TT_THRIFT_STRUCT = 12,
};

typedef struct tt_thrift {
    const uint8_t *data;
    size_t size, at;
    int depth;           /* structs and containers open */
    char error[160];     /* "" while the buffer reads well */
    int16_t last_id[33]; /* field id of the last field of each open struct (ids are deltas) */
} tt_thrift;

void tt_thrift_init(tt_thrift *t, const uint8_t *data, size_t size);

/* A struct's fields: begin, then next_field until it returns false (the STOP field, or an error), then end. */
void tt_thrift_struct_begin(tt_thrift *t);
bool tt_thrift_next_field(tt_thrift *t, int16_t *id, int *type);
void tt_thrift_struct_end(tt_thrift *t);

/* Values, of the type the field or list said (a caller that expected another type skips instead). */
int64_t tt_thrift_int(tt_thrift *t, int type); /* BYTE, I16, I32, I64 (zigzag varints; a byte as is) */
bool tt_thrift_bool(tt_thrift *t, int type);   /* a field's TRUE / FALSE, or a list element's byte */
double tt_thrift_double(tt_thrift *t);
/* A BINARY's bytes in the buffer (not NUL-terminated) and *len. */
const uint8_t *tt_thrift_binary(tt_thrift *t, size_t *len);
/* A LIST or SET header: the element type and count (bounded by the bytes left). */
int64_t tt_thrift_list_begin(tt_thrift *t, int *element_type);
void tt_thrift_list_end(tt_thrift *t);
/* Skips a value of the type, containers and structs whole. */
void tt_thrift_skip(tt_thrift *t, int type);

#endif
