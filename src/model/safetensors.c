/* Safetensors reading and writing; see safetensors.h for the format.
 *
 * Reading never trusts the file: the header length, the JSON, every dtype, shape and offset
 * are checked against the mapped size before a tensor pointer is formed, and every problem is
 * a tt_die naming the file and the tensor. Writing goes through tt_write_file_atomic's
 * temporary-file-then-rename sequence, streaming each tensor from the caller's buffer. */
#include "model/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/check.h"
#include "core/fault_inject.h"
#include "core/input_file.h"
#include "core/json_describe.h"

/* A header larger than this is not a model header but a corrupt length field (the reference
 * implementation has the same limit). */
#define TT_ST_MAX_HEADER_BYTES ((uint64_t)100 * 1000 * 1000)
/* More tensors than this in one file is not a checkpoint but a hostile or corrupt header: the
 * largest public checkpoints hold about 100k tensors over all their shards. Checked right after
 * the JSON parse (itself linear in the <= 100 MB header), before any per-tensor work. */
#define TT_ST_MAX_TENSORS 262144

#define TT_ST_CORRUPT "the file is truncated or corrupt; re-download or re-save it"

/* printf into a fresh heap string. */
static char *format_string(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *format_string(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    TT_CHECK(n >= 0, "bad format string %s", fmt);
    char *s = tt_xmalloc((size_t)n + 1, "a path");
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return s;
}

/* ------------------------------------------------------------------------------------------ */
/* Reading                                                                                    */

typedef struct span {
    size_t begin, end;
    int tensor;
} span;

static int compare_spans(const void *a, const void *b) {
    const span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return (x->tensor > y->tensor) - (x->tensor < y->tensor);
}

/* One header entry: checks and fills t; data_bytes is the size of the data area. */
static void parse_entry(const char *path, const char *name, json_t *entry, const unsigned char *data, size_t data_bytes,
                        tt_st_tensor *t) {
    if (!json_is_object(entry))
        tt_die(
            "%s: tensor '%s': the header entry is %s, expected an object with dtype, shape and data_offsets; " TT_ST_CORRUPT,
            path, name, tt_json_type_name(entry));
    json_t *dtype = json_object_get(entry, "dtype"), *shape = json_object_get(entry, "shape"),
           *offsets = json_object_get(entry, "data_offsets");
    if (!json_is_string(dtype))
        tt_die("%s: tensor '%s': \"dtype\" is %s, expected a string such as \"BF16\"; " TT_ST_CORRUPT, path, name,
               dtype ? tt_json_type_name(dtype) : "missing");
    if (!json_is_array(shape))
        tt_die("%s: tensor '%s': \"shape\" is %s, expected an array of integers; " TT_ST_CORRUPT, path, name,
               shape ? tt_json_type_name(shape) : "missing");
    if (!json_is_array(offsets) || json_array_size(offsets) != 2)
        tt_die("%s: tensor '%s': \"data_offsets\" is %s, expected [begin, end]; " TT_ST_CORRUPT, path, name,
               !offsets                 ? "missing"
               : json_is_array(offsets) ? "an array of the wrong length"
                                        : tt_json_type_name(offsets));

    if (tt_dtype_from_safetensors_name(json_string_value(dtype), &t->dtype) != 0)
        tt_die("%s: tensor '%s' has dtype %s; tiertrain reads F32, BF16, F16, F64, I32 and I64 (convert the "
               "checkpoint to one of these, e.g. with torch, and save it again)",
               path, name, json_string_value(dtype));
    if (json_array_size(shape) > TT_MAX_DIMS)
        tt_die("%s: tensor '%s' has %zu dimensions; tiertrain supports at most %d", path, name, json_array_size(shape),
               TT_MAX_DIMS);
    t->ndim = (int)json_array_size(shape);
    const size_t element_bytes = tt_dtype_size(t->dtype);
    size_t elements = 1;
    bool overflow = false;
    for (int d = 0; d < t->ndim; d++) {
        json_t *dim = json_array_get(shape, (size_t)d);
        if (!json_is_integer(dim) || json_integer_value(dim) < 0)
            tt_die("%s: tensor '%s': shape[%d] is not a non-negative integer; " TT_ST_CORRUPT, path, name, d);
        t->shape[d] = (int64_t)json_integer_value(dim);
        if (t->shape[d] != 0 && elements > SIZE_MAX / (uint64_t)t->shape[d]) overflow = true;
        else elements *= (size_t)t->shape[d];
    }
    if (overflow || elements > SIZE_MAX / element_bytes)
        tt_die("%s: tensor '%s': the shape's size overflows 64 bits; " TT_ST_CORRUPT, path, name);
    const size_t need = elements * element_bytes;

    json_t *begin_json = json_array_get(offsets, 0), *end_json = json_array_get(offsets, 1);
    if (!json_is_integer(begin_json) || !json_is_integer(end_json) || json_integer_value(begin_json) < 0 ||
        json_integer_value(end_json) < json_integer_value(begin_json))
        tt_die("%s: tensor '%s': data_offsets must be two integers with 0 <= begin <= end; " TT_ST_CORRUPT, path, name);
    const uint64_t begin = (uint64_t)json_integer_value(begin_json), end = (uint64_t)json_integer_value(end_json);
    if (end > data_bytes)
        tt_die("%s: tensor '%s': data_offsets [%llu, %llu] point past the end of the data (the file has %zu bytes of "
               "data); " TT_ST_CORRUPT,
               path, name, (unsigned long long)begin, (unsigned long long)end, data_bytes);
    if (end - begin != need)
        tt_die(
            "%s: tensor '%s': data_offsets [%llu, %llu] hold %llu bytes but shape and dtype %s need %zu; " TT_ST_CORRUPT,
            path, name, (unsigned long long)begin, (unsigned long long)end, (unsigned long long)(end - begin),
            tt_dtype_safetensors_name(t->dtype), need);
    t->data = data + begin;
    t->bytes = need;
    /* last, after every check: a tt_die above leaves nothing behind for tt_st_close to miss */
    t->name = tt_xstrdup(name);
}

/* The number of members of the header's top-level object, counted in one pass over the bytes
 * (strings skipped, escapes honoured) so that a header listing millions of tensors is refused
 * before the JSON parser builds them. Malformed JSON only has to not crash here: the parser
 * reports it next. */
static size_t count_top_level_members(const char *text, size_t bytes) {
    size_t members = 0;
    int depth = 0;
    bool in_string = false, any = false;
    for (size_t i = 0; i < bytes; i++) {
        const char c = text[i];
        if (in_string) {
            if (c == '\\') i++;
            else if (c == '"') in_string = false;
            continue;
        }
        if (c == '"') {
            in_string = true;
            if (depth == 1) any = true;
        } else if (c == '{' || c == '[') {
            depth++;
        } else if (c == '}' || c == ']') {
            depth--;
        } else if (c == ',' && depth == 1) {
            members++;
        }
    }
    return any ? members + 1 : 0;
}

/* Tensor names with their indices, sorted into tt_st_find's name index. */
typedef struct named_index {
    const char *name;
    int index;
} named_index;

static int compare_names(const void *a, const void *b) {
    return strcmp(((const named_index *)a)->name, ((const named_index *)b)->name);
}

/* Maps the file; from then on everything lives in *out, so tt_st_close releases a file a tt_die abandoned (the
 * fuzz harness does; tiertrain itself exits). */
static void map_file(const char *path, tt_st_file *out) {
    memset(out, 0, sizeof(*out));
    struct stat st;
    int fd = tt_open_regular_file(path, "a .safetensors file", &st);
    const size_t file_bytes = (size_t)st.st_size;
    if (file_bytes < 8) {
        close(fd);
        tt_die(
            "%s: %zu bytes is too short for a safetensors file (it starts with an 8-byte header length); " TT_ST_CORRUPT,
            path, file_bytes);
    }
    void *map = mmap(NULL, file_bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    int map_errno = errno;
    close(fd);
    if (map == MAP_FAILED) tt_die("cannot map %s into memory: %s", path, strerror(map_errno));
    out->path = tt_xstrdup(path);
    out->map = map;
    out->map_bytes = file_bytes;
}

/* The header's length (the first 8 bytes, little-endian), checked against the file and the ceiling. */
static size_t header_length(const char *path, const tt_st_file *file) {
    const unsigned char *bytes = file->map;
    const size_t file_bytes = file->map_bytes;
    uint64_t header_bytes = 0;
    for (int i = 7; i >= 0; i--) header_bytes = (header_bytes << 8) | bytes[i];
    if (header_bytes > file_bytes - 8)
        tt_die("%s: the header length field says %llu bytes but the file has only %zu bytes after it; the file is "
               "truncated or not safetensors; re-download or re-save it",
               path, (unsigned long long)header_bytes, file_bytes - 8);
    if (header_bytes > TT_ST_MAX_HEADER_BYTES)
        tt_die("%s: the header length field says %llu bytes, more than the %llu a safetensors header may have; the "
               "file is corrupt or not safetensors",
               path, (unsigned long long)header_bytes, (unsigned long long)TT_ST_MAX_HEADER_BYTES);
    return (size_t)header_bytes;
}

/* The header's tensors (their count bounded before the JSON parser runs) and its __metadata__. */
static void parse_header(const char *path, tt_st_file *out, size_t header_bytes) {
    const unsigned char *bytes = out->map;
    const size_t data_start = 8 + header_bytes, data_bytes = out->map_bytes - data_start;
    const size_t listed = count_top_level_members((const char *)bytes + 8, header_bytes);
    if (listed > TT_ST_MAX_TENSORS + 1) /* + 1: __metadata__ */
        tt_die("%s: the header lists %zu tensors, more than the %d one safetensors file may hold here; the file is "
               "corrupt, or re-save the checkpoint in shards",
               path, listed, TT_ST_MAX_TENSORS);
    json_error_t error;
    json_t *root = json_loadb((const char *)bytes + 8, header_bytes, JSON_REJECT_DUPLICATES, &error);
    if (!root)
        tt_die("%s: the header is not valid JSON (%s, at byte %d of the header); " TT_ST_CORRUPT, path, error.text,
               error.position);
    if (!json_is_object(root))
        tt_die("%s: the header is %s, expected a JSON object; " TT_ST_CORRUPT, path, tt_json_type_name(root));

    const size_t entries = json_object_size(root);
    const size_t tensors = entries - (json_object_get(root, "__metadata__") ? 1 : 0);
    if (tensors > TT_ST_MAX_TENSORS) /* exact now: the scan above allowed one more for __metadata__ */
        tt_die("%s: the header lists %zu tensors, more than the %d one safetensors file may hold here; the file is "
               "corrupt, or re-save the checkpoint in shards",
               path, tensors, TT_ST_MAX_TENSORS);
    out->tensors = tt_xcalloc(entries + 1, sizeof(tt_st_tensor), "the safetensors index");
    const char *name;
    json_t *entry;
    json_object_foreach(root, name, entry) {
        if (strcmp(name, "__metadata__") == 0) {
            if (!json_is_object(entry))
                tt_die("%s: \"__metadata__\" is %s, expected an object of strings; " TT_ST_CORRUPT, path,
                       tt_json_type_name(entry));
            const char *key;
            json_t *value;
            json_object_foreach(entry, key, value) {
                if (!json_is_string(value))
                    tt_die("%s: \"__metadata__\" key '%s' is %s, expected a string; " TT_ST_CORRUPT, path, key,
                           tt_json_type_name(value));
            }
            continue;
        }
        parse_entry(path, name, entry, bytes + data_start, data_bytes, &out->tensors[out->count]);
        out->count++;
    }
    json_decref(root);
}

/* No two tensors may share a byte. */
static void check_no_overlap(const char *path, const tt_st_file *out, size_t header_bytes) {
    const unsigned char *data = (const unsigned char *)out->map + 8 + header_bytes;
    /* sorted by begin, each starts at or after the furthest
     * end seen so far (empty tensors share nothing). */
    span *spans = tt_xcalloc((size_t)out->count + 1, sizeof(span), "the safetensors index");
    for (int i = 0; i < out->count; i++) {
        spans[i].begin = (size_t)((const unsigned char *)out->tensors[i].data - data);
        spans[i].end = spans[i].begin + out->tensors[i].bytes;
        spans[i].tensor = i;
    }
    qsort(spans, (size_t)out->count, sizeof(span), compare_spans);
    size_t furthest_end = 0;
    int furthest = -1;
    span overlap[2] = {{0, 0, -1}, {0, 0, -1}};
    for (int i = 0; i < out->count && overlap[0].tensor < 0; i++) {
        if (spans[i].begin == spans[i].end) continue;
        if (furthest >= 0 && spans[i].begin < furthest_end) {
            overlap[0] = spans[furthest];
            overlap[1] = spans[i];
        }
        if (spans[i].end > furthest_end || furthest < 0) {
            furthest_end = spans[i].end;
            furthest = i;
        }
    }
    free(spans);
    if (overlap[0].tensor >= 0)
        tt_die(
            "%s: tensors '%s' (bytes %zu to %zu) and '%s' (bytes %zu to %zu) overlap in the data area; " TT_ST_CORRUPT,
            path, out->tensors[overlap[0].tensor].name, overlap[0].begin, overlap[0].end,
            out->tensors[overlap[1].tensor].name, overlap[1].begin, overlap[1].end);
}

/* A name index, so that looking every tensor up (the loaders, a sharded index) is n log n rather than n^2 string
 * compares. Names are unique: duplicates were refused. */
static void build_name_index(tt_st_file *out) {
    named_index *order = tt_xmalloc(sizeof(named_index) * ((size_t)out->count + 1), "the safetensors index");
    for (int i = 0; i < out->count; i++) order[i] = (named_index){out->tensors[i].name, i};
    qsort(order, (size_t)out->count, sizeof(named_index), compare_names);
    out->by_name = tt_xmalloc(sizeof(int) * ((size_t)out->count + 1), "the safetensors index");
    for (int i = 0; i < out->count; i++) out->by_name[i] = order[i].index;
    free(order);
}

void tt_st_open(const char *path, tt_st_file *out) {
    map_file(path, out);
    const size_t header_bytes = header_length(path, out);
    parse_header(path, out, header_bytes);
    check_no_overlap(path, out, header_bytes);
    build_name_index(out);
}

void tt_st_close(tt_st_file *file) {
    if (file->map) munmap(file->map, file->map_bytes);
    for (int i = 0; i < file->count; i++) free(file->tensors[i].name);
    free(file->tensors);
    free(file->by_name);
    free(file->path);
    memset(file, 0, sizeof(*file));
}

const tt_st_tensor *tt_st_find(const tt_st_file *file, const char *name) {
    int lo = 0, hi = file->by_name ? file->count : 0;
    while (lo < hi) {
        const int mid = lo + (hi - lo) / 2;
        const tt_st_tensor *t = &file->tensors[file->by_name[mid]];
        const int c = strcmp(name, t->name);
        if (c == 0) return t;
        if (c < 0) hi = mid;
        else lo = mid + 1;
    }
    return NULL;
}

static bool is_regular_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

void tt_st_model_open(const char *dir, tt_st_model *out) {
    memset(out, 0, sizeof(*out));
    char *index_path = format_string("%s/model.safetensors.index.json", dir);
    char *single_path = format_string("%s/model.safetensors", dir);
    if (!is_regular_file(index_path)) {
        if (!is_regular_file(single_path)) {
            struct stat st;
            if (stat(dir, &st) != 0)
                tt_die("model directory %s: %s; point base_model at a Hugging Face model directory", dir,
                       strerror(errno));
            tt_die("%s holds neither model.safetensors nor model.safetensors.index.json; point base_model at a "
                   "Hugging Face model directory (with config.json and its safetensors weights)",
                   dir);
        }
        out->files = tt_xcalloc(1, sizeof(tt_st_file), "safetensors files");
        tt_st_open(single_path, &out->files[0]);
        out->file_count = 1;
        free(index_path);
        free(single_path);
        return;
    }
    free(single_path);

    /* the index through the same regular-file check as the shards, and no larger than a header */
    json_error_t error;
    json_t *root = tt_json_load_regular_file(index_path, JSON_REJECT_DUPLICATES, (size_t)TT_ST_MAX_HEADER_BYTES,
                                             "a model.safetensors.index.json", &error);
    if (!root)
        tt_die("%s:%d:%d: not valid JSON: %s; re-download the model's index file", index_path, error.line, error.column,
               error.text);
    if (!json_is_object(root)) tt_die("%s: expected a JSON object with \"weight_map\"", index_path);
    json_t *weight_map = json_object_get(root, "weight_map");
    if (!json_is_object(weight_map))
        tt_die("%s: \"weight_map\" is %s, expected an object of tensor name -> shard file; re-download the model's "
               "index file",
               index_path, weight_map ? tt_json_type_name(weight_map) : "missing");
    if (json_object_size(weight_map) == 0)
        tt_die("%s: \"weight_map\" lists no tensors; re-download the model's index file", index_path);

    /* Open each distinct shard once. */
    out->files = tt_xcalloc(json_object_size(weight_map) + 1, sizeof(tt_st_file), "safetensors files");
    const char *name;
    json_t *value;
    json_object_foreach(weight_map, name, value) {
        if (!json_is_string(value))
            tt_die("%s: weight_map['%s'] is %s, expected a shard file name", index_path, name,
                   tt_json_type_name(value));
        const char *shard = json_string_value(value);
        if (shard[0] == 0 || strchr(shard, '/') || strcmp(shard, ".") == 0 || strcmp(shard, "..") == 0)
            tt_die("%s: weight_map['%s'] is \"%s\"; a shard must be a file name in the same directory", index_path,
                   name, shard);
        char *shard_path = format_string("%s/%s", dir, shard);
        tt_st_file *file = NULL;
        for (int i = 0; i < out->file_count && !file; i++)
            if (strcmp(out->files[i].path, shard_path) == 0) file = &out->files[i];
        if (!file) {
            if (!is_regular_file(shard_path))
                tt_die("%s names shard %s for tensor '%s', but %s does not exist; the download is incomplete "
                       "(download every model-*.safetensors file)",
                       index_path, shard, name, shard_path);
            file = &out->files[out->file_count];
            tt_st_open(shard_path, file);
            out->file_count++;
        }
        free(shard_path);
        if (!tt_st_find(file, name))
            tt_die("%s names %s as the shard of tensor '%s', but that file does not hold it; the index and the shards "
                   "do not belong together (re-download them)",
                   index_path, shard, name);
    }
    json_decref(root);
    free(index_path);
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

/* ------------------------------------------------------------------------------------------ */
/* Writing                                                                                    */

void tt_st_writer_init(tt_st_writer *writer) { memset(writer, 0, sizeof(*writer)); }

void tt_st_writer_add(tt_st_writer *w, const char *name, tt_dtype dtype, int ndim, const int64_t *shape,
                      const void *data) {
    TT_CHECK(name && name[0] && strcmp(name, "__metadata__") != 0, "bad tensor name");
    TT_CHECK((int)dtype >= 0 && (int)dtype < TT_DTYPE_COUNT, "tensor %s has dtype %d", name, (int)dtype);
    TT_CHECK(ndim >= 0 && ndim <= TT_MAX_DIMS, "tensor %s has %d dimensions", name, ndim);
    for (int i = 0; i < w->count; i++) TT_CHECK(strcmp(w->entries[i].name, name) != 0, "tensor %s added twice", name);
    if (w->count == w->capacity) {
        w->capacity = w->capacity ? 2 * w->capacity : 64;
        w->entries = tt_xrealloc(w->entries, sizeof(tt_st_write_entry) * (size_t)w->capacity, "safetensors writer");
    }
    tt_st_write_entry *e = &w->entries[w->count];
    memset(e, 0, sizeof(*e));
    e->dtype = dtype;
    e->ndim = ndim;
    size_t elements = 1;
    for (int d = 0; d < ndim; d++) {
        TT_CHECK(shape[d] >= 0, "tensor %s has shape[%d] = %lld", name, d, (long long)shape[d]);
        e->shape[d] = shape[d];
        elements = tt_mul_size(elements, (size_t)shape[d], "a tensor size");
    }
    e->bytes = tt_mul_size(elements, tt_dtype_size(dtype), "a tensor size");
    e->data = data; /* NULL: streamed (tt_st_writer_write) */
    e->name = tt_xstrdup(name);
    w->count++;
}

void tt_st_writer_add_metadata(tt_st_writer *w, const char *key, const char *value) {
    for (int i = 0; i < w->meta_count; i++)
        if (strcmp(w->meta_keys[i], key) == 0) { /* the last value wins */
            free(w->meta_values[i]);
            w->meta_values[i] = tt_xstrdup(value);
            return;
        }
    w->meta_keys = tt_xrealloc(w->meta_keys, sizeof(char *) * (size_t)(w->meta_count + 1), "safetensors metadata");
    w->meta_values = tt_xrealloc(w->meta_values, sizeof(char *) * (size_t)(w->meta_count + 1), "safetensors metadata");
    w->meta_keys[w->meta_count] = tt_xstrdup(key);
    w->meta_values[w->meta_count] = tt_xstrdup(value);
    w->meta_count++;
}

/* An atomic write in progress: the temporary file's descriptor and both names. */
typedef struct atomic_file {
    int fd;
    char *tmp_path;
    const char *path;
} atomic_file;

static void atomic_fail(atomic_file *a, const char *doing, int error) __attribute__((__noreturn__));
static void atomic_fail(atomic_file *a, const char *doing, int error) {
    if (a->fd >= 0) close(a->fd);
    unlink(a->tmp_path);
    tt_die("cannot %s %s: %s (the previous file, if any, is unchanged; free disk space or choose another output "
           "directory)",
           doing, a->path, strerror(error));
}

static void atomic_open(atomic_file *a, const char *path) {
    a->path = path;
    a->tmp_path = format_string("%s.tmp", path);
    a->fd = open(a->tmp_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (a->fd < 0) {
        int error = errno;
        tt_die("cannot create %s: %s (check that the directory exists and is writable)", a->tmp_path, strerror(error));
    }
}

static void atomic_write(atomic_file *a, const void *buf, size_t bytes) {
    const unsigned char *p = buf;
    while (bytes > 0) {
        size_t chunk = bytes > ((size_t)1 << 30) ? ((size_t)1 << 30) : bytes;
        const int injected = tt_fault_before_write(chunk); /* a test hook (fault_inject.h); 0 outside tests */
        if (injected) atomic_fail(a, "write", injected);
        ssize_t written = write(a->fd, p, chunk);
        if (written < 0 && errno == EINTR) continue;
        if (written < 0) atomic_fail(a, "write", errno);
        if (written == 0) atomic_fail(a, "write", EIO);
        p += written;
        bytes -= (size_t)written;
    }
}

static void fsync_directory_of(const char *path) {
    const char *slash = strrchr(path, '/');
    char *dir = slash == path ? tt_xstrdup("/")
                : slash       ? format_string("%.*s", (int)(slash - path), path)
                              : tt_xstrdup(".");
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd); /* best effort: some file systems refuse fsync on directories */
        close(fd);
    }
    free(dir);
}

static void atomic_commit(atomic_file *a) {
    if (fsync(a->fd) != 0) atomic_fail(a, "flush to disk", errno);
    int fd = a->fd;
    a->fd = -1;
    if (close(fd) != 0) atomic_fail(a, "close", errno);
    if (rename(a->tmp_path, a->path) != 0) {
        int error = errno;
        unlink(a->tmp_path);
        tt_die("cannot rename %s to %s: %s", a->tmp_path, a->path, strerror(error));
    }
    fsync_directory_of(a->path);
    free(a->tmp_path);
    a->tmp_path = NULL;
}

void tt_write_file_atomic(const char *path, const void *data, size_t bytes) {
    atomic_file a;
    atomic_open(&a, path);
    atomic_write(&a, data, bytes);
    atomic_commit(&a);
}

/* The header JSON (unpadded), tensors in the order added, __metadata__ first. */
static char *build_header(const tt_st_writer *w, const char *path) {
    json_t *root = json_object();
    if (w->meta_count > 0) {
        json_t *meta = json_object();
        for (int i = 0; i < w->meta_count; i++)
            if (json_object_set_new(meta, w->meta_keys[i], json_string(w->meta_values[i])) != 0)
                tt_die("%s: metadata key '%s' or its value is not valid UTF-8", path, w->meta_keys[i]);
        json_object_set_new(root, "__metadata__", meta);
    }
    size_t offset = 0;
    for (int i = 0; i < w->count; i++) {
        const tt_st_write_entry *e = &w->entries[i];
        TT_CHECK(offset <= (size_t)INT64_MAX - e->bytes, "safetensors data size overflows");
        json_t *entry = json_object();
        json_object_set_new(entry, "dtype", json_string(tt_dtype_safetensors_name(e->dtype)));
        json_t *shape = json_array();
        for (int d = 0; d < e->ndim; d++) json_array_append_new(shape, json_integer((json_int_t)e->shape[d]));
        json_object_set_new(entry, "shape", shape);
        json_t *offsets = json_array();
        json_array_append_new(offsets, json_integer((json_int_t)offset));
        json_array_append_new(offsets, json_integer((json_int_t)(offset + e->bytes)));
        json_object_set_new(entry, "data_offsets", offsets);
        if (json_object_set_new(root, e->name, entry) != 0)
            tt_die("%s: tensor name '%s' is not valid UTF-8", path, e->name);
        offset += e->bytes;
    }
    char *header = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(root);
    if (!header) tt_die("out of host memory encoding the header of %s", path);
    return header;
}

void tt_st_writer_begin(tt_st_writer *w, const char *path) {
    TT_CHECK(!w->stream, "a safetensors writer begun twice");
    char *header = build_header(w, path);
    const size_t header_bytes = strlen(header);
    const size_t padded = (header_bytes + 7) / 8 * 8; /* 8 + padded is a multiple of 8: data starts aligned */
    unsigned char length[8];
    for (int i = 0; i < 8; i++) length[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    atomic_file *a = tt_xcalloc(1, sizeof *a, "an output file");
    atomic_open(a, tt_xstrdup(path)); /* the caller's path may not outlive this call */
    atomic_write(a, length, 8);
    atomic_write(a, header, header_bytes);
    atomic_write(a, "        ", padded - header_bytes);
    free(header);
    w->stream = a;
    w->streamed = 0;
    w->payload = 0;
    for (int i = 0; i < w->count; i++) w->payload += w->entries[i].bytes;
}

void tt_st_writer_write(tt_st_writer *w, const void *data, size_t bytes) {
    TT_CHECK(w->stream && w->streamed + bytes <= w->payload, "%zu bytes past the %zu of the tensors", bytes,
             w->payload - w->streamed);
    atomic_write(w->stream, data, bytes);
    w->streamed += bytes;
}

void tt_st_writer_finish(tt_st_writer *w) {
    TT_CHECK(w->stream && w->streamed == w->payload, "%zu of the tensors' %zu bytes written", w->streamed, w->payload);
    atomic_file *a = w->stream;
    atomic_commit(a);
    free((char *)a->path);
    free(a);
    w->stream = NULL;
}

void tt_st_writer_commit(tt_st_writer *w, const char *path) {
    for (int i = 0; i < w->count; i++)
        TT_CHECK(w->entries[i].data || w->entries[i].bytes == 0, "tensor %s has no data", w->entries[i].name);
    tt_st_writer_begin(w, path);
    for (int i = 0; i < w->count; i++) tt_st_writer_write(w, w->entries[i].data, w->entries[i].bytes);
    tt_st_writer_finish(w);
}

void tt_st_writer_free(tt_st_writer *w) {
    if (w->stream) { /* begun, never finished (an error): its path.tmp stays, the path is untouched */
        atomic_file *a = w->stream;
        if (a->fd >= 0) close(a->fd);
        free(a->tmp_path);
        free((char *)a->path);
        free(a);
    }
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
