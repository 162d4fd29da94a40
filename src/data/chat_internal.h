/* The parsed chat format, shared by chat_messages.c (records -> conversations) and chat_masks.c
 * (conversations -> ids and labels). */
#ifndef TT_DATA_CHAT_INTERNAL_H
#define TT_DATA_CHAT_INTERNAL_H

#include "data/chat_template.h"
#include "data/jinja.h"

struct tt_chat_format {
    tt_chat_settings settings;   /* the strings it points to are the format's own copies */
    char *template_text, *template_origin;
    char *bos_token, *eos_token, *unk_token, *pad_token;
    tt_jinja_template *template;
    bool has_generation;
    const tt_tokenizer *tok;
    /* role aliases: axolotl's defaults, or the dataset's roles: */
    int alias_count;
    const char *const *alias_from, *const *alias_to;
};

#endif
