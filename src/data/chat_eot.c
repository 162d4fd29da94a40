/* The end-of-turn tokens of a chat format (chat_template.h), as axolotl's ChatTemplateStrategy resolves
 * eot_tokens (_validate_eot_and_eos_tokens): not given, they are the tokenizer's EOS alone; given, each must be
 * written by the template (one that its text never names is left out, with a warning, as axolotl does) and be
 * one token of the tokenizer; and when the EOS is one of them, train_on_eos and train_on_eot must agree, since
 * both would decide about the same tokens. Given exactly as the EOS alone, no more is checked (axolotl's rule). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "data/chat_internal.h"

void tt_chat_resolve_eot(tt_chat_format *f) {
    const tt_chat_settings *s = &f->settings;
    const char *eos = f->eos_token;
    f->eot_ids = tt_xmalloc(sizeof(int32_t) * (size_t)(s->eot_token_count + 1), "end-of-turn tokens");
    f->eot_count = 0;
    const bool eos_alone = !s->eot_tokens || (s->eot_token_count == 1 && eos && strcmp(s->eot_tokens[0], eos) == 0);
    if (eos_alone) {
        if (!s->eot_tokens && !eos) return; /* no EOS: no end-of-turn token either */
        if (eos && !strstr(f->template_text, eos) && !strstr(f->template_text, "eos_token"))
            tt_warn("the chat template (%s) never writes the EOS token '%s', so no turn end trains; set eot_tokens to "
                    "the token that ends its turns",
                    f->template_origin, eos);
        if (s->eos_id >= 0) f->eot_ids[f->eot_count++] = s->eos_id;
        return;
    }
    bool eos_among = false;
    tt_token_ids ids = {0};
    for (int i = 0; i < s->eot_token_count; i++) {
        const char *token = s->eot_tokens[i];
        if (!strstr(f->template_text, token)) {
            tt_warn("eot_tokens: '%s' is not in the chat template (%s); it is left out, as axolotl leaves it", token,
                    f->template_origin);
            continue;
        }
        ids.count = 0;
        tt_tokenizer_encode(f->tok, token, strlen(token), false, &ids);
        if (ids.count != 1)
            tt_die("eot_tokens: '%s' is %lld tokens of the tokenizer, not one; an end-of-turn token must be a single "
                   "(special) token: list the tokenizer's own end-of-turn token instead (its added_tokens)",
                   token, (long long)ids.count);
        f->eot_ids[f->eot_count++] = ids.ids[0];
        eos_among |= eos && strcmp(token, eos) == 0;
    }
    tt_token_ids_free(&ids);
    if (eos_among && s->train_on_eos != s->train_on_eot)
        tt_die("eot_tokens holds the EOS token '%s', but train_on_eos (%s) and train_on_eot (%s) differ, so one rule "
               "would train it and the other not (axolotl's conflict); make them equal, or leave the EOS out of "
               "eot_tokens",
               eos, tt_train_on_eos_name(s->train_on_eos), tt_train_on_eos_name(s->train_on_eot));
}
