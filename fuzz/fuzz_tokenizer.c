/* Fuzzes tokenizer.json loading (data/tokenizer_load.c: model, vocab, merges, added tokens,
 * normalizers, pre-tokenizers with their regexes, post-processor, decoder), then encodes a short
 * fixed text (ASCII, multibyte UTF-8, digits, whitespace runs, special-token look-alikes) and
 * decodes the ids. Input: a tokenizer.json. */
#include "fuzz_common.h"
#include <stdbool.h>

#include "data/tokenizer.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    fuzz_setup();
    return 0;
}

static tt_tokenizer *tok;
static tt_token_ids ids;
static char *text;

/* Known finding, left to src/data (not ours to change here): two model.vocab entries with one id
 * make load_vocab (tokenizer_load.c:66) index the vocabulary map with the first token's text but
 * the second's length, a heap over-read (regress_vocab_duplicate_id.json). Such inputs are
 * skipped until that is fixed, so the target keeps finding everything else; then delete this. */
static int compare_ids(const void *a, const void *b) {
    json_int_t x = *(const json_int_t *)a, y = *(const json_int_t *)b;
    return (x > y) - (x < y);
}

static bool vocab_has_duplicate_ids(const uint8_t *data, size_t size) {
    json_t *root = json_loadb((const char *)data, size, 0, NULL);
    json_t *vocab = json_object_get(json_object_get(root, "model"), "vocab");
    bool duplicate = false;
    if (json_is_object(vocab) && json_object_size(vocab) > 1) {
        json_int_t *ids = malloc(sizeof(json_int_t) * json_object_size(vocab));
        size_t n = 0;
        const char *key;
        json_t *value;
        json_object_foreach(vocab, key, value) if (json_is_integer(value)) ids[n++] = json_integer_value(value);
        qsort(ids, n, sizeof *ids, compare_ids);
        for (size_t i = 1; i < n && !duplicate; i++) duplicate = ids[i] == ids[i - 1];
        free(ids);
    }
    json_decref(root);
    return duplicate;
}

static const char sample[] = "Hello, world!  It's 2026: caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac <s></s><|endoftext|>\n\t x";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (vocab_has_duplicate_ids(data, size)) return 0;
    const char *path = fuzz_input_path(data, size);
    tok = NULL;
    text = NULL;
    memset(&ids, 0, sizeof ids);
    FUZZ_TRY {
        tok = tt_tokenizer_load(path);
        tt_tokenizer_encode(tok, sample, sizeof sample - 1, true, &ids);
        text = tt_tokenizer_decode(tok, ids.ids, ids.count, false, NULL);
    }
    FUZZ_CATCH {}
    /* a tokenizer that died half-loaded is not freed (tokenizer_load.c keeps no record of how far
     * it got); this target runs with detect_leaks=0 */
    free(text);
    tt_token_ids_free(&ids);
    if (tok) tt_tokenizer_free(tok);
    fuzz_json_release_all();
    return 0;
}
