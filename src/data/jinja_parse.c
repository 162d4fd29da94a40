/* The template lexer and parser. The lexer applies jinja2's whitespace rules as transformers
 * configures them (trim_blocks, lstrip_blocks, `-` and `+` modifiers on tags) while it splits
 * the source, so the parser sees text that is already trimmed. The parser is recursive descent
 * with jinja2's precedence; nesting is bounded so a hostile template cannot blow the stack. */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "data/jinja_internal.h"

#define TT_JINJA_MAX_NESTING 200

typedef enum {
    TK_TEXT,
    TK_VBEGIN,
    TK_VEND,
    TK_BBEGIN,
    TK_BEND,
    TK_NAME,
    TK_STR,
    TK_INT,
    TK_FLOAT,
    TK_OP,
    TK_EOF
} tk_kind;

typedef struct {
    tk_kind kind;
    int line, col;
    char *s; /* owned text for TEXT, NAME, STR, OP */
    size_t n;
    int64_t ival;
    double fval;
} token;

typedef struct {
    const char *src;
    size_t len;
    const char *origin;
    token *toks;
    size_t ntoks, cap, pos;
    char *err;
    size_t err_size;
    bool failed;
    int depth;
    tt_jinja_template *t;
    /* line_col's cursor: the line and column of source byte lc_pos. Tokens are pushed in source order, so each
     * position is counted from the last one (one pass over the template), not from its start. */
    size_t lc_pos;
    int lc_line, lc_col;
} parser;

static void perr(parser *p, int line, int col, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void perr(parser *p, int line, int col, const char *fmt, ...) {
    if (p->failed) return;
    p->failed = true;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (p->err && p->err_size) snprintf(p->err, p->err_size, "%s:%d:%d: %s", p->origin, line, col, msg);
}

/* The 1-based line and column of source byte pos. */
static void line_col(parser *p, size_t pos, int *line, int *col) {
    if (pos > p->len) pos = p->len;
    if (p->lc_line == 0 || pos < p->lc_pos) { /* the first call, or a position behind the cursor (an error's) */
        p->lc_pos = 0;
        p->lc_line = p->lc_col = 1;
    }
    for (; p->lc_pos < pos; p->lc_pos++) {
        if (p->src[p->lc_pos] == '\n') {
            p->lc_line++;
            p->lc_col = 1;
        } else {
            p->lc_col++;
        }
    }
    *line = p->lc_line;
    *col = p->lc_col;
}

static token *push_tok(parser *p, tk_kind k, size_t pos) {
    if (p->ntoks == p->cap) {
        p->cap = p->cap ? p->cap * 2 : 256;
        p->toks = tt_xrealloc(p->toks, tt_mul_size(p->cap, sizeof(token), "jinja tokens"), "jinja tokens");
    }
    token *t = &p->toks[p->ntoks++];
    memset(t, 0, sizeof(*t));
    t->kind = k;
    line_col(p, pos, &t->line, &t->col);
    return t;
}

static char *dup_n(const char *s, size_t n) {
    char *d = tt_xmalloc(n + 1, "jinja text");
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}

static bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

/* Finds the next tag opener at or after pos; returns its position or len. */
static size_t find_open(const parser *p, size_t pos) {
    for (size_t i = pos; i + 1 < p->len; i++)
        if (p->src[i] == '{' && (p->src[i + 1] == '{' || p->src[i + 1] == '%' || p->src[i + 1] == '#')) return i;
    return p->len;
}

/* Emits text [a, b) with the opener's stripping applied: `-` strips every trailing whitespace;
 * lstrip_blocks strips spaces and tabs between the line start and a block or comment tag. */
static void emit_text(parser *p, size_t a, size_t b, char opener, char modifier) {
    size_t end = b;
    if (modifier == '-') {
        while (end > a && is_ws(p->src[end - 1])) end--;
    } else if (modifier != '+' && (opener == '%' || opener == '#') && b < p->len) {
        size_t ls = end;
        while (ls > a && p->src[ls - 1] != '\n') ls--;
        bool line_start = ls > a || a == 0 || p->src[a - 1] == '\n';
        bool blank = true;
        for (size_t i = ls; i < end; i++)
            if (p->src[i] != ' ' && p->src[i] != '\t') blank = false;
        if (line_start && blank) end = ls;
    }
    if (end > a) {
        token *t = push_tok(p, TK_TEXT, a);
        t->s = dup_n(p->src + a, end - a);
        t->n = end - a;
    }
}

/* After a tag's closer at pos: `-` eats all whitespace, trim_blocks one newline for blocks
 * and comments (unless `+`). Returns the position where the next text starts. */
static size_t after_close(const parser *p, size_t pos, char modifier, bool block) {
    if (modifier == '-') {
        while (pos < p->len && is_ws(p->src[pos])) pos++;
    } else if (modifier != '+' && block) {
        if (pos < p->len && p->src[pos] == '\n') pos++;
        else if (pos + 1 < p->len && p->src[pos] == '\r' && p->src[pos + 1] == '\n') pos += 2;
    }
    return pos;
}

static bool lex_string(parser *p, size_t *ppos) {
    size_t pos = *ppos;
    char q = p->src[pos++];
    char *buf = tt_xmalloc(p->len - pos + 1, "jinja string");
    size_t n = 0;
    while (pos < p->len && p->src[pos] != q) {
        char c = p->src[pos++];
        if (c == '\\' && pos < p->len) {
            char e = p->src[pos++];
            switch (e) {
            case 'n': c = '\n'; break;
            case 't': c = '\t'; break;
            case 'r': c = '\r'; break;
            case '0': c = '\0'; break;
            case 'b': c = '\b'; break;
            case 'f': c = '\f'; break;
            case '\\': c = '\\'; break;
            case '\'': c = '\''; break;
            case '"': c = '"'; break;
            case '\n': continue;
            default:
                buf[n++] = '\\';
                c = e;
                break;
            }
        }
        buf[n++] = c;
    }
    int line, col;
    line_col(p, *ppos, &line, &col);
    if (pos >= p->len) {
        free(buf);
        perr(p, line, col, "unterminated string literal");
        return false;
    }
    token *t = push_tok(p, TK_STR, *ppos);
    t->s = buf;
    t->n = n;
    buf[n] = 0;
    *ppos = pos + 1;
    return true;
}

static const char *const ops2[] = {"//", "**", "==", "!=", "<=", ">="};

/* Lexes the inside of a tag up to its closer; returns the position after the closer. */
static size_t lex_tag(parser *p, size_t pos, char opener, char *close_mod) {
    char closer = opener == '{' ? '}' : '%';
    int depth = 0; /* brackets open: `}}` inside a dict literal does not close the tag */
    while (pos < p->len && !p->failed) {
        char c = p->src[pos];
        if (is_ws(c)) {
            pos++;
            continue;
        }
        if (depth == 0 && (c == '-' || c == '+') && pos + 2 < p->len && p->src[pos + 1] == closer &&
            p->src[pos + 2] == '}') {
            *close_mod = c;
            return pos + 3;
        }
        if (depth == 0 && c == closer && pos + 1 < p->len && p->src[pos + 1] == '}') {
            *close_mod = 0;
            return pos + 2;
        }
        if (isalpha((unsigned char)c) || c == '_') {
            size_t s = pos;
            while (pos < p->len && (isalnum((unsigned char)p->src[pos]) || p->src[pos] == '_')) pos++;
            token *t = push_tok(p, TK_NAME, s);
            t->s = dup_n(p->src + s, pos - s);
            t->n = pos - s;
            continue;
        }
        if (isdigit((unsigned char)c)) {
            size_t s = pos;
            bool is_float = false;
            while (pos < p->len && (isdigit((unsigned char)p->src[pos]) || p->src[pos] == '_')) pos++;
            if (pos + 1 < p->len && p->src[pos] == '.' && isdigit((unsigned char)p->src[pos + 1])) {
                is_float = true;
                pos++;
                while (pos < p->len && isdigit((unsigned char)p->src[pos])) pos++;
            }
            if (pos < p->len && (p->src[pos] == 'e' || p->src[pos] == 'E')) {
                size_t e = pos + 1;
                if (e < p->len && (p->src[e] == '+' || p->src[e] == '-')) e++;
                if (e < p->len && isdigit((unsigned char)p->src[e])) {
                    is_float = true;
                    pos = e;
                    while (pos < p->len && isdigit((unsigned char)p->src[pos])) pos++;
                }
            }
            char num[64];
            size_t k = 0;
            for (size_t i = s; i < pos && k < sizeof(num) - 1; i++)
                if (p->src[i] != '_') num[k++] = p->src[i];
            num[k] = 0;
            token *t = push_tok(p, is_float ? TK_FLOAT : TK_INT, s);
            if (is_float) {
                t->fval = strtod(num, NULL);
            } else {
                errno = 0;
                t->ival = strtoll(num, NULL, 10);
                if (errno) perr(p, t->line, t->col, "integer literal %s is out of range", num);
            }
            continue;
        }
        if (c == '\'' || c == '"') {
            if (!lex_string(p, &pos)) return pos;
            continue;
        }
        size_t oplen = 0;
        for (size_t i = 0; i < sizeof(ops2) / sizeof(*ops2); i++)
            if (pos + 1 < p->len && p->src[pos] == ops2[i][0] && p->src[pos + 1] == ops2[i][1]) oplen = 2;
        if (!oplen && strchr("+-*/%~<>=()[]{}.,:|!", c)) oplen = 1;
        if (!oplen) {
            int line, col;
            line_col(p, pos, &line, &col);
            perr(p, line, col, "unexpected character '%c' in tag", c);
            return pos;
        }
        if (c == '(' || c == '[' || c == '{') depth++;
        if ((c == ')' || c == ']' || c == '}') && depth > 0) depth--;
        token *t = push_tok(p, TK_OP, pos);
        t->s = dup_n(p->src + pos, oplen);
        t->n = oplen;
        pos += oplen;
    }
    int line, col;
    line_col(p, pos, &line, &col);
    perr(p, line, col, "unexpected end of template: a tag is not closed");
    return pos;
}

/* True when the block tag at pos (after the opener and modifier) is `raw`. */
static bool tag_is(const parser *p, size_t pos, const char *word) {
    while (pos < p->len && is_ws(p->src[pos])) pos++;
    size_t n = strlen(word);
    if (pos + n > p->len || memcmp(p->src + pos, word, n) != 0) return false;
    pos += n;
    while (pos < p->len && is_ws(p->src[pos])) pos++;
    if (pos < p->len && (p->src[pos] == '-' || p->src[pos] == '+')) pos++;
    return pos + 1 < p->len && p->src[pos] == '%' && p->src[pos + 1] == '}';
}

static void lex(parser *p) {
    size_t pos = 0;
    while (pos < p->len && !p->failed) {
        size_t open = find_open(p, pos);
        char opener = open < p->len ? p->src[open + 1] : 0;
        char mod = 0;
        if (open < p->len && open + 2 < p->len && (p->src[open + 2] == '-' || p->src[open + 2] == '+'))
            mod = p->src[open + 2];
        emit_text(p, pos, open, opener, mod);
        if (open >= p->len) break;
        size_t inner = open + 2 + (mod ? 1 : 0);
        if (opener == '#') {
            const char *end = NULL;
            for (size_t i = inner; i + 1 < p->len; i++)
                if (p->src[i] == '#' && p->src[i + 1] == '}') {
                    end = p->src + i;
                    break;
                }
            if (!end) {
                int line, col;
                line_col(p, open, &line, &col);
                perr(p, line, col, "unterminated comment");
                return;
            }
            size_t e = (size_t)(end - p->src);
            char cm = (e > inner && (p->src[e - 1] == '-' || p->src[e - 1] == '+')) ? p->src[e - 1] : 0;
            pos = after_close(p, e + 2, cm, true);
            continue;
        }
        if (opener == '%' && tag_is(p, inner, "raw")) {
            size_t s = inner;
            while (!(p->src[s] == '%' && p->src[s + 1] == '}')) s++;
            char rm = p->src[s - 1] == '-' ? '-' : 0;
            size_t body = after_close(p, s + 2, rm, true);
            size_t i = body;
            size_t endopen = p->len;
            for (; i + 1 < p->len; i++) {
                if (p->src[i] == '{' && p->src[i + 1] == '%') {
                    size_t in2 = i + 2;
                    if (in2 < p->len && (p->src[in2] == '-' || p->src[in2] == '+')) in2++;
                    if (tag_is(p, in2, "endraw")) {
                        endopen = i;
                        break;
                    }
                }
            }
            if (endopen >= p->len) {
                int line, col;
                line_col(p, open, &line, &col);
                perr(p, line, col, "raw block is not closed with endraw");
                return;
            }
            char em = p->src[endopen + 2] == '-' || p->src[endopen + 2] == '+' ? p->src[endopen + 2] : 0;
            emit_text(p, body, endopen, '%', em);
            size_t s2 = endopen + 2;
            while (!(p->src[s2] == '%' && p->src[s2 + 1] == '}')) s2++;
            char cm = p->src[s2 - 1] == '-' || p->src[s2 - 1] == '+' ? p->src[s2 - 1] : 0;
            pos = after_close(p, s2 + 2, cm, true);
            continue;
        }
        push_tok(p, opener == '{' ? TK_VBEGIN : TK_BBEGIN, open);
        char cm = 0;
        size_t after = lex_tag(p, inner, opener, &cm);
        if (p->failed) return;
        push_tok(p, opener == '{' ? TK_VEND : TK_BEND, after - 2);
        pos = after_close(p, after, cm, opener == '%');
    }
    push_tok(p, TK_EOF, p->len);
}

/* ---- parser ---- */

static tt_jnode *node(parser *p, tt_jnode_kind k, const token *at) {
    tt_jnode *n = tt_xcalloc(1, sizeof(*n), "jinja node");
    n->kind = k;
    n->line = at->line;
    n->col = at->col;
    tt_jinja_template *t = p->t;
    if (t->nall == t->capall) {
        t->capall = t->capall ? t->capall * 2 : 128;
        t->all = tt_xrealloc(t->all, tt_mul_size(t->capall, sizeof(*t->all), "jinja nodes"), "jinja nodes");
    }
    t->all[t->nall++] = n;
    return n;
}

static void add_kid(tt_jnode *n, tt_jnode *k) {
    if ((n->nkids & (n->nkids - 1)) == 0) /* grow at powers of two */
        n->kids = tt_xrealloc(n->kids, tt_mul_size(n->nkids ? n->nkids * 2 : 1, sizeof(*n->kids), "jinja"), "jinja");
    n->kids[n->nkids++] = k;
}

static token *peek(parser *p) { return &p->toks[p->pos]; }
static token *next(parser *p) {
    token *t = &p->toks[p->pos];
    if (t->kind != TK_EOF) p->pos++;
    return t;
}
static bool is_op(const token *t, const char *op) { return t->kind == TK_OP && strcmp(t->s, op) == 0; }
static bool is_name(const token *t, const char *nm) { return t->kind == TK_NAME && strcmp(t->s, nm) == 0; }
static bool accept_op(parser *p, const char *op) {
    if (is_op(peek(p), op)) {
        next(p);
        return true;
    }
    return false;
}
static bool accept_name(parser *p, const char *nm) {
    if (is_name(peek(p), nm)) {
        next(p);
        return true;
    }
    return false;
}
static const char *tok_desc(const token *t) {
    switch (t->kind) {
    case TK_VEND: return "end of print statement";
    case TK_BEND: return "end of statement block";
    case TK_EOF: return "end of template";
    case TK_TEXT: return "template text";
    default: return t->s ? t->s : "literal";
    }
}
static void expect_op(parser *p, const char *op) {
    token *t = peek(p);
    if (!accept_op(p, op)) perr(p, t->line, t->col, "expected '%s', got '%s'", op, tok_desc(t));
}
static char *expect_name(parser *p) {
    token *t = peek(p);
    if (t->kind != TK_NAME) {
        perr(p, t->line, t->col, "expected a name, got '%s'", tok_desc(t));
        return NULL;
    }
    next(p);
    return t->s;
}

static tt_jnode *parse_expr(parser *p, bool with_cond);
static tt_jnode *parse_or(parser *p);
static tt_jnode *parse_unary(parser *p);

static tt_jnode *set_str(tt_jnode *n, const char *s) {
    n->str = (char *)s; /* points at the token's text, which the template keeps */
    n->str_len = s ? strlen(s) : 0;
    return n;
}

static void parse_args(parser *p, tt_jnode *call) {
    /* after '(' */
    while (!p->failed && !is_op(peek(p), ")")) {
        token *t = peek(p);
        if (t->kind == TK_NAME && is_op(&p->toks[p->pos + 1], "=")) {
            next(p);
            next(p);
            tt_jnode *kw = set_str(node(p, JN_KWARG, t), t->s);
            kw->a = parse_expr(p, true);
            add_kid(call, kw);
        } else {
            add_kid(call, parse_expr(p, true));
        }
        if (!accept_op(p, ",")) break;
    }
    expect_op(p, ")");
}

static tt_jnode *parse_primary(parser *p) {
    token *t = next(p);
    tt_jnode *n = NULL;
    if (t->kind == TK_NAME) {
        if (!strcmp(t->s, "true") || !strcmp(t->s, "True")) {
            n = node(p, JN_CONST_BOOL, t);
            n->ival = 1;
        } else if (!strcmp(t->s, "false") || !strcmp(t->s, "False")) {
            n = node(p, JN_CONST_BOOL, t);
        } else if (!strcmp(t->s, "none") || !strcmp(t->s, "None")) {
            n = node(p, JN_CONST_NONE, t);
        } else {
            n = set_str(node(p, JN_NAME, t), t->s);
        }
    } else if (t->kind == TK_STR) {
        n = node(p, JN_CONST_STR, t);
        n->str = t->s;
        n->str_len = t->n;
        /* adjacent literals concatenate, as in Python */
        while (peek(p)->kind == TK_STR) {
            token *u = next(p);
            char *cat = tt_xmalloc(n->str_len + u->n + 1, "jinja string");
            memcpy(cat, n->str, n->str_len);
            memcpy(cat + n->str_len, u->s, u->n + 1);
            free(u->s);
            u->s = cat; /* the token owns it now */
            n->str = cat;
            n->str_len += u->n;
            u->n = n->str_len;
        }
    } else if (t->kind == TK_INT) {
        n = node(p, JN_CONST_INT, t);
        n->ival = t->ival;
    } else if (t->kind == TK_FLOAT) {
        n = node(p, JN_CONST_FLOAT, t);
        n->fval = t->fval;
    } else if (is_op(t, "(")) {
        if (accept_op(p, ")")) return node(p, JN_TUPLE, t);
        tt_jnode *e = parse_expr(p, true);
        if (is_op(peek(p), ",")) {
            n = node(p, JN_TUPLE, t);
            add_kid(n, e);
            while (accept_op(p, ",") && !is_op(peek(p), ")")) add_kid(n, parse_expr(p, true));
        } else {
            n = e;
        }
        expect_op(p, ")");
    } else if (is_op(t, "[")) {
        n = node(p, JN_LIST, t);
        while (!p->failed && !is_op(peek(p), "]")) {
            add_kid(n, parse_expr(p, true));
            if (!accept_op(p, ",")) break;
        }
        expect_op(p, "]");
    } else if (is_op(t, "{")) {
        n = node(p, JN_DICT, t);
        while (!p->failed && !is_op(peek(p), "}")) {
            add_kid(n, parse_expr(p, true));
            expect_op(p, ":");
            add_kid(n, parse_expr(p, true));
            if (!accept_op(p, ",")) break;
        }
        expect_op(p, "}");
    } else {
        perr(p, t->line, t->col, "unexpected '%s'", tok_desc(t));
        n = node(p, JN_CONST_NONE, t);
    }
    return n;
}

static tt_jnode *parse_postfix(parser *p, tt_jnode *n) {
    while (!p->failed) {
        token *t = peek(p);
        if (is_op(t, ".")) {
            next(p);
            token *a = next(p);
            if (a->kind == TK_NAME) {
                tt_jnode *g = set_str(node(p, JN_GETATTR, a), a->s);
                g->a = n;
                n = g;
            } else if (a->kind == TK_INT) {
                tt_jnode *g = node(p, JN_GETITEM, a);
                g->a = n;
                g->b = node(p, JN_CONST_INT, a);
                g->b->ival = a->ival;
                n = g;
            } else {
                perr(p, a->line, a->col, "expected an attribute name after '.'");
            }
        } else if (is_op(t, "[")) {
            next(p);
            tt_jnode *lo = NULL, *hi = NULL, *st = NULL;
            bool slice = false;
            if (!is_op(peek(p), ":")) lo = parse_expr(p, true);
            if (accept_op(p, ":")) {
                slice = true;
                if (!is_op(peek(p), "]") && !is_op(peek(p), ":")) hi = parse_expr(p, true);
                if (accept_op(p, ":") && !is_op(peek(p), "]")) st = parse_expr(p, true);
            }
            expect_op(p, "]");
            tt_jnode *g = node(p, slice ? JN_SLICE : JN_GETITEM, t);
            g->a = n;
            g->b = lo;
            g->c = hi;
            g->d = st;
            n = g;
        } else if (is_op(t, "(")) {
            next(p);
            tt_jnode *c = node(p, JN_CALL, t);
            c->a = n;
            parse_args(p, c);
            n = c;
        } else {
            break;
        }
    }
    return n;
}

static bool test_arg_starts(const token *t) {
    if (t->kind == TK_STR || t->kind == TK_INT || t->kind == TK_FLOAT) return true;
    if (t->kind == TK_OP) return is_op(t, "[") || is_op(t, "{") || is_op(t, "-");
    if (t->kind != TK_NAME) return false;
    static const char *const kw[] = {"else", "or", "and", "if", "is", "in", "not"};
    for (size_t i = 0; i < sizeof(kw) / sizeof(*kw); i++)
        if (!strcmp(t->s, kw[i])) return false;
    return true;
}

static tt_jnode *parse_filters(parser *p, tt_jnode *n) {
    while (!p->failed) {
        token *t = peek(p);
        if (is_op(t, "|")) {
            next(p);
            token *nm = peek(p);
            char *name = expect_name(p);
            if (name && !tt_jinja_is_filter(name)) perr(p, nm->line, nm->col, "no filter named '%s'", name);
            tt_jnode *f = set_str(node(p, JN_FILTER, nm), name);
            f->a = n;
            if (accept_op(p, "(")) parse_args(p, f);
            n = f;
        } else if (is_name(t, "is")) {
            next(p);
            bool neg = accept_name(p, "not");
            token *nm = peek(p);
            char *name = expect_name(p);
            if (name && !tt_jinja_is_test(name)) perr(p, nm->line, nm->col, "no test named '%s'", name);
            tt_jnode *f = set_str(node(p, JN_TEST, nm), name);
            f->a = n;
            f->ival = neg;
            if (accept_op(p, "(")) {
                parse_args(p, f);
            } else if (test_arg_starts(peek(p))) {
                add_kid(f, parse_postfix(p, parse_primary(p)));
            }
            n = f;
        } else {
            break;
        }
        n = parse_postfix(p, n);
    }
    return n;
}

static tt_jnode *parse_unary(parser *p) {
    token *t = peek(p);
    if (++p->depth > TT_JINJA_MAX_NESTING) {
        perr(p, t->line, t->col, "expression nested deeper than %d levels", TT_JINJA_MAX_NESTING);
        return node(p, JN_CONST_NONE, t);
    }
    tt_jnode *n;
    if (is_op(t, "-") || is_op(t, "+")) {
        next(p);
        n = set_str(node(p, JN_UNARY, t), t->s);
        n->a = parse_unary(p);
    } else {
        n = parse_filters(p, parse_postfix(p, parse_primary(p)));
    }
    p->depth--;
    return n;
}

static tt_jnode *binop(parser *p, const token *t, const char *op, tt_jnode *a, tt_jnode *b) {
    tt_jnode *n = set_str(node(p, JN_BINOP, t), op);
    n->a = a;
    n->b = b;
    return n;
}

static tt_jnode *parse_pow(parser *p) {
    tt_jnode *n = parse_unary(p);
    while (is_op(peek(p), "**")) {
        token *t = next(p);
        n = binop(p, t, "**", n, parse_unary(p));
    }
    return n;
}
static tt_jnode *parse_mul(parser *p) {
    tt_jnode *n = parse_pow(p);
    for (;;) {
        token *t = peek(p);
        if (is_op(t, "*") || is_op(t, "/") || is_op(t, "//") || is_op(t, "%")) {
            next(p);
            n = binop(p, t, t->s, n, parse_pow(p));
        } else {
            return n;
        }
    }
}
static tt_jnode *parse_add(parser *p) {
    tt_jnode *n = parse_mul(p);
    for (;;) {
        token *t = peek(p);
        if (is_op(t, "+") || is_op(t, "-")) {
            next(p);
            n = binop(p, t, t->s, n, parse_mul(p));
        } else {
            return n;
        }
    }
}
static tt_jnode *parse_concat(parser *p) {
    tt_jnode *n = parse_add(p);
    while (is_op(peek(p), "~")) {
        token *t = next(p);
        n = binop(p, t, "~", n, parse_add(p));
    }
    return n;
}
static tt_jnode *parse_compare(parser *p) {
    tt_jnode *n = parse_concat(p);
    for (;;) {
        token *t = peek(p);
        if (is_op(t, "==") || is_op(t, "!=") || is_op(t, "<") || is_op(t, ">") || is_op(t, "<=") || is_op(t, ">=")) {
            next(p);
            n = binop(p, t, t->s, n, parse_concat(p));
        } else if (is_name(t, "in")) {
            next(p);
            n = binop(p, t, "in", n, parse_concat(p));
        } else if (is_name(t, "not") && is_name(&p->toks[p->pos + 1], "in")) {
            next(p);
            next(p);
            n = binop(p, t, "notin", n, parse_concat(p));
        } else {
            return n;
        }
    }
}
static tt_jnode *parse_not(parser *p) {
    token *t = peek(p);
    if (is_name(t, "not")) {
        next(p);
        if (++p->depth > TT_JINJA_MAX_NESTING) {
            perr(p, t->line, t->col, "expression nested deeper than %d levels", TT_JINJA_MAX_NESTING);
            return node(p, JN_CONST_NONE, t);
        }
        tt_jnode *n = node(p, JN_NOT, t);
        n->a = parse_not(p);
        p->depth--;
        return n;
    }
    return parse_compare(p);
}
static tt_jnode *parse_and(parser *p) {
    tt_jnode *n = parse_not(p);
    while (is_name(peek(p), "and")) {
        token *t = next(p);
        tt_jnode *m = node(p, JN_AND, t);
        m->a = n;
        m->b = parse_not(p);
        n = m;
    }
    return n;
}
static tt_jnode *parse_or(parser *p) {
    tt_jnode *n = parse_and(p);
    while (is_name(peek(p), "or")) {
        token *t = next(p);
        tt_jnode *m = node(p, JN_OR, t);
        m->a = n;
        m->b = parse_and(p);
        n = m;
    }
    return n;
}
static tt_jnode *parse_expr(parser *p, bool with_cond) {
    token *t0 = peek(p);
    if (++p->depth > TT_JINJA_MAX_NESTING) {
        perr(p, t0->line, t0->col, "expression nested deeper than %d levels", TT_JINJA_MAX_NESTING);
        return node(p, JN_CONST_NONE, t0);
    }
    tt_jnode *n = parse_or(p);
    while (with_cond && is_name(peek(p), "if")) {
        token *t = next(p);
        tt_jnode *c = node(p, JN_COND, t);
        c->a = n;
        c->b = parse_or(p);
        if (accept_name(p, "else")) c->c = parse_expr(p, true);
        n = c;
    }
    p->depth--;
    return n;
}

/* ---- statements ---- */

static tt_jnode *parse_body(parser *p, const char *const *ends, const char **which);

static void expect_bend(parser *p) {
    token *t = peek(p);
    if (t->kind != TK_BEND) perr(p, t->line, t->col, "expected end of statement block, got '%s'", tok_desc(t));
    else next(p);
}

static tt_jnode *parse_if(parser *p, const token *at) {
    tt_jnode *n = node(p, JN_IF, at);
    n->a = parse_expr(p, true);
    expect_bend(p);
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    const char *which = NULL;
    n->body = parse_body(p, ends, &which);
    if (p->failed) return n;
    if (which && !strcmp(which, "elif")) {
        tt_jnode *b = node(p, JN_BODY, at);
        add_kid(b, parse_if(p, at));
        n->else_body = b;
        return n; /* the nested if consumed endif */
    }
    if (which && !strcmp(which, "else")) {
        expect_bend(p);
        static const char *const ends2[] = {"endif", NULL};
        n->else_body = parse_body(p, ends2, &which);
    }
    expect_bend(p);
    return n;
}

static tt_jnode *parse_target(parser *p) {
    token *t = peek(p);
    char *nm = expect_name(p);
    tt_jnode *n = set_str(node(p, JN_NAME, t), nm);
    if (is_op(peek(p), ".")) {
        next(p);
        token *a = peek(p);
        char *attr = expect_name(p);
        tt_jnode *g = set_str(node(p, JN_GETATTR, a), attr);
        g->a = n;
        return g;
    }
    return n;
}

static tt_jnode *parse_for(parser *p, const token *at) {
    tt_jnode *n = node(p, JN_FOR, at);
    do {
        token *t = peek(p);
        char *nm = expect_name(p);
        add_kid(n, set_str(node(p, JN_NAME, t), nm));
    } while (accept_op(p, ","));
    if (!accept_name(p, "in")) perr(p, peek(p)->line, peek(p)->col, "expected 'in' in for loop");
    n->a = parse_or(p);
    if (accept_name(p, "if")) n->b = parse_expr(p, false);
    if (is_name(peek(p), "recursive")) perr(p, peek(p)->line, peek(p)->col, "recursive for loops are not supported");
    expect_bend(p);
    static const char *const ends[] = {"else", "endfor", NULL};
    const char *which = NULL;
    n->body = parse_body(p, ends, &which);
    if (which && !strcmp(which, "else")) {
        expect_bend(p);
        static const char *const ends2[] = {"endfor", NULL};
        n->else_body = parse_body(p, ends2, &which);
    }
    expect_bend(p);
    return n;
}

static tt_jnode *parse_set(parser *p, const token *at) {
    tt_jnode *first = parse_target(p);
    if (is_op(peek(p), "|") || peek(p)->kind == TK_BEND) {
        if (is_op(peek(p), "|")) perr(p, peek(p)->line, peek(p)->col, "filtered set blocks are not supported");
        tt_jnode *n = node(p, JN_SET_BLOCK, at);
        add_kid(n, first);
        expect_bend(p);
        static const char *const ends[] = {"endset", NULL};
        const char *which = NULL;
        n->body = parse_body(p, ends, &which);
        expect_bend(p);
        return n;
    }
    tt_jnode *n = node(p, JN_SET, at);
    add_kid(n, first);
    while (accept_op(p, ",")) add_kid(n, parse_target(p));
    expect_op(p, "=");
    tt_jnode *v = parse_expr(p, true);
    if (is_op(peek(p), ",")) {
        tt_jnode *tup = node(p, JN_TUPLE, at);
        add_kid(tup, v);
        while (accept_op(p, ",")) add_kid(tup, parse_expr(p, true));
        v = tup;
    }
    n->a = v;
    expect_bend(p);
    return n;
}

static tt_jnode *parse_macro(parser *p, const token *at) {
    tt_jnode *n = node(p, JN_MACRO, at);
    set_str(n, expect_name(p));
    expect_op(p, "(");
    while (!p->failed && !is_op(peek(p), ")")) {
        token *t = peek(p);
        tt_jnode *prm = set_str(node(p, JN_NAME, t), expect_name(p));
        if (accept_op(p, "=")) prm->a = parse_expr(p, true);
        add_kid(n, prm);
        if (!accept_op(p, ",")) break;
    }
    expect_op(p, ")");
    expect_bend(p);
    static const char *const ends[] = {"endmacro", NULL};
    const char *which = NULL;
    n->body = parse_body(p, ends, &which);
    if (peek(p)->kind == TK_NAME) next(p); /* {% endmacro name %} */
    expect_bend(p);
    return n;
}

/* Parses statements until one of `ends` (a block tag name) or EOF; leaves the parser after the
 * end tag's name and reports which one it was. */
static tt_jnode *parse_body(parser *p, const char *const *ends, const char **which) {
    tt_jnode *body = node(p, JN_BODY, peek(p));
    if (++p->depth > TT_JINJA_MAX_NESTING) {
        perr(p, peek(p)->line, peek(p)->col, "blocks nested deeper than %d levels", TT_JINJA_MAX_NESTING);
        return body;
    }
    *which = NULL;
    while (!p->failed) {
        token *t = next(p);
        if (t->kind == TK_EOF) {
            if (ends)
                perr(p, t->line, t->col, "unexpected end of template: expected '%s'",
                     ends[0][0] == 'e' ? ends[0] : "end tag");
            break;
        }
        if (t->kind == TK_TEXT) {
            tt_jnode *n = node(p, JN_TEXT, t);
            n->str = t->s;
            n->str_len = t->n;
            add_kid(body, n);
        } else if (t->kind == TK_VBEGIN) {
            tt_jnode *n = node(p, JN_OUTPUT, t);
            n->a = parse_expr(p, true);
            token *e = next(p);
            if (e->kind != TK_VEND) perr(p, e->line, e->col, "expected end of print statement, got '%s'", tok_desc(e));
            add_kid(body, n);
        } else if (t->kind == TK_BBEGIN) {
            token *k = next(p);
            if (k->kind != TK_NAME) {
                perr(p, k->line, k->col, "expected a statement name, got '%s'", tok_desc(k));
                break;
            }
            bool ended = false;
            for (size_t i = 0; ends && ends[i]; i++)
                if (!strcmp(k->s, ends[i])) {
                    *which = ends[i];
                    ended = true;
                }
            if (ended) break;
            const char *s = k->s;
            if (!strcmp(s, "if")) {
                add_kid(body, parse_if(p, k));
            } else if (!strcmp(s, "for")) {
                add_kid(body, parse_for(p, k));
            } else if (!strcmp(s, "set")) {
                add_kid(body, parse_set(p, k));
            } else if (!strcmp(s, "macro")) {
                add_kid(body, parse_macro(p, k));
            } else if (!strcmp(s, "break") || !strcmp(s, "continue")) {
                add_kid(body, node(p, s[0] == 'b' ? JN_BREAK : JN_CONTINUE, k));
                expect_bend(p);
            } else if (!strcmp(s, "generation")) {
                tt_jnode *n = node(p, JN_GENERATION, k);
                expect_bend(p);
                static const char *const e2[] = {"endgeneration", NULL};
                const char *w = NULL;
                n->body = parse_body(p, e2, &w);
                expect_bend(p);
                add_kid(body, n);
            } else {
                bool is_end = !strncmp(s, "end", 3) || !strcmp(s, "else") || !strcmp(s, "elif");
                if (is_end)
                    perr(p, k->line, k->col, "unexpected '%s'%s%s", s, ends ? ", expected " : "", ends ? ends[0] : "");
                else perr(p, k->line, k->col, "unsupported statement '%s'", s);
            }
        } else {
            perr(p, t->line, t->col, "unexpected '%s'", tok_desc(t));
        }
    }
    p->depth--;
    return body;
}

tt_jinja_template *tt_jinja_parse(const char *source, size_t len, const char *origin, char *err, size_t err_size) {
    parser p = {0};
    p.src = source;
    p.len = len;
    p.origin = origin ? origin : "<template>";
    p.err = err;
    p.err_size = err_size;
    if (err && err_size) err[0] = 0;
    tt_jinja_template *t = tt_xcalloc(1, sizeof(*t), "jinja template");
    t->origin = tt_xstrdup(p.origin);
    p.t = t;
    lex(&p);
    if (!p.failed) {
        const char *which = NULL;
        t->root = parse_body(&p, NULL, &which);
    }
    /* Token texts that nodes point at stay alive; the rest are freed. Simplest: keep every
     * token text in one list owned by the template (a JN_BODY holder). */
    tt_jnode *keep = NULL;
    if (!p.failed) {
        keep = node(&p, JN_BODY, &p.toks[0]);
        for (size_t i = 0; i < p.ntoks; i++)
            if (p.toks[i].s) {
                tt_jnode *h = node(&p, JN_TEXT, &p.toks[i]);
                h->str = p.toks[i].s;
                h->ival = 1; /* owns its text */
                add_kid(keep, h);
            }
    } else {
        for (size_t i = 0; i < p.ntoks; i++) free(p.toks[i].s);
    }
    free(p.toks);
    if (p.failed) {
        for (size_t i = 0; i < t->nall; i++) {
            free(t->all[i]->kids);
            free(t->all[i]);
        }
        free(t->all);
        free(t->origin);
        free(t);
        return NULL;
    }
    return t;
}

void tt_jinja_free(tt_jinja_template *t) {
    if (!t) return;
    for (size_t i = 0; i < t->nall; i++) {
        if (t->all[i]->kind == JN_TEXT && t->all[i]->ival == 1) free(t->all[i]->str);
        free(t->all[i]->kids);
        free(t->all[i]);
    }
    free(t->all);
    free(t->origin);
    free(t);
}

bool tt_jinja_has_generation(const tt_jinja_template *t) {
    for (size_t i = 0; i < t->nall; i++)
        if (t->all[i]->kind == JN_GENERATION) return true;
    return false;
}
