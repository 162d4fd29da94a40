/* Chat datasets (type: chat_template): records of messages -> a chat template's render -> ids and
 * a label mask, as axolotl's chat_template prompt strategy builds them
 * (src/axolotl/prompt_strategies/chat_template.py), with no Python.
 *
 *  - The template: chat_template (per dataset, else top level) is tokenizer_default (the
 *    tokenizer directory's chat_template.jinja, else tokenizer_config.json's chat_template: a
 *    string, or the "default" entry of a list of {name, template}), tokenizer_default_fallback_<name>
 *    (that, else the built-in <name>), jinja (chat_template_jinja: the text, or a file holding it),
 *    or a built-in name (chat_builtin.c).
 *  - The messages (chat_messages.c): record[field_messages], each mapped by
 *    message_property_mappings, its role through the role aliases (human->user, gpt->assistant, or
 *    the dataset's roles:), other keys passed through (tool_calls, reasoning_content, name, ...);
 *    a top-level "system" string becomes a first system turn; "tools" is passed to the template.
 *  - The masks (chat_masks.c): the conversation is rendered once (add_generation_prompt false) and
 *    tokenized without the post-processor's special tokens, as apply_chat_template(tokenize=True).
 *    A turn trains when train_on_inputs or its role is in roles_to_train. Its tokens are found as
 *    axolotl's find_turn finds them: the render with that turn's content replaced by
 *    "[[dummy_message]]" is tokenized, and the turn is the tokens between the first and the last
 *    that differ. (axolotl renders the conversation only up to the turn; where a template renders
 *    a turn differently once later turns follow, as Qwen3's does with reasoning, those token
 *    positions do not fit the full render and axolotl mislabels; replacing the turn inside the
 *    full conversation gives the same tokens wherever axolotl is right and the right ones where
 *    it is not.) In a template with {% generation %} blocks, the assistant turns are those blocks
 *    instead, token for token as transformers' return_assistant_tokens_mask marks them. The EOS
 *    token first found at most 3 tokens after a turn trains as train_on_eos says: turn (after
 *    trained turns), all (after every turn), last (after the last trained turn), none. The same for the
 *    end-of-turn tokens (eot_tokens, default the EOS alone) by train_on_eot (default: train_on_eos); where both
 *    find a token it trains if either rule says so.
 *  - A message's own say (chat_training.c): message_field_training names a true/false field that decides
 *    whether the turn trains, whatever its role; message_field_training_detail a list of {begin_offset,
 *    end_offset, train} character spans (end inclusive) of its content: only the tokens of spans with train
 *    true train, mapped to tokens as axolotl's get_offsets_for_train_detail maps them.
 *  - chat_template_kwargs: more variables of every render (enable_thinking: false, ...).
 *  - split_thinking (chat_thinking.c): an assistant content "<think>R</think>C" becomes content C and
 *    reasoning_content R, for templates that render reasoning themselves.
 *
 * Reading records (tt_chat_record) is single-threaded and dies on bad data naming the file, line
 * and field; tokenizing (tt_chat_tokenize) touches no shared state, so records can be tokenized
 * on several threads, and a template that raises is reported back, not fatal there. */
#ifndef TT_DATA_CHAT_TEMPLATE_H
#define TT_DATA_CHAT_TEMPLATE_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "config/run_config.h"
#include "data/tokenizer.h"

/* The built-in templates' names, comma separated ("chatml, llama3, gemma, phi_3, qwen3"), and a name's text
 * (NULL if it is not one). */
const char *tt_chat_builtin_names(void);
const char *tt_chat_builtin_template(const char *name);

/* The dataset entry's template text (malloc'd), chosen as the file comment says; tokenizer_dir is
 * the directory of tokenizer.json. origin (for messages) gets where it came from. Dies with the
 * valid choices on an unknown name or a missing template. */
char *tt_chat_template_text(const tt_run_config *run, int entry, const char *tokenizer_dir, char *origin,
                            size_t origin_size);

/* What shapes a chat dataset's documents besides the records. */
typedef struct tt_chat_settings {
    const char *template_text;    /* from tt_chat_template_text */
    const char *template_origin;  /* names it in messages */
    const tt_dataset_spec *spec;  /* field_messages, mappings, roles, roles_to_train, drop_system_message */
    tt_train_on_eos train_on_eos; /* resolved (dataset's, else the top level's) */
    tt_train_on_eos train_on_eot; /* the same for the end-of-turn tokens, resolved (dataset's, else train_on_eos) */
    char *const *eot_tokens;      /* eot_tokens; NULL: the EOS token alone */
    int eot_token_count;
    const char *template_kwargs; /* chat_template_kwargs: a JSON object's text, or NULL */
    bool train_on_inputs;
    const char *bos_token, *eos_token, *unk_token, *pad_token; /* the template's variables; NULL: undefined */
    int32_t eos_id;                                            /* -1: the tokenizer has none (no EOS trains) */
    bool mistral_tokenizer; /* axolotl skips a first system turn when the tokenizer's path names mistral */
} tt_chat_settings;

typedef struct tt_chat_format tt_chat_format; /* immutable once opened; shared by threads */

/* Parses the template (dies naming origin, line and column on a syntax error) and resolves the end-of-turn
 * tokens as axolotl does (an eot token the template never writes is left out with a warning; one that is not a
 * single token of the tokenizer, or the EOS among them with train_on_eos != train_on_eot, is an error). */
tt_chat_format *tt_chat_format_open(const tt_chat_settings *settings, const tt_tokenizer *tok);
void tt_chat_format_free(tt_chat_format *f);
/* True when the template marks assistant output with {% generation %}. */
bool tt_chat_format_has_generation(const tt_chat_format *f);

typedef struct tt_chat_example {
    json_t *messages;      /* the turns after mapping: [{role, content, ...}] */
    json_t *tools;         /* the record's tools, or NULL */
    bool *trains;          /* [turns]: the turn's tokens train */
    json_t *details;       /* [turns]: a turn's training spans ([{begin_offset, end_offset, train}], checked against its
                         content) or null: the whole turn */
    char *where;           /* "data.jsonl:12", for messages */
    char *error;           /* set by tt_chat_tokenize when the template fails (malloc'd) */
    int turns_not_found;   /* trained turns whose tokens could not be told apart (left untrained, as axolotl) */
    bool parsed_arguments; /* a tool call's arguments were JSON text, parsed (named when the template then fails) */
} tt_chat_example;

/* A record's conversation; dies on bad data naming where, the message and the field. */
void tt_chat_record(const tt_chat_format *f, json_t *record, const char *where, tt_chat_example *out);
void tt_chat_example_free(tt_chat_example *ex);

/* The example's ids (ids is reset, then filled) and labels[ids->count] (1: trains), *labels grown
 * as needed. Returns false with ex->error set when the template raises (or, with {% generation %},
 * marks a different number of blocks than there are assistant messages). A conversation of more than
 * longest_kept tokens (0: no limit), which the caller drops, gets its ids and no trained label, without locating
 * its turns (a re-render of the conversation each). */
bool tt_chat_tokenize(const tt_chat_format *f, tt_chat_example *ex, tt_token_ids *ids, uint8_t **labels,
                      int64_t *label_capacity, int64_t longest_kept);

/* A conversation's prompt for generation (tiertrain inference): messages ([{role, content}]) rendered with
 * add_generation_prompt true and tokenized as apply_chat_template(tokenize=True) tokenizes (ids is reset, then
 * filled). Returns false with *error (malloc'd) when the template raises. */
bool tt_chat_prompt_ids(const tt_chat_format *f, json_t *messages, tt_token_ids *ids, char **error);

#endif
