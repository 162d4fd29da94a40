/* Fuzzes the run configuration (src/config/): the YAML file, then key=value overrides, then the
 * cross-key checks, then the effective config written back as YAML. Input: the YAML text, then
 * optionally a NUL byte and up to 8 overrides separated by NUL bytes ("seed=3\0lora_r=8"). Nothing
 * here touches the files a config names (model, datasets): those readers have their own targets. */
#include "fuzz_common.h"
#include "config/run_config.h"

static FILE *sink;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    fuzz_setup();
    sink = fopen("/dev/null", "w");
    return 0;
}

#define MAX_OVERRIDES 8

static tt_run_config config;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    const size_t yaml_size = nul ? (size_t)(nul - data) : size;
    const char *path = fuzz_input_path(data, yaml_size);
    /* the overrides as C strings (a copy: the input is not NUL-terminated) */
    char *rest = NULL;
    char *overrides[MAX_OVERRIDES];
    int override_count = 0;
    if (nul) {
        const size_t rest_size = size - yaml_size - 1;
        rest = malloc(rest_size + 1);
        memcpy(rest, nul + 1, rest_size);
        rest[rest_size] = 0;
        for (char *p = rest; p <= rest + rest_size && override_count < MAX_OVERRIDES; p += strlen(p) + 1)
            overrides[override_count++] = p;
    }
    FUZZ_TRY {
        tt_run_config_defaults(&config);
        tt_run_config_load(&config, path, override_count, overrides);
        tt_run_config_validate(&config);
        tt_run_config_write_yaml(&config, sink);
    }
    FUZZ_CATCH {}
    /* a load that died on a key leaves its YAML document behind (load.c releases the parser and the
     * text before a syntax error ends it, nothing on a key's error: the process ends); this target
     * runs with detect_leaks=0 */
    tt_run_config_free(&config);
    free(rest);
    fuzz_json_release_all();
    return 0;
}
