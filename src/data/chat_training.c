/* A message's own say in what trains (chat_template.h): axolotl's message_field_training and
 * message_field_training_detail (ChatTemplateStrategy and ChatTemplatePrompter.get_offsets_for_train_detail).
 *
 * A span {begin_offset, end_offset, train} names characters (Python's, i.e. Unicode code points) of the content,
 * end_offset inclusive. axolotl turns the spans into tokens through the token offsets of the content tokenized
 * alone: token i runs from its start to the next token's start minus one (the last to the content's last
 * character); a span is widened to the tokens it touches (adjust_train_details), and a token trains when it lies
 * inside a widened span whose train is true. It then labels the turn's tokens from the turn's first one on, token
 * i of the content alone as token start + i of the conversation: right where the content tokenizes the same alone
 * as inside the template, wrong where the template's text before it merges with its first characters.
 * tiertrain applies the same rules to the content's tokens inside the full render (the content is found there,
 * where the turn's tokens are), so the two agree wherever axolotl is right; when the template does not print the
 * content as it is (it trims it, say), it falls back to axolotl's way exactly. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/json_describe.h"
#include "data/chat_internal.h"

/* Characters (code points) in s[0..n). */
static int64_t char_count(const char *s, size_t n) {
    int64_t count = 0;
    for (size_t i = 0; i < n; i++) count += ((unsigned char)s[i] & 0xc0) != 0x80;
    return count;
}

/* One span's integer field: present, an integer, >= 0. */
static int64_t span_offset(json_t *span, const char *key, const char *where, const char *name, size_t s) {
    json_t *v = json_object_get(span, key);
    if (!v)
        tt_die("%s: %s[%zu] has no '%s'; a span is {\"begin_offset\": FIRST, \"end_offset\": LAST, \"train\": true} "
               "(character positions in the content, LAST included)",
               where, name, s, key);
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        tt_die("%s: %s[%zu].%s is %s; it is a character position in the content, an integer from 0", where, name, s,
               key, json_is_integer(v) ? "negative" : tt_json_type_name(v));
    return json_integer_value(v);
}

int tt_chat_message_training(const tt_chat_format *f, json_t *message, json_t *content, const char *where, size_t index,
                             json_t **detail) {
    const tt_dataset_spec *spec = f->settings.spec;
    const char *list = spec->field_messages;
    int training = -1;
    *detail = NULL;
    if (spec->message_field_training) {
        json_t *v = json_object_get(message, spec->message_field_training);
        if (v && !json_is_null(v)) {
            if (!json_is_boolean(v))
                tt_die("%s: %s[%zu].%s is %s; message_field_training names a field that is true (the message trains) "
                       "or false (it does not)",
                       where, list, index, spec->message_field_training, tt_json_type_name(v));
            training = json_is_true(v);
        }
    }
    if (!spec->message_field_training_detail) return training;
    json_t *spans = json_object_get(message, spec->message_field_training_detail);
    if (!spans || json_is_null(spans)) return training;
    char name[400];
    snprintf(name, sizeof name, "%s[%zu].%s", list, index, spec->message_field_training_detail);
    if (!json_is_array(spans))
        tt_die("%s: %s is %s; message_field_training_detail names a list of spans such as [{\"begin_offset\": 0, "
               "\"end_offset\": 9, \"train\": true}]",
               where, name, tt_json_type_name(spans));
    if (json_array_size(spans) > 0 && !json_is_string(content))
        tt_die("%s: %s gives character spans, but the message's content is %s; spans need a string content (as "
               "axolotl's)",
               where, name, content ? tt_json_type_name(content) : "missing");
    const int64_t characters =
        json_is_string(content) ? char_count(json_string_value(content), json_string_length(content)) : 0;
    size_t s;
    json_t *span;
    json_array_foreach(spans, s, span) {
        if (!json_is_object(span))
            tt_die("%s: %s[%zu] is %s; a span is {\"begin_offset\": FIRST, \"end_offset\": LAST, \"train\": true}",
                   where, name, s, tt_json_type_name(span));
        const char *key;
        json_t *v;
        json_object_foreach(span, key, v) {
            if (strcmp(key, "begin_offset") != 0 && strcmp(key, "end_offset") != 0 && strcmp(key, "train") != 0)
                tt_die("%s: %s[%zu] has the unknown field '%s'; a span has begin_offset, end_offset and train", where,
                       name, s, key);
        }
        const int64_t begin = span_offset(span, "begin_offset", where, name, s);
        const int64_t end = span_offset(span, "end_offset", where, name, s);
        json_t *train = json_object_get(span, "train");
        if (!json_is_boolean(train))
            tt_die("%s: %s[%zu].train is %s; it is true (the span's tokens train) or false", where, name, s,
                   train ? tt_json_type_name(train) : "missing");
        if (begin > end)
            tt_die("%s: %s[%zu]: begin_offset %lld is after end_offset %lld; end_offset is the span's last character, "
                   "included",
                   where, name, s, (long long)begin, (long long)end);
        if (end >= characters)
            tt_die("%s: %s[%zu]: end_offset %lld is past the content's last character (%lld characters, so at most "
                   "%lld; end_offset is included in the span)",
                   where, name, s, (long long)end, (long long)characters, (long long)characters - 1);
    }
    *detail = json_incref(spans);
    /* axolotl: without a training field, a message with spans trains when it has any */
    if (training < 0) training = json_array_size(spans) > 0;
    return training;
}

/* ---- spans -> tokens ---- */

/* The content's tokens as axolotl sees them: [count] first characters, last characters (inclusive, as axolotl
 * sets them: the next token's first minus one) and their index in the conversation's ids. */
typedef struct content_tokens {
    int64_t count;
    int64_t *first, *last, *at;
} content_tokens;

static void content_tokens_alloc(content_tokens *t, int64_t count) {
    t->count = count;
    size_t n = (size_t)(count ? count : 1);
    t->first = tt_xmalloc(sizeof(int64_t) * n, "content tokens");
    t->last = tt_xmalloc(sizeof(int64_t) * n, "content tokens");
    t->at = tt_xmalloc(sizeof(int64_t) * n, "content tokens");
}

static void content_tokens_free(content_tokens *t) {
    free(t->first);
    free(t->last);
    free(t->at);
}

/* char_of[b] for b in [0, n]: the character byte b of s belongs to (n: the count). */
static int64_t *char_index(const char *s, size_t n) {
    int64_t *char_of = tt_xmalloc(sizeof(int64_t) * (n + 1), "character index");
    int64_t c = -1;
    for (size_t b = 0; b < n; b++) {
        c += ((unsigned char)s[b] & 0xc0) != 0x80;
        char_of[b] = c < 0 ? 0 : c;
    }
    char_of[n] = c + 1;
    return char_of;
}

static void set_last_characters(content_tokens *t, int64_t characters) {
    for (int64_t i = 0; i + 1 < t->count; i++) t->last[i] = t->first[i + 1] - 1;
    if (t->count) t->last[t->count - 1] = characters - 1;
}

/* The content inside the render: its first occurrence that overlaps the turn's bytes [turn_first, turn_end). */
static bool find_in_render(const char *text, size_t text_len, const tt_token_ids *ids, int64_t start, int64_t end,
                           const char *content, size_t content_len, const int64_t *char_of, content_tokens *out) {
    const size_t turn_first = (size_t)ids->offsets[start];
    const size_t turn_end = end < ids->count ? (size_t)ids->offsets[end] : text_len;
    size_t from = turn_first + 1 > content_len ? turn_first + 1 - content_len : 0;
    const char *hit = NULL;
    while (from < text_len && (hit = memmem(text + from, text_len - from, content, content_len)) != NULL) {
        size_t p = (size_t)(hit - text);
        if (p >= turn_end) return false;
        if (p + content_len > turn_first) break;
        from = p + 1;
        hit = NULL;
    }
    if (!hit) return false;
    const int64_t p = hit - text, q = p + (int64_t)content_len;
    int64_t first = start;
    while (first > 0 && ids->offsets[first] > p) first--;
    while (first + 1 < ids->count && ids->offsets[first + 1] <= p) first++;
    while (first > 0 && ids->offsets[first] == p && ids->offsets[first - 1] == p) first--; /* a character's pieces */
    int64_t last = first;
    while (last + 1 < ids->count && ids->offsets[last + 1] < q) last++;
    content_tokens_alloc(out, last - first + 1);
    for (int64_t k = first; k <= last; k++) {
        const int64_t o = ids->offsets[k];
        out->first[k - first] = o <= p ? 0 : char_of[o - p];
        out->at[k - first] = k;
    }
    return true;
}

/* axolotl's way: the content tokenized alone, token i at start + i. */
static void tokenize_alone(const tt_chat_format *f, const tt_token_ids *ids, int64_t start, const char *content,
                           size_t content_len, const int64_t *char_of, content_tokens *out) {
    tt_token_ids alone = {.with_offsets = true};
    tt_tokenizer_encode(f->tok, content, content_len, false, &alone);
    content_tokens_alloc(out, alone.count);
    for (int64_t i = 0; i < alone.count; i++) {
        out->first[i] = char_of[alone.offsets[i]];
        out->at[i] = start + i < ids->count ? start + i : -1; /* axolotl: only positions inside the ids */
    }
    tt_token_ids_free(&alone);
}

void tt_chat_label_spans(const tt_chat_format *f, const char *text, size_t text_len, const tt_token_ids *ids,
                         int64_t start, int64_t end, const char *content, json_t *spans, uint8_t *labels) {
    const size_t content_len = strlen(content);
    int64_t *char_of = char_index(content, content_len);
    content_tokens t = {0};
    if (!content_len || !find_in_render(text, text_len, ids, start, end, content, content_len, char_of, &t))
        tokenize_alone(f, ids, start, content, content_len, char_of, &t);
    set_last_characters(&t, char_of[content_len]);
    free(char_of);
    size_t s;
    json_t *span;
    json_array_foreach(spans, s, span) {
        if (!json_is_true(json_object_get(span, "train"))) continue; /* an untrained span labels nothing */
        const int64_t begin = json_integer_value(json_object_get(span, "begin_offset"));
        const int64_t last = json_integer_value(json_object_get(span, "end_offset"));
        /* adjust_train_details: from the first token starting at or after begin (back one if the token before
         * reaches past begin) to the last token ending at or before last (on one if the next starts before it) */
        int64_t b = 0;
        while (b < t.count && t.first[b] < begin) b++;
        if (b > 0 && t.last[b - 1] > begin) b--;
        int64_t e = t.count - 1;
        while (e >= 0 && t.last[e] > last) e--;
        if (e < t.count - 1 && t.first[e + 1] < last) e++;
        if (b > e) continue; /* axolotl skips the span, with a warning */
        const int64_t from = t.first[b], to = t.last[e];
        for (int64_t i = 0; i < t.count; i++)
            if (t.first[i] >= from && t.last[i] <= to && t.at[i] >= 0) labels[t.at[i]] = 1;
    }
    content_tokens_free(&t);
}
