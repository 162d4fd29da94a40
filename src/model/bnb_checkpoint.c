/* bitsandbytes' 4-bit weights in a transformers checkpoint (the format: bnb_checkpoint.h). */
#include "model/bnb_checkpoint.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/check.h"
#include "core/json_describe.h"
#include "model/quant4.h"

#define QUANT_STATE_PREFIX ".quant_state.bitsandbytes__"
/* the JSON is a few hundred bytes; a larger tensor under this name is not one */
#define QUANT_STATE_MAX_BYTES ((size_t)1 << 20)

bool tt_bnb_checkpoint_is_4bit(const tt_st_model *model) {
    for (int f = 0; f < model->file_count; f++)
        for (int i = 0; i < model->files[f].count; i++)
            if (strstr(model->files[f].tensors[i].name, QUANT_STATE_PREFIX)) return true;
    return false;
}

static const tt_st_tensor *part(const tt_st_model *model, const char *name, const char *suffix, const char **file) {
    char key[256];
    snprintf(key, sizeof key, "%s%s", name, suffix);
    return tt_st_model_find(model, key, file);
}

bool tt_bnb_weight_present(const tt_st_model *model, const char *name) {
    if (part(model, name, QUANT_STATE_PREFIX "nf4", NULL) || part(model, name, QUANT_STATE_PREFIX "fp4", NULL))
        return true;
    const tt_st_tensor *codes = tt_st_model_find(model, name, NULL);
    return codes && codes->dtype == TT_U8;
}

/* Two fp32 values the same up to rounding: equal (0 and -0 too), or at most 2 units in the last place apart. A
 * table written by another fp32 computation of the same numbers passes; another table does not. */
static bool same_float(float a, float b) {
    if (a == b) return true;
    if (!isfinite(a) || !isfinite(b) || (a < 0) != (b < 0)) return false;
    int32_t ia, ib;
    memcpy(&ia, &a, sizeof ia);
    memcpy(&ib, &b, sizeof ib);
    const int64_t distance = (int64_t)ia - (int64_t)ib;
    return distance >= -2 && distance <= 2;
}

static float float_at(const tt_st_tensor *t, int64_t i) {
    float v;
    memcpy(&v, (const unsigned char *)t->data + (size_t)i * sizeof v, sizeof v);
    return v;
}

static int64_t numel_of(const tt_st_tensor *t) {
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
    return n;
}

static void describe_shape(const tt_st_tensor *t, char *buf, size_t size) {
    size_t used = (size_t)snprintf(buf, size, "%s [", tt_dtype_safetensors_name(t->dtype));
    for (int d = 0; d < t->ndim && used < size; d++)
        used += (size_t)snprintf(buf + used, size - used, d ? ", %lld" : "%lld", (long long)t->shape[d]);
    if (used < size) snprintf(buf + used, size - used, "]");
}

/* A part the weight needs: present, of dtype and element count; dies naming the tensor and the fix. */
static const tt_st_tensor *need_part(const tt_bnb_weight *w, const tt_st_model *model, const char *suffix,
                                     tt_dtype dtype, int64_t count, const char *what) {
    const char *file = NULL;
    const tt_st_tensor *t = part(model, w->name, suffix, &file);
    if (!t)
        tt_die("%s: tensor '%s%s' (%s) is missing; '%s' is a bitsandbytes 4-bit weight and needs it. The checkpoint is "
               "incomplete: save it again with transformers' save_pretrained, or train from the original model",
               w->file, w->name, suffix, what, w->name);
    if (t->dtype != dtype || numel_of(t) != count) {
        char got[96];
        describe_shape(t, got, sizeof got);
        tt_die("%s: tensor '%s%s' (%s) is %s; a weight of %lld values in blocks of %d needs %s with %lld elements. "
               "The checkpoint does not belong to this config.json, or was saved by another quantizer: train from the "
               "original model",
               file, w->name, suffix, what, got, (long long)w->numel, TT_QUANT4_BLOCK, tt_dtype_safetensors_name(dtype),
               (long long)count);
    }
    return t;
}

static int64_t json_int_field(json_t *root, const char *key, const char *file, const char *state_name) {
    json_t *v = json_object_get(root, key);
    if (!json_is_integer(v))
        tt_die("%s: the quant_state '%s' has no integer \"%s\" (got %s); the checkpoint is corrupt or from another "
               "bitsandbytes format: save it again with transformers, or train from the original model",
               file, state_name, key, v ? tt_json_type_name(v) : "nothing");
    return (int64_t)json_integer_value(v);
}

/* A weight's quant_state tensor (bitsandbytes' packed JSON), where it is and what it is called. */
typedef struct quant_state_ref {
    const tt_st_tensor *tensor;
    const char *file;
    char name[192];
} quant_state_ref;

/* The packed codes and which quant_state (NF4's or FP4's) the weight has: exactly one. */
static void find_codes_and_state(tt_bnb_weight *w, quant_state_ref *state, const tt_st_model *model, const char *name,
                                 int64_t rows, int64_t cols) {
    memset(w, 0, sizeof(*w));
    snprintf(w->name, sizeof w->name, "%s", name);
    w->numel = rows * cols;
    const char *file = NULL;
    w->codes = tt_st_model_find(model, name, &file);
    w->file = file;
    const char *nf4_file = NULL, *fp4_file = NULL;
    const tt_st_tensor *nf4 = part(model, name, QUANT_STATE_PREFIX "nf4", &nf4_file);
    const tt_st_tensor *fp4 = part(model, name, QUANT_STATE_PREFIX "fp4", &fp4_file);
    if (!w->codes)
        tt_die("%s: tensor '%s' (the packed 4-bit codes) is missing though its quant_state is there; the checkpoint is "
               "incomplete: save it again with transformers' save_pretrained, or train from the original model",
               nf4 ? nf4_file : fp4_file, name);
    if (!nf4 && !fp4)
        tt_die("%s: tensor '%s' is U8 (4-bit codes) but '%s" QUANT_STATE_PREFIX "nf4' (or __fp4), its quant_state, is "
               "missing; without it the 4-bit weight cannot be read. Save the checkpoint again with transformers' "
               "save_pretrained, or train from the original model",
               file, name, name);
    if (nf4 && fp4)
        tt_die("%s: weight '%s' has two quant_states (" QUANT_STATE_PREFIX "nf4 and __fp4); one weight has one 4-bit "
               "code: the checkpoint is corrupt",
               file, name);
    state->tensor = nf4 ? nf4 : fp4;
    state->file = nf4 ? nf4_file : fp4_file;
    snprintf(state->name, sizeof state->name, "%s" QUANT_STATE_PREFIX "%s", name, nf4 ? "nf4" : "fp4");
    w->format.type = nf4 ? TT_QUANT4_NF4 : TT_QUANT4_FP4;
}

/* The quant_state's JSON: the code, the block size, the shape against config.json's, double quantization. */
static void read_quant_state(tt_bnb_weight *w, const quant_state_ref *ref, const tt_st_model *model, const char *name,
                             int64_t rows, int64_t cols) {
    const tt_st_tensor *state = ref->tensor;
    const char *state_file = ref->file, *state_name = ref->name;
    const bool nf4 = w->format.type == TT_QUANT4_NF4;
    if (state->dtype != TT_U8 || state->ndim != 1 || state->bytes > QUANT_STATE_MAX_BYTES)
        tt_die(
            "%s: tensor '%s' must be a U8 vector of at most %zu bytes holding JSON (bitsandbytes' packed quant_state); "
            "the checkpoint is corrupt",
            state_file, state_name, QUANT_STATE_MAX_BYTES);
    json_error_t error;
    json_t *root = json_loadb(state->data, state->bytes, JSON_REJECT_DUPLICATES, &error);
    if (!root || !json_is_object(root))
        tt_die("%s: tensor '%s' is not a JSON object (%s); bitsandbytes packs the quant_state as UTF-8 JSON: the "
               "checkpoint is corrupt, save it again with transformers",
               state_file, state_name, root ? "another JSON value" : error.text);
    const char *quant_type = json_string_value(json_object_get(root, "quant_type"));
    if (!quant_type || strcmp(quant_type, nf4 ? "nf4" : "fp4") != 0)
        tt_die("%s: tensor '%s' says quant_type %s%s%s, its name says %s; the checkpoint is corrupt", state_file,
               state_name, quant_type ? "\"" : "", quant_type ? quant_type : "(none)", quant_type ? "\"" : "",
               nf4 ? "nf4" : "fp4");
    const int64_t blocksize = json_int_field(root, "blocksize", state_file, state_name);
    if (blocksize != TT_QUANT4_BLOCK)
        tt_die("%s: weight '%s' is quantized in blocks of %lld values; tiertrain's 4-bit kernels take bitsandbytes' "
               "default block of %d (transformers' BitsAndBytesConfig always uses it). Train from the original model: "
               "adapter: qlora quantizes it at load",
               state_file, name, (long long)blocksize, TT_QUANT4_BLOCK);
    json_t *shape = json_object_get(root, "shape");
    if (!json_is_array(shape) || json_array_size(shape) != 2 || !json_is_integer(json_array_get(shape, 0)) ||
        !json_is_integer(json_array_get(shape, 1)) || json_integer_value(json_array_get(shape, 0)) != rows ||
        json_integer_value(json_array_get(shape, 1)) != cols) {
        char *text = shape ? json_dumps(shape, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
        tt_die("%s: weight '%s' has shape %s in its quant_state but config.json implies [%lld, %lld]; the weights and "
               "config.json do not belong together",
               state_file, name, text ? text : "(none)", (long long)rows, (long long)cols);
    }
    json_t *offset = json_object_get(root, "nested_offset");
    const bool nested = offset != NULL || json_object_get(root, "nested_blocksize") != NULL;
    w->format.double_quant = nested;
    if (nested) {
        if (!json_is_number(offset) || !isfinite(json_number_value(offset)))
            tt_die("%s: the quant_state '%s' has nested_blocksize but no finite number \"nested_offset\"; the "
                   "checkpoint is corrupt",
                   state_file, state_name);
        w->nested_offset = (float)json_number_value(offset);
        const int64_t nested_blocksize = json_int_field(root, "nested_blocksize", state_file, state_name);
        if (nested_blocksize != TT_QUANT4_NESTED_BLOCK)
            tt_die("%s: weight '%s' has its absmax quantized in blocks of %lld; bitsandbytes' double quantization (and "
                   "tiertrain) uses %d. Train from the original model: adapter: qlora quantizes it at load",
                   state_file, name, (long long)nested_blocksize, TT_QUANT4_NESTED_BLOCK);
    }
    json_decref(root);
    const char *nested_file = NULL;
    if (!nested && part(model, name, ".nested_absmax", &nested_file))
        tt_die("%s: weight '%s' has a nested_absmax but its quant_state has no nested_offset or nested_blocksize; the "
               "checkpoint is corrupt",
               nested_file, name);
}

/* The codes' size and the parts beside them: absmax, the code table, and with double quantization the nested
 * absmax and the dynamic map, each against bitsandbytes' standard tables. */
static void check_parts(tt_bnb_weight *w, const tt_st_model *model, const char *name, int64_t rows, int64_t cols) {
    const char *file = w->file;
    const bool nf4 = w->format.type == TT_QUANT4_NF4, nested = w->format.double_quant;
    const tt_quant4_layout l = tt_quant4_layout_of(w->numel, &w->format);
    if (w->codes->bytes != (size_t)(w->numel + 1) / 2) {
        char got[96];
        describe_shape(w->codes, got, sizeof got);
        tt_die(
            "%s: tensor '%s' is %s (%zu bytes) but a 4-bit [%lld, %lld] weight packs into %lld bytes (U8 [%lld, 1]); "
            "the weights and config.json do not belong together",
            file, name, got, w->codes->bytes, (long long)rows, (long long)cols, (long long)((w->numel + 1) / 2),
            (long long)((w->numel + 1) / 2));
    }
    w->absmax = need_part(w, model, ".absmax", nested ? TT_U8 : TT_F32, l.blocks,
                          nested ? "the 8-bit codes of each block's absmax" : "each block's absmax");
    const tt_st_tensor *quant_map = need_part(w, model, ".quant_map", TT_F32, 16, "the 4-bit code's values");
    for (unsigned c = 0; c < 16; c++)
        if (!same_float(float_at(quant_map, c), tt_quant4_code_value(w->format.type, c)))
            tt_die(
                "%s: tensor '%s.quant_map' gives code %u the value %.9g, but %s's standard table has %.9g; tiertrain "
                "dequantizes with bitsandbytes' standard NF4 and FP4 tables only. Train from the original model",
                file, name, c, (double)float_at(quant_map, c), nf4 ? "NF4" : "FP4",
                (double)tt_quant4_code_value(w->format.type, c));
    if (!nested) return;
    w->nested_absmax = need_part(w, model, ".nested_absmax", TT_F32, l.nested_blocks, "each absmax block's scale");
    const tt_st_tensor *nested_map = need_part(w, model, ".nested_quant_map", TT_F32, 256, "the dynamic map");
    const float *map = tt_quant4_dynamic_map();
    for (int c = 0; c < 256; c++)
        if (!same_float(float_at(nested_map, c), map[c]))
            tt_die("%s: tensor '%s.nested_quant_map' gives code %d the value %.9g, but bitsandbytes' dynamic map has "
                   "%.9g; tiertrain decodes double-quantized absmax with that map only. Train from the original model",
                   file, name, c, (double)float_at(nested_map, c), (double)map[c]);
}

void tt_bnb_weight_find(tt_bnb_weight *w, const tt_st_model *model, const char *name, int64_t rows, int64_t cols) {
    quant_state_ref state;
    find_codes_and_state(w, &state, model, name, rows, cols);
    read_quant_state(w, &state, model, name, rows, cols);
    check_parts(w, model, name, rows, cols);
}

void tt_bnb_weight_copy(const tt_bnb_weight *w, void *dst) {
    const tt_quant4_layout l = tt_quant4_layout_of(w->numel, &w->format);
    unsigned char *out = dst;
    memset(out, 0, l.bytes);
    memcpy(out + l.codes, w->codes->data, w->codes->bytes);
    if (!w->format.double_quant) {
        memcpy(out + l.absmax, w->absmax->data, (size_t)l.blocks * sizeof(float));
        return;
    }
    memcpy(out + l.nested_absmax, w->nested_absmax->data, (size_t)l.nested_blocks * sizeof(float));
    memcpy(out + l.offset, &w->nested_offset, sizeof(float));
    memcpy(out + l.absmax_codes, w->absmax->data, (size_t)l.blocks);
}
