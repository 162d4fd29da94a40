/* split_thinking (chat_template.h): an assistant's content with its reasoning inline, "<think>R</think>C",
 * becomes content C and reasoning_content R, as axolotl's ChatTemplateStrategy.transform_message splits it, so
 * that a template which renders reasoning itself (Qwen3's: only in the turns after the last user query) gets it
 * apart. The first of the tag pairs found whole in the content wins; the text before its opening tag is left out;
 * a "<|begin_of_solution|>C<|end_of_solution|>" in what follows the reasoning is the content. Whitespace is
 * stripped as Python's str.strip() strips it (Unicode's, not only ASCII's), as axolotl does. */
#include <string.h>

#include "data/chat_internal.h"

static const char *const thinking_open[] = {"<think>", "<reasoning>", "<|begin_of_thought|>"};
static const char *const thinking_close[] = {"</think>", "</reasoning>", "<|end_of_thought|>"};
static const char solution_open[] = "<|begin_of_solution|>", solution_close[] = "<|end_of_solution|>";

/* The byte length of the character at s (of n bytes) if Python's str.isspace() holds for it, else 0. */
static size_t space_length(const unsigned char *s, size_t n) {
    if (n == 0) return 0;
    if ((s[0] >= 0x09 && s[0] <= 0x0d) || (s[0] >= 0x1c && s[0] <= 0x20)) return 1;
    if (s[0] < 0x80) return 0;
    uint32_t cp;
    size_t len;
    if ((s[0] & 0xe0) == 0xc0 && n >= 2) {
        cp = (uint32_t)(s[0] & 0x1f) << 6 | (s[1] & 0x3f);
        len = 2;
    } else if ((s[0] & 0xf0) == 0xe0 && n >= 3) {
        cp = (uint32_t)(s[0] & 0x0f) << 12 | (uint32_t)(s[1] & 0x3f) << 6 | (s[2] & 0x3f);
        len = 3;
    } else {
        return 0; /* four-byte characters hold no spaces */
    }
    bool space = cp == 0x85 || cp == 0xa0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 ||
                 cp == 0x2029 || cp == 0x202f || cp == 0x205f || cp == 0x3000;
    return space ? len : 0;
}

/* [*a, *b) of s without leading (left) and trailing (right) whitespace. */
static void strip(const char *s, size_t *a, size_t *b, bool left, bool right) {
    const unsigned char *u = (const unsigned char *)s;
    for (size_t n; left && *a < *b && (n = space_length(u + *a, *b - *a)) > 0;) *a += n;
    while (right && *b > *a) {
        size_t start = *b - 1; /* the last character's first byte */
        while (start > *a && (u[start] & 0xc0) == 0x80) start--;
        if (space_length(u + start, *b - start) != *b - start) break;
        *b = start;
    }
}

static const char *find(const char *s, size_t n, const char *needle) { return memmem(s, n, needle, strlen(needle)); }

void tt_chat_split_thinking(json_t *message) {
    const char *role = json_string_value(json_object_get(message, "role"));
    json_t *content = json_object_get(message, "content");
    if (!role || strcmp(role, "assistant") != 0 || !json_is_string(content)) return;
    const char *text = json_string_value(content);
    const size_t n = json_string_length(content);
    for (size_t pair = 0; pair < sizeof thinking_open / sizeof thinking_open[0]; pair++) {
        const char *open = find(text, n, thinking_open[pair]), *close = find(text, n, thinking_close[pair]);
        if (!open || !close) continue;
        /* Python's content[open + len(tag) : close], empty when the closing tag comes first */
        size_t a = (size_t)(open - text) + strlen(thinking_open[pair]), b = (size_t)(close - text);
        if (b < a) b = a;
        strip(text, &a, &b, true, true);
        json_t *reasoning = json_stringn(text + a, b - a);
        size_t rest = (size_t)(close - text) + strlen(thinking_close[pair]), rest_end = n;
        strip(text, &rest, &rest_end, true, false);
        const char *s_open = find(text + rest, rest_end - rest, solution_open);
        const char *s_close = find(text + rest, rest_end - rest, solution_close);
        size_t c = rest, d = rest_end;
        if (s_open && s_close) {
            c = (size_t)(s_open - text) + strlen(solution_open);
            d = (size_t)(s_close - text);
            if (d < c) d = c;
            strip(text, &c, &d, true, true);
        }
        json_t *answer = json_stringn(text + c, d - c);
        json_object_set_new(message, "reasoning_content", reasoning);
        json_object_set_new(message, "content", answer); /* text is not used after this */
        return;
    }
}
