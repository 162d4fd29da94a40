/* Safetensors files: read (mmap, every header field checked against the file before
 * use) and write (atomic: temporary file, fsync, rename).
 *
 * Format: 8-byte little-endian header length N, then N bytes of JSON
 *   {"name": {"dtype": "BF16", "shape": [a, b], "data_offsets": [begin, end]}, ...,
 *    "__metadata__": {"k": "v"}}
 * then the data; offsets are relative to the end of the header. A model may be split
 * into shards listed by model.safetensors.index.json ({"weight_map": {name: file}}). */
#ifndef TT_MODEL_SAFETENSORS_H
#define TT_MODEL_SAFETENSORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/dtype.h"

#define TT_MAX_DIMS 4

typedef struct tt_st_tensor {
    char *name;
    tt_dtype dtype;
    int ndim;
    int64_t shape[TT_MAX_DIMS];
    const void *data; /* points into the mapping */
    size_t bytes;
} tt_st_tensor;

typedef struct tt_st_file {
    char *path;
    void *map; /* the whole file, read-only */
    size_t map_bytes;
    tt_st_tensor *tensors;
    int count;
    int *by_name; /* tensor indices in strcmp order of their names (tt_st_find) */
} tt_st_file;

/* Opens and validates one file. Any inconsistency (short file, header length past the end,
 * invalid JSON, unknown dtype, offsets outside the data area, end - begin != shape x dtype size,
 * overlapping tensors) is a tt_die naming the file and the tensor. */
void tt_st_open(const char *path, tt_st_file *out);
void tt_st_close(tt_st_file *file);
/* NULL when absent. */
const tt_st_tensor *tt_st_find(const tt_st_file *file, const char *name);

/* A model checkpoint: model.safetensors, or the shards named by model.safetensors.index.json,
 * in directory dir. Every tensor name the index lists must be present in its shard. */
typedef struct tt_st_model {
    tt_st_file *files;
    int file_count;
} tt_st_model;

void tt_st_model_open(const char *dir, tt_st_model *out);
void tt_st_model_close(tt_st_model *model);
/* NULL when absent; *file_path (if non-NULL) gets the file that holds it. */
const tt_st_tensor *tt_st_model_find(const tt_st_model *model, const char *name, const char **file_path);

/* Writing: collect tensors (pointers are borrowed until tt_st_writer_commit returns), then
 * commit writes path atomically. Or, for tensors too large to hold at once, stream them: add each with data NULL,
 * tt_st_writer_begin writes the header, tt_st_writer_write appends their bytes in the order added, and
 * tt_st_writer_finish checks that every byte came and puts the file in place (until then it is path.tmp). */
typedef struct tt_st_write_entry {
    char *name;
    tt_dtype dtype;
    int ndim;
    int64_t shape[TT_MAX_DIMS];
    const void *data;
    size_t bytes;
} tt_st_write_entry;

typedef struct tt_st_writer {
    tt_st_write_entry *entries;
    int count, capacity;
    char **meta_keys, **meta_values;
    int meta_count;
    void *stream;             /* between begin and finish: the open file */
    size_t streamed, payload; /* bytes appended so far, and the tensors' total */
} tt_st_writer;

void tt_st_writer_init(tt_st_writer *writer);
void tt_st_writer_add(tt_st_writer *writer, const char *name, tt_dtype dtype, int ndim, const int64_t *shape,
                      const void *data);
void tt_st_writer_add_metadata(tt_st_writer *writer, const char *key, const char *value);
/* Writes path atomically. Tensors are laid out in the order added, 8-byte aligned header. */
void tt_st_writer_commit(tt_st_writer *writer, const char *path);
void tt_st_writer_begin(tt_st_writer *writer, const char *path);
void tt_st_writer_write(tt_st_writer *writer, const void *data, size_t bytes);
void tt_st_writer_finish(tt_st_writer *writer);
void tt_st_writer_free(tt_st_writer *writer);

/* Writes data to path atomically: path.tmp, fsync, rename, fsync of the directory.
 * Used for every file tiertrain writes into a checkpoint. */
void tt_write_file_atomic(const char *path, const void *data, size_t bytes);

#endif
