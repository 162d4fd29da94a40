/* The run configuration: defaults, an axolotl-style file, overrides, the written YAML loading
 * back to the same values, sizes, and every kind of bad input. */
#include <stdlib.h>
#include <string.h>

#include "core/config.h"
#include "test_util.h"

static char *scratch;

/* Returns the path in a buffer that the next call reuses. */
static char *write_yaml(const char *name, const char *text) {
    static char p[4200];
    snprintf(p, sizeof p, "%s/%s", scratch, name);
    FILE *f = fopen(p, "wb");
    fputs(text, f);
    fclose(f);
    return p;
}

static void load_file(void *arg) {
    tt_run_config c;
    tt_run_config_defaults(&c);
    tt_run_config_load(&c, arg, 0, NULL);
    tt_run_config_validate(&c);
}

static void load_override(void *arg) {
    tt_run_config c;
    tt_run_config_defaults(&c);
    char *overrides[1] = {arg};
    tt_run_config_load(&c, NULL, 1, overrides);
}

int main(void) {
    scratch = tt_test_tempdir("config");
    tt_run_config c;
    tt_run_config_defaults(&c);
    TT_EXPECT(c.sequence_len == 512 && c.micro_batch_size == 1 && c.learning_rate == 2e-5 &&
                  c.lr_scheduler == TT_LR_COSINE && c.warmup_steps == -1 && c.max_grad_norm == 1.0 &&
                  c.adam_beta2 == 0.999 && c.device == TT_DEVICE_CPU && !c.gradient_checkpointing &&
                  c.max_shard_bytes == 5000000000LL && strcmp(c.optimizer, "adamw_torch") == 0 &&
                  strcmp(c.output_dir, "./outputs") == 0 && c.base_model == NULL,
              "defaults");
    tt_run_config_free(&c);

    char full[4200];
    snprintf(full, sizeof full, "%s", write_yaml("full.yaml",
                            "base_model: /models/qwen3\n"
                            "datasets:\n  - path: a.tok\n  - path: b.tok\n    type: tokens\n"
                            "val_set_size: 0.05\nsequence_len: 2048\nmicro_batch_size: 2\n"
                            "gradient_accumulation_steps: 8\nlearning_rate: 1.0e-4\nlr_scheduler: linear\n"
                            "warmup_steps: 10\nmax_steps: 100\nweight_decay: 0.1\nmax_grad_norm: 0\nseed: 7\n"
                            "output_dir: runs/x\nsave_steps: 50\neval_steps: 25\ngradient_checkpointing: true\n"
                            "host_memory_budget: 24GiB\nactivation_offloading: false\nadapter: null\n"
                            "lora_r: 0\nlayer_offloading: false\noptimizer: adamw_torch_fused\n"));
    tt_run_config_defaults(&c);
    char *overrides[] = {"learning_rate=3e-4", "datasets=[c.tok]", "seed=9"};
    tt_run_config_load(&c, full, 3, overrides);
    tt_run_config_validate(&c);
    TT_EXPECT(strcmp(c.base_model, "/models/qwen3") == 0 && c.sequence_len == 2048 && c.micro_batch_size == 2 &&
                  c.gradient_accumulation_steps == 8 && c.lr_scheduler == TT_LR_LINEAR && c.warmup_steps == 10 &&
                  c.max_steps == 100 && c.weight_decay == 0.1 && c.max_grad_norm == 0 && c.save_steps == 50 &&
                  c.eval_steps == 25 && c.gradient_checkpointing && c.host_memory_budget == 24LL << 30 &&
                  c.val_set_size == 0.05 && strcmp(c.optimizer, "adamw_torch_fused") == 0,
              "an axolotl-style file");
    TT_EXPECT(c.learning_rate == 3e-4 && c.seed == 9 && c.dataset_count == 1 && strcmp(c.datasets[0], "c.tok") == 0,
              "overrides win over the file");

    /* What write_yaml prints loads back to the same configuration. */
    char *text = NULL;
    size_t size = 0;
    FILE *mem = open_memstream(&text, &size);
    tt_run_config_write_yaml(&c, mem);
    fclose(mem);
    char *written = write_yaml("written.yaml", text);
    tt_run_config again;
    tt_run_config_defaults(&again);
    tt_run_config_load(&again, written, 0, NULL);
    char *text2 = NULL;
    size_t size2 = 0;
    mem = open_memstream(&text2, &size2);
    tt_run_config_write_yaml(&again, mem);
    fclose(mem);
    TT_EXPECT(size == size2 && strcmp(text, text2) == 0, "write_yaml round trip");
    TT_EXPECT(again.learning_rate == c.learning_rate && again.host_memory_budget == c.host_memory_budget &&
                  strcmp(again.datasets[0], "c.tok") == 0,
              "round trip values");
    free(text);
    free(text2);
    tt_run_config_free(&again);
    tt_run_config_free(&c);

    /* --help lists every key */
    mem = open_memstream(&text, &size);
    tt_run_config_print_help(mem);
    fclose(mem);
    TT_EXPECT(strstr(text, "gradient_accumulation_steps") && strstr(text, "lr_scheduler") &&
                  strstr(text, "[cosine, linear, constant]") && strstr(text, "layer_offloading"),
              "help lists keys, values and reserved keys");
    free(text);

    /* sizes */
    TT_EXPECT(tt_parse_bytes("123") == 123 && tt_parse_bytes("4KiB") == 4096 && tt_parse_bytes("4KB") == 4000 &&
                  tt_parse_bytes("1.5GiB") == 1610612736LL && tt_parse_bytes("2GB") == 2000000000LL &&
                  tt_parse_bytes("8G") == 8LL << 30 && tt_parse_bytes("512MiB") == 512LL << 20,
              "byte sizes");
    TT_EXPECT(tt_parse_bytes("abc") == -1 && tt_parse_bytes("-5") == -1 && tt_parse_bytes("5XB") == -1 &&
                  tt_parse_bytes("1e30GB") == -1 && tt_parse_bytes("1.5") == -1,
              "bad byte sizes");

    /* bad input */
    tt_expect_die(load_file, write_yaml("malformed.yaml", "a: [1, 2\nb: 3\n"), "malformed.yaml:2");
    tt_expect_die(load_file, write_yaml("unknown.yaml", "learning_rat: 1\n"), "did you mean 'learning_rate'");
    tt_expect_die(load_file, write_yaml("unknown2.yaml", "zzzzzzzzzzz: 1\n"), "unknown key 'zzzzzzzzzzz'");
    tt_expect_die(load_file, write_yaml("type.yaml", "learning_rate: abc\n"), "expected a number, got 'abc'");
    tt_expect_die(load_file, write_yaml("int.yaml", "micro_batch_size: 1.5\n"), "expected an integer");
    tt_expect_die(load_file, write_yaml("range.yaml", "micro_batch_size: 0\n"), "micro_batch_size must be >= 1");
    tt_expect_die(load_file, write_yaml("beta.yaml", "adam_beta2: 1\n"), "adam_beta2 must be < 1");
    tt_expect_die(load_file, write_yaml("enum.yaml", "lr_scheduler: step\n"),
                  "lr_scheduler must be one of cosine, linear, constant; got 'step'");
    tt_expect_die(load_file, write_yaml("dup.yaml", "seed: 1\nseed: 2\n"), "dup.yaml:2: key 'seed' appears twice");
    tt_expect_die(load_file, write_yaml("list.yaml", "- a\n- b\n"), "top level must be a mapping");
    tt_expect_die(load_file, write_yaml("hs.yaml", "activation_offloading: hidden_states\n"), "not available yet");
    tt_expect_die(load_file, write_yaml("ao.yaml", "activation_offloading: sometimes\n"),
                  "one of false, true, legacy, disk, hidden_states");
    tt_expect_die(load_file, write_yaml("cuda.yaml", "device: cuda\n"), "device: cuda is not available yet");
    tt_expect_die(load_file, write_yaml("lora.yaml", "adapter: lora\n"), "adapter is not available yet");
    tt_expect_die(load_file, write_yaml("lo.yaml", "layer_offloading: true\n"), "layer_offloading is not available yet");
    tt_expect_die(load_file, write_yaml("frac.yaml", "optimizer_offload_fraction: 0.5\n"), "not available yet");
    tt_expect_die(load_file, write_yaml("bf16.yaml", "bf16: true\n"), "bf16: true is not available yet");
    tt_expect_die(load_file, write_yaml("ds.yaml", "datasets:\n  - path: a.tok\n    type: alpaca\n"),
                  "type 'alpaca' is not supported");
    tt_expect_die(load_file, write_yaml("both.yaml", "base_model: a\nmodel_config: b\ndatasets: [x]\n"),
                  "exactly one of base_model");
    tt_expect_die(load_file, write_yaml("nodata.yaml", "model_config: b\n"), "datasets is empty");
    tt_expect_die(load_override, "learning_rate", "overrides are written key=value");
    tt_expect_die(load_override, "seed=x", "command-line override 'seed=x'");
    tt_expect_die(load_override, "host_memory_budget=lots", "expected a size");
    free(scratch);
    return tt_test_summary("config");
}
