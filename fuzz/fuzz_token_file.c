/* Fuzzes the v1 token file reader (train/data.c, through its public API): header, size
 * against the announced count, every id against the model's vocab, then the split and one
 * training and one eval sequence. Input: a token file. The first byte of the input also picks
 * sequence_len (1 to 8), so short files reach the sequence code. */
#include "fuzz_common.h"
#include "train/data.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    fuzz_setup();
    return 0;
}

static tt_dataset ds;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_input_path(data, size);
    const int64_t seq_len = size > 0 ? 1 + (data[0] & 7) : 4;
    char *paths[1] = {(char *)path};
    memset(&ds, 0, sizeof ds);
    FUZZ_TRY {
        tt_dataset_open(&ds, paths, 1, 1000, seq_len, 0.25, 7);
        int32_t inputs[8], targets[8];
        tt_dataset_next_train(&ds, inputs, targets);
        if (ds.eval_count > 0) tt_dataset_get_eval(&ds, 0, inputs, targets);
    }
    FUZZ_CATCH {}
    /* what a load that died held is the dataset's (its per-file headers included): closing it
     * frees everything, so this target runs with leak detection on */
    tt_dataset_close(&ds);
    fuzz_json_release_all();
    return 0;
}
