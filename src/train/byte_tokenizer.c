#include "train/byte_tokenizer.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "train/data.h"

void tt_tokenize_bytes(char *const *input_paths, int count, const char *output_path) {
    uint32_t *tokens = NULL;
    size_t used = 0, capacity = 0;
    int documents = 0;
    for (int i = 0; i < count; i++) {
        FILE *f = fopen(input_paths[i], "rb");
        if (!f) tt_die("cannot read %s: %s", input_paths[i], strerror(errno));
        size_t before = used;
        int c;
        while ((c = fgetc(f)) != EOF) {
            if (used + 2 > capacity) {
                capacity = capacity ? 2 * capacity : 1 << 16;
                tokens = tt_xrealloc(tokens, capacity * sizeof(uint32_t), "tokens");
            }
            tokens[used++] = (uint32_t)c;
        }
        bool failed = ferror(f) != 0;
        fclose(f);
        if (failed) tt_die("cannot read %s: %s", input_paths[i], strerror(errno));
        if (used == before) {
            tt_warn("%s is empty; skipped", input_paths[i]);
            continue;
        }
        tokens[used++] = TT_BYTE_TOKENIZER_EOS;
        documents++;
    }
    if (used == 0) tt_die("tokenize: the inputs hold no text");
    tt_token_file_write(output_path, tokens, used, TT_BYTE_TOKENIZER_VOCAB, TT_BYTE_TOKENIZER_EOS);
    tt_info("wrote %s: %zu tokens from %d documents (byte-level, vocab %d)", output_path, used, documents,
            TT_BYTE_TOKENIZER_VOCAB);
    free(tokens);
}
