#include "data/jinja_unicode.h"

#include <utf8proc.h>

int32_t tt_py_next(const char *s, size_t n, size_t *at) {
    utf8proc_int32_t cp;
    const utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s + *at, (utf8proc_ssize_t)(n - *at), &cp);
    if (k < 1) {
        const unsigned char byte = (unsigned char)s[(*at)++];
        return -1 - (int32_t)byte;
    }
    *at += (size_t)k;
    return cp;
}

int32_t tt_py_prev(const char *s, size_t end, size_t *start) {
    size_t at = end;
    /* back over continuation bytes to a lead byte, at most 3 of them */
    while (at > 0 && end - at < 4 && ((unsigned char)s[at - 1] & 0xC0) == 0x80) at--;
    if (at > 0) at--;
    size_t next = at;
    const int32_t cp = tt_py_next(s, end, &next);
    if (next != end) { /* not one sequence: the last byte alone */
        *start = end - 1;
        return -1 - (int32_t)(unsigned char)s[end - 1];
    }
    *start = at;
    return cp;
}

bool tt_py_isspace(int32_t cp) {
    if (cp < 0) return false;
    const utf8proc_property_t *p = utf8proc_get_property(cp);
    return p->bidi_class == UTF8PROC_BIDI_CLASS_WS || p->bidi_class == UTF8PROC_BIDI_CLASS_B ||
           p->bidi_class == UTF8PROC_BIDI_CLASS_S || p->category == UTF8PROC_CATEGORY_ZS;
}

bool tt_py_isalpha(int32_t cp) {
    if (cp < 0) return false;
    const utf8proc_category_t c = utf8proc_category(cp);
    return c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LL || c == UTF8PROC_CATEGORY_LT ||
           c == UTF8PROC_CATEGORY_LM || c == UTF8PROC_CATEGORY_LO;
}

bool tt_py_isdigit(int32_t cp) { /* Python: Numeric_Type Digit or Decimal; Nd is the decimal digits (the common case) */
    return cp >= 0 && utf8proc_category(cp) == UTF8PROC_CATEGORY_ND;
}

bool tt_py_is_upper(int32_t cp) {
    if (cp < 0) return false;
    const utf8proc_category_t c = utf8proc_category(cp);
    return c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LT;
}

bool tt_py_is_lower(int32_t cp) { return cp >= 0 && utf8proc_category(cp) == UTF8PROC_CATEGORY_LL; }

bool tt_py_is_cased(int32_t cp) { return tt_py_is_upper(cp) || tt_py_is_lower(cp); }

/* Case-ignorable for the final-sigma rule: marks, format characters, modifiers and the word-internal punctuation
 * Unicode lists (apostrophe, period, colon, middle dot ...). */
static bool case_ignorable(int32_t cp) {
    if (cp < 0) return false;
    const utf8proc_category_t c = utf8proc_category(cp);
    return c == UTF8PROC_CATEGORY_MN || c == UTF8PROC_CATEGORY_ME || c == UTF8PROC_CATEGORY_CF ||
           c == UTF8PROC_CATEGORY_LM || c == UTF8PROC_CATEGORY_SK || cp == '\'' || cp == '.' || cp == ':' ||
           cp == '^' || cp == '`' || cp == 0x00B7 || cp == 0x2018 || cp == 0x2019 || cp == 0x2024 || cp == 0x2027;
}

/* Σ at s[start .. end) lower-cases to ς when a cased letter comes before it and none after it (case-ignorable
 * characters skipped), as Python's str.lower() applies Unicode's Final_Sigma condition. */
static bool final_sigma(const char *s, size_t n, size_t start, size_t end) {
    bool before = false;
    for (size_t at = start; at > 0;) {
        const int32_t cp = tt_py_prev(s, at, &at);
        if (case_ignorable(cp)) continue;
        before = tt_py_is_cased(cp);
        break;
    }
    if (!before) return false;
    for (size_t at = end; at < n;) {
        const int32_t cp = tt_py_next(s, n, &at);
        if (case_ignorable(cp)) continue;
        return !tt_py_is_cased(cp);
    }
    return true;
}

static void put_cp(tt_jbuf *out, int32_t cp) {
    if (cp < 0) {
        const char byte = (char)(-1 - cp);
        tt_jbuf_put(out, &byte, 1);
        return;
    }
    utf8proc_uint8_t bytes[4];
    const utf8proc_ssize_t k = utf8proc_encode_char(cp, bytes);
    tt_jbuf_put(out, (const char *)bytes, (size_t)k);
}

/* Python's full upper-case mappings where they are longer than one code point (SpecialCasing.txt's unconditional
 * ones that chat content meets: ß and the Latin ligatures); the others take utf8proc's simple mapping. */
static const char *special_upper(int32_t cp) {
    switch (cp) {
    case 0x00DF: return "SS";
    case 0xFB00: return "FF";
    case 0xFB01: return "FI";
    case 0xFB02: return "FL";
    case 0xFB03: return "FFI";
    case 0xFB04: return "FFL";
    case 0xFB05: return "ST";
    case 0xFB06: return "ST";
    default: return NULL;
    }
}

static void put_upper(tt_jbuf *out, int32_t cp) {
    const char *special = special_upper(cp);
    if (special) tt_jbuf_puts(out, special);
    else put_cp(out, cp < 0 ? cp : utf8proc_toupper(cp));
}

static void put_title(tt_jbuf *out, int32_t cp) {
    if (cp == 0x00DF) tt_jbuf_puts(out, "Ss");
    else if (cp >= 0xFB00 && cp <= 0xFB06) {
        const char *upper = special_upper(cp);
        put_cp(out, upper[0]);
        for (const char *c = upper + 1; *c; c++) put_cp(out, *c - 'A' + 'a');
    } else put_cp(out, cp < 0 ? cp : utf8proc_totitle(cp));
}

static void put_lower(tt_jbuf *out, const char *s, size_t n, size_t start, size_t end, int32_t cp) {
    if (cp == 0x0130) { /* İ: i and a combining dot above */
        tt_jbuf_puts(out, "i\xCC\x87");
    } else if (cp == 0x03A3 && final_sigma(s, n, start, end)) {
        put_cp(out, 0x03C2);
    } else {
        put_cp(out, cp < 0 ? cp : utf8proc_tolower(cp));
    }
}

static bool jinja_word_separator(int32_t cp) {
    return tt_py_isspace(cp) || cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<';
}

void tt_py_map_case(tt_jbuf *out, const char *s, size_t n, tt_py_case mode) {
    bool word_start = true;
    for (size_t at = 0; at < n;) {
        const size_t start = at;
        const int32_t cp = tt_py_next(s, n, &at);
        switch (mode) {
        case TT_PY_UPPER: put_upper(out, cp); break;
        case TT_PY_LOWER: put_lower(out, s, n, start, at, cp); break;
        case TT_PY_CAPITALIZE:
            if (start == 0) put_title(out, cp);
            else put_lower(out, s, n, start, at, cp);
            break;
        case TT_PY_JINJA_TITLE:
            /* jinja2: each piece between separator runs is piece[0].upper() + piece[1:].lower() */
            if (jinja_word_separator(cp)) {
                put_cp(out, cp);
                word_start = true;
            } else if (word_start) {
                put_upper(out, cp);
                word_start = false;
            } else {
                put_lower(out, s, n, start, at, cp);
            }
            break;
        }
    }
}
