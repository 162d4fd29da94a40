/* Chat datasets (src/data/chat_template.h): the ids and label masks of every template x
 * conversation of tests/fixtures/chat_templates against golden/tokens.json (made by
 * tools/make_chat_golden.py --tokens: masks computed there independently of this C code, ids from
 * Hugging Face's tokenizer on the device, assistant masks from transformers' apply_chat_template
 * where the template has {% generation %}), with the real Qwen3, Llama 3.1 and Llama 2 tokenizers
 * test_tokenizer_real fetches; then, with the byte tokenizer fixture (a token per byte, so masks
 * are worked out by hand): the built-in templates, how a template is chosen, ShareGPT mappings and
 * role aliases, the system field, tools, drop_system_message, train_on_eos, and every bad-data
 * message. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/check.h"
#include "config/run_config.h"
#include "data/chat_template.h"
#include "data/tokenize_files.h"
#include "data/tokenizer.h"
#include "test_util.h"

static const char *source_dir;

static char bytes_dir[4096];

static char *default_properties[] = {"role", "content"};
static char *assistant_only[] = {"assistant"};

/* A chat_template entry with axolotl's defaults. */
static tt_dataset_spec default_spec(void) {
    return (tt_dataset_spec){.type = TT_DATASET_CHAT_TEMPLATE,
                             .field_messages = "messages",
                             .property_mapping_count = 2,
                             .property_names = default_properties,
                             .property_fields = default_properties,
                             .roles_to_train_count = 1,
                             .roles_to_train = assistant_only,
                             .train_on_eos = TT_EOS_INHERIT,
                             .train_on_eot = TT_EOS_INHERIT};
}

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (fread(buf, 1, (size_t)n, f) != (size_t)n) n = 0;
    buf[n] = 0;
    fclose(f);
    return buf;
}

/* A format over `tokdir`'s tokenizer and special tokens; the rest of the settings from `more` (train_on_eos,
 * train_on_eot, eot_tokens, template_kwargs, train_on_inputs). */
static tt_chat_format *open_format_with(const char *template_text, const tt_dataset_spec *spec,
                                        const tt_chat_settings *more, const char *tokdir, const tt_tokenizer *tok) {
    char *bos = tt_tokenizer_config_token(tokdir, "bos_token"), *eos = tt_tokenizer_config_token(tokdir, "eos_token");
    char *unk = tt_tokenizer_config_token(tokdir, "unk_token"), *pad = tt_tokenizer_config_token(tokdir, "pad_token");
    tt_chat_settings settings = *more;
    settings.template_text = template_text;
    settings.template_origin = "the test's template";
    settings.spec = spec;
    settings.bos_token = bos;
    settings.eos_token = eos;
    settings.unk_token = unk;
    settings.pad_token = pad;
    settings.eos_id = eos ? tt_tokenizer_token_to_id(tok, eos) : -1;
    tt_chat_format *f = tt_chat_format_open(&settings, tok);
    free(bos);
    free(eos);
    free(unk);
    free(pad);
    return f;
}

static tt_chat_format *open_format(const char *template_text, const tt_dataset_spec *spec, int train_on_eos,
                                   bool train_on_inputs, const char *tokdir, const tt_tokenizer *tok) {
    tt_chat_settings more = {
        .train_on_eos = train_on_eos, .train_on_eot = train_on_eos, .train_on_inputs = train_on_inputs};
    return open_format_with(template_text, spec, &more, tokdir, tok);
}

typedef struct tokenized {
    tt_token_ids ids;
    uint8_t *labels;
    int64_t capacity;
    char *error;
    int not_found;
} tokenized;

static void tokenized_free(tokenized *t) {
    tt_token_ids_free(&t->ids);
    free(t->labels);
    free(t->error);
    memset(t, 0, sizeof *t);
}

/* One record through a format; false (and t->error) when the template fails. */
static bool run_record(const tt_chat_format *f, json_t *record, tokenized *t) {
    memset(t, 0, sizeof *t);
    tt_chat_example ex;
    tt_chat_record(f, record, "test.jsonl:1", &ex);
    bool ok = tt_chat_tokenize(f, &ex, &t->ids, &t->labels, &t->capacity, 0);
    t->not_found = ex.turns_not_found;
    if (ex.error) t->error = strdup(ex.error);
    tt_chat_example_free(&ex);
    return ok;
}

static const char *template_name(const char *key, char *buf, size_t size) {
    snprintf(buf, size, "%.*s", (int)(strstr(key, "__") - key), key);
    return buf;
}

/* ---- the goldens: real tokenizers, every variant, token for token ---- */

static void test_golden(void) {
    char path[4400];
    snprintf(path, sizeof path, "%s/tests/fixtures/chat_templates/golden/tokens.json", source_dir);
    json_error_t je;
    json_t *golden = json_load_file(path, 0, &je);
    snprintf(path, sizeof path, "%s/tests/fixtures/chat_templates/conversations.json", source_dir);
    json_t *data = json_load_file(path, 0, &je);
    TT_EXPECT(golden && data, "fixtures: %s", je.text);
    if (!golden || !data) return;
    struct stat st;
    if (stat("tokenizer_cache/qwen3/package/models/tokenizer.json", &st) != 0) {
        printf("SKIPPED: the golden masks need the real tokenizers that test_tokenizer_real fetches with npm "
               "(tokenizer_cache/ in the tests' build directory)\n");
        json_decref(golden);
        json_decref(data);
        return;
    }
    static const char *const variants[] = {"turn", "all", "last", "none", "inputs"};
    enum { TOKENIZERS = 5 };
    static const char *const names[TOKENIZERS] = {"qwen3", "llama3_1", "llama2", "gemma3", "deepseek_v3"};
    tt_tokenizer *loaded[TOKENIZERS] = {NULL};
    int compared = 0, masks = 0;
    const char *key;
    json_t *entry;
    json_object_foreach(golden, key, entry) {
        char tname[128], tokdir[512], template_path[4400];
        const char *conv_name = strstr(key, "__") + 2;
        snprintf(tokdir, sizeof tokdir, "tokenizer_cache/%s/package/models",
                 json_string_value(json_object_get(entry, "tokenizer")));
        snprintf(template_path, sizeof template_path, "%s/tests/fixtures/chat_templates/%s.jinja", source_dir,
                 template_name(key, tname, sizeof tname));
        char *template = slurp(template_path);
        json_t *conv = NULL, *c;
        size_t i;
        json_array_foreach(json_object_get(data, "conversations"), i, c) {
            if (strcmp(json_string_value(json_object_get(c, "name")), conv_name) == 0) conv = c;
        }
        TT_EXPECT(template && conv, "%s: template or conversation missing", key);
        if (!template || !conv) continue;
        json_t *record = json_object();
        json_object_set(record, "messages", json_object_get(conv, "messages"));
        if (json_is_true(json_object_get(conv, "tools")))
            json_object_set(record, "tools", json_object_get(data, "tools"));
        int which = 0; /* each tokenizer is loaded once */
        while (which < TOKENIZERS && strcmp(names[which], json_string_value(json_object_get(entry, "tokenizer"))) != 0)
            which++;
        TT_EXPECT(which < TOKENIZERS, "%s: tokenizer %s is not one the test knows", key,
                  json_string_value(json_object_get(entry, "tokenizer")));
        if (which == TOKENIZERS) {
            free(template);
            json_decref(record);
            continue;
        }
        if (!loaded[which]) loaded[which] = tt_tokenizer_load(tokdir);
        tt_tokenizer *tok = loaded[which];
        json_t *want_ids = json_object_get(entry, "ids");
        for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++) {
            tt_dataset_spec spec = default_spec();
            spec.tool_call_arguments_as_given =
                true; /* the goldens are transformers': arguments as the record has them */
            bool inputs = strcmp(variants[v], "inputs") == 0;
            int rule = inputs ? 0 : (int)v;
            /* the conversation's chat_template_kwargs, as a dataset's */
            json_t *kwargs = json_object_get(conv, "chat_template_kwargs");
            char *kwargs_text = kwargs ? json_dumps(kwargs, 0) : NULL;
            tt_chat_settings more = {
                .train_on_eos = rule, .train_on_eot = rule, .train_on_inputs = inputs, .template_kwargs = kwargs_text};
            tt_chat_format *f = open_format_with(template, &spec, &more, tokdir, tok);
            free(kwargs_text);
            tokenized t;
            bool ok = run_record(f, record, &t);
            TT_EXPECT(ok, "%s: %s", key, t.error);
            const char *want = json_string_value(json_object_get(json_object_get(entry, "labels"), variants[v]));
            bool same =
                ok && t.ids.count == (int64_t)json_array_size(want_ids) && want && strlen(want) == (size_t)t.ids.count;
            int64_t at = -1;
            for (int64_t k = 0; same && k < t.ids.count; k++)
                if (t.ids.ids[k] != json_integer_value(json_array_get(want_ids, (size_t)k)) ||
                    t.labels[k] != (uint8_t)(want[k] - '0')) {
                    same = false;
                    at = k;
                }
            TT_EXPECT(same, "%s (%s): %lld ids, golden %zu; first difference at token %lld", key, variants[v],
                      (long long)t.ids.count, json_array_size(want_ids), (long long)at);
            compared++;
            /* transformers' return_assistant_tokens_mask: the labels without EOS rules */
            const char *mask = json_string_value(json_object_get(entry, "assistant_mask"));
            if (mask && strcmp(variants[v], "none") == 0) {
                bool equal = ok && strlen(mask) == (size_t)t.ids.count;
                for (int64_t k = 0; equal && k < t.ids.count; k++) equal = t.labels[k] == (uint8_t)(mask[k] - '0');
                TT_EXPECT(equal, "%s: the labels differ from transformers' assistant mask", key);
                masks++;
            }
            TT_EXPECT(tt_chat_format_has_generation(f) == (strcmp(tname, "generation_demo") == 0), "%s: generation",
                      key);
            tokenized_free(&t);
            tt_chat_format_free(f);
        }
        json_decref(record);
        free(template);
    }
    for (int k = 0; k < TOKENIZERS; k++) tt_tokenizer_free(loaded[k]);
    TT_EXPECT(compared >= 100, "only %d golden masks", compared);
    printf("test_chat_data: %d golden id and label sequences compared, %d against transformers' assistant masks%s\n",
           compared, masks, masks ? "" : " (golden/tokens.json has none yet: made without transformers)");
    json_decref(golden);
    json_decref(data);
}

/* ---- the byte tokenizer: masks by hand ---- */

static tt_tokenizer *bytes_tok;

/* The record's render, ids and labels as a string: trained bytes in [brackets], EOS (256) as '$', <pad> (258) as
 * '#', other added tokens as '?'. */
static char *marked_with(const char *template_text, const tt_dataset_spec *spec, const tt_chat_settings *more,
                         const char *record_json) {
    tt_chat_format *f = open_format_with(template_text, spec, more, bytes_dir, bytes_tok);
    json_error_t je;
    json_t *record = json_loads(record_json, 0, &je);
    TT_CHECK(record, "test record: %s", je.text);
    tokenized t;
    bool ok = run_record(f, record, &t);
    json_decref(record);
    tt_chat_format_free(f);
    if (!ok) {
        char *e = strdup(t.error);
        tokenized_free(&t);
        return e;
    }
    char *out = malloc((size_t)t.ids.count * 2 + 4);
    size_t n = 0;
    bool in = false;
    for (int64_t k = 0; k < t.ids.count; k++) {
        if (t.labels[k] != in) out[n++] = in ? ']' : '[';
        in = t.labels[k];
        const int32_t id = t.ids.ids[k];
        out[n++] = id == 256 ? '$' : id == 258 ? '#' : id < 256 ? (char)id : '?';
    }
    if (in) out[n++] = ']';
    out[n] = 0;
    tokenized_free(&t);
    return out;
}

static char *marked(const char *template_text, const tt_dataset_spec *spec, int eos_rule, bool inputs,
                    const char *record_json) {
    tt_chat_settings more = {.train_on_eos = eos_rule, .train_on_eot = eos_rule, .train_on_inputs = inputs};
    return marked_with(template_text, spec, &more, record_json);
}

#define EXPECT_MARKED(tmpl, spec, rule, inputs, record, want)                             \
    do {                                                                                  \
        char *got_ = marked((tmpl), (spec), (rule), (inputs), (record));                  \
        TT_EXPECT(strcmp(got_, (want)) == 0, "\n  got  [%s]\n  want [%s]", got_, (want)); \
        free(got_);                                                                       \
    } while (0)

/* A template whose text a byte tokenizer shows as it is; EOS after assistant turns. */
static const char plain[] = "{% for m in messages %}{{ m.role }}: {{ m.content }}{% if m.role == 'assistant' %}"
                            "{{ eos_token }}{% endif %}{{ '\\n' }}{% endfor %}";

static const char conversation[] = "{\"messages\": [{\"role\": \"system\", \"content\": \"S\"}, {\"role\": \"user\", "
                                   "\"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"yo\"}, {\"role\": "
                                   "\"user\", \"content\": \"ok?\"}, {\"role\": \"assistant\", \"content\": \"ok.\"}]}";

static void test_masks_by_hand(void) {
    tt_dataset_spec spec = default_spec();
    EXPECT_MARKED(plain, &spec, 0, false, conversation,
                  "system: S\nuser: hi\nassistant: [yo$]\nuser: ok?\nassistant: [ok.$]\n");
    EXPECT_MARKED(plain, &spec, 3, false, conversation,
                  "system: S\nuser: hi\nassistant: [yo]$\nuser: ok?\nassistant: [ok.]$\n");
    EXPECT_MARKED(plain, &spec, 2, false, conversation,
                  "system: S\nuser: hi\nassistant: [yo]$\nuser: ok?\nassistant: [ok.$]\n");
    /* all: the EOS after every turn, found within 3 tokens of it: only the assistants' here */
    EXPECT_MARKED(plain, &spec, 1, false, conversation,
                  "system: S\nuser: hi\nassistant: [yo$]\nuser: ok?\nassistant: [ok.$]\n");
    /* train_on_inputs: every turn's content, the template's text between turns stays masked */
    EXPECT_MARKED(plain, &spec, 0, true, conversation,
                  "system: [S]\nuser: [hi]\nassistant: [yo$]\nuser: [ok?]\nassistant: [ok.$]\n");
    /* roles_to_train [user]; the EOS after a user turn would train with turn, there is none */
    char *user_only[] = {"user"};
    tt_dataset_spec users = default_spec();
    users.roles_to_train = user_only;
    EXPECT_MARKED(plain, &users, 0, false, conversation,
                  "system: S\nuser: [hi]\nassistant: yo$\nuser: [ok?]\nassistant: ok.$\n");
    /* roles_to_train []: nothing but, with all, the EOS after each turn */
    tt_dataset_spec none = default_spec();
    none.roles_to_train_count = 0;
    EXPECT_MARKED(plain, &none, 1, false, conversation,
                  "system: S\nuser: hi\nassistant: yo[$]\nuser: ok?\nassistant: ok.[$]\n");
    /* the token diff is axolotl's: a content that starts like the placeholder ("[[") keeps its
     * first equal bytes out */
    EXPECT_MARKED(plain, &spec, 3, false,
                  "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"assistant\", \"content\": "
                  "\"[x]]\"}]}",
                  "user: a\nassistant: [[x]]]$\n");
    /* a template that prints a turn the same whatever it holds: the turn is not found, not trained */
    tokenized t;
    tt_chat_format *f = open_format("{% for m in messages %}{{ m.role }}{{ eos_token }}{% endfor %}", &spec, 0, false,
                                    bytes_dir, bytes_tok);
    json_t *record = json_loads(conversation, 0, NULL);
    TT_EXPECT(run_record(f, record, &t) && t.not_found == 2, "turns not found: %d", t.not_found);
    int64_t trained = 0;
    for (int64_t k = 0; k < t.ids.count; k++) trained += t.labels[k];
    TT_EXPECT(trained == 0, "nothing trains when no turn is found (%lld)", (long long)trained);
    tokenized_free(&t);
    json_decref(record);
    tt_chat_format_free(f);
    /* a template that renders a turn differently once later turns follow (the last message gets a
     * marker): the turn is located in the full render, so the first assistant keeps its own bytes */
    EXPECT_MARKED("{% for m in messages %}{% if loop.last %}>{% endif %}{{ m.content }}{{ eos_token }}{% endfor %}",
                  &spec, 0, false, conversation, "S$hi$[yo$]ok?$>[ok.$]");
}

/* {% generation %}: the assistant turns are its blocks, token for token */
static void test_generation(void) {
    tt_dataset_spec spec = default_spec();
    const char *gen = "{% for m in messages %}{{ m.role }}: {% if m.role == 'assistant' %}{% generation %}"
                      "{{ m.content }}{% endgeneration %}{{ eos_token }}{% else %}{{ m.content }}{% endif %}{{ '\\n' }}"
                      "{% endfor %}";
    EXPECT_MARKED(gen, &spec, 3, false, conversation,
                  "system: S\nuser: hi\nassistant: [yo]$\nuser: ok?\nassistant: [ok.]$\n");
    EXPECT_MARKED(gen, &spec, 0, false, conversation,
                  "system: S\nuser: hi\nassistant: [yo$]\nuser: ok?\nassistant: [ok.$]\n");
    EXPECT_MARKED(gen, &spec, 0, true, conversation,
                  "system: [S]\nuser: [hi]\nassistant: [yo$]\nuser: [ok?]\nassistant: [ok.$]\n");
    char *got = marked("{% for m in messages %}{% if loop.last %}{% generation %}{{ m.content }}{% endgeneration %}"
                       "{% endif %}{% endfor %}",
                       &spec, 0, false, conversation);
    TT_EXPECT(strstr(got, "marks 1 generation blocks for 2 assistant messages"), "%s", got);
    free(got);
}

/* ---- built-in templates ---- */

static void test_builtins(void) {
    tt_dataset_spec spec = default_spec();
    EXPECT_MARKED(tt_chat_builtin_template("chatml"), &spec, 0, false,
                  "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": "
                  "\"yo\"}]}",
                  "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n[yo]<|im_end|>\n");
    /* llama3: BOS first (the byte fixture's <s> is 257: '?'), contents trimmed, a list of parts joined */
    EXPECT_MARKED(
        tt_chat_builtin_template("llama3"), &spec, 0, false,
        "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \" a\"}, "
        "{\"type\": \"text\", \"text\": \"b \"}]}, {\"role\": \"assistant\", \"content\": \" yo \"}]}",
        "?<|start_header_id|>user<|end_header_id|>\n\nab<|eot_id|><|start_header_id|>assistant<|end_header_id|>"
        "\n\n[yo]<|eot_id|>");
    /* gemma and phi_3: axolotl's renders of these conversations (its templates, jinja2 as transformers sets it up),
     * the byte fixture's BOS shown as '?' */
    EXPECT_MARKED(
        tt_chat_builtin_template("gemma"), &spec, 0, false,
        "{\"messages\": [{\"role\": \"user\", \"content\": \" hi \"}, {\"role\": \"assistant\", \"content\": "
        "\"yo\\n\"}, {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \" a\"}, {\"type\": "
        "\"image\"}, {\"type\": \"text\", \"text\": \"b \"}]}, {\"role\": \"assistant\", \"content\": \"ok\"}]}",
        "?<start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n[yo]<end_of_turn>\n<start_of_turn>user\nab"
        "<end_of_turn>\n<start_of_turn>model\n[ok]<end_of_turn>\n");
    EXPECT_MARKED(tt_chat_builtin_template("phi_3"), &spec, 0, false,
                  "{\"messages\": [{\"role\": \"system\", \"content\": \"S\"}, {\"role\": \"user\", \"content\": "
                  "\"hi\"}, {\"role\": \"assistant\", \"content\": \"yo\"}]}",
                  "?<|system|>\nS<|end|>\n<|user|>\nhi<|end|>\n<|assistant|>\n[yo]<|end|>\n");
    char path[4400];
    snprintf(path, sizeof path, "%s/tests/fixtures/chat_templates/qwen3.jinja", source_dir);
    char *qwen3 = slurp(path);
    TT_EXPECT(qwen3 && strcmp(qwen3, tt_chat_builtin_template("qwen3")) == 0, "the built-in qwen3 is Qwen3's own");
    free(qwen3);
    TT_EXPECT(tt_chat_builtin_template("chatml_x") == NULL && strstr(tt_chat_builtin_names(), "llama3"), "names");
}

/* ---- records: mappings, aliases, system, tools ---- */

static void test_records(void) {
    tt_dataset_spec spec = default_spec();
    /* ShareGPT: {from, value} with human / gpt, through message_property_mappings */
    char *props[] = {"role", "content"}, *fields[] = {"from", "value"};
    tt_dataset_spec sharegpt = default_spec();
    sharegpt.field_messages = "conversations";
    sharegpt.property_names = props;
    sharegpt.property_fields = fields;
    EXPECT_MARKED(plain, &sharegpt, 0, false,
                  "{\"conversations\": [{\"from\": \"human\", \"value\": \"hi\"}, {\"from\": \"gpt\", \"value\": "
                  "\"yo\"}]}",
                  "user: hi\nassistant: [yo$]\n");
    /* roles: replaces the aliases; roles_to_train names go through them too */
    char *from[] = {"q", "a"}, *to[] = {"user", "assistant"}, *train_a[] = {"a"};
    tt_dataset_spec custom = default_spec();
    custom.roles_given = true;
    custom.role_alias_count = 2;
    custom.role_alias_from = from;
    custom.role_alias_to = to;
    custom.roles_to_train = train_a;
    EXPECT_MARKED(plain, &custom, 0, false,
                  "{\"messages\": [{\"role\": \"q\", \"content\": \"hi\"}, {\"role\": \"a\", \"content\": \"yo\"}]}",
                  "user: hi\nassistant: [yo$]\n");
    /* a top-level system text becomes the first turn; drop_system_message leaves it out */
    EXPECT_MARKED(plain, &spec, 0, false,
                  "{\"system\": \"S\", \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": "
                  "\"assistant\", \"content\": \"yo\"}]}",
                  "system: S\nuser: hi\nassistant: [yo$]\n");
    tt_dataset_spec drop = default_spec();
    drop.drop_system_message = true;
    EXPECT_MARKED(plain, &drop, 0, false, conversation, "user: hi\nassistant: [yo$]\nuser: ok?\nassistant: [ok.$]\n");
    /* tools and tool calls reach the template; arguments written as JSON text are parsed */
    EXPECT_MARKED("{{ tools | length }}{% for m in messages %}|{{ m.role }}:{{ m.content }}"
                  "{% for c in m.tool_calls %}{{ c.function.arguments.x }}{% endfor %}{% endfor %}",
                  &spec, 3, false,
                  "{\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": \"{}\"}}], "
                  "\"messages\": [{\"role\": \"user\", \"content\": \"go\"}, {\"role\": \"assistant\", "
                  "\"tool_calls\": [{\"function\": {\"name\": \"f\", \"arguments\": \"{\\\"x\\\": 7}\"}}]}]}",
                  "1|user:go|assistant:[7]");
    /* tool_call_arguments: as_given keeps JSON text as text, as transformers passes it (a template that concatenates
     * the arguments, as DeepSeek-V3's does) */
    tt_dataset_spec as_given = default_spec();
    as_given.tool_call_arguments_as_given = true;
    EXPECT_MARKED("{% for m in messages %}|{{ m.role }}:{{ m.content }}{% for c in m.tool_calls %}"
                  "{{ '<' + c.function.arguments + '>' }}{% endfor %}{% endfor %}",
                  &as_given, 3, false,
                  "{\"messages\": [{\"role\": \"user\", \"content\": \"go\"}, {\"role\": \"assistant\", "
                  "\"content\": null, \"tool_calls\": [{\"function\": {\"name\": \"f\", \"arguments\": "
                  "\"{\\\"x\\\": 7}\"}}]}]}",
                  "|user:go|assistant:[None<{\"x\": 7}>]");
    /* a content of null with tool calls is None to the template, as transformers passes it (not undefined; the marks
     * are where the render differs from the placeholder turn's, "True" against "False") */
    EXPECT_MARKED("{% for m in messages %}|{{ m.role }}:{{ m.content is none }}/{{ m.content is defined }}"
                  "{% endfor %}",
                  &spec, 3, false,
                  "{\"messages\": [{\"role\": \"user\", \"content\": \"go\"}, {\"role\": \"assistant\", "
                  "\"content\": null, \"tool_calls\": [{\"function\": {\"name\": \"f\", \"arguments\": {}}}]}]}",
                  "|user:False/True|assistant:[Tru]e/True");
    /* ... and without tools the template sees none */
    EXPECT_MARKED("{{ tools is none }}{% for m in messages %}{{ m.content }}{% endfor %}", &spec, 3, false,
                  "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"assistant\", \"content\": "
                  "\"b\"}]}",
                  "Truea[b]");
}

/* ---- bad data: every message names the record and the field ---- */

typedef struct bad_case {
    const char *record;
    tt_dataset_spec spec;
} bad_case;

static void record_fails(void *arg) {
    bad_case *c = arg;
    tt_chat_format *f = open_format(plain, &c->spec, 0, false, bytes_dir, bytes_tok);
    json_t *record = json_loads(c->record, JSON_ALLOW_NUL, NULL);
    tt_chat_example ex;
    tt_chat_record(f, record, "bad.jsonl:3", &ex);
}

#define EXPECT_BAD(spec_, record_, needle)                    \
    do {                                                      \
        bad_case c_ = {.record = (record_), .spec = (spec_)}; \
        tt_expect_die(record_fails, &c_, (needle));           \
    } while (0)

static void test_bad_records(void) {
    tt_dataset_spec spec = default_spec();
    EXPECT_BAD(spec, "{\"text\": \"x\"}", "bad.jsonl:3: the record has no field 'messages'");
    EXPECT_BAD(spec, "{\"conversations\": []}",
               "bad.jsonl:3: the record has no field 'messages' but has "
               "'conversations'; set field_messages: conversations");
    EXPECT_BAD(spec, "{\"messages\": \"hi\"}", "bad.jsonl:3: field 'messages' is a string");
    EXPECT_BAD(spec, "{\"messages\": []}", "bad.jsonl:3: empty conversation");
    EXPECT_BAD(spec, "{\"messages\": [1]}", "bad.jsonl:3: messages[0] is an integer");
    EXPECT_BAD(spec, "{\"messages\": [{\"content\": \"x\"}]}", "bad.jsonl:3: messages[0] has no field 'role'");
    EXPECT_BAD(spec, "{\"messages\": [{\"role\": 3, \"content\": \"x\"}]}",
               "bad.jsonl:3: messages[0].role is an integer");
    EXPECT_BAD(spec, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}, {\"role\": \"assistant\"}]}",
               "bad.jsonl:3: messages[1] (assistant) has no field 'content'");
    EXPECT_BAD(spec, "{\"messages\": [{\"role\": \"user\", \"content\": 5}]}",
               "bad.jsonl:3: messages[0].content is an integer");
    EXPECT_BAD(spec, "{\"messages\": [{\"role\": \"\", \"content\": \"x\"}]}",
               "bad.jsonl:3: messages[0].role is \"\"; a message needs a role");
    EXPECT_BAD(spec, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\\u0000b\"}]}",
               "bad.jsonl:3: messages[0].content contains a NUL character");
    EXPECT_BAD(spec, "{\"messages\": [{\"role\": \"narrator\", \"content\": \"x\"}]}",
               "bad.jsonl:3: messages[0].role is 'narrator', a role that is not system, user, assistant or tool");
    EXPECT_BAD(spec, "{\"system\": 1, \"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}",
               "bad.jsonl:3: field 'system' is an integer");
    EXPECT_BAD(spec, "{\"tools\": {}, \"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}",
               "bad.jsonl:3: field 'tools' is an object");
    EXPECT_BAD(spec,
               "{\"messages\": [{\"role\": \"assistant\", \"tool_calls\": [{\"function\": {\"arguments\": \"{x\"}}]}]}",
               "bad.jsonl:3: messages[0].tool_calls[0].function.arguments is a string that is not JSON");
    char *props[] = {"role", "content"}, *fields[] = {"from", "value"};
    tt_dataset_spec sharegpt = default_spec();
    sharegpt.property_names = props;
    sharegpt.property_fields = fields;
    EXPECT_BAD(sharegpt, "{\"messages\": [{\"from\": \"human\", \"text\": \"x\"}]}",
               "bad.jsonl:3: messages[0] (user) has no field 'value' (its content, by message_property_mappings)");
    EXPECT_BAD(sharegpt, "{\"messages\": [{\"from\": \"observation\", \"value\": \"x\"}]}",
               "map it with roles: {assistant: [observation]}");
    tt_dataset_spec drop = default_spec();
    drop.drop_system_message = true;
    EXPECT_BAD(drop, "{\"messages\": [{\"role\": \"system\", \"content\": \"x\"}]}", "bad.jsonl:3: empty conversation");
    /* a template that raises: its message, the record, the template */
    tt_chat_format *f = open_format("{% if messages[0].role != 'system' %}{{ raise_exception('a system message "
                                    "first, please') }}{% endif %}",
                                    &spec, 0, false, bytes_dir, bytes_tok);
    json_t *record = json_loads("{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}", 0, NULL);
    tokenized t;
    TT_EXPECT(!run_record(f, record, &t) &&
                  strstr(t.error, "test.jsonl:1: the chat template (the test's template) "
                                  "fails on this conversation: a system message first, please"),
              "%s", t.error ? t.error : "(rendered)");
    tokenized_free(&t);
    json_decref(record);
    tt_chat_format_free(f);
    /* ... and where the record's tool-call arguments were JSON text that axolotl's parse made an object, the way out */
    f = open_format("{% for m in messages %}{% for c in m.tool_calls %}{{ '<' + c.function.arguments + '>' }}"
                    "{% endfor %}{% endfor %}",
                    &spec, 0, false, bytes_dir, bytes_tok);
    record = json_loads("{\"messages\": [{\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"function\": "
                        "{\"name\": \"f\", \"arguments\": \"{\\\"x\\\": 7}\"}}]}]}",
                        0, NULL);
    TT_EXPECT(!run_record(f, record, &t) && strstr(t.error, "can only concatenate str") &&
                  strstr(t.error, "parsed into objects as axolotl parses them: `tool_call_arguments: as_given`"),
              "%s", t.error ? t.error : "(rendered)");
    tokenized_free(&t);
    json_decref(record);
    tt_chat_format_free(f);
}

/* ---- chat_template_kwargs, train_on_eot / eot_tokens, message training fields, split_thinking ---- */

/* chat_template_kwargs: more variables of every render, the placeholder renders included; they win over the
 * special tokens, as apply_chat_template's keyword arguments do. */
static void test_template_kwargs(void) {
    tt_dataset_spec spec = default_spec();
    tt_chat_settings more = {.template_kwargs =
                                 "{\"greeting\": \"hey\", \"n\": 3, \"flag\": false, \"tags\": [\"a\", \"b\"], "
                                 "\"deep\": {\"x\": 1.5}}"};
    const char *tmpl = "{{ greeting }} {{ n + 1 }} {{ flag is false }} {{ tags | join(',') }} {{ deep.x }}|{% for m in "
                       "messages %}{{ m.role }}: {{ m.content }}{{ eos_token }}{% endfor %}";
    char *got = marked_with(tmpl, &spec, &more,
                            "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": "
                            "\"assistant\", \"content\": \"yo\"}]}");
    TT_EXPECT(strcmp(got, "hey 4 True a,b 1.5|user: hi$assistant: [yo$]") == 0, "kwargs reach the template: %s", got);
    free(got);
    /* a kwarg named like a special token replaces it: the template's EOS is '#' text now, and none trains */
    tt_chat_settings eos_kwarg = {.template_kwargs = "{\"eos_token\": \"#!\"}"};
    got = marked_with(plain, &spec, &eos_kwarg,
                      "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": "
                      "\"assistant\", \"content\": \"yo\"}]}");
    TT_EXPECT(strcmp(got, "user: hi\nassistant: [yo]#!\n") == 0, "a kwarg wins over eos_token: %s", got);
    free(got);
    /* Qwen3's own template reads enable_thinking only in its generation prompt, which a training render leaves
     * out (add_generation_prompt false): enable_thinking false changes nothing in the ids or labels */
    const char *conv = "{\"messages\": [{\"role\": \"user\", \"content\": \"2+2?\"}, {\"role\": \"assistant\", "
                       "\"content\": \"4\"}]}";
    tt_chat_settings no_thinking = {.template_kwargs = "{\"enable_thinking\": false}"}, none = {0};
    char *with = marked_with(tt_chat_builtin_template("qwen3"), &spec, &no_thinking, conv);
    char *without = marked_with(tt_chat_builtin_template("qwen3"), &spec, &none, conv);
    TT_EXPECT(strcmp(with, without) == 0 && strstr(with, "<|im_start|>assistant\n<think>\n\n</think>\n\n[4]<|im_end|>"),
              "qwen3 with enable_thinking false: %s", with);
    free(with);
    free(without);
}

/* train_on_eot picks from eot_tokens as train_on_eos from the EOS; where both find a token, it trains when
 * either says so; axolotl's checks of eot_tokens. The byte fixture's <pad> (258, '#') ends every turn here. */
static const char eot_template[] = "{% for m in messages %}{{ m.role }}: {{ m.content }}<pad>{% if m.role == "
                                   "'assistant' %}{{ eos_token }}{% endif %}{{ '\\n' }}{% endfor %}";
/* the same with the EOS written out, as axolotl's check of eot_tokens looks for the token's text */
static const char eot_template_literal[] = "{% for m in messages %}{{ m.role }}: {{ m.content }}<pad>{% if m.role == "
                                           "'assistant' %}<|endoftext|>{% endif %}{{ '\\n' }}{% endfor %}";

typedef struct eot_case {
    char **tokens;
    int count, eos_rule, eot_rule;
} eot_case;

static void open_eot_case(void *arg) {
    eot_case *c = arg;
    tt_dataset_spec spec = default_spec();
    tt_chat_settings more = {
        .eot_tokens = c->tokens, .eot_token_count = c->count, .train_on_eos = c->eos_rule, .train_on_eot = c->eot_rule};
    tt_chat_format_free(open_format_with(eot_template_literal, &spec, &more, bytes_dir, bytes_tok));
}

static void test_eot(void) {
    tt_dataset_spec spec = default_spec();
    char *pad[] = {"<pad>"};
    /* eot all, eos none: every turn's <pad>, no EOS */
    tt_chat_settings more = {
        .eot_tokens = pad, .eot_token_count = 1, .train_on_eos = TT_EOS_NONE, .train_on_eot = TT_EOS_ALL};
    char *got = marked_with(eot_template, &spec, &more, conversation);
    TT_EXPECT(strcmp(got, "system: S[#]\nuser: hi[#]\nassistant: [yo#]$\nuser: ok?[#]\nassistant: [ok.#]$\n") == 0,
              "eot all, eos none: %s", got);
    free(got);
    /* eot turn, eos last: the trained turns' <pad>, the last EOS after a trained turn (it is 1 token after) */
    more.train_on_eos = TT_EOS_LAST;
    more.train_on_eot = TT_EOS_TURN;
    got = marked_with(eot_template, &spec, &more, conversation);
    TT_EXPECT(strcmp(got, "system: S#\nuser: hi#\nassistant: [yo#]$\nuser: ok?#\nassistant: [ok.#$]\n") == 0,
              "eot turn, eos last: %s", got);
    free(got);
    /* eot last, eos turn */
    more.train_on_eos = TT_EOS_TURN;
    more.train_on_eot = TT_EOS_LAST;
    got = marked_with(eot_template, &spec, &more, conversation);
    TT_EXPECT(strcmp(got, "system: S#\nuser: hi#\nassistant: [yo]#[$]\nuser: ok?#\nassistant: [ok.#$]\n") == 0,
              "eot last, eos turn: %s", got);
    free(got);
    /* eot_tokens not given: the EOS alone, and both rules decide about it: train_on_eot all trains the EOS after
     * every turn that has one even with train_on_eos none (axolotl checks no conflict there) */
    tt_chat_settings by_default = {.train_on_eos = TT_EOS_NONE, .train_on_eot = TT_EOS_ALL};
    got = marked_with(plain, &spec, &by_default, conversation);
    TT_EXPECT(strcmp(got, "system: S\nuser: hi\nassistant: [yo$]\nuser: ok?\nassistant: [ok.$]\n") == 0,
              "default eot, eot all: %s", got);
    free(got);
    /* eot_tokens: [] is no end-of-turn token at all */
    char *nothing[] = {NULL};
    tt_chat_settings empty = {
        .eot_tokens = nothing, .eot_token_count = 0, .train_on_eos = TT_EOS_NONE, .train_on_eot = TT_EOS_ALL};
    got = marked_with(eot_template, &spec, &empty, conversation);
    TT_EXPECT(strcmp(got, "system: S#\nuser: hi#\nassistant: [yo]#$\nuser: ok?#\nassistant: [ok.]#$\n") == 0,
              "eot_tokens []: %s", got);
    free(got);
    /* a token the template never writes is left out (with a warning), as axolotl leaves it */
    char *absent[] = {"<s>", "<pad>"};
    tt_chat_settings some = {
        .eot_tokens = absent, .eot_token_count = 2, .train_on_eos = TT_EOS_NONE, .train_on_eot = TT_EOS_ALL};
    got = marked_with(eot_template, &spec, &some, conversation);
    TT_EXPECT(strcmp(got, "system: S[#]\nuser: hi[#]\nassistant: [yo#]$\nuser: ok?[#]\nassistant: [ok.#]$\n") == 0,
              "an eot token outside the template: %s", got);
    free(got);
    /* errors: the EOS among them with different rules; a token that is several tokens */
    char *with_eos[] = {"<pad>", "<|endoftext|>"};
    eot_case conflict = {with_eos, 2, 0, 1};
    tt_expect_die(
        open_eot_case, &conflict,
        "eot_tokens holds the EOS token '<|endoftext|>', but train_on_eos (turn) and train_on_eot (all) differ");
    eot_case agree = {with_eos, 2, 1, 1}; /* the same rule: fine */
    open_eot_case(&agree);
    tt_chat_settings both = {
        .eot_tokens = with_eos, .eot_token_count = 2, .train_on_eos = TT_EOS_LAST, .train_on_eot = TT_EOS_LAST};
    got = marked_with(eot_template_literal, &spec, &both, conversation);
    TT_EXPECT(strcmp(got, "system: S#\nuser: hi#\nassistant: [yo]#$\nuser: ok?#\nassistant: [ok.#$]\n") == 0,
              "the EOS among the eot tokens, both last: %s", got);
    free(got);
    char *words[] = {"role"};
    eot_case several = {words, 1, 0, 0};
    tt_expect_die(open_eot_case, &several, "eot_tokens: 'role' is 4 tokens of the tokenizer, not one");
}

/* message_field_training and message_field_training_detail */
static void test_message_training(void) {
    tt_dataset_spec spec = default_spec();
    spec.message_field_training = "train";
    spec.message_field_training_detail = "spans";
    /* the field overrides the role: the user turn trains, the assistant turn not (nor its EOS, rule turn) */
    EXPECT_MARKED(
        plain, &spec, 0, false,
        "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\", \"train\": true}, {\"role\": \"assistant\", "
        "\"content\": \"yo\", \"train\": false}, {\"role\": \"user\", \"content\": \"ok?\"}, {\"role\": "
        "\"assistant\", \"content\": \"ok.\", \"train\": null}]}",
        "user: [hi]\nassistant: yo$\nuser: ok?\nassistant: [ok.$]\n");
    /* spans: only the characters of spans with train true (end_offset included); the turn trains, so its EOS too */
    EXPECT_MARKED(
        plain, &spec, 0, false,
        "{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"assistant\", \"content\": \"hello "
        "world\", \"spans\": [{\"begin_offset\": 0, \"end_offset\": 4, \"train\": true}, {\"begin_offset\": 6, "
        "\"end_offset\": 10, \"train\": false}]}]}",
        "user: q\nassistant: [hello] world[$]\n");
    /* spans on a user turn make it train; train false with spans trains nothing; [] trains nothing (axolotl's
     * bool(spans)) */
    EXPECT_MARKED(
        plain, &spec, 0, false,
        "{\"messages\": [{\"role\": \"user\", \"content\": \"abc\", \"spans\": [{\"begin_offset\": 1, "
        "\"end_offset\": 2, \"train\": true}]}, {\"role\": \"assistant\", \"content\": \"yo\", \"train\": false, "
        "\"spans\": [{\"begin_offset\": 0, \"end_offset\": 1, \"train\": true}]}, {\"role\": \"assistant\", "
        "\"content\": \"x\", \"spans\": []}]}",
        "user: a[bc]\nassistant: yo$\nassistant: x$\n");
    /* characters, not bytes: é is two byte tokens of one character */
    EXPECT_MARKED(
        plain, &spec, 3, false,
        "{\"messages\": [{\"role\": \"assistant\", \"content\": \"h\\u00e9llo\", \"spans\": [{\"begin_offset\": 1, "
        "\"end_offset\": 1, \"train\": true}, {\"begin_offset\": 4, \"end_offset\": 4, \"train\": true}]}]}",
        "assistant: h[\xc3\xa9]ll[o]$\n");
    /* a template that does not print the content as it is (it trims it): axolotl's way, the content tokenized
     * alone and laid from the turn's first token on, shifted here by the two spaces the render lacks */
    const char *trimming = "{% for m in messages %}{{ m.role }}: {{ m.content | trim }}{{ eos_token }}\n{% endfor %}";
    EXPECT_MARKED(trimming, &spec, 3, false,
                  "{\"messages\": [{\"role\": \"assistant\", \"content\": \"  ab\", \"spans\": [{\"begin_offset\": 2, "
                  "\"end_offset\": 2, \"train\": true}]}]}",
                  "assistant: ab[$]\n");
    /* with reasoning_content, the spans' turn is the content alone (axolotl's content_only) */
    EXPECT_MARKED(tt_chat_builtin_template("qwen3"), &spec, 3, false,
                  "{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"assistant\", \"content\": "
                  "\"ans\", \"reasoning_content\": \"why\", \"spans\": [{\"begin_offset\": 0, \"end_offset\": 1, "
                  "\"train\": true}]}]}",
                  "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<think>\nwhy\n</think>\n\n[an]s<|im_end|>\n");
}

/* split_thinking: the reasoning out of the content, as axolotl's transform_message */
static void test_split_thinking(void) {
    tt_dataset_spec spec = default_spec();
    spec.split_thinking = true;
    const char *tmpl = "{% for m in messages %}{{ m.role }}:{% if m.reasoning_content is defined %}({{ "
                       "m.reasoning_content }}){% endif %}{{ m.content }}|{% endfor %}";
    EXPECT_MARKED(tmpl, &spec, 3, false,
                  "{\"messages\": [{\"role\": \"user\", \"content\": \"<think>u</think>q\"}, {\"role\": \"assistant\", "
                  "\"content\": \"pre<think> why\\n</think>\\n\\n ans \"}]}",
                  "user:<think>u</think>q|assistant:[(why)ans ]|");
    EXPECT_MARKED(tmpl, &spec, 3, false,
                  "{\"messages\": [{\"role\": \"assistant\", \"content\": \"<reasoning>r</reasoning> "
                  "<|begin_of_solution|> sol <|end_of_solution|> after\"}]}",
                  "assistant:[(r)sol]|");
    EXPECT_MARKED(
        tmpl, &spec, 3, false,
        "{\"messages\": [{\"role\": \"assistant\", \"content\": \"<|begin_of_thought|>t<|end_of_thought|>x\"}]}",
        "assistant:[(t)x]|");
    /* Python's whitespace (U+3000, U+00A0, U+2003) is stripped too */
    EXPECT_MARKED(
        tmpl, &spec, 3, false,
        "{\"messages\": [{\"role\": \"assistant\", \"content\": \"<think>\\u3000r\\u00a0</think>\\u2003x\"}]}",
        "assistant:[(r)x]|");
    /* only one tag, or none: unchanged; the closing tag first: empty reasoning, the rest is the content */
    EXPECT_MARKED(tmpl, &spec, 3, false,
                  "{\"messages\": [{\"role\": \"assistant\", \"content\": \"<think>x\"}, {\"role\": \"assistant\", "
                  "\"content\": \"</think>a<think>\"}]}",
                  "assistant:[<think>x]|assistant:[()a<think>]|");
    /* the split content wins over a reasoning_content field of the message */
    EXPECT_MARKED(
        tmpl, &spec, 3, false,
        "{\"messages\": [{\"role\": \"assistant\", \"content\": \"<think>new</think>x\", \"reasoning_content\": "
        "\"old\"}]}",
        "assistant:[(new)x]|");
    /* off: the content as it is */
    tt_dataset_spec off = default_spec();
    EXPECT_MARKED(tmpl, &off, 3, false,
                  "{\"messages\": [{\"role\": \"assistant\", \"content\": \"<think>r</think>x\"}]}",
                  "assistant:[<think>r</think>x]|");
}

/* message training fields that are not what they should be */
static void test_bad_training_fields(void) {
    tt_dataset_spec spec = default_spec();
    spec.message_field_training = "train";
    spec.message_field_training_detail = "spans";
    EXPECT_BAD(spec, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\", \"train\": \"yes\"}]}",
               "bad.jsonl:3: messages[0].train is a string; message_field_training names a field that is true");
    EXPECT_BAD(spec, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\", \"spans\": {}}]}",
               "bad.jsonl:3: messages[0].spans is an object; message_field_training_detail names a list of spans");
    EXPECT_BAD(spec, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\", \"spans\": [3]}]}",
               "bad.jsonl:3: messages[0].spans[0] is an integer; a span is");
    EXPECT_BAD(spec,
               "{\"messages\": [{\"role\": \"user\", \"content\": \"xy\", \"spans\": [{\"begin_offset\": 0, "
               "\"end_offset\": 1, \"train\": true, \"weight\": 1}]}]}",
               "bad.jsonl:3: messages[0].spans[0] has the unknown field 'weight'");
    EXPECT_BAD(spec,
               "{\"messages\": [{\"role\": \"user\", \"content\": \"xy\", \"spans\": [{\"end_offset\": 1, "
               "\"train\": true}]}]}",
               "bad.jsonl:3: messages[0].spans[0] has no 'begin_offset'");
    EXPECT_BAD(spec,
               "{\"messages\": [{\"role\": \"user\", \"content\": \"xy\", \"spans\": [{\"begin_offset\": 0.5, "
               "\"end_offset\": 1, \"train\": true}]}]}",
               "bad.jsonl:3: messages[0].spans[0].begin_offset is a real number; it is a character position");
    EXPECT_BAD(spec,
               "{\"messages\": [{\"role\": \"user\", \"content\": \"xy\", \"spans\": [{\"begin_offset\": -1, "
               "\"end_offset\": 1, \"train\": true}]}]}",
               "bad.jsonl:3: messages[0].spans[0].begin_offset is negative");
    EXPECT_BAD(spec,
               "{\"messages\": [{\"role\": \"user\", \"content\": \"xy\", \"spans\": [{\"begin_offset\": 0, "
               "\"end_offset\": 1, \"train\": 1}]}]}",
               "bad.jsonl:3: messages[0].spans[0].train is an integer; it is true");
    EXPECT_BAD(spec,
               "{\"messages\": [{\"role\": \"user\", \"content\": \"xy\", \"spans\": [{\"begin_offset\": 1, "
               "\"end_offset\": 0, \"train\": true}]}]}",
               "bad.jsonl:3: messages[0].spans[0]: begin_offset 1 is after end_offset 0");
    EXPECT_BAD(spec,
               "{\"messages\": [{\"role\": \"user\", \"content\": \"h\\u00e9\", \"spans\": [{\"begin_offset\": 0, "
               "\"end_offset\": 2, \"train\": true}]}]}",
               "bad.jsonl:3: messages[0].spans[0]: end_offset 2 is past the content's last character (2 characters, "
               "so at most 1");
    EXPECT_BAD(spec,
               "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"x\"}], "
               "\"spans\": [{\"begin_offset\": 0, \"end_offset\": 0, \"train\": true}]}]}",
               "bad.jsonl:3: messages[0].spans gives character spans, but the message's content is an array");
}

/* The same keys with the real Qwen3 tokenizer and Qwen3's own template, ids and labels token for token: the
 * reasoning split out of the content (split_thinking), character spans over multi-character tokens (a span
 * widened to the tokens it touches, as axolotl's adjust_train_details), <|im_end|> as eot token with train_on_eot
 * last and train_on_eos none, and enable_thinking false, which Qwen3's template reads in its generation prompt
 * only (so the training render is unchanged). */
static void test_qwen3_keys(void) {
    const char *tokdir = "tokenizer_cache/qwen3/package/models";
    struct stat st;
    if (stat("tokenizer_cache/qwen3/package/models/tokenizer.json", &st) != 0) {
        printf("SKIPPED: the Qwen3 checks of the chat keys need the tokenizer test_tokenizer_real fetches\n");
        return;
    }
    tt_tokenizer *tok = tt_tokenizer_load(tokdir);
    tt_dataset_spec spec = default_spec();
    spec.split_thinking = true;
    spec.message_field_training_detail = "spans";
    char *eot[] = {"<|im_end|>"};
    tt_chat_settings more = {.train_on_eos = TT_EOS_NONE,
                             .train_on_eot = TT_EOS_LAST,
                             .eot_tokens = eot,
                             .eot_token_count = 1,
                             .template_kwargs = "{\"enable_thinking\": false}"};
    tt_chat_format *f = open_format_with(tt_chat_builtin_template("qwen3"), &spec, &more, tokdir, tok);
    json_t *record =
        json_loads("{\"messages\": [{\"role\": \"user\", \"content\": \"Say hi to Ana.\"}, {\"role\": "
                   "\"assistant\", \"content\": \"<think>Greet her.</think>Hello, Ana! Nice day.\", "
                   "\"spans\": [{\"begin_offset\": 0, \"end_offset\": 4, \"train\": true}, {\"begin_offset\": "
                   "12, \"end_offset\": 19, \"train\": true}]}]}",
                   0, NULL);
    tokenized t;
    bool ok = run_record(f, record, &t);
    /* <|im_start|>user\nSay hi to Ana.<|im_end|>\n<|im_start|>assistant\n<think>\nGreet her.\n</think>\n\n
     * [Hello], Ana![ Nice][ day].[<|im_end|>]\n */
    static const int32_t want_ids[] = {151644, 872,   198, 45764,  15588, 311,   32138, 13,   151645, 198,
                                       151644, 77091, 198, 151667, 198,   38,    3744,  1059, 624,    151668,
                                       271,    9707,  11,  32138,  0,     28859, 1899,  13,   151645, 198};
    static const char want_labels[] = "000000000000000000000100011010";
    const int64_t n = (int64_t)(sizeof want_ids / sizeof want_ids[0]);
    bool same = ok && t.ids.count == n;
    for (int64_t k = 0; same && k < n; k++)
        same = t.ids.ids[k] == want_ids[k] && t.labels[k] == (uint8_t)(want_labels[k] - '0');
    TT_EXPECT(same, "qwen3: the ids and labels differ from the expected ones");
    if (!same) {
        for (int64_t k = 0; k < t.ids.count; k++) {
            char *piece = tt_tokenizer_decode(tok, &t.ids.ids[k], 1, false, NULL);
            printf("  %lld: %d %d '%s'\n", (long long)k, t.ids.ids[k], t.labels[k], piece);
            free(piece);
        }
    }
    tokenized_free(&t);
    json_decref(record);
    tt_chat_format_free(f);
    tt_tokenizer_free(tok);
}

/* ---- which template: tokenizer_default, fallback, jinja, built-ins ---- */

typedef struct choice_case {
    tt_run_config *run;
    const char *dir;
} choice_case;

static void choose(void *arg) {
    choice_case *c = arg;
    char origin[512];
    free(tt_chat_template_text(c->run, 0, c->dir, origin, sizeof origin));
}

static char *choice_text(tt_run_config *run, const char *dir, char *origin, size_t size) {
    return tt_chat_template_text(run, 0, dir, origin, size);
}

static void test_choice(void) {
    char *dir = tt_test_path("tok");
    mkdir(dir, 0755);
    tt_run_config run;
    memset(&run, 0, sizeof run);
    run.dataset_count = 1;
    run.datasets[0] = "chats.jsonl";
    run.dataset_specs[0] = default_spec();
    char origin[512];
    choice_case c = {&run, dir};
    /* tokenizer_default without a template: an error naming the choices */
    tt_expect_die(choose, &c, "chat_template is tokenizer_default, but the tokenizer in");
    tt_test_write_text("tok/tokenizer_config.json", "{\"chat_template\": \"A{{ 1 }}\"}");
    char *text = choice_text(&run, dir, origin, sizeof origin);
    TT_EXPECT(strcmp(text, "A{{ 1 }}") == 0 && strstr(origin, "tokenizer_config.json: chat_template"), "%s", origin);
    free(text);
    tt_test_write_text("tok/tokenizer_config.json",
                       "{\"chat_template\": [{\"name\": \"tool_use\", \"template\": \"T\"}, "
                       "{\"name\": \"default\", \"template\": \"D\"}]}");
    text = choice_text(&run, dir, origin, sizeof origin);
    TT_EXPECT(strcmp(text, "D") == 0, "the list's default: %s", text);
    free(text);
    tt_test_write_text("tok/tokenizer_config.json",
                       "{\"chat_template\": [{\"name\": \"tool_use\", \"template\": \"T\"}]}");
    tt_expect_die(choose, &c, "without one named \"default\"");
    tt_test_write_text("tok/chat_template.jinja", "J");
    text = choice_text(&run, dir, origin, sizeof origin);
    TT_EXPECT(strcmp(text, "J") == 0 && strstr(origin, "chat_template.jinja"), "chat_template.jinja wins: %s", text);
    free(text);
    /* the top level's choice, a dataset's own, fallback, jinja inline and from a file */
    run.chat_template = "llama3";
    text = choice_text(&run, dir, origin, sizeof origin);
    TT_EXPECT(strcmp(text, tt_chat_builtin_template("llama3")) == 0, "top level llama3");
    free(text);
    run.dataset_specs[0].chat_template = "chatml";
    text = choice_text(&run, dir, origin, sizeof origin);
    TT_EXPECT(strcmp(text, tt_chat_builtin_template("chatml")) == 0, "the dataset's chatml wins");
    free(text);
    run.dataset_specs[0].chat_template = "tokenizer_default_fallback_chatml";
    text = choice_text(&run, dir, origin, sizeof origin);
    TT_EXPECT(strcmp(text, "J") == 0, "fallback: the tokenizer's first");
    free(text);
    char *empty = tt_test_path("empty");
    mkdir(empty, 0755);
    text = choice_text(&run, empty, origin, sizeof origin);
    TT_EXPECT(strcmp(text, tt_chat_builtin_template("chatml")) == 0, "fallback: chatml");
    free(text);
    run.dataset_specs[0].chat_template = "jinja";
    run.dataset_specs[0].chat_template_jinja = "{{ messages | length }}";
    text = choice_text(&run, dir, origin, sizeof origin);
    TT_EXPECT(strcmp(text, "{{ messages | length }}") == 0, "inline jinja");
    free(text);
    char *file = tt_test_path("t.jinja");
    tt_test_write_text("t.jinja", "F");
    run.dataset_specs[0].chat_template_jinja = file;
    text = choice_text(&run, dir, origin, sizeof origin);
    TT_EXPECT(strcmp(text, "F") == 0, "jinja from a file");
    free(text);
    run.dataset_specs[0].chat_template = "vicuna";
    tt_expect_die(choose, &c,
                  "chat_template 'vicuna' is not known; use tokenizer_default (the model's own), "
                  "tokenizer_default_fallback_<name>, jinja (with chat_template_jinja: the template or a "
                  "file), or a built-in: chatml, llama3, gemma, phi_3, qwen3");
    free(file);
    free(empty);
    free(dir);
}

int main(int argc, char **argv) {
    source_dir = argc > 1 ? argv[1] : getenv("TT_SOURCE_DIR");
    if (!source_dir) source_dir = ".";
    snprintf(bytes_dir, sizeof bytes_dir, "%s/tests/fixtures/data/bytes_tokenizer", source_dir);
    tt_test_scratch_open("chat");
    bytes_tok = tt_tokenizer_load(bytes_dir);
    test_masks_by_hand();
    test_generation();
    test_builtins();
    test_records();
    test_bad_records();
    test_template_kwargs();
    test_eot();
    test_message_training();
    test_split_thinking();
    test_bad_training_fields();
    test_choice();
    tt_tokenizer_free(bytes_tok);
    test_golden();
    test_qwen3_keys();
    int status = tt_test_summary("chat_data");
    tt_test_scratch_close();
    return status;
}
