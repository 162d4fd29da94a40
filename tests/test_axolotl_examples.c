/* axolotl's own example configs, unchanged but for output_dir (issue 40's test): tests/fixtures/axolotl/examples/
 * holds every example of axolotl (at 067b021) for the architectures tiertrain trains, and examples.txt names each
 * one's family and what it does today: "runs" (preprocess, then one step of training on the CPU) or "refused" (a
 * clear error before anything loads: an 8-bit optimizer, an RL trainer, ...). Each config's base_model is a tiny
 * random model of its family with a byte-level tokenizer that has the chat templates' special tokens, put in a
 * Hugging Face cache of the test's under the example's own base_model name (HF_HUB_CACHE); each dataset entry's data
 * is a JSONL file written here in the entry's own format (its type, field names, message mappings and roles), put in
 * that cache as the train file of the entry's Hub dataset name, or, for an entry that names a local file or
 * data_files, given as the entry's path. The count that runs unchanged is printed last, with how many of those kept
 * every path as axolotl wrote it.
 *
 * Needs the tiertrain binary: TT_BINARY (tests/CMakeLists.txt sets it). */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <yaml.h>

#include "core/check.h"
#include "test_util.h"

static const char *tiertrain;
static const char *source_dir;

/* Runs a shell command line; its exit status (-1: killed by a signal). */
static int shell(const char *command) {
    fflush(stdout);
    const int status = system(command);
    if (status == -1 || !WIFEXITED(status)) return -1;
    return WEXITSTATUS(status);
}

static const char *const chat_specials[] = {"</s>",
                                            "<unk>",
                                            "<|im_start|>",
                                            "<|im_end|>",
                                            "<|begin_of_text|>",
                                            "<|start_header_id|>",
                                            "<|end_header_id|>",
                                            "<|eot_id|>",
                                            "<start_of_turn>",
                                            "<end_of_turn>",
                                            "<bos>",
                                            "<eos>",
                                            "<|user|>",
                                            "<|assistant|>",
                                            "<|system|>",
                                            "<|end|>",
                                            "[INST]",
                                            "[/INST]",
                                            "<|end_of_text|>",
                                            "<|finetune_right_pad_id|>"};

/* The base model of a family: a random model whose vocabulary takes the byte tokenizer and the chat specials (one
 * training step from random init writes its model.safetensors and config.json), with that tokenizer beside it. */
static void make_base_model(const char *family, const char *dir) {
    char path[8192], command[32768];
    snprintf(path, sizeof path, "%s/tests/fixtures/tiny_%s/config.json", source_dir, family);
    json_error_t error;
    json_t *config = json_load_file(path, 0, &error);
    TT_CHECK(config != NULL, "%s: %s", path, error.text);
    json_t *text = json_object_get(config, "text_config");
    json_object_set_new(text ? text : config, "vocab_size", json_integer(320));
    snprintf(path, sizeof path, "%s.config.json", dir);
    TT_CHECK(json_dump_file(config, path, JSON_INDENT(1)) == 0, "write %s", path);
    json_decref(config);
    snprintf(command, sizeof command,
             "cd '%s' && '%s' tokenize --bytes -o bootstrap.tok '%s/README.md' > /dev/null && '%s' train "
             "model_config='%s.config.json' datasets=[bootstrap.tok] sequence_len=32 max_steps=1 val_set_size=0 "
             "progress=false device=cpu overwrite_output_dir=true output_dir='%s' > '%s.log' 2>&1",
             tt_test_scratch_dir, tiertrain, source_dir, tiertrain, dir, dir, dir);
    TT_EXPECT(shell(command) == 0, "a tiny %s base model is made (%s.log)", family, dir);
    /* the byte tokenizer with the specials added */
    snprintf(path, sizeof path, "%s/tests/fixtures/data/bytes_tokenizer/tokenizer.json", source_dir);
    json_t *tokenizer = json_load_file(path, 0, &error);
    TT_CHECK(tokenizer != NULL, "%s: %s", path, error.text);
    json_t *added = json_object_get(tokenizer, "added_tokens");
    int64_t next_id = 0;
    size_t i;
    json_t *token;
    json_array_foreach(added, i, token) {
        const int64_t id = json_integer_value(json_object_get(token, "id"));
        if (id >= next_id) next_id = id + 1;
    }
    for (size_t s = 0; s < sizeof chat_specials / sizeof chat_specials[0]; s++)
        json_array_append_new(added, json_pack("{s:I, s:s, s:b, s:b, s:b, s:b, s:b}", "id", (json_int_t)next_id++,
                                               "content", chat_specials[s], "single_word", 0, "lstrip", 0, "rstrip", 0,
                                               "normalized", 0, "special", 1));
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    TT_CHECK(json_dump_file(tokenizer, path, 0) == 0, "write %s", path);
    json_decref(tokenizer);
    json_t *tokenizer_config = json_pack(
        "{s:s, s:s, s:s, s:s, s:b, s:s}", "bos_token", "<s>", "eos_token", "</s>", "pad_token", "<pad>", "unk_token",
        "<unk>", "add_bos_token", 1, "chat_template",
        "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + "
        "'<|im_end|>\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}");
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    TT_CHECK(json_dump_file(tokenizer_config, path, JSON_INDENT(1)) == 0, "write %s", path);
    json_decref(tokenizer_config);
}

/* ---- the YAML document ---- */

static yaml_node_t *mapping_get(yaml_document_t *doc, yaml_node_t *map, const char *key) {
    if (!map || map->type != YAML_MAPPING_NODE) return NULL;
    for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(doc, p->key);
        if (k->type == YAML_SCALAR_NODE && strcmp((const char *)k->data.scalar.value, key) == 0)
            return yaml_document_get_node(doc, p->value);
    }
    return NULL;
}

static const char *scalar_of(yaml_document_t *doc, yaml_node_t *map, const char *key, const char *otherwise) {
    yaml_node_t *v = mapping_get(doc, map, key);
    return v && v->type == YAML_SCALAR_NODE && v->data.scalar.length ? (const char *)v->data.scalar.value : otherwise;
}

static void set_scalar(yaml_node_t *node, const char *text) {
    if (!node || node->type != YAML_SCALAR_NODE) return;
    free(node->data.scalar.value);
    node->data.scalar.value = (yaml_char_t *)strdup(text);
    node->data.scalar.length = strlen(text);
    node->data.scalar.style = YAML_DOUBLE_QUOTED_SCALAR_STYLE;
}

/* The first alias of a role in an entry's roles mapping ({user: [human], assistant: [gpt]}), else the role. */
static const char *role_name(yaml_document_t *doc, yaml_node_t *entry, const char *role) {
    yaml_node_t *aliases = mapping_get(doc, mapping_get(doc, entry, "roles"), role);
    if (aliases && aliases->type == YAML_SEQUENCE_NODE &&
        aliases->data.sequence.items.start < aliases->data.sequence.items.top) {
        yaml_node_t *first = yaml_document_get_node(doc, *aliases->data.sequence.items.start);
        if (first->type == YAML_SCALAR_NODE) return (const char *)first->data.scalar.value;
    }
    return role;
}

/* A JSONL file of 160 records in the entry's format (its type and field names). */
static void write_entry_data(yaml_document_t *doc, yaml_node_t *entry, const char *path) {
    const char *type = scalar_of(doc, entry, "type", "completion");
    FILE *f = fopen(path, "w");
    TT_CHECK(f != NULL, "write %s", path);
    yaml_node_t *mappings = mapping_get(doc, entry, "message_property_mappings");
    const char *role_key = scalar_of(doc, mappings, "role", scalar_of(doc, entry, "message_field_role", "role"));
    const char *content_key =
        scalar_of(doc, mappings, "content", scalar_of(doc, entry, "message_field_content", "content"));
    for (int r = 0; r < 160; r++) { /* 40 B to 1 KB: short ones for sequence_len 512, enough tokens to pack at 8192 */
        char question[128], answer[1400];
        snprintf(question, sizeof question, "What is %d plus %d?", r, r + 1);
        size_t used = 0;
        for (int k = 0; k < 1 + r % 24; k++)
            used += (size_t)snprintf(answer + used, sizeof answer - used, "%sIt is %d, as %d and %d make %d.",
                                     k ? " " : "", 2 * r + 1, r, r + 1, 2 * r + 1);
        json_t *record;
        if (strncmp(type, "chat_template", 13) == 0) {
            json_t *messages = json_array();
            const char *roles[2] = {role_name(doc, entry, "user"), role_name(doc, entry, "assistant")};
            const char *texts[2] = {question, answer};
            for (int m = 0; m < 2; m++)
                json_array_append_new(messages, json_pack("{s:s, s:s}", role_key, roles[m], content_key, texts[m]));
            record = json_pack("{s:o}", scalar_of(doc, entry, "field_messages", "messages"), messages);
        } else if (strcmp(type, "input_output") == 0) {
            record = json_pack("{s:[{s:b, s:s}, {s:b, s:s}]}", "segments", "label", 0, question, "label", 1, answer);
        } else if (strcmp(type, "completion") == 0 || strcmp(type, "pretrain") == 0) {
            char text[1600];
            snprintf(text, sizeof text, "%s %s", question, answer);
            const char *field = strcmp(type, "pretrain") == 0 ? scalar_of(doc, entry, "text_column", "text")
                                                              : scalar_of(doc, entry, "field", "text");
            record = json_pack("{s:s}", field, text);
        } else { /* alpaca and the types tiertrain refuses: an instruction record */
            record = json_pack("{s:s, s:s, s:s}", scalar_of(doc, entry, "field_instruction", "instruction"), question,
                               scalar_of(doc, entry, "field_input", "input"), "",
                               scalar_of(doc, entry, "field_output", "output"), answer);
        }
        char *line = json_dumps(record, JSON_COMPACT);
        fprintf(f, "%s\n", line);
        free(line);
        json_decref(record);
    }
    fclose(f);
}

/* Whether a path is a Hub name (owner/name) the test's cache can hold. */
static bool is_hub_name(const char *path) {
    const char *slash = strchr(path, '/');
    return slash && slash != path && path[0] != '.' && !strchr(slash + 1, '/') && slash[1] && !strchr(path, '.');
}

/* Every entry of a datasets list, its data written: a Hub dataset name without data_files keeps its path, the data
 * going into the test's Hugging Face cache as datasets--<owner>--<name>'s train file; any other entry's path (and
 * data_files) is made local (*changed set). */
static void localise_datasets(yaml_document_t *doc, yaml_node_t *list, const char *stem, int *files, bool *changed) {
    if (!list || list->type != YAML_SEQUENCE_NODE) return;
    for (yaml_node_item_t *item = list->data.sequence.items.start; item < list->data.sequence.items.top; item++) {
        yaml_node_t *entry = yaml_document_get_node(doc, *item);
        if (entry->type != YAML_MAPPING_NODE) continue;
        const char *given = scalar_of(doc, entry, "path", "");
        char path[8800];
        if (is_hub_name(given) && !mapping_get(doc, entry, "data_files")) {
            static const char commit[] = "00000000000000000000000000000000000000d0";
            const char *slash = strchr(given, '/');
            char repo[4400], command[16384];
            snprintf(repo, sizeof repo, "%s/hf_cache/datasets--%.*s--%s", tt_test_scratch_dir, (int)(slash - given),
                     given, slash + 1);
            /* a configuration (name: en) is a directory of the dataset's */
            const char *config = scalar_of(doc, entry, "name", "data");
            snprintf(command, sizeof command, "mkdir -p '%s/refs' '%s/snapshots/%s/%s' && printf %s > '%s/refs/main'",
                     repo, repo, commit, config, commit, repo);
            TT_CHECK(shell(command) == 0, "cache %s", given);
            snprintf(path, sizeof path, "%s/snapshots/%s/%s/train-00000-of-00001.jsonl", repo, commit, config);
            write_entry_data(doc, entry, path);
            continue;
        }
        snprintf(path, sizeof path, "%s/%s.data%d.jsonl", tt_test_scratch_dir, stem, (*files)++);
        write_entry_data(doc, entry, path);
        set_scalar(mapping_get(doc, entry, "path"), path);
        set_scalar(mapping_get(doc, entry, "data_files"), path);
        *changed = true;
    }
}

/* The base model under the example's own base_model name (a Hub name such as Qwen/Qwen3-8B) in the test's Hugging
 * Face cache, laid out as huggingface_hub lays it out: refs/main names a commit whose snapshot is base_dir. */
static void cache_base_model(const char *repo_id, const char *base_dir) {
    const char *slash = strchr(repo_id, '/');
    TT_CHECK(slash != NULL, "base_model '%s' is no Hub name", repo_id);
    static const char commit[] = "0000000000000000000000000000000000000001";
    char repo[4400], command[32768];
    snprintf(repo, sizeof repo, "%s/hf_cache/models--%.*s--%s", tt_test_scratch_dir, (int)(slash - repo_id), repo_id,
             slash + 1);
    snprintf(command, sizeof command,
             "mkdir -p '%s/refs' '%s/snapshots' && printf %s > '%s/refs/main' && ln -sfn '%s' '%s/snapshots/%s'", repo,
             repo, commit, repo, base_dir, repo, commit);
    TT_CHECK(shell(command) == 0, "cache %s", repo_id);
}

/* The example with output_dir (and the datasets' paths that are no Hub names) made local, written to out_path; its
 * base_model and Hub datasets are read from the test's Hugging Face cache, where base_dir and the data are put under
 * their names. *paths_changed: a dataset path had to change. */
static bool localise(const char *example, const char *base_dir, const char *stem, const char *out_path,
                     bool *paths_changed) {
    FILE *in = fopen(example, "rb");
    if (!in) return false;
    yaml_parser_t parser;
    yaml_document_t doc;
    yaml_parser_initialize(&parser);
    yaml_parser_set_input_file(&parser, in);
    const bool loaded = yaml_parser_load(&parser, &doc);
    yaml_parser_delete(&parser);
    fclose(in);
    if (!loaded) return false;
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    char out_dir[4400];
    snprintf(out_dir, sizeof out_dir, "%s/%s.out", tt_test_scratch_dir, stem);
    cache_base_model(scalar_of(&doc, root, "base_model", "missing/base_model"), base_dir);
    set_scalar(mapping_get(&doc, root, "output_dir"), out_dir);
    int files = 0;
    *paths_changed = false;
    localise_datasets(&doc, mapping_get(&doc, root, "datasets"), stem, &files, paths_changed);
    localise_datasets(&doc, mapping_get(&doc, root, "test_datasets"), stem, &files, paths_changed);
    localise_datasets(&doc, mapping_get(&doc, root, "pretraining_dataset"), stem, &files, paths_changed);
    FILE *out = fopen(out_path, "wb");
    TT_CHECK(out != NULL, "write %s", out_path);
    yaml_emitter_t emitter;
    yaml_emitter_initialize(&emitter);
    yaml_emitter_set_output_file(&emitter, out);
    yaml_emitter_set_width(&emitter, -1);
    const bool dumped =
        yaml_emitter_open(&emitter) && yaml_emitter_dump(&emitter, &doc) && yaml_emitter_close(&emitter);
    yaml_emitter_delete(&emitter); /* yaml_emitter_dump deleted the document */
    fclose(out);
    return dumped;
}

/* The first line of a file that says what went wrong, for the report. */
static void first_error(const char *log, char *out, size_t size) {
    FILE *f = fopen(log, "r");
    snprintf(out, size, "(no error line)");
    if (!f) return;
    char line[2048];
    while (fgets(line, sizeof line, f)) {
        const char *at = strstr(line, "tiertrain: error: ");
        if (!at) continue;
        at += strlen("tiertrain: error: ");
        const char *problems = strstr(at, "problems; nothing was run");
        if (problems && fgets(line, sizeof line, f)) at = line + strspn(line, " ");
        line[strcspn(line, "\n")] = 0;
        snprintf(out, size, "%.220s%s", at, problems ? " (and more)" : "");
        break;
    }
    fclose(f);
}

int main(int argc, char **argv) {
    source_dir = argc > 1 ? argv[1] : getenv("TT_SOURCE_DIR");
    tiertrain = getenv("TT_BINARY");
    if (!source_dir || !tiertrain) {
        printf("axolotl_examples: TT_BINARY (the tiertrain binary) and the source dir are needed: skipped\n");
        return 77;
    }
    static char absolute_source[4096], absolute_binary[4096];
    if (!realpath(source_dir, absolute_source) || !realpath(tiertrain, absolute_binary)) {
        printf("axolotl_examples: cannot resolve %s or %s: %s\n", source_dir, tiertrain, strerror(errno));
        return 1;
    }
    source_dir = absolute_source; /* the commands run in the scratch directory */
    tiertrain = absolute_binary;
    tt_test_scratch_open("axolotl-examples");
    char manifest[4400];
    snprintf(manifest, sizeof manifest, "%s/tests/fixtures/axolotl/examples.txt", source_dir);
    FILE *m = fopen(manifest, "r");
    TT_CHECK(m != NULL, "read %s", manifest);
    const char *plan_only_env = getenv("TT_EXAMPLES_PLAN_ONLY");
    const bool plan_only = plan_only_env && *plan_only_env;
    const char *families[] = {"llama", "qwen2", "qwen3", "gemma2", "gemma3", "gemma3_multimodal", "phi3"};
    bool made[sizeof families / sizeof families[0]] = {false};
    char line[1024];
    int total = 0, runs = 0, runs_as_written = 0, index = 0;
    while (fgets(line, sizeof line, m)) {
        char example[512], family[64], expected[32];
        if (line[0] == '#' || sscanf(line, "%511s %63s %31s", example, family, expected) != 3) continue;
        int f = -1;
        for (int i = 0; i < (int)(sizeof families / sizeof families[0]); i++)
            if (strcmp(families[i], family) == 0) f = i;
        TT_CHECK(f >= 0, "examples.txt: unknown family %s", family);
        char base_dir[4400], stem[64], config[4400], log[4400], command[32768], error_line[512];
        snprintf(base_dir, sizeof base_dir, "%s/base_%s", tt_test_scratch_dir, family);
        if (!made[f]) {
            make_base_model(family, base_dir);
            made[f] = true;
        }
        snprintf(stem, sizeof stem, "example%02d", index++);
        snprintf(config, sizeof config, "%s/%s.yml", tt_test_scratch_dir, stem);
        char path[4400];
        snprintf(path, sizeof path, "%s/tests/fixtures/axolotl/examples/%s", source_dir, example);
        bool paths_changed = false;
        TT_EXPECT(localise(path, base_dir, stem, config, &paths_changed), "%s: read and made local", example);
        /* preprocess, then one training step (the harness's max_steps=1; the config is as written); or, in the
         * sanitizer build (TT_EXAMPLES_PLAN_ONLY), the plan alone */
        snprintf(log, sizeof log, "%s/%s.log", tt_test_scratch_dir, stem);
        if (plan_only)
            snprintf(command, sizeof command, "cd '%s' && HF_HUB_CACHE=hf_cache '%s' plan '%s' > '%s' 2>&1",
                     tt_test_scratch_dir, tiertrain, config, log);
        else
            snprintf(command, sizeof command,
                     "cd '%s' && export HF_HUB_CACHE=hf_cache && '%s' preprocess '%s' > '%s' 2>&1 && '%s' train '%s' "
                     "max_steps=1 >> '%s' 2>&1",
                     tt_test_scratch_dir, tiertrain, config, log, tiertrain, config, log);
        const int status = shell(command);
        first_error(log, error_line, sizeof error_line);
        const bool ran = status == 0;
        total++;
        runs += ran;
        runs_as_written += ran && !paths_changed;
        printf("%-52s %-8s %s\n", example, ran ? "runs" : "refused", ran ? "" : error_line);
        TT_EXPECT(status == 0 || status == 1, "%s: ends with a clean error, not a crash (exit %d; %s)", example, status,
                  log);
        if (strcmp(expected, "runs") == 0) TT_EXPECT(ran, "%s runs unchanged (%s: %s)", example, log, error_line);
        else if (!plan_only) /* (a refusal may come after the plan: preprocessing's data checks) */
            TT_EXPECT(!ran, "%s is refused as examples.txt says (it ran: update examples.txt)", example);
    }
    fclose(m);
    printf("axolotl_examples: %d of %d example configs %s unchanged (%d of them with every path as axolotl wrote it: "
           "only output_dir changed)\n",
           runs, total, plan_only ? "plan" : "run", runs_as_written);
    tt_test_scratch_close();
    return tt_test_summary("axolotl_examples");
}
