/* Thrift's compact protocol (thrift_compact.h). */
#include "data/thrift_compact.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

enum { MAX_DEPTH = 32 };

static void fail(tt_thrift *t, const char *fmt, ...) {
    if (t->error[0]) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->error, sizeof t->error, fmt, ap);
    va_end(ap);
    t->at = t->size; /* every later read comes up empty */
}

void tt_thrift_init(tt_thrift *t, const uint8_t *data, size_t size) {
    memset(t, 0, sizeof *t);
    t->data = data;
    t->size = size;
}

static uint8_t read_byte(tt_thrift *t) {
    if (t->at >= t->size) {
        fail(t, "ends early (at byte %zu)", t->size);
        return 0;
    }
    return t->data[t->at++];
}

static uint64_t read_varint(tt_thrift *t) {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        uint8_t b = read_byte(t);
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) return v;
    }
    fail(t, "a varint longer than 10 bytes at byte %zu", t->at);
    return 0;
}

static int64_t zigzag(uint64_t v) { return (int64_t)(v >> 1) ^ -(int64_t)(v & 1); }

void tt_thrift_struct_begin(tt_thrift *t) {
    if (t->depth >= MAX_DEPTH) {
        fail(t, "structures nested more than %d deep", MAX_DEPTH);
        return;
    }
    t->last_id[++t->depth] = 0;
}

void tt_thrift_struct_end(tt_thrift *t) {
    if (t->depth > 0) t->depth--;
}

bool tt_thrift_next_field(tt_thrift *t, int16_t *id, int *type) {
    if (t->error[0]) return false;
    uint8_t header = read_byte(t);
    if (t->error[0] || header == TT_THRIFT_STOP) return false;
    *type = header & 0x0f;
    int delta = header >> 4;
    if (delta) *id = (int16_t)(t->last_id[t->depth] + delta);
    else *id = (int16_t)zigzag(read_varint(t));
    t->last_id[t->depth] = *id;
    if (*type > TT_THRIFT_STRUCT) {
        fail(t, "field %d has the unknown type %d", *id, *type);
        return false;
    }
    return !t->error[0];
}

int64_t tt_thrift_int(tt_thrift *t, int type) {
    if (type == TT_THRIFT_BYTE) return (int8_t)read_byte(t);
    if (type == TT_THRIFT_I16 || type == TT_THRIFT_I32 || type == TT_THRIFT_I64) return zigzag(read_varint(t));
    fail(t, "an integer where the type is %d", type);
    return 0;
}

bool tt_thrift_bool(tt_thrift *t, int type) {
    if (type == TT_THRIFT_TRUE) return true;
    if (type == TT_THRIFT_FALSE) return false;
    return read_byte(t) == 1; /* a list's element */
}

double tt_thrift_double(tt_thrift *t) {
    if (t->size - t->at < 8 || t->at > t->size) {
        fail(t, "ends inside a double");
        return 0;
    }
    uint64_t bits = 0;
    for (int i = 0; i < 8; i++) bits |= (uint64_t)t->data[t->at + (size_t)i] << (8 * i);
    t->at += 8;
    double v;
    memcpy(&v, &bits, sizeof v);
    return v;
}

const uint8_t *tt_thrift_binary(tt_thrift *t, size_t *len) {
    uint64_t n = read_varint(t);
    if (t->error[0] || n > t->size - t->at) {
        fail(t, "a string of %llu bytes runs past the end", (unsigned long long)n);
        *len = 0;
        return (const uint8_t *)"";
    }
    const uint8_t *p = t->data + t->at;
    t->at += (size_t)n;
    *len = (size_t)n;
    return p;
}

int64_t tt_thrift_list_begin(tt_thrift *t, int *element_type) {
    uint8_t header = read_byte(t);
    *element_type = header & 0x0f;
    uint64_t n = header >> 4;
    if (n == 15) n = read_varint(t);
    if (t->depth >= MAX_DEPTH) fail(t, "containers nested more than %d deep", MAX_DEPTH);
    /* every element takes at least one byte (booleans and bytes one, the rest more) */
    if (!t->error[0] && n > t->size - t->at)
        fail(t, "a list of %llu elements runs past the end", (unsigned long long)n);
    if (!t->error[0] && *element_type > TT_THRIFT_STRUCT) fail(t, "a list of the unknown type %d", *element_type);
    if (t->error[0]) return 0;
    t->depth++;
    t->last_id[t->depth] = 0;
    return (int64_t)n;
}

void tt_thrift_list_end(tt_thrift *t) {
    if (t->depth > 0) t->depth--;
}

void tt_thrift_skip(tt_thrift *t, int type) {
    switch (type) {
    case TT_THRIFT_TRUE:
    case TT_THRIFT_FALSE: return; /* in the field header */
    case TT_THRIFT_BYTE: read_byte(t); return;
    case TT_THRIFT_I16:
    case TT_THRIFT_I32:
    case TT_THRIFT_I64: read_varint(t); return;
    case TT_THRIFT_DOUBLE: tt_thrift_double(t); return;
    case TT_THRIFT_BINARY: {
        size_t len;
        tt_thrift_binary(t, &len);
        return;
    }
    case TT_THRIFT_LIST:
    case TT_THRIFT_SET: {
        int element;
        int64_t n = tt_thrift_list_begin(t, &element);
        for (int64_t i = 0; i < n && !t->error[0]; i++) {
            if (element == TT_THRIFT_TRUE || element == TT_THRIFT_FALSE) read_byte(t);
            else tt_thrift_skip(t, element);
        }
        tt_thrift_list_end(t);
        return;
    }
    case TT_THRIFT_MAP: {
        uint64_t n = read_varint(t);
        if (n == 0) return;
        uint8_t types = read_byte(t);
        if (n > t->size - t->at) {
            fail(t, "a map of %llu entries runs past the end", (unsigned long long)n);
            return;
        }
        if (t->depth >= MAX_DEPTH) {
            fail(t, "containers nested more than %d deep", MAX_DEPTH);
            return;
        }
        t->depth++;
        for (uint64_t i = 0; i < n && !t->error[0]; i++) {
            int key = types >> 4, value = types & 0x0f;
            if (key == TT_THRIFT_TRUE || key == TT_THRIFT_FALSE) read_byte(t);
            else tt_thrift_skip(t, key);
            if (value == TT_THRIFT_TRUE || value == TT_THRIFT_FALSE) read_byte(t);
            else tt_thrift_skip(t, value);
        }
        t->depth--;
        return;
    }
    case TT_THRIFT_STRUCT: {
        tt_thrift_struct_begin(t);
        int16_t id;
        int field;
        while (tt_thrift_next_field(t, &id, &field)) tt_thrift_skip(t, field);
        tt_thrift_struct_end(t);
        return;
    }
    default: fail(t, "a value of the unknown type %d", type);
    }
}
