/* Records -> texts -> ids and label masks, per dataset type (sft_examples.h says whose behaviour
 * each follows). */
#include "data/sft_examples.h"

#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/python_format.h"

/* axolotl's AlpacaPrompter (prompt_style "instruct"), the texts verbatim */
static const char alpaca_system[] = "Below is an instruction that describes a task, paired with an input that provides "
                                    "further context. Write a response that appropriately completes the request.\n\n";
static const char alpaca_system_no_input[] =
    "Below is an instruction that describes a task. Write a response that appropriately completes the request.\n\n";

static void add_segment(tt_sft_example *ex, char *text, size_t len, bool trained, bool add_special, bool strip_bos) {
    if (ex->count == ex->capacity) {
        ex->capacity = ex->capacity ? 2 * ex->capacity : 4;
        ex->segments = tt_xrealloc(ex->segments, sizeof(tt_sft_segment) * (size_t)ex->capacity, "segments");
    }
    ex->segments[ex->count++] = (tt_sft_segment){
        .text = text, .len = len, .trained = trained, .add_special = add_special, .strip_bos = strip_bos};
}

static const char *json_kind(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "a list";
    case JSON_STRING: return "a string";
    case JSON_INTEGER:
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "a value";
}

/* record[field] as a string; a missing field is allowed (NULL) only when optional. */
static const char *string_field(json_t *record, const char *field, const char *where, const char *type, bool optional,
                                size_t *len) {
    json_t *v = json_object_get(record, field);
    if (!v || (optional && json_is_null(v))) {
        if (optional) return NULL;
        tt_die("%s: the record has no field '%s', which a %s dataset reads; fix the record, or name the field in the "
               "datasets entry (%s)",
               where, field, type,
               strcmp(type, "completion") == 0 ? "field: NAME" : "field_instruction / field_input / field_output");
    }
    if (!json_is_string(v))
        tt_die("%s: field '%s' is %s; a %s dataset needs a string there", where, field, json_kind(v), type);
    *len = json_string_length(v);
    if (memchr(json_string_value(v), 0, *len))
        tt_die("%s: field '%s' contains a NUL character (\\u0000); remove it", where, field);
    return json_string_value(v);
}

static char *concat(const char *const *parts, const size_t *lens, int n, size_t *len) {
    size_t total = 0;
    for (int i = 0; i < n; i++) total += lens[i];
    char *s = tt_xmalloc(total + 1, "a prompt");
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        memcpy(s + at, parts[i], lens[i]);
        at += lens[i];
    }
    s[at] = 0;
    *len = total;
    return s;
}

/* axolotl's user-defined type (UserDefinedPrompter): (system_format filled with the system text, when there is one) +
 * format filled with the instruction and the input (a non-empty one), else no_input_format with the instruction; the
 * output (missing: empty) tokenized as alpaca's. */
static void user_defined_segments(const tt_dataset_spec *spec, bool train_on_inputs, json_t *record, const char *where,
                                  tt_sft_example *out) {
    size_t ilen = 0, xlen = 0, olen = 0, slen = 0;
    const char *instruction = string_field(record, spec->field_instruction, where, "user-defined", false, &ilen);
    const char *input = string_field(record, spec->field_input, where, "user-defined", true, &xlen);
    const char *output = string_field(record, spec->field_output, where, "user-defined", true, &olen);
    /* axolotl: the record's field where it has one (null: None, no system text), else system_prompt */
    const bool has_system = json_object_get(record, spec->field_system) != NULL;
    const char *system = string_field(record, spec->field_system, where, "user-defined", true, &slen);
    if (!system) {
        system = has_system ? "" : spec->system_prompt;
        slen = strlen(system);
    }
    static const char *const names[] = {"instruction", "input", "system"};
    const char *const values[] = {instruction, input ? input : "", system};
    const size_t lens[] = {ilen, input ? xlen : 0, slen};
    char err[512], *system_text = NULL, *turn = NULL;
    size_t system_len = 0, turn_len = 0;
    if (slen > 0 && spec->system_format[0] && /* axolotl: `if system and self.system_format` */
        !tt_python_format(spec->system_format, names + 2, values + 2, lens + 2, 1, &system_text, &system_len, err,
                          sizeof err))
        tt_die("%s: system_format: %s", where, err);
    const bool with_input = input && xlen > 0; /* axolotl: `if input:` */
    if (!tt_python_format(with_input ? spec->format : spec->no_input_format, names, values, lens, with_input ? 2 : 1,
                          &turn, &turn_len, err, sizeof err))
        tt_die("%s: %s: %s", where, with_input ? "format" : "no_input_format", err);
    const char *parts[] = {system_text ? system_text : "", turn};
    const size_t part_lens[] = {system_len, turn_len};
    size_t plen = 0;
    char *prompt = concat(parts, part_lens, 2, &plen);
    add_segment(out, prompt, plen, train_on_inputs, true, false);
    free(system_text);
    free(turn);
    const char *response[] = {output ? output : ""};
    add_segment(out, concat(response, &olen, 1, &olen), olen, true, true, true);
    out->append_eos = true;
}

static void alpaca_segments(const tt_dataset_spec *spec, bool train_on_inputs, json_t *record, const char *where,
                            tt_sft_example *out) {
    if (spec->user_defined) {
        user_defined_segments(spec, train_on_inputs, record, where, out);
        return;
    }
    size_t ilen = 0, xlen = 0, olen = 0;
    const char *instruction = string_field(record, spec->field_instruction, where, "alpaca", false, &ilen);
    const char *input = string_field(record, spec->field_input, where, "alpaca", true, &xlen);
    const char *output = string_field(record, spec->field_output, where, "alpaca", false, &olen);
    if (olen == 0)
        tt_die("%s: field '%s' is empty: the record has no response to train on; remove the record", where,
               spec->field_output);
    size_t plen;
    char *prompt;
    if (input && xlen > 0) { /* axolotl: `if input:` */
        const char *parts[] = {alpaca_system, "### Instruction:\n", instruction, "\n\n### Input:\n",
                               input,         "\n\n### Response:\n"};
        const size_t lens[] = {strlen(alpaca_system), strlen(parts[1]), ilen, strlen(parts[3]), xlen, strlen(parts[5])};
        prompt = concat(parts, lens, 6, &plen);
    } else {
        const char *parts[] = {alpaca_system_no_input, "### Instruction:\n", instruction, "\n\n### Response:\n"};
        const size_t lens[] = {strlen(alpaca_system_no_input), strlen(parts[1]), ilen, strlen(parts[3])};
        prompt = concat(parts, lens, 4, &plen);
    }
    add_segment(out, prompt, plen, train_on_inputs, true, false);
    const char *parts[] = {output};
    add_segment(out, concat(parts, &olen, 1, &olen), olen, true, true, true);
    out->append_eos = true;
}

static void input_output_segments(bool train_on_inputs, json_t *record, const char *where, tt_sft_example *out) {
    json_t *segments = json_object_get(record, "segments");
    if (!segments)
        tt_die("%s: the record has no field 'segments', which an input_output dataset reads: {\"segments\": "
               "[{\"text\": ..., \"label\": true|false}, ...]}",
               where);
    if (!json_is_array(segments))
        tt_die("%s: field 'segments' is %s; an input_output dataset needs a list of {\"text\": ..., \"label\": ...}",
               where, json_kind(segments));
    size_t total = 0;
    for (size_t i = 0; i < json_array_size(segments); i++) {
        json_t *seg = json_array_get(segments, i);
        if (!json_is_object(seg))
            tt_die("%s: segments[%zu] is %s; each segment is {\"text\": ..., \"label\": true|false}", where, i,
                   json_kind(seg));
        json_t *text = json_object_get(seg, "text"), *label = json_object_get(seg, "label");
        if (!text || !label)
            tt_die("%s: segments[%zu] has no field '%s'; each segment is {\"text\": ..., \"label\": true|false}", where,
                   i, !text ? "text" : "label");
        if (!json_is_string(text))
            tt_die("%s: segments[%zu].text is %s; it must be a string", where, i, json_kind(text));
        if (!json_is_boolean(label))
            tt_die("%s: segments[%zu].label is %s; it must be true or false", where, i, json_kind(label));
        size_t len = json_string_length(text);
        if (memchr(json_string_value(text), 0, len))
            tt_die("%s: segments[%zu].text contains a NUL character (\\u0000); remove it", where, i);
        const char *parts[] = {json_string_value(text)};
        add_segment(out, concat(parts, &len, 1, &len), len, json_is_true(label) || train_on_inputs, false, false);
        total += len;
    }
    if (total == 0) tt_die("%s: empty document: the segments hold no text; remove the record", where);
    out->append_eos = false;
}

void tt_sft_record_segments(const tt_dataset_spec *spec, bool train_on_inputs, json_t *record, const char *where,
                            tt_sft_example *out) {
    memset(out, 0, sizeof(*out));
    switch (spec->type) {
    case TT_DATASET_COMPLETION: {
        size_t len = 0;
        const char *text = string_field(record, spec->field, where, "completion", false, &len);
        if (len == 0) tt_die("%s: empty document: field '%s' is \"\"; remove the record", where, spec->field);
        const char *parts[] = {text};
        add_segment(out, concat(parts, &len, 1, &len), len, true, true, false);
        out->append_eos = true;
        return;
    }
    case TT_DATASET_ALPACA: alpaca_segments(spec, train_on_inputs, record, where, out); return;
    case TT_DATASET_INPUT_OUTPUT: input_output_segments(train_on_inputs, record, where, out); return;
    case TT_DATASET_TOKENS:
    case TT_DATASET_CHAT_TEMPLATE: break;
    }
    /* the type as a number: the fuzz targets link src/data without src/config/ */
    TT_CHECK(false, "dataset type %d has no record reader", (int)spec->type);
}

void tt_sft_example_free(tt_sft_example *ex) {
    for (int i = 0; i < ex->count; i++) free(ex->segments[i].text);
    free(ex->segments);
    memset(ex, 0, sizeof(*ex));
}

static void grow_labels(uint8_t **labels, int64_t *capacity, int64_t need) {
    if (need <= *capacity) return;
    int64_t cap = *capacity ? *capacity : 256;
    while (cap < need) cap *= 2;
    *labels = tt_xrealloc(*labels, (size_t)cap, "labels");
    *capacity = cap;
}

void tt_sft_tokenize_example(const tt_tokenizer *tok, const tt_sft_ids *special, const tt_sft_example *ex,
                             int64_t segment_max_ids, tt_token_ids *ids, uint8_t **labels, int64_t *label_capacity) {
    ids->count = 0;
    for (int s = 0; s < ex->count; s++) {
        const tt_sft_segment *seg = &ex->segments[s];
        const int64_t first = ids->count;
        tt_tokenizer_encode_prefix(tok, seg->text, seg->len, seg->add_special, segment_max_ids, ids);
        if (seg->strip_bos && special->bos >= 0 && ids->count > first && ids->ids[first] == special->bos) {
            memmove(ids->ids + first, ids->ids + first + 1, sizeof(int32_t) * (size_t)(ids->count - first - 1));
            ids->count--;
        }
        grow_labels(labels, label_capacity, ids->count + 1);
        memset(*labels + first, seg->trained ? 1 : 0, (size_t)(ids->count - first));
    }
    /* axolotl appends EOS when the text does not end with it already (and the text is not empty) */
    if (ex->append_eos && special->eos >= 0 && ids->count > 0 && ids->ids[ids->count - 1] != special->eos) {
        int32_t eos = special->eos;
        if (ids->count == ids->capacity) { /* the tokenizer grows ids with realloc too */
            ids->capacity = ids->capacity ? 2 * ids->capacity : 16;
            ids->ids = tt_xrealloc(ids->ids, sizeof(int32_t) * (size_t)ids->capacity, "token ids");
            if (ids->with_offsets)
                ids->offsets = tt_xrealloc(ids->offsets, sizeof(int64_t) * (size_t)ids->capacity, "token offsets");
        }
        if (ids->with_offsets) ids->offsets[ids->count] = 0;
        ids->ids[ids->count++] = eos;
        grow_labels(labels, label_capacity, ids->count);
        (*labels)[ids->count - 1] = 1;
    }
}
