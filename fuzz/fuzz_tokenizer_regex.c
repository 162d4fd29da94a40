/* Fuzzes the tokenizer's regexes (data/regex.c: the Oniguruma -> PCRE2 translation, compiling with or without JIT,
 * matching within the work budget, every PCRE2 error) through the components that run them: a Split pre-tokenizer
 * (Regex or String pattern, any behavior, inverted or not) or a Replace normalizer (Regex or String), the latter also
 * on a normalized added token at load time. The harness writes the tokenizer.json around the pattern (a small
 * vocabulary with byte fallback, so every text has ids), loads it, encodes the text and decodes the ids.
 *
 * Input: one byte of choices (bits 0-1: Split Regex, Split String, Replace Regex, Replace String; bits 2-4: the Split
 * behavior; bit 5: invert; bit 6: a normalized added token), then the pattern, then (after a NUL) the text; without a
 * NUL the text is a fixed sample. fuzz/tokenizer_regex.dict holds PCRE2's syntax for libFuzzer's -dict. */
#include "fuzz_common.h"

#include "data/tokenizer.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    fuzz_setup();
    return 0;
}

/* A run of a's for nested repeats, white space of several kinds, ▁, letters, digits, punctuation, CJK */
static const char sample[] = "aaaaaaaaaaaaaaaaaaaaaaaaab Hello,  world!\n\n\t It's 2026: caf\xc3\xa9 \xe2\x96\x81x "
                             "\xe6\x97\xa5\xe6\x9c\xac\xe3\x80\x80"
                             "end\r\n";

static const char *behaviors[5] = {"Isolated", "Removed", "MergedWithPrevious", "MergedWithNext", "Contiguous"};

/* The pattern as a JSON string (quoted, escaped); false if it is not UTF-8, which no tokenizer.json can hold. */
static bool pattern_as_json(const char *pattern, size_t len, char *out, size_t cap) {
    json_t *string = json_stringn(pattern, len);
    if (!string) return false;
    size_t n = json_dumpb(string, out, cap - 1, JSON_ENCODE_ANY);
    json_decref(string);
    if (n == 0 || n >= cap) return false;
    out[n] = 0;
    return true;
}

static char pattern_json[1 << 16];
static char tokenizer_json[1 << 17];
static char vocab_json[1 << 13];

/* a, b, ab, space, ▁, then <0x00> .. <0xFF> (ids 5 .. 260) for byte fallback */
static void build_vocab(void) {
    size_t n =
        (size_t)snprintf(vocab_json, sizeof vocab_json, "\"a\": 0, \"b\": 1, \"ab\": 2, \" \": 3, \"\xe2\x96\x81\": 4");
    for (int b = 0; b < 256; b++)
        n += (size_t)snprintf(vocab_json + n, sizeof vocab_json - n, ", \"<0x%02X>\": %d", b, 5 + b);
}

static tt_tokenizer *tok;
static tt_token_ids ids;
static char *text;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    if (!vocab_json[0]) build_vocab();
    const uint8_t choices = data[0];
    const char *pattern = (const char *)data + 1;
    const uint8_t *nul = memchr(data + 1, 0, size - 1);
    const size_t pattern_len = nul ? (size_t)(nul - (data + 1)) : size - 1;
    const char *subject = nul ? (const char *)nul + 1 : sample;
    const size_t subject_len = nul ? size - (size_t)(nul + 1 - data) : sizeof sample - 1;
    if (!pattern_as_json(pattern, pattern_len, pattern_json, sizeof pattern_json)) {
        fuzz_json_release_all();
        return 0;
    }
    const bool split = (choices & 3) < 2, regex = (choices & 3) % 2 == 0;
    char component[1 << 16 | 256];
    if (split)
        snprintf(component, sizeof component,
                 "\"normalizer\": null, \"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"%s\": %s}, "
                 "\"behavior\": \"%s\", \"invert\": %s}",
                 regex ? "Regex" : "String", pattern_json, behaviors[(choices >> 2 & 7) % 5],
                 choices & 32 ? "true" : "false");
    else
        snprintf(component, sizeof component,
                 "\"normalizer\": {\"type\": \"Replace\", \"pattern\": {\"%s\": %s}, \"content\": \"\xe2\x96\x81\"}, "
                 "\"pre_tokenizer\": null",
                 regex ? "Regex" : "String", pattern_json);
    const size_t n = (size_t)snprintf(
        tokenizer_json, sizeof tokenizer_json,
        "{\"model\": {\"type\": \"BPE\", \"byte_fallback\": true, \"vocab\": {%s}, \"merges\": [\"a b\"]}, "
        "\"added_tokens\": [%s], %s}",
        vocab_json,
        choices & 64
            ? "{\"id\": 261, \"content\": \" aaaaaaaaaaaaaaaaaaaab \", \"normalized\": true, \"special\": false}"
            : "",
        component);
    if (n >= sizeof tokenizer_json) {
        fuzz_json_release_all();
        return 0;
    }
    const char *path = fuzz_input_path((const uint8_t *)tokenizer_json, n);
    tok = NULL;
    text = NULL;
    memset(&ids, 0, sizeof ids);
    FUZZ_TRY {
        tok = tt_tokenizer_load(path);
        tt_tokenizer_encode(tok, subject, subject_len, true, &ids);
        text = tt_tokenizer_decode(tok, ids.ids, ids.count, false, NULL);
    }
    FUZZ_CATCH {
        /* a load that died leaves its half-built tokenizer (every part it holds is freeable) */
        tt_tokenizer_free(tt_tokenizer_being_loaded);
        tt_tokenizer_being_loaded = NULL;
    }
    free(text);
    tt_token_ids_free(&ids);
    if (tok) tt_tokenizer_free(tok);
    fuzz_json_release_all();
    return 0;
}
