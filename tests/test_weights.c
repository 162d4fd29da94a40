/* Weights out and back in: single-file and sharded saves (with the index transformers
 * reads) load back bit-identically in fp32 and rounded correctly in bf16. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/dtype.h"
#include "model/params.h"
#include "model/weights.h"
#include "test_util.h"

static tt_model_config small_config(void) {
    tt_model_config c;
    memset(&c, 0, sizeof c);
    snprintf(c.model_type, sizeof c.model_type, "qwen2");
    c.vocab_size = 40;
    c.hidden_size = 16;
    c.intermediate_size = 24;
    c.num_layers = 3;
    c.num_heads = 4;
    c.num_kv_heads = 2;
    c.head_dim = 4;
    c.max_position_embeddings = 32;
    c.rms_norm_eps = 1e-6;
    c.rope_theta = 10000;
    c.attention_bias = true;
    c.dtype = TT_F32;
    c.bos_token_id = c.eos_token_id = -1;
    return c;
}

static bool exists(const char *dir, const char *name) {
    char path[4200];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return stat(path, &st) == 0;
}

int main(void) {
    tt_model_config c = small_config();
    tt_param_table table;
    tt_param_table_build(&c, &table);
    TT_EXPECT(table.count == 2 + 3 * 12 + 1, "qwen2 has biases and an untied head: %d parameters", table.count);
    size_t bytes = sizeof(float) * (size_t)table.total_numel;
    float *original = calloc(1, bytes), *loaded = calloc(1, bytes);
    tt_weights_init_random(original, &table, 0.5, 3);

    char *dir = tt_test_tempdir("weights");
    tt_weights_save_hf(original, &table, &c, TT_F32, dir, 0);
    TT_EXPECT(exists(dir, "model.safetensors") && exists(dir, "config.json"), "single-file save");
    TT_EXPECT(!exists(dir, "model.safetensors.index.json"), "no index for one file");
    tt_weights_load_hf(loaded, &table, dir);
    TT_EXPECT(memcmp(original, loaded, bytes) == 0, "fp32 round trip is bit-identical");

    /* Shards of at most 4 KiB: several files and an index; the single file goes away. */
    tt_weights_save_hf(original, &table, &c, TT_F32, dir, 4096);
    TT_EXPECT(exists(dir, "model.safetensors.index.json"), "sharded save writes the index");
    TT_EXPECT(!exists(dir, "model.safetensors"), "sharded save removes the stale single file");
    int shards = 0;
    char name[64];
    for (int n = 2; n < 100 && !shards; n++) {
        snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", n, n);
        if (exists(dir, name)) shards = n;
    }
    snprintf(name, sizeof name, "model-00001-of-%05d.safetensors", shards);
    TT_EXPECT(shards >= 2 && exists(dir, name), "shard names follow transformers (found %d shards)", shards);
    memset(loaded, 0, bytes);
    tt_weights_load_hf(loaded, &table, dir);
    TT_EXPECT(memcmp(original, loaded, bytes) == 0, "sharded fp32 round trip is bit-identical");

    /* bf16: every value comes back as its round-to-nearest-even bf16 value. */
    char *dir16 = tt_test_tempdir("weights16");
    tt_weights_save_hf(original, &table, &c, TT_BF16, dir16, 0);
    tt_weights_load_hf(loaded, &table, dir16);
    bool all_rounded = true;
    for (int i = 0; i < table.count; i++) {
        const tt_param_info *p = &table.params[i];
        for (int64_t k = 0; k < p->numel; k++) {
            float want = tt_bf16_to_f32(tt_f32_to_bf16(original[p->offset + k]));
            if (memcmp(&want, &loaded[p->offset + k], 4) != 0) all_rounded = false;
        }
    }
    TT_EXPECT(all_rounded, "bf16 save rounds to nearest even");

    free(original);
    free(loaded);
    free(dir);
    free(dir16);
    tt_param_table_free(&table);
    return tt_test_summary("weights");
}
