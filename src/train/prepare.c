/* Prepared datasets (prepare.h): hash, reuse, or read -> tokenize on threads -> drop/truncate ->
 * order -> write. */
#include "train/prepare.h"

#include <errno.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/check.h"
#include "core/hf_cache.h"
#include "core/input_file.h"
#include "core/rng.h"
#include "data/chat_template.h"
#include "data/dataset_files.h"
#include "data/sft_examples.h"
#include "config/split_slice.h"
#include "data/tokenize_files.h"
#include "data/tokenizer.h"
#include "train/checkpoint.h"
#include "train/data.h"

/* Bumped when the preparation itself changes, so older prepared files are not reused. */
#define TT_PREPARE_RECIPE "tiertrain-prepared-1"
/* Records tokenized together: each chunk is read (one thread: errors come in file order), then
 * tokenized in parallel, then appended in order. Bounds the memory of texts in flight. */
#define TT_PREPARE_CHUNK 1024
#define TT_PREPARE_CHUNK_BYTES ((size_t)256 << 20) /* and at most about this much of their JSON text */

bool tt_run_has_json_datasets(const tt_run_config *run) {
    for (int i = 0; i < run->dataset_count; i++)
        if (run->dataset_specs[i].type != TT_DATASET_TOKENS) return true;
    return false;
}

/* ---- the hash: two 64-bit FNV-1a streams with different bases (128 bits; it names a cache file,
 * so it needs to tell inputs apart, not to resist an adversary) ---- */

typedef struct hasher {
    uint64_t a, b;
} hasher;

static void hash_bytes(hasher *h, const void *data, size_t n) {
    const unsigned char *p = data;
    uint64_t a = h->a, b = h->b;
    for (size_t i = 0; i < n; i++) {
        a = (a ^ p[i]) * 0x100000001b3ull;
        b = (b ^ p[i]) * 0x100000001b3ull;
    }
    h->a = a;
    h->b = b;
}

/* A string with its length first, so "ab"+"c" and "a"+"bc" differ; NULL differs from "". */
static void hash_string(hasher *h, const char *s) {
    uint64_t n = s ? (uint64_t)strlen(s) : UINT64_MAX;
    hash_bytes(h, &n, sizeof n);
    if (s) hash_bytes(h, s, (size_t)n);
}

static void hash_int(hasher *h, int64_t v) { hash_bytes(h, &v, sizeof v); }

/* A file's contents (and its length); a missing optional file hashes as absent. */
static void hash_file(hasher *h, const char *path, bool optional) {
    FILE *f = tt_fopen_regular_file(path, "a dataset or tokenizer file");
    if (!f) {
        if (optional && errno == ENOENT) {
            hash_string(h, NULL);
            return;
        }
        tt_die("cannot open %s: %s; check the datasets entry or tokenizer_config", path, strerror(errno));
    }
    unsigned char *buf = tt_xmalloc(1 << 20, "a read buffer");
    uint64_t total = 0;
    size_t got;
    while ((got = fread(buf, 1, 1 << 20, f)) > 0) {
        hash_bytes(h, buf, got);
        total += got;
    }
    if (ferror(f)) tt_die("cannot read %s: %s", path, strerror(errno));
    fclose(f);
    free(buf);
    hash_bytes(h, &total, sizeof total);
}

/* ---- the tokenizer ---- */

/* tokenizer_config or base_model (axolotl's default: the model's own tokenizer). */
static const char *tokenizer_source(const tt_run_config *run) {
    if (run->tokenizer_config) tt_hf_check_path(run->tokenizer_config, TT_HF_MODEL, NULL, "tokenizer_config");
    else if (run->base_model) tt_hf_check_path(run->base_model, TT_HF_MODEL, run->revision_of_model, "base_model");
    if (run->tokenizer_config) return run->tokenizer_config;
    if (run->base_model) return run->base_model;
    tt_die("JSON datasets are tokenized with the model's tokenizer, but this run has no base_model to take it from; "
           "set tokenizer_config to a directory with tokenizer.json (or to a tokenizer.json)");
}

/* tokenizer.json and tokenizer_config.json of a source that is a directory or a tokenizer.json. */
static void tokenizer_files(const char *source, char *json, char *config, size_t size) {
    struct stat st;
    if (stat(source, &st) != 0)
        tt_die("tokenizer_config '%s' does not exist; set it to a directory with tokenizer.json or to a "
               "tokenizer.json",
               source);
    if (S_ISDIR(st.st_mode)) {
        snprintf(json, size, "%s/tokenizer.json", source);
        snprintf(config, size, "%s/tokenizer_config.json", source);
        return;
    }
    snprintf(json, size, "%s", source);
    const char *slash = strrchr(source, '/');
    if (slash) snprintf(config, size, "%.*s/tokenizer_config.json", (int)(slash - source), source);
    else snprintf(config, size, "tokenizer_config.json");
}

/* The directory of the tokenizer's files (the chat template is looked up there). */
static void tokenizer_dir(const char *source, char *dir, size_t size) {
    char json[4200], config[4200];
    tokenizer_files(source, json, config, sizeof json);
    const char *slash = strrchr(config, '/');
    if (slash) snprintf(dir, size, "%.*s", (int)(slash - config), config);
    else snprintf(dir, size, ".");
}

bool tt_run_tokenizer_dir(const tt_run_config *run, char *dir, size_t size) {
    const char *source = run->tokenizer_config ? run->tokenizer_config : run->base_model;
    if (!source) return false;
    tokenizer_dir(source, dir, size);
    return true;
}

static tt_train_on_eos chat_train_on_eos(const tt_run_config *run, const tt_dataset_spec *d) {
    return d->train_on_eos != TT_EOS_INHERIT ? d->train_on_eos : run->train_on_eos;
}

/* axolotl: train_on_eot, else the dataset's train_on_eos */
static tt_train_on_eos chat_train_on_eot(const tt_run_config *run, const tt_dataset_spec *d) {
    return d->train_on_eot != TT_EOS_INHERIT ? d->train_on_eot : chat_train_on_eos(run, d);
}

/* axolotl's find_turn skips a first system turn when the tokenizer's name_or_path names mistral */
static bool mistral_tokenizer(const char *source) { return strcasestr(source, "mistral") != NULL; }

static void hash_strings(hasher *h, char *const *list, int count) {
    hash_int(h, count);
    for (int i = 0; i < count; i++) hash_string(h, list[i]);
}

/* Everything of a chat_template entry that shapes its tokens and masks: the template's text
 * (wherever it came from), chat_template_kwargs, the mappings, the role aliases, roles_to_train,
 * train_on_eos, train_on_eot and eot_tokens, drop_system_message, the message training fields,
 * split_thinking, tool_call_arguments, and the tokenizer-name rule. */
static void hash_chat_entry(hasher *h, const tt_run_config *run, int entry, const char *source) {
    const tt_dataset_spec *d = &run->dataset_specs[entry];
    char dir[4200], origin[4400];
    tokenizer_dir(source, dir, sizeof dir);
    char *text = tt_chat_template_text(run, entry, dir, origin, sizeof origin);
    hash_string(h, text);
    free(text);
    hash_string(h, d->field_messages);
    hash_strings(h, d->property_names, d->property_mapping_count);
    hash_strings(h, d->property_fields, d->property_mapping_count);
    hash_int(h, d->roles_given);
    hash_strings(h, d->role_alias_from, d->role_alias_count);
    hash_strings(h, d->role_alias_to, d->role_alias_count);
    hash_strings(h, d->roles_to_train, d->roles_to_train_count);
    hash_int(h, (int)chat_train_on_eos(run, d));
    hash_int(h, d->drop_system_message);
    hash_int(h, mistral_tokenizer(source));
    hash_string(h, run->chat_template_kwargs);
    hash_int(h, (int)chat_train_on_eot(run, d));
    hash_int(h, run->eot_tokens != NULL);
    hash_strings(h, run->eot_tokens, run->eot_token_count);
    hash_string(h, d->message_field_training);
    hash_string(h, d->message_field_training_detail);
    hash_int(h, d->split_thinking);
    if (d->tool_call_arguments_as_given) hash_string(h, "tool_call_arguments: as_given"); /* (earlier hashes kept) */
}

void tt_prepared_hash(const tt_run_config *run, char hex[33]) {
    hasher h = {0xcbf29ce484222325ull, 0x6c62272e07bb0142ull};
    hash_string(&h, TT_PREPARE_RECIPE);
    char json[4200], config[4200];
    tokenizer_files(tokenizer_source(run), json, config, sizeof json);
    hash_file(&h, json, false);
    hash_file(&h, config, true);
    hash_int(&h, run->dataset_count);
    for (int i = 0; i < run->dataset_count; i++) {
        const tt_dataset_spec *d = &run->dataset_specs[i];
        hash_string(&h, tt_dataset_type_name(d->type));
        hash_string(&h, d->field);
        hash_string(&h, d->field_instruction);
        hash_string(&h, d->field_input);
        hash_string(&h, d->field_output);
        if (d->user_defined) { /* the prompt's formats and system text */
            hash_string(&h, d->format);
            hash_string(&h, d->no_input_format);
            hash_string(&h, d->system_format);
            hash_string(&h, d->system_prompt);
            hash_string(&h, d->field_system);
        }
        hash_string(&h, d->split);
        hash_string(&h, d->config_name);
        if (d->type == TT_DATASET_CHAT_TEMPLATE) hash_chat_entry(&h, run, i, tokenizer_source(run));
        tt_dataset_files files;
        tt_dataset_files_find(run->datasets[i], d->config_name, &files);
        hash_int(&h, files.count);
        for (int f = 0; f < files.count; f++) hash_file(&h, files.paths[f], false);
        tt_dataset_files_free(&files);
    }
    hash_string(&h, run->special_bos);
    hash_string(&h, run->special_eos);
    hash_string(&h, run->special_pad);
    hash_string(&h, run->special_unk);
    hash_int(&h, run->train_on_inputs);
    hash_int(&h, run->sequence_len);
    hash_int(&h, (int)run->excess_length_strategy);
    hash_int(&h, run->shuffle_merged_datasets);
    hash_int(&h, run->shuffle_merged_datasets ? run->seed : 0);
    if (run->dataset_exact_deduplication) hash_string(&h, "dataset_exact_deduplication"); /* (earlier hashes kept) */
    snprintf(hex, 33, "%016llx%016llx", (unsigned long long)h.a, (unsigned long long)h.b);
}

/* special_tokens' name for a role, else tokenizer_config.json's; its id, or -1 with neither. */
static int32_t special_id(const tt_tokenizer *tok, const char *source, const char *override, const char *key) {
    char *name = override ? tt_xstrdup(override) : tt_tokenizer_config_token(source, key);
    if (!name) return -1;
    int32_t id = tt_tokenizer_token_to_id(tok, name);
    if (id < 0)
        tt_die("%s '%s' (%s) is not a token of the tokenizer %s; set special_tokens: {%s: ...} to one of its tokens",
               key, name, override ? "special_tokens" : "tokenizer_config.json", source, key);
    free(name);
    return id;
}

/* special_tokens' unk_token: axolotl's Llama 2 and Mistral configs restate the tokenizer's own; another would add or
 * rename a token, which tiertrain does not do to a tokenizer. */
static void check_unk_token(const tt_run_config *run, const char *source) {
    if (!run->special_unk) return;
    char *own = tt_tokenizer_config_token(source, "unk_token");
    if (!own || strcmp(own, run->special_unk) != 0)
        tt_die("special_tokens: unk_token '%s' is not the tokenizer's own unknown token (%s%s%s in %s); tiertrain "
               "does not add or rename tokens: remove unk_token or set it to the tokenizer's",
               run->special_unk, own ? "'" : "", own ? own : "none", own ? "'" : "", source);
    free(own);
}

/* ---- building the documents ---- */

typedef struct doc_builder {
    uint32_t *tokens;
    uint8_t *labels;
    uint64_t *starts; /* [documents + 1] */
    uint64_t count, capacity, documents, doc_capacity;
    int64_t dropped_long, truncated, dropped_untrained;
} doc_builder;

static void add_document(doc_builder *b, const int32_t *ids, const uint8_t *labels, int64_t n, int64_t seq_len,
                         bool truncate) {
    if (n > seq_len) {
        if (!truncate) {
            b->dropped_long++;
            return;
        }
        n = seq_len;
        b->truncated++;
    }
    /* the first token is never a target (nothing predicts it); a document with no trained target
     * would add only padding to a batch */
    int64_t trained = 0;
    for (int64_t i = 1; i < n; i++) trained += labels[i];
    if (trained == 0) {
        b->dropped_untrained++;
        return;
    }
    if (b->count + (uint64_t)n > b->capacity) {
        b->capacity = b->capacity ? 2 * b->capacity : 1 << 16;
        while (b->capacity < b->count + (uint64_t)n) b->capacity *= 2;
        b->tokens = tt_xrealloc(b->tokens, tt_mul_size((size_t)b->capacity, sizeof(uint32_t), "tokens"), "tokens");
        b->labels = tt_xrealloc(b->labels, (size_t)b->capacity, "labels");
    }
    if (b->documents + 2 > b->doc_capacity) {
        b->doc_capacity = b->doc_capacity ? 2 * b->doc_capacity : 1024;
        b->starts =
            tt_xrealloc(b->starts, tt_mul_size((size_t)b->doc_capacity, sizeof(uint64_t), "documents"), "documents");
    }
    if (b->documents == 0) b->starts[0] = 0;
    for (int64_t i = 0; i < n; i++) {
        b->tokens[b->count + (uint64_t)i] = (uint32_t)ids[i];
        b->labels[b->count + (uint64_t)i] = labels[i];
    }
    b->count += (uint64_t)n;
    b->starts[++b->documents] = b->count;
}

/* dataset_exact_deduplication: documents equal to an earlier one, ids and labels, left out (the tokens of the rest
 * moved down in place); a hash table of the documents kept, each match confirmed byte for byte. Returns how many. */
static int64_t drop_duplicates(doc_builder *b) {
    uint64_t slots = 16;
    while (slots < 2 * b->documents) slots *= 2;
    int64_t *table = tt_xmalloc(sizeof(int64_t) * (size_t)slots, "the deduplication table"); /* kept doc, or -1 */
    uint64_t *hashes = tt_xmalloc(sizeof(uint64_t) * (size_t)(b->documents ? b->documents : 1), "document hashes");
    for (uint64_t s = 0; s < slots; s++) table[s] = -1;
    uint64_t kept = 0, write = 0;
    for (uint64_t d = 0; d < b->documents; d++) {
        const uint64_t start = b->starts[d], n = b->starts[d + 1] - start;
        uint64_t h = 0xcbf29ce484222325ull ^ n; /* FNV-1a over the ids and labels */
        for (uint64_t i = start; i < start + n; i++) {
            h = (h ^ b->tokens[i]) * 0x100000001b3ull;
            h = (h ^ b->labels[i]) * 0x100000001b3ull;
        }
        uint64_t s = (h ^ (h >> 32)) & (slots - 1); /* (FNV's last multiply leaves the low bits to the low bits) */
        bool duplicate = false;
        for (; table[s] >= 0; s = (s + 1) & (slots - 1)) {
            const uint64_t k = (uint64_t)table[s], kn = b->starts[k + 1] - b->starts[k];
            if (hashes[k] == h && kn == n &&
                memcmp(b->tokens + b->starts[k], b->tokens + start, n * sizeof(uint32_t)) == 0 &&
                memcmp(b->labels + b->starts[k], b->labels + start, n) == 0) {
                duplicate = true;
                break;
            }
        }
        if (duplicate) continue;
        /* moved down over documents already read (write <= start); starts[kept] and starts[kept + 1] are slots
         * already read, or (nothing dropped yet) written with the value they hold */
        memmove(b->tokens + write, b->tokens + start, n * sizeof(uint32_t));
        memmove(b->labels + write, b->labels + start, n);
        b->starts[kept] = write;
        write += n;
        hashes[kept] = h;
        table[s] = (int64_t)kept++;
        b->starts[kept] = write;
    }
    const int64_t dropped = (int64_t)(b->documents - kept);
    b->starts[kept] = write;
    b->documents = kept;
    b->count = write;
    free(hashes);
    free(table);
    return dropped;
}

/* The documents' seeded order (shuffle_merged_datasets): the file's document i is document order[i]. */
static int64_t *shuffled_order(const doc_builder *b, uint64_t seed) {
    int64_t n = (int64_t)b->documents;
    int64_t *order = tt_xmalloc(sizeof(int64_t) * (size_t)(n ? n : 1), "document order");
    for (int64_t i = 0; i < n; i++) order[i] = i;
    tt_rng rng;
    tt_rng_seed(&rng, seed ^ 0xda7a5e7da7a5e7ull);
    tt_rng_shuffle(&rng, order, n);
    return order;
}

/* axolotl's completion strategy tokenizes up to 64 x sequence_len tokens of a text and splits them
 * into pieces of sequence_len (prompt_strategies/completion.py), so long texts train in full
 * instead of being dropped; each piece is a document here. */
#define TT_COMPLETION_MAX_PIECES 64

static void add_completion(doc_builder *b, const int32_t *ids, const uint8_t *labels, int64_t n, int64_t seq_len) {
    if (n > TT_COMPLETION_MAX_PIECES * seq_len) {
        n = TT_COMPLETION_MAX_PIECES * seq_len;
        b->truncated++;
    }
    for (int64_t at = 0; at < n; at += seq_len)
        add_document(b, ids + at, labels + at, n - at < seq_len ? n - at : seq_len, seq_len, false);
}

/* Reads one dataset entry's files (dataset_files.h) chunk by chunk and adds its documents to b; chat (NULL unless the
 * entry is a chat_template one) renders its conversations. */
static void prepare_file(const tt_run_config *run, int entry, const tt_tokenizer *tok, const tt_sft_ids *special,
                         const tt_chat_format *chat, doc_builder *b) {
    const char *path = run->datasets[entry];
    const tt_dataset_spec *spec = &run->dataset_specs[entry];
    tt_dataset_files files;
    tt_dataset_files_find(path, spec->config_name, &files);
    if (files.count > 1 || strcmp(files.paths[0], path) != 0) {
        tt_info("preprocess: %s: %d file(s), %s%s", path, files.count, files.paths[0], files.count > 1 ? ", ..." : "");
    }
    /* split: a slice of the entry's records (a first pass counts them) */
    int64_t begin = 0, end = INT64_MAX;
    tt_split_slice slice = {0};
    char why[256];
    if (spec->split) TT_CHECK(tt_split_slice_parse(spec->split, &slice, why, sizeof why), "split %s", spec->split);
    if (!tt_split_slice_is_whole(&slice)) {
        tt_dataset_records *counting = tt_dataset_records_open(&files);
        int64_t records = 0;
        for (json_t *record; (record = tt_dataset_records_next(counting)) != NULL; records++) json_decref(record);
        tt_dataset_records_close(counting);
        tt_split_slice_range(&slice, records, &begin, &end);
        tt_info("preprocess: %s: split %s takes records %lld to %lld of %lld", path, spec->split, (long long)begin,
                (long long)end, (long long)records);
    }
    int64_t record_index = 0;
    bool stopped_early = false; /* at the slice's end: the counting pass read the rest */
    tt_dataset_records *records = tt_dataset_records_open(&files);
    tt_sft_example *examples = chat ? NULL : tt_xcalloc(TT_PREPARE_CHUNK, sizeof(tt_sft_example), "examples");
    tt_chat_example *chats = chat ? tt_xcalloc(TT_PREPARE_CHUNK, sizeof(tt_chat_example), "conversations") : NULL;
    tt_token_ids *ids = tt_xcalloc(TT_PREPARE_CHUNK, sizeof(tt_token_ids), "token ids");
    uint8_t **labels = tt_xcalloc(TT_PREPARE_CHUNK, sizeof(uint8_t *), "labels");
    int64_t *label_capacity = tt_xcalloc(TT_PREPARE_CHUNK, sizeof(int64_t), "labels");
    int64_t read = 0, documents_before = (int64_t)b->documents, turns_not_found = 0;
    const bool truncate = run->excess_length_strategy == TT_EXCESS_TRUNCATE;
    /* a text is tokenized only as far as a document can use it (a longer one is dropped, truncated, or split into
     * at most TT_COMPLETION_MAX_PIECES pieces): one id past that, one more for a BOS a segment strips */
    const int64_t segment_max_ids =
        (spec->type == TT_DATASET_COMPLETION ? TT_COMPLETION_MAX_PIECES : 1) * run->sequence_len + 2;
    for (bool more = true; more;) {
        int n = 0;
        size_t chunk_bytes = 0; /* the chunk's records' JSON text: a few huge records make a chunk */
        while (n < TT_PREPARE_CHUNK && chunk_bytes < TT_PREPARE_CHUNK_BYTES) {
            json_t *record = tt_dataset_records_next(records);
            chunk_bytes += tt_dataset_records_bytes(records);
            if (!record || record_index >= end) {
                if (record) json_decref(record);
                stopped_early = record != NULL;
                more = false;
                break;
            }
            if (record_index++ < begin) {
                json_decref(record);
                continue;
            }
            if (chat) tt_chat_record(chat, record, tt_dataset_records_where(records), &chats[n]);
            else
                tt_sft_record_segments(spec, run->train_on_inputs, record, tt_dataset_records_where(records),
                                       &examples[n]);
            n++;
            json_decref(record);
        }
#pragma omp parallel for schedule(dynamic, 1)
        for (int i = 0; i < n; i++) {
            if (chat)
                tt_chat_tokenize(chat, &chats[i], &ids[i], &labels[i], &label_capacity[i],
                                 truncate || spec->type == TT_DATASET_COMPLETION ? 0 : run->sequence_len);
            else
                tt_sft_tokenize_example(tok, special, &examples[i], segment_max_ids, &ids[i], &labels[i],
                                        &label_capacity[i]);
        }
        for (int i = 0; i < n; i++) {
            if (chat && chats[i].error) tt_die("%s", chats[i].error); /* the first in file order */
            if (spec->type == TT_DATASET_COMPLETION)
                add_completion(b, ids[i].ids, labels[i], ids[i].count, run->sequence_len);
            else add_document(b, ids[i].ids, labels[i], ids[i].count, run->sequence_len, truncate);
            if (chat) {
                turns_not_found += chats[i].turns_not_found;
                tt_chat_example_free(&chats[i]);
            } else {
                tt_sft_example_free(&examples[i]);
            }
        }
        read += n;
        if (more || read >= 10 * TT_PREPARE_CHUNK)
            printf("preprocess: %s: %lld records tokenized\n", path, (long long)read);
    }
    if (stopped_early) tt_dataset_records_discard(records);
    else tt_dataset_records_close(records);
    tt_dataset_files_free(&files);
    if (read == 0 && spec->split && !tt_split_slice_is_whole(&slice))
        tt_die("dataset %s: split %s takes none of its records; widen the slice", path, spec->split);
    if (read == 0) tt_die("dataset %s holds no records; remove it from datasets or add data", path);
    tt_info("preprocess: %s (%s): %lld records, %lld documents kept%s", path, tt_dataset_type_name(spec->type),
            (long long)read, (long long)b->documents - (long long)documents_before,
            spec->type == TT_DATASET_COMPLETION ? " (long texts split into pieces of sequence_len)" : "");
    if (turns_not_found)
        tt_warn("preprocess: %s: %lld trained turn(s) could not be told apart from the template around them (an empty "
                "content, or a template that prints the turn the same whatever it holds); they are not trained, as "
                "axolotl leaves them",
                path, (long long)turns_not_found);
    for (int i = 0; i < TT_PREPARE_CHUNK; i++) {
        tt_token_ids_free(&ids[i]);
        free(labels[i]);
    }
    free(examples);
    free(chats);
    free(ids);
    free(labels);
    free(label_capacity);
}

/* The format of a chat_template entry: its template and what the template sees. */
static tt_chat_format *open_chat_format(const tt_run_config *run, int entry, const tt_tokenizer *tok,
                                        const char *source, int32_t eos_id) {
    char dir[4200], origin[4400];
    tokenizer_dir(source, dir, sizeof dir);
    char *text = tt_chat_template_text(run, entry, dir, origin, sizeof origin);
    /* the special tokens' texts, special_tokens first, as the tokenizer's special_tokens_map gives them */
    char *bos = run->special_bos ? tt_xstrdup(run->special_bos) : tt_tokenizer_config_token(source, "bos_token");
    char *eos = run->special_eos ? tt_xstrdup(run->special_eos) : tt_tokenizer_config_token(source, "eos_token");
    char *pad = run->special_pad ? tt_xstrdup(run->special_pad) : tt_tokenizer_config_token(source, "pad_token");
    char *unk = tt_tokenizer_config_token(source, "unk_token");
    tt_chat_settings settings = {
        .template_text = text,
        .template_origin = origin,
        .spec = &run->dataset_specs[entry],
        .train_on_eos = chat_train_on_eos(run, &run->dataset_specs[entry]),
        .train_on_eot = chat_train_on_eot(run, &run->dataset_specs[entry]),
        .eot_tokens = run->eot_tokens,
        .eot_token_count = run->eot_token_count,
        .template_kwargs = run->chat_template_kwargs,
        .train_on_inputs = run->train_on_inputs,
        .bos_token = bos,
        .eos_token = eos,
        .unk_token = unk,
        .pad_token = pad,
        .eos_id = eos_id,
        .mistral_tokenizer = mistral_tokenizer(source),
    };
    tt_chat_format *f = tt_chat_format_open(&settings, tok);
    tt_info("preprocess: %s renders with %s%s", run->datasets[entry], origin,
            tt_chat_format_has_generation(f) ? " (assistant turns: its {% generation %} blocks)" : "");
    free(text);
    free(bos);
    free(eos);
    free(pad);
    free(unk);
    return f;
}

tt_chat_format *tt_run_chat_format(const tt_run_config *run, int entry, const tt_tokenizer *tok) {
    const char *source = tokenizer_source(run);
    return open_chat_format(run, entry, tok, source, special_id(tok, source, run->special_eos, "eos_token"));
}

int32_t tt_run_eos_id(const tt_run_config *run, const tt_tokenizer *tok) {
    const char *source = tokenizer_source(run);
    return special_id(tok, source, run->special_eos, "eos_token");
}

static void build_prepared(const tt_run_config *run, const char *out_path) {
    const char *source = tokenizer_source(run);
    tt_tokenizer *tok = tt_tokenizer_load(source);
    tt_sft_ids special = {
        .bos = special_id(tok, source, run->special_bos, "bos_token"),
        .eos = special_id(tok, source, run->special_eos, "eos_token"),
    };
    int32_t pad = special_id(tok, source, run->special_pad, "pad_token");
    check_unk_token(run, source);
    bool needs_eos = false; /* chat templates write their own end-of-turn tokens */
    for (int i = 0; i < run->dataset_count; i++)
        needs_eos |= run->dataset_specs[i].type != TT_DATASET_INPUT_OUTPUT &&
                     run->dataset_specs[i].type != TT_DATASET_CHAT_TEMPLATE;
    if (needs_eos && special.eos < 0)
        tt_die(
            "the tokenizer %s has no eos_token in tokenizer_config.json, and completion and alpaca datasets end each "
            "document with it; set special_tokens: {eos_token: ...}",
            source);
    doc_builder b = {0};
    for (int i = 0; i < run->dataset_count; i++) {
        tt_chat_format *chat = run->dataset_specs[i].type == TT_DATASET_CHAT_TEMPLATE
                                   ? open_chat_format(run, i, tok, source, special.eos)
                                   : NULL;
        prepare_file(run, i, tok, &special, chat, &b);
        tt_chat_format_free(chat);
    }
    if (b.dropped_long)
        tt_warn("preprocess: dropped %lld document(s) longer than sequence_len %lld (excess_length_strategy: drop; "
                "truncate keeps their first sequence_len tokens)",
                (long long)b.dropped_long, (long long)run->sequence_len);
    if (b.truncated)
        tt_info("preprocess: truncated %lld document(s) to sequence_len %lld (completion texts: to %d x sequence_len, "
                "then split)",
                (long long)b.truncated, (long long)run->sequence_len, TT_COMPLETION_MAX_PIECES);
    if (b.dropped_untrained)
        tt_info("preprocess: dropped %lld document(s) without a trained token (all masked)",
                (long long)b.dropped_untrained);
    if (b.documents == 0)
        tt_die(
            "preprocess: no document is left to train on (%lld longer than sequence_len %lld, %lld without a trained "
            "token); raise sequence_len or set excess_length_strategy: truncate",
            (long long)b.dropped_long, (long long)run->sequence_len, (long long)b.dropped_untrained);
    if (run->dataset_exact_deduplication) {
        const int64_t dropped = drop_duplicates(&b);
        tt_info("preprocess: dataset_exact_deduplication left out %lld document(s) equal to an earlier one, %llu kept",
                (long long)dropped, (unsigned long long)b.documents);
    }
    int64_t *order = run->shuffle_merged_datasets ? shuffled_order(&b, (uint64_t)run->seed) : NULL;
    int64_t trained = 0;
    for (uint64_t i = 0; i < b.count; i++) trained += b.labels[i];
    tt_token_documents docs = {
        .tokens = b.tokens,
        .labels = b.labels,
        .starts = b.starts,
        .token_count = b.count,
        .document_count = b.documents,
        .vocab_size = (uint32_t)tt_tokenizer_vocab_size(tok),
        .eos_id = special.eos >= 0 ? (uint32_t)special.eos : TT_TOKEN_NO_EOS,
        .pad_id = pad >= 0 ? (uint32_t)pad : TT_TOKEN_NO_PAD,
        .order = order,
    };
    tt_token_file_write_documents(out_path, &docs);
    tt_info("preprocess: wrote %s: %llu documents, %llu tokens, %lld of them trained (%d thread(s))", out_path,
            (unsigned long long)b.documents, (unsigned long long)b.count, (long long)trained, omp_get_max_threads());
    free(order);
    free(b.tokens);
    free(b.labels);
    free(b.starts);
    tt_tokenizer_free(tok);
}

char *tt_prepare_datasets(const tt_run_config *run, bool *reused) {
    TT_CHECK(tt_run_has_json_datasets(run), "no JSON datasets to prepare");
    char hex[33];
    tt_prepared_hash(run, hex);
    const char *dir = run->dataset_prepared_path ? run->dataset_prepared_path : "last_run_prepared";
    size_t n = strlen(dir) + 40;
    char *path = tt_xmalloc(n, "a path");
    snprintf(path, n, "%s/%s.tok", dir, hex);
    struct stat st;
    if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
        if (reused) *reused = true;
        return path;
    }
    if (reused) *reused = false;
    tt_make_directories(dir);
    build_prepared(run, path);
    return path;
}
