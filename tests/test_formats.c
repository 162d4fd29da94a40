/* Formats: dtype conversions (round to nearest even, subnormals, inf, NaN), safetensors round
 * trips and every malformed-file case, model config.json in both transformers spellings, and
 * token files. Bad input must end in exit status 1 and a message naming the problem. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/dtype.h"
#include "model/model_config.h"
#include "model/safetensors.h"
#include "test_util.h"
#include "train/data.h"

static char *scratch;

static char *path_in(const char *name) {
    char *p = malloc(4200);
    snprintf(p, 4200, "%s/%s", scratch, name);
    return p;
}

static void write_text(const char *name, const char *text) {
    char *p = path_in(name);
    FILE *f = fopen(p, "wb");
    fwrite(text, 1, strlen(text), f);
    fclose(f);
    free(p);
}

/* A raw safetensors file from a header string and `data_bytes` zero bytes. */
static void write_raw_safetensors(const char *name, const char *header, size_t data_bytes) {
    char *p = path_in(name);
    FILE *f = fopen(p, "wb");
    uint64_t n = strlen(header);
    unsigned char len[8];
    for (int i = 0; i < 8; i++) len[i] = (unsigned char)(n >> (8 * i));
    fwrite(len, 1, 8, f);
    fwrite(header, 1, n, f);
    for (size_t i = 0; i < data_bytes; i++) fputc(0, f);
    fclose(f);
    free(p);
}

static void open_file(void *arg) {
    tt_st_file f;
    char *p = path_in(arg);
    tt_st_open(p, &f);
}

static void open_model_dir(void *arg) {
    tt_st_model m;
    char *p = path_in(arg);
    tt_st_model_open(p, &m);
}

static void load_config(void *arg) {
    tt_model_config c;
    char *p = path_in(arg);
    tt_model_config_load(p, &c);
}

static void open_tokens(void *arg) {
    tt_dataset ds;
    char *p = path_in(arg);
    char *paths[1] = {p};
    tt_dataset_open(&ds, paths, 1, 300, 4, 0.0, 1);
}

static void test_dtypes(void) {
    /* bf16: ties go to even, NaN stays NaN, inf stays inf */
    TT_EXPECT(tt_f32_to_bf16(1.0f) == 0x3f80, "bf16(1)");
    float one_and_half_ulp;
    uint32_t bits = 0x3f808000u; /* exactly halfway between bf16 0x3f80 and 0x3f81: round to even 0x3f80 */
    memcpy(&one_and_half_ulp, &bits, 4);
    TT_EXPECT(tt_f32_to_bf16(one_and_half_ulp) == 0x3f80, "bf16 tie to even (down)");
    bits = 0x3f818000u; /* halfway between 0x3f81 and 0x3f82: up to 0x3f82 */
    memcpy(&one_and_half_ulp, &bits, 4);
    TT_EXPECT(tt_f32_to_bf16(one_and_half_ulp) == 0x3f82, "bf16 tie to even (up)");
    TT_EXPECT(tt_f32_to_bf16(INFINITY) == 0x7f80, "bf16 inf");
    TT_EXPECT(isnan(tt_bf16_to_f32(tt_f32_to_bf16(NAN))), "bf16 NaN");
    TT_EXPECT(tt_bf16_to_f32(0xc040) == -3.0f, "bf16 -3");

    /* f16: known encodings, rounding, subnormals, overflow */
    struct {
        float value;
        uint16_t half;
    } cases[] = {{1.0f, 0x3c00},       {-2.0f, 0xc000},           {65504.0f, 0x7bff},  {0.5f, 0x3800},
                 {5.9604645e-8f, 0x0001}, {6.1035156e-5f, 0x0400}, {0.0f, 0x0000},       {1e6f, 0x7c00},
                 {-1e6f, 0xfc00},      {2.9802322e-8f, 0x0000} /* half the smallest subnormal: ties to even 0 */,
                 {8.940697e-8f, 0x0002} /* 1.5 x smallest subnormal: ties to even 2 */,
                 {1.00048828125f, 0x3c00} /* 1 + half ulp: tie to even */, {1.00146484375f, 0x3c02}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint16_t h = tt_f32_to_f16(cases[i].value);
        TT_EXPECT(h == cases[i].half, "f16(%g) = 0x%04x, expected 0x%04x", (double)cases[i].value, h, cases[i].half);
    }
    TT_EXPECT(isnan(tt_f16_to_f32(tt_f32_to_f16(NAN))), "f16 NaN");
    /* every finite half round-trips through float exactly */
    int mismatches = 0;
    for (uint32_t h = 0; h < 0x10000; h++) {
        if ((h & 0x7c00) == 0x7c00) continue;
        if (tt_f32_to_f16(tt_f16_to_f32((uint16_t)h)) != h) mismatches++;
    }
    TT_EXPECT(mismatches == 0, "%d halves do not round-trip", mismatches);
}

static void test_safetensors_round_trip(void) {
    float f32[6] = {1, -2, 3.5f, 0, 1e-3f, -7};
    uint16_t bf16[3] = {0x3f80, 0xc000, 0x4040};
    double f64[2] = {1.0 / 3.0, -1e300};
    int32_t i32[4] = {1, -1, 2147483647, 0};
    int64_t i64[1] = {-5};
    tt_st_writer w;
    tt_st_writer_init(&w);
    int64_t s23[2] = {2, 3}, s3[1] = {3}, s2[1] = {2}, s22[2] = {2, 2}, s1[1] = {1};
    tt_st_writer_add(&w, "a.f32", TT_F32, 2, s23, f32);
    tt_st_writer_add(&w, "b.bf16", TT_BF16, 1, s3, bf16);
    tt_st_writer_add(&w, "c.f16", TT_F16, 1, s3, bf16);
    tt_st_writer_add(&w, "d.f64", TT_F64, 1, s2, f64);
    tt_st_writer_add(&w, "e.i32", TT_I32, 2, s22, i32);
    tt_st_writer_add(&w, "f.i64", TT_I64, 1, s1, i64);
    tt_st_writer_add_metadata(&w, "format", "pt");
    char *p = path_in("round.safetensors");
    tt_st_writer_commit(&w, p);
    tt_st_writer_free(&w);
    char tmp[4300];
    snprintf(tmp, sizeof tmp, "%s.tmp", p);
    struct stat st;
    TT_EXPECT(stat(tmp, &st) != 0, "no .tmp left behind");

    tt_st_file f;
    tt_st_open(p, &f);
    TT_EXPECT(f.count == 6, "6 tensors, got %d", f.count);
    const tt_st_tensor *t = tt_st_find(&f, "a.f32");
    TT_EXPECT(t && t->dtype == TT_F32 && t->ndim == 2 && t->shape[0] == 2 && t->shape[1] == 3 &&
                  memcmp(t->data, f32, sizeof f32) == 0,
              "f32 tensor");
    t = tt_st_find(&f, "b.bf16");
    TT_EXPECT(t && t->dtype == TT_BF16 && memcmp(t->data, bf16, sizeof bf16) == 0, "bf16 tensor");
    t = tt_st_find(&f, "d.f64");
    TT_EXPECT(t && t->dtype == TT_F64 && memcmp(t->data, f64, sizeof f64) == 0, "f64 tensor");
    t = tt_st_find(&f, "e.i32");
    TT_EXPECT(t && t->dtype == TT_I32 && memcmp(t->data, i32, sizeof i32) == 0, "i32 tensor");
    t = tt_st_find(&f, "f.i64");
    TT_EXPECT(t && t->dtype == TT_I64 && memcmp(t->data, i64, sizeof i64) == 0, "i64 tensor");
    TT_EXPECT(((uintptr_t)tt_st_find(&f, "a.f32")->data - (uintptr_t)f.map) % 8 == 0, "data is 8-byte aligned");
    TT_EXPECT(tt_st_find(&f, "missing") == NULL, "absent tensor");
    tt_st_close(&f);
    free(p);
}

static void test_safetensors_bad_files(void) {
    write_text("short.safetensors", "abc");
    tt_expect_die(open_file, "short.safetensors", "too short");
    write_raw_safetensors("long_header.safetensors", "{}", 0);
    { /* a header length larger than the file */
        char *p = path_in("long_header.safetensors");
        FILE *f = fopen(p, "r+b");
        unsigned char len[8] = {0xff, 0xff, 0, 0, 0, 0, 0, 0};
        fwrite(len, 1, 8, f);
        fclose(f);
        free(p);
    }
    tt_expect_die(open_file, "long_header.safetensors", "header length");
    write_raw_safetensors("not_json.safetensors", "{\"a\": [", 0);
    tt_expect_die(open_file, "not_json.safetensors", "not valid JSON");
    write_raw_safetensors("dtype.safetensors", "{\"w\":{\"dtype\":\"Q4\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1);
    tt_expect_die(open_file, "dtype.safetensors", "dtype Q4");
    write_raw_safetensors("past.safetensors", "{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 8);
    tt_expect_die(open_file, "past.safetensors", "point past the end");
    write_raw_safetensors("size.safetensors", "{\"w\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,16]}}", 16);
    tt_expect_die(open_file, "size.safetensors", "need 12");
    write_raw_safetensors("overlap.safetensors",
                          "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                          "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
                          12);
    tt_expect_die(open_file, "overlap.safetensors", "overlap");
    write_raw_safetensors("dup.safetensors",
                          "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                          "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                          8);
    tt_expect_die(open_file, "dup.safetensors", "not valid JSON");
    write_raw_safetensors("neg.safetensors", "{\"w\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4);
    tt_expect_die(open_file, "neg.safetensors", "shape[0]");

    /* sharded index naming a missing shard, and a tensor its shard lacks */
    char *dir = path_in("sharded");
    mkdir(dir, 0755);
    write_raw_safetensors("sharded/model-00001-of-00002.safetensors",
                          "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4);
    write_text("sharded/model.safetensors.index.json",
               "{\"weight_map\": {\"a\": \"model-00001-of-00002.safetensors\", \"b\": "
               "\"model-00002-of-00002.safetensors\"}}");
    tt_expect_die(open_model_dir, "sharded", "does not exist");
    write_raw_safetensors("sharded/model-00002-of-00002.safetensors",
                          "{\"c\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4);
    tt_expect_die(open_model_dir, "sharded", "does not hold it");
    write_raw_safetensors("sharded/model-00002-of-00002.safetensors",
                          "{\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4);
    tt_st_model m;
    tt_st_model_open(dir, &m);
    TT_EXPECT(m.file_count == 2 && tt_st_model_find(&m, "a", NULL) && tt_st_model_find(&m, "b", NULL),
              "sharded model opens with both shards");
    tt_st_model_close(&m);
    char *empty = path_in("empty_dir");
    mkdir(empty, 0755);
    tt_expect_die(open_model_dir, "empty_dir", "neither model.safetensors nor");
    free(dir);
    free(empty);
}

static void test_model_configs(void) {
    write_text("qwen3.json",
               "{\"model_type\": \"qwen3\", \"vocab_size\": 100, \"hidden_size\": 32, \"intermediate_size\": 64,"
               " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"head_dim\": 16,"
               " \"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 1000000.0}, \"dtype\": \"bfloat16\","
               " \"tie_word_embeddings\": true, \"eos_token_id\": [5, 6]}");
    tt_model_config c;
    char *p = path_in("qwen3.json");
    tt_model_config_load(p, &c);
    TT_EXPECT(c.qk_norm && !c.attention_bias && c.head_dim == 16 && c.rope_theta == 1e6 && c.dtype == TT_BF16 &&
                  c.tie_word_embeddings && c.eos_token_id == 5 && c.bos_token_id == -1,
              "qwen3 config (transformers 5 spelling)");
    /* embed 3200 + 2 x (64 + 32*64 + 2*32*32 + 64*32 + 32 + 3*32*64) + 32 */
    TT_EXPECT(tt_model_config_param_count(&c) == 3200 + 2 * (64 + 2048 + 2048 + 2048 + 32 + 6144) + 32,
              "param count %lld", (long long)tt_model_config_param_count(&c));
    tt_model_config_free(&c);
    free(p);

    write_text("llama.json",
               "{\"model_type\": \"llama\", \"vocab_size\": 100, \"hidden_size\": 32, \"intermediate_size\": 64,"
               " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 1,"
               " \"rope_theta\": 500000.0, \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0,"
               " \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192},"
               " \"torch_dtype\": \"float16\"}");
    p = path_in("llama.json");
    tt_model_config_load(p, &c);
    TT_EXPECT(c.rope_type == TT_ROPE_LLAMA3 && c.rope_factor == 8 && c.rope_original_max_position == 8192 &&
                  c.head_dim == 8 && c.num_kv_heads == 1 && c.dtype == TT_F16 && !c.qk_norm,
              "llama 3.1 config (transformers 4 spelling)");
    tt_model_config_free(&c);
    free(p);

    write_text("qwen2.json",
               "{\"model_type\": \"qwen2\", \"vocab_size\": 100, \"hidden_size\": 32, \"intermediate_size\": 64,"
               " \"num_hidden_layers\": 2, \"num_attention_heads\": 4}");
    p = path_in("qwen2.json");
    tt_model_config_load(p, &c);
    TT_EXPECT(c.attention_bias && c.num_kv_heads == 4, "qwen2 has q/k/v biases by default");
    tt_model_config_free(&c);
    free(p);

    write_text("mistral.json",
               "{\"model_type\": \"mistral\", \"vocab_size\": 100, \"hidden_size\": 32, \"intermediate_size\": 64,"
               " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"sliding_window\": 4096}");
    p = path_in("mistral.json");
    tt_model_config_load(p, &c);
    TT_EXPECT(c.sliding_window == 4096, "mistral sliding window");
    tt_model_config_free(&c);
    free(p);

    write_text("gpt2.json", "{\"model_type\": \"gpt2\", \"vocab_size\": 100}");
    tt_expect_die(load_config, "gpt2.json", "model_type \"gpt2\" is not supported");
    write_text("no_hidden.json", "{\"model_type\": \"llama\", \"vocab_size\": 100}");
    tt_expect_die(load_config, "no_hidden.json", "\"hidden_size\" is missing");
    write_text("layers_string.json",
               "{\"model_type\": \"llama\", \"vocab_size\": 100, \"hidden_size\": 32, \"intermediate_size\": 64,"
               " \"num_hidden_layers\": \"2\", \"num_attention_heads\": 4}");
    tt_expect_die(load_config, "layers_string.json", "\"num_hidden_layers\" must be an integer");
    write_text("heads.json",
               "{\"model_type\": \"llama\", \"vocab_size\": 100, \"hidden_size\": 30, \"intermediate_size\": 64,"
               " \"num_hidden_layers\": 2, \"num_attention_heads\": 3, \"num_key_value_heads\": 2}");
    tt_expect_die(load_config, "heads.json", "multiple of num_key_value_heads");
    write_text("yarn.json",
               "{\"model_type\": \"llama\", \"vocab_size\": 100, \"hidden_size\": 32, \"intermediate_size\": 64,"
               " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"rope_scaling\": {\"rope_type\": \"yarn\"}}");
    tt_expect_die(load_config, "yarn.json", "\"yarn\"");
    write_text("broken.json", "{\"model_type\": \"llama\",\n \"vocab_size\": }");
    tt_expect_die(load_config, "broken.json", "broken.json:2");
}

static void test_token_files(void) {
    uint32_t tokens[13];
    for (int i = 0; i < 13; i++) tokens[i] = (uint32_t)(10 + i);
    char *p = path_in("ok.tok");
    tt_token_file_write(p, tokens, 13, 300, 299);
    tt_dataset ds;
    char *paths[2] = {p, p};
    tt_dataset_open(&ds, paths, 2, 300, 4, 2, 7);
    /* 26 tokens: (26 - 1) / 4 = 6 sequences, 2 held out */
    TT_EXPECT(ds.sequence_count == 6 && ds.eval_count == 2 && ds.train_count == 4, "%lld sequences",
              (long long)ds.sequence_count);
    int32_t in[4], target[4];
    bool seen[6] = {false};
    for (int64_t i = 0; i < ds.eval_count; i++) seen[ds.eval_sequences[i]] = true;
    for (int64_t i = 0; i < ds.train_count; i++) {
        TT_EXPECT(!seen[ds.epoch_order[i]], "train and eval are disjoint");
        seen[ds.epoch_order[i]] = true;
    }
    bool all = true;
    for (int i = 0; i < 6; i++) all = all && seen[i];
    TT_EXPECT(all, "train and eval cover every sequence");
    tt_dataset_get_eval(&ds, 0, in, target);
    int64_t s = ds.eval_sequences[0];
    for (int t = 0; t < 4; t++) {
        TT_EXPECT(in[t] == (int32_t)ds.tokens[s * 4 + t] && target[t] == (int32_t)ds.tokens[s * 4 + t + 1],
                  "targets are the inputs shifted by one");
    }
    /* resume: the stream continues identically from a saved position, across epochs */
    for (int i = 0; i < 3; i++) tt_dataset_next_train(&ds, in, target);
    int64_t epoch, index;
    tt_dataset_get_position(&ds, &epoch, &index);
    int32_t expected[10][4];
    for (int i = 0; i < 10; i++) tt_dataset_next_train(&ds, expected[i], target);
    tt_dataset resumed;
    tt_dataset_open(&resumed, paths, 2, 300, 4, 2, 7);
    tt_dataset_set_position(&resumed, epoch, index);
    bool same = true;
    for (int i = 0; i < 10; i++) {
        tt_dataset_next_train(&resumed, in, target);
        same = same && memcmp(in, expected[i], sizeof in) == 0;
    }
    TT_EXPECT(same, "resumed data stream is identical");
    tt_dataset_close(&resumed);
    tt_dataset_close(&ds);

    /* bad token files */
    tokens[5] = 300;
    tt_token_file_write(p, tokens, 13, 300, 299);
    TT_EXPECT(tt_expect_die(open_tokens, "ok.tok", "token 5 has id 300"), "id out of range");
    write_text("magic.tok", "NOTTOKENS_______________________________");
    tt_expect_die(open_tokens, "magic.tok", "not a tiertrain token file");
    tokens[5] = 1;
    tt_token_file_write(p, tokens, 13, 300, 299);
    truncate(p, 32 + 4 * 10);
    tt_expect_die(open_tokens, "ok.tok", "truncated");
    tt_token_file_write(p, tokens, 3, 300, 299);
    tt_expect_die(open_tokens, "ok.tok", "sequence_len + 1");
    { /* version 2 */
        tt_token_file_write(p, tokens, 13, 300, 299);
        FILE *f = fopen(p, "r+b");
        fseek(f, 8, SEEK_SET);
        fputc(2, f);
        fclose(f);
    }
    tt_expect_die(open_tokens, "ok.tok", "version 2");
    free(p);
}

int main(void) {
    scratch = tt_test_tempdir("formats");
    test_dtypes();
    test_safetensors_round_trip();
    test_safetensors_bad_files();
    test_model_configs();
    test_token_files();
    free(scratch);
    return tt_test_summary("formats");
}
