/* A Jinja-subset interpreter for Hugging Face chat templates (tokenizer_config.json's
 * `chat_template`). It renders as transformers' apply_chat_template does: jinja2 with
 * trim_blocks and lstrip_blocks, loop controls, the `tojson` filter, the `raise_exception` and
 * `strftime_now` globals and the `{% generation %}` tag, whose output byte ranges are recorded
 * (that is what return_assistant_tokens_mask is built from). Constructs outside the subset are
 * parse errors naming the construct and its line, never a silent wrong render. */
#ifndef TT_DATA_JINJA_H
#define TT_DATA_JINJA_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct tt_jinja_template tt_jinja_template;

/* Parses a template; on a syntax error returns NULL and writes a message with line and column
 * (origin names the source, e.g. the file path) into err. */
tt_jinja_template *tt_jinja_parse(const char *source, size_t len, const char *origin, char *err, size_t err_size);
void tt_jinja_free(tt_jinja_template *t);
/* True when the template has a {% generation %} block (so renders mark assistant output). */
bool tt_jinja_has_generation(const tt_jinja_template *t);

typedef struct tt_jinja_output {
    char *text;
    size_t len;
    size_t *generation_spans; /* [2 * span_count] byte [start, end) of each {% generation %} block */
    int64_t span_count;
} tt_jinja_output;

/* Renders with context (a JSON object: messages, tools, add_generation_prompt, bos_token, ...).
 * Returns false with a message in err on a runtime error, raise_exception(msg) included (the
 * message text is the template's). */
bool tt_jinja_render(const tt_jinja_template *t, const json_t *context, tt_jinja_output *out, char *err,
                     size_t err_size);
void tt_jinja_output_free(tt_jinja_output *out);

#endif
