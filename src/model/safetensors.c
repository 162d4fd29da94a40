#include "model/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/check.h"

/* A header larger than this is not a model header but a corrupt length field. */
#define TT_ST_MAX_HEADER_BYTES ((uint64_t)100 * 1024 * 1024)

static int compare_by_begin(const void *a, const void *b) {
    const tt_st_tensor *x = *(tt_st_tensor *const *)a, *y = *(tt_st_tensor *const *)b;
    uintptr_t px = (uintptr_t)x->data, py = (uintptr_t)y->data;
    return px < py ? -1 : px > py;
}

void tt_st_open(const char *path, tt_st_file *out) {
    memset(out, 0, sizeof(*out));
    out->path = tt_xstrdup(path);
    int fd = open(path, O_RDONLY);
    if (fd < 0) tt_die("cannot open %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) tt_die("cannot stat %s: %s", path, strerror(errno));
    const size_t file_bytes = (size_t)st.st_size;
    if (file_bytes < 8)
        tt_die("%s: %zu bytes is too short for a safetensors file (it starts with an 8-byte header length); the "
               "file is truncated or not safetensors",
               path, file_bytes);
    void *map = mmap(NULL, file_bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) tt_die("cannot map %s: %s", path, strerror(errno));
    out->map = map;
    out->map_bytes = file_bytes;

    uint64_t header_bytes = 0;
    const unsigned char *bytes = map;
    for (int i = 7; i >= 0; i--) header_bytes = (header_bytes << 8) | bytes[i];
    if (header_bytes > TT_ST_MAX_HEADER_BYTES || header_bytes > file_bytes - 8)
        tt_die("%s: the header length field says %llu bytes but the file has only %zu bytes after it; the file is "
               "truncated or not safetensors",
               path, (unsigned long long)header_bytes, file_bytes - 8);
    const size_t data_start = 8 + (size_t)header_bytes;
    const size_t data_bytes = file_bytes - data_start;

    json_error_t error;
    json_t *root = json_loadb((const char *)bytes + 8, (size_t)header_bytes, JSON_REJECT_DUPLICATES, &error);
    if (!root) tt_die("%s: the header is not valid JSON (%s at byte %d); the file is corrupt", path, error.text,
                      error.position);
    if (!json_is_object(root)) tt_die("%s: the header is not a JSON object; the file is corrupt", path);

    out->tensors = tt_xcalloc(json_object_size(root) + 1, sizeof(tt_st_tensor), "safetensors index");
    const char *name;
    json_t *entry;
    json_object_foreach(root, name, entry) {
        if (strcmp(name, "__metadata__") == 0) {
            if (!json_is_object(entry)) tt_die("%s: __metadata__ must be an object of strings", path);
            continue;
        }
        if (!json_is_object(entry)) tt_die("%s: tensor '%s': the entry is not an object; the file is corrupt", path, name);
        json_t *dtype = json_object_get(entry, "dtype"), *shape = json_object_get(entry, "shape"),
               *offsets = json_object_get(entry, "data_offsets");
        if (!json_is_string(dtype) || !json_is_array(shape) || !json_is_array(offsets) || json_array_size(offsets) != 2)
            tt_die("%s: tensor '%s' needs \"dtype\" (string), \"shape\" (array) and \"data_offsets\" ([begin, end]); "
                   "the file is corrupt",
                   path, name);
        tt_st_tensor *t = &out->tensors[out->count];
        t->name = tt_xstrdup(name);
        if (tt_dtype_from_safetensors_name(json_string_value(dtype), &t->dtype) != 0)
            tt_die("%s: tensor '%s' has dtype %s; tiertrain reads F32, BF16, F16, F64, I32 and I64", path, name,
                   json_string_value(dtype));
        if (json_array_size(shape) > TT_MAX_DIMS)
            tt_die("%s: tensor '%s' has %zu dimensions; at most %d are supported", path, name, json_array_size(shape),
                   TT_MAX_DIMS);
        t->ndim = (int)json_array_size(shape);
        size_t elements = 1;
        for (int d = 0; d < t->ndim; d++) {
            json_t *dim = json_array_get(shape, (size_t)d);
            if (!json_is_integer(dim) || json_integer_value(dim) < 0)
                tt_die("%s: tensor '%s': shape[%d] is not a non-negative integer; the file is corrupt", path, name, d);
            t->shape[d] = json_integer_value(dim);
            if (t->shape[d] != 0 && elements > SIZE_MAX / (size_t)t->shape[d])
                tt_die("%s: tensor '%s': the shape overflows; the file is corrupt", path, name);
            elements *= (size_t)t->shape[d];
        }
        json_t *begin_json = json_array_get(offsets, 0), *end_json = json_array_get(offsets, 1);
        if (!json_is_integer(begin_json) || !json_is_integer(end_json) || json_integer_value(begin_json) < 0 ||
            json_integer_value(end_json) < json_integer_value(begin_json))
            tt_die("%s: tensor '%s': data_offsets must be two integers 0 <= begin <= end; the file is corrupt", path,
                   name);
        const uint64_t begin = (uint64_t)json_integer_value(begin_json), end = (uint64_t)json_integer_value(end_json);
        if (end > data_bytes)
            tt_die("%s: tensor '%s': data_offsets [%llu, %llu] point past the end of the data (the file has %zu bytes "
                   "of data); the file is truncated or corrupt: re-download or re-save it",
                   path, name, (unsigned long long)begin, (unsigned long long)end, data_bytes);
        const size_t element_bytes = tt_dtype_size(t->dtype);
        if (elements > SIZE_MAX / element_bytes || end - begin != elements * element_bytes)
            tt_die("%s: tensor '%s': data_offsets [%llu, %llu] hold %llu bytes but shape and dtype %s need %zu; the "
                   "file is corrupt",
                   path, name, (unsigned long long)begin, (unsigned long long)end, (unsigned long long)(end - begin),
                   tt_dtype_safetensors_name(t->dtype), elements * element_bytes);
        t->data = bytes + data_start + begin;
        t->bytes = (size_t)(end - begin);
        out->count++;
    }
    json_decref(root);

    /* No two tensors may share bytes. */
    tt_st_tensor **order = tt_xcalloc((size_t)out->count + 1, sizeof(tt_st_tensor *), "safetensors index");
    for (int i = 0; i < out->count; i++) order[i] = &out->tensors[i];
    qsort(order, (size_t)out->count, sizeof(tt_st_tensor *), compare_by_begin);
    for (int i = 1; i < out->count; i++) {
        const tt_st_tensor *a = order[i - 1], *b = order[i];
        if (a->bytes && b->bytes && (const unsigned char *)a->data + a->bytes > (const unsigned char *)b->data)
            tt_die("%s: tensors '%s' and '%s' overlap in the data area; the file is corrupt", path, a->name, b->name);
    }
    free(order);
}

void tt_st_close(tt_st_file *file) {
    if (file->map) munmap(file->map, file->map_bytes);
    for (int i = 0; i < file->count; i++) free(file->tensors[i].name);
    free(file->tensors);
    free(file->path);
    memset(file, 0, sizeof(*file));
}

const tt_st_tensor *tt_st_find(const tt_st_file *file, const char *name) {
    for (int i = 0; i < file->count; i++)
        if (strcmp(file->tensors[i].name, name) == 0) return &file->tensors[i];
    return NULL;
}

static bool file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

void tt_st_model_open(const char *dir, tt_st_model *out) {
    memset(out, 0, sizeof(*out));
    char index_path[4200], single_path[4200];
    snprintf(index_path, sizeof index_path, "%s/model.safetensors.index.json", dir);
    snprintf(single_path, sizeof single_path, "%s/model.safetensors", dir);
    if (!file_exists(index_path)) {
        if (!file_exists(single_path))
            tt_die("%s holds neither model.safetensors nor model.safetensors.index.json; point base_model at a Hugging "
                   "Face model directory",
                   dir);
        out->files = tt_xcalloc(1, sizeof(tt_st_file), "safetensors files");
        out->file_count = 1;
        tt_st_open(single_path, &out->files[0]);
        return;
    }
    json_error_t error;
    json_t *root = json_load_file(index_path, JSON_REJECT_DUPLICATES, &error);
    if (!root) tt_die("%s:%d: not valid JSON: %s", index_path, error.line, error.text);
    json_t *weight_map = json_object_get(root, "weight_map");
    if (!json_is_object(weight_map)) tt_die("%s: \"weight_map\" is missing or not an object", index_path);
    /* Open each distinct shard once. */
    out->files = tt_xcalloc(json_object_size(weight_map) + 1, sizeof(tt_st_file), "safetensors files");
    const char *name;
    json_t *value;
    json_object_foreach(weight_map, name, value) {
        const char *shard = json_string_value(value);
        if (!shard || strchr(shard, '/'))
            tt_die("%s: weight_map['%s'] must be a file name in the same directory", index_path, name);
        char shard_path[4200];
        snprintf(shard_path, sizeof shard_path, "%s/%s", dir, shard);
        tt_st_file *file = NULL;
        for (int i = 0; i < out->file_count; i++)
            if (strcmp(out->files[i].path, shard_path) == 0) file = &out->files[i];
        if (!file) {
            if (!file_exists(shard_path))
                tt_die("%s names shard %s for tensor '%s', but %s does not exist", index_path, shard, name, shard_path);
            file = &out->files[out->file_count++];
            tt_st_open(shard_path, file);
        }
        if (!tt_st_find(file, name))
            tt_die("%s names %s as the shard of tensor '%s', but that file does not hold it; the index and the shards "
                   "do not belong together",
                   index_path, shard, name);
    }
    json_decref(root);
}

void tt_st_model_close(tt_st_model *model) {
    for (int i = 0; i < model->file_count; i++) tt_st_close(&model->files[i]);
    free(model->files);
    memset(model, 0, sizeof(*model));
}

const tt_st_tensor *tt_st_model_find(const tt_st_model *model, const char *name, const char **file_path) {
    for (int i = 0; i < model->file_count; i++) {
        const tt_st_tensor *t = tt_st_find(&model->files[i], name);
        if (t) {
            if (file_path) *file_path = model->files[i].path;
            return t;
        }
    }
    return NULL;
}

void tt_st_writer_init(tt_st_writer *writer) { memset(writer, 0, sizeof(*writer)); }

void tt_st_writer_add(tt_st_writer *w, const char *name, tt_dtype dtype, int ndim, const int64_t *shape,
                      const void *data) {
    TT_CHECK(ndim >= 0 && ndim <= TT_MAX_DIMS, "tensor %s has %d dimensions", name, ndim);
    if (w->count == w->capacity) {
        w->capacity = w->capacity ? 2 * w->capacity : 64;
        w->entries = tt_xrealloc(w->entries, sizeof(tt_st_write_entry) * (size_t)w->capacity, "safetensors writer");
    }
    tt_st_write_entry *e = &w->entries[w->count++];
    memset(e, 0, sizeof(*e));
    e->name = tt_xstrdup(name);
    e->dtype = dtype;
    e->ndim = ndim;
    size_t elements = 1;
    for (int d = 0; d < ndim; d++) {
        e->shape[d] = shape[d];
        elements = tt_mul_size(elements, (size_t)shape[d], "a tensor size");
    }
    e->data = data;
    e->bytes = tt_mul_size(elements, tt_dtype_size(dtype), "a tensor size");
}

void tt_st_writer_add_metadata(tt_st_writer *w, const char *key, const char *value) {
    w->meta_keys = tt_xrealloc(w->meta_keys, sizeof(char *) * (size_t)(w->meta_count + 1), "safetensors metadata");
    w->meta_values = tt_xrealloc(w->meta_values, sizeof(char *) * (size_t)(w->meta_count + 1), "safetensors metadata");
    w->meta_keys[w->meta_count] = tt_xstrdup(key);
    w->meta_values[w->meta_count] = tt_xstrdup(value);
    w->meta_count++;
}

/* Writes all of buf or dies, removing the temporary file. */
static void write_all(int fd, const void *buf, size_t bytes, const char *tmp_path, const char *path) {
    const unsigned char *p = buf;
    while (bytes > 0) {
        size_t chunk = bytes > ((size_t)1 << 30) ? ((size_t)1 << 30) : bytes;
        ssize_t written = write(fd, p, chunk);
        if (written < 0 && errno == EINTR) continue;
        if (written <= 0) {
            int saved = errno;
            close(fd);
            unlink(tmp_path);
            tt_die("cannot write %s: %s (nothing was replaced; free disk space or change output_dir)", path,
                   strerror(written < 0 ? saved : EIO));
        }
        p += written;
        bytes -= (size_t)written;
    }
}

static void fsync_directory_of(const char *path) {
    char *copy = tt_xstrdup(path);
    int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
    free(copy);
}

/* The common tail of every atomic write: open path.tmp, let `emit` write, fsync, rename. */
typedef void (*emit_fn)(int fd, const void *context, const char *tmp_path, const char *path);

static void write_atomic_with(const char *path, emit_fn emit, const void *context) {
    char tmp_path[4200];
    snprintf(tmp_path, sizeof tmp_path, "%s.tmp", path);
    int fd = open(tmp_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) tt_die("cannot create %s: %s", tmp_path, strerror(errno));
    emit(fd, context, tmp_path, path);
    if (fsync(fd) != 0) {
        int saved = errno;
        close(fd);
        unlink(tmp_path);
        tt_die("cannot flush %s to disk: %s (nothing was replaced)", path, strerror(saved));
    }
    close(fd);
    if (rename(tmp_path, path) != 0) {
        int saved = errno;
        unlink(tmp_path);
        tt_die("cannot rename %s to %s: %s", tmp_path, path, strerror(saved));
    }
    fsync_directory_of(path);
}

typedef struct buffer_context {
    const void *data;
    size_t bytes;
} buffer_context;

static void emit_buffer(int fd, const void *context, const char *tmp_path, const char *path) {
    const buffer_context *b = context;
    write_all(fd, b->data, b->bytes, tmp_path, path);
}

void tt_write_file_atomic(const char *path, const void *data, size_t bytes) {
    buffer_context b = {data, bytes};
    write_atomic_with(path, emit_buffer, &b);
}

static void emit_safetensors(int fd, const void *context, const char *tmp_path, const char *path) {
    const tt_st_writer *w = context;
    json_t *root = json_object();
    if (w->meta_count > 0) {
        json_t *meta = json_object();
        for (int i = 0; i < w->meta_count; i++) json_object_set_new(meta, w->meta_keys[i], json_string(w->meta_values[i]));
        json_object_set_new(root, "__metadata__", meta);
    }
    size_t offset = 0;
    for (int i = 0; i < w->count; i++) {
        const tt_st_write_entry *e = &w->entries[i];
        json_t *entry = json_object();
        json_object_set_new(entry, "dtype", json_string(tt_dtype_safetensors_name(e->dtype)));
        json_t *shape = json_array();
        for (int d = 0; d < e->ndim; d++) json_array_append_new(shape, json_integer(e->shape[d]));
        json_object_set_new(entry, "shape", shape);
        json_t *offsets = json_array();
        json_array_append_new(offsets, json_integer((json_int_t)offset));
        json_array_append_new(offsets, json_integer((json_int_t)(offset + e->bytes)));
        json_object_set_new(entry, "data_offsets", offsets);
        json_object_set_new(root, e->name, entry);
        offset += e->bytes;
    }
    char *header = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(root);
    size_t header_bytes = strlen(header);
    size_t padded = (header_bytes + 7) / 8 * 8; /* data starts 8-byte aligned */
    unsigned char length[8];
    for (int i = 0; i < 8; i++) length[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    write_all(fd, length, 8, tmp_path, path);
    write_all(fd, header, header_bytes, tmp_path, path);
    write_all(fd, "        ", padded - header_bytes, tmp_path, path);
    free(header);
    for (int i = 0; i < w->count; i++) write_all(fd, w->entries[i].data, w->entries[i].bytes, tmp_path, path);
}

void tt_st_writer_commit(tt_st_writer *writer, const char *path) { write_atomic_with(path, emit_safetensors, writer); }

void tt_st_writer_free(tt_st_writer *w) {
    for (int i = 0; i < w->count; i++) free(w->entries[i].name);
    for (int i = 0; i < w->meta_count; i++) {
        free(w->meta_keys[i]);
        free(w->meta_values[i]);
    }
    free(w->entries);
    free(w->meta_keys);
    free(w->meta_values);
    memset(w, 0, sizeof(*w));
}
