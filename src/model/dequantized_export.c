/* `tiertrain dequantize` (dequantized_export.h). */
#include "model/dequantized_export.h"

#include <stdio.h>
#include <stdlib.h>

#include "core/check.h"
#include "model/model_config.h"
#include "model/params.h"
#include "model/quant4.h"
#include "model/weights.h"

static const char *format_name(const tt_quant4_format *f) {
    return f->type == TT_QUANT4_NF4 ? (f->double_quant ? "nf4 with double quantization" : "nf4")
                                    : (f->double_quant ? "fp4 with double quantization" : "fp4");
}

void tt_export_dequantized(const char *base_dir, const tt_quant4_format *format, const char *out_dir,
                           size_t max_shard_bytes) {
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", base_dir);
    tt_model_config config;
    tt_model_config_load(path, &config);
    tt_model_config_check_quantization(&config, path);
    const bool saved_4bit = config.quantization.present;
    tt_quant4_format chosen = format ? *format : (tt_quant4_format){.type = TT_QUANT4_NF4, .double_quant = true};
    if (saved_4bit) {
        if (format && (format->type != config.quantization.format.type ||
                       format->double_quant != config.quantization.format.double_quant))
            tt_die(
                "%s: the checkpoint is saved in 4 bits as %s, not %s; leave the format out to dequantize it as it is",
                path, format_name(&config.quantization.format), format_name(format));
        chosen = config.quantization.format;
    }
    tt_param_table table;
    tt_param_table_build(&config, &table);
    /* a 4-bit checkpoint's weights come dequantized from the loader; a float one's go through the format here */
    float *flat = tt_xcalloc((size_t)table.total_numel, sizeof(float), "the model");
    tt_weights_load_hf(flat, &table, base_dir);
    for (int i = 0; i < table.count && !saved_4bit; i++) {
        const tt_param_info *p = &table.params[i];
        if (!tt_param_kind_is_linear_weight(p->kind)) continue;
        unsigned char *bytes = tt_xmalloc(tt_quant4_layout_of(p->numel, &chosen).bytes, "a 4-bit weight");
        tt_quant4_quantize(bytes, flat + p->offset, p->numel, &chosen);
        tt_quant4_dequantize(flat + p->offset, bytes, p->numel, &chosen);
        free(bytes);
    }
    config.dtype = TT_F32;
    tt_weights_save_hf(flat, &table, &config, TT_F32, out_dir, max_shard_bytes);
    tt_weights_copy_companion_files(base_dir, out_dir);
    tt_info("%s: the 4-bit weights (%s) of %s dequantized as a QLoRA run computes with them, in F32", out_dir,
            format_name(&chosen), saved_4bit ? "the checkpoint" : "the model quantized at load");
    free(flat);
    tt_param_table_free(&table);
    tt_model_config_free(&config);
}
