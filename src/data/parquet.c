/* Parquet rows as JSON (parquet.h). The format: https://github.com/apache/parquet-format (parquet.thrift for the
 * footer's and the pages' structures, Encodings.md for PLAIN, the RLE / bit-packing hybrid and dictionaries). */
#include "data/parquet.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <snappy-c.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include "core/check.h"
#include "data/json_records.h"
#include "data/thrift_compact.h"

/* parquet.thrift's enums */
enum { PQ_BOOLEAN = 0, PQ_INT32 = 1, PQ_INT64 = 2, PQ_INT96 = 3, PQ_FLOAT = 4, PQ_DOUBLE = 5, PQ_BYTE_ARRAY = 6 };
enum { PQ_REQUIRED = 0, PQ_OPTIONAL = 1, PQ_REPEATED = 2 };
enum { PQ_UNCOMPRESSED = 0, PQ_SNAPPY = 1, PQ_GZIP = 2, PQ_ZSTD = 6 };
enum { PQ_DATA_PAGE = 0, PQ_DICTIONARY_PAGE = 2, PQ_DATA_PAGE_V2 = 3 };
enum { PQ_PLAIN = 0, PQ_PLAIN_DICTIONARY = 2, PQ_RLE = 3, PQ_RLE_DICTIONARY = 8 };

enum { MAX_SCHEMA = 100000, MAX_GROUPS = 1000000, MAX_PAGE_BYTES = 1 << 30 };

typedef struct pq_value {
    bool null;
    bool dict; /* BYTE_ARRAY: the text is the chunk's dictionary's (dict_text), not copied */
    union {
        int64_t i;
        double d;
        struct {
            uint64_t at; /* into the column's text */
            uint32_t len;
        } s;
    } v;
} pq_value;

typedef struct pq_leaf { /* a leaf column the rows take: its chunk's levels and values in the loaded row group */
    char *name;          /* its own name (a list element's field) */
    int type;            /* physical type */
    int leaf;            /* its index among the schema's leaves: its chunk's index in a row group */
    int max_def, max_rep;
    uint8_t *defs, *reps; /* [levels] (a level each value slot; none where the maximum is 0) */
    int64_t levels, levels_cap;
    pq_value *values;        /* [present]: the slots at max_def, in order */
    int64_t present, cursor; /* cursor: the next value a row takes */
    char *text;              /* BYTE_ARRAY values' bytes */
    size_t text_used, text_cap;
    pq_value *dict; /* the chunk's dictionary */
    int64_t dict_count;
    char *dict_text;
    size_t dict_text_used, dict_text_cap;
} pq_leaf;

typedef struct pq_column { /* a column at the top level of the schema */
    char *name;
    pq_leaf *leaves; /* [leaf_count]: the column itself (flat), or a list element's fields */
    int leaf_count;
    bool list;           /* a list (repeated): of primitives, or of structs of primitives */
    bool element_struct; /* the list's elements are objects of the leaves */
    int def_present;     /* list: the definition level from which the column is not null */
    int def_list;        /* list: from which the row has an entry (below: an empty list) */
    int def_element;     /* list: from which an entry is not null */
    int64_t *row_start;  /* list: [rows + 1] each row's first level in the loaded row group */
} pq_column;

typedef struct pq_chunk {
    int type, codec;
    int64_t num_values, start, size;
    bool external;
} pq_chunk;

typedef struct pq_group {
    int64_t rows;
    pq_chunk *chunks; /* [leaf_count] */
} pq_group;

struct tt_parquet {
    char *path;
    uint8_t *map;
    size_t size;
    pq_column *columns;
    int column_count, leaf_count;
    pq_group *groups;
    int64_t group_count, total_rows;
    int64_t next_group, group_rows, row_in_group, row;
    uint8_t *page; /* a decompressed page */
    size_t page_cap;
    uint32_t *indices; /* a page's levels or dictionary indices */
    size_t indices_cap;
    void *schema;       /* the footer's schema while it is read */
    void *schema_nodes; /* and its columns' subtrees */
    char where[4400];
};

/* Frees p, then dies with the message (the fuzz harness, which catches tt_die, holds nothing). */
static void pq_die(tt_parquet *p, const char *fmt, ...) {
    char message[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    char path[1024];
    snprintf(path, sizeof path, "%s", p->path);
    tt_parquet_close(p);
    tt_die("Parquet file %s: %s", path, message);
}

static uint32_t read_u32(const uint8_t *b) {
    return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

static uint64_t read_u64(const uint8_t *b) { return (uint64_t)read_u32(b) | (uint64_t)read_u32(b + 4) << 32; }

/* ---- the footer ---- */

typedef struct schema_element {
    char name[256]; /* "" when the file's name is over 255 bytes or not UTF-8 (the column is then left out) */
    int type, repetition, children;
    bool has_type;
    bool list, map; /* annotated LIST, or MAP / MAP_KEY_VALUE (converted_type, or logicalType's union member) */
} schema_element;

/* logicalType, a union: which member is set (parquet.thrift: 2 MAP, 3 LIST) */
static void read_logical_type(tt_thrift *t, schema_element *e) {
    tt_thrift_struct_begin(t);
    int16_t id;
    int type;
    while (tt_thrift_next_field(t, &id, &type)) {
        if (id == 2) e->map = true;
        if (id == 3) e->list = true;
        tt_thrift_skip(t, type);
    }
    tt_thrift_struct_end(t);
}

static void read_schema_element(tt_thrift *t, schema_element *e) {
    memset(e, 0, sizeof *e);
    e->type = -1;
    tt_thrift_struct_begin(t);
    int16_t id;
    int type;
    while (tt_thrift_next_field(t, &id, &type)) {
        if (id == 1 && type == TT_THRIFT_I32) {
            e->type = (int)tt_thrift_int(t, type);
            e->has_type = true;
        } else if (id == 3 && type == TT_THRIFT_I32) e->repetition = (int)tt_thrift_int(t, type);
        else if (id == 4 && type == TT_THRIFT_BINARY) {
            size_t len;
            const uint8_t *s = tt_thrift_binary(t, &len);
            /* a JSON key: UTF-8 without NUL, whole (a cut could split a character) */
            if (len < sizeof e->name && tt_utf8_first_invalid((const char *)s, len) < 0 && !memchr(s, 0, len)) {
                memcpy(e->name, s, len);
                e->name[len] = 0;
            }
        } else if (id == 5 && type == TT_THRIFT_I32) e->children = (int)tt_thrift_int(t, type);
        else if (id == 6 && type == TT_THRIFT_I32) {
            const int64_t converted = tt_thrift_int(t, type);
            e->map |= converted == 1 || converted == 2; /* MAP, MAP_KEY_VALUE */
            e->list |= converted == 3;                  /* LIST */
        } else if (id == 10 && type == TT_THRIFT_STRUCT) read_logical_type(t, e);
        else tt_thrift_skip(t, type);
    }
    tt_thrift_struct_end(t);
}

static void read_column_meta(tt_thrift *t, pq_chunk *c) {
    tt_thrift_struct_begin(t);
    int16_t id;
    int type;
    int64_t data_page = -1, dictionary_page = -1;
    while (tt_thrift_next_field(t, &id, &type)) {
        if (id == 1 && type == TT_THRIFT_I32) c->type = (int)tt_thrift_int(t, type);
        else if (id == 4 && type == TT_THRIFT_I32) c->codec = (int)tt_thrift_int(t, type);
        else if (id == 5 && type == TT_THRIFT_I64) c->num_values = tt_thrift_int(t, type);
        else if (id == 7 && type == TT_THRIFT_I64) c->size = tt_thrift_int(t, type);
        else if (id == 9 && type == TT_THRIFT_I64) data_page = tt_thrift_int(t, type);
        else if (id == 11 && type == TT_THRIFT_I64) dictionary_page = tt_thrift_int(t, type);
        else tt_thrift_skip(t, type);
    }
    tt_thrift_struct_end(t);
    /* the chunk starts at its dictionary page where it has one (writers set 0 for none) */
    c->start = dictionary_page > 0 && dictionary_page < data_page ? dictionary_page : data_page;
}

static void read_column_chunk(tt_thrift *t, pq_chunk *c) {
    tt_thrift_struct_begin(t);
    int16_t id;
    int type;
    while (tt_thrift_next_field(t, &id, &type)) {
        if (id == 1 && type == TT_THRIFT_BINARY) {
            c->external = true; /* the chunk is in another file */
            tt_thrift_skip(t, type);
        } else if (id == 3 && type == TT_THRIFT_STRUCT) read_column_meta(t, c);
        else tt_thrift_skip(t, type);
    }
    tt_thrift_struct_end(t);
}

static void read_row_group(tt_parquet *p, tt_thrift *t, pq_group *g) {
    tt_thrift_struct_begin(t);
    int16_t id;
    int type;
    bool columns = false;
    while (tt_thrift_next_field(t, &id, &type)) {
        if (id == 1 && type == TT_THRIFT_LIST) {
            if (columns) pq_die(p, "a row group has two lists of column chunks");
            int element;
            int64_t n = tt_thrift_list_begin(t, &element);
            if (t->error[0]) break;
            if (element != TT_THRIFT_STRUCT || n != p->leaf_count) {
                tt_thrift_list_end(t);
                pq_die(p, "a row group has %lld column chunks; the schema has %d columns", (long long)n, p->leaf_count);
            }
            g->chunks = tt_xcalloc((size_t)(n ? n : 1), sizeof(pq_chunk), "Parquet column chunks");
            for (int64_t i = 0; i < n && !t->error[0]; i++) read_column_chunk(t, &g->chunks[i]);
            tt_thrift_list_end(t);
            columns = true;
        } else if (id == 3 && type == TT_THRIFT_I64) g->rows = tt_thrift_int(t, type);
        else tt_thrift_skip(t, type);
    }
    tt_thrift_struct_end(t);
    if (!t->error[0] && !columns) pq_die(p, "a row group has no column chunks");
}

static bool readable_type(int type) {
    return type == PQ_BOOLEAN || type == PQ_INT32 || type == PQ_INT64 || type == PQ_FLOAT || type == PQ_DOUBLE ||
           type == PQ_BYTE_ARRAY;
}

/* A node of a top-level column's subtree: its parent (-1: the top) and its levels (optional and repeated nodes from
 * the top down to it, itself included). */
typedef struct schema_node {
    const schema_element *e;
    int parent, def, rep;
} schema_node;

static pq_leaf *add_leaf(pq_column *col, const schema_node *n, int leaf) {
    pq_leaf *l = &col->leaves[col->leaf_count++];
    l->name = tt_xstrdup(n->e->name);
    l->type = n->e->type;
    l->leaf = leaf;
    l->max_def = n->def;
    l->max_rep = n->rep;
    return l;
}

/* The column a top-level subtree (nodes[0..count), depth first) reads as, or false (left out): a primitive
 * (optional or required), or a list, in the standard three levels (<optional|required> group (LIST) { repeated
 * group list { <optional|required> element } }) or the older two (a repeated group, or a repeated primitive), whose
 * element is a primitive or a struct of primitives. first_leaf: the subtree's first leaf among the schema's. */
static bool build_column(pq_column *col, const schema_node *nodes, int count, int first_leaf) {
    int repeated = -1, leaves = 0;
    for (int i = 0; i < count; i++) {
        if (!nodes[i].e->name[0] || nodes[i].e->map) return false; /* a name JSON cannot hold; a map */
        if (nodes[i].e->repetition == PQ_REPEATED) {
            if (repeated >= 0) return false; /* a list of lists, a map of lists: not read */
            repeated = i;
        }
        if (nodes[i].e->children == 0) {
            leaves++;
            if (!nodes[i].e->has_type || !readable_type(nodes[i].e->type)) return false;
        }
    }
    col->leaves = tt_xcalloc((size_t)leaves, sizeof(pq_leaf), "Parquet columns");
    if (count == 1 && repeated < 0) { /* a primitive */
        add_leaf(col, &nodes[0], first_leaf);
        return true;
    }
    /* a list: the repeated node at the top (its own list, the format's older form), or the only child of a group
     * annotated LIST; anything else (a struct, a repeated field inside a struct) is not read */
    if (repeated < 0 ||
        (repeated != 0 && (nodes[repeated].parent != 0 || nodes[0].e->children != 1 || !nodes[0].e->list)))
        return false;
    /* the element: inside a LIST group, the repeated node's only child in the three-level form, else the repeated
     * node itself (the format's backward-compatibility rules: a repeated group of several fields, or one named array
     * or <list>_tuple); a repeated node at the top is the element itself */
    const schema_node *r = &nodes[repeated];
    char tuple[300];
    snprintf(tuple, sizeof tuple, "%s_tuple", nodes[0].e->name);
    int element = repeated;
    if (repeated != 0 && r->e->children == 1 && strcmp(r->e->name, "array") != 0 && strcmp(r->e->name, tuple) != 0)
        element = repeated + 1;
    const schema_node *el = &nodes[element];
    /* nothing else: the element a primitive, or a group of primitives that closes the subtree */
    if (el->e->children == 0) {
        if (element != count - 1) return false;
        add_leaf(col, el, first_leaf);
    } else {
        if (element + el->e->children != count - 1) return false;
        for (int i = element + 1; i < count; i++) {
            if (nodes[i].e->children != 0 || nodes[i].parent != element) return false;
            add_leaf(col, &nodes[i], first_leaf + (i - element - 1));
        }
        col->element_struct = true;
    }
    col->list = true;
    col->def_present = repeated == 0 ? 0 : nodes[0].def;
    col->def_list = r->def;
    col->def_element = el->def;
    return true;
}

/* The schema's top-level columns (build_column); the leaves of those left out are counted (their chunks are skipped)
 * and the columns named in nested. */
static void read_schema(tt_parquet *p, const schema_element *e, int64_t count, char *nested, size_t nested_size) {
    if (count < 1 || e[0].children < 0 || e[0].children > count - 1)
        pq_die(p, "the schema's root has %d children of %lld elements", e[0].children, (long long)count);
    p->columns = tt_xcalloc((size_t)e[0].children + 1, sizeof(pq_column), "Parquet columns");
    p->schema_nodes = tt_xcalloc((size_t)count, sizeof(schema_node), "Parquet schema");
    schema_node *nodes = p->schema_nodes;
    int64_t at = 1;
    for (int c = 0; c < e[0].children; c++) {
        if (at >= count) pq_die(p, "the schema ends inside the root's children");
        const int64_t top = at;
        /* the subtree, depth first: each node's parent and levels */
        int stack[64], open_children[64], depth = 0, n = 0, leaves = 0;
        for (bool first = true; first || depth > 0; first = false) {
            if (at >= count) pq_die(p, "the schema ends inside column %s", e[top].name);
            const schema_element *x = &e[at++];
            if (x->children < 0 || x->children > count)
                pq_die(p, "column %s: a schema element has %d children", e[top].name, x->children);
            const int parent = depth ? stack[depth - 1] : -1;
            nodes[n] = (schema_node){x, parent, (parent >= 0 ? nodes[parent].def : 0) + (x->repetition != PQ_REQUIRED),
                                     (parent >= 0 ? nodes[parent].rep : 0) + (x->repetition == PQ_REPEATED)};
            if (depth) open_children[depth - 1]--;
            if (x->children > 0) {
                if (depth == 64) pq_die(p, "column %s is nested more than 64 deep", e[top].name);
                stack[depth] = n;
                open_children[depth++] = x->children;
            } else leaves++;
            n++;
            while (depth > 0 && open_children[depth - 1] == 0) depth--;
        }
        pq_column *col = &p->columns[p->column_count];
        if (build_column(col, nodes, n, p->leaf_count)) {
            col->name = tt_xstrdup(e[top].name);
            p->column_count++;
        } else {
            for (int l = 0; l < col->leaf_count; l++) free(col->leaves[l].name);
            free(col->leaves);
            memset(col, 0, sizeof *col);
            size_t used = strlen(nested);
            snprintf(nested + used, nested_size - used, "%s%s", used ? ", " : "", e[top].name);
        }
        p->leaf_count += leaves;
    }
    if (at != count) pq_die(p, "the schema has %lld elements past the root's columns", (long long)(count - at));
    free(p->schema_nodes);
    p->schema_nodes = NULL;
}

static void read_footer(tt_parquet *p) {
    if (p->size < 12 || memcmp(p->map, "PAR1", 4) != 0 || memcmp(p->map + p->size - 4, "PAR1", 4) != 0)
        pq_die(p, "no PAR1 magic at its start and end: not a Parquet file (or an encrypted one, PARE)");
    const uint32_t footer_len = read_u32(p->map + p->size - 8);
    if (footer_len > p->size - 12)
        pq_die(p, "the footer's length %u is past the file's %zu bytes", footer_len, p->size);
    tt_thrift t;
    tt_thrift_init(&t, p->map + p->size - 8 - footer_len, footer_len);
    schema_element *schema;
    int64_t schema_count = 0;
    bool has_schema = false, has_groups = false;
    char nested[1024] = "";
    tt_thrift_struct_begin(&t);
    int16_t id;
    int type;
    while (tt_thrift_next_field(&t, &id, &type)) {
        if (id == 2 && type == TT_THRIFT_LIST) {
            if (has_schema) pq_die(p, "its footer has two schemas");
            int element;
            schema_count = tt_thrift_list_begin(&t, &element);
            if (t.error[0]) break;
            if (element != TT_THRIFT_STRUCT || schema_count < 1 || schema_count > MAX_SCHEMA)
                pq_die(p, "the schema is a list of %lld elements of type %d", (long long)schema_count, element);
            schema = tt_xcalloc((size_t)schema_count, sizeof *schema, "Parquet schema");
            p->schema = schema; /* (freed by close if the schema is refused) */
            for (int64_t i = 0; i < schema_count && !t.error[0]; i++) read_schema_element(&t, &schema[i]);
            tt_thrift_list_end(&t);
            if (!t.error[0]) read_schema(p, schema, schema_count, nested, sizeof nested);
            free(schema);
            schema = p->schema = NULL;
            has_schema = true;
        } else if (id == 3 && type == TT_THRIFT_I64) p->total_rows = tt_thrift_int(&t, type);
        else if (id == 4 && type == TT_THRIFT_LIST && has_schema) {
            if (has_groups) pq_die(p, "its footer has two lists of row groups");
            int element;
            int64_t n = tt_thrift_list_begin(&t, &element);
            if (t.error[0]) break;
            if (element != TT_THRIFT_STRUCT || n > MAX_GROUPS)
                pq_die(p, "the row groups are a list of %lld elements of type %d", (long long)n, element);
            p->groups = tt_xcalloc((size_t)(n ? n : 1), sizeof(pq_group), "Parquet row groups");
            p->group_count = n;
            for (int64_t i = 0; i < n && !t.error[0]; i++) read_row_group(p, &t, &p->groups[i]);
            tt_thrift_list_end(&t);
            has_groups = true;
        } else tt_thrift_skip(&t, type);
    }
    tt_thrift_struct_end(&t);
    if (t.error[0]) pq_die(p, "its footer (FileMetaData) is malformed: %s", t.error);
    if (!has_schema || !has_groups) pq_die(p, "its footer has no %s", has_schema ? "row groups" : "schema");
    int64_t rows = 0;
    for (int64_t g = 0; g < p->group_count; g++) {
        const pq_group *group = &p->groups[g];
        if (group->rows < 0 || group->rows > INT64_MAX - rows)
            pq_die(p, "row group %lld has %lld rows", (long long)g, (long long)group->rows);
        rows += group->rows;
        for (int c = 0; c < p->leaf_count; c++) {
            const pq_chunk *k = &group->chunks[c];
            if (k->external) pq_die(p, "row group %lld keeps a column in another file (file_path)", (long long)g);
            if (group->rows == 0 && k->num_values == 0) continue; /* an empty group's chunk: nothing is read */
            if (k->start < 4 || k->size < 0 || (uint64_t)k->start > p->size - 8 - footer_len ||
                (uint64_t)k->size > p->size - 8 - footer_len - (uint64_t)k->start)
                pq_die(p, "row group %lld: a column chunk's bytes (at %lld, %lld bytes) are not in the file",
                       (long long)g, (long long)k->start, (long long)k->size);
        }
    }
    if (rows != p->total_rows)
        pq_die(p, "its row groups hold %lld rows, its footer says %lld", (long long)rows, (long long)p->total_rows);
    if (p->column_count == 0 && rows > 0)
        pq_die(p, "none of its columns is one tiertrain reads (%s); write the data's texts as string columns",
               nested[0] ? nested : "it has none");
    if (nested[0])
        tt_warn("Parquet file %s: column(s) %s are structs, maps or lists of lists, or of a type tiertrain does not "
                "read from Parquet (INT96, fixed-length bytes); the rows are read without them (lists of primitives "
                "and of structs of primitives are read)",
                p->path, nested);
}

tt_parquet *tt_parquet_open(const char *path) {
    tt_parquet *p = tt_xcalloc(1, sizeof *p, "a Parquet reader");
    p->path = tt_xstrdup(path);
    int fd = open(path, O_RDONLY | O_NONBLOCK);
    struct stat st;
    if (fd < 0) pq_die(p, "cannot open it: %s", strerror(errno));
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        pq_die(p, "not a regular file");
    }
    p->size = (size_t)st.st_size;
    if (p->size > 0) {
        void *map = mmap(NULL, p->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED) {
            close(fd);
            p->size = 0;
            pq_die(p, "cannot map it: %s", strerror(errno));
        }
        p->map = map;
    }
    close(fd);
    read_footer(p);
    return p;
}

void tt_parquet_close(tt_parquet *p) {
    if (!p) return;
    if (p->map) munmap(p->map, p->size);
    for (int c = 0; c < p->column_count; c++) {
        pq_column *col = &p->columns[c];
        for (int l = 0; l < col->leaf_count; l++) {
            pq_leaf *leaf = &col->leaves[l];
            free(leaf->name);
            free(leaf->defs);
            free(leaf->reps);
            free(leaf->values);
            free(leaf->text);
            free(leaf->dict);
            free(leaf->dict_text);
        }
        free(col->leaves);
        free(col->row_start);
        free(col->name);
    }
    free(p->columns);
    for (int64_t g = 0; g < p->group_count; g++) free(p->groups[g].chunks);
    free(p->groups);
    free(p->page);
    free(p->indices);
    free(p->schema);
    free(p->schema_nodes);
    free(p->path);
    free(p);
}

/* ---- pages ---- */

typedef struct page_header {
    int type;
    int32_t uncompressed, compressed;
    int32_t num_values, encoding;
    int32_t def_encoding, rep_encoding; /* v1: RLE (the deprecated BIT_PACKED is refused) */
    int32_t def_bytes, rep_bytes;       /* v2 */
    bool v2_compressed;
} page_header;

static void read_data_header(tt_thrift *t, page_header *h, bool v2) {
    tt_thrift_struct_begin(t);
    int16_t id;
    int type;
    while (tt_thrift_next_field(t, &id, &type)) {
        if (id == 1 && type == TT_THRIFT_I32) h->num_values = (int32_t)tt_thrift_int(t, type);
        else if (!v2 && id == 2 && type == TT_THRIFT_I32) h->encoding = (int32_t)tt_thrift_int(t, type);
        else if (!v2 && id == 3 && type == TT_THRIFT_I32) h->def_encoding = (int32_t)tt_thrift_int(t, type);
        else if (!v2 && id == 4 && type == TT_THRIFT_I32) h->rep_encoding = (int32_t)tt_thrift_int(t, type);
        else if (v2 && id == 4 && type == TT_THRIFT_I32) h->encoding = (int32_t)tt_thrift_int(t, type);
        else if (v2 && id == 5 && type == TT_THRIFT_I32) h->def_bytes = (int32_t)tt_thrift_int(t, type);
        else if (v2 && id == 6 && type == TT_THRIFT_I32) h->rep_bytes = (int32_t)tt_thrift_int(t, type);
        else if (v2 && id == 7 && (type == TT_THRIFT_TRUE || type == TT_THRIFT_FALSE))
            h->v2_compressed = tt_thrift_bool(t, type);
        else tt_thrift_skip(t, type);
    }
    tt_thrift_struct_end(t);
}

/* The page header at data[0..size); its length in *header_len; false with t's error when malformed. */
static bool read_page_header(const uint8_t *data, size_t size, page_header *h, size_t *header_len, char *why,
                             size_t why_size) {
    memset(h, 0, sizeof *h);
    h->type = -1;
    h->v2_compressed = true;
    h->def_encoding = h->rep_encoding = PQ_RLE;
    tt_thrift t;
    tt_thrift_init(&t, data, size);
    tt_thrift_struct_begin(&t);
    int16_t id;
    int type;
    while (tt_thrift_next_field(&t, &id, &type)) {
        if (id == 1 && type == TT_THRIFT_I32) h->type = (int)tt_thrift_int(&t, type);
        else if (id == 2 && type == TT_THRIFT_I32) h->uncompressed = (int32_t)tt_thrift_int(&t, type);
        else if (id == 3 && type == TT_THRIFT_I32) h->compressed = (int32_t)tt_thrift_int(&t, type);
        else if ((id == 5 || id == 7) && type == TT_THRIFT_STRUCT) read_data_header(&t, h, false);
        else if (id == 8 && type == TT_THRIFT_STRUCT) read_data_header(&t, h, true);
        else tt_thrift_skip(&t, type);
    }
    tt_thrift_struct_end(&t);
    if (t.error[0]) {
        snprintf(why, why_size, "a page header is malformed: %s", t.error);
        return false;
    }
    *header_len = t.at;
    return true;
}

/* src[0..src_len) decompressed into p->page, exactly want bytes. */
static const uint8_t *decompress(tt_parquet *p, int codec, const uint8_t *src, size_t src_len, size_t want,
                                 const char *where) {
    if (codec == PQ_UNCOMPRESSED) {
        if (src_len != want) pq_die(p, "%s: an uncompressed page of %zu bytes says %zu", where, src_len, want);
        return src;
    }
    if (want + 1 > p->page_cap) {
        p->page_cap = want + 1;
        p->page = tt_xrealloc(p->page, p->page_cap, "a Parquet page");
    }
    size_t got = want;
    bool ok = false;
    if (codec == PQ_SNAPPY) {
        size_t length;
        ok = snappy_uncompressed_length((const char *)src, src_len, &length) == SNAPPY_OK && length == want &&
             snappy_uncompress((const char *)src, src_len, (char *)p->page, &got) == SNAPPY_OK;
    } else if (codec == PQ_GZIP) {
        z_stream z = {0};
        if (inflateInit2(&z, 15 + 32) == Z_OK) { /* gzip or zlib wrapper */
            z.next_in = (Bytef *)src;
            z.avail_in = (uInt)src_len;
            z.next_out = p->page;
            z.avail_out = (uInt)want;
            int rc = inflate(&z, Z_FINISH);
            while (rc == Z_STREAM_END && z.avail_in > 0 && inflateReset(&z) == Z_OK) /* concatenated gzip members */
                rc = inflate(&z, Z_FINISH);
            got = want - z.avail_out;
            ok = rc == Z_STREAM_END && z.avail_in == 0;
            inflateEnd(&z);
        }
    } else if (codec == PQ_ZSTD) {
        size_t rc = ZSTD_decompress(p->page, want, src, src_len);
        ok = !ZSTD_isError(rc);
        got = ok ? rc : 0;
    } else {
        static const char *const names[] = {"UNCOMPRESSED", "SNAPPY", "GZIP", "LZO",
                                            "BROTLI",       "LZ4",    "ZSTD", "LZ4_RAW"};
        pq_die(p,
               "%s: its pages are compressed with %s, which tiertrain does not read (it reads Snappy, gzip, "
               "Zstandard and uncompressed pages): write the file again with one of those",
               where, codec >= 0 && codec < 8 ? names[codec] : "an unknown codec");
    }
    if (!ok || got != want)
        pq_die(p, "%s: a page does not decompress to its %zu bytes (the data is damaged)", where, want);
    return p->page;
}

static uint32_t *indices_buffer(tt_parquet *p, size_t count) {
    if (count > p->indices_cap) {
        p->indices_cap = count;
        p->indices = tt_xrealloc(p->indices, tt_mul_size(count, sizeof(uint32_t), "Parquet levels"), "Parquet levels");
    }
    return p->indices;
}

/* The RLE / bit-packing hybrid: count values of bit_width bits from data[0..size) into out; false when it ends early. */
static bool decode_hybrid(const uint8_t *data, size_t size, int bit_width, size_t count, uint32_t *out) {
    size_t at = 0, produced = 0;
    const size_t value_bytes = (size_t)(bit_width + 7) / 8;
    while (produced < count) {
        uint64_t header = 0;
        for (int shift = 0;; shift += 7) {
            if (at >= size || shift > 35) return false;
            uint8_t b = data[at++];
            header |= (uint64_t)(b & 0x7f) << shift;
            if (!(b & 0x80)) break;
        }
        if (header & 1) { /* bit-packed: groups of 8 values */
            uint64_t groups = header >> 1, bytes = groups * (uint64_t)bit_width;
            if (bytes > size - at) return false;
            uint64_t n = groups * 8;
            for (uint64_t k = 0; k < n && produced < count; k++) {
                uint64_t bit = k * (uint64_t)bit_width, v = 0;
                for (int b = 0; b < bit_width; b++, bit++) v |= (uint64_t)((data[at + bit / 8] >> (bit % 8)) & 1) << b;
                out[produced++] = (uint32_t)v;
            }
            at += (size_t)bytes;
        } else { /* a run of one value */
            uint64_t run = header >> 1;
            if (value_bytes > size - at) return false;
            uint32_t v = 0;
            for (size_t b = 0; b < value_bytes; b++) v |= (uint32_t)data[at + b] << (8 * b);
            at += value_bytes;
            for (uint64_t k = 0; k < run && produced < count; k++) out[produced++] = v;
        }
    }
    return true;
}

static void text_append(char **text, size_t *used, size_t *cap, const uint8_t *bytes, size_t len) {
    if (*used + len > *cap) {
        size_t grown = *cap ? *cap : 65536;
        while (grown < *used + len) grown = tt_mul_size(grown, 2, "Parquet text");
        *text = tt_xrealloc(*text, grown, "Parquet text");
        *cap = grown;
    }
    if (len) memcpy(*text + *used, bytes, len);
    *used += len;
}

/* count PLAIN values of the column's type from data[0..size) into out (BYTE_ARRAY bytes appended to text); the bytes
 * used, or -1 when data ends early. */
static int64_t decode_plain(int type, const uint8_t *data, size_t size, size_t count, pq_value *out, char **text,
                            size_t *used, size_t *cap) {
    size_t at = 0;
    for (size_t k = 0; k < count; k++) {
        pq_value *v = &out[k];
        v->null = false;
        v->dict = false;
        switch (type) {
        case PQ_BOOLEAN:
            if (k / 8 >= size) return -1;
            v->v.i = (data[k / 8] >> (k % 8)) & 1;
            at = k / 8 + 1;
            break;
        case PQ_INT32:
        case PQ_FLOAT:
            if (size - at < 4) return -1;
            if (type == PQ_INT32) v->v.i = (int32_t)read_u32(data + at);
            else {
                uint32_t bits = read_u32(data + at);
                float f;
                memcpy(&f, &bits, sizeof f);
                v->v.d = f;
            }
            at += 4;
            break;
        case PQ_INT64:
        case PQ_DOUBLE:
            if (size - at < 8) return -1;
            if (type == PQ_INT64) v->v.i = (int64_t)read_u64(data + at);
            else {
                uint64_t bits = read_u64(data + at);
                memcpy(&v->v.d, &bits, sizeof v->v.d);
            }
            at += 8;
            break;
        case PQ_BYTE_ARRAY: {
            if (size - at < 4) return -1;
            uint32_t len = read_u32(data + at);
            at += 4;
            if (len > size - at) return -1;
            v->v.s.at = *used;
            v->v.s.len = len;
            text_append(text, used, cap, data + at, len);
            at += len;
            break;
        }
        default: return -1;
        }
    }
    return (int64_t)at;
}

static int bit_width(int max_level) {
    int bits = 0;
    while (max_level >> bits) bits++;
    return bits;
}

/* A page's repetition or definition levels (max > 0) into out[0..n), each checked against max. */
static void decode_levels(tt_parquet *p, const uint8_t *data, size_t size, int max, size_t n, uint8_t *out,
                          const char *what, const char *where) {
    uint32_t *levels = indices_buffer(p, n + 1);
    if (!decode_hybrid(data, size, bit_width(max), n, levels))
        pq_die(p, "%s: a page's %s levels end early", where, what);
    for (size_t k = 0; k < n; k++) {
        if (levels[k] > (uint32_t)max) pq_die(p, "%s: %s level %u over the column's %d", where, what, levels[k], max);
        out[k] = (uint8_t)levels[k];
    }
}

/* A v1 page's levels section: a 4-byte length, then the hybrid; *data and *size move past it. */
static void levels_section(tt_parquet *p, const uint8_t **data, size_t *size, int max, size_t n, uint8_t *out,
                           const char *what, const char *where) {
    if (*size < 4 || read_u32(*data) > *size - 4) pq_die(p, "%s: a page's %s levels do not fit it", where, what);
    const uint32_t len = read_u32(*data);
    decode_levels(p, *data + 4, len, max, n, out, what, where);
    *data += 4 + len;
    *size -= 4 + len;
}

/* A leaf's column chunk of the current row group: its levels (chunk->num_values of them) and present values. */
static void read_leaf(tt_parquet *p, pq_leaf *leaf, const pq_chunk *chunk, int64_t group, const char *column) {
    char where[700];
    snprintf(where, sizeof where, "row group %lld, column %s%s%s", (long long)group, column,
             strcmp(column, leaf->name) ? "." : "", strcmp(column, leaf->name) ? leaf->name : "");
    if (chunk->type != leaf->type)
        pq_die(p, "%s: the chunk's type %d is not the schema's %d", where, chunk->type, leaf->type);
    const int64_t total = chunk->num_values;
    if (total < 0 || total > TT_PARQUET_MAX_CHUNK_VALUES)
        pq_die(p, "%s: %lld values in one chunk; tiertrain reads at most %lld (write smaller row groups)", where,
               (long long)total, (long long)TT_PARQUET_MAX_CHUNK_VALUES);
    leaf->levels = leaf->present = leaf->cursor = 0;
    leaf->text_used = leaf->dict_text_used = 0;
    leaf->dict_count = 0;
    const uint8_t *at = p->map + chunk->start, *end = at + chunk->size;
    while (leaf->levels < total) {
        if (at >= end)
            pq_die(p, "%s: the chunk ends after %lld of its %lld values", where, (long long)leaf->levels,
                   (long long)total);
        page_header h;
        size_t header_len;
        char why[256];
        if (!read_page_header(at, (size_t)(end - at), &h, &header_len, why, sizeof why))
            pq_die(p, "%s: %s", where, why);
        at += header_len;
        if (h.compressed < 0 || h.uncompressed < 0 || h.uncompressed > MAX_PAGE_BYTES || h.compressed > end - at)
            pq_die(p, "%s: a page of %d bytes (%d uncompressed) does not fit the chunk", where, h.compressed,
                   h.uncompressed);
        const uint8_t *body = at;
        at += h.compressed;
        if (h.type == PQ_DICTIONARY_PAGE) {
            if (leaf->dict_count || leaf->levels)
                pq_die(p, "%s: a dictionary page after the chunk's first page (a chunk has one, first)", where);
            if (h.num_values < 0 || (size_t)h.num_values > (size_t)h.uncompressed + 1)
                pq_die(p, "%s: a dictionary of %d values in %d bytes", where, h.num_values, h.uncompressed);
            const uint8_t *data =
                decompress(p, chunk->codec, body, (size_t)h.compressed, (size_t)h.uncompressed, where);
            leaf->dict = tt_xrealloc(leaf->dict, sizeof(pq_value) * (size_t)(h.num_values + 1), "a Parquet dictionary");
            if (decode_plain(leaf->type, data, (size_t)h.uncompressed, (size_t)h.num_values, leaf->dict,
                             &leaf->dict_text, &leaf->dict_text_used, &leaf->dict_text_cap) < 0)
                pq_die(p, "%s: the dictionary page ends before its %d values", where, h.num_values);
            leaf->dict_count = h.num_values;
            continue;
        }
        if (h.type != PQ_DATA_PAGE && h.type != PQ_DATA_PAGE_V2) continue; /* an index page */
        if (h.num_values < 0 || h.num_values > total - leaf->levels)
            pq_die(p, "%s: a page of %d values past the chunk's %lld", where, h.num_values, (long long)total);
        const size_t n = (size_t)h.num_values;
        if (!leaf->defs ||
            leaf->levels + (int64_t)n > leaf->levels_cap) { /* grown with the pages: the footer's counts are claims */
            int64_t cap = leaf->levels_cap ? leaf->levels_cap : 4096;
            while (cap < leaf->levels + (int64_t)n) cap *= 2;
            leaf->defs = tt_xrealloc(leaf->defs, (size_t)cap, "Parquet levels");
            leaf->reps = tt_xrealloc(leaf->reps, (size_t)cap, "Parquet levels");
            leaf->values = tt_xrealloc(leaf->values, tt_mul_size((size_t)cap, sizeof(pq_value), "Parquet values"),
                                       "Parquet values");
            leaf->levels_cap = cap;
        }
        uint8_t *defs = leaf->defs + leaf->levels, *reps = leaf->reps + leaf->levels;
        const uint8_t *data;
        size_t size;
        if (h.type == PQ_DATA_PAGE_V2) {
            if (h.rep_bytes < 0 || h.def_bytes < 0 || (int64_t)h.rep_bytes + h.def_bytes > h.compressed ||
                (int64_t)h.rep_bytes + h.def_bytes > h.uncompressed)
                pq_die(p, "%s: a v2 page's levels (%d and %d bytes) do not fit it", where, h.rep_bytes, h.def_bytes);
            if (leaf->max_rep) decode_levels(p, body, (size_t)h.rep_bytes, leaf->max_rep, n, reps, "repetition", where);
            if (leaf->max_def)
                decode_levels(p, body + h.rep_bytes, (size_t)h.def_bytes, leaf->max_def, n, defs, "definition", where);
            const size_t levels_len = (size_t)h.rep_bytes + (size_t)h.def_bytes;
            const size_t rest = (size_t)h.compressed - levels_len, want = (size_t)h.uncompressed - levels_len;
            /* (an all-null page's empty value section is written without a compressed stream) */
            const bool compressed = h.v2_compressed && !(rest == 0 && want == 0);
            data = compressed ? decompress(p, chunk->codec, body + levels_len, rest, want, where) : body + levels_len;
            size = compressed ? want : rest;
        } else {
            if ((leaf->max_rep && h.rep_encoding != PQ_RLE) || (leaf->max_def && h.def_encoding != PQ_RLE))
                pq_die(p, "%s: a page's levels are encoded %d (the deprecated BIT_PACKED); tiertrain reads RLE levels",
                       where, leaf->max_rep && h.rep_encoding != PQ_RLE ? h.rep_encoding : h.def_encoding);
            data = decompress(p, chunk->codec, body, (size_t)h.compressed, (size_t)h.uncompressed, where);
            size = (size_t)h.uncompressed;
            if (leaf->max_rep) levels_section(p, &data, &size, leaf->max_rep, n, reps, "repetition", where);
            if (leaf->max_def) levels_section(p, &data, &size, leaf->max_def, n, defs, "definition", where);
        }
        if (!leaf->max_rep) memset(reps, 0, n);
        if (!leaf->max_def) memset(defs, 0, n);
        size_t present = 0;
        for (size_t k = 0; k < n; k++) present += defs[k] == leaf->max_def;
        pq_value *out = leaf->values + leaf->present;
        if (h.encoding == PQ_PLAIN) {
            if (decode_plain(leaf->type, data, size, present, out, &leaf->text, &leaf->text_used, &leaf->text_cap) < 0)
                pq_die(p, "%s: a page ends before its %zu values", where, present);
        } else if (present == 0) {
            /* no value to decode (an all-null page may end with its levels) */
        } else if (h.encoding == PQ_RLE_DICTIONARY || h.encoding == PQ_PLAIN_DICTIONARY) {
            if (size < 1 || data[0] > 32) pq_die(p, "%s: a dictionary page's index width is not 0-32", where);
            uint32_t *index = indices_buffer(p, present + 1);
            if (!decode_hybrid(data + 1, size - 1, data[0], present, index))
                pq_die(p, "%s: a page's dictionary indices end early", where);
            for (size_t k = 0; k < present; k++) {
                if (index[k] >= leaf->dict_count)
                    pq_die(p, "%s: dictionary index %u of a dictionary of %lld values", where, index[k],
                           (long long)leaf->dict_count);
                out[k] = leaf->dict[index[k]];
                out[k].dict = true; /* (its text stays the dictionary's: no copy per index) */
            }
        } else if (h.encoding == PQ_RLE && leaf->type == PQ_BOOLEAN) { /* a 4-byte length, the hybrid of width 1 */
            uint32_t *bits = indices_buffer(p, present + 1);
            if (size < 4 || read_u32(data) > size - 4 || !decode_hybrid(data + 4, read_u32(data), 1, present, bits))
                pq_die(p, "%s: a page's run-length booleans end early", where);
            for (size_t k = 0; k < present; k++) {
                out[k].null = false;
                out[k].dict = false;
                out[k].v.i = bits[k] != 0;
            }
        } else {
            pq_die(p,
                   "%s: its pages use encoding %d, which tiertrain does not read (it reads PLAIN, dictionary and "
                   "run-length boolean pages)",
                   where, h.encoding);
        }
        leaf->levels += (int64_t)n;
        leaf->present += (int64_t)present;
        if (leaf->text_used + leaf->dict_text_used > (size_t)TT_PARQUET_MAX_GROUP_BYTES)
            pq_die(p, "%s: its text is over %lld bytes in one row group", where, (long long)TT_PARQUET_MAX_GROUP_BYTES);
    }
}

/* A list column's rows in the loaded group: where each starts (a repetition level 0), its leaves agreeing. */
static void index_list_rows(tt_parquet *p, pq_column *col, int64_t rows, int64_t group) {
    const pq_leaf *first = &col->leaves[0];
    for (int l = 1; l < col->leaf_count; l++) {
        const pq_leaf *leaf = &col->leaves[l];
        bool same = leaf->levels == first->levels;
        for (int64_t k = 0; same && k < first->levels; k++)
            same = leaf->reps[k] == first->reps[k] &&
                   (leaf->defs[k] >= col->def_element) == (first->defs[k] >= col->def_element);
        if (!same)
            pq_die(p, "row group %lld, column %s: its fields %s and %s do not list the same entries", (long long)group,
                   col->name, first->name, leaf->name);
    }
    if (rows > first->levels) /* every row has a level at least */
        pq_die(p, "row group %lld, column %s: %lld rows in %lld levels", (long long)group, col->name, (long long)rows,
               (long long)first->levels);
    col->row_start =
        tt_xrealloc(col->row_start, tt_mul_size((size_t)rows + 1, sizeof(int64_t), "Parquet rows"), "Parquet rows");
    int64_t row = 0;
    for (int64_t k = 0; k < first->levels; k++) {
        if (first->reps[k] != 0) continue;
        if (row == rows)
            pq_die(p, "row group %lld, column %s: more rows than the group's %lld", (long long)group, col->name,
                   (long long)rows);
        col->row_start[row++] = k;
    }
    if (row != rows || (first->levels > 0 && first->reps[0] != 0))
        pq_die(p, "row group %lld, column %s: %lld rows of the group's %lld", (long long)group, col->name,
               (long long)row, (long long)rows);
    col->row_start[rows] = first->levels;
}

static void load_group(tt_parquet *p, int64_t g) {
    const pq_group *group = &p->groups[g];
    const int64_t rows = group->rows;
    for (int c = 0; c < p->column_count; c++) {
        pq_column *col = &p->columns[c];
        for (int l = 0; l < col->leaf_count; l++)
            read_leaf(p, &col->leaves[l], &group->chunks[col->leaves[l].leaf], g, col->name);
        if (col->list) index_list_rows(p, col, rows, g);
        else if (col->leaves[0].levels != rows)
            pq_die(p, "row group %lld, column %s: %lld values for %lld rows", (long long)g, col->name,
                   (long long)col->leaves[0].levels, (long long)rows);
    }
    p->group_rows = rows;
    p->row_in_group = 0;
}

/* The leaf's next present value as JSON (NULL: invalid UTF-8, with *bad its byte). */
static json_t *leaf_value(pq_leaf *leaf, int64_t *bad) {
    if (leaf->cursor >= leaf->present) return json_null(); /* (levels and values were counted together) */
    const pq_value *v = &leaf->values[leaf->cursor++];
    if (leaf->type == PQ_BYTE_ARRAY) {
        const char *base = v->dict ? leaf->dict_text : leaf->text;
        const char *s = base ? base + v->v.s.at : ""; /* (no text yet: every string so far empty) */
        *bad = tt_utf8_first_invalid(s, v->v.s.len);
        return *bad >= 0 ? NULL : json_stringn(s, v->v.s.len);
    }
    if (leaf->type == PQ_BOOLEAN) return json_boolean(v->v.i);
    if (leaf->type == PQ_FLOAT || leaf->type == PQ_DOUBLE) /* JSON has no NaN or infinity: those are null */
        return isfinite(v->v.d) ? json_real(v->v.d) : json_null();
    return json_integer(v->v.i);
}

/* The value at level k of the leaf: its next present value, or null below max_def. */
static json_t *slot_value(tt_parquet *p, pq_leaf *leaf, int64_t k, json_t *row, const char *column) {
    if (leaf->defs[k] < leaf->max_def) return json_null();
    int64_t bad = -1;
    json_t *value = leaf_value(leaf, &bad);
    if (!value) {
        json_decref(row);
        pq_die(p, "row %lld, column %s: invalid UTF-8 at byte %lld of its text; a dataset's text is UTF-8",
               (long long)p->row, column, (long long)bad + 1);
    }
    return value;
}

json_t *tt_parquet_next(tt_parquet *p) {
    while (p->row_in_group >= p->group_rows) {
        if (p->next_group >= p->group_count) return NULL;
        load_group(p, p->next_group++);
    }
    const int64_t r = p->row_in_group++;
    p->row++;
    snprintf(p->where, sizeof p->where, "%s: row %lld", p->path, (long long)p->row);
    json_t *row = json_object();
    for (int c = 0; c < p->column_count; c++) {
        pq_column *col = &p->columns[c];
        json_t *value;
        if (!col->list) value = slot_value(p, &col->leaves[0], r, row, col->name);
        else {
            const int64_t from = col->row_start[r], to = col->row_start[r + 1];
            const int first_def = from < to ? col->leaves[0].defs[from] : 0;
            if (from == to || first_def < col->def_present) value = json_null();
            else if (first_def < col->def_list) value = json_array();
            else {
                value = json_array();
                json_object_set_new(row, col->name, value); /* (row owns it: an error below frees both) */
                for (int64_t k = from; k < to; k++) {
                    if (col->leaves[0].defs[k] < col->def_element) {
                        json_array_append_new(value, json_null());
                        continue;
                    }
                    if (!col->element_struct) {
                        json_array_append_new(value, slot_value(p, &col->leaves[0], k, row, col->name));
                        continue;
                    }
                    json_t *element = json_object();
                    json_array_append_new(value, element);
                    for (int l = 0; l < col->leaf_count; l++)
                        json_object_set_new(element, col->leaves[l].name,
                                            slot_value(p, &col->leaves[l], k, row, col->name));
                }
                continue;
            }
        }
        json_object_set_new(row, col->name, value);
    }
    return row;
}

const char *tt_parquet_where(const tt_parquet *p) { return p->where; }
