/* `tiertrain dequantize` (dequantized_export.h). */
#include "model/dequantized_export.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "model/model_config.h"
#include "model/params.h"
#include "model/quant4.h"
#include "model/weights.h"

static void format_name(const tt_quant4_format *f, char *out, size_t size) {
    snprintf(out, size, "%s%s", tt_quant4_type_name(f->type), f->double_quant ? " with double quantization" : "");
}

/* The loader's pieces straight into the output files: a 4-bit checkpoint's weights come dequantized from the loader;
 * a float one's linear weights are gathered whole, quantized to the format and dequantized, then written. */
typedef struct export_sink {
    tt_hf_writer *writer;
    const tt_quant4_format *format; /* NULL: write what comes */
    float *tensor;                  /* the linear weight being gathered */
    unsigned char *bytes;           /* its 4-bit form */
} export_sink;

static void export_values(void *ctx, const tt_param_info *p, int64_t first, int64_t count, const float *values) {
    export_sink *e = ctx;
    if (!e->format || !tt_param_kind_is_linear_weight(p->kind)) {
        tt_hf_writer_values(e->writer, p, first, count, values);
        return;
    }
    memcpy(e->tensor + first, values, sizeof(float) * (size_t)count);
    if (first + count < p->numel) return;
    tt_quant4_quantize(e->bytes, e->tensor, p->numel, e->format);
    tt_quant4_dequantize(e->tensor, e->bytes, p->numel, e->format);
    tt_hf_writer_values(e->writer, p, 0, p->numel, e->tensor);
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
                       format->double_quant != config.quantization.format.double_quant)) {
            char saved[64], asked[64];
            format_name(&config.quantization.format, saved, sizeof saved);
            format_name(format, asked, sizeof asked);
            tt_die(
                "%s: the checkpoint is saved in 4 bits as %s, not %s; leave the format out to dequantize it as it is",
                path, saved, asked);
        }
        chosen = config.quantization.format;
    }
    tt_param_table table;
    tt_param_table_build(&config, &table);
    config.dtype = TT_F32;
    export_sink e = {.writer = tt_hf_writer_open(&table, TT_F32, out_dir, max_shard_bytes, base_dir),
                     .format = saved_4bit ? NULL : &chosen};
    if (!saved_4bit) { /* one linear weight at a time is quantized whole (its absmax are double-quantized together) */
        int64_t largest = 0;
        for (int i = 0; i < table.count; i++)
            if (tt_param_kind_is_linear_weight(table.params[i].kind) && table.params[i].numel > largest)
                largest = table.params[i].numel;
        e.tensor = tt_xmalloc(sizeof(float) * (size_t)(largest ? largest : 1), "a linear weight");
        e.bytes = tt_xmalloc(tt_quant4_layout_of(largest, &chosen).bytes, "a 4-bit weight");
    }
    const tt_weight_sink sink = {.values = export_values, .ctx = &e};
    tt_weights_load_hf_to(&table, base_dir, &sink);
    tt_hf_writer_close(e.writer, &config);
    free(e.tensor);
    free(e.bytes);
    tt_weights_copy_companion_files(base_dir, out_dir);
    char name[64];
    format_name(&chosen, name, sizeof name);
    tt_info("%s: the quantized weights (%s) of %s dequantized as a quantized-base run computes with them, in F32",
            out_dir, name, saved_4bit ? "the checkpoint" : "the model quantized at load");
    tt_param_table_free(&table);
    tt_model_config_free(&config);
}
