/* `tiertrain inference`: generation from a trained model, as `axolotl inference` answers "does the model answer well
 * now?". The model is a run's (--config: its base with the adapter it saved in output_dir, or the full model it
 * saved there) or given (--model DIR [--adapter DIR]); prompts come from --prompt, a --prompts file (a prompt a line:
 * text, or a JSON object with "prompt", "messages" or "ids") or standard input (a prompt a line), are rendered with the chat
 * template the run trained with (none for completion data), and the answer streams to standard output as it is
 * generated. */
#include "cli/inference.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "config/run_config.h"
#include "core/check.h"
#include "core/hf_cache.h"
#include "core/input_file.h"
#include "data/chat_template.h"
#include "data/tokenizer.h"
#include "model/lora.h"
#include "train/generator.h"
#include "train/prepare.h"
#include "train/trainer.h"

#define MAX_STOPS 32
#define MAX_PROMPT_LINE_BYTES (64u << 20)

static const char usage[] =
    "usage: tiertrain inference --config run.yaml [options] [key=value ...]\n"
    "       tiertrain inference --model HF_DIR [--adapter PEFT_DIR] [options]\n"
    "\n"
    "The run's model (its base with the LoRA adapter it saved in output_dir, or the full model saved there), or\n"
    "--model with an optional --adapter, generates after each prompt; the answer streams to standard output.\n"
    "\n"
    "  --prompt TEXT          one prompt (else --prompts, else standard input: a prompt a line)\n"
    "  --prompts FILE         a prompt a line: text, or JSON: {\"prompt\": ...}, {\"messages\": [...]} or {\"ids\": [...]}\n"
    "  --prompt-ids IDS       one prompt given as token ids (1,2,3): no tokenizer needed\n"
    "  --max-new-tokens N     at most N new tokens (default 256)\n"
    "  --temperature T        0 (default): greedy; above 0: sampling\n"
    "  --top-k K              sample among the K most likely (default 0: all)\n"
    "  --top-p P              sample among the most likely reaching P (default 1: all)\n"
    "  --seed S               the draws' seed (default: the run's seed)\n"
    "  --stop TOKEN           end after this token (its text or id; repeatable); the model's eos tokens always end\n"
    "  --ignore-eos           do not end at the model's eos tokens\n"
    "  --max-context N        positions the KV cache holds (default: sequence_len with --config, else 4096)\n"
    "  --chat-template auto|none  auto (default): the run's chat template for chat data, the tokenizer's with --model\n"
    "  --ids                  print the new token ids (space separated, a line a prompt) instead of text\n"
    "  --show-prompt          print each prompt as the model sees it (the template's render) to standard error\n"
    "  --adapter DIR          a PEFT adapter directory (default with --config: output_dir, for LoRA runs)\n";

typedef struct inference_options {
    const char *config_path, *model_dir, *adapter_dir, *prompt, *prompts_path, *prompt_ids;
    int64_t max_new_tokens, max_context;
    tt_sampling sampling;
    bool seed_given, ignore_eos, print_ids, show_prompt, chat_template_off;
    uint64_t seed;
    const char *stops[MAX_STOPS];
    int stop_count;
    char **overrides;
    int override_count;
} inference_options;

static int64_t integer_value(const char *flag, const char *text, int64_t least) {
    char *end = NULL;
    errno = 0;
    const long long v = strtoll(text, &end, 10);
    if (errno || !end || *end || v < least)
        tt_die("inference: %s needs a whole number of at least %lld, not '%s'", flag, (long long)least, text);
    return v;
}

static double real_value(const char *flag, const char *text, double least, double most) {
    char *end = NULL;
    errno = 0;
    const double v = strtod(text, &end);
    if (errno || !end || *end || !(v >= least && v <= most))
        tt_die("inference: %s needs a number in [%g, %g], not '%s'", flag, least, most, text);
    return v;
}

static void parse_options(int argc, char **argv, inference_options *o) {
    memset(o, 0, sizeof *o);
    o->max_new_tokens = 256;
    o->sampling = (tt_sampling){.temperature = 0, .top_k = 0, .top_p = 1.0};
    o->overrides = tt_xcalloc((size_t)argc + 1, sizeof(char *), "arguments");
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            fputs(usage, stdout);
            exit(0);
        }
        if (strcmp(a, "--ignore-eos") == 0) {
            o->ignore_eos = true;
            continue;
        }
        if (strcmp(a, "--ids") == 0) {
            o->print_ids = true;
            continue;
        }
        if (strcmp(a, "--show-prompt") == 0) {
            o->show_prompt = true;
            continue;
        }
        if (a[0] != '-') {
            if (strchr(a, '=')) o->overrides[o->override_count++] = argv[i];
            else if (!o->config_path) o->config_path = a;
            else tt_die("inference: a second configuration '%s' (the first is %s)\n\n%s", a, o->config_path, usage);
            continue;
        }
        if (i + 1 >= argc) tt_die("inference: %s needs a value\n\n%s", a, usage);
        const char *v = argv[++i];
        if (strcmp(a, "--config") == 0 || strcmp(a, "-c") == 0) o->config_path = v;
        else if (strcmp(a, "--model") == 0) o->model_dir = v;
        else if (strcmp(a, "--adapter") == 0) o->adapter_dir = v;
        else if (strcmp(a, "--prompt") == 0) o->prompt = v;
        else if (strcmp(a, "--prompts") == 0) o->prompts_path = v;
        else if (strcmp(a, "--prompt-ids") == 0) o->prompt_ids = v;
        else if (strcmp(a, "--max-new-tokens") == 0) o->max_new_tokens = integer_value(a, v, 1);
        else if (strcmp(a, "--max-context") == 0) o->max_context = integer_value(a, v, 2);
        else if (strcmp(a, "--temperature") == 0) o->sampling.temperature = real_value(a, v, 0, 1e6);
        else if (strcmp(a, "--top-k") == 0) o->sampling.top_k = integer_value(a, v, 0);
        else if (strcmp(a, "--top-p") == 0) o->sampling.top_p = real_value(a, v, 1e-9, 1);
        else if (strcmp(a, "--seed") == 0) {
            o->seed = (uint64_t)integer_value(a, v, 0);
            o->seed_given = true;
        } else if (strcmp(a, "--stop") == 0) {
            if (o->stop_count == MAX_STOPS) tt_die("inference: at most %d --stop tokens", MAX_STOPS);
            o->stops[o->stop_count++] = v;
        } else if (strcmp(a, "--chat-template") == 0) {
            if (strcmp(v, "none") != 0 && strcmp(v, "auto") != 0)
                tt_die("inference: --chat-template is auto or none, not '%s'", v);
            o->chat_template_off = strcmp(v, "none") == 0;
        } else tt_die("inference: unknown option '%s'\n\n%s", a, usage);
    }
    if (!o->config_path && !o->model_dir)
        tt_die("inference: give --config run.yaml (the run's model) or --model HF_DIR\n\n%s", usage);
    if (!!o->prompt + !!o->prompts_path + !!o->prompt_ids > 1)
        tt_die("inference: give one of --prompt, --prompts and --prompt-ids (or none: standard input)");
}

static bool is_file(const char *dir, const char *name) {
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* The adapter's settings (adapter_config.json) into the run: an adapter given without the run that made it. */
static void adapter_settings(tt_run_config *run, const char *dir) {
    tt_peft_settings a;
    tt_lora_read_peft_settings(dir, &a);
    if (run->adapter == TT_ADAPTER_NONE) run->adapter = TT_ADAPTER_LORA;
    run->lora_r = a.rank;
    run->lora_alpha = a.alpha;
    run->peft_use_rslora = a.rslora;
    run->lora_target_modules = a.targets;
    run->lora_target_linear = false;
    /* modules_to_save: the run's list, owned by it as the loader's are */
    for (int i = 0; i < run->lora_modules_to_save_count; i++) free(run->lora_modules_to_save[i]);
    free(run->lora_modules_to_save);
    run->lora_modules_to_save = NULL;
    run->lora_modules_to_save_count = 0;
    static const char *const names[2] = {"embed_tokens", "lm_head"};
    for (int m = 0; m < 2; m++) {
        if (!((a.modules_to_save >> m) & 1u)) continue;
        run->lora_modules_to_save =
            tt_xrealloc(run->lora_modules_to_save, sizeof(char *) * (size_t)(run->lora_modules_to_save_count + 1),
                        "lora_modules_to_save");
        run->lora_modules_to_save[run->lora_modules_to_save_count++] = tt_xstrdup(names[m]);
    }
}

/* Where the model comes from: the run's output (its adapter on its base, or its full model), or --model / --adapter. */
static void resolve_model(tt_run_config *run, const inference_options *o) {
    if (o->model_dir) {
        free(run->base_model);
        run->base_model = tt_hf_local_path(o->model_dir, TT_HF_MODEL, NULL, "inference: --model");
        free(run->model_config);
        run->model_config = NULL;
    }
    char *adapter_given =
        o->adapter_dir ? tt_hf_local_path(o->adapter_dir, TT_HF_MODEL, NULL, "inference: --adapter") : NULL;
    const char *adapter = adapter_given;
    if (!adapter && o->config_path && run->adapter != TT_ADAPTER_NONE) {
        if (!run->output_dir || !is_file(run->output_dir, "adapter_model.safetensors"))
            tt_die("inference: the run trains an adapter but %s/adapter_model.safetensors is not there (the run has "
                   "not finished); give --adapter DIR",
                   run->output_dir ? run->output_dir : "output_dir");
        adapter = run->output_dir;
    }
    if (adapter) {
        adapter_settings(run, adapter);
        free(run->lora_model_dir);
        run->lora_model_dir = tt_xstrdup(adapter);
    } else if (!o->model_dir) { /* a full fine-tune: the model it saved */
        if (!run->output_dir || !is_file(run->output_dir, "config.json"))
            tt_die("inference: %s/config.json is not there (the run has not finished saving its model); give --model "
                   "DIR",
                   run->output_dir ? run->output_dir : "output_dir");
        free(run->base_model);
        run->base_model = tt_xstrdup(run->output_dir);
        free(run->model_config);
        run->model_config = NULL;
    }
    free(adapter_given);
    if (!run->base_model) tt_die("inference: no model to load; set base_model or give --model DIR");
    /* a base saved in 4 bits runs as QLoRA trained on it: its 4-bit weights with the adapter beside them */
    tt_model_config model;
    tt_load_model_config_for_run(run, &model);
    if (model.quantization.load_in_4bit) {
        if (run->adapter == TT_ADAPTER_NONE)
            tt_die("inference: %s is saved in bitsandbytes' 4-bit format; give the adapter trained on it (--adapter "
                   "DIR), or `tiertrain dequantize` it first",
                   run->base_model);
        run->adapter = TT_ADAPTER_QLORA;
        run->load_in_4bit = true;
    }
    tt_model_config_free(&model);
}

/* generation_config.json's eos_token_id (a number or a list), which transformers' generate ends at. */
static int generation_eos_ids(const char *model_dir, int32_t *ids, int most) {
    char path[4200];
    snprintf(path, sizeof path, "%s/generation_config.json", model_dir);
    json_error_t error;
    json_t *root = tt_json_load_regular_file(path, 0, 1u << 20, "a generation_config.json", &error);
    if (!root) return 0;
    json_t *eos = json_object_get(root, "eos_token_id");
    int count = 0;
    if (json_is_integer(eos)) ids[count++] = (int32_t)json_integer_value(eos);
    for (size_t i = 0; json_is_array(eos) && i < json_array_size(eos) && count < most; i++)
        if (json_is_integer(json_array_get(eos, i))) ids[count++] = (int32_t)json_integer_value(json_array_get(eos, i));
    json_decref(root);
    return count;
}

typedef struct session {
    inference_options *options;
    tt_run_config *run;
    tt_tokenizer *tok;    /* NULL: ids only */
    tt_chat_format *chat; /* NULL: prompts are raw text */
    tt_generator generator;
    int32_t stops[MAX_STOPS + 8];
    int stop_count;
    /* streaming: the answer's ids so far and the bytes of their text already printed */
    int32_t *answer;
    int64_t answer_count;
    size_t printed;
} session;

static void add_stop(session *s, int32_t id) {
    for (int i = 0; i < s->stop_count; i++)
        if (s->stops[i] == id) return;
    if (s->stop_count < (int)(sizeof s->stops / sizeof s->stops[0])) s->stops[s->stop_count++] = id;
}

static void resolve_stops(session *s) {
    const inference_options *o = s->options;
    if (!o->ignore_eos) {
        int32_t eos[8];
        const int n = generation_eos_ids(s->run->base_model, eos, 8);
        for (int i = 0; i < n; i++) add_stop(s, eos[i]);
        if (s->tok) {
            const int32_t id = tt_run_eos_id(s->run, s->tok);
            if (id >= 0) add_stop(s, id);
        }
    }
    for (int i = 0; i < o->stop_count; i++) {
        char *end = NULL;
        const long long id = strtoll(o->stops[i], &end, 10);
        if (end && *end == '\0' && id >= 0) {
            add_stop(s, (int32_t)id);
            continue;
        }
        const int32_t found = s->tok ? tt_tokenizer_token_to_id(s->tok, o->stops[i]) : -1;
        if (found < 0)
            tt_die("inference: --stop '%s' is not a token of the tokenizer (give a single token's text, or its id)",
                   o->stops[i]);
        add_stop(s, found);
    }
}

/* The chat template prompts are rendered with: the run's first chat_template dataset's, or with --model the
 * tokenizer's own (tokenizer_default) where it has one. */
static void open_chat(session *s) {
    if (s->options->chat_template_off || !s->tok) return;
    for (int i = 0; i < s->run->dataset_count; i++)
        if (s->run->dataset_specs[i].type == TT_DATASET_CHAT_TEMPLATE) {
            s->chat = tt_run_chat_format(s->run, i, s->tok);
            return;
        }
    if (s->options->config_path && s->run->dataset_count > 0) return; /* completion data: raw text */
    char dir[4200];
    if (!tt_run_tokenizer_dir(s->run, dir, sizeof dir)) return;
    if (!is_file(dir, "chat_template.jinja")) {
        char path[4300];
        snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
        json_error_t error;
        json_t *root = tt_json_load_regular_file(path, 0, 64u << 20, "a tokenizer_config.json", &error);
        const bool has = root && json_object_get(root, "chat_template");
        json_decref(root);
        if (!has) return;
    }
    /* a run with one chat dataset entry reads the template as preprocessing would */
    tt_run_config r = *s->run;
    tt_dataset_spec spec = {.type = TT_DATASET_CHAT_TEMPLATE};
    r.dataset_specs[0] = spec;
    r.datasets[0] = (char *)"the prompts";
    r.dataset_count = 1;
    s->chat = tt_run_chat_format(&r, 0, s->tok);
}

static void print_new_text(session *s, bool final) {
    size_t len = 0;
    char *text = tt_tokenizer_decode(s->tok, s->answer, s->answer_count, true, &len);
    /* hold back a trailing replacement character: the next token may complete its UTF-8 sequence */
    size_t ready = len;
    if (!final && ready >= 3 && memcmp(text + ready - 3, "\xEF\xBF\xBD", 3) == 0) ready -= 3;
    if (ready > s->printed) {
        fwrite(text + s->printed, 1, ready - s->printed, stdout);
        fflush(stdout);
        s->printed = ready;
    }
    free(text);
}

static void on_token(void *ctx, int32_t id) {
    session *s = ctx;
    s->answer[s->answer_count++] = id;
    if (s->options->print_ids) return;
    print_new_text(s, false);
}

static void append_id(tt_token_ids *ids, int32_t id) {
    if (ids->count == ids->capacity) {
        ids->capacity = ids->capacity ? 2 * ids->capacity : 64;
        ids->ids = tt_xrealloc(ids->ids, sizeof(int32_t) * (size_t)ids->capacity, "prompt ids");
    }
    ids->ids[ids->count++] = id;
}

static void parse_ids(const char *text, tt_token_ids *ids) {
    const char *p = text;
    while (*p) {
        char *end = NULL;
        errno = 0;
        const long long id = strtoll(p, &end, 10);
        if (end == p || errno || id < 0 || id > INT32_MAX)
            tt_die("inference: --prompt-ids is token ids separated by commas or spaces, not '%s'", text);
        append_id(ids, (int32_t)id);
        p = end;
        while (*p == ',' || *p == ' ') p++;
    }
}

/* A prompt's ids: a chat render of one user turn (or the messages given), or the raw text with the tokenizer's
 * special tokens. */
static void prompt_ids(session *s, const char *text, json_t *messages, tt_token_ids *ids) {
    ids->count = 0;
    if (!s->tok)
        tt_die("inference: text prompts need the model's tokenizer (tokenizer.json beside %s, or "
               "tokenizer_config); give --prompt-ids otherwise",
               s->run->base_model);
    if (s->chat) {
        json_t *turns = messages ? json_incref(messages) : json_pack("[{s:s, s:s}]", "role", "user", "content", text);
        char *error = NULL;
        if (!tt_chat_prompt_ids(s->chat, turns, ids, &error)) tt_die("inference: %s", error);
        json_decref(turns);
        return;
    }
    if (messages) tt_die("inference: a prompt with messages needs a chat template (this run trains on plain text)");
    tt_tokenizer_encode(s->tok, text, strlen(text), true, ids);
}

static void answer(session *s, const tt_token_ids *prompt) {
    const inference_options *o = s->options;
    if (o->show_prompt) {
        if (s->tok) {
            char *text = tt_tokenizer_decode(s->tok, prompt->ids, prompt->count, false, NULL);
            fprintf(stderr, "prompt (%lld tokens): %s\n", (long long)prompt->count, text);
            free(text);
        } else {
            fprintf(stderr, "prompt (%lld tokens)\n", (long long)prompt->count);
        }
    }
    int32_t *out = tt_xmalloc(sizeof(int32_t) * (size_t)o->max_new_tokens, "the answer");
    s->answer = tt_xrealloc(s->answer, sizeof(int32_t) * (size_t)o->max_new_tokens, "the answer");
    s->answer_count = 0;
    s->printed = 0;
    const tt_generation_request request = {
        .prompt = prompt->ids,
        .prompt_count = prompt->count,
        .max_new_tokens = o->max_new_tokens,
        .stop_ids = s->stops,
        .stop_count = s->stop_count,
        .sampling = o->sampling,
        .seed = o->seed_given ? o->seed : (uint64_t)s->run->seed,
        .on_token = on_token,
        .ctx = s,
    };
    tt_generation_stats stats;
    const int64_t count = tt_generate(&s->generator, &request, out, &stats);
    if (o->print_ids) {
        for (int64_t i = 0; i < count; i++) printf(i ? " %d" : "%d", out[i]);
    } else {
        print_new_text(s, true);
    }
    putchar('\n');
    fflush(stdout);
    const double decode_rate =
        stats.new_tokens > 1 && stats.decode_seconds > 0 ? (double)(stats.new_tokens - 1) / stats.decode_seconds : 0;
    fprintf(stderr,
            "inference: %lld prompt tokens, %lld new tokens (%s); prefill %.3f s (%.0f tokens/s), decode %.1f "
            "tokens/s\n",
            (long long)stats.prompt_tokens, (long long)stats.new_tokens,
            stats.stopped ? "stopped at an end token" : "reached max_new_tokens or the context", stats.prefill_seconds,
            stats.prefill_seconds > 0 ? (double)stats.prompt_tokens / stats.prefill_seconds : 0, decode_rate);
    free(out);
}

/* One prompt a line of f: text, or a JSON object with "prompt" (text), "messages" (a conversation) or "ids" (token
 * ids). */
static void answer_lines(session *s, FILE *f, const char *name) {
    char *line = NULL;
    size_t capacity = 0;
    ssize_t len;
    int64_t number = 0;
    tt_token_ids ids = {0};
    while ((len = getline(&line, &capacity, f)) >= 0) {
        number++;
        if ((size_t)len > MAX_PROMPT_LINE_BYTES)
            tt_die("%s:%lld: a prompt of %zd bytes (at most %u)", name, (long long)number, len, MAX_PROMPT_LINE_BYTES);
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = '\0';
        if (len == 0) continue;
        if (line[0] == '{') {
            json_error_t error;
            json_t *record = json_loads(line, 0, &error);
            if (!record) tt_die("%s:%lld: not JSON: %s", name, (long long)number, error.text);
            json_t *text = json_object_get(record, "prompt"), *messages = json_object_get(record, "messages");
            json_t *given = json_object_get(record, "ids");
            if (!json_is_string(text) && !json_is_array(messages) && !json_is_array(given))
                tt_die("%s:%lld: a JSON prompt has \"prompt\" (a string), \"messages\" (a list of {role, content}) or "
                       "\"ids\" (token ids)",
                       name, (long long)number);
            if (json_is_array(given)) {
                ids.count = 0;
                for (size_t i = 0; i < json_array_size(given); i++) {
                    json_t *id = json_array_get(given, i);
                    if (!json_is_integer(id) || json_integer_value(id) < 0 || json_integer_value(id) > INT32_MAX)
                        tt_die("%s:%lld: \"ids\" holds token ids (whole numbers from 0)", name, (long long)number);
                    append_id(&ids, (int32_t)json_integer_value(id));
                }
            } else {
                prompt_ids(s, json_is_string(text) ? json_string_value(text) : NULL,
                           json_is_array(messages) ? messages : NULL, &ids);
            }
            json_decref(record);
        } else {
            prompt_ids(s, line, NULL, &ids);
        }
        answer(s, &ids);
    }
    free(line);
    tt_token_ids_free(&ids);
}

int tt_cli_inference(int argc, char **argv) {
    tt_set_info_stream(stderr); /* standard output is the answers' */
    inference_options o;
    parse_options(argc, argv, &o);
    tt_run_config run;
    tt_run_config_defaults(&run);
    tt_run_config_load(&run, o.config_path, o.override_count, o.overrides);
    if (o.config_path) tt_run_config_validate(&run);
    resolve_model(&run, &o);
    const int64_t context = o.max_context ? o.max_context : o.config_path ? run.sequence_len : 4096;

    session s = {.options = &o, .run = &run};
    char dir[4200];
    if (tt_run_tokenizer_dir(&run, dir, sizeof dir) && is_file(dir, "tokenizer.json"))
        s.tok = tt_tokenizer_load(run.tokenizer_config ? run.tokenizer_config : run.base_model);
    open_chat(&s);
    resolve_stops(&s);

    tt_device device;
    tt_select_device(&run, 0, 1, &device);
    tt_info("inference: %s%s%s on %s, context %lld, %s%s", run.base_model,
            run.lora_model_dir ? " with the adapter " : "", run.lora_model_dir ? run.lora_model_dir : "",
            device.description, (long long)context, o.sampling.temperature > 0 ? "sampling" : "greedy",
            s.chat ? ", chat template" : "");
    tt_generator_open(&s.generator, &run, &device, context);

    tt_token_ids ids = {0};
    if (o.prompt_ids) {
        parse_ids(o.prompt_ids, &ids);
        answer(&s, &ids);
    } else if (o.prompt) {
        prompt_ids(&s, o.prompt, NULL, &ids);
        answer(&s, &ids);
    } else if (o.prompts_path) {
        FILE *f = fopen(o.prompts_path, "r");
        if (!f) tt_die("inference: cannot open --prompts %s: %s", o.prompts_path, strerror(errno));
        answer_lines(&s, f, o.prompts_path);
        fclose(f);
    } else {
        answer_lines(&s, stdin, "standard input");
    }
    tt_token_ids_free(&ids);
    free(s.answer);
    tt_generator_close(&s.generator);
    tt_release_device(&device);
    if (s.chat) tt_chat_format_free(s.chat);
    if (s.tok) tt_tokenizer_free(s.tok);
    tt_run_config_free(&run);
    free(o.overrides);
    return 0;
}
