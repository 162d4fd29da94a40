/* Fuzzes tokenizer.json loading (data/tokenizer_load.c: model, vocab, merges, added tokens,
 * normalizers, pre-tokenizers with their regexes, post-processor, decoder), then encodes a short
 * fixed text (ASCII, multibyte UTF-8, digits, whitespace runs, special-token look-alikes) and
 * decodes the ids. Input: a tokenizer.json. */
#include "fuzz_common.h"

#include "data/tokenizer.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    fuzz_setup();
    return 0;
}

static tt_tokenizer *tok;
static tt_token_ids ids;
static char *text;

static const char sample[] =
    "Hello, world!  It's 2026: caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac <s></s><|endoftext|>\n\t x";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_input_path(data, size);
    tok = NULL;
    text = NULL;
    memset(&ids, 0, sizeof ids);
    FUZZ_TRY {
        tok = tt_tokenizer_load(path);
        tt_tokenizer_encode(tok, sample, sizeof sample - 1, true, &ids);
        text = tt_tokenizer_decode(tok, ids.ids, ids.count, false, NULL);
    }
    FUZZ_CATCH {
        /* a load that died leaves its half-built tokenizer (every part it holds is freeable) */
        tt_tokenizer_free(tt_tokenizer_being_loaded);
        tt_tokenizer_being_loaded = NULL;
    }
    /* the path of a load that died before the tokenizer existed is not freed; this target runs with
     * detect_leaks=0 */
    free(text);
    tt_token_ids_free(&ids);
    if (tok) tt_tokenizer_free(tok);
    fuzz_json_release_all();
    return 0;
}
