/* `tiertrain tokenize --tokenizer`: text files -> a token file with a model's own tokenizer, as
 * tools/tokenize_hf.py writes it (one document per file, no special tokens, the eos id after
 * each document, blank documents skipped), or -> ids as text for inspection and tests. */
#include "data/tokenize_files.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/check.h"
#include "core/input_file.h"
#include "data/tokenizer.h"
#include "data/token_file.h"

static char *read_file(const char *path, size_t *len) {
    FILE *f = tt_fopen_regular_file(path, "a text file to tokenize");
    if (!f) tt_die("tokenize: cannot read %s: %s", path, strerror(errno));
    char *buf = NULL;
    size_t used = 0, cap = 0;
    for (;;) {
        if (used + 65536 > cap) {
            cap = cap ? 2 * cap : 1 << 20;
            buf = tt_xrealloc(buf, cap, "input text");
        }
        size_t got = fread(buf + used, 1, cap - used, f);
        used += got;
        if (got == 0) break;
    }
    bool failed = ferror(f) != 0;
    fclose(f);
    if (failed) tt_die("tokenize: cannot read %s", path);
    *len = used;
    return buf;
}

char *tt_tokenizer_config_token(const char *tokenizer_path, const char *key) {
    struct stat st;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", tokenizer_path);
    if (stat(tokenizer_path, &st) == 0 && !S_ISDIR(st.st_mode)) {
        char *slash = strrchr(dir, '/');
        if (slash) *slash = 0;
        else snprintf(dir, sizeof dir, ".");
    }
    char config[4200];
    snprintf(config, sizeof config, "%s/tokenizer_config.json", dir);
    if (stat(config, &st) != 0) return NULL; /* no tokenizer_config.json: no special tokens named */
    /* Hugging Face writes model_max_length 1e30 as an integer, beyond 64 bits: read numbers as reals */
    json_error_t error;
    json_t *root =
        tt_json_load_regular_file(config, JSON_DECODE_INT_AS_REAL, (size_t)64 << 20, "a tokenizer_config.json", &error);
    if (!root)
        tt_die("%s:%d: not valid JSON (%s); fix the file, or name the special tokens with special_tokens", config,
               error.line, error.text);
    json_t *eos = json_object_get(root, key);
    if (json_is_object(eos)) eos = json_object_get(eos, "content");
    char *name = json_is_string(eos) ? tt_xstrdup(json_string_value(eos)) : NULL;
    json_decref(root);
    return name;
}

static bool is_blank(const char *s, size_t len) {
    for (size_t i = 0; i < len; i++)
        if (!(s[i] == ' ' || (s[i] >= '\t' && s[i] <= '\r'))) return false;
    return true;
}

void tt_tokenize_files(const tt_tokenize_options *opt, char *const *inputs, int count) {
    if (count <= 0) tt_die("tokenize: no input files");
    tt_tokenizer *tok = tt_tokenizer_load(opt->tokenizer_path);
    int64_t vocab = tt_tokenizer_vocab_size(tok);
    int32_t eos = -1;
    if (!opt->ids_text && !opt->no_eos) {
        char *name =
            opt->eos_token ? tt_xstrdup(opt->eos_token) : tt_tokenizer_config_token(opt->tokenizer_path, "eos_token");
        if (!name)
            tt_die("tokenize: %s has no tokenizer_config.json naming an eos_token; give --eos TOKEN (e.g. --eos "
                   "'<|endoftext|>') or --no-eos",
                   opt->tokenizer_path);
        eos = tt_tokenizer_token_to_id(tok, name);
        if (eos < 0)
            tt_die("tokenize: the eos token '%s' is not in the tokenizer's vocabulary; give --eos TOKEN", name);
        free(name);
    }
    /* documents in parallel (encode is thread-safe), concatenated in input order */
    tt_token_ids *docs = tt_xcalloc((size_t)count, sizeof(tt_token_ids), "documents");
    bool *skipped = tt_xcalloc((size_t)count, sizeof(bool), "documents");
#pragma omp parallel for schedule(dynamic, 1)
    for (int i = 0; i < count; i++) {
        size_t len;
        char *text = read_file(inputs[i], &len);
        if (!opt->ids_text && is_blank(text, len)) {
            skipped[i] = true;
        } else {
            tt_tokenizer_encode(tok, text, len, opt->ids_text, &docs[i]);
        }
        free(text);
    }
    if (opt->ids_text) {
        FILE *f = fopen(opt->output_path, "w");
        if (!f) tt_die("tokenize: cannot write %s: %s", opt->output_path, strerror(errno));
        for (int i = 0; i < count; i++) {
            for (int64_t k = 0; k < docs[i].count; k++) fprintf(f, k ? " %d" : "%d", docs[i].ids[k]);
            fputc('\n', f);
        }
        if (fclose(f) != 0) tt_die("tokenize: cannot write %s", opt->output_path);
    } else {
        uint64_t total = 0;
        int documents = 0;
        for (int i = 0; i < count; i++) total += (uint64_t)docs[i].count + (eos >= 0 && !skipped[i]);
        if (total == 0) tt_die("tokenize: every input is blank; there is no text to tokenize");
        uint32_t *tokens = tt_xmalloc(tt_mul_size(total, sizeof(uint32_t), "tokens"), "tokens");
        uint64_t used = 0;
        for (int i = 0; i < count; i++) {
            if (skipped[i]) {
                tt_warn("tokenize: %s is blank; skipped", inputs[i]);
                continue;
            }
            for (int64_t k = 0; k < docs[i].count; k++) tokens[used++] = (uint32_t)docs[i].ids[k];
            if (eos >= 0) tokens[used++] = (uint32_t)eos;
            documents++;
        }
        tt_token_file_write(opt->output_path, tokens, used, (uint32_t)vocab,
                            eos >= 0 ? (uint32_t)eos : TT_TOKEN_NO_EOS);
        tt_info("wrote %s: %llu tokens from %d documents (vocab %lld, eos %d)", opt->output_path,
                (unsigned long long)used, documents, (long long)vocab, eos);
        free(tokens);
    }
    for (int i = 0; i < count; i++) tt_token_ids_free(&docs[i]);
    free(docs);
    free(skipped);
    tt_tokenizer_free(tok);
}
