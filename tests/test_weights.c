/* Weights out and back in: single-file and sharded saves (with the index transformers
 * reads) load back bit-identically in fp32 and rounded correctly in bf16; every family's checkpoint loaded and saved
 * again is transformers' file byte for byte, a multimodal Gemma 3's vision tower and projector included (kept from
 * the base, single file and sharded). */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/dtype.h"
#include "model/params.h"
#include "model/safetensors.h"
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

/* A Hugging Face checkpoint loaded and saved again (with the checkpoint as the base whose other tensors are kept)
 * holds the same names, dtypes, shapes and bytes as the file transformers wrote; max_shard_bytes > 0: in shards. */
static void check_resave_matches_transformers(const char *source_dir, const char *fixture, size_t max_shard_bytes) {
    char dir[4096], path[4200];
    snprintf(dir, sizeof dir, "%s/tests/fixtures/%s", source_dir, fixture);
    snprintf(path, sizeof path, "%s/config.json", dir);
    tt_model_config c;
    tt_model_config_load(path, &c);
    tt_param_table table;
    tt_param_table_build(&c, &table);
    float *flat = calloc(sizeof(float), (size_t)table.total_numel);
    tt_weights_load_hf(flat, &table, dir);
    char *out = tt_test_tempdir("resave");
    tt_weights_save_hf(flat, &table, &c, c.dtype, out, max_shard_bytes, dir);

    tt_st_file original;
    tt_st_model saved;
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    tt_st_open(path, &original);
    tt_st_model_open(out, &saved);
    int saved_count = 0;
    for (int f = 0; f < saved.file_count; f++) saved_count += saved.files[f].count;
    TT_EXPECT(original.count == saved_count, "%s: %d tensors saved, transformers wrote %d", fixture, saved_count,
              original.count);
    TT_EXPECT(max_shard_bytes == 0 || saved.file_count > 1, "%s: shards of %zu bytes", fixture, max_shard_bytes);
    for (int i = 0; i < original.count; i++) {
        const tt_st_tensor *a = &original.tensors[i], *b = tt_st_model_find(&saved, a->name, NULL);
        TT_EXPECT(b && b->dtype == a->dtype && b->ndim == a->ndim && b->bytes == a->bytes &&
                      memcmp(a->shape, b->shape, sizeof a->shape) == 0 && memcmp(a->data, b->data, a->bytes) == 0,
                  "%s: tensor %s differs from what transformers wrote", fixture, a->name);
    }
    /* config.json goes back out unchanged, so transformers reads the same model. */
    tt_model_config again;
    snprintf(path, sizeof path, "%s/config.json", out);
    tt_model_config_load(path, &again);
    TT_EXPECT(strcmp(again.json_text, c.json_text) == 0, "%s: config.json changed", fixture);
    tt_model_config_free(&again);
    tt_st_close(&original);
    tt_st_model_close(&saved);
    free(flat);
    free(out);
    tt_param_table_free(&table);
    tt_model_config_free(&c);
}

/* A checkpoint that keeps each layer's experts as 3-D tensors, as transformers 5 holds them (mlp.experts.gate_up_proj
 * [E, 2 Fm, D], mlp.experts.down_proj [E, D, Fm]), loads the weights of the per-expert checkpoint: the Qwen3-MoE
 * fixture rewritten so. */
static void check_fused_experts_load(const char *source_dir) {
    char dir[4096], path[4200], out[] = "/tmp/tt_fused_experts_XXXXXX";
    snprintf(dir, sizeof dir, "%s/tests/fixtures/tiny_qwen3_moe", source_dir);
    snprintf(path, sizeof path, "%s/config.json", dir);
    tt_model_config c;
    tt_model_config_load(path, &c);
    tt_param_table table;
    tt_param_table_build(&c, &table);
    float *hub = calloc((size_t)table.total_numel, sizeof(float)),
          *fused = calloc((size_t)table.total_numel, sizeof(float));
    tt_weights_load_hf(hub, &table, dir);
    TT_EXPECT(mkdtemp(out) != NULL, "a scratch directory");
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    tt_st_file file;
    tt_st_open(path, &file);
    tt_st_writer writer;
    tt_st_writer_init(&writer);
    const int64_t E = c.num_experts, F = c.moe_intermediate_size, D = c.hidden_size;
    const int64_t L = c.num_layers, gate_up_numel = E * 2 * F * D, down_numel = E * D * F;
    /* every layer's stacked experts, alive until the commit (the writer keeps the pointers) */
    float *gate_up_all = malloc(sizeof(float) * (size_t)(L * gate_up_numel));
    float *down_all = malloc(sizeof(float) * (size_t)(L * down_numel));
    for (int64_t l = 0; l < L; l++) {
        float *gate_up = gate_up_all + l * gate_up_numel, *down = down_all + l * down_numel;
        for (int64_t e = 0; e < E; e++) { /* the fixture's float32 tensors, stacked */
            char name[128];
            const char *const parts[3] = {"gate_proj", "up_proj", "down_proj"};
            for (int k = 0; k < 3; k++) {
                snprintf(name, sizeof name, "model.layers.%lld.mlp.experts.%lld.%s.weight", (long long)l, (long long)e,
                         parts[k]);
                const tt_st_tensor *t = tt_st_find(&file, name);
                float *to = k == 2 ? down + e * D * F : gate_up + (e * 2 + k) * F * D;
                memcpy(to, t->data, t->bytes);
            }
        }
        char name[128];
        const int64_t gate_up_shape[3] = {E, 2 * F, D}, down_shape[3] = {E, D, F};
        snprintf(name, sizeof name, "model.layers.%lld.mlp.experts.gate_up_proj", (long long)l);
        tt_st_writer_add(&writer, name, TT_F32, 3, gate_up_shape, gate_up);
        snprintf(name, sizeof name, "model.layers.%lld.mlp.experts.down_proj", (long long)l);
        tt_st_writer_add(&writer, name, TT_F32, 3, down_shape, down);
    }
    for (int i = 0; i < file.count; i++) /* everything else as it is */
        if (!strstr(file.tensors[i].name, ".experts."))
            tt_st_writer_add(&writer, file.tensors[i].name, file.tensors[i].dtype, file.tensors[i].ndim,
                             file.tensors[i].shape, file.tensors[i].data);
    snprintf(path, sizeof path, "%s/model.safetensors", out);
    tt_st_writer_commit(&writer, path);
    tt_st_writer_free(&writer);
    tt_st_close(&file);
    free(gate_up_all);
    free(down_all);
    tt_weights_load_hf(fused, &table, out);
    TT_EXPECT(memcmp(hub, fused, sizeof(float) * (size_t)table.total_numel) == 0,
              "the experts as 3-D tensors load the per-expert checkpoint's weights");
    snprintf(path, sizeof path, "rm -rf '%s'", out);
    TT_EXPECT(system(path) == 0, "scratch removed");
    free(hub);
    free(fused);
    tt_param_table_free(&table);
    tt_model_config_free(&c);
}

int main(int argc, char **argv) {
    const char *source_dir = argc > 1 ? argv[1] : ".";
    const char *fixtures[] = {"tiny_qwen3",    "tiny_llama",   "tiny_qwen2",   "tiny_gemma3", "tiny_gemma2",
                              "tiny_olmo2",    "tiny_smollm3", "tiny_granite", "tiny_phi3",   "tiny_gemma3_multimodal",
                              "tiny_qwen3_moe"};
    for (size_t i = 0; i < sizeof fixtures / sizeof *fixtures; i++)
        check_resave_matches_transformers(source_dir, fixtures[i], 0);
    check_resave_matches_transformers(source_dir, "tiny_gemma3_multimodal", 4096); /* the kept tensors sharded too */
    check_fused_experts_load(source_dir);

    tt_model_config c = small_config();
    tt_param_table table;
    tt_param_table_build(&c, &table);
    TT_EXPECT(table.count == 2 + 3 * 12 + 1, "qwen2 has biases and an untied head: %d parameters", table.count);
    size_t bytes = sizeof(float) * (size_t)table.total_numel;
    float *original = calloc(1, bytes), *loaded = calloc(1, bytes);
    tt_weights_init_random(original, &table, 0.5, 3);

    char *dir = tt_test_tempdir("weights");
    tt_weights_save_hf(original, &table, &c, TT_F32, dir, 0, NULL);
    TT_EXPECT(exists(dir, "model.safetensors") && exists(dir, "config.json"), "single-file save");
    TT_EXPECT(!exists(dir, "model.safetensors.index.json"), "no index for one file");
    tt_weights_load_hf(loaded, &table, dir);
    TT_EXPECT(memcmp(original, loaded, bytes) == 0, "fp32 round trip is bit-identical");

    /* Shards of at most 4 KiB: several files and an index; the single file goes away. */
    tt_weights_save_hf(original, &table, &c, TT_F32, dir, 4096, NULL);
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
    tt_weights_save_hf(original, &table, &c, TT_BF16, dir16, 0, NULL);
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
