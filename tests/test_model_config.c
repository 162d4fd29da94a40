/* config.json: the supported model types in both transformers spellings (4: rope_theta,
 * rope_scaling, torch_dtype; 5: rope_parameters, dtype), defaults, the families' own keys (Gemma's layer types and
 * RoPE per layer type, soft-capping; SmolLM3's layers without RoPE; Granite's multipliers), parameter counts checked
 * against the published sizes of real models, save/load round trips, and every bad config
 * ending in exit status 1 with a message naming the file and the key. */
#include <ftw.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "model/arch.h"
#include "model/model_config.h"
#include "test_util.h"

static char *read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    size_t got = fread(buf, 1, (size_t)n, f);
    buf[got] = 0;
    fclose(f);
    return buf;
}

static void load(const char *name, tt_model_config *c) {
    char *p = tt_test_path(name);
    tt_model_config_load(p, c);
    free(p);
}

static void load_config(void *arg) {
    tt_model_config c;
    tt_model_config_load(tt_test_path(arg), &c);
}

/* A config with one line of extra keys, for the error cases: text is a JSON fragment inserted
 * after the model type; the name names the file. */
static void write_llama(const char *name, const char *model_type, const char *extra) {
    char text[4096];
    snprintf(text, sizeof text,
             "{\"model_type\": \"%s\", \"vocab_size\": 100, \"intermediate_size\": 64, \"num_attention_heads\": 4%s%s}",
             model_type, extra[0] ? ", " : "", extra);
    tt_test_write_text(name, text);
}

/* Qwen3-0.6B's config.json as transformers 5 writes it. */
static const char *qwen3_config = "{\n"
                                  "  \"architectures\": [\"Qwen3ForCausalLM\"],\n"
                                  "  \"attention_bias\": false,\n"
                                  "  \"attention_dropout\": 0.0,\n"
                                  "  \"bos_token_id\": 151643,\n"
                                  "  \"dtype\": \"bfloat16\",\n"
                                  "  \"eos_token_id\": 151645,\n"
                                  "  \"head_dim\": 128,\n"
                                  "  \"hidden_act\": \"silu\",\n"
                                  "  \"hidden_size\": 1024,\n"
                                  "  \"initializer_range\": 0.02,\n"
                                  "  \"intermediate_size\": 3072,\n"
                                  "  \"layer_types\": [\"full_attention\", \"full_attention\"],\n"
                                  "  \"max_position_embeddings\": 40960,\n"
                                  "  \"max_window_layers\": 28,\n"
                                  "  \"model_type\": \"qwen3\",\n"
                                  "  \"num_attention_heads\": 16,\n"
                                  "  \"num_hidden_layers\": 28,\n"
                                  "  \"num_key_value_heads\": 8,\n"
                                  "  \"rms_norm_eps\": 1e-06,\n"
                                  "  \"rope_parameters\": {\"rope_theta\": 1000000, \"rope_type\": \"default\"},\n"
                                  "  \"sliding_window\": null,\n"
                                  "  \"tie_word_embeddings\": true,\n"
                                  "  \"transformers_version\": \"5.0.0\",\n"
                                  "  \"use_cache\": true,\n"
                                  "  \"use_sliding_window\": false,\n"
                                  "  \"vocab_size\": 151936\n"
                                  "}\n";

/* Llama-3.1-8B's config.json (transformers 4 spelling). */
static const char *llama31_config = "{\n"
                                    "  \"architectures\": [\"LlamaForCausalLM\"],\n"
                                    "  \"attention_bias\": false,\n"
                                    "  \"attention_dropout\": 0.0,\n"
                                    "  \"bos_token_id\": 128000,\n"
                                    "  \"eos_token_id\": [128001, 128008, 128009],\n"
                                    "  \"hidden_act\": \"silu\",\n"
                                    "  \"hidden_size\": 4096,\n"
                                    "  \"initializer_range\": 0.02,\n"
                                    "  \"intermediate_size\": 14336,\n"
                                    "  \"max_position_embeddings\": 131072,\n"
                                    "  \"mlp_bias\": false,\n"
                                    "  \"model_type\": \"llama\",\n"
                                    "  \"num_attention_heads\": 32,\n"
                                    "  \"num_hidden_layers\": 32,\n"
                                    "  \"num_key_value_heads\": 8,\n"
                                    "  \"pretraining_tp\": 1,\n"
                                    "  \"rms_norm_eps\": 1e-05,\n"
                                    "  \"rope_scaling\": {\n"
                                    "    \"factor\": 8.0,\n"
                                    "    \"low_freq_factor\": 1.0,\n"
                                    "    \"high_freq_factor\": 4.0,\n"
                                    "    \"original_max_position_embeddings\": 8192,\n"
                                    "    \"rope_type\": \"llama3\"\n"
                                    "  },\n"
                                    "  \"rope_theta\": 500000.0,\n"
                                    "  \"tie_word_embeddings\": false,\n"
                                    "  \"torch_dtype\": \"bfloat16\",\n"
                                    "  \"transformers_version\": \"4.43.0.dev0\",\n"
                                    "  \"use_cache\": true,\n"
                                    "  \"vocab_size\": 128256\n"
                                    "}\n";

/* Qwen2.5-0.5B's config.json (no attention_bias key: Qwen2 has q/k/v biases). */
static const char *qwen2_config =
    "{\"architectures\": [\"Qwen2ForCausalLM\"], \"attention_dropout\": 0.0, \"bos_token_id\": 151643,"
    " \"eos_token_id\": 151643, \"hidden_act\": \"silu\", \"hidden_size\": 896, \"initializer_range\": 0.02,"
    " \"intermediate_size\": 4864, \"max_position_embeddings\": 32768, \"max_window_layers\": 24,"
    " \"model_type\": \"qwen2\", \"num_attention_heads\": 14, \"num_hidden_layers\": 24, \"num_key_value_heads\": 2,"
    " \"rms_norm_eps\": 1e-06, \"rope_theta\": 1000000.0, \"sliding_window\": 32768, \"tie_word_embeddings\": true,"
    " \"torch_dtype\": \"bfloat16\", \"transformers_version\": \"4.40.1\", \"use_cache\": true,"
    " \"use_sliding_window\": false, \"vocab_size\": 151936}";

/* Mistral-7B-v0.1's config.json. */
static const char *mistral_config =
    "{\"architectures\": [\"MistralForCausalLM\"], \"bos_token_id\": 1, \"eos_token_id\": 2, \"hidden_act\": \"silu\","
    " \"hidden_size\": 4096, \"initializer_range\": 0.02, \"intermediate_size\": 14336,"
    " \"max_position_embeddings\": 32768, \"model_type\": \"mistral\", \"num_attention_heads\": 32,"
    " \"num_hidden_layers\": 32, \"num_key_value_heads\": 8, \"rms_norm_eps\": 1e-05, \"rope_theta\": 10000.0,"
    " \"sliding_window\": 4096, \"tie_word_embeddings\": false, \"torch_dtype\": \"bfloat16\","
    " \"transformers_version\": \"4.34.0.dev0\", \"use_cache\": true, \"vocab_size\": 32000}";

static void test_qwen3(void) {
    tt_test_write_text("qwen3.json", qwen3_config);
    tt_model_config c;
    load("qwen3.json", &c);
    TT_EXPECT(strcmp(c.model_type, "qwen3") == 0, "model_type %s", c.model_type);
    TT_EXPECT(c.vocab_size == 151936 && c.hidden_size == 1024 && c.intermediate_size == 3072 && c.num_layers == 28 &&
                  c.num_heads == 16 && c.num_kv_heads == 8,
              "qwen3 sizes");
    TT_EXPECT(c.head_dim == 128, "explicit head_dim (not hidden/heads = 64): %lld", (long long)c.head_dim);
    TT_EXPECT(tt_arch_of(&c)->qk_norm == TT_QK_NORM_PER_HEAD && !c.attention_bias && c.tie_word_embeddings &&
                  c.sliding_window == 0,
              "qwen3 flags");
    TT_EXPECT(c.rope_type == TT_ROPE_DEFAULT && c.rope_theta == 1e6, "rope_parameters.rope_theta %g", c.rope_theta);
    TT_EXPECT(c.dtype == TT_BF16, "\"dtype\" (transformers 5)");
    TT_EXPECT(c.rms_norm_eps == 1e-6 && c.max_position_embeddings == 40960, "eps and positions");
    TT_EXPECT(c.bos_token_id == 151643 && c.eos_token_id == 151645, "token ids");
    TT_EXPECT(c.json_text && strcmp(c.json_text, qwen3_config) == 0, "the raw text is kept");
    TT_EXPECT(tt_model_config_param_count(&c) == 596049920LL, "Qwen3-0.6B has 596,049,920 parameters, got %lld",
              (long long)tt_model_config_param_count(&c));

    /* saving writes the original text back byte for byte */
    char *out = tt_test_path("qwen3_saved.json");
    tt_model_config_save(&c, out);
    char *saved = read_text(out);
    TT_EXPECT(saved && strcmp(saved, qwen3_config) == 0, "save keeps the original text unchanged");
    free(saved);
    free(out);
    tt_model_config_free(&c);
    TT_EXPECT(c.json_text == NULL, "free clears json_text");
}

static void test_llama31(void) {
    tt_test_write_text("llama31.json", llama31_config);
    tt_model_config c;
    load("llama31.json", &c);
    TT_EXPECT(c.rope_type == TT_ROPE_LLAMA3 && c.rope_theta == 500000.0 && c.rope_factor == 8.0 &&
                  c.rope_low_freq_factor == 1.0 && c.rope_high_freq_factor == 4.0 &&
                  c.rope_original_max_position == 8192,
              "llama3 rope_scaling (transformers 4)");
    TT_EXPECT(c.head_dim == 128 && c.num_kv_heads == 8 && tt_arch_of(&c)->qk_norm == TT_QK_NORM_NONE &&
                  !c.attention_bias && !c.tie_word_embeddings,
              "llama 3.1 shape and flags");
    TT_EXPECT(c.dtype == TT_BF16 && c.rms_norm_eps == 1e-5, "torch_dtype (transformers 4)");
    TT_EXPECT(c.bos_token_id == 128000 && c.eos_token_id == 128001, "eos list: the first id (%lld)",
              (long long)c.eos_token_id);
    TT_EXPECT(tt_model_config_param_count(&c) == 8030261248LL, "Llama-3.1-8B has 8,030,261,248 parameters, got %lld",
              (long long)tt_model_config_param_count(&c));
    tt_model_config_free(&c);

    /* The same model in transformers 5 spelling: everything in rope_parameters, "dtype". */
    tt_test_write_text(
        "llama31_v5.json",
        "{\"model_type\": \"llama\", \"vocab_size\": 128256, \"hidden_size\": 4096, \"intermediate_size\": 14336,"
        " \"num_hidden_layers\": 32, \"num_attention_heads\": 32, \"num_key_value_heads\": 8,"
        " \"rope_parameters\": {\"rope_type\": \"llama3\", \"rope_theta\": 500000.0, \"factor\": 8.0,"
        " \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192},"
        " \"dtype\": \"float16\", \"bos_token_id\": null}");
    load("llama31_v5.json", &c);
    TT_EXPECT(c.rope_type == TT_ROPE_LLAMA3 && c.rope_theta == 500000.0 && c.rope_factor == 8.0 &&
                  c.rope_original_max_position == 8192 && c.dtype == TT_F16 && c.bos_token_id == -1 &&
                  c.eos_token_id == -1,
              "llama3 rope_parameters (transformers 5)");
    TT_EXPECT(c.max_position_embeddings == 2048 && c.rms_norm_eps == 1e-6, "defaults");
    tt_model_config_free(&c);

    /* older spelling: "type" instead of "rope_type"; theta default 10000; no dtype: float32 */
    tt_test_write_text(
        "llama_type.json",
        "{\"model_type\": \"llama\", \"vocab_size\": 100, \"hidden_size\": 32, \"intermediate_size\": 64,"
        " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"rope_scaling\": {\"type\": \"llama3\","
        " \"factor\": 32, \"low_freq_factor\": 1, \"high_freq_factor\": 4,"
        " \"original_max_position_embeddings\": 8192}}");
    load("llama_type.json", &c);
    TT_EXPECT(c.rope_type == TT_ROPE_LLAMA3 && c.rope_factor == 32 && c.rope_theta == 10000.0 && c.dtype == TT_F32 &&
                  c.num_kv_heads == 4 && c.head_dim == 8,
              "rope_scaling.type, integer factors, defaults");
    tt_model_config_free(&c);
}

static void test_qwen2_mistral(void) {
    tt_test_write_text("qwen2.json", qwen2_config);
    tt_model_config c;
    load("qwen2.json", &c);
    TT_EXPECT(c.attention_bias && tt_arch_of(&c)->qk_norm == TT_QK_NORM_NONE && c.tie_word_embeddings,
              "qwen2 has q/k/v biases by default");
    TT_EXPECT(c.sliding_window == 0, "qwen2 ignores sliding_window while use_sliding_window is false");
    TT_EXPECT(c.head_dim == 64 && c.num_kv_heads == 2, "head_dim = hidden / heads");
    TT_EXPECT(tt_model_config_param_count(&c) == 494032768LL, "Qwen2.5-0.5B has 494,032,768 parameters, got %lld",
              (long long)tt_model_config_param_count(&c));
    tt_model_config_free(&c);
    write_llama("qwen2_nobias.json", "qwen2",
                "\"hidden_size\": 32, \"num_hidden_layers\": 1, \"attention_bias\": false");
    load("qwen2_nobias.json", &c);
    TT_EXPECT(!c.attention_bias, "an explicit attention_bias wins");
    tt_model_config_free(&c);
    write_llama("llama_bias.json", "llama", "\"hidden_size\": 32, \"num_hidden_layers\": 1, \"attention_bias\": true");
    load("llama_bias.json", &c);
    TT_EXPECT(c.attention_bias, "llama with attention_bias true");
    tt_model_config_free(&c);

    tt_test_write_text("mistral.json", mistral_config);
    load("mistral.json", &c);
    TT_EXPECT(strcmp(c.model_type, "mistral") == 0 && c.sliding_window == 4096 && !c.attention_bias &&
                  tt_arch_of(&c)->qk_norm == TT_QK_NORM_NONE,
              "mistral sliding window %lld", (long long)c.sliding_window);
    TT_EXPECT(tt_model_config_param_count(&c) == 7241732096LL, "Mistral-7B has 7,241,732,096 parameters, got %lld",
              (long long)tt_model_config_param_count(&c));
    tt_model_config_free(&c);
    write_llama("mistral_null.json", "mistral",
                "\"hidden_size\": 32, \"num_hidden_layers\": 1, \"sliding_window\": null");
    load("mistral_null.json", &c);
    TT_EXPECT(c.sliding_window == 0, "mistral sliding_window null: full attention");
    tt_model_config_free(&c);
    write_llama("llama_window.json", "llama", "\"hidden_size\": 32, \"num_hidden_layers\": 1, \"sliding_window\": 64");
    load("llama_window.json", &c);
    TT_EXPECT(c.sliding_window == 0, "sliding_window is read for mistral only");
    tt_model_config_free(&c);
}

static void test_param_count(void) {
    /* A small shape counted by hand: V=10 D=8 F=12 L=2 Hq=4 Hkv=2 hd=4.
     * per layer: norms 2*8 + q 16*8 + k,v 2*8*8 + o 8*16 + mlp 3*8*12 = 16+128+128+128+288 = 688 */
    tt_model_config c;
    memset(&c, 0, sizeof c);
    snprintf(c.model_type, sizeof c.model_type, "llama");
    c.vocab_size = 10;
    c.hidden_size = 8;
    c.intermediate_size = 12;
    c.num_layers = 2;
    c.num_heads = 4;
    c.num_kv_heads = 2;
    c.head_dim = 4;
    TT_EXPECT(tt_model_config_param_count(&c) == 80 + 2 * 688 + 8 + 80, "untied: %lld",
              (long long)tt_model_config_param_count(&c));
    c.tie_word_embeddings = true;
    TT_EXPECT(tt_model_config_param_count(&c) == 80 + 2 * 688 + 8, "tied");
    c.attention_bias = true; /* q/k/v: + (4 + 2*2) * 4 = 32 per layer, Llama's o_proj + 8 */
    TT_EXPECT(tt_model_config_param_count(&c) == 80 + 2 * (688 + 32 + 8) + 8, "with biases");
    snprintf(c.model_type, sizeof c.model_type, "qwen2"); /* Qwen2's o_proj has none */
    TT_EXPECT(tt_model_config_param_count(&c) == 80 + 2 * (688 + 32) + 8, "with Qwen2's biases");
    snprintf(c.model_type, sizeof c.model_type, "qwen3"); /* q/k norms: + 2 * 4 per layer */
    TT_EXPECT(tt_model_config_param_count(&c) == 80 + 2 * (688 + 32 + 8 + 8) + 8, "with q/k norms");
}

/* A config built in code (no json_text) is saved as a fresh HF config.json that loads back to
 * the same fields. */
static void test_save_fresh(void) {
    const char *types[] = {"llama", "mistral", "qwen2", "qwen3"};
    const char *architectures[] = {"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM"};
    for (int i = 0; i < 4; i++) {
        tt_model_config c;
        memset(&c, 0, sizeof c);
        snprintf(c.model_type, sizeof c.model_type, "%s", types[i]);
        c.vocab_size = 300;
        c.hidden_size = 64;
        c.intermediate_size = 96;
        c.num_layers = 3;
        c.num_heads = 8;
        c.num_kv_heads = 2;
        c.head_dim = i == 3 ? 16 : 8;
        c.max_position_embeddings = 512;
        c.rms_norm_eps = 1e-5;
        c.rope_theta = 500000.0;
        c.rope_type = i == 0 ? TT_ROPE_LLAMA3 : TT_ROPE_DEFAULT;
        if (i == 0) {
            c.rope_factor = 8;
            c.rope_low_freq_factor = 1;
            c.rope_high_freq_factor = 4;
            c.rope_original_max_position = 128;
        }
        c.sliding_window = i == 1 ? 256 : 0;
        c.tie_word_embeddings = i % 2 == 0;
        c.attention_bias = i == 2;
        c.dtype = i == 1 ? TT_F16 : TT_BF16;
        c.bos_token_id = i == 2 ? -1 : 1;
        c.eos_token_id = 2;
        tt_model_config_validate(&c, "fresh config");
        char name[64];
        snprintf(name, sizeof name, "fresh_%s.json", types[i]);
        char *p = tt_test_path(name);
        tt_model_config_save(&c, p);
        char *text = read_text(p);
        char arch[96];
        snprintf(arch, sizeof arch, "\"%s\"", architectures[i]);
        TT_EXPECT(text && strstr(text, arch) && strstr(text, "\"torch_dtype\"") &&
                      strstr(text, "\"rms_norm_eps\": 1e-5"),
                  "%s: architectures, torch_dtype and short reals: %s", types[i], text ? text : "(none)");
        tt_model_config d;
        tt_model_config_load(p, &d);
        TT_EXPECT(strcmp(d.model_type, c.model_type) == 0 && d.vocab_size == c.vocab_size &&
                      d.hidden_size == c.hidden_size && d.intermediate_size == c.intermediate_size &&
                      d.num_layers == c.num_layers && d.num_heads == c.num_heads && d.num_kv_heads == c.num_kv_heads &&
                      d.head_dim == c.head_dim && d.max_position_embeddings == c.max_position_embeddings &&
                      d.rms_norm_eps == c.rms_norm_eps && d.rope_theta == c.rope_theta && d.rope_type == c.rope_type &&
                      d.rope_factor == c.rope_factor && d.rope_low_freq_factor == c.rope_low_freq_factor &&
                      d.rope_high_freq_factor == c.rope_high_freq_factor &&
                      d.rope_original_max_position == c.rope_original_max_position &&
                      d.sliding_window == c.sliding_window && d.tie_word_embeddings == c.tie_word_embeddings &&
                      d.attention_bias == c.attention_bias && d.dtype == c.dtype && d.bos_token_id == c.bos_token_id &&
                      d.eos_token_id == c.eos_token_id,
                  "%s: a fresh config.json loads back to the same fields", types[i]);
        TT_EXPECT(d.json_text && text && strcmp(d.json_text, text) == 0, "%s: json_text is the file", types[i]);
        tt_model_config_free(&d);
        free(text);
        char tmp[4300];
        snprintf(tmp, sizeof tmp, "%s.tmp", p);
        struct stat st;
        TT_EXPECT(stat(tmp, &st) != 0, "no .tmp left behind");
        free(p);
    }
}

static void test_errors(void) {
    write_llama("gpt2.json", "gpt2", "\"hidden_size\": 32");
    tt_expect_die(load_config, "gpt2.json", "model_type \"gpt2\" is not supported");
    tt_expect_die(load_config, "gpt2.json",
                  "llama, mistral, qwen2, qwen3, gemma2, gemma3_text, gemma3, olmo2, "
                  "smollm3, granite, phi3 and qwen3_moe");
    tt_test_write_text("no_type.json", "{\"vocab_size\": 100}");
    tt_expect_die(load_config, "no_type.json", "no_type.json: key \"model_type\" is missing");

    write_llama("no_hidden.json", "llama", "\"num_hidden_layers\": 2");
    tt_expect_die(load_config, "no_hidden.json", "no_hidden.json: key \"hidden_size\" is missing");
    write_llama("layers_string.json", "llama", "\"hidden_size\": 32, \"num_hidden_layers\": \"2\"");
    tt_expect_die(load_config, "layers_string.json",
                  "layers_string.json: key \"num_hidden_layers\" must be an integer, not a string");
    write_llama("layers_real.json", "llama", "\"hidden_size\": 32, \"num_hidden_layers\": 2.0");
    tt_expect_die(load_config, "layers_real.json", "\"num_hidden_layers\" must be an integer, not a real number");
    write_llama("tie_string.json", "llama",
                "\"hidden_size\": 32, \"num_hidden_layers\": 2, \"tie_word_embeddings\": 1");
    tt_expect_die(load_config, "tie_string.json", "\"tie_word_embeddings\" must be true or false, not an integer");
    write_llama("eps_string.json", "llama",
                "\"hidden_size\": 32, \"num_hidden_layers\": 2, \"rms_norm_eps\": \"1e-6\"");
    tt_expect_die(load_config, "eps_string.json", "\"rms_norm_eps\" must be a number, not a string");
    write_llama("eos_string.json", "llama",
                "\"hidden_size\": 32, \"num_hidden_layers\": 2, \"eos_token_id\": [1, \"2\"]");
    tt_expect_die(load_config, "eos_string.json", "\"eos_token_id\"[1] must be an integer");

    write_llama("heads.json", "llama",
                "\"hidden_size\": 36, \"num_hidden_layers\": 2, \"num_key_value_heads\": 3, \"head_dim\": 12");
    tt_expect_die(load_config, "heads.json",
                  "heads.json: num_attention_heads (4) must be a multiple of num_key_value_heads (3)");
    write_llama("odd_head.json", "llama", "\"hidden_size\": 36, \"num_hidden_layers\": 2");
    tt_expect_die(load_config, "odd_head.json", "head_dim (9) must be even");
    write_llama("zero_layers.json", "llama", "\"hidden_size\": 32, \"num_hidden_layers\": 0");
    tt_expect_die(load_config, "zero_layers.json", "num_hidden_layers is 0; it must be positive");
    write_llama("negative_vocab.json", "llama", "\"hidden_size\": 32, \"num_hidden_layers\": 1, \"vocab_size\": -5");
    tt_expect_die(load_config, "negative_vocab.json", "duplicate"); /* vocab_size twice: rejected as JSON */

    write_llama("yarn.json", "llama",
                "\"hidden_size\": 32, \"num_hidden_layers\": 2, \"rope_scaling\": {\"rope_type\": \"yarn\", "
                "\"factor\": 4.0}");
    tt_expect_die(load_config, "yarn.json", "yarn.json: key \"rope_scaling.rope_type\" is \"yarn\"");
    tt_expect_die(load_config, "yarn.json", "supports \"default\", \"llama3\", \"linear\" and \"longrope\" RoPE");
    write_llama("yarn_v5.json", "qwen3",
                "\"hidden_size\": 32, \"num_hidden_layers\": 2, \"rope_parameters\": {\"rope_type\": \"yarn\", "
                "\"rope_theta\": 10000.0, \"factor\": 2.0}");
    tt_expect_die(load_config, "yarn_v5.json", "\"rope_parameters.rope_type\" is \"yarn\"");
    write_llama("linear_no_factor.json", "qwen3",
                "\"hidden_size\": 32, \"num_hidden_layers\": 2, \"rope_parameters\": {\"rope_type\": \"linear\", "
                "\"rope_theta\": 10000.0}");
    tt_expect_die(load_config, "linear_no_factor.json", "\"rope_parameters.factor\" is missing");
    write_llama(
        "dynamic.json", "llama",
        "\"hidden_size\": 32, \"num_hidden_layers\": 2, \"rope_scaling\": {\"type\": \"dynamic\", \"factor\": 2}");
    tt_expect_die(load_config, "dynamic.json", "\"dynamic\"");
    write_llama("llama3_missing.json", "llama",
                "\"hidden_size\": 32, \"num_hidden_layers\": 2, \"rope_scaling\": {\"rope_type\": \"llama3\", "
                "\"factor\": 8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0}");
    tt_expect_die(load_config, "llama3_missing.json", "\"rope_scaling.original_max_position_embeddings\" is missing");
    write_llama("llama3_order.json", "llama",
                "\"hidden_size\": 32, \"num_hidden_layers\": 2, \"rope_scaling\": {\"rope_type\": \"llama3\", "
                "\"factor\": 8.0, \"low_freq_factor\": 4.0, \"high_freq_factor\": 1.0, "
                "\"original_max_position_embeddings\": 8192}");
    tt_expect_die(load_config, "llama3_order.json", "low_freq_factor < high_freq_factor");
    write_llama("scaling_type.json", "llama", "\"hidden_size\": 32, \"num_hidden_layers\": 2, \"rope_scaling\": 2.0");
    tt_expect_die(load_config, "scaling_type.json", "\"rope_scaling\" must be an object or null, not a real number");
    write_llama("rope_type_type.json", "llama",
                "\"hidden_size\": 32, \"num_hidden_layers\": 2, \"rope_scaling\": {\"rope_type\": 3}");
    tt_expect_die(load_config, "rope_type_type.json", "\"rope_scaling.rope_type\" must be a string");

    write_llama("qwen_window.json", "qwen2",
                "\"hidden_size\": 32, \"num_hidden_layers\": 2, \"use_sliding_window\": true");
    tt_expect_die(load_config, "qwen_window.json", "not supported yet");
    write_llama("f64.json", "llama", "\"hidden_size\": 32, \"num_hidden_layers\": 2, \"torch_dtype\": \"float64\"");
    tt_expect_die(load_config, "f64.json", "key \"torch_dtype\" is \"float64\"; expected \"float32\", \"bfloat16\"");
    write_llama("dtype_v5.json", "llama", "\"hidden_size\": 32, \"num_hidden_layers\": 2, \"dtype\": \"int8\"");
    tt_expect_die(load_config, "dtype_v5.json", "key \"dtype\" is \"int8\"");
    write_llama("gelu.json", "llama", "\"hidden_size\": 32, \"num_hidden_layers\": 2, \"hidden_act\": \"gelu\"");
    tt_expect_die(load_config, "gelu.json", "hidden_act is \"gelu\"");

    tt_test_write_text("broken.json", "{\"model_type\": \"llama\",\n \"vocab_size\": 100,\n \"hidden_size\": }\n");
    tt_expect_die(load_config, "broken.json", "broken.json:3:");
    tt_expect_die(load_config, "broken.json", "not valid JSON");
    tt_test_write_text("array.json", "[1, 2]");
    tt_expect_die(load_config, "array.json", "array.json: a config.json must be a JSON object");
    tt_expect_die(load_config, "missing.json", "missing.json: No such file or directory");
}

/* Hardening: a FIFO (or device) as config.json is refused at once naming the path, not waited
 * on in open() (the alarm turns a hang into a failure); sizes whose parameter count overflows
 * int64 are refused (a fuzzed config did overflow tt_model_config_param_count). */
static void load_config_with_alarm(void *arg) {
    alarm(10);
    load_config(arg);
}

static void load_absolute_with_alarm(void *arg) {
    alarm(10);
    tt_model_config c;
    tt_model_config_load(arg, &c);
}

static void test_hardening(void) {
    char *p = tt_test_path("fifo.json");
    TT_EXPECT(mkfifo(p, 0644) == 0, "mkfifo %s", p);
    free(p);
    tt_expect_die(load_config_with_alarm, "fifo.json", "model config");
    tt_expect_die(load_config_with_alarm, "fifo.json", "fifo.json is not a regular file (a FIFO)");
    tt_expect_die(load_absolute_with_alarm, "/dev/null", "/dev/null is not a regular file");
    tt_test_write_text("huge_params.json",
                       "{\"model_type\":\"llama\",\"vocab_size\":1,\"hidden_size\":549755813888,"
                       "\"intermediate_size\":1,\"num_hidden_layers\":4000,\"num_attention_heads\":524288,"
                       "\"num_key_value_heads\":1,\"head_dim\":1024}");
    tt_expect_die(load_config, "huge_params.json",
                  "huge_params.json: the model's sizes imply more than 2^50 parameters");
    /* a head of a million dimensions on a small model: within 2^50 parameters, but no model has it */
    tt_test_write_text(
        "huge_head.json",
        "{\"model_type\":\"llama\",\"vocab_size\":257,\"hidden_size\":16,\"intermediate_size\":32,"
        "\"num_hidden_layers\":1,\"num_attention_heads\":2,\"num_key_value_heads\":1,\"head_dim\":1048576}");
    tt_expect_die(load_config, "huge_head.json", "huge_head.json: head_dim (1048576) is more than 1024");
    /* a hundred thousand layers: the planner ran for minutes (a per-layer scan of the layers above, since linear) */
    tt_test_write_text("deep.json", "{\"model_type\":\"llama\",\"vocab_size\":257,\"hidden_size\":16,"
                                    "\"intermediate_size\":32,\"num_hidden_layers\":100000,\"num_attention_heads\":2,"
                                    "\"num_key_value_heads\":1}");
    tt_expect_die(load_config, "deep.json", "deep.json: num_hidden_layers 100000 is more than 4096");
}

/* gemma-3-1b-it's config.json as transformers 4.50 wrote it: sliding layers from the pattern (every sixth full), the
 * full layers' theta 1e6, the sliding ones' 1e4, the attention scale from query_pre_attn_scalar, tied (by default). */
static const char *gemma3_1b_config =
    "{\"architectures\": [\"Gemma3ForCausalLM\"], \"attention_bias\": false, \"attention_dropout\": 0.0, "
    "\"attn_logit_softcapping\": null, \"bos_token_id\": 2, \"cache_implementation\": \"hybrid\", "
    "\"eos_token_id\": [1, 106], \"final_logit_softcapping\": null, \"head_dim\": 256, "
    "\"hidden_activation\": \"gelu_pytorch_tanh\", \"hidden_size\": 1152, \"initializer_range\": 0.02, "
    "\"intermediate_size\": 6912, \"max_position_embeddings\": 32768, \"model_type\": \"gemma3_text\", "
    "\"num_attention_heads\": 4, \"num_hidden_layers\": 26, \"num_key_value_heads\": 1, \"pad_token_id\": 0, "
    "\"query_pre_attn_scalar\": 256, \"rms_norm_eps\": 1e-06, \"rope_local_base_freq\": 10000, \"rope_scaling\": null, "
    "\"rope_theta\": 1000000, \"sliding_window\": 512, \"sliding_window_pattern\": 6, \"torch_dtype\": \"bfloat16\", "
    "\"use_cache\": true, \"vocab_size\": 262144}";

static void test_gemma(void) {
    tt_test_write_text("gemma3_1b.json", gemma3_1b_config);
    tt_model_config c;
    load("gemma3_1b.json", &c);
    TT_EXPECT(tt_model_config_param_count(&c) == 999885952LL, "Gemma-3-1B has 999,885,952 parameters, got %lld",
              (long long)tt_model_config_param_count(&c));
    TT_EXPECT(c.tie_word_embeddings && c.sliding_window == 512 && c.layer_attention && c.attention_scale == 1.0 / 16 &&
                  c.embedding_scale == sqrt(1152.0) && c.embedding_scale_in_compute_dtype &&
                  c.final_logit_softcap == 0 && c.attention_softcap == 0,
              "gemma3: tied, window 512, scale 1/16, sqrt(1152) embedding, no soft-capping");
    bool pattern = true;
    for (int64_t l = 0; l < c.num_layers; l++) {
        const bool full = (l + 1) % 6 == 0;
        pattern &= c.layer_attention[l].sliding == !full &&
                   c.layer_attention[l].rope == (full ? TT_ROPE_TABLE_GLOBAL : TT_ROPE_TABLE_LOCAL);
    }
    TT_EXPECT(pattern, "gemma3: layers 5, 11, 17, 23 full on the global RoPE, the others sliding on the local one");
    TT_EXPECT(c.rope_theta == 1e6 && c.rope_type == TT_ROPE_DEFAULT && c.rope_local_theta == 1e4 && c.eos_token_id == 1,
              "gemma3 RoPE: %g global, %g local", c.rope_theta, c.rope_local_theta);
    tt_model_config_free(&c);

    /* Gemma 3 4B's multimodal config: the language model under text_config, linear scaling on the full layers only,
     * the text weights under language_model.model. */
    tt_test_write_text(
        "gemma3_4b.json",
        "{\"architectures\": [\"Gemma3ForConditionalGeneration\"], \"model_type\": \"gemma3\", \"boi_token_index\": "
        "255999, \"eos_token_id\": [1, 106], \"image_token_index\": 262144, \"mm_tokens_per_image\": 256, "
        "\"text_config\": {\"hidden_size\": 2560, \"intermediate_size\": 10240, \"model_type\": \"gemma3_text\", "
        "\"num_attention_heads\": 8, \"num_hidden_layers\": 34, \"num_key_value_heads\": 4, \"head_dim\": 256, "
        "\"query_pre_attn_scalar\": 256, \"rope_scaling\": {\"factor\": 8.0, \"rope_type\": \"linear\"}, "
        "\"sliding_window\": 1024, \"vocab_size\": 262208, \"rope_theta\": 1000000.0, \"rope_local_base_freq\": "
        "10000.0}, \"torch_dtype\": \"bfloat16\", \"vision_config\": {\"hidden_size\": 1152, \"image_size\": 896, "
        "\"model_type\": \"siglip_vision_model\"}}");
    load("gemma3_4b.json", &c);
    TT_EXPECT(strcmp(c.model_type, "gemma3") == 0 && c.hidden_size == 2560 && c.num_layers == 34 &&
                  c.rope_type == TT_ROPE_LINEAR && c.rope_factor == 8.0 && c.rope_local_theta == 1e4 &&
                  c.dtype == TT_BF16 && c.eos_token_id == 1 && c.layer_attention &&
                  c.layer_attention[5].sliding == false,
              "gemma3 multimodal: the text config's sizes, linear x8 on the full layers");
    tt_model_config_free(&c);

    /* Gemma 2: soft-capping by default, alternating layers from layer 0 sliding, one RoPE table */
    write_llama("gemma2.json", "gemma2",
                "\"hidden_size\": 64, \"num_hidden_layers\": 4, \"head_dim\": 16, \"hidden_activation\": "
                "\"gelu_pytorch_tanh\", \"query_pre_attn_scalar\": 144");
    load("gemma2.json", &c);
    TT_EXPECT(c.attention_softcap == 50.0 && c.final_logit_softcap == 30.0 && c.attention_scale == 1.0 / 12 &&
                  c.layer_attention[0].sliding && !c.layer_attention[1].sliding && c.layer_attention[2].sliding &&
                  c.layer_attention[0].rope == TT_ROPE_TABLE_GLOBAL && c.rope_local_theta == 0 && c.tie_word_embeddings,
              "gemma2: soft-capping 50 / 30, scale 1/12, alternating layers, tied");
    tt_model_config_free(&c);
    write_llama("gemma2_nocap.json", "gemma2",
                "\"hidden_size\": 64, \"num_hidden_layers\": 2, \"attn_logit_softcapping\": null, "
                "\"final_logit_softcapping\": null");
    load("gemma2_nocap.json", &c);
    TT_EXPECT(c.attention_softcap == 0 && c.final_logit_softcap == 0, "gemma2: null turns soft-capping off");
    tt_model_config_free(&c);

    write_llama("gemma_silu.json", "gemma3_text",
                "\"hidden_size\": 64, \"num_hidden_layers\": 2, \"hidden_activation\": \"silu\"");
    tt_expect_die(load_config, "gemma_silu.json",
                  "hidden_activation is \"silu\"; gemma3_text models' MLP here is GeGLU (tanh gelu)");
    write_llama("gemma_bidirectional.json", "gemma3_text",
                "\"hidden_size\": 64, \"num_hidden_layers\": 2, \"use_bidirectional_attention\": true");
    tt_expect_die(load_config, "gemma_bidirectional.json", "use_bidirectional_attention is true");
    write_llama("gemma_types.json", "gemma3_text",
                "\"hidden_size\": 64, \"num_hidden_layers\": 2, \"layer_types\": [\"full_attention\"]");
    tt_expect_die(load_config, "gemma_types.json", "\"layer_types\" must list one type for each of the 2 layers");
    write_llama("gemma_type.json", "gemma2",
                "\"hidden_size\": 64, \"num_hidden_layers\": 2, \"layer_types\": [\"full_attention\", \"chunked\"]");
    tt_expect_die(load_config, "gemma_type.json",
                  "\"layer_types\"[1] must be \"sliding_attention\" or \"full_attention\"");
    write_llama("gemma3_v5.json", "gemma3_text",
                "\"hidden_size\": 64, \"num_hidden_layers\": 2, \"rope_parameters\": {\"full_attention\": "
                "{\"rope_type\": \"linear\", \"factor\": 4.0, \"rope_theta\": 1000000.0}, \"sliding_attention\": "
                "{\"rope_type\": \"default\", \"rope_theta\": 20000.0}}, \"layer_types\": [\"sliding_attention\", "
                "\"full_attention\"]");
    load("gemma3_v5.json", &c);
    TT_EXPECT(c.rope_type == TT_ROPE_LINEAR && c.rope_factor == 4.0 && c.rope_theta == 1e6 &&
                  c.rope_local_theta == 20000.0 && c.layer_attention[0].rope == TT_ROPE_TABLE_LOCAL &&
                  c.layer_attention[1].rope == TT_ROPE_TABLE_GLOBAL,
              "gemma3: transformers 5's RoPE per layer type");
    tt_model_config_free(&c);
}

/* OLMo 2, SmolLM3 and Granite: their features from their keys. */
static void test_olmo2_smollm3_granite(void) {
    tt_model_config c;
    write_llama("olmo2.json", "olmo2", "\"hidden_size\": 64, \"num_hidden_layers\": 2, \"rope_theta\": 500000");
    load("olmo2.json", &c);
    const tt_arch *arch = tt_arch_of(&c);
    TT_EXPECT(arch->norm_placement == TT_NORM_POST && arch->qk_norm == TT_QK_NORM_PROJECTION &&
                  !c.tie_word_embeddings && c.rope_theta == 5e5,
              "olmo2: post-norms, q/k norms over the projection, untied");
    /* per layer: q, k, v, o 4 * 64 * 64, q/k norms 2 * 64, post-norms 2 * 64, MLP 3 * 64 * 64 */
    TT_EXPECT(tt_model_config_param_count(&c) == 2 * 100 * 64 + 2 * (7 * 64 * 64 + 4 * 64) + 64,
              "olmo2 parameters: %lld", (long long)tt_model_config_param_count(&c));
    tt_model_config_free(&c);

    write_llama("smollm3.json", "smollm3", "\"hidden_size\": 64, \"num_hidden_layers\": 8");
    load("smollm3.json", &c);
    bool nope = true;
    for (int64_t l = 0; l < 8; l++)
        nope &= c.layer_attention[l].rope == ((l + 1) % 4 == 0 ? TT_ROPE_TABLE_NONE : TT_ROPE_TABLE_GLOBAL) &&
                !c.layer_attention[l].sliding;
    TT_EXPECT(nope && c.tie_word_embeddings && c.rope_theta == 2e6,
              "smollm3: layers 3 and 7 without RoPE (interval 4), tied, theta 2e6 by default");
    tt_model_config_free(&c);
    write_llama("smollm3_list.json", "smollm3",
                "\"hidden_size\": 64, \"num_hidden_layers\": 3, \"no_rope_layers\": [0, 1, 1], "
                "\"use_sliding_window\": true, \"sliding_window\": 16");
    load("smollm3_list.json", &c);
    TT_EXPECT(c.layer_attention[0].rope == TT_ROPE_TABLE_NONE && c.layer_attention[0].sliding &&
                  c.layer_attention[1].rope == TT_ROPE_TABLE_GLOBAL && !c.layer_attention[1].sliding,
              "smollm3: no_rope_layers as given, the window on the layer without RoPE");
    tt_model_config_free(&c);
    write_llama("smollm3_bad.json", "smollm3",
                "\"hidden_size\": 64, \"num_hidden_layers\": 2, \"no_rope_layers\": [1, 2]");
    tt_expect_die(load_config, "smollm3_bad.json", "\"no_rope_layers\"[1] must be 0 (no RoPE) or 1");

    /* granite-3.0-2b's multipliers */
    write_llama("granite.json", "granite",
                "\"hidden_size\": 64, \"num_hidden_layers\": 2, \"embedding_multiplier\": 12.0, "
                "\"residual_multiplier\": 0.22, \"attention_multiplier\": 0.015625, \"logits_scaling\": 8.0, "
                "\"tie_word_embeddings\": true");
    load("granite.json", &c);
    TT_EXPECT(c.embedding_scale == 12.0 && !c.embedding_scale_in_compute_dtype && c.residual_scale == 0.22 &&
                  c.attention_scale == 0.015625 && c.logit_scale == 1.0 / 8.0 && c.tie_word_embeddings,
              "granite: its multipliers");
    tt_model_config_free(&c);
    write_llama("granite_bad.json", "granite", "\"hidden_size\": 64, \"num_hidden_layers\": 2, \"logits_scaling\": 0");
    tt_expect_die(load_config, "granite_bad.json", "logits_scaling is 0; it must be positive");
}

/* Phi-3-mini-4k's sizes and Phi-4-mini's (partial rotary 0.75, LongRoPE over 48 pairs, tied). */
static void test_phi3(void) {
    tt_model_config c;
    tt_test_write_text(
        "phi3_mini.json",
        "{\"model_type\": \"phi3\", \"vocab_size\": 32064, \"hidden_size\": 3072, \"intermediate_size\": "
        "8192, \"num_hidden_layers\": 32, \"num_attention_heads\": 32, \"num_key_value_heads\": 32, "
        "\"max_position_embeddings\": 4096, \"original_max_position_embeddings\": 4096, "
        "\"rope_scaling\": null, \"sliding_window\": 2047, \"tie_word_embeddings\": false, "
        "\"resid_pdrop\": 0.0, \"embd_pdrop\": 0.0, \"attention_dropout\": 0.0, \"hidden_act\": "
        "\"silu\"}");
    load("phi3_mini.json", &c);
    TT_EXPECT(tt_model_config_param_count(&c) == 3821079552LL, "Phi-3-mini has 3,821,079,552 parameters, got %lld",
              (long long)tt_model_config_param_count(&c));
    TT_EXPECT(c.sliding_window == 2047 && !c.layer_attention && c.rope_type == TT_ROPE_DEFAULT && c.rotary_dim == 0,
              "phi3: the window over every layer, default RoPE");
    tt_model_config_free(&c);

    char factors[2048] = "", longs[2048] = "";
    for (int i = 0; i < 48; i++) {
        char one[32];
        snprintf(one, sizeof one, "%s%.2f", i ? ", " : "", 1.0 + 0.01 * i);
        strcat(factors, one);
        snprintf(one, sizeof one, "%s%.2f", i ? ", " : "", 2.0 + 0.5 * i);
        strcat(longs, one);
    }
    char text[8192];
    snprintf(text, sizeof text,
             "{\"model_type\": \"phi3\", \"vocab_size\": 200064, \"hidden_size\": 3072, \"intermediate_size\": 8192, "
             "\"num_hidden_layers\": 32, \"num_attention_heads\": 24, \"num_key_value_heads\": 8, "
             "\"max_position_embeddings\": 131072, \"original_max_position_embeddings\": 4096, "
             "\"partial_rotary_factor\": 0.75, \"rope_theta\": 10000.0, \"tie_word_embeddings\": true, "
             "\"rope_scaling\": {\"type\": \"longrope\", \"short_factor\": [%s], \"long_factor\": [%s]}}",
             factors, longs);
    tt_test_write_text("phi4_mini.json", text);
    load("phi4_mini.json", &c);
    TT_EXPECT(tt_model_config_param_count(&c) == 3836021760LL, "Phi-4-mini has 3,836,021,760 parameters, got %lld",
              (long long)tt_model_config_param_count(&c));
    TT_EXPECT(c.rotary_dim == 96 && c.rope_type == TT_ROPE_LONGROPE && c.rope_original_max_position == 4096 &&
                  c.rope_short_factor[47] == (float)1.47 && c.rope_long_factor[1] == 2.5f &&
                  fabs(c.rope_attention_factor - sqrt(1 + log(32.0) / log(4096.0))) < 1e-15,
              "phi4-mini: 96 of 128 dimensions rotated, LongRoPE's factors, attention factor %.17g",
              c.rope_attention_factor);
    tt_model_config_free(&c);

    snprintf(text, sizeof text,
             "{\"model_type\": \"phi3\", \"vocab_size\": 100, \"hidden_size\": 64, \"intermediate_size\": 64, "
             "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"partial_rotary_factor\": 0.5, "
             "\"original_max_position_embeddings\": 16, \"rope_scaling\": {\"type\": \"longrope\", "
             "\"short_factor\": [1, 1, 1], \"long_factor\": [1, 1, 1, 1]}}");
    tt_test_write_text("phi3_factors.json", text);
    tt_expect_die(
        load_config, "phi3_factors.json",
        "key \"rope_scaling.short_factor\" has 3 factors; LongRoPE needs one per rotated pair, rotary_dim / 2 = 4");
    write_llama("phi3_dropout.json", "phi3", "\"hidden_size\": 64, \"num_hidden_layers\": 2, \"resid_pdrop\": 0.1");
    tt_expect_die(load_config, "phi3_dropout.json", "resid_pdrop is 0.1; tiertrain trains without dropout");
}

int main(int argc, char **argv) {
    (void)argc;
    (void)argv;
    tt_test_scratch_open("model-config");
    test_qwen3();
    test_llama31();
    test_qwen2_mistral();
    test_gemma();
    test_olmo2_smollm3_granite();
    test_phi3();
    test_param_count();
    test_save_fresh();
    test_errors();
    test_hardening();
    tt_test_scratch_close();
    return tt_test_summary("model_config");
}
