/* Added tokens (tokenizer.json's added_tokens) are found in the text before the model sees it,
 * as tokenizers' AddedVocabulary::find_matches finds them: non-overlapping, leftmost match
 * first and at one position the longest token; a single_word token only where no word
 * character touches it; lstrip / rstrip take the whitespace on that side into the token. */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "core/check.h"
#include "data/tokenizer_internal.h"

static const tt_added_token *sort_tokens;
static int by_length_descending(const void *a, const void *b) {
    size_t la = sort_tokens[*(const int32_t *)a].len, lb = sort_tokens[*(const int32_t *)b].len;
    if (la != lb) return la > lb ? -1 : 1;
    return *(const int32_t *)a - *(const int32_t *)b; /* equal length: the first listed wins */
}

void tt_added_set_build(tt_added_set *set, const tt_added_token *tokens, int32_t count, bool normalized) {
    memset(set, 0, sizeof *set);
    for (int32_t i = 0; i < count; i++) {
        if (tokens[i].normalized != normalized || tokens[i].len == 0) continue;
        unsigned char first = (unsigned char)tokens[i].content[0];
        int32_t n = set->count_first_byte[first]++;
        set->by_first_byte[first] =
            tt_xrealloc(set->by_first_byte[first], sizeof(int32_t) * (size_t)(n + 1), "added tokens");
        set->by_first_byte[first][n] = i;
        set->count++;
    }
    sort_tokens = tokens; /* load is single-threaded */
    for (int b = 0; b < 256; b++)
        if (set->count_first_byte[b] > 1)
            qsort(set->by_first_byte[b], (size_t)set->count_first_byte[b], sizeof(int32_t), by_length_descending);
}

void tt_added_set_free(tt_added_set *set) {
    for (int b = 0; b < 256; b++) free(set->by_first_byte[b]);
    memset(set, 0, sizeof *set);
}

/* Rust regex's \w: alphabetic, marks, decimal digits, connector punctuation, joiners. */
static bool is_word_char(int32_t cp) {
    if (cp < 0x80) return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') || cp == '_';
    if (cp == 0x200C || cp == 0x200D) return true;
    switch (utf8proc_category(cp)) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_PC: return true;
    default: return false;
    }
}

/* Unicode White_Space (Rust's char::is_whitespace and regex \s). */
static bool is_white_space(int32_t cp) {
    return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
           cp == 0x3000;
}

/* The code point ending at s[end) (s valid UTF-8, end > 0). */
static int32_t char_before(const char *s, size_t end, size_t *start) {
    size_t i = end - 1;
    while (i > 0 && ((unsigned char)s[i] & 0xC0) == 0x80) i--;
    int len;
    *start = i;
    return tt_utf8_decode(s + i, &len);
}

void tt_added_find(const tt_added_token *tokens, const tt_added_set *set, const char *s, size_t len, tt_splits *out) {
    size_t start_offset = 0, pos = 0;
    while (pos < len && set->count > 0) {
        unsigned char b = (unsigned char)s[pos];
        int32_t n = set->count_first_byte[b];
        int32_t found = -1;
        for (int32_t k = 0; k < n; k++) {
            const tt_added_token *t = &tokens[set->by_first_byte[b][k]];
            if (t->len <= len - pos && memcmp(s + pos, t->content, t->len) == 0) {
                found = set->by_first_byte[b][k];
                break;
            }
        }
        if (found < 0) {
            pos++;
            continue;
        }
        const tt_added_token *t = &tokens[found];
        size_t start = pos, stop = pos + t->len;
        pos = stop; /* the matcher goes on after the match, whatever is done with it */
        if (t->single_word) {
            size_t before;
            int len_after;
            bool start_space = start == 0 || !is_word_char(char_before(s, start, &before));
            bool stop_space = stop == len || !is_word_char(tt_utf8_decode(s + stop, &len_after));
            if (!start_space || !stop_space) continue;
        }
        if (t->lstrip) {
            size_t new_start = start;
            while (new_start > 0) {
                size_t before;
                if (!is_white_space(char_before(s, new_start, &before))) break;
                new_start = before;
            }
            start = new_start > start_offset ? new_start : start_offset;
        }
        if (t->rstrip) {
            while (stop < len) {
                int l;
                if (!is_white_space(tt_utf8_decode(s + stop, &l))) break;
                stop += (size_t)l;
            }
        }
        if (start_offset < start) tt_splits_push(out, start_offset, start, -1);
        tt_splits_push(out, start, stop, t->id);
        start_offset = stop;
    }
    if (start_offset < len) tt_splits_push(out, start_offset, len, -1);
}
