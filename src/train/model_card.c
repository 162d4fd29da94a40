/* The files a finished run leaves beside its weights (model_card.h). */
#include "train/model_card.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "model/safetensors.h"
#include "model/weights.h"
#include "train/checkpoint.h"
#include "train/prepare.h"

static void write_model_card(const tt_run_config *run, bool lora, int64_t steps) {
    char *text = NULL;
    size_t size = 0;
    FILE *card = open_memstream(&text, &size);
    if (!card) tt_die("out of host memory writing the model card");
    const char *base = tt_run_base_model_name(run); /* a Hub name as given, else the path */
    fprintf(card, "---\n");
    if (run->base_model) fprintf(card, "base_model: %s\n", base);
    fprintf(card, "library_name: %s\ntags:\n- tiertrain\n%s---\n\n", lora ? "peft" : "transformers",
            lora ? "- lora\n" : "");
    fprintf(card, "# %s\n\n", run->output_dir);
    fprintf(card, "%s of %s%s, trained by tiertrain for %lld optimizer steps.\n\n",
            lora ? (run->adapter == TT_ADAPTER_QLORA ? "QLoRA adapters" : "LoRA adapters") : "A full fine-tune",
            base ? base : "a model", run->base_model ? "" : " (from random init)", (long long)steps);
    if (lora)
        fprintf(card,
                "Load with peft: `PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(\"%s\"), \"%s\")`, "
                "or merge them into the base with `tiertrain merge --base %s --adapter %s -o merged`.\n\n",
                base ? base : "BASE", run->output_dir, base ? base : "BASE", run->output_dir);
    else fprintf(card, "Load with transformers: `AutoModelForCausalLM.from_pretrained(\"%s\")`.\n\n", run->output_dir);
    fprintf(card, "## The run's configuration\n\n```yaml\n");
    tt_run_config_write_yaml(run, card);
    fprintf(card, "```\n");
    fclose(card);
    char path[4200];
    snprintf(path, sizeof path, "%s/README.md", run->output_dir);
    tt_write_file_atomic(path, text, size);
    free(text);
}

void tt_write_output_companions(const tt_run_config *run, bool lora, int64_t steps) {
    char dir[4096];
    const bool tokenizer = tt_run_tokenizer_dir(run, dir, sizeof dir);
    if (run->base_model) tt_weights_copy_companion_files(run->base_model, run->output_dir);
    if (tokenizer && (!run->base_model || strcmp(dir, run->base_model) != 0))
        tt_weights_copy_companion_files(dir, run->output_dir); /* tokenizer_config's tokenizer wins */
    write_model_card(run, lora, steps);
}
