/* axolotl's configs as they are: every key axolotl documents is known (tests/fixtures/axolotl/keys.txt, from its
 * schema); keys that change nothing are accepted and named in one grouped note; refused keys, unknown keys and bad
 * values of one file and its overrides are all reported in one error; axolotl's values of tiertrain's keys
 * (attention names, offloaded checkpointing, plugins, bnb_config_kwargs, 500_000) read as axolotl means them; and
 * the per-epoch and fractional save / eval intervals. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/run_config.h"
#include "test_util.h"

/* A config that passes validate, so each case changes one thing. */
#define VALID "model_config: m/config.json\ndatasets: [a.tok]\n"

static tt_run_config loaded;

/* Loads scratch/name (written from text) into `loaded`, with the overrides; dies as tiertrain would on an error. */
static void load_text(const char *name, const char *text, int override_count, char **overrides) {
    tt_test_write_text(name, text);
    char *path = tt_test_path(name);
    tt_run_config_defaults(&loaded);
    tt_run_config_load(&loaded, path, override_count, overrides);
    tt_run_config_validate(&loaded);
    free(path);
}

typedef struct case_text {
    const char *name, *text;
    char *overrides[4];
    int override_count;
} case_text;

static void load_case(void *arg) {
    case_text *c = arg;
    load_text(c->name, c->text, c->override_count, c->overrides);
    tt_run_config_free(&loaded);
}

static char *notes_of(const tt_run_config *c) {
    char *text = NULL;
    size_t size = 0;
    FILE *mem = open_memstream(&text, &size);
    tt_run_config_print_notes(c, mem);
    fclose(mem);
    return text;
}

static void test_every_axolotl_key_is_known(const char *source_dir) {
    char path[4200];
    snprintf(path, sizeof path, "%s/tests/fixtures/axolotl/keys.txt", source_dir);
    FILE *f = fopen(path, "r");
    TT_EXPECT(f != NULL, "read %s", path);
    if (!f) return;
    char line[256];
    int keys = 0, known = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = 0;
        if (line[0] == '#' || line[0] == 0) continue;
        keys++;
        const bool ok = tt_run_config_knows_key(line);
        known += ok;
        TT_EXPECT(ok, "axolotl's key %s is known", line);
    }
    fclose(f);
    TT_EXPECT(keys > 500 && known == keys, "%d of axolotl's %d keys known", known, keys);
    TT_EXPECT(!tt_run_config_knows_key("learning_rat") && !tt_run_config_knows_key("wandb_projekt"),
              "misspellings stay unknown");
}

static void test_moot_keys_and_the_note(void) {
    load_text("moot.yaml",
              VALID "model_type: AutoModelForCausalLM\ntokenizer_type: AutoTokenizer\ntrust_remote_code: true\n"
                    "strict: false\nfp8: false\ngptq: false\nwandb_project: my-project\nwandb_entity: ''\n"
                    "wandb_watch:\nwandb_log_model:\nliger_rms_norm: true\ntorch_compile: true\n"
                    "fsdp_config: {fsdp_offload_params: true}\neval_batch_size: 4\neval_sample_packing: false\n"
                    "rl: ~\ntensor_parallel_size: 1\nplugins:\n"
                    "  - axolotl.integrations.cut_cross_entropy.CutCrossEntropyPlugin\n"
                    "  - axolotl.integrations.liger.LigerPlugin\n"
                    "attn_implementation: flash_attention_2\ntf32: true\n",
              0, NULL);
    char *notes = notes_of(&loaded);
    TT_EXPECT(strstr(notes, "config: 18 of axolotl's keys and values") != NULL,
              "one note counts every item, not the trackers' keys left empty: %s", notes);
    TT_EXPECT(strstr(notes, "  model_type, tokenizer_type, trust_remote_code, strict\n      loading and bookkeeping") !=
                  NULL,
              "the loading keys in one group: %s", notes);
    TT_EXPECT(strstr(notes, "  wandb_project\n      experiment tracking: tiertrain logs every step to "
                            "output_dir/metrics.jsonl and, with use_tensorboard: true, to TensorBoard") != NULL,
              "a tracker's key that is set is noted, with where the metrics go instead");
    TT_EXPECT(strstr(notes, "  fp8, gptq, rl, tensor_parallel_size\n      set off") != NULL,
              "off values in one group (tensor_parallel_size 1 is off)");
    TT_EXPECT(strstr(notes, "liger_rms_norm, torch_compile, fsdp_config, plugins: CutCrossEntropyPlugin, plugins: "
                            "LigerPlugin\n      kernels") != NULL,
              "kernel switches and plugins in one group");
    TT_EXPECT(strstr(notes, "attn_implementation: flash_attention_2\n      exact attention") != NULL,
              "the attention name noted");
    TT_EXPECT(loaded.attn_implementation == TT_ATTN_AUTO && loaded.tf32, "flash_attention_2 is auto; tf32 accepted");
    free(notes);
    tt_run_config_free(&loaded);

    load_text("plain.yaml", VALID, 0, NULL);
    notes = notes_of(&loaded);
    TT_EXPECT(notes[0] == 0, "no note without other tools' keys");
    free(notes);
    tt_run_config_free(&loaded);
}

static void test_all_errors_at_once(void) {
    static case_text many = {"many.yaml",
                             VALID "gptq: true\noptimizer: paged_lion_8bit\nlearning_rat: 1e-4\nwandb_project: x\n"
                                   "sample_packing: maybe\nrl: dpo\nattn_implementation: sage\npeft_use_dora: true\n",
                             {"seed=x", "zzz=1", "warmup_steps=3"},
                             3};
    tt_expect_die(load_case, &many,
                  "the configuration has 9 problems; nothing was run. Each of them:\n"
                  "  " /* the scratch path precedes each file line */);
    tt_expect_die(load_case, &many,
                  "many.yaml:3: gptq (axolotl's key) is 'true': quantized training other than QLoRA is not supported; "
                  "use adapter: qlora with load_in_4bit: true");
    tt_expect_die(load_case, &many, "many.yaml:4: optimizer: paged_lion_8bit is not supported yet");
    tt_expect_die(load_case, &many, "many.yaml:5: unknown key 'learning_rat'; did you mean 'learning_rate'?");
    tt_expect_die(load_case, &many, "many.yaml:7: sample_packing: expected true or false, got 'maybe'");
    tt_expect_die(load_case, &many,
                  "many.yaml:8: rl (axolotl's key) is 'dpo': tiertrain trains causal language models");
    tt_expect_die(load_case, &many, "many.yaml:9: attn_implementation: sage quantizes the attention's inputs");
    tt_expect_die(load_case, &many, "many.yaml:10: peft_use_dora (axolotl's key) is 'true'");
    tt_expect_die(load_case, &many,
                  "\n  command-line override 'seed=x': seed: expected an integer, got 'x'\n"
                  "  command-line override 'zzz=1': unknown key 'zzz'");
    /* a single error is one line, as before */
    static case_text one = {"one.yaml", VALID "gptq: true\n", {0}, 0};
    tt_expect_die(load_case, &one, "one.yaml:3: gptq (axolotl's key) is 'true': quantized training other than QLoRA");
    static case_text plugin = {"plugin.yaml", VALID "plugins: [axolotl.integrations.kd.KDPlugin]\n", {0}, 0};
    tt_expect_die(load_case, &plugin, "plugins: axolotl.integrations.kd.KDPlugin is not available in tiertrain");
    static case_text best = {"best.yaml", VALID "save_strategy: best\n", {0}, 0};
    tt_expect_die(load_case, &best, "save_strategy: best saves when metric_for_best_model improves");
    static case_text overrides = {
        "overrides.yaml", "base_model: m\ndatasets: [a.tok]\nmodel_config: {rope_scaling: {type: linear}}\n", {0}, 0};
    tt_expect_die(load_case, &overrides,
                  "model_config: a mapping is axolotl's overrides of the base model's config.json");
    static case_text nul = {"nul.yaml", VALID "\"se\\0ed\": 3\n", {0}, 0};
    tt_expect_die(load_case, &nul, "nul.yaml:3: a key holds a NUL byte (after 'se')");
    static case_text separators = {"separators.yaml", VALID "sequence_len: 5__00\n", {0}, 0};
    tt_expect_die(load_case, &separators, "sequence_len: expected an integer, got '5__00'");
}

static void test_axolotl_values(void) {
    load_text("values.yaml",
              VALID "gradient_checkpointing: offload\nsequence_len: 500_000\nlearning_rate: 0.000_1\n"
                    "bnb_config_kwargs: {bnb_4bit_use_double_quant: false, llm_int8_has_fp16_weight: false}\n"
                    "context_parallel_size: 2\nevaluation_strategy: \"no\"\n",
              0, NULL);
    TT_EXPECT(loaded.gradient_checkpointing && loaded.activation_offloading == TT_OFFLOAD_HIDDEN_STATES,
              "gradient_checkpointing: offload is checkpointing with the layer inputs in pinned host memory");
    TT_EXPECT(loaded.sequence_len == 500000 && loaded.learning_rate == 1e-4, "YAML 1.1 digit separators");
    TT_EXPECT(!loaded.bnb_4bit_use_double_quant, "bnb_config_kwargs sets bnb_4bit_use_double_quant");
    TT_EXPECT(loaded.sequence_parallel_degree == 2, "context_parallel_size is sequence_parallel_degree");
    TT_EXPECT(loaded.eval_strategy == TT_EVAL_NO, "evaluation_strategy is eval_strategy");
    tt_run_config_free(&loaded);

    static const char *const exact[] = {"eager",
                                        "sdpa",
                                        "flash_attention_2",
                                        "flash_attention_3",
                                        "flex_attention",
                                        "xformers",
                                        "kernels-community/vllm-flash-attn3"};
    for (int i = 0; i < (int)(sizeof exact / sizeof exact[0]); i++) {
        char text[200];
        snprintf(text, sizeof text, VALID "attn_implementation: %s\n", exact[i]);
        load_text("attention.yaml", text, 0, NULL);
        TT_EXPECT(loaded.attn_implementation == TT_ATTN_AUTO, "attn_implementation: %s runs as auto", exact[i]);
        tt_run_config_free(&loaded);
    }
    load_text("disk.yaml", VALID "gradient_checkpointing: offload_disk\n", 0, NULL);
    TT_EXPECT(loaded.gradient_checkpointing && loaded.activation_offloading == TT_OFFLOAD_DISK,
              "offload_disk is activation_offloading: disk");
    tt_run_config_free(&loaded);
}

static void test_intervals(void) {
    load_text("intervals.yaml",
              VALID "val_set_size: 0.1\nsaves_per_epoch: 4\nevals_per_epoch: 2\nsave_total_limit: 2\n"
                    "loss_watchdog_threshold: 5.0\nloss_watchdog_patience: 3\n",
              0, NULL);
    TT_EXPECT(loaded.saves_per_epoch == 4 && loaded.evals_per_epoch == 2 && loaded.save_total_limit == 2 &&
                  loaded.loss_watchdog_threshold == 5.0 && loaded.loss_watchdog_patience == 3,
              "axolotl's per-epoch, limit and watchdog keys");
    tt_run_config_free(&loaded);
    load_text("fraction.yaml", VALID "save_steps: 0.25\neval_steps: 0.1\n", 0, NULL);
    TT_EXPECT(loaded.save_steps == 0.25 && loaded.eval_steps == 0.1, "fractional save_steps and eval_steps");
    tt_run_config_free(&loaded);
    load_text("watchdog_null.yaml", VALID "loss_watchdog_threshold:\nloss_watchdog_patience:\n", 0, NULL);
    TT_EXPECT(loaded.loss_watchdog_threshold == 0 && loaded.loss_watchdog_patience == 3,
              "axolotl's template nulls are the defaults");
    tt_run_config_free(&loaded);
    static case_text both = {"both.yaml", VALID "save_steps: 10\nsaves_per_epoch: 2\n", {0}, 0};
    tt_expect_die(load_case, &both, "save_steps and saves_per_epoch are both set");
    static case_text whole = {"whole.yaml", VALID "eval_steps: 2.5\n", {0}, 0};
    tt_expect_die(load_case, &whole, "eval_steps is 2.5: below 1 it is a fraction of the run's steps");
    static case_text epoch = {"epoch.yaml", VALID "eval_strategy: epoch\nevals_per_epoch: 2\n", {0}, 0};
    tt_expect_die(load_case, &epoch, "eval_strategy: epoch (once an epoch) and evals_per_epoch are both set");
}

int main(int argc, char **argv) {
    const char *source_dir = argc > 1 ? argv[1] : getenv("TT_SOURCE_DIR");
    if (!source_dir) source_dir = ".";
    tt_test_scratch_open("axolotl-config");
    test_every_axolotl_key_is_known(source_dir);
    test_moot_keys_and_the_note();
    test_all_errors_at_once();
    test_axolotl_values();
    test_intervals();
    tt_test_scratch_close();
    return tt_test_summary("axolotl_config");
}
