/* Loading a QLoRA base: random init and quantization give the same bytes whatever the thread count and the same as
 * drawing the fp32 matrix and quantizing it (the values of before the fused path); the 4-bit weights take exactly
 * their bytes in the layout; the piece-by-piece loader (tt_model_loader) puts the same bits where a whole fp32 flat
 * buffer would, on the compute tier and in layer_offloading's pinned copy. */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "memory/plan.h"
#include "model/params.h"
#include "model/quant4.h"
#include "model/weights.h"
#include "test_backend.h"
#include "test_util.h"
#include "tiny_model.h"
#include "train/model_setup.h"
#include "train/step.h"

/* A shape whose matrices span several init blocks (65536 values) and whose odd sizes end blocks short. */
static tt_model_config wide_config(void) {
    tt_model_config c = tt_test_tiny_config(true);
    c.hidden_size = 200;
    c.intermediate_size = 333 * 2;
    c.num_heads = 5;
    c.num_kv_heads = 1;
    c.head_dim = 40;
    c.num_layers = 2;
    return c;
}

static tt_trainable_spec qlora_spec(bool double_quant, tt_quant4_type type, size_t elem) {
    return (tt_trainable_spec){.lora_rank = 2,
                               .lora_alpha = 4,
                               .lora_targets = TT_LORA_ALL_MODULES,
                               .quantize_4bit = true,
                               .quant_format = {.type = type, .double_quant = double_quant},
                               .quant_storage_elem = elem};
}

static float *init_flat(const tt_param_table *t, int threads) {
    const int outer = omp_get_max_threads();
    omp_set_num_threads(threads);
    float *flat = calloc((size_t)t->total_numel, sizeof(float));
    tt_weights_init_random(flat, t, 0.02, 77);
    omp_set_num_threads(outer);
    return flat;
}

static void check_init_bytes(bool double_quant, tt_quant4_type type) {
    const tt_model_config config = wide_config();
    const tt_trainable_spec spec = qlora_spec(double_quant, type, 4);
    tt_param_table quantized, plain;
    tt_param_table_build_trainable(&config, &spec, &quantized);
    tt_trainable_spec lora = spec;
    lora.quantize_4bit = false;
    tt_param_table_build_trainable(&config, &lora, &plain);
    float *one = init_flat(&quantized, 1), *three = init_flat(&quantized, 3), *values = init_flat(&plain, 2);
    TT_EXPECT(memcmp(one, three, sizeof(float) * (size_t)quantized.total_numel) == 0,
              "random init: the same bytes with 1 and 3 threads (%s, double %d)", type == TT_QUANT4_NF4 ? "nf4" : "fp4",
              double_quant);
    /* each 4-bit weight is the drawn fp32 matrix quantized whole; everything else the same values */
    int checked = 0;
    for (int i = 0; i < quantized.count; i++) {
        const tt_param_info *q = &quantized.params[i], *p = &plain.params[i];
        if (!q->quantized) {
            TT_EXPECT(memcmp(one + q->offset, values + p->offset, sizeof(float) * (size_t)p->numel) == 0,
                      "%s: the values of the unquantized table", q->name);
            continue;
        }
        const size_t bytes = tt_quant4_layout_of(q->numel, &quantized.quant_format).bytes;
        unsigned char *expected = malloc(bytes);
        tt_quant4_quantize(expected, values + p->offset, p->numel, &quantized.quant_format);
        TT_EXPECT(memcmp(expected, one + q->offset, bytes) == 0, "%s: drawn then quantized whole", q->name);
        free(expected);
        checked++;
    }
    TT_EXPECT(checked == 14, "%d 4-bit weights", checked);
    free(one);
    free(three);
    free(values);
    tt_param_table_free(&quantized);
    tt_param_table_free(&plain);
}

/* In a bf16 layout the 4-bit weights of a layer sit back to back and take exactly their bytes. */
static void check_layout(void) {
    const tt_model_config config = wide_config();
    const tt_trainable_spec spec = qlora_spec(true, TT_QUANT4_NF4, 2);
    tt_param_table t;
    tt_param_table_build_trainable(&config, &spec, &t);
    size_t four_bit = 0, other = 0, others = 0;
    const tt_param_info *previous = NULL;
    for (int i = 0; i < t.count; i++) {
        const tt_param_info *p = &t.params[i];
        if (p->trainable) continue;
        if (p->quantized) {
            const size_t bytes = tt_quant4_layout_of(p->numel, &t.quant_format).bytes;
            TT_EXPECT((size_t)p->storage_numel * 2 == bytes && p->offset * 2 % 16 == 0, "%s: %lld elements for %zu bytes",
                      p->name, (long long)p->storage_numel, bytes);
            if (previous && previous->quantized)
                TT_EXPECT(p->offset == previous->offset + previous->storage_numel, "%s follows %s with no gap", p->name,
                          previous->name);
            four_bit += bytes;
        } else {
            TT_EXPECT(p->offset % 64 == 0, "%s 64-element aligned", p->name);
            other += (size_t)p->numel * 2;
            others++;
        }
        previous = p;
    }
    /* the only gaps: the 64-element (128-byte) alignment of the bf16 parameters and of the part's end */
    const size_t frozen = (size_t)t.trainable_start * 2;
    TT_EXPECT(frozen >= four_bit + other && frozen - four_bit - other < 128 * (others + 2),
              "frozen part %zu bytes: %zu of 4-bit weights, %zu of bf16", frozen, four_bit, other);
    tt_param_table_free(&t);
}

static void open_state(tt_model_state *s, bool stream_frozen) {
    tt_model_config config = wide_config();
    tt_run_config run;
    tt_run_config_defaults(&run);
    run.micro_batch_size = 1;
    run.sequence_len = 6;
    run.loss_chunk_size = 6;
    const tt_precision fp32 = tt_precision_for_run(&run, false);
    tt_plan plan;
    tt_plan_from_config(&plan, &run, &config, TT_TIER_HOST, &fp32);
    tt_run_config_free(&run);
    plan.stream_frozen_layers = stream_frozen;
    const tt_trainable_spec spec = qlora_spec(true, TT_QUANT4_NF4, 4);
    tt_model_state_init_trainable(s, &config, &plan, &spec, tt_test_cpu_backend(), 0);
}

/* The loader against tt_model_set_weights of a whole fp32 flat buffer: the same frozen bytes and trainable values. */
static void check_loader(bool stream_frozen) {
    tt_model_state whole, pieces;
    open_state(&whole, stream_frozen);
    open_state(&pieces, stream_frozen);
    float *flat = calloc((size_t)whole.params.total_numel, sizeof(float));
    tt_weights_init_random(flat, &whole.params, 0.02, 5);
    tt_model_set_weights(&whole, flat);
    float *trainable = calloc((size_t)pieces.params.trainable_numel, sizeof(float));
    tt_model_loader loader;
    const tt_weight_sink sink = tt_model_loader_begin(&loader, &pieces, trainable);
    tt_weights_init_random_to(&pieces.params, 0.02, 5, &sink);
    tt_model_loader_end(&loader);
    TT_EXPECT(memcmp(trainable, flat + pieces.params.trainable_start,
                     sizeof(float) * (size_t)pieces.params.trainable_numel) == 0,
              "the adapters' values");
    tt_model_set_trainable_weights(&pieces, trainable);
    if (!stream_frozen) {
        TT_EXPECT(memcmp(whole.weights, pieces.weights, sizeof(float) * (size_t)whole.params.total_numel) == 0,
                  "the compute tier's weights");
    } else {
        TT_EXPECT(memcmp(whole.frozen_host, pieces.frozen_host, whole.sizes.streamed_weights_host) == 0 &&
                      whole.sizes.streamed_weights_host == 4 * (size_t)whole.params.trainable_start,
                  "layer_offloading's pinned copy");
        TT_EXPECT(memcmp(whole.trainable_weights, pieces.trainable_weights,
                         sizeof(float) * (size_t)whole.params.trainable_numel) == 0,
                  "the compute tier's adapters");
    }
    /* and the same step */
    int64_t count = 0;
    for (int64_t i = 0; i < 6; i++) {
        whole.batch_inputs[i] = pieces.batch_inputs[i] = (int32_t)(i * 7 % whole.config.vocab_size);
        whole.batch_targets[i] = pieces.batch_targets[i] = (int32_t)(i * 3 % whole.config.vocab_size);
    }
    const double a = tt_step_forward_loss(&whole, &count), b = tt_step_forward_loss(&pieces, &count);
    TT_EXPECT(a == b && a > 0, "loss %.9g and %.9g (layer_offloading %d)", a, b, stream_frozen);
    free(flat);
    free(trainable);
    tt_model_state_free(&whole);
    tt_model_state_free(&pieces);
}

int main(int argc, char **argv) {
    (void)argc;
    (void)argv;
    check_init_bytes(true, TT_QUANT4_NF4);
    check_init_bytes(false, TT_QUANT4_FP4);
    check_layout();
    check_loader(false);
    check_loader(true);
    return tt_test_summary("test_qlora_load");
}
