/* Fuzzes config.json reading (model/model_config.c): every key's type and range checks, RoPE
 * scaling in the transformers 4 and 5 spellings, then the derived sizes (parameter count) and
 * writing it back. Input: a config.json. */
#include "fuzz_common.h"
#include "model/model_config.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    fuzz_setup();
    return 0;
}

static tt_model_config config;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_input_path(data, size);
    memset(&config, 0, sizeof config);
    FUZZ_TRY {
        tt_model_config_load(path, &config);
        volatile int64_t params = tt_model_config_param_count(&config);
        (void)params;
    }
    FUZZ_CATCH {}
    tt_model_config_free(&config);
    fuzz_json_release_all();
    return 0;
}
