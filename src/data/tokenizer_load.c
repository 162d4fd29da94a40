/* tokenizer.json -> the tokenizer's tables. Every component type is checked against what
 * tokenizer.c implements: anything else is an error naming the file and the JSON key, never
 * silently skipped (a skipped normalizer would give different ids without a word). */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/check.h"
#include "core/input_file.h"
#include "data/tokenizer_internal.h"

/* The largest tokenizer.json read: real ones are tens of MB (a 256k vocabulary with its merges) */
#define TT_TOKENIZER_JSON_MAX_BYTES ((size_t)512 << 20)
/* Token ids above this are refused: the id -> token table has an entry per id up to the largest, so one absurd id
 * would take gigabytes (published vocabularies stop near 262144). */
#define TT_TOKENIZER_MAX_ID ((int64_t)1 << 24)

#ifdef TT_FUZZING
tt_tokenizer *tt_tokenizer_being_loaded;
#endif

/* ---- small JSON helpers that name the key on error ---- */

static json_t *get_object(const char *file, json_t *parent, const char *key, const char *where) {
    json_t *v = json_object_get(parent, key);
    if (!json_is_object(v))
        tt_die("%s: %s.%s is %s, expected an object", file, where, key, v ? "not an object" : "missing");
    return v;
}

static const char *get_string(const char *file, json_t *parent, const char *key, const char *where) {
    json_t *v = json_object_get(parent, key);
    if (!json_is_string(v))
        tt_die("%s: %s.%s is %s, expected a string", file, where, key, v ? "not a string" : "missing");
    return json_string_value(v);
}

/* A boolean with a default for a missing or null key. */
static bool get_bool(const char *file, json_t *parent, const char *key, const char *where, bool fallback) {
    json_t *v = json_object_get(parent, key);
    if (!v || json_is_null(v)) return fallback;
    if (!json_is_boolean(v)) tt_die("%s: %s.%s is not true or false", file, where, key);
    return json_is_true(v);
}

static const char *type_of(const char *file, json_t *component, const char *where) {
    if (!json_is_object(component)) tt_die("%s: %s is not an object", file, where);
    return get_string(file, component, "type", where);
}

/* ---- vocabulary ---- */

static void set_token(tt_tokenizer *tok, int32_t id, const char *text) {
    if (id >= tok->vocab_size) {
        int64_t n = tok->vocab_size ? tok->vocab_size : 1024;
        while (n <= id) n *= 2;
        tok->id_to_token =
            tt_xrealloc(tok->id_to_token, tt_mul_size((size_t)n, sizeof(char *), "vocabulary"), "vocabulary");
        memset(tok->id_to_token + tok->vocab_size, 0, (size_t)(n - tok->vocab_size) * sizeof(char *));
        tok->vocab_size = n; /* trimmed to the largest id + 1 at the end of load */
    }
    if (!tok->id_to_token[id]) tok->id_to_token[id] = tt_xstrdup(text);
}

static void load_vocab(tt_tokenizer *tok, const char *file, json_t *model) {
    json_t *vocab = json_object_get(model, "vocab");
    if (!json_is_object(vocab))
        tt_die("%s: model.vocab is %s; a BPE model needs its vocabulary (token -> id)", file,
               vocab ? "not an object" : "missing");
    tt_str_map_init(&tok->vocab, json_object_size(vocab));
    const char *key;
    json_t *value;
    json_object_foreach(vocab, key, value) {
        if (!json_is_integer(value) || json_integer_value(value) < 0)
            tt_die("%s: model.vocab[\"%s\"] is not an id (a non-negative integer)", file, key);
        if (json_integer_value(value) >= TT_TOKENIZER_MAX_ID)
            tt_die("%s: model.vocab[\"%s\"] is id %lld; tiertrain takes ids below %lld (published vocabularies stop "
                   "near 262144): the file is damaged or not a tokenizer.json",
                   file, key, (long long)json_integer_value(value), (long long)TT_TOKENIZER_MAX_ID);
        int32_t id = (int32_t)json_integer_value(value);
        set_token(tok, id, key);
        /* the map keys with id_to_token's text, which is the first token of that id: a second
         * token with the same id would be looked up by the wrong text (and decoding could not
         * say which of the two an id means) */
        if (strcmp(tok->id_to_token[id], key) != 0)
            tt_die("%s: model.vocab[\"%s\"] and model.vocab[\"%s\"] both have id %d; each id names one token: "
                   "the file is corrupt",
                   file, tok->id_to_token[id], key, (int)id);
        tt_str_map_put(&tok->vocab, tok->id_to_token[id], strlen(key), id);
    }
}

static void put_merge(tt_tokenizer *tok, int32_t left, int32_t right, int32_t rank, int32_t merged) {
    uint64_t pair = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
    for (uint64_t i = tt_hash_bytes(&pair, 8) & tok->merges_mask;; i = (i + 1) & tok->merges_mask) {
        tt_merge_slot *s = &tok->merges[i];
        if (s->pair == UINT64_MAX || s->pair == pair) {
            /* a repeated pair takes its last rank, as tokenizers' HashMap collect does */
            *s = (tt_merge_slot){pair, rank, merged};
            return;
        }
    }
}

static int32_t vocab_id(tt_tokenizer *tok, const char *file, const char *token, size_t len, size_t index,
                        const char *what) {
    int32_t id = tt_str_map_get(&tok->vocab, token, len);
    if (id < 0)
        tt_die("%s: model.merges[%zu] names %s '%.*s', which is not in model.vocab", file, index, what, (int)len,
               token);
    return id;
}

static void load_merges(tt_tokenizer *tok, const char *file, json_t *model) {
    json_t *merges = json_object_get(model, "merges");
    if (!json_is_array(merges))
        tt_die("%s: model.merges is %s, expected a list of merges", file, merges ? "not a list" : "missing");
    size_t n = json_array_size(merges);
    uint64_t cap = 16;
    while (cap < 2 * (uint64_t)n + 2) cap *= 2;
    tok->merges = tt_xmalloc(tt_mul_size(cap, sizeof(tt_merge_slot), "merges"), "merges");
    for (uint64_t i = 0; i < cap; i++) tok->merges[i].pair = UINT64_MAX;
    tok->merges_mask = cap - 1;
    char *joined = NULL;
    size_t joined_cap = 0;
    for (size_t i = 0; i < n; i++) {
        json_t *m = json_array_get(merges, i);
        const char *a, *b;
        size_t alen, blen;
        if (json_is_string(m)) { /* "left right" (older files) */
            a = json_string_value(m);
            const char *space = strchr(a, ' ');
            if (!space || strchr(space + 1, ' '))
                tt_die("%s: model.merges[%zu] \"%s\" is not two tokens separated by one space", file, i, a);
            alen = (size_t)(space - a);
            b = space + 1;
            blen = strlen(b);
        } else if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
                   json_is_string(json_array_get(m, 1))) {
            a = json_string_value(json_array_get(m, 0));
            b = json_string_value(json_array_get(m, 1));
            alen = strlen(a);
            blen = strlen(b);
        } else {
            tt_die("%s: model.merges[%zu] is neither \"left right\" nor [\"left\", \"right\"]", file, i);
        }
        int32_t left = vocab_id(tok, file, a, alen, i, "the token");
        int32_t right = vocab_id(tok, file, b, blen, i, "the token");
        if (alen + blen + 1 > joined_cap) {
            joined_cap = 2 * (alen + blen + 1);
            joined = tt_xrealloc(joined, joined_cap, "merges");
        }
        memcpy(joined, a, alen);
        memcpy(joined + alen, b, blen);
        joined[alen + blen] = 0;
        int32_t merged = tt_str_map_get(&tok->vocab, joined, alen + blen);
        if (merged < 0) tt_die("%s: model.merges[%zu] makes '%s', which is not in model.vocab", file, i, joined);
        put_merge(tok, left, right, (int32_t)i, merged);
    }
    free(joined);
}

static void load_model(tt_tokenizer *tok, const char *file, json_t *root) {
    json_t *model = get_object(file, root, "model", "tokenizer");
    json_t *type = json_object_get(model, "type");
    if (type && (!json_is_string(type) || strcmp(json_string_value(type), "BPE") != 0))
        tt_die("%s: model.type is %s; only \"BPE\" models are implemented", file,
               json_is_string(type) ? json_string_value(type) : "not a string");
    json_t *dropout = json_object_get(model, "dropout");
    if (dropout && !json_is_null(dropout) && !(json_is_number(dropout) && json_number_value(dropout) == 0))
        tt_die("%s: model.dropout is set; BPE dropout (random merges) is not implemented: set it to null", file);
    const char *affixes[2] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int k = 0; k < 2; k++) {
        json_t *v = json_object_get(model, affixes[k]);
        if (v && !json_is_null(v) && !(json_is_string(v) && json_string_value(v)[0] == 0))
            tt_die("%s: model.%s is set; it is not implemented (only null or \"\")", file, affixes[k]);
    }
    load_vocab(tok, file, model);
    load_merges(tok, file, model);
    tok->fuse_unk = get_bool(file, model, "fuse_unk", "model", false);
    tok->byte_fallback = get_bool(file, model, "byte_fallback", "model", false);
    tok->ignore_merges = get_bool(file, model, "ignore_merges", "model", false);
    tok->unk_id = -1;
    json_t *unk = json_object_get(model, "unk_token");
    if (unk && !json_is_null(unk)) {
        if (!json_is_string(unk)) tt_die("%s: model.unk_token is not a string", file);
        tok->unk_id = tt_str_map_get(&tok->vocab, json_string_value(unk), strlen(json_string_value(unk)));
        if (tok->unk_id < 0) tt_die("%s: model.unk_token '%s' is not in model.vocab", file, json_string_value(unk));
    }
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        tok->byte_fallback_ids[b] = tt_str_map_get(&tok->vocab, name, 6);
    }
}

/* ---- added tokens ---- */

static void load_added_tokens(tt_tokenizer *tok, const char *file, json_t *root) {
    json_t *list = json_object_get(root, "added_tokens");
    tt_str_map_init(&tok->added_map, 64);
    if (!list || json_is_null(list)) return;
    if (!json_is_array(list)) tt_die("%s: added_tokens is not a list", file);
    size_t n = json_array_size(list);
    tok->added = tt_xcalloc(n ? n : 1, sizeof(tt_added_token), "added tokens");
    for (size_t i = 0; i < n; i++) {
        json_t *t = json_array_get(list, i);
        char where[64];
        snprintf(where, sizeof where, "added_tokens[%zu]", i);
        if (!json_is_object(t)) tt_die("%s: %s is not an object", file, where);
        json_t *id = json_object_get(t, "id");
        if (!json_is_integer(id) || json_integer_value(id) < 0)
            tt_die("%s: %s.id is missing or not a non-negative integer", file, where);
        if (json_integer_value(id) >= TT_TOKENIZER_MAX_ID)
            tt_die("%s: %s.id is %lld; tiertrain takes ids below %lld (published vocabularies stop near 262144): the "
                   "file is damaged or not a tokenizer.json",
                   file, where, (long long)json_integer_value(id), (long long)TT_TOKENIZER_MAX_ID);
        const char *content = get_string(file, t, "content", where);
        if (!content[0]) continue; /* tokenizers ignores empty added tokens */
        tt_added_token *a = &tok->added[tok->added_count++];
        a->id = (int32_t)json_integer_value(id);
        a->content = tt_xstrdup(content);
        a->len = strlen(content);
        a->special = get_bool(file, t, "special", where, false);
        a->single_word = get_bool(file, t, "single_word", where, false);
        a->lstrip = get_bool(file, t, "lstrip", where, false);
        a->rstrip = get_bool(file, t, "rstrip", where, false);
        a->normalized = get_bool(file, t, "normalized", where, !a->special);
        set_token(tok, a->id, content);
        tt_str_map_put(&tok->added_map, a->content, a->len, a->id);
    }
}

/* ---- normalizer ---- */

static void add_norm(tt_tokenizer *tok, tt_norm_step step) {
    tok->norm = tt_xrealloc(tok->norm, sizeof(tt_norm_step) * (size_t)(tok->norm_count + 1), "normalizers");
    tok->norm[tok->norm_count++] = step;
}

static void load_normalizer(tt_tokenizer *tok, const char *file, json_t *n, const char *where) {
    if (!n || json_is_null(n)) return;
    const char *type = type_of(file, n, where);
    char inner[256];
    if (strcmp(type, "Sequence") == 0) {
        json_t *list = json_object_get(n, "normalizers");
        if (!json_is_array(list)) tt_die("%s: %s.normalizers is not a list", file, where);
        for (size_t i = 0; i < json_array_size(list); i++) {
            snprintf(inner, sizeof inner, "%s.normalizers[%zu]", where, i);
            load_normalizer(tok, file, json_array_get(list, i), inner);
        }
    } else if (strcmp(type, "NFC") == 0) {
        add_norm(tok, (tt_norm_step){.kind = TT_NORM_NFC});
    } else if (strcmp(type, "NFD") == 0) {
        add_norm(tok, (tt_norm_step){.kind = TT_NORM_NFD});
    } else if (strcmp(type, "NFKC") == 0) {
        add_norm(tok, (tt_norm_step){.kind = TT_NORM_NFKC});
    } else if (strcmp(type, "NFKD") == 0) {
        add_norm(tok, (tt_norm_step){.kind = TT_NORM_NFKD});
    } else if (strcmp(type, "Prepend") == 0) {
        add_norm(tok,
                 (tt_norm_step){.kind = TT_NORM_PREPEND, .content = tt_xstrdup(get_string(file, n, "prepend", where))});
    } else if (strcmp(type, "Replace") == 0) {
        json_t *pattern = json_object_get(n, "pattern");
        json_t *literal = json_is_object(pattern) ? json_object_get(pattern, "String") : NULL;
        json_t *regex_text = json_is_object(pattern) ? json_object_get(pattern, "Regex") : NULL;
        if (!json_is_string(literal) && !json_is_string(regex_text))
            tt_die("%s: %s.pattern is not {\"String\": ...} or {\"Regex\": ...}; the tokenizer.json is malformed", file,
                   where);
        const char *text = json_string_value(json_is_string(literal) ? literal : regex_text);
        if (!text[0]) tt_die("%s: %s.pattern is empty", file, where);
        char inner_where[300];
        snprintf(inner_where, sizeof inner_where, "%s.pattern.Regex", where);
        tt_regex regex = {0};
        if (!json_is_string(literal)) tt_regex_compile(&regex, file, inner_where, text, false);
        uint32_t shortest = 1;
        if (regex.code) pcre2_pattern_info(regex.code, PCRE2_INFO_MINLENGTH, &shortest);
        if (regex.code && shortest == 0) {
            tt_regex_free(&regex);
            tt_die("%s: %s /%s/ can match the empty string; tokenizers would insert the content between characters "
                   "there, which tiertrain does not reproduce; a pattern that matches at least one character is read",
                   file, inner_where, text);
        }
        add_norm(tok, (tt_norm_step){.kind = TT_NORM_REPLACE,
                                     .pattern = tt_xstrdup(text),
                                     .regex = regex,
                                     .content = tt_xstrdup(get_string(file, n, "content", where))});
    } else {
        tt_die("%s: %s.type is \"%s\", a normalizer tiertrain does not implement (it knows NFC, NFD, NFKC, NFKD, "
               "Prepend, Replace and Sequence)",
               file, where, type);
    }
}

/* ---- pre-tokenizer ---- */

static void add_pre(tt_tokenizer *tok, tt_pre_step step) {
    tok->pre = tt_xrealloc(tok->pre, sizeof(tt_pre_step) * (size_t)(tok->pre_count + 1), "pre-tokenizers");
    tok->pre[tok->pre_count++] = step;
}

static void load_pre_tokenizer(tt_tokenizer *tok, const char *file, json_t *p, const char *where) {
    if (!p || json_is_null(p)) return;
    const char *type = type_of(file, p, where);
    char inner[256];
    if (tok->byte_level)
        tt_die("%s: %s comes after a ByteLevel pre-tokenizer; only ByteLevel last is implemented", file, where);
    if (strcmp(type, "Sequence") == 0) {
        json_t *list = json_object_get(p, "pretokenizers");
        if (!json_is_array(list)) tt_die("%s: %s.pretokenizers is not a list", file, where);
        for (size_t i = 0; i < json_array_size(list); i++) {
            snprintf(inner, sizeof inner, "%s.pretokenizers[%zu]", where, i);
            load_pre_tokenizer(tok, file, json_array_get(list, i), inner);
        }
    } else if (strcmp(type, "Split") == 0) {
        tt_pre_step step = {.kind = TT_PRE_SPLIT};
        json_t *pattern = json_object_get(p, "pattern");
        json_t *regex = json_is_object(pattern) ? json_object_get(pattern, "Regex") : NULL;
        json_t *literal = json_is_object(pattern) ? json_object_get(pattern, "String") : NULL;
        snprintf(inner, sizeof inner, "%s.pattern", where);
        if (json_is_string(regex)) tt_regex_compile(&step.regex, file, inner, json_string_value(regex), false);
        else if (json_is_string(literal)) tt_regex_compile(&step.regex, file, inner, json_string_value(literal), true);
        else tt_die("%s: %s.pattern is neither {\"Regex\": ...} nor {\"String\": ...}", file, where);
        const char *behavior = get_string(file, p, "behavior", where);
        static const char *names[] = {"Isolated", "Removed", "MergedWithPrevious", "MergedWithNext", "Contiguous"};
        int k = 0;
        while (k < 5 && strcmp(behavior, names[k]) != 0) k++;
        if (k == 5)
            tt_die(
                "%s: %s.behavior is \"%s\", not one of Isolated, Removed, MergedWithPrevious, MergedWithNext, Contiguous",
                file, where, behavior);
        step.behavior = (tt_split_behavior)k;
        step.invert = get_bool(file, p, "invert", where, false);
        add_pre(tok, step);
    } else if (strcmp(type, "ByteLevel") == 0) {
        if (get_bool(file, p, "add_prefix_space", where, true))
            add_pre(tok, (tt_pre_step){.kind = TT_PRE_BYTE_LEVEL_PREFIX});
        if (get_bool(file, p, "use_regex", where, true)) {
            snprintf(inner, sizeof inner, "%s (GPT-2's pattern, use_regex)", where);
            tt_pre_step step = {.kind = TT_PRE_SPLIT, .behavior = TT_SPLIT_ISOLATED};
            tt_regex_compile(&step.regex, file, inner,
                             "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+",
                             false);
            add_pre(tok, step);
        }
        tok->byte_level = true;
    } else if (strcmp(type, "Metaspace") == 0) {
        tt_pre_step step = {.kind = TT_PRE_METASPACE};
        const char *replacement = get_string(file, p, "replacement", where);
        int len;
        if (!replacement[0] || strlen(replacement) >= sizeof step.replacement ||
            (size_t)(tt_utf8_decode(replacement, &len), len) != strlen(replacement))
            tt_die("%s: %s.replacement must be one character", file, where);
        strcpy(step.replacement, replacement);
        json_t *scheme = json_object_get(p, "prepend_scheme");
        if (json_is_string(scheme)) {
            const char *s = json_string_value(scheme);
            if (strcmp(s, "always") == 0) step.prepend = TT_PREPEND_ALWAYS;
            else if (strcmp(s, "first") == 0) step.prepend = TT_PREPEND_FIRST;
            else if (strcmp(s, "never") == 0) step.prepend = TT_PREPEND_NEVER;
            else tt_die("%s: %s.prepend_scheme is \"%s\", not always, first or never", file, where, s);
        } else { /* older files: add_prefix_space */
            step.prepend = get_bool(file, p, "add_prefix_space", where, true) ? TT_PREPEND_ALWAYS : TT_PREPEND_NEVER;
        }
        step.split = get_bool(file, p, "split", where, true);
        add_pre(tok, step);
    } else {
        tt_die("%s: %s.type is \"%s\", a pre-tokenizer tiertrain does not implement (it knows Split, ByteLevel, "
               "Metaspace and Sequence)",
               file, where, type);
    }
}

/* GPT-2's bytes_to_unicode: printable bytes stand for themselves, the others for 256, 257, ... */
static void build_byte_alphabet(tt_tokenizer *tok) {
    int next = 256;
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
        int cp = printable ? b : next++;
        int len = tt_utf8_encode(cp, tok->byte_char[b]);
        tok->byte_char[b][len] = 0;
        tok->byte_to_id[b] = tt_str_map_get(&tok->vocab, tok->byte_char[b], (size_t)len);
    }
}

/* ---- post-processor ---- */

static void append_ids(int32_t **ids, int32_t *count, const int32_t *more, int32_t n) {
    *ids = tt_xrealloc(*ids, sizeof(int32_t) * (size_t)(*count + n + 1), "post-processor");
    if (n > 0) memcpy(*ids + *count, more, sizeof(int32_t) * (size_t)n);
    *count += n;
}

static void load_template(tt_tokenizer *tok, const char *file, json_t *p, const char *where) {
    json_t *single = json_object_get(p, "single");
    json_t *specials = json_object_get(p, "special_tokens");
    if (!json_is_array(single)) tt_die("%s: %s.single is not a list", file, where);
    int32_t *before = NULL, *after = NULL, nb = 0, na = 0;
    bool seen_sequence = false;
    for (size_t i = 0; i < json_array_size(single); i++) {
        json_t *item = json_array_get(single, i);
        json_t *special = json_object_get(item, "SpecialToken");
        if (json_is_object(json_object_get(item, "Sequence"))) {
            if (seen_sequence) tt_die("%s: %s.single[%zu]: a second sequence in a single template", file, where, i);
            seen_sequence = true;
            continue;
        }
        if (!json_is_object(special)) tt_die("%s: %s.single[%zu] is neither SpecialToken nor Sequence", file, where, i);
        char item_where[300];
        snprintf(item_where, sizeof item_where, "%s.single[%zu].SpecialToken", where, i);
        const char *name = get_string(file, special, "id", item_where);
        json_t *entry = json_is_object(specials) ? json_object_get(specials, name) : NULL;
        json_t *ids = json_is_object(entry) ? json_object_get(entry, "ids") : NULL;
        if (!json_is_array(ids)) tt_die("%s: %s.special_tokens[\"%s\"].ids is missing", file, where, name);
        for (size_t k = 0; k < json_array_size(ids); k++) {
            json_t *v = json_array_get(ids, k);
            if (!json_is_integer(v))
                tt_die("%s: %s.special_tokens[\"%s\"].ids[%zu] is not an id", file, where, name, k);
            int32_t id = (int32_t)json_integer_value(v);
            if (seen_sequence) append_ids(&after, &na, &id, 1);
            else append_ids(&before, &nb, &id, 1);
        }
    }
    if (!seen_sequence) tt_die("%s: %s.single has no Sequence", file, where);
    /* this template wraps what earlier processors made */
    int32_t *prefix = NULL, *suffix = NULL, np = 0, ns = 0;
    append_ids(&prefix, &np, before, nb);
    append_ids(&prefix, &np, tok->prefix_ids, tok->prefix_count);
    append_ids(&suffix, &ns, tok->suffix_ids, tok->suffix_count);
    append_ids(&suffix, &ns, after, na);
    free(before);
    free(after);
    free(tok->prefix_ids);
    free(tok->suffix_ids);
    tok->prefix_ids = prefix;
    tok->prefix_count = np;
    tok->suffix_ids = suffix;
    tok->suffix_count = ns;
}

static void load_post_processor(tt_tokenizer *tok, const char *file, json_t *p, const char *where) {
    if (!p || json_is_null(p)) return;
    const char *type = type_of(file, p, where);
    char inner[256];
    if (strcmp(type, "Sequence") == 0) {
        json_t *list = json_object_get(p, "processors");
        if (!json_is_array(list)) tt_die("%s: %s.processors is not a list", file, where);
        for (size_t i = 0; i < json_array_size(list); i++) {
            snprintf(inner, sizeof inner, "%s.processors[%zu]", where, i);
            load_post_processor(tok, file, json_array_get(list, i), inner);
        }
    } else if (strcmp(type, "ByteLevel") == 0) {
        /* only trims offsets (of the space a token starts with); ids are unchanged, and tiertrain's
         * offsets are where a token's text starts, space included */
    } else if (strcmp(type, "TemplateProcessing") == 0) {
        load_template(tok, file, p, where);
    } else {
        tt_die("%s: %s.type is \"%s\", a post-processor tiertrain does not implement (it knows TemplateProcessing, "
               "ByteLevel and Sequence)",
               file, where, type);
    }
}

/* ---- decoder ---- */

/* The decoder only matters to tt_tokenizer_decode: an unknown one is remembered, not fatal, so
 * that a tokenizer with a decoder tiertrain lacks still encodes. Returns false with the reason. */
static bool load_decoder(tt_tokenizer *tok, const char *file, json_t *d, const char *where) {
    if (!d || json_is_null(d)) return true;
    char reason[512];
    json_t *type_value = json_is_object(d) ? json_object_get(d, "type") : NULL;
    const char *type = json_is_string(type_value) ? json_string_value(type_value) : "";
    tt_dec_step step = {0};
    if (strcmp(type, "Sequence") == 0) {
        json_t *list = json_object_get(d, "decoders");
        for (size_t i = 0; i < json_array_size(list); i++) {
            char inner[256];
            snprintf(inner, sizeof inner, "%s.decoders[%zu]", where, i);
            if (!load_decoder(tok, file, json_array_get(list, i), inner)) return false;
        }
        return true;
    } else if (strcmp(type, "ByteLevel") == 0) {
        step.kind = TT_DEC_BYTE_LEVEL;
    } else if (strcmp(type, "ByteFallback") == 0) {
        step.kind = TT_DEC_BYTE_FALLBACK;
    } else if (strcmp(type, "Fuse") == 0) {
        step.kind = TT_DEC_FUSE;
    } else if (strcmp(type, "Replace") == 0) {
        json_t *pattern = json_object_get(d, "pattern");
        json_t *literal = json_is_object(pattern) ? json_object_get(pattern, "String") : NULL;
        json_t *content = json_object_get(d, "content");
        if (!json_is_string(literal) || !json_string_value(literal)[0] || !json_is_string(content)) {
            snprintf(reason, sizeof reason, "%s: %s: only a Replace decoder of a String pattern is implemented", file,
                     where);
            tok->dec_error = tt_xstrdup(reason);
            return false;
        }
        step.kind = TT_DEC_REPLACE;
        step.pattern = tt_xstrdup(json_string_value(literal));
        step.content = tt_xstrdup(json_string_value(content));
    } else if (strcmp(type, "Strip") == 0) {
        json_t *content = json_object_get(d, "content");
        step.kind = TT_DEC_STRIP;
        step.content = tt_xstrdup(json_is_string(content) ? json_string_value(content) : " ");
        step.start = (int)json_integer_value(json_object_get(d, "start"));
        step.stop = (int)json_integer_value(json_object_get(d, "stop"));
    } else if (strcmp(type, "Metaspace") == 0) {
        json_t *replacement = json_object_get(d, "replacement");
        json_t *scheme = json_object_get(d, "prepend_scheme");
        step.kind = TT_DEC_METASPACE;
        step.content = tt_xstrdup(json_is_string(replacement) ? json_string_value(replacement) : "\xe2\x96\x81");
        step.prepend = json_is_string(scheme) ? strcmp(json_string_value(scheme), "never") != 0
                                              : get_bool(file, d, "add_prefix_space", where, true);
    } else {
        snprintf(reason, sizeof reason,
                 "%s: %s.type is \"%s\", a decoder tiertrain does not implement (it knows ByteLevel, Metaspace, "
                 "Replace, ByteFallback, Fuse, Strip and Sequence)",
                 file, where, type);
        tok->dec_error = tt_xstrdup(reason);
        return false;
    }
    tok->dec = tt_xrealloc(tok->dec, sizeof(tt_dec_step) * (size_t)(tok->dec_count + 1), "decoders");
    tok->dec[tok->dec_count++] = step;
    return true;
}

/* ---- load / free ---- */

tt_tokenizer *tt_tokenizer_load(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) tt_die("tokenizer: cannot read %s: no such file or directory", path);
    char *file;
    if (S_ISDIR(st.st_mode)) {
        size_t n = strlen(path) + 32;
        file = tt_xmalloc(n, "path");
        snprintf(file, n, "%s/tokenizer.json", path);
        if (stat(file, &st) != 0)
            tt_die("tokenizer: %s holds no tokenizer.json; give the model directory or the file", path);
    } else {
        file = tt_xstrdup(path);
    }
    json_error_t error;
    json_t *root = tt_json_load_regular_file(file, 0, TT_TOKENIZER_JSON_MAX_BYTES, "a tokenizer.json", &error);
    if (!root) tt_die("%s:%d:%d: not valid JSON: %s", file, error.line, error.column, error.text);
    if (!json_is_object(root)) tt_die("%s: not a tokenizer.json (the top level is not an object)", file);
    const char *unsupported[] = {"truncation", "padding"};
    for (int k = 0; k < 2; k++) {
        json_t *v = json_object_get(root, unsupported[k]);
        if (v && !json_is_null(v))
            tt_die("%s: %s is set; tiertrain does not implement it (documents are packed later): set it to null", file,
                   unsupported[k]);
    }
    tt_tokenizer *tok = tt_xcalloc(1, sizeof *tok, "tokenizer");
    tok->path = file;
#ifdef TT_FUZZING
    tt_tokenizer_being_loaded = tok; /* a tt_die below leaves it half built: the harness frees it */
#endif
    load_model(tok, file, root);
    load_added_tokens(tok, file, root);
    load_normalizer(tok, file, json_object_get(root, "normalizer"), "normalizer");
    load_pre_tokenizer(tok, file, json_object_get(root, "pre_tokenizer"), "pre_tokenizer");
    if (tok->byte_level) build_byte_alphabet(tok);
    load_post_processor(tok, file, json_object_get(root, "post_processor"), "post_processor");
    load_decoder(tok, file, json_object_get(root, "decoder"), "decoder");
    tt_added_set_build(&tok->added_raw, tok->added, tok->added_count, false);
    tt_added_set_build(&tok->added_normalized, tok->added, tok->added_count, true);
    if (tok->added_normalized.count > 0 && tok->norm_count > 0) {
        /* tokenizers matches these against their normalized form */
        tt_text in = {0}, out = {0}, scratch = {0};
        tt_regex_matcher matcher;
        tt_regex_matcher_init(&matcher);
        for (int32_t i = 0; i < tok->added_count; i++) {
            tt_added_token *a = &tok->added[i];
            if (!a->normalized) continue;
            in.len = 0;
            tt_text_append(&in, a->content, a->len, 0);
            tt_normalize(tok, &matcher, &in, &out, &scratch);
            free(a->content);
            a->content = tt_xmalloc(out.len + 1, "added token");
            memcpy(a->content, out.s, out.len);
            a->content[out.len] = 0;
            a->len = out.len;
        }
        tt_regex_matcher_free(&matcher);
        tt_text_free(&in);
        tt_text_free(&out);
        tt_text_free(&scratch);
        tt_added_set_free(&tok->added_normalized);
        tt_added_set_build(&tok->added_normalized, tok->added, tok->added_count, true);
    }
    /* the vocabulary size is the largest id + 1 */
    int64_t size = tok->vocab_size;
    while (size > 0 && !tok->id_to_token[size - 1]) size--;
    tok->vocab_size = size;
    tok->is_special = tt_xcalloc((size_t)(size ? size : 1), 1, "special tokens");
    for (int32_t i = 0; i < tok->added_count; i++)
        if (tok->added[i].special && tok->added[i].id < size) tok->is_special[tok->added[i].id] = 1;
    json_decref(root);
    if (pthread_key_create(&tok->state_key, NULL) != 0) tt_die("tokenizer: out of thread-local keys");
    pthread_mutex_init(&tok->states_lock, NULL);
    tok->thread_state_ready = true;
#ifdef TT_FUZZING
    tt_tokenizer_being_loaded = NULL;
#endif
    return tok;
}

void tt_tokenizer_free(tt_tokenizer *tok) {
    if (!tok) return;
    for (int i = 0; i < tok->state_count; i++) tt_encode_state_free(tok->states[i]);
    free(tok->states);
    if (tok->thread_state_ready) { /* a half-built tokenizer (a load that died, fuzzing) has neither */
        pthread_key_delete(tok->state_key);
        pthread_mutex_destroy(&tok->states_lock);
    }
    for (int64_t i = 0; i < tok->vocab_size; i++) free(tok->id_to_token[i]);
    free(tok->id_to_token);
    tt_str_map_free(&tok->vocab);
    tt_str_map_free(&tok->added_map);
    free(tok->merges);
    for (int i = 0; i < tok->norm_count; i++) {
        free(tok->norm[i].pattern);
        tt_regex_free(&tok->norm[i].regex);
        free(tok->norm[i].content);
    }
    free(tok->norm);
    for (int32_t i = 0; i < tok->added_count; i++) free(tok->added[i].content);
    free(tok->added);
    tt_added_set_free(&tok->added_raw);
    tt_added_set_free(&tok->added_normalized);
    for (int i = 0; i < tok->pre_count; i++) tt_regex_free(&tok->pre[i].regex);
    free(tok->pre);
    free(tok->prefix_ids);
    free(tok->suffix_ids);
    for (int i = 0; i < tok->dec_count; i++) {
        free(tok->dec[i].pattern);
        free(tok->dec[i].content);
    }
    free(tok->dec);
    free(tok->dec_error);
    free(tok->is_special);
    free(tok->path);
    free(tok);
}
