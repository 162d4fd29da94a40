#include "train/byte_tokenizer.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/input_file.h"
#include "train/data.h"

void tt_tokenize_bytes(char *const *input_paths, int count, const char *output_path) {
    if (count <= 0) tt_die("tokenize: no input files; usage: tiertrain tokenize --bytes -o out.tok FILE...");
    uint32_t *tokens = NULL;
    size_t used = 0, capacity = 0;
    int documents = 0;
    unsigned char chunk[65536];
    for (int i = 0; i < count; i++) {
        FILE *f = tt_fopen_regular_file(input_paths[i], "a text file to tokenize");
        if (!f) tt_die("tokenize: cannot read %s: %s", input_paths[i], strerror(errno));
        size_t before = used;
        errno = 0;
        for (;;) {
            size_t got = fread(chunk, 1, sizeof chunk, f);
            if (got == 0) break;
            if (used + got + 1 > capacity) { /* + 1: room for the eos */
                while (used + got + 1 > capacity) capacity = capacity ? 2 * capacity : (size_t)1 << 16;
                tokens = tt_xrealloc(tokens, tt_mul_size(capacity, sizeof(uint32_t), "tokens"), "tokens");
            }
            for (size_t j = 0; j < got; j++) tokens[used++] = chunk[j];
        }
        int saved = errno;
        bool failed = ferror(f) != 0;
        fclose(f);
        if (failed) tt_die("tokenize: cannot read %s: %s", input_paths[i], strerror(saved ? saved : EIO));
        if (used == before) {
            tt_warn("tokenize: %s is empty; skipped", input_paths[i]);
            continue;
        }
        tokens[used++] = TT_BYTE_TOKENIZER_EOS;
        documents++;
    }
    if (used == 0) tt_die("tokenize: every input is empty; there is no text to tokenize");
    tt_token_file_write(output_path, tokens, used, TT_BYTE_TOKENIZER_VOCAB, TT_BYTE_TOKENIZER_EOS);
    tt_info("wrote %s: %zu tokens from %d documents (byte-level, vocab %d, eos %d)", output_path, used, documents,
            TT_BYTE_TOKENIZER_VOCAB, TT_BYTE_TOKENIZER_EOS);
    free(tokens);
}
