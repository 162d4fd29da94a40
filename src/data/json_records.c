/* JSONL / JSON records, streamed (json_records.h). */
#include "data/json_records.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "data/compressed_input.h"
#include "core/input_file.h"

/* A line buffer grown past this is released after its record (the next line allocates again). */
#define TT_JSON_RECORDS_KEPT_BUFFER ((size_t)64 << 20)

struct tt_json_records {
    FILE *f;
    char *path;
    bool array; /* a top-level array (else JSON lines) */
    bool done;
    char *buf; /* the current line or array element */
    size_t cap;
    int64_t line;      /* line of the current record (JSONL: its line; JSON: where it starts), from 1 */
    int64_t next_line; /* line of the next unread character */
    int64_t record;    /* records handed out, JSON arrays: the current one's number from 1 */
    size_t bytes;      /* the current record's JSON text */
    char where[4400];
};

int64_t tt_utf8_first_invalid(const char *text, size_t len) {
    const unsigned char *s = (const unsigned char *)text;
    for (size_t i = 0; i < len;) {
        unsigned c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        int n = c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
        if (n == 0 || i + (size_t)n > len) return (int64_t)i;
        for (int k = 1; k < n; k++)
            if ((s[i + (size_t)k] & 0xC0) != 0x80) return (int64_t)i;
        /* overlong 3- and 4-byte forms, surrogates, beyond U+10FFFF */
        unsigned c1 = s[i + 1];
        if ((c == 0xE0 && c1 < 0xA0) || (c == 0xED && c1 >= 0xA0) || (c == 0xF0 && c1 < 0x90) ||
            (c == 0xF4 && c1 >= 0x90))
            return (int64_t)i;
        i += (size_t)n;
    }
    return -1;
}

static int next_char(tt_json_records *r) {
    int c = getc(r->f);
    if (c == '\n') r->next_line++;
    return c;
}

static int skip_space(tt_json_records *r) {
    int c;
    do c = next_char(r);
    while (c == ' ' || c == '\t' || c == '\n' || c == '\r');
    return c;
}

static void push(tt_json_records *r, size_t *used, char c) {
    if (*used + 2 > r->cap) {
        r->cap = r->cap ? 2 * r->cap : 65536;
        r->buf = tt_xrealloc(r->buf, r->cap, "a JSON record");
    }
    r->buf[(*used)++] = c;
}

/* A read that failed (an I/O error, or a compressed file's corrupt or truncated stream) dies with its reason; after
 * an EOF, before taking it for the end of the file. discard: the reader is freed first (open's: its caller has no
 * handle yet). */
static void die_on_read_error(tt_json_records *r, bool discard) {
    if (!ferror(r->f)) return;
    char why[640];
    const char *decompress = tt_decompress_error();
    if (decompress[0]) snprintf(why, sizeof why, "%s", decompress);
    else snprintf(why, sizeof why, "cannot read dataset %s: %s", r->path, strerror(errno));
    if (discard) tt_json_records_discard(r);
    tt_die("%s", why);
}

tt_json_records *tt_json_records_open(const char *path) {
    FILE *f = tt_fopen_regular_file(path, "a JSON or JSONL dataset");
    if (!f) tt_die("cannot open dataset %s: %s; check the path under datasets", path, strerror(errno));
    f = tt_decompressing(f, path); /* .jsonl.gz, .json.zst: read through their decompressor */
    tt_json_records *r = tt_xcalloc(1, sizeof(*r), "a JSON reader");
    r->f = f;
    r->path = tt_xstrdup(path);
    r->next_line = 1;
    int c = skip_space(r);
    if (c == EOF) die_on_read_error(r, true);
    if (c == EOF) { /* (the reader is freed first: a caller that catches tt_die, as the fuzz harness, has no handle) */
        tt_json_records_discard(r);
        tt_die("dataset %s is empty; it needs JSON records (one object per line, or an array of objects)", path);
    }
    if (c == 0xEF) { /* a UTF-8 byte order mark, as some editors write */
        int b1 = next_char(r), b2 = next_char(r);
        if (b2 == EOF) die_on_read_error(r, true);
        if (b1 != 0xBB || b2 != 0xBF) {
            tt_json_records_discard(r);
            tt_die("%s:1: invalid UTF-8 at the start of the file; the file must be UTF-8", path);
        }
        c = skip_space(r);
        if (c == EOF) die_on_read_error(r, true);
    }
    r->array = c == '[';
    if (!r->array) {
        /* JSON lines: start over from this line (the skipped ones were blank) */
        ungetc(c, f);
        if (c == '\n') r->next_line--;
    }
    return r;
}

/* JSONL: the next line that is not blank, into r->buf (NUL-terminated); false at the end. */
static bool read_line(tt_json_records *r, size_t *len) {
    for (;;) {
        size_t used = 0;
        int c;
        r->line = r->next_line;
        while ((c = getc(r->f)) != EOF && c != '\n') push(r, &used, (char)c);
        if (c == '\n') r->next_line++;
        die_on_read_error(r, false);
        push(r, &used, 0);
        used--;
        bool blank = true;
        for (size_t i = 0; i < used && blank; i++) blank = r->buf[i] == ' ' || r->buf[i] == '\t' || r->buf[i] == '\r';
        if (!blank) {
            *len = used;
            return true;
        }
        if (c == EOF) return false;
    }
}

/* JSON array: the next element's text into r->buf; false after the closing ']'. The element ends
 * at the ',' or ']' outside strings and brackets that follows it. */
static bool read_element(tt_json_records *r, size_t *len) {
    int c = skip_space(r);
    if (c == ']' && r->record == 0) {
        r->done = true;
        return false;
    }
    if (c == EOF) die_on_read_error(r, false);
    if (c == EOF)
        tt_die("%s: the JSON array is not closed (no ']' after record %lld); the file is truncated or malformed",
               r->path, (long long)r->record);
    r->line = r->next_line;
    r->record++;
    size_t used = 0;
    int depth = 0;
    bool in_string = false, escaped = false;
    for (;; c = next_char(r)) {
        if (c == EOF) die_on_read_error(r, false);
        if (c == EOF)
            tt_die("%s: record %lld (line %lld): the file ends inside it; the JSON array is truncated or malformed",
                   r->path, (long long)r->record, (long long)r->line);
        if (in_string) {
            if (escaped) escaped = false;
            else if (c == '\\') escaped = true;
            else if (c == '"') in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == '{' || c == '[') {
            depth++;
        } else if (c == '}' || c == ']') {
            if (depth == 0) break; /* the array's ']' */
            depth--;
        } else if (c == ',' && depth == 0) {
            break;
        }
        push(r, &used, (char)c);
    }
    if (c == ']') r->done = true;
    push(r, &used, 0);
    *len = used - 1;
    return true;
}

json_t *tt_json_records_next(tt_json_records *r) {
    size_t len = 0;
    r->bytes = 0;
    if (r->done) return NULL;
    if (r->array ? !read_element(r, &len) : !read_line(r, &len)) return NULL;
    r->bytes = len;
    if (!r->array) r->record++;
    if (r->array)
        snprintf(r->where, sizeof r->where, "%s: record %lld (line %lld)", r->path, (long long)r->record,
                 (long long)r->line);
    else snprintf(r->where, sizeof r->where, "%s:%lld", r->path, (long long)r->line);
    int64_t bad = tt_utf8_first_invalid(r->buf, len);
    if (bad >= 0)
        tt_die("%s: invalid UTF-8 (byte 0x%02x at byte %lld of the %s); the dataset must be UTF-8 text", r->where,
               (unsigned char)r->buf[bad], (long long)bad + 1, r->array ? "record" : "line");
    json_error_t error;
    json_t *value = json_loadb(r->buf, len, JSON_DECODE_ANY, &error);
    if (!value)
        tt_die("%s: malformed JSON: %s (at character %d of the %s); %s", r->where, error.text, error.position,
               r->array ? "record" : "line",
               r->array ? "the file must be one JSON array of objects" : "each line must be one JSON object");
    if (!json_is_object(value)) {
        const char *kind = json_is_array(value)    ? "an array"
                           : json_is_string(value) ? "a string"
                                                   : "a number or literal";
        json_decref(value);
        tt_die("%s: expected a JSON object (a record with named fields), got %s", r->where, kind);
    }
    if (r->cap > TT_JSON_RECORDS_KEPT_BUFFER) { /* a huge line's buffer is not held for the rest of the file */
        free(r->buf);
        r->buf = NULL;
        r->cap = 0;
    }
    return value;
}

const char *tt_json_records_where(const tt_json_records *r) { return r->where; }

size_t tt_json_records_bytes(const tt_json_records *r) { return r->bytes; }

void tt_json_records_close(tt_json_records *r) {
    if (!r) return;
    if (r->array && !r->done) tt_die("%s: the JSON array is not closed; the file is truncated or malformed", r->path);
    if (r->array) { /* nothing but white space may follow the array */
        int c = skip_space(r);
        if (c == EOF) die_on_read_error(r, false);
        if (c != EOF)
            tt_die("%s: line %lld: text after the closing ']' of the JSON array; a JSON dataset is one array", r->path,
                   (long long)r->next_line);
    }
    tt_json_records_discard(r);
}

void tt_json_records_discard(tt_json_records *r) {
    if (!r) return;
    fclose(r->f);
    free(r->path);
    free(r->buf);
    free(r);
}
