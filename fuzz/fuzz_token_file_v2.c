/* Fuzzes version 2 token files (train/data.c: one document per sequence, with a label mask) past
 * the size checks: the harness writes a file whose header, document index and sizes agree unless
 * the input says otherwise, so the mutations land on the document starts, the ids and the labels.
 * Input bytes:
 *   0     sequence_len - 1 (low 4 bits: 1 to 16)
 *   1     document count D (mod 9)
 *   2     flags: 1 no pad id (else byte 3 is the pad id); 2 raw starts (byte per start, as given,
 *         instead of the running sum of lengths); 4 header vocab_size 1001 (one more than the
 *         model's); 8 count one more than the tokens given (a truncated file)
 *   3     pad id
 *   4..   D + 1 bytes: document lengths (mod 20) or raw starts, then the ids (little-endian
 *         uint32 each, taken mod 2^11 so most fit the model's 1000) and the labels (one byte each,
 *         most 0 or 1); what the input lacks is zero. */
#include "fuzz_common.h"
#include "data/token_file.h"
#include "train/data.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    fuzz_setup();
    return 0;
}

static void put_u32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put_u64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

typedef struct input_reader {
    const uint8_t *data;
    size_t size, at;
} input_reader;

static uint8_t next_byte(input_reader *in) { return in->at < in->size ? in->data[in->at++] : 0; }

static tt_dataset ds;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    input_reader in = {data, size, 0};
    const int64_t seq_len = 1 + (next_byte(&in) & 15);
    const uint64_t documents = next_byte(&in) % 9;
    const uint8_t flags = next_byte(&in);
    const uint8_t pad = next_byte(&in);
    uint64_t starts[10] = {0};
    for (uint64_t d = 1; d <= documents; d++) {
        const uint8_t b = next_byte(&in);
        starts[d] = (flags & 2) ? b : starts[d - 1] + b % 20;
    }
    const uint64_t count = starts[documents];
    const uint64_t announced = count + ((flags & 8) ? 1 : 0);
    const size_t file_size = TT_TOKEN_FILE_V2_HEADER_BYTES + 8 * (documents + 1) + 5 * count;
    uint8_t *file = calloc(1, file_size);
    memcpy(file, TT_TOKEN_FILE_MAGIC, 8);
    put_u32(file + 8, TT_TOKEN_FILE_VERSION_DOCUMENTS);
    put_u32(file + 12, (flags & 4) ? 1001 : 1000);
    put_u64(file + 16, announced);
    put_u32(file + 24, 2);
    put_u32(file + 28, (flags & 1) ? TT_TOKEN_NO_PAD : pad);
    put_u64(file + 32, documents);
    uint8_t *p = file + TT_TOKEN_FILE_V2_HEADER_BYTES;
    for (uint64_t d = 0; d <= documents; d++, p += 8) put_u64(p, starts[d]);
    for (uint64_t i = 0; i < count; i++, p += 4) {
        uint32_t id = 0;
        for (int k = 0; k < 4; k++) id |= (uint32_t)next_byte(&in) << (8 * k);
        put_u32(p, id & 0x7ff);
    }
    for (uint64_t i = 0; i < count; i++) *p++ = next_byte(&in);
    const char *path = fuzz_input_path(file, file_size);
    free(file);
    char *paths[1] = {(char *)path};
    memset(&ds, 0, sizeof ds);
    FUZZ_TRY {
        tt_dataset_open(&ds, paths, 1, 1000, seq_len, 0.25, 7);
        int32_t inputs[16], targets[16];
        for (int64_t i = 0; i < ds.train_count + 1; i++) tt_dataset_next_train(&ds, inputs, targets);
        for (int64_t i = 0; i < ds.eval_count; i++) tt_dataset_get_eval(&ds, i, inputs, targets);
    }
    FUZZ_CATCH {}
    /* what a load that died held is the dataset's (its per-file headers included): closing it
     * frees everything, so this target runs with leak detection on */
    tt_dataset_close(&ds);
    fuzz_json_release_all();
    return 0;
}
