/* Conversations -> ids and label masks (chat_template.h): axolotl's
 * ChatTemplateStrategy._tokenize_single_prompt, find_turn, find_first_eos_token and
 * find_first_eot_token, with turns found in the full conversation, and transformers'
 * return_assistant_tokens_mask for templates with {% generation %} blocks. Nothing here writes
 * shared state: one call per thread at a time per tt_token_ids, any number of threads per format. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "data/chat_internal.h"

/* axolotl's placeholder for the turn being located */
static const char dummy_content[] = "[[dummy_message]]";

/* An EOS that follows a turn by at most this many tokens belongs to it (axolotl: "allow for some
 * template padding"). */
#define EOS_REACH 3

static void set_error(tt_chat_example *ex, const char *fmt, const char *a, const char *b) {
    free(ex->error);
    size_t n = strlen(fmt) + strlen(ex->where) + strlen(a) + strlen(b) + 1;
    ex->error = tt_xmalloc(n, "an error message");
    snprintf(ex->error, n, fmt, ex->where, a, b);
}

/* The template's render of messages with transformers' variables: tools (None without), documents
 * None, add_generation_prompt (false for training data), the special tokens' texts, and chat_template_kwargs (which, as
 * apply_chat_template's keyword arguments, win over the special tokens). */
static bool render(const tt_chat_format *f, tt_chat_example *ex, json_t *messages, bool add_generation_prompt,
                   tt_jinja_output *out) {
    json_t *ctx = json_object();
    json_object_set(ctx, "messages", messages);
    json_object_set(ctx, "tools", ex->tools ? ex->tools : json_null());
    json_object_set(ctx, "documents", json_null());
    json_object_set(ctx, "add_generation_prompt", add_generation_prompt ? json_true() : json_false());
    const char *names[] = {"bos_token", "eos_token", "unk_token", "pad_token"};
    const char *values[] = {f->bos_token, f->eos_token, f->unk_token, f->pad_token};
    for (int i = 0; i < 4; i++)
        if (values[i]) json_object_set_new(ctx, names[i], json_string(values[i]));
    if (f->template_kwargs) json_object_update(ctx, f->template_kwargs);
    char err[1024];
    bool ok = tt_jinja_render(f->template, ctx, out, err, sizeof err);
    json_decref(ctx);
    if (!ok && ex->parsed_arguments) /* axolotl's parse of the arguments may be what the template cannot take */
        set_error(
            ex,
            "%s: the chat template (%s) fails on this conversation: %s; its tool calls' arguments were JSON text, "
            "parsed into objects as axolotl parses them: `tool_call_arguments: as_given` in the datasets entry "
            "keeps them as text, as transformers passes them (DeepSeek-V3's template concatenates them)",
            f->template_origin, err);
    else if (!ok)
        set_error(ex,
                  "%s: the chat template (%s) fails on this conversation: %s; fix the record, or choose another "
                  "template with chat_template",
                  f->template_origin, err);
    return ok;
}

/* max_ids > 0: only the first max_ids ids (tt_tokenizer_encode_prefix) */
static void encode(const tt_chat_format *f, const tt_jinja_output *text, int64_t max_ids, tt_token_ids *ids) {
    ids->count = 0;
    /* apply_chat_template: add_special_tokens=False */
    tt_tokenizer_encode_prefix(f->tok, text->text, text->len, false, max_ids, ids);
}

/* The turn's token range [*start, *end) in the full render's ids, as axolotl's find_turn locates
 * it: the first and the last token that differ when the turn's content is the placeholder (and it
 * keeps only its role; with content_only its reasoning_content too, so that the range is the
 * content's alone, as axolotl locates a turn with training spans). -1, -1 when it cannot be told
 * (axolotl then skips the turn's labels). Returns false on a template error. */
static bool find_turn(const tt_chat_format *f, tt_chat_example *ex, size_t turn, bool content_only,
                      const tt_token_ids *full, const tt_encoded_base *base, tt_token_ids *scratch, int64_t *start,
                      int64_t *end) {
    *start = *end = -1;
    json_t *message = json_array_get(ex->messages, turn);
    const char *role = json_string_value(json_object_get(message, "role"));
    /* axolotl: Mistral's templates print nothing for a lone system message */
    if (turn == 0 && strcmp(role, "system") == 0 && f->settings.mistral_tokenizer) return true;
    tt_jinja_output out;
    bool ok = false;
    /* axolotl's placeholder turn has only the role; where the template then raises (Mistral's
     * check of the roles' order counts an assistant message without its tool_calls), the turn
     * keeps its other fields */
    for (int attempt = 0; attempt < 2 && !ok; attempt++) {
        json_t *dummy = attempt == 0 ? json_object() : json_copy(message);
        json_t *reasoning = json_object_get(message, "reasoning_content");
        if (content_only && reasoning) json_object_set(dummy, "reasoning_content", reasoning);
        json_object_set_new(dummy, "role", json_string(role));
        json_object_set_new(dummy, "content", json_string(dummy_content));
        json_t *messages = json_array();
        for (size_t i = 0; i < json_array_size(ex->messages); i++)
            json_array_append(messages, i == turn ? dummy : json_array_get(ex->messages, i));
        json_decref(dummy);
        ok = render(f, ex, messages, false, &out);
        json_decref(messages);
    }
    if (!ok) return false;
    free(ex->error); /* the first attempt's */
    ex->error = NULL;
    scratch->count = 0; /* the render differs from the full one around the turn: the rest's ids are the full's */
    tt_tokenizer_encode_edited(f->tok, base, out.text, out.len, scratch);
    tt_jinja_output_free(&out);
    const int32_t *a = full->ids, *b = scratch->ids;
    int64_t n = full->count, m = scratch->count, common = n < m ? n : m;
    if (n == 0 || m == 0) return true;
    int64_t first = -1, last = -1;
    for (int64_t i = 0; i < common && first < 0; i++)
        if (a[i] != b[i]) first = i;
    for (int64_t i = 0; i < common && last < 0; i++)
        if (a[n - 1 - i] != b[m - 1 - i]) last = n - i;
    if (first < 0 || last < 0 || last <= first) return true;
    *start = first;
    *end = last;
    return true;
}

static bool is_one_of(int32_t id, const int32_t *set, int count) {
    for (int i = 0; i < count; i++)
        if (set[i] == id) return true;
    return false;
}

/* The first token i >= from that is one of set, as axolotl's find_first_eos_token and
 * find_first_eot_token; from -1 (a turn not found) starts, as Python's range(-1, n) does, at the
 * last token, which then reads as "none". */
static int64_t find_first_of(const tt_token_ids *ids, int64_t from, const int32_t *set, int count) {
    if (count == 0 || ids->count == 0) return -1;
    if (from < 0) {
        if (is_one_of(ids->ids[ids->count - 1], set, count)) return -1;
        from = 0;
    }
    for (int64_t i = from; i < ids->count; i++)
        if (is_one_of(ids->ids[i], set, count)) return i;
    return -1;
}

/* transformers' char_to_token on byte positions: the first token whose text holds position pos
 * (a token runs from its offset to the next larger offset: tokens that split one character share
 * it), or -1. */
static int64_t token_at(const tt_token_ids *ids, const int64_t *ends, int64_t pos) {
    if (pos < 0) return -1;
    int64_t lo = 0, hi = ids->count; /* the first token that ends after pos */
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (ends[mid] > pos) hi = mid;
        else lo = mid + 1;
    }
    return lo < ids->count && ids->offsets[lo] <= pos ? lo : -1;
}

/* The generation blocks as token ranges, as return_assistant_tokens_mask marks them: from the
 * token at the block's first byte to the token at its last byte (to the end when that is token 0
 * or none); after a block whose first byte is in no token, none (transformers stops there). */
static void generation_ranges(const tt_token_ids *ids, const tt_jinja_output *out, int64_t text_len, int64_t *ranges) {
    int64_t n = ids->count;
    int64_t *ends = tt_xmalloc(sizeof(int64_t) * (size_t)(n ? n : 1), "token ends");
    for (int64_t i = n - 1; i >= 0; i--)
        ends[i] = i == n - 1 ? text_len : ids->offsets[i + 1] > ids->offsets[i] ? ids->offsets[i + 1] : ends[i + 1];
    bool stopped = false;
    for (int64_t s = 0; s < out->span_count; s++) {
        int64_t first = stopped ? -1 : token_at(ids, ends, (int64_t)out->generation_spans[2 * s]);
        if (first < 0) {
            stopped = true;
            ranges[2 * s] = ranges[2 * s + 1] = -1;
            continue;
        }
        int64_t last = token_at(ids, ends, (int64_t)out->generation_spans[2 * s + 1] - 1);
        ranges[2 * s] = first;
        ranges[2 * s + 1] = last > 0 ? last + 1 : n;
    }
    free(ends);
}

static void grow_labels(uint8_t **labels, int64_t *capacity, int64_t need) {
    if (need <= *capacity) return;
    int64_t cap = *capacity ? *capacity : 256;
    while (cap < need) cap *= 2;
    *labels = tt_xrealloc(*labels, (size_t)cap, "labels");
    *capacity = cap;
}

/* The turn's spans, when it has any. */
static json_t *turn_spans(const tt_chat_example *ex, size_t turn) {
    json_t *spans = ex->details ? json_array_get(ex->details, turn) : NULL;
    return json_is_array(spans) && json_array_size(spans) > 0 ? spans : NULL;
}

/* An end token (EOS or EOT) found within reach of a turn's end: trains it as rule says, and remembers it for
 * rule last. */
static void end_token(const tt_token_ids *ids, int64_t end, const int32_t *set, int count, int rule, bool trains,
                      int64_t *last_found, uint8_t *labels) {
    const int64_t at = find_first_of(ids, end, set, count);
    if (at == -1 || llabs(at - end) > EOS_REACH) return;
    *last_found = at;
    if (rule == TT_EOS_ALL || (rule == TT_EOS_TURN && trains)) labels[at] = 1;
}

bool tt_chat_tokenize(const tt_chat_format *f, tt_chat_example *ex, tt_token_ids *ids, uint8_t **labels,
                      int64_t *label_capacity, int64_t longest_kept) {
    size_t turns = json_array_size(ex->messages);
    bool any_spans = false;
    for (size_t t = 0; t < turns && !any_spans; t++) any_spans = turn_spans(ex, t) != NULL;
    ids->with_offsets = f->has_generation || any_spans;
    const tt_train_on_eos eos_rule = f->settings.train_on_eos, eot_rule = f->settings.train_on_eot;
    /* axolotl locates only the turns it trains, and every turn when train_on_eos or train_on_eot is all; an assistant
     * turn of a template with {% generation %} blocks is located by its block */
    bool locates = false;
    for (size_t t = 0; t < turns && !locates; t++) {
        const bool is_assistant =
            strcmp(json_string_value(json_object_get(json_array_get(ex->messages, t), "role")), "assistant") == 0;
        locates =
            (ex->trains[t] || eos_rule == TT_EOS_ALL || eot_rule == TT_EOS_ALL) && !(f->has_generation && is_assistant);
    }
    tt_jinja_output full;
    if (!render(f, ex, ex->messages, false, &full)) return false;
    tt_encoded_base *base = NULL; /* the full render's encoding, which the turns' placeholder renders reuse */
    ids->count = 0;
    if (locates && (longest_kept <= 0 || full.len / 2 <= TT_ENCODE_PREFIX_WINDOW)) {
        /* a text encode_prefix would encode whole anyway: encoded once, for the ids and the base alike */
        base = tt_tokenizer_encode_base(f->tok, full.text, full.len, ids);
        if (longest_kept > 0 && ids->count > longest_kept + 1) ids->count = longest_kept + 1;
    } else {
        encode(f, &full, longest_kept > 0 ? longest_kept + 1 : 0, ids); /* one id past the longest: too long */
    }
    grow_labels(labels, label_capacity, ids->count + 1);
    memset(*labels, 0, (size_t)ids->count);
    if (longest_kept > 0 && ids->count > longest_kept) { /* dropped: its turns need not be found */
        tt_jinja_output_free(&full);
        tt_encoded_base_free(base);
        return true;
    }
    int64_t *ranges = NULL, assistants = 0;
    if (f->has_generation) {
        for (size_t i = 0; i < turns; i++)
            assistants +=
                strcmp(json_string_value(json_object_get(json_array_get(ex->messages, i), "role")), "assistant") == 0;
        if (full.span_count != assistants) {
            char counts[64];
            snprintf(counts, sizeof counts, "%lld generation blocks for %lld", (long long)full.span_count,
                     (long long)assistants);
            set_error(ex,
                      "%s: the chat template (%s) marks %s assistant messages; the blocks mark the assistant "
                      "turns, one each: fix the template, or the record",
                      f->template_origin, counts);
            tt_jinja_output_free(&full);
            tt_encoded_base_free(base);
            return false;
        }
        ranges = tt_xmalloc(sizeof(int64_t) * 2 * (size_t)(assistants ? assistants : 1), "turn ranges");
        generation_ranges(ids, &full, (int64_t)full.len, ranges);
    }
    const int32_t eos = f->settings.eos_id;
    tt_token_ids scratch = {0};
    int64_t last_eos = -1, last_eot = -1, assistant = 0;
    bool ok = true;
    for (size_t t = 0; t < turns && ok; t++) {
        json_t *message = json_array_get(ex->messages, t);
        bool is_assistant = strcmp(json_string_value(json_object_get(message, "role")), "assistant") == 0;
        int64_t start = -1, end = -1;
        if (f->has_generation && is_assistant) {
            start = ranges[2 * assistant];
            end = ranges[2 * assistant + 1];
            assistant++;
        }
        bool trains = ex->trains[t];
        /* axolotl locates only the turns it trains, and every turn when train_on_eos or train_on_eot is all */
        if (!trains && eos_rule != TT_EOS_ALL && eot_rule != TT_EOS_ALL) continue;
        json_t *spans = turn_spans(ex, t);
        if (!(f->has_generation && is_assistant)) {
            if (!base) base = tt_tokenizer_encode_base(f->tok, full.text, full.len, &scratch); /* a long text's */
            ok = find_turn(f, ex, t, spans != NULL, ids, base, &scratch, &start, &end);
        }
        if (!ok) break;
        if (trains && start >= 0 && end >= 0) {
            if (spans)
                tt_chat_label_spans(f, full.text, full.len, ids, start, end,
                                    json_string_value(json_object_get(message, "content")), spans, *labels);
            else memset(*labels + start, 1, (size_t)(end - start));
        }
        if (trains && start < 0) ex->turns_not_found++;
        end_token(ids, end, f->eot_ids, f->eot_count, eot_rule, trains, &last_eot, *labels);
        end_token(ids, end, &eos, eos >= 0, eos_rule, trains, &last_eos, *labels);
    }
    if (ok && eot_rule == TT_EOS_LAST && last_eot >= 0) (*labels)[last_eot] = 1;
    if (ok && eos_rule == TT_EOS_LAST && last_eos >= 0) (*labels)[last_eos] = 1;
    tt_jinja_output_free(&full);
    tt_token_ids_free(&scratch);
    tt_encoded_base_free(base);
    free(ranges);
    return ok;
}

bool tt_chat_prompt_ids(const tt_chat_format *f, json_t *messages, tt_token_ids *ids, char **error) {
    tt_chat_example ex = {.messages = messages, .where = (char *)"the prompt"};
    tt_jinja_output out;
    *error = NULL;
    if (!render(f, &ex, messages, true, &out)) {
        *error = ex.error;
        return false;
    }
    encode(f, &out, 0, ids);
    tt_jinja_output_free(&out);
    return true;
}
