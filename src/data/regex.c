/* The tokenizer's regexes (Split and Replace patterns): the Oniguruma pattern of tokenizer.json translated to PCRE2,
 * compiled with JIT where PCRE2 can, and matched within a work budget per scan of a text, so that no pattern and no
 * text can crash, abort or hang the tokenizer: every PCRE2 result is either a match, no match, or an error that names
 * the tokenizer file, the pattern's key, the pattern and what to do. */
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "data/tokenizer_internal.h"

/* Published tokenizers' patterns are under 300 bytes; the translation grows a pattern up to 50 times (\s), and
 * PCRE2's compile time and memory grow with it, so a pattern longer than this is refused rather than compiled. */
#define TT_REGEX_MAX_PATTERN_BYTES ((size_t)64 << 10)

/* Oniguruma's \s (what tokenizers compiles the pattern with) is Unicode White_Space; PCRE2's \s
 * under UCP also takes U+180E and differs by Unicode version, so \s and \S are spelled out. */
#define WHITE_SPACE_SET \
    "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"

/* The translated pattern: grown on every write, so its size follows from what is written, whatever the expansion
 * of an escape is. */
typedef struct pattern_buffer {
    char *text;
    size_t len, cap;
} pattern_buffer;

static void pattern_append(pattern_buffer *out, const char *text, size_t len) {
    if (out->len + len + 1 > out->cap) {
        size_t cap = out->cap ? out->cap : 256;
        while (cap < out->len + len + 1) cap = tt_mul_size(cap, 2, "regex");
        out->text = tt_xrealloc(out->text, cap, "regex");
        out->cap = cap;
    }
    memcpy(out->text + out->len, text, len);
    out->len += len;
    out->text[out->len] = 0;
}

static void pattern_append_text(pattern_buffer *out, const char *text) { pattern_append(out, text, strlen(text)); }

/* Oniguruma -> PCRE2: \h and \H (a hex digit in Oniguruma, horizontal space in PCRE2) and \s and \S (see
 * WHITE_SPACE_SET) are spelled out; the rest is the same syntax. */
static char *translate_oniguruma(const char *file, const char *where, const char *pattern) {
    const size_t n = strlen(pattern);
    pattern_buffer out = {0};
    pattern_append(&out, "", 0); /* an empty pattern is an empty string, not NULL */
    bool in_class = false;
    for (size_t i = 0; i < n; i++) {
        const char c = pattern[i];
        if (c == '\\' && i + 1 < n) {
            const char d = pattern[i + 1];
            if (d == 'h' || d == 'H') {
                const char *text =
                    d == 'h' ? (in_class ? "0-9a-fA-F" : "[0-9a-fA-F]") : (in_class ? NULL : "[^0-9a-fA-F]");
                if (!text) {
                    free(out.text);
                    tt_die("%s: %s: \\H inside a character class is not supported in the pattern /%s/", file, where,
                           pattern);
                }
                pattern_append_text(&out, text);
            } else if (d == 's' || d == 'S') {
                const char *text = d == 's' ? (in_class ? WHITE_SPACE_SET : "[" WHITE_SPACE_SET "]")
                                            : (in_class ? NULL : "[^" WHITE_SPACE_SET "]");
                if (!text) {
                    free(out.text);
                    tt_die("%s: %s: \\S inside a character class is not supported in the pattern /%s/", file, where,
                           pattern);
                }
                pattern_append_text(&out, text);
            } else {
                pattern_append(&out, pattern + i, 2);
            }
            i++;
            continue;
        }
        if (c == '[' && !in_class) {
            in_class = true;
            pattern_append(&out, &c, 1);
            if (i + 1 < n && pattern[i + 1] == '^') pattern_append(&out, &pattern[++i], 1);
            if (i + 1 < n && pattern[i + 1] == ']') pattern_append(&out, &pattern[++i], 1); /* a literal ] first */
            continue;
        }
        if (c == '[' && in_class) {
            free(out.text);
            tt_die("%s: %s: nested character classes are not supported in the pattern /%s/", file, where, pattern);
        }
        if (c == ']' && in_class) in_class = false;
        pattern_append(&out, &c, 1);
    }
    return out.text;
}

void tt_regex_compile(tt_regex *regex, const char *file, const char *where, const char *pattern, bool literal) {
    const size_t n = strlen(pattern);
    if (n > TT_REGEX_MAX_PATTERN_BYTES)
        tt_die("%s: %s: the pattern is %zu bytes; tiertrain reads patterns of at most %zu bytes (published tokenizers' "
               "are under 300): the file is damaged or not a tokenizer.json",
               file, where, n, TT_REGEX_MAX_PATTERN_BYTES);
    char *translated = literal ? tt_xstrdup(pattern) : translate_oniguruma(file, where, pattern);
    /* PCRE2 refuses PCRE2_UCP beside PCRE2_LITERAL ("invalid option bits"), and a literal needs no character
     * properties: a String pattern is its UTF-8 bytes, matched whole characters at a time */
    const uint32_t options = literal ? PCRE2_UTF | PCRE2_LITERAL : PCRE2_UTF | PCRE2_UCP;
    int error;
    PCRE2_SIZE offset;
    pcre2_code *code = pcre2_compile((PCRE2_SPTR)translated, PCRE2_ZERO_TERMINATED, options, &error, &offset, NULL);
    free(translated);
    if (!code) {
        PCRE2_UCHAR message[256];
        pcre2_get_error_message(error, message, sizeof message);
        tt_die("%s: %s: the pattern /%s/ does not compile (PCRE2: %s at offset %zu)", file, where, pattern,
               (const char *)message, (size_t)offset);
    }
    /* pcre2_jit_compile succeeds without compiling a (*NO_JIT) pattern: whether there is JIT code is what tells
     * pcre2_jit_match (which takes JIT code only) from pcre2_match */
    size_t jit_size = 0;
    const bool jit_compiled = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0 &&
                              pcre2_pattern_info(code, PCRE2_INFO_JITSIZE, &jit_size) == 0 && jit_size > 0;
    if (!jit_compiled)
        tt_warn("%s: %s: the pattern /%s/ is not JIT-compiled (PCRE2's JIT is unavailable or the pattern asks for "
                "(*NO_JIT)); PCRE2's interpreter matches it, several times slower",
                file, where, pattern);
    *regex = (tt_regex){.code = code, .pattern = tt_xstrdup(pattern), .where = tt_xstrdup(where), .jit = jit_compiled};
}

void tt_regex_free(tt_regex *regex) {
    if (regex->code) pcre2_code_free(regex->code);
    free(regex->pattern);
    free(regex->where);
    *regex = (tt_regex){0};
}

/* ---- matching ---- */

/* The work budget, in units of PCRE2's match limit (the interpreter counts one unit per backtracking point, JIT code
 * a comparable step; PCRE2's per-call default is 10^7). A per-call limit alone bounds nothing over a document: a
 * pattern that backtracks just under the limit at every position takes minutes on a megabyte (86-119 s measured on
 * 46 kB to 1 MB). So the matches of one document (one text encoded; at load, the added tokens normalized) share one
 * budget: TT_REGEX_DOCUMENT_WORK, and TT_REGEX_WORK_PER_BYTE for every byte a pattern scans (a text split by two
 * patterns counts twice). Per scan rather than per document, the base would come again with every stretch between
 * added tokens, and a text cut into one-byte stretches would get it per byte. Measured on the 1.1 MB test corpus,
 * Llama 3's pattern needs 0.9 units a byte under JIT and 3.2 under the interpreter (at most 2020 in one match, over a
 * run of white space): the budget is tens of times what real patterns use, and at 2-4 ns a unit (JIT) or 16 ns
 * (interpreter) it bounds a document to about 1 s (JIT) or 4 s (interpreter) a megabyte scanned. */
#define TT_REGEX_DOCUMENT_WORK ((uint64_t)1 << 16) /* the message says 2^16 */
#define TT_REGEX_WORK_PER_BYTE 256
/* PCRE2 cannot say how much of its limit a match used, so each match is charged the limit it ran under: the first
 * attempt gets this many units, and an attempt that hits its limit is run again with twice the limit (every
 * attempt charged), so a match is charged less than four times its work plus this. */
#define TT_REGEX_FIRST_ATTEMPT_WORK 64
/* The interpreter's backtracking memory (PCRE2's heap limit, in KiB; its default is 20 GB). Its depth limit stays
 * at the default: every level of depth is a unit of the match limit, which the budget bounds already. */
#define TT_REGEX_HEAP_LIMIT_KIB (64u << 10)

void tt_regex_matcher_init(tt_regex_matcher *matcher) {
    *matcher = (tt_regex_matcher){0};
    matcher->match = pcre2_match_data_create(64, NULL);
    /* whitespace runs of a megabyte recurse deep in JIT code: give it room */
    matcher->jit_stack = pcre2_jit_stack_create(32 << 10, 8 << 20, NULL);
    matcher->context = pcre2_match_context_create(NULL);
    if (!matcher->match || !matcher->jit_stack || !matcher->context)
        tt_die("out of host memory for PCRE2's match data (a few MB a tokenizing thread)");
    pcre2_jit_stack_assign(matcher->context, NULL, matcher->jit_stack);
    pcre2_set_heap_limit(matcher->context, TT_REGEX_HEAP_LIMIT_KIB);
    tt_regex_document_begin(matcher);
}

void tt_regex_document_begin(tt_regex_matcher *matcher) {
    matcher->budget = matcher->work_left = TT_REGEX_DOCUMENT_WORK;
    matcher->scanned_bytes = 0;
}

void tt_regex_matcher_free(tt_regex_matcher *matcher) {
    pcre2_match_data_free(matcher->match);
    pcre2_match_context_free(matcher->context);
    pcre2_jit_stack_free(matcher->jit_stack);
    *matcher = (tt_regex_matcher){0};
}

static uint64_t add_saturating(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

void tt_regex_scan_begin(tt_regex_scan *scan, const tt_regex *regex, const char *file, tt_regex_matcher *matcher,
                         size_t text_bytes) {
    *scan = (tt_regex_scan){.regex = regex, .file = file, .matcher = matcher, .text_bytes = text_bytes};
    const uint64_t earned = (uint64_t)text_bytes > UINT64_MAX / TT_REGEX_WORK_PER_BYTE
                                ? UINT64_MAX
                                : (uint64_t)text_bytes * TT_REGEX_WORK_PER_BYTE;
    matcher->budget = add_saturating(matcher->budget, earned);
    matcher->work_left = add_saturating(matcher->work_left, earned);
    matcher->scanned_bytes = add_saturating(matcher->scanned_bytes, text_bytes);
}

/* Every PCRE2 error a match can end in, as an error of the tokenizer (never an abort: a pattern is the input's). */
static noreturn void match_failed(const tt_regex_scan *scan, int rc, size_t at) {
    const tt_regex *re = scan->regex;
    if (rc == PCRE2_ERROR_MATCHLIMIT)
        tt_die("%s: %s: the pattern /%s/ went over the work budget of a document at byte %zu of a text of %zu bytes "
               "(%llu units of PCRE2's match limit: 2^16, and %d for each of the %llu bytes the document's patterns "
               "scanned): it backtracks too much (nested repeats such as (a+)+ are the usual cause); rewrite it in the "
               "tokenizer.json",
               scan->file, re->where, re->pattern, at, scan->text_bytes, (unsigned long long)scan->matcher->budget,
               TT_REGEX_WORK_PER_BYTE, (unsigned long long)scan->matcher->scanned_bytes);
    if (rc == PCRE2_ERROR_HEAPLIMIT || rc == PCRE2_ERROR_DEPTHLIMIT || rc == PCRE2_ERROR_JIT_STACKLIMIT)
        tt_die("%s: %s: the pattern /%s/ nests its backtracking too deep at byte %zu of a text of %zu bytes (more "
               "than %u MiB of PCRE2's backtracking memory): rewrite the pattern in the tokenizer.json (a repeated "
               "group, such as (ab)+ or (?:x|y)*, nests once per repetition; a repeated character or class does not)",
               scan->file, re->where, re->pattern, at, scan->text_bytes, TT_REGEX_HEAP_LIMIT_KIB >> 10);
    if (rc == PCRE2_ERROR_NOMEMORY)
        tt_die("%s: %s: out of host memory matching the pattern /%s/ at byte %zu of a text of %zu bytes", scan->file,
               re->where, re->pattern, at, scan->text_bytes);
    PCRE2_UCHAR message[256];
    if (pcre2_get_error_message(rc, message, sizeof message) < 0) strcpy((char *)message, "an unknown error");
    tt_die("%s: %s: PCRE2 cannot match the pattern /%s/ (error %d at byte %zu of a text of %zu bytes: %s): rewrite the "
           "pattern in the tokenizer.json without what PCRE2 refuses there",
           scan->file, re->where, re->pattern, rc, at, scan->text_bytes, (const char *)message);
}

bool tt_regex_find(tt_regex_scan *scan, const char *subject, size_t len, size_t from, size_t *start, size_t *end) {
    const tt_regex *re = scan->regex;
    tt_regex_matcher *m = scan->matcher;
    bool interpret = !re->jit;
    uint64_t limit = TT_REGEX_FIRST_ATTEMPT_WORK;
    for (;;) {
        if (m->work_left == 0) match_failed(scan, PCRE2_ERROR_MATCHLIMIT, from);
        if (limit > m->work_left) limit = m->work_left;
        if (limit > UINT32_MAX) limit = UINT32_MAX; /* pcre2_set_match_limit takes 32 bits */
        pcre2_set_match_limit(m->context, (uint32_t)limit);
        /* the text is valid UTF-8 (utf8.c made it so, and the normalizers keep it so): the interpreter need not
         * check it again on every match, which would read the rest of the text each time (quadratic over a
         * document); JIT code never checks */
        const int rc = interpret ? pcre2_match(re->code, (PCRE2_SPTR)subject, len, from,
                                               PCRE2_NO_JIT | PCRE2_NO_UTF_CHECK, m->match, m->context)
                                 : pcre2_jit_match(re->code, (PCRE2_SPTR)subject, len, from, 0, m->match, m->context);
        m->work_left -= limit;
        if (rc >= 0) { /* 0: a match with more groups than the ovector holds; the whole match is still in it */
            const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(m->match);
            /* PCRE2 before 10.38 let \K in a lookaround end a match before its start; nothing could split there */
            if (ov[1] < ov[0])
                tt_die("%s: %s: the pattern /%s/ made a match that ends (byte %zu) before it starts (byte %zu), with "
                       "\\K in a lookaround: remove the \\K from the pattern in the tokenizer.json",
                       scan->file, re->where, re->pattern, (size_t)ov[1], (size_t)ov[0]);
            *start = ov[0];
            *end = ov[1];
            return true;
        }
        if (rc == PCRE2_ERROR_NOMATCH) return false;
        if (rc == PCRE2_ERROR_MATCHLIMIT) {
            limit *= 2;
            continue;
        }
        /* JIT code recursing past its 8 MiB stack: the interpreter keeps its backtracking on the heap */
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT && !interpret) {
            interpret = true;
            continue;
        }
        match_failed(scan, rc, from);
    }
}
