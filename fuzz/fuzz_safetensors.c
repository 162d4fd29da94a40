/* Fuzzes the safetensors reader: header length, header JSON, tensor table (dtypes, shapes,
 * offsets, overlaps), then reads every float tensor through the dtype conversion as the weight
 * loaders do (the data of a file sits at any offset: odd ones included) and looks every tensor
 * up by name. Input: a whole .safetensors file. */
#include "fuzz_common.h"
#include "model/safetensors.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    fuzz_setup();
    return 0;
}

static tt_st_file file; /* static: survives the longjmp intact, tt_st_close releases it */
static float *converted;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_input_path(data, size);
    memset(&file, 0, sizeof file);
    converted = NULL;
    FUZZ_TRY {
        tt_st_open(path, &file);
        for (int i = 0; i < file.count; i++) {
            const tt_st_tensor *t = &file.tensors[i];
            if (tt_st_find(&file, t->name) != t) abort(); /* names are unique (duplicates are refused) */
            if (t->dtype != TT_F32 && t->dtype != TT_BF16 && t->dtype != TT_F16 && t->dtype != TT_F64) continue;
            const size_t n = t->bytes / tt_dtype_size(t->dtype);
            converted = malloc(n ? n * sizeof(float) : 1);
            tt_convert_to_f32(converted, t->data, t->dtype, n);
            free(converted);
            converted = NULL;
        }
    }
    FUZZ_CATCH {
        free(converted);
        converted = NULL;
    }
    tt_st_close(&file);
    fuzz_json_release_all();
    return 0;
}
