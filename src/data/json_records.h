/* Records of a JSON dataset file, one at a time: JSONL (one object per line, blank lines skipped)
 * or JSON (a top-level array of objects). The format is read from the first character that is
 * not white space ('[': an array, else lines), not from the extension, because Hugging Face's
 * json loader (and so axolotl) takes JSON lines in a .json file too.
 *
 * Memory is bounded by the largest record: a line (JSONL) or one array element (JSON) is read,
 * checked as UTF-8, parsed with jansson and handed out; nothing else is kept. Every error is
 * tt_die with the file, the line (JSONL) or the record number and line (JSON), and the fix. */
#ifndef TT_DATA_JSON_RECORDS_H
#define TT_DATA_JSON_RECORDS_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

typedef struct tt_json_records tt_json_records;

tt_json_records *tt_json_records_open(const char *path);
/* The next record (a JSON object; the caller json_decref's it), or NULL at the end of the file. */
json_t *tt_json_records_next(tt_json_records *r);
/* Where the last record came from, for messages: "data.jsonl:12" or "data.json: record 3 (line 17)".
 * Valid until the next call. */
const char *tt_json_records_where(const tt_json_records *r);
/* The length of the last record's JSON text (0 after the end). */
size_t tt_json_records_bytes(const tt_json_records *r);
/* Checks that the file ended where it should (a JSON array closed, nothing after it), then frees. */
void tt_json_records_close(tt_json_records *r);
/* Frees without those checks: after an error, or when the caller stops early. */
void tt_json_records_discard(tt_json_records *r);

/* Byte offset of the first invalid UTF-8 sequence in s[0..len) (overlong forms, surrogates and
 * code points above U+10FFFF are invalid, as Python's decoder says), or -1 if it is all valid. */
int64_t tt_utf8_first_invalid(const char *s, size_t len);

#endif
