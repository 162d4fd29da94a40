/* Rows of a Parquet file as JSON objects, as the datasets library writes Parquet (and the Hub serves datasets): the
 * Thrift footer (FileMetaData), row groups of column chunks, data pages v1 and v2 and dictionary pages, PLAIN,
 * dictionary (RLE_DICTIONARY, PLAIN_DICTIONARY) and run-length boolean values, repetition and definition levels, and
 * pages compressed with Snappy (libsnappy), gzip (zlib) or Zstandard (libzstd), or not at all. The columns at the top
 * level of the schema are read: primitives (BYTE_ARRAY as text, UTF-8 checked; INT32 / INT64 as integers; FLOAT /
 * DOUBLE as numbers; BOOLEAN; null where a value is absent), and lists of primitives or of structs of primitives (a
 * chat dataset's messages: [{role, content}]), in the standard three-level form and the older two-level one, empty
 * and null lists, entries and fields kept. Structs outside lists, maps, lists of lists and the types INT96 and
 * FIXED_LEN_BYTE_ARRAY are left out of the rows, with one note naming them when the file opens.
 *
 * Memory is one row group's column values at a time: a column chunk of more than TT_PARQUET_MAX_CHUNK_VALUES values
 * (levels, nulls and list entries included) or TT_PARQUET_MAX_GROUP_BYTES of text is refused; the arrays grow with
 * the pages read, so a footer's counts allocate nothing before the pages hold them. Every offset, length and count is checked against the file: a damaged file
 * is an error naming the file, the row group, the column and what is wrong, never a crash. */
#ifndef TT_DATA_PARQUET_H
#define TT_DATA_PARQUET_H

#include <jansson.h>
#include <stdint.h>

#define TT_PARQUET_MAX_GROUP_BYTES ((int64_t)1 << 30)
#define TT_PARQUET_MAX_CHUNK_VALUES ((int64_t)1 << 25)

typedef struct tt_parquet tt_parquet;

tt_parquet *tt_parquet_open(const char *path);
/* The next row (the caller json_decref's it), or NULL after the last. */
json_t *tt_parquet_next(tt_parquet *p);
/* Where the last row came from, for messages: "train.parquet: row 12". */
const char *tt_parquet_where(const tt_parquet *p);
void tt_parquet_close(tt_parquet *p);

#endif
