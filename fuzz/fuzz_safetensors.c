/* Fuzzes the safetensors reader: header length, header JSON, tensor table (dtypes, shapes,
 * offsets, overlaps), then reads every float tensor through the dtype conversion as the weight
 * loaders do (the data of a file sits at any offset: odd ones included) and looks every tensor
 * up by name; and every bitsandbytes 4-bit weight (a tensor <w> with <w>.quant_state.bitsandbytes__*)
 * through the 4-bit reader as a [1, 2 x bytes of <w>] weight (its quant_state's JSON, the parts' checks,
 * the copy into tiertrain's layout). Input: a whole .safetensors file. */
#include "fuzz_common.h"
#include "model/bnb_checkpoint.h"
#include "model/safetensors.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    fuzz_setup();
    return 0;
}

static tt_st_file file; /* static: survives the longjmp intact, tt_st_close releases it */
static float *converted;
static unsigned char *four_bit;

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
        const tt_st_model model = {.files = &file, .file_count = 1};
        for (int i = 0; i < file.count; i++) {
            const char *at = strstr(file.tensors[i].name, ".quant_state.bitsandbytes__");
            if (!at || at - file.tensors[i].name >= 120) continue;
            char name[128];
            snprintf(name, sizeof name, "%.*s", (int)(at - file.tensors[i].name), file.tensors[i].name);
            const tt_st_tensor *codes = tt_st_find(&file, name);
            if (!codes || codes->bytes == 0 || codes->bytes > ((size_t)1 << 24)) continue;
            tt_bnb_weight w;
            tt_bnb_weight_find(&w, &model, name, 1, 2 * (int64_t)codes->bytes);
            four_bit = malloc(tt_quant4_layout_of(w.numel, &w.format).bytes);
            tt_bnb_weight_copy(&w, four_bit);
            free(four_bit);
            four_bit = NULL;
        }
    }
    FUZZ_CATCH {
        free(converted);
        converted = NULL;
        free(four_bit);
        four_bit = NULL;
    }
    tt_st_close(&file);
    fuzz_json_release_all();
    return 0;
}
