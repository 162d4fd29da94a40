/* The parsed chat format, shared by chat_messages.c (records -> conversations) and chat_masks.c
 * (conversations -> ids and labels). */
#ifndef TT_DATA_CHAT_INTERNAL_H
#define TT_DATA_CHAT_INTERNAL_H

#include "data/chat_template.h"
#include "data/jinja.h"

struct tt_chat_format {
    tt_chat_settings settings; /* the strings it points to are the format's own copies */
    char *template_text, *template_origin;
    char *bos_token, *eos_token, *unk_token, *pad_token;
    tt_jinja_template *template;
    bool has_generation;
    const tt_tokenizer *tok;
    /* role aliases: axolotl's defaults, or the dataset's roles: */
    int alias_count;
    const char *const *alias_from, *const *alias_to;
    json_t *template_kwargs; /* chat_template_kwargs, or NULL */
    int32_t *eot_ids;        /* the end-of-turn tokens' ids [eot_count] */
    int eot_count;
};

/* chat_eot.c: the end-of-turn tokens' ids into f->eot_ids (see tt_chat_format_open). */
void tt_chat_resolve_eot(tt_chat_format *f);

/* chat_thinking.c: split_thinking on one message (an assistant's string content), as axolotl's transform_message. */
void tt_chat_split_thinking(json_t *message);

/* chat_training.c: the message's message_field_training (-1: absent, else 0/1) and message_field_training_detail
 * (a new reference to the checked spans, or NULL), from the message as the record has it; content is the turn's
 * final content. Dies naming where, the message and the field. */
int tt_chat_message_training(const tt_chat_format *f, json_t *message, json_t *content, const char *where, size_t index,
                             json_t **detail);
/* The labels of a turn with spans: the tokens [start, end) of ids (the turn, found in the full render of text)
 * that hold its content get the spans' labels. Needs ids->offsets. */
void tt_chat_label_spans(const tt_chat_format *f, const char *text, size_t text_len, const tt_token_ids *ids,
                         int64_t start, int64_t end, const char *content, json_t *spans, uint8_t *labels);

#endif
