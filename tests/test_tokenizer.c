/* The native tokenizer on two hand-written tokenizer.json files whose expected ids are worked
 * out by hand (tests/fixtures/tokenizer/): they document the algorithm. Byte-level BPE: merge
 * order by rank, leftmost first on equal ranks, ignore_merges, NFC, added tokens, invalid UTF-8
 * and offsets. SentencePiece-style BPE: Prepend/Replace normalizers, byte fallback, fuse_unk,
 * added-token lstrip / rstrip / single_word, the template's BOS. Metaspace's prepend_scheme and
 * split. Split and Replace patterns written in the test: \s and \S spelled out, String patterns,
 * (*NO_JIT), every PCRE2 error as an error of the tokenizer, the work budget of a document. Then bad
 * tokenizer.json files, each an error naming the file and the key. The real tokenizers are in
 * test_tokenizer_real.sh. */
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "data/tokenizer.h"
#include "test_util.h"

static const char *source_dir;

static tt_tokenizer *load_fixture(const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/fixtures/tokenizer/%s", source_dir, name);
    return tt_tokenizer_load(path);
}

/* Encodes text[0..len) and compares with the expected ids (-1 ends the list). */
static void expect_ids(const tt_tokenizer *tok, const char *text, size_t len, bool add_special, const char *what, ...) {
    tt_token_ids out = {0};
    tt_tokenizer_encode(tok, text, len, add_special, &out);
    va_list ap;
    va_start(ap, what);
    int32_t expected[64];
    int n = 0;
    for (int id; (id = va_arg(ap, int)) >= 0;) expected[n++] = id;
    va_end(ap);
    bool same = out.count == n;
    for (int i = 0; same && i < n; i++) same = out.ids[i] == expected[i];
    char got[512] = "";
    for (int64_t i = 0; i < out.count && strlen(got) < 480; i++) snprintf(got + strlen(got), 16, " %d", out.ids[i]);
    TT_EXPECT(same, "%s: got [%s ]", what, got);
    tt_token_ids_free(&out);
}
#define IDS(tok, text, special, what, ...) expect_ids(tok, text, sizeof(text) - 1, special, what, __VA_ARGS__, -1)

static void test_byte_level(void) {
    tt_tokenizer *tok = load_fixture("tiny_bytelevel.json");
    /* a b c: (a,b) rank 0 first, then (ab,c) rank 2; (b,c) rank 1 is gone with b */
    IDS(tok, "abc", false, "merge order by rank", 6);
    /* "bc" whole in the vocab; " a" is Ġ a, merged by rank 3 */
    IDS(tok, "bc a", false, "split regex + byte-level space", 5, 7);
    /* a a a: both pairs have rank 4, the leftmost merges first */
    IDS(tok, "aaa", false, "equal ranks: leftmost first", 8, 0);
    /* ignore_merges: "ba" is in the vocabulary, so it is emitted whole with no merge for (b, a) */
    IDS(tok, "ba", false, "ignore_merges", 14);
    /* NFC: e + U+0301 is not what the vocab has; é is C3 A9 = Ã © -> merged */
    IDS(tok, "\xc3\xa9", false, "precomposed e acute", 13);
    IDS(tok, "e\xcc\x81", false, "NFC composes e + combining acute", 13);
    /* the added token is cut out of the raw text before the split regex */
    IDS(tok, "ab<|end|>c", false, "special token inside text", 4, 10, 2);
    IDS(tok, "<|end|>", true, "no template: add_special adds nothing", 10);
    /* a normalized added token is matched in the normalized text, by its normalized content:
     * e + U+0301 + x is listed, the NFC text has \xc3\xa9x, whichever way the input spells it */
    IDS(tok, "a \xc3\xa9x", false, "normalized added token, precomposed input", 0, 3, 15);
    IDS(tok, "a e\xcc\x81x", false, "normalized added token, decomposed input", 0, 3, 15);
    /* a byte whose character is not in the vocabulary is dropped (no unk token) */
    IDS(tok, "a!?", false, "unknown byte dropped", 0, 9);

    /* offsets: into the caller's bytes; \xff is one U+FFFD (3 bytes) read from 1 byte */
    tt_token_ids out = {.with_offsets = true};
    tt_tokenizer_encode(tok,
                        "a\xff"
                        "b<|end|> a",
                        12, false, &out);
    TT_EXPECT(out.count == 4 && out.ids[0] == 0 && out.ids[1] == 1 && out.ids[2] == 10 && out.ids[3] == 7,
              "ids around invalid UTF-8: %lld tokens", (long long)out.count);
    TT_EXPECT(out.count == 4 && out.offsets[0] == 0 && out.offsets[1] == 2 && out.offsets[2] == 3 &&
                  out.offsets[3] == 10,
              "offsets %lld %lld %lld %lld", (long long)out.offsets[0], (long long)out.offsets[1],
              (long long)out.offsets[2], (long long)out.offsets[3]);
    /* a token made of the second byte of a character starts where the character does: U+0169
     * is C5 A9; C5's character is not in the vocabulary, A9's (©) is */
    out.count = 0;
    tt_tokenizer_encode(tok, "a\xc5\xa9", 3, false, &out);
    TT_EXPECT(out.count == 2 && out.ids[1] == 12 && out.offsets[1] == 1, "offset of a token inside a character");
    /* a composed character's tokens start where its first part did */
    out.count = 0;
    tt_tokenizer_encode(tok, "ab e\xcc\x81", 7, false, &out);
    TT_EXPECT(out.count == 3 && out.offsets[2] == 3, "offset of an NFC-composed token");
    tt_token_ids_free(&out);

    TT_EXPECT(tt_tokenizer_token_to_id(tok, "<|end|>") == 10, "added token lookup");
    TT_EXPECT(tt_tokenizer_token_to_id(tok, "Ġa") == 7, "model token lookup");
    TT_EXPECT(tt_tokenizer_token_to_id(tok, "zzz") == -1, "absent token");
    TT_EXPECT(tt_tokenizer_vocab_size(tok) == 16, "vocab size %lld", (long long)tt_tokenizer_vocab_size(tok));
    TT_EXPECT(tt_tokenizer_id_to_token(tok, 10) && strcmp(tt_tokenizer_id_to_token(tok, 10), "<|end|>") == 0,
              "id to token");
    TT_EXPECT(tt_tokenizer_id_to_token(tok, 99) == NULL, "id out of range");
    tt_tokenizer_free(tok);
}

static void test_invalid_utf8(void) {
    /* Python's errors='replace': one U+FFFD per maximal subpart. \xe2\x82 (a cut 3-byte
     * sequence) is one; \xed\xa0\x80 (a surrogate) is three; \xf0\x9f\x98 then 'a' is one. */
    tt_tokenizer *tok = load_fixture("tiny_sentencepiece.json");
    /* the SentencePiece fixture byte-falls back: U+FFFD is EF BF BD, <0xEF> etc. are absent: unk,
     * fused; so count the replacement characters through offsets instead */
    tt_token_ids out = {.with_offsets = true};
    tt_tokenizer_encode(tok, "x\xe2\x82x", 4, false, &out);
    TT_EXPECT(out.count == 4 && out.ids[1] == 10 && out.ids[2] == 0 && out.ids[3] == 10 && out.offsets[3] == 3,
              "cut 3-byte sequence: one replacement");
    tt_token_ids_free(&out);
    tt_tokenizer_free(tok);
}

static void load_scratch(void *name);

/* A Replace normalizer with a Regex pattern: the fixture's space -> \u2581 rule as " +" -> \u2581, so runs of spaces
 * become one \u2581; a pattern that can match the empty string (" *") is refused at load. */
static void test_regex_replace(void) {
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/fixtures/tokenizer/tiny_sentencepiece.json", source_dir);
    FILE *f = fopen(path, "rb");
    TT_EXPECT(f != NULL, "open %s", path);
    if (!f) return;
    char text[1 << 16];
    const size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = 0;
    const char *literal = "{\"type\": \"Replace\", \"pattern\": {\"String\": \" \"}";
    char *at = strstr(text, literal);
    TT_EXPECT(at != NULL, "the fixture's Replace normalizer");
    if (!at) return;
    char edited[1 << 16];
    snprintf(edited, sizeof edited, "%.*s{\"type\": \"Replace\", \"pattern\": {\"Regex\": \" +\"}%s", (int)(at - text),
             text, at + strlen(literal));
    tt_test_write_text("regex_replace.json", edited);
    char *p = tt_test_path("regex_replace.json");
    tt_tokenizer *tok = tt_tokenizer_load(p);
    IDS(tok, "hi hi", false, "Regex Replace: one space", 9, 9);
    IDS(tok, "hi   hi", false, "Regex Replace: a run of spaces is one \u2581", 9, 9);
    tt_tokenizer_free(tok);
    free(p);
    snprintf(edited, sizeof edited, "%.*s{\"type\": \"Replace\", \"pattern\": {\"Regex\": \" *\"}%s", (int)(at - text),
             text, at + strlen(literal));
    tt_test_write_text("regex_empty.json", edited);
    tt_expect_die(load_scratch, "regex_empty.json", "can match the empty string");
}

/* ---- Split and Replace patterns: translation, literals, every PCRE2 outcome, the work budget ---- */

/* Writes scratch/name: a small BPE tokenizer (a b ab, space, ., c x, ▁ h i hi ▁hi, "ab " merged from ab and a space,
 * \n \r) with the given added tokens (a JSON list), normalizer and pre-tokenizer (JSON text, or null). */
static void write_small_tokenizer_added(const char *name, const char *added_tokens, const char *normalizer,
                                        const char *pre_tokenizer) {
    static char text[1 << 18];
    snprintf(
        text, sizeof text,
        "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2, \" \": 3, \".\": 4, \"c\": 5, "
        "\"x\": 6, \"\u2581\": 7, \"h\": 8, \"i\": 9, \"hi\": 10, \"\u2581hi\": 11, \"ab \": 12, \"\\n\": 13, \"\\r\": 14}, "
        "\"merges\": [\"a b\", \"h i\", \"\u2581 hi\", [\"ab\", \" \"]]}, \"normalizer\": %s, \"pre_tokenizer\": %s, \"added_tokens\": %s}",
        normalizer, pre_tokenizer, added_tokens);
    tt_test_write_text(name, text);
}

static void write_small_tokenizer(const char *name, const char *normalizer, const char *pre_tokenizer) {
    write_small_tokenizer_added(name, "[]", normalizer, pre_tokenizer);
}

static tt_tokenizer *load_scratch_tokenizer(const char *name) {
    char *p = tt_test_path(name);
    tt_tokenizer *tok = tt_tokenizer_load(p);
    free(p);
    return tok;
}

/* A Split of the given pattern ("Regex" or "String") and behavior, as JSON */
static const char *split_json(const char *kind, const char *pattern, const char *behavior) {
    static char json[1 << 17];
    snprintf(json, sizeof json,
             "{\"type\": \"Split\", \"pattern\": {\"%s\": \"%s\"}, \"behavior\": \"%s\", \"invert\": false}", kind,
             pattern, behavior);
    return json;
}

/* A tokenizer file and a text, encoded in a child process by tt_expect_die */
typedef struct encode_job {
    const char *file;
    const char *text;
    size_t len;
} encode_job;
static void encode_scratch(void *arg) {
    const encode_job *job = arg;
    tt_tokenizer *tok = load_scratch_tokenizer(job->file);
    tt_token_ids out = {0};
    tt_tokenizer_encode(tok, job->text, job->len, false, &out);
    tt_token_ids_free(&out);
    tt_tokenizer_free(tok);
}

static char *repeat_text(const char *unit, size_t times, size_t *len) {
    const size_t n = strlen(unit);
    char *text = malloc(n * times + 1);
    for (size_t i = 0; i < times; i++) memcpy(text + i * n, unit, n);
    text[n * times] = 0;
    *len = n * times;
    return text;
}

/* Each \s and \S is spelled out as Oniguruma's White_Space set, about 100 bytes for 2 (once a heap overflow: the
 * translation's buffer was sized 40 bytes a pattern byte); inside a class too. */
static void test_split_white_space_escapes(void) {
    write_small_tokenizer("split_s.json", "null",
                          split_json("Regex", "\\\\s\\\\s\\\\s\\\\s\\\\s\\\\s\\\\s\\\\s|\\\\s", "Removed"));
    tt_tokenizer *tok = load_scratch_tokenizer("split_s.json");
    IDS(tok, "ab ab", false, "\\s: one space removed", 2, 2);
    IDS(tok, "ab         ab", false, "\\s: nine spaces removed", 2, 2);
    IDS(tok,
        "ab\xe3\x80\x80"
        "ab",
        false, "\\s: U+3000 is White_Space", 2, 2);
    tt_tokenizer_free(tok);
    write_small_tokenizer("split_class.json", "null",
                          split_json("Regex", "[\\\\s.]+|\\\\S\\\\S\\\\S\\\\S\\\\S\\\\S\\\\S\\\\S", "Removed"));
    tok = load_scratch_tokenizer("split_class.json");
    IDS(tok, "ab. ab", false, "[\\s.]+ removed", 2, 2);
    IDS(tok, "ab abababab", false, "eight \\S removed", 2);
    tt_tokenizer_free(tok);
    /* a pattern longer than any real one is refused before it is translated or compiled */
    size_t len;
    char *long_pattern = repeat_text("\\\\s", 40000, &len);
    write_small_tokenizer("split_long.json", "null", split_json("Regex", long_pattern, "Removed"));
    free(long_pattern);
    tt_expect_die(load_scratch, "split_long.json",
                  "pre_tokenizer.pattern: the pattern is 80000 bytes; tiertrain reads patterns of at most 65536 bytes");
}

/* A String pattern is matched as it is written (Gemma 3's Split {"String": " "} was refused: PCRE2 takes no
 * PCRE2_UCP beside PCRE2_LITERAL) */
static void test_split_string_pattern(void) {
    write_small_tokenizer("split_string.json", "null", split_json("String", " ", "Removed"));
    tt_tokenizer *tok = load_scratch_tokenizer("split_string.json");
    IDS(tok, "ab ab", false, "String \" \", Removed", 2, 2);
    tt_tokenizer_free(tok);
    write_small_tokenizer("split_isolated.json", "null", split_json("String", " ", "Isolated"));
    tok = load_scratch_tokenizer("split_isolated.json");
    IDS(tok, "ab ab", false, "String \" \", Isolated: the space is a piece of its own", 2, 3, 2);
    tt_tokenizer_free(tok);
    /* with the space not split off, "ab " merges: what Gemma 3's MergedWithPrevious gives */
    write_small_tokenizer("split_merged.json", "null", split_json("String", " ", "MergedWithPrevious"));
    tok = load_scratch_tokenizer("split_merged.json");
    IDS(tok, "ab ab", false, "String \" \", MergedWithPrevious", 12, 2);
    tt_tokenizer_free(tok);
    /* "." is a dot, not any character (as a regex it would remove everything) */
    write_small_tokenizer("split_dot.json", "null", split_json("String", ".", "Removed"));
    tok = load_scratch_tokenizer("split_dot.json");
    IDS(tok, "ab.ab", false, "String \".\" is literal", 2, 2);
    IDS(tok, "a.b", false, "String \".\" keeps a and b apart", 0, 1);
    tt_tokenizer_free(tok);
}

/* A pattern PCRE2's JIT does not compile ((*NO_JIT)) is matched by the interpreter (once pcre2_jit_match was called
 * on it anyway: error -45, an abort) */
static void test_split_without_jit(void) {
    write_small_tokenizer("split_nojit.json", "null", split_json("Regex", "(*NO_JIT)\\\\s+", "Removed"));
    tt_tokenizer *tok = load_scratch_tokenizer("split_nojit.json");
    IDS(tok, "ab  ab", false, "(*NO_JIT): interpreted", 2, 2);
    tt_tokenizer_free(tok);
}

/* Every PCRE2 error is an error naming the file, the key and the pattern, never an abort */
static void test_regex_errors(void) {
    size_t len;
    /* PCRE2's match limit (-47; once an "internal error" abort) */
    write_small_tokenizer("nested.json", "null", split_json("Regex", "(a+)+b|.", "Isolated"));
    char *a30 = repeat_text("a", 30, &len);
    encode_job job = {"nested.json", a30, len};
    tt_expect_die(
        encode_scratch, &job,
        "nested.json: pre_tokenizer.pattern: the pattern /(a+)+b|./ went over the work budget of a document at "
        "byte 0 of a text of 30 bytes");
    /* the budget is the document's, not each match's: runs of 20 a's cost each match a million units, under PCRE2's
     * per-match limit (10^7), and 46 kB of them took minutes */
    char *runs = repeat_text("aaaaaaaaaaaaaaaaaaaa ", 2200, &len);
    job = (encode_job){"nested.json", runs, len};
    tt_expect_die(encode_scratch, &job, "the pattern /(a+)+b|./ went over the work budget of a document");
    free(runs);
    /* stretches between added tokens are scanned one by one, sharing the document's budget (a budget per scan would
     * give each one-byte stretch the whole base) */
    write_small_tokenizer_added("nested_added.json", "[{\"id\": 15, \"content\": \"<x>\", \"special\": true}]", "null",
                                split_json("Regex", "(a+)+b|.", "Isolated"));
    runs = repeat_text("aaaaaaaaaaaaaaaaa<x>", 100, &len);
    job = (encode_job){"nested_added.json", runs, len};
    tt_expect_die(encode_scratch, &job, "nested_added.json: pre_tokenizer.pattern: the pattern /(a+)+b|./ went over");
    free(runs);
    /* a recursion that loops: JIT code counts it against the match limit; the interpreter finds the loop (-52) */
    write_small_tokenizer("recurse.json", "null", split_json("Regex", "(?R)", "Isolated"));
    job = (encode_job){"recurse.json", "ab", 2};
    tt_expect_die(encode_scratch, &job,
                  "recurse.json: pre_tokenizer.pattern: the pattern /(?R)/ went over the work budget");
    write_small_tokenizer("recurse_nojit.json", "null", split_json("Regex", "(*NO_JIT)(?R)", "Isolated"));
    job = (encode_job){"recurse_nojit.json", "ab", 2};
    tt_expect_die(
        encode_scratch, &job,
        "recurse_nojit.json: pre_tokenizer.pattern: PCRE2 cannot match the pattern /(*NO_JIT)(?R)/ (error -52");
    /* a group repeated once per character nests a backtracking frame each time: past the heap limit */
    write_small_tokenizer("deep.json", "null", split_json("Regex", "(?:(a)|b)*$", "Isolated"));
    char *deep = repeat_text("ab", 1 << 20, &len);
    job = (encode_job){"deep.json", deep, len};
    tt_expect_die(encode_scratch, &job, "the pattern /(?:(a)|b)*$/ nests its backtracking too deep at byte 0");
    free(deep);
    /* a Replace whose match hits an error ends the encode (it stopped replacing, silently, and the rest of the text
     * was tokenized unreplaced) */
    write_small_tokenizer("replace_nested.json",
                          "{\"type\": \"Replace\", \"pattern\": {\"Regex\": \"(a+)+b|c\"}, \"content\": \"x\"}",
                          "null");
    char text[64];
    snprintf(text, sizeof text, "c%sc", a30);
    job = (encode_job){"replace_nested.json", text, strlen(text)};
    tt_expect_die(encode_scratch, &job,
                  "replace_nested.json: normalizer.pattern.Regex: the pattern /(a+)+b|c/ went over the work budget");
    free(a30);
    /* \K ends a match where it starts although the pattern's shortest match is one character (once a failed
     * internal check, an abort) */
    write_small_tokenizer("replace_k.json",
                          "{\"type\": \"Replace\", \"pattern\": {\"Regex\": \"a\\\\K\"}, \"content\": \"x\"}", "null");
    job = (encode_job){"replace_k.json", "ab", 2};
    tt_expect_die(
        encode_scratch, &job,
        "replace_k.json: normalizer.pattern.Regex: the Replace pattern /a\\K/ matched the empty string at byte 1");
}

/* A Replace whose first match starts at byte 0 of a fresh thread's text (its output buffer not allocated yet: once a
 * memcpy to NULL, undefined, which the sanitizer build reports) */
static void test_replace_at_start(void) {
    const char *kinds[2] = {"Regex", "String"};
    const char *patterns[2] = {" +", " "};
    for (int k = 0; k < 2; k++) {
        char normalizer[256];
        snprintf(normalizer, sizeof normalizer,
                 "{\"type\": \"Replace\", \"pattern\": {\"%s\": \"%s\"}, \"content\": \"\u2581\"}", kinds[k],
                 patterns[k]);
        write_small_tokenizer("replace_start.json", normalizer, "null");
        tt_tokenizer *tok = load_scratch_tokenizer("replace_start.json");
        IDS(tok, " hi", false, "Replace at byte 0", 11);
        IDS(tok, " hi a", false, "Replace at byte 0, then inside", 11, 7, 0);
        tt_tokenizer_free(tok);
    }
}

/* The budget leaves real patterns room: Llama 3's pattern (JIT and interpreted) over a megabyte of one whitespace
 * run, of newlines, and of words (the corpus's worst match needs 2020 units; a run of spaces one per byte). Every
 * byte is one id but for the merged "ab"s. */
static void test_regex_budget_real_patterns(void) {
    const char *llama3 = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}{1,3}| "
                         "?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+";
    const char *units[4] = {" ", "\n", " \r\n", "ab ab. "};
    for (int jit = 0; jit < 2; jit++) {
        char pattern[512];
        snprintf(pattern, sizeof pattern, "%s%s", jit ? "" : "(*NO_JIT)", llama3);
        write_small_tokenizer("llama3_split.json", "null", split_json("Regex", pattern, "Isolated"));
        tt_tokenizer *tok = load_scratch_tokenizer("llama3_split.json");
        for (int u = 0; u < 4; u++) {
            size_t len;
            char *text = repeat_text(units[u], (1 << 20) / strlen(units[u]), &len);
            tt_token_ids out = {0};
            tt_tokenizer_encode(tok, text, len, false, &out);
            const int64_t merged = u == 3 ? 2 * (int64_t)(len / strlen(units[u])) : 0;
            TT_EXPECT(out.count == (int64_t)len - merged, "a megabyte of '%s' (%s): %lld ids, expected %lld", units[u],
                      jit ? "JIT" : "interpreter", (long long)out.count, (long long)((int64_t)len - merged));
            tt_token_ids_free(&out);
            free(text);
        }
        tt_tokenizer_free(tok);
    }
}

static void test_sentencepiece(void) {
    tt_tokenizer *tok = load_fixture("tiny_sentencepiece.json");
    IDS(tok, "hi", true, "BOS + ▁hi (Prepend + merges)", 1, 9);
    IDS(tok, "hi", false, "no BOS without add_special", 9);
    IDS(tok, "hi hi", false, "Replace: space -> ▁", 9, 9);
    IDS(tok, "\xc3\xa9", false, "byte fallback <0xC3><0xA9>", 5, 3, 4);
    IDS(tok, "!", false, "byte fallback <0x21>", 5, 11);
    IDS(tok, "zzx", false, "fuse_unk: consecutive unknowns are one <unk>", 5, 0, 10);
    IDS(tok, "hi [MASK]", false, "lstrip takes the space before", 9, 12);
    IDS(tok, "<ws>  hi", false, "rstrip takes the spaces after", 13, 9);
    IDS(tok, "word hi", false, "single_word at a word boundary", 14, 5, 9);
    /* tokenizers discards a single_word match with a word character (regex \\w) beside it */
    IDS(tok, "swordx", false, "single_word inside a word: not matched", 5, 0, 10);
    IDS(tok, "hi</s>hi", false, "each stretch between added tokens is normalized on its own", 9, 2, 9);
    IDS(tok, "", true, "empty text: only BOS", 1);
    tt_tokenizer_free(tok);
}

/* Metaspace (prepend_scheme first, split): spaces become ▁, a ▁ is put before the text only
 * where it starts at offset 0 of the input (not after an added token) and does not start with
 * ▁ already, and the text is cut before every ▁. (transformers.js never prepends here; tokenizers'
 * Metaspace::pre_tokenize checks offsets_original().0 == 0.) */
static void test_metaspace(void) {
    tt_tokenizer *tok = load_fixture("tiny_metaspace.json");
    IDS(tok, "ab ab", false, "▁ab ▁ab", 7, 7);
    IDS(tok, "<x>ab", false, "no ▁ after an added token", 8, 6);
    IDS(tok, "ab<x>ab", false, "first stretch only", 7, 8, 6);
    IDS(tok, "  a", false, "starts with ▁ already; cut before each ▁", 1, 4);
    IDS(tok, "zz a", false, "fused unknown inside ▁zz", 1, 0, 4);
    tt_tokenizer_free(tok);
}

static void expect_decode(const tt_tokenizer *tok, const int32_t *ids, int64_t n, bool skip, const char *want,
                          const char *what) {
    size_t len;
    char *text = tt_tokenizer_decode(tok, ids, n, skip, &len);
    TT_EXPECT(len == strlen(want) && strcmp(text, want) == 0, "%s: decoded '%s', expected '%s'", what, text, want);
    free(text);
}
#define DECODE(tok, skip, want, what, ...)                                                   \
    do {                                                                                     \
        const int32_t ids_[] = {__VA_ARGS__};                                                \
        expect_decode(tok, ids_, (int64_t)(sizeof ids_ / sizeof ids_[0]), skip, want, what); \
    } while (0)

static void test_decode(void) {
    tt_tokenizer *tok = load_fixture("tiny_bytelevel.json");
    DECODE(tok, false, "abc a", "byte-level: Ġ is a space", 6, 7);
    DECODE(tok, false, "\xc3\xa9<|end|>", "byte-level: two bytes, then an added token as itself", 13, 10);
    DECODE(tok, true, "\xc3\xa9", "skip_special drops the special token", 13, 10);
    DECODE(tok, false, "\xef\xbf\xbd", "byte-level: a lone lead byte is U+FFFD", 11);
    tt_tokenizer_free(tok);
    tok = load_fixture("tiny_sentencepiece.json");
    DECODE(tok, true, "hi hi", "▁ -> space, the first stripped", 1, 9, 9);
    DECODE(tok, false, "<s> hi hi", "special token kept", 1, 9, 9);
    DECODE(tok, false, "\xc3\xa9!", "byte fallback tokens become their bytes", 5, 3, 4, 11);
    DECODE(tok, false, " \xef\xbf\xbdx", "an invalid byte run: one U+FFFD per byte token", 5, 5, 3, 10);
    tt_tokenizer_free(tok);
    tok = load_fixture("tiny_metaspace.json");
    DECODE(tok, false, "ab ab", "Metaspace: the first token's ▁ dropped", 7, 7);
    tt_tokenizer_free(tok);
}

/* decode(encode(text)) == text over the corpus for the real Llama 3.1 (byte-level, no normalizer),
 * Llama 2 (documents without its special-token strings: those are cut out and the stretch
 * after one gets a ▁ of its own) and Gemma 3 (spaces replaced by ▁, a Split on a String pattern, no
 * prefix ▁), when test_tokenizer_real.sh has fetched them already. */
static void test_real_round_trip(void) {
    const char *models[3] = {"llama3_1", "llama2", "gemma3"};
    for (int m = 0; m < 3; m++) {
        char path[4096];
        snprintf(path, sizeof path, "tokenizer_cache/%s/package/models/tokenizer.json", models[m]);
        if (access(path, R_OK) != 0) {
            printf("SKIPPED: round trip for %s: %s is not fetched yet (tests/test_tokenizer_real.sh fetches it)\n",
                   models[m], path);
            continue;
        }
        tt_tokenizer *tok = tt_tokenizer_load(path);
        int checked = 0, same = 0;
        for (int d = 0; d < 10000; d++) {
            snprintf(path, sizeof path, "%s/tests/fixtures/tokenizer/corpus/%04d.txt", source_dir, d);
            FILE *f = fopen(path, "rb");
            if (!f) break;
            static char text[1 << 22];
            size_t len = fread(text, 1, sizeof text - 1, f);
            fclose(f);
            text[len] = 0;
            tt_token_ids out = {0};
            tt_tokenizer_encode(tok, text, len, false, &out);
            size_t back_len;
            char *back = tt_tokenizer_decode(tok, out.ids, out.count, false, &back_len);
            tt_token_ids_free(&out);
            /* only valid UTF-8 comes back as itself */
            bool valid = true;
            for (size_t i = 0; i < len && valid; i++) valid = (unsigned char)text[i] != 0xff;
            bool specials = strstr(text, "<s>") || strstr(text, "</s>") || strstr(text, "<unk>");
            char *replacement = strstr(back, "\xef\xbf\xbd");
            if (valid && !(m == 1 && specials) && (!replacement || strstr(text, "\xef\xbf\xbd"))) {
                checked++;
                if (back_len == len && memcmp(back, text, len) == 0) same++;
                else if (checked - same <= 3) fprintf(stderr, "round trip %s: %s differs\n", models[m], path);
            }
            free(back);
        }
        TT_EXPECT(checked > 100 && same == checked, "%s: %d of %d documents come back as themselves", models[m], same,
                  checked);
        tt_tokenizer_free(tok);
    }
}

/* A text of about len bytes: the corpus's documents one after another, as often as it takes. */
static char *corpus_text(size_t want, size_t *len) {
    char *text = malloc(want + (1 << 22) + 1);
    size_t at = 0;
    for (int d = 0; at < want; d = (d + 1) % 10000) {
        char path[4096];
        snprintf(path, sizeof path, "%s/tests/fixtures/tokenizer/corpus/%04d.txt", source_dir, d);
        FILE *f = fopen(path, "rb");
        if (!f) {
            if (d == 0) {
                fprintf(stderr, "no corpus at %s\n", path);
                exit(1);
            }
            d = -1;
            continue;
        }
        at += fread(text + at, 1, 1 << 22, f);
        fclose(f);
    }
    text[at] = 0;
    *len = at;
    return text;
}

/* A line of /proc/self/status in KiB (VmRSS, VmHWM), -1 if absent. */
static long status_kib(const char *key) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kib = -1;
    size_t n = strlen(key);
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, key, n) == 0 && line[n] == ':') kib = atol(line + n + 1);
    if (f) fclose(f);
    return kib;
}

/* Starts the peak resident set (VmHWM) over from the current one; false where the kernel does not let it. */
static bool reset_peak_rss(void) {
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (!f) return false;
    bool ok = fputs("5", f) >= 0;
    return fclose(f) == 0 && ok;
}

/* tt_tokenizer_encode_prefix keeps exactly the first ids of the whole text's encoding, offsets included, on texts
 * over two windows (agreement of growing prefixes) and under (encoded whole), with the byte-level and the
 * SentencePiece fixture (no pre-tokenizer: the whole text is one piece for BPE, the hardest case for a cut), and
 * the real tokenizers when fetched; then a 64 MiB text's first thousand ids take megabytes, not the gigabytes of
 * encoding it whole (the peak resident set of the process grows by less than 256 MiB). */
static void test_encode_prefix(void) {
    size_t len;
    char *text = corpus_text(9u << 19, &len); /* 4.5 MiB: over two windows for 262144 ids */
    const char *names[5] = {"tiny_bytelevel.json", "tiny_sentencepiece.json", "qwen3", "llama2", "gemma3"};
    for (int t = 0; t < 5; t++) {
        tt_tokenizer *tok;
        if (t < 2) tok = load_fixture(names[t]);
        else {
            char path[4096];
            snprintf(path, sizeof path, "tokenizer_cache/%s/package/models/tokenizer.json", names[t]);
            if (access(path, R_OK) != 0) {
                printf("SKIPPED: encode_prefix with %s: %s is not fetched yet\n", names[t], path);
                continue;
            }
            tok = tt_tokenizer_load(path);
        }
        tt_token_ids whole = {.with_offsets = true};
        tt_tokenizer_encode(tok, text, len, true, &whole);
        const int64_t wanted[4] = {1, 777, 262144, whole.count + 5};
        for (int k = 0; k < 4; k++) {
            for (int short_text = 0; short_text < 2; short_text++) {
                size_t text_len = short_text ? 3000 : len;
                tt_token_ids reference = {.with_offsets = true};
                if (short_text) tt_tokenizer_encode(tok, text, text_len, true, &reference);
                const tt_token_ids *full = short_text ? &reference : &whole;
                tt_token_ids prefix = {.with_offsets = true};
                tt_tokenizer_encode_prefix(tok, text, text_len, true, wanted[k], &prefix);
                int64_t expected = wanted[k] < full->count ? wanted[k] : full->count;
                bool same = prefix.count == expected;
                for (int64_t i = 0; same && i < expected; i++)
                    same = prefix.ids[i] == full->ids[i] && prefix.offsets[i] == full->offsets[i];
                TT_EXPECT(same, "%s, %zu bytes: the first %lld ids are the whole text's (%lld ids, expected %lld)",
                          names[t], text_len, (long long)wanted[k], (long long)prefix.count, (long long)expected);
                tt_token_ids_free(&prefix);
                tt_token_ids_free(&reference);
            }
        }
        tt_token_ids_free(&whole);
        tt_tokenizer_free(tok);
    }
    free(text);

    tt_tokenizer *tok = load_fixture("tiny_bytelevel.json");
    text = corpus_text(64u << 20, &len);
    const bool measured = reset_peak_rss();
    const long before = status_kib("VmRSS");
    tt_token_ids prefix = {0};
    tt_tokenizer_encode_prefix(tok, text, len, false, 1000, &prefix);
    const long grown = status_kib("VmHWM") - before;
    TT_EXPECT(prefix.count == 1000, "the first 1000 ids of %zu bytes: %lld ids", len, (long long)prefix.count);
    if (!measured || before < 0) printf("SKIPPED: the peak resident set (/proc/self/clear_refs cannot reset it)\n");
    else {
        printf("encode_prefix: the first 1000 ids of %zu bytes grew the peak resident set by %ld KiB\n", len, grown);
        TT_EXPECT(grown < 256 * 1024, "the first 1000 ids of %zu bytes grew the peak resident set by %ld KiB", len,
                  grown);
    }
    tt_token_ids_free(&prefix);
    free(text);
    tt_tokenizer_free(tok);
}

/* tt_tokenizer_encode_edited gives tt_tokenizer_encode's ids and offsets for any edit of the base text: random
 * replacements (chat masks' placeholder turn among them) at the start, the end and in between, of texts made of
 * each tokenizer's added tokens (lstrip, rstrip and single_word ones in the SentencePiece fixture), words, spaces,
 * newlines and multibyte characters; the real tokenizers too when fetched. Invalid UTF-8 in the base or the edit is
 * encoded plainly. */
static void test_encode_edited(void) {
    const char *names[6] = {
        "tiny_bytelevel.json", "tiny_sentencepiece.json", "tiny_metaspace.json", "qwen3", "llama2", "gemma3"};
    const char *specials[6][3] = {{"<|end|>", "\xc3\xa9x", "<|end|>"},
                                  {"[MASK]", "<ws>", "word"},
                                  {"<x>", "<unk>", "<x>"},
                                  {"<|im_start|>", "<|im_end|>", "<think>"},
                                  {"<s>", "</s>", "[INST]"},
                                  {"<start_of_turn>", "<end_of_turn>", "<bos>"}};
    static const char *const pieces[] = {"hello",    " world",
                                         "  ",       "\n",
                                         "\n\n",     " a",
                                         "word",     "words",
                                         "\xc3\xa9", "\xe6\x97\xa5\xe6\x9c\xac",
                                         " 123",     "[[dummy_message]]",
                                         "user",     "assistant",
                                         "\t",       "!",
                                         "x"};
    const int piece_count = (int)(sizeof pieces / sizeof pieces[0]);
    uint64_t rng = 0x9E3779B97F4A7C15ull;
#define NEXT_RANDOM() (rng = rng * 6364136223846793005ull + 1442695040888963407ull, (uint32_t)(rng >> 33))
    for (int t = 0; t < 6; t++) {
        tt_tokenizer *tok;
        if (t < 3) tok = load_fixture(names[t]);
        else {
            char path[4096];
            snprintf(path, sizeof path, "tokenizer_cache/%s/package/models/tokenizer.json", names[t]);
            if (access(path, R_OK) != 0) {
                printf("SKIPPED: encode_edited with %s: %s is not fetched yet\n", names[t], path);
                continue;
            }
            tok = tt_tokenizer_load(path);
        }
        char base_text[8192], edited[8192], insert[512];
        int failures = 0, edits = 0;
        for (int round = 0; round < 8; round++) {
            size_t len = 0;
            while (len < 3000) { /* a special token every few pieces, as a rendered conversation has */
                const char *p =
                    NEXT_RANDOM() % 4 == 0 ? specials[t][NEXT_RANDOM() % 3] : pieces[NEXT_RANDOM() % piece_count];
                memcpy(base_text + len, p, strlen(p));
                len += strlen(p);
            }
            if (round == 7) base_text[100] = (char)0xff; /* invalid UTF-8: nothing reused */
            tt_token_ids base_ids = {.with_offsets = true}, whole = {.with_offsets = true};
            tt_encoded_base *base = tt_tokenizer_encode_base(tok, base_text, len, &base_ids);
            tt_tokenizer_encode(tok, base_text, len, false, &whole);
            bool base_same = base_ids.count == whole.count;
            for (int64_t i = 0; base_same && i < whole.count; i++)
                base_same = base_ids.ids[i] == whole.ids[i] && base_ids.offsets[i] == whole.offsets[i];
            TT_EXPECT(base_same, "%s: the base's ids are the text's (%lld ids, whole %lld)", names[t],
                      (long long)base_ids.count, (long long)whole.count);
            tt_token_ids_free(&base_ids);
            tt_token_ids_free(&whole);
            for (int e = 0; e < 40; e++, edits++) {
                size_t from = NEXT_RANDOM() % (len + 1), to = from + NEXT_RANDOM() % 64;
                if (e == 0) from = 0;       /* at the start (Metaspace's first-only prepend) */
                if (e == 1) from = len - 3; /* at the end */
                if (to > len) to = len;
                size_t n = 0;
                for (int k = (int)(NEXT_RANDOM() % 4); k > 0; k--) {
                    const char *p =
                        NEXT_RANDOM() % 3 == 0 ? specials[t][NEXT_RANDOM() % 3] : pieces[NEXT_RANDOM() % piece_count];
                    memcpy(insert + n, p, strlen(p));
                    n += strlen(p);
                }
                if (e == 2) insert[n++] = (char)0xc3; /* an edit that is invalid UTF-8 */
                memcpy(edited, base_text, from);
                memcpy(edited + from, insert, n);
                memcpy(edited + from + n, base_text + to, len - to);
                const size_t edited_len = from + n + len - to;
                tt_token_ids plain = {.with_offsets = true}, reused = {.with_offsets = true};
                tt_tokenizer_encode(tok, edited, edited_len, false, &plain);
                tt_tokenizer_encode_edited(tok, base, edited, edited_len, &reused);
                bool same = plain.count == reused.count;
                for (int64_t i = 0; same && i < plain.count; i++)
                    same = plain.ids[i] == reused.ids[i] && plain.offsets[i] == reused.offsets[i];
                if (!same && failures++ < 3)
                    printf("  %s: bytes [%zu, %zu) of %zu replaced by %zu: %lld ids plainly, %lld reusing the base's\n",
                           names[t], from, to, len, n, (long long)plain.count, (long long)reused.count);
                tt_token_ids_free(&plain);
                tt_token_ids_free(&reused);
            }
            tt_encoded_base_free(base);
        }
        TT_EXPECT(failures == 0, "%s: %d of %d edited texts encode to other ids reusing the base's", names[t], failures,
                  edits);
        tt_tokenizer_free(tok);
    }
#undef NEXT_RANDOM
}

/* encode from several threads at once on one tokenizer gives what one thread gives */
typedef struct thread_job {
    const tt_tokenizer *tok;
    int64_t count;
    int32_t sum;
} thread_job;
static void *encode_many(void *arg) {
    thread_job *j = arg;
    tt_token_ids out = {0};
    for (int k = 0; k < 2000; k++) tt_tokenizer_encode(j->tok, "abc bc a aaa ba <|end|> ab", 26, true, &out);
    j->count = out.count;
    for (int64_t i = 0; i < out.count; i++) j->sum += out.ids[i];
    tt_token_ids_free(&out);
    return NULL;
}
static void test_threads(void) {
    tt_tokenizer *tok = load_fixture("tiny_bytelevel.json");
    pthread_t t[4];
    thread_job jobs[4] = {{tok, 0, 0}, {tok, 0, 0}, {tok, 0, 0}, {tok, 0, 0}};
    for (int k = 0; k < 4; k++) pthread_create(&t[k], NULL, encode_many, &jobs[k]);
    for (int k = 0; k < 4; k++) pthread_join(t[k], NULL);
    bool same = true;
    for (int k = 1; k < 4; k++) same = same && jobs[k].count == jobs[0].count && jobs[k].sum == jobs[0].sum;
    TT_EXPECT(same && jobs[0].count == 2000 * 13, "threads agree (%lld tokens)", (long long)jobs[0].count);
    tt_tokenizer_free(tok);
}

/* ---- bad input ---- */
static void load_scratch(void *name) {
    char *p = tt_test_path(name);
    tt_tokenizer_load(p);
}

static void test_bad_input(void) {
    const char *base_model =
        "\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2}, \"merges\": [\"a b\"]}";
    char text[2048];
    tt_test_write_text("malformed.json", "{\"model\": {\"vocab\": {\"a\": 0,}}");
    tt_expect_die(load_scratch, "malformed.json", "malformed.json:1:");
    tt_test_write_text("novocab.json", "{\"model\": {\"type\": \"BPE\", \"merges\": []}}");
    tt_expect_die(load_scratch, "novocab.json", "novocab.json: model.vocab is missing");
    /* one absurd id would size the id -> token table in gigabytes */
    tt_test_write_text("bigid.json", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 200000000}, "
                                     "\"merges\": []}}");
    tt_expect_die(load_scratch, "bigid.json", "model.vocab[\"b\"] is id 200000000; tiertrain takes ids below 16777216");
    tt_test_write_text("bigadded.json", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, "
                                        "\"added_tokens\": [{\"id\": 16777216, \"content\": \"<x>\"}]}");
    tt_expect_die(load_scratch, "bigadded.json", "added_tokens[0].id is 16777216; tiertrain takes ids below");
    snprintf(text, sizeof text, "{%s, \"pre_tokenizer\": {\"type\": \"Whitespace\"}}", base_model);
    tt_test_write_text("pretok.json", text);
    tt_expect_die(load_scratch, "pretok.json", "pretok.json: pre_tokenizer.type is \"Whitespace\"");
    snprintf(text, sizeof text,
             "{%s, \"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Digits\"}]}}",
             base_model);
    tt_test_write_text("pretok2.json", text);
    tt_expect_die(load_scratch, "pretok2.json", "pre_tokenizer.pretokenizers[0].type is \"Digits\"");
    tt_test_write_text("merge.json",
                       "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"ab\": 2}, \"merges\": [\"a b\"]}}");
    tt_expect_die(load_scratch, "merge.json",
                  "merge.json: model.merges[0] names the token 'b', which is not in model.vocab");
    snprintf(text, sizeof text, "{%s, \"normalizer\": {\"type\": \"Lowercase\"}}", base_model);
    tt_test_write_text("norm.json", text);
    tt_expect_die(load_scratch, "norm.json", "norm.json: normalizer.type is \"Lowercase\"");
    tt_test_write_text("unigram.json", "{\"model\": {\"type\": \"Unigram\", \"vocab\": []}}");
    tt_expect_die(load_scratch, "unigram.json", "model.type is Unigram");
    snprintf(text, sizeof text, "{%s, \"post_processor\": {\"type\": \"BertProcessing\"}}", base_model);
    tt_test_write_text("post.json", text);
    tt_expect_die(load_scratch, "post.json", "post_processor.type is \"BertProcessing\"");
    tt_expect_die(load_scratch, "absent.json", "absent.json: no such file");
    /* two tokens with one id (once a heap over-read: the vocabulary map keyed the second token by
     * the first one's text) */
    tt_test_write_text("dupid.json",
                       "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"bcd\": 0}, \"merges\": []}}");
    tt_expect_die(load_scratch, "dupid.json", "model.vocab[\"a\"] and model.vocab[\"bcd\"] both have id 0");
}

int main(int argc, char **argv) {
    source_dir = argc > 1 ? argv[1] : getenv("TT_SOURCE_DIR");
    if (!source_dir) source_dir = ".";
    tt_test_scratch_open("tokenizer");
    test_byte_level();
    test_invalid_utf8();
    test_sentencepiece();
    test_regex_replace();
    test_split_white_space_escapes();
    test_split_string_pattern();
    test_split_without_jit();
    test_regex_errors();
    test_replace_at_start();
    test_regex_budget_real_patterns();
    test_metaspace();
    test_decode();
    test_real_round_trip();
    test_encode_prefix();
    test_encode_edited();
    test_threads();
    test_bad_input();
    tt_test_scratch_close();
    return tt_test_summary("tokenizer");
}
