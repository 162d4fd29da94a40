/* tiertrain's command line: train | plan | preprocess | merge | dequantize | tokenize. */
#include <ctype.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "core/check.h"
#include "core/hf_cache.h"
#include "config/run_config.h"
#include "model/dequantized_export.h"
#include "model/lora.h"
#include "data/tokenize_files.h"
#include "dist/host_cpus.h"
#include "train/byte_tokenizer.h"
#include "train/checkpoint.h"
#include "train/longest_context.h"
#include "train/prepare.h"
#include "train/data_parallel.h"
#include "train/trainer.h"
#include "cli/inference.h"
#ifdef TT_HAVE_CUDA
#include "ops/cuda/comm_nccl.h"
#endif

#define TT_VERSION "0.1.0"

static void print_usage(FILE *out) {
    fputs(
        "tiertrain " TT_VERSION ": trains Llama / Qwen / Mistral models with every tensor placed in a memory tier\n"
        "\n"
        "usage:\n"
        "  tiertrain train --config run.yaml [--resume] [--trace FILE] [key=value ...]   train (see `tiertrain train --help`)\n"
        "  (an override may also be written --key=value or --key value, as axolotl's CLI takes them)\n"
        "  tiertrain plan  --config run.yaml [key=value ...]              print the memory plan, do not train\n"
        "  tiertrain plan  --config run.yaml --max-sequence-len           the longest sequence_len that fits, and its plan\n"
        "  tiertrain preprocess --config run.yaml [key=value ...]         tokenize and mask the JSON datasets into\n"
        "                                                                 dataset_prepared_path (train reuses it)\n"
        "  (run.yaml may also be given without --config, as axolotl: tiertrain train run.yaml)\n"
        "  tiertrain merge --base HF_DIR --adapter PEFT_DIR -o OUT_DIR [--max-shard-size 5GB]\n"
        "                                                                 a LoRA adapter merged into its base: a full model\n"
        "  tiertrain dequantize --base HF_DIR -o OUT_DIR [--quant-type nf4|fp4|int8] [--double-quant true|false]\n"
        "                                                                 the base a QLoRA run computes with, dequantized\n"
        "  tiertrain inference --config run.yaml | --model HF_DIR [--adapter DIR] [--prompt TEXT] [--max-new-tokens N]\n"
        "                                                                 generate from the trained model (see --help)\n"
        "  tiertrain evaluate --config run.yaml [--checkpoint DIR] [--dataset FILE]\n"
        "                                                                 eval loss and perplexity of the run's model\n"
        "  tiertrain tokenize --tokenizer DIR_OR_JSON [--eos TOKEN | --no-eos] [--ids-text] -o OUT FILE...\n"
        "                                                                 token file with the model's tokenizer\n"
        "  tiertrain tokenize --bytes -o out.tok FILE...                  byte-level token file for experiments\n"
        "  tiertrain --version\n",
        out);
}

typedef struct command_args {
    const char *config_path;
    char **owned; /* overrides this parser built (--trace), freed with the arguments */
    int owned_count;
    bool resume;
    bool help;
    bool max_sequence_len;     /* plan: search the longest sequence_len that fits */
    int64_t sequence_len_step; /* ... in multiples of this (0: the default) */
    int64_t processes, rank;   /* plan: price rank `rank` of a run of `processes` (0: one, or a sequence group) */
    const char *checkpoint;    /* evaluate: a checkpoint directory (NULL: the run's final model) */
    const char *dataset;       /* evaluate: a file to evaluate instead of the eval split */
    char **overrides;
    int override_count;
} command_args;

static void free_command_args(command_args *a) {
    for (int i = 0; i < a->owned_count; i++) free(a->owned[i]);
    free(a->owned);
    free(a->overrides);
}

static void parse_command_args(int argc, char **argv, command_args *a, const char *command) {
    memset(a, 0, sizeof(*a));
    a->overrides = tt_xcalloc((size_t)argc + 1, sizeof(char *), "arguments");
    a->owned = tt_xcalloc((size_t)argc + 1, sizeof(char *), "arguments");
    for (int i = 0; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--config") == 0 || strcmp(arg, "-c") == 0) {
            if (i + 1 >= argc) tt_die("%s: --config needs a file name", command);
            a->config_path = argv[++i];
        } else if (strncmp(arg, "--config=", 9) == 0) {
            a->config_path = arg + 9;
        } else if (strcmp(arg, "--resume") == 0 && strcmp(command, "train") == 0) {
            a->resume = true;
        } else if (strcmp(arg, "--trace") == 0 && strcmp(command, "train") == 0) {
            if (i + 1 >= argc) tt_die("train: --trace needs a file name, e.g. --trace trace.json");
            /* the same as the override trace=FILE */
            const char *file = argv[++i];
            char *override = tt_xmalloc(strlen(file) + 7, "an argument");
            snprintf(override, strlen(file) + 7, "trace=%s", file);
            a->overrides[a->override_count++] = override;
            a->owned[a->owned_count++] = override;
        } else if (strcmp(arg, "--max-sequence-len") == 0 && strcmp(command, "plan") == 0) {
            a->max_sequence_len = true;
        } else if (strcmp(arg, "--sequence-len-step") == 0 && strcmp(command, "plan") == 0) {
            char *end = NULL;
            const long long step = i + 1 < argc ? strtoll(argv[i + 1], &end, 10) : 0;
            if (i + 1 >= argc || !end || *end || step <= 0)
                tt_die("plan: --sequence-len-step needs a positive number of tokens, e.g. --sequence-len-step 4096");
            a->sequence_len_step = step;
            i++;
        } else if ((strcmp(arg, "--processes") == 0 || strcmp(arg, "--rank") == 0) && strcmp(command, "plan") == 0) {
            char *end = NULL;
            const bool processes = strcmp(arg, "--processes") == 0;
            const long long value = i + 1 < argc ? strtoll(argv[i + 1], &end, 10) : -1;
            if (i + 1 >= argc || !end || *end || value < (processes ? 1 : 0))
                tt_die("plan: %s needs a %s number, e.g. %s", arg, processes ? "positive" : "non-negative",
                       processes ? "--processes 4" : "--rank 1");
            if (processes) a->processes = value;
            else a->rank = value;
            i++;
        } else if (strcmp(arg, "--checkpoint") == 0 && strcmp(command, "evaluate") == 0) {
            if (i + 1 >= argc) tt_die("evaluate: --checkpoint needs a directory, e.g. --checkpoint out/checkpoint-500");
            a->checkpoint = argv[++i];
        } else if (strcmp(arg, "--dataset") == 0 && strcmp(command, "evaluate") == 0) {
            if (i + 1 >= argc) tt_die("evaluate: --dataset needs a file, e.g. --dataset data/test.jsonl");
            a->dataset = argv[++i];
        } else if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            a->help = true;
        } else if (arg[0] != '-' && strchr(arg, '=')) {
            a->overrides[a->override_count++] = argv[i];
        } else if (arg[0] == '-' && arg[1] == '-' && (isalpha((unsigned char)arg[2]) || arg[2] == '_')) {
            /* axolotl's CLI forms of an override: --key=value, --key value, and --flag for true; dashes in the name
             * are underscores (--learning-rate) */
            const char *eq = strchr(arg, '=');
            const char *value = eq ? eq + 1 : "true";
            if (!eq && i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0) value = argv[++i];
            const size_t name_length = eq ? (size_t)(eq - arg - 2) : strlen(arg + 2);
            const size_t bytes = name_length + strlen(value) + 2;
            char *override = tt_xmalloc(bytes, "an argument");
            snprintf(override, bytes, "%.*s=%s", (int)name_length, arg + 2, value);
            for (size_t k = 0; k < name_length; k++)
                if (override[k] == '-') override[k] = '_';
            a->overrides[a->override_count++] = override;
            a->owned[a->owned_count++] = override;
        } else if (arg[0] != '-' && !a->config_path) { /* axolotl's form: tiertrain train config.yml */
            a->config_path = arg;
        } else {
            tt_die("%s: unknown argument '%s'; expected --config FILE%s, --help, or overrides (key=value, --key=value, "
                   "--key value)",
                   command, arg,
                   strcmp(command, "train") == 0 ? ", --resume, --trace FILE"
                   : strcmp(command, "plan") == 0
                       ? ", --max-sequence-len [--sequence-len-step N], --processes N [--rank R]"
                   : strcmp(command, "evaluate") == 0 ? ", --checkpoint DIR, --dataset FILE"
                                                      : "");
        }
    }
}

/* The run's communicator: MPI's for mpirun (CPU backend), NCCL's for a torchrun-style launch (one GPU a process,
 * LOCAL_RANK's), none for a single process. */
static tt_comm *open_comm(const tt_launch *launch) {
    switch (launch->kind) {
    case TT_LAUNCH_SINGLE: return NULL;
    case TT_LAUNCH_MPI:
#ifdef TT_HAVE_MPI
        return tt_comm_join(tt_comm_mpi_open());
#else
        tt_die("started by mpirun with %d processes, but this tiertrain was built without MPI; install Open MPI "
               "(apt-get install libopenmpi-dev openmpi-bin) and rebuild, or run one process",
               launch->size);
#endif
    case TT_LAUNCH_TORCHRUN:
#ifdef TT_HAVE_CUDA
        return tt_comm_join(tt_comm_nccl_open(launch, launch->local_rank));
#else
        tt_die("WORLD_SIZE is %d (a torchrun-style launch, one GPU a process), but this tiertrain was built without "
               "CUDA; use mpirun -np %d on the CPU backend, or one process",
               launch->size, launch->size);
#endif
    }
    return NULL;
}

static int run_train_or_plan(int argc, char **argv, bool train) {
    const char *command = train ? "train" : "plan";
    command_args a;
    parse_command_args(argc, argv, &a, command);
    if (a.help) {
        printf("usage: tiertrain %s --config run.yaml%s [key=value ...]\n\n", command,
               train ? " [--resume]" : " [--max-sequence-len [--sequence-len-step N]] [--processes N [--rank R]]");
        if (!train)
            printf("--max-sequence-len: the longest sequence_len (a multiple of --sequence-len-step, default 1024) "
                   "whose plan fits the GPU, host memory and offload_dir budgets, then that plan.\n"
                   "--processes N [--rank R]: the plan of rank R (default 0) of a run of N processes on this host "
                   "(its zero_stage shard, its share of sequence parallel's tokens, 1/N of the host's memory).\n\n");
        tt_run_config_print_help(stdout);
        free_command_args(&a);
        return 0;
    }
    if (!a.config_path && a.override_count == 0)
        tt_die("%s: no configuration; pass --config run.yaml (and/or key=value overrides); see `tiertrain %s --help`",
               command, command);
    /* several processes (mpirun, or torchrun's variables): the others print nothing but their errors, the leader
     * (rank 0) reports */
    const tt_launch launch = train ? tt_launch_from_environment() : (tt_launch){.kind = TT_LAUNCH_SINGLE, .size = 1};
    tt_comm *comm = open_comm(&launch);
    if (comm && comm->rank > 0 && !freopen("/dev/null", "w", stdout))
        tt_die("cannot silence rank %d's standard output", comm->rank);
    tt_run_config run;
    tt_run_config_defaults(&run);
    tt_run_config_load(&run, a.config_path, a.override_count, a.overrides);
    tt_run_config_print_notes(&run, stdout);
    tt_run_config_validate(&run);
    /* every rank the same configuration, compared before the values derived per host below */
    if (comm) tt_data_parallel_check_config(comm, &run);
    if (comm) tt_comm_set_timeout(comm, (int)run.ddp_timeout);
    /* plan --processes: one rank of a run of that many processes on this host (its zero_stage shard, its sequence
     * share, its part of the host's memory); a sequence-parallel plan is of a group at least */
    int64_t processes = comm ? comm->size : 1, rank = comm ? comm->rank : 0;
    if (!train) {
        processes = a.processes ? a.processes : run.sequence_parallel_degree;
        rank = a.rank;
        if (rank >= processes)
            tt_die("plan: --rank %lld of %lld processes; ranks are 0 .. %lld", (long long)rank, (long long)processes,
                   (long long)processes - 1);
        if (processes % run.sequence_parallel_degree != 0)
            tt_die("plan: --processes %lld is not a multiple of sequence_parallel_degree %lld", (long long)processes,
                   (long long)run.sequence_parallel_degree);
    }
    /* the host is shared: the processes that the launcher left one affinity set split it, each pinning its thread
     * pools in its own part (host_cpus.h); each runs 1/N of the cores' threads and, in tt_select_device, plans for 1/N
     * of the memory, unless num_threads and host_memory_budget say */
    const int host_processes = comm ? launch.local_size : (int)processes;
    int sharers = 1;
    if (comm) {
        const tt_cpu_binding cpus = tt_bind_host_cpu_share(comm);
        sharers = cpus.sharers;
        if (cpus.bound)
            printf("host CPUs: %d processes of this machine shared one affinity set of %d CPUs; each now runs on its "
                   "part (%s)\n",
                   cpus.sharers, cpus.set_cpus, cpus.parts);
        else if (cpus.sharers > 1)
            printf("host CPUs: not split among this machine's %d processes: %s\n", cpus.sharers, cpus.skipped);
    }
    /* each of a host's processes (more where several share a machine the launcher counts as one process) takes its
     * fraction of the cores unless num_threads says: `plan --processes N` prices the same */
    const int sharing = host_processes > sharers ? host_processes : sharers;
    if (sharing > 1 && run.num_threads == 0) {
        const long cores = sysconf(_SC_NPROCESSORS_ONLN);
        run.num_threads = cores / sharing > 0 ? cores / sharing : 1;
    }
    /* sequence parallel in several groups: the group's communicator before the device's free memory is read, so that
     * the transport's buffers for it are outside the room the plan prices */
    tt_comm *sequence_group = train ? tt_data_parallel_sequence_group(comm, &run) : NULL;
    if (train && run.gpu)
        tt_die("gpu: %s prices a run for that GPU with tiertrain plan; training runs on this machine's own device "
               "(remove gpu)",
               run.gpu);
    tt_device device;
    tt_select_device(&run, launch.local_rank > 0 ? launch.local_rank : 0, host_processes, &device);
    device.data_parallel_ranks = (int)processes;
    device.data_parallel_rank = (int)rank;
    int status = 0;
    if (a.sequence_len_step && !a.max_sequence_len) tt_die("plan: --sequence-len-step goes with --max-sequence-len");
    if (train) status = tt_train(&run, &device, comm, sequence_group, a.resume);
    else if (a.max_sequence_len)
        tt_print_longest_context(&run, &device, a.sequence_len_step ? a.sequence_len_step : 1024, stdout);
    else status = tt_print_run_plan(&run, &device, stdout) ? 0 : 1;
    tt_release_device(&device);
    tt_run_config_free(&run);
    free_command_args(&a);
    tt_comm_close(sequence_group); /* before the communicator it was split from */
    tt_comm_close(comm);
    return status;
}

/* `tiertrain evaluate`: the eval loss and perplexity of the run's model (or a checkpoint's) on its eval split. */
static int run_evaluate(int argc, char **argv) {
    command_args a;
    parse_command_args(argc, argv, &a, "evaluate");
    if (a.help) {
        printf("usage: tiertrain evaluate --config run.yaml [--checkpoint DIR] [--dataset FILE] [key=value ...]\n\nThe "
               "eval loss and perplexity of the run's final model or adapter in output_dir (or of a checkpoint) on the "
               "run's eval split (val_set_size), or on every document of FILE (in the format of the run's first "
               "dataset), masked and batched as training evaluates.\n");
        free_command_args(&a);
        return 0;
    }
    if (!a.config_path && a.override_count == 0)
        tt_die("evaluate: no configuration; pass --config run.yaml (the run to evaluate)");
    tt_run_config run;
    tt_run_config_defaults(&run);
    tt_run_config_load(&run, a.config_path, a.override_count, a.overrides);
    tt_run_config_validate(&run);
    tt_device device;
    tt_select_device(&run, 0, 1, &device);
    const int status = tt_evaluate_run(&run, &device, a.checkpoint, a.dataset);
    tt_release_device(&device);
    tt_run_config_free(&run);
    free_command_args(&a);
    return status;
}

/* `tiertrain preprocess`: the JSON datasets tokenized and masked into dataset_prepared_path, as
 * `axolotl preprocess`; train then finds the file by its hash. */
static int run_preprocess(int argc, char **argv) {
    command_args a;
    parse_command_args(argc, argv, &a, "preprocess");
    if (a.help) {
        printf("usage: tiertrain preprocess --config run.yaml [key=value ...]\n\nTokenizes the run's JSON/JSONL "
               "datasets with its tokenizer (tokenizer_config, else base_model), masks the prompts, and writes one "
               "token file version 2 to dataset_prepared_path/<hash>.tok (docs/token_format.md). `tiertrain train` "
               "with the same data, tokenizer and keys reuses it. num_threads threads tokenize.\n");
        free_command_args(&a);
        return 0;
    }
    if (!a.config_path && a.override_count == 0)
        tt_die("preprocess: no configuration; pass run.yaml (or --config run.yaml) and/or key=value overrides");
    tt_run_config run;
    tt_run_config_defaults(&run);
    tt_run_config_load(&run, a.config_path, a.override_count, a.overrides);
    tt_run_config_print_notes(&run, stdout);
    tt_run_config_validate(&run);
    if (!tt_run_has_json_datasets(&run))
        tt_die("preprocess: the datasets are token files, which train reads as they are; preprocess prepares JSON "
               "datasets ({path: data.jsonl, type: alpaca | completion | input_output})");
    if (run.num_threads > 0) omp_set_num_threads((int)run.num_threads);
    struct timespec start, end;
    clock_gettime(CLOCK_MONOTONIC, &start);
    bool reused = false;
    char *path = tt_prepare_datasets(&run, &reused);
    if (reused)
        tt_info("preprocess: %s is prepared already (the same data, tokenizer and keys); train will use it", path);
    else {
        clock_gettime(CLOCK_MONOTONIC, &end);
        struct rusage use;
        getrusage(RUSAGE_SELF, &use);
        tt_info("preprocess: done in %.1f s, peak resident memory %.0f MiB; `tiertrain train` with this config uses %s",
                (double)(end.tv_sec - start.tv_sec) + 1e-9 * (double)(end.tv_nsec - start.tv_nsec),
                (double)use.ru_maxrss / 1024.0, path);
    }
    free(path);
    tt_run_config_free(&run);
    free_command_args(&a);
    return 0;
}

static int run_merge(int argc, char **argv) {
    const char *usage = "usage: tiertrain merge --base HF_DIR --adapter PEFT_DIR -o OUT_DIR [--max-shard-size 5GB]";
    const char *base = NULL, *adapter = NULL, *output = NULL;
    int64_t max_shard_bytes = 0;
    for (int i = 0; i < argc; i++) {
        const char *arg = argv[i];
        const bool takes_value = strcmp(arg, "--base") == 0 || strcmp(arg, "--adapter") == 0 ||
                                 strcmp(arg, "-o") == 0 || strcmp(arg, "--output") == 0 ||
                                 strcmp(arg, "--max-shard-size") == 0;
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            printf("%s\n\nWrites OUT_DIR: the Hugging Face model in HF_DIR with every LoRA adapter of PEFT_DIR "
                   "(adapter_model.safetensors, adapter_config.json) merged in, W' = W + (lora_alpha / r) B A in fp32, "
                   "stored in the base's dtype.\n",
                   usage);
            return 0;
        }
        if (!takes_value) tt_die("merge: unknown argument '%s'; %s", arg, usage);
        if (i + 1 >= argc) tt_die("merge: %s needs a value; %s", arg, usage);
        const char *value = argv[++i];
        if (strcmp(arg, "--base") == 0) {
            base = value;
        } else if (strcmp(arg, "--adapter") == 0) {
            adapter = value;
        } else if (strcmp(arg, "--max-shard-size") == 0) {
            max_shard_bytes = tt_parse_bytes(value);
            if (max_shard_bytes < 0) tt_die("merge: --max-shard-size '%s' is not a size such as 5GB or 2GiB", value);
        } else {
            output = value;
        }
    }
    if (!base || !adapter || !output)
        tt_die("merge: %s missing; %s", !base ? "--base" : !adapter ? "--adapter" : "-o", usage);
    char *base_dir = tt_hf_local_path(base, TT_HF_MODEL, NULL, "merge: --base");
    char *adapter_dir = tt_hf_local_path(adapter, TT_HF_MODEL, NULL, "merge: --adapter");
    tt_make_directories(output);
    tt_lora_merge(base_dir, adapter_dir, output, (size_t)max_shard_bytes);
    free(base_dir);
    free(adapter_dir);
    return 0;
}

static int run_dequantize(int argc, char **argv) {
    const char *usage =
        "usage: tiertrain dequantize --base HF_DIR -o OUT_DIR [--quant-type nf4|fp4|int8] [--double-quant true|false] "
        "[--max-shard-size 5GB]";
    const char *base = NULL, *output = NULL, *type = NULL, *double_quant = NULL;
    int64_t max_shard_bytes = 0;
    for (int i = 0; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            printf("%s\n\nWrites OUT_DIR: the model in HF_DIR with its q/k/v/o/gate/up/down weights as a QLoRA run "
                   "computes with them: quantized to 4 bits as adapter: qlora does at load (default nf4 with double "
                   "quantization, axolotl's; int8: as load_in_8bit does), then dequantized (fp32 products code value x "
                   "block absmax); a checkpoint "
                   "saved in bitsandbytes' 4-bit format is dequantized as it is. Every tensor F32, config.json without "
                   "quantization_config: transformers and peft load it without bitsandbytes "
                   "(tests/peft_load_check.py).\n",
                   usage);
            return 0;
        }
        const bool takes_value = strcmp(arg, "--base") == 0 || strcmp(arg, "-o") == 0 || strcmp(arg, "--output") == 0 ||
                                 strcmp(arg, "--quant-type") == 0 || strcmp(arg, "--double-quant") == 0 ||
                                 strcmp(arg, "--max-shard-size") == 0;
        if (!takes_value) tt_die("dequantize: unknown argument '%s'; %s", arg, usage);
        if (i + 1 >= argc) tt_die("dequantize: %s needs a value; %s", arg, usage);
        const char *value = argv[++i];
        if (strcmp(arg, "--base") == 0) base = value;
        else if (strcmp(arg, "--quant-type") == 0) type = value;
        else if (strcmp(arg, "--double-quant") == 0) double_quant = value;
        else if (strcmp(arg, "--max-shard-size") == 0) {
            max_shard_bytes = tt_parse_bytes(value);
            if (max_shard_bytes < 0)
                tt_die("dequantize: --max-shard-size '%s' is not a size such as 5GB or 2GiB", value);
        } else output = value;
    }
    if (!base || !output) tt_die("dequantize: %s missing; %s", !base ? "--base" : "-o", usage);
    if (type && strcmp(type, "nf4") != 0 && strcmp(type, "fp4") != 0 && strcmp(type, "int8") != 0)
        tt_die("dequantize: --quant-type is '%s'; it is nf4 or fp4 (bnb_4bit_quant_type), or int8 (load_in_8bit)",
               type);
    const bool int8 = type && strcmp(type, "int8") == 0;
    if (int8 && double_quant && strcmp(double_quant, "false") != 0)
        tt_die("dequantize: --double-quant %s with --quant-type int8; an 8-bit base has no double quantization",
               double_quant);
    if (double_quant && strcmp(double_quant, "true") != 0 && strcmp(double_quant, "false") != 0)
        tt_die("dequantize: --double-quant is '%s'; it is true or false (bnb_4bit_use_double_quant)", double_quant);
    const tt_quant4_format format = {.type = int8                               ? TT_QUANT_INT8
                                             : type && strcmp(type, "fp4") == 0 ? TT_QUANT4_FP4
                                                                                : TT_QUANT4_NF4,
                                     .double_quant = !int8 && (!double_quant || strcmp(double_quant, "true") == 0)};
    char *base_dir = tt_hf_local_path(base, TT_HF_MODEL, NULL, "dequantize: --base");
    tt_make_directories(output);
    tt_export_dequantized(base_dir, type || double_quant ? &format : NULL, output, (size_t)max_shard_bytes);
    free(base_dir);
    return 0;
}

static int run_tokenize(int argc, char **argv) {
    const char *usage =
        "usage: tiertrain tokenize --tokenizer DIR_OR_JSON [--eos TOKEN | --no-eos] [--ids-text] -o OUT "
        "FILE... | tiertrain tokenize --bytes -o out.tok FILE...";
    tt_tokenize_options opt = {0};
    char *tokenizer_path = NULL; /* --tokenizer, a Hub name as its snapshot in the cache */
    bool bytes = false;
    char **inputs = tt_xcalloc((size_t)argc + 1, sizeof(char *), "arguments");
    int input_count = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        bool takes_value = strcmp(a, "-o") == 0 || strcmp(a, "--output") == 0 || strcmp(a, "--tokenizer") == 0 ||
                           strcmp(a, "--eos") == 0;
        if (takes_value && i + 1 >= argc) tt_die("tokenize: %s needs a value; %s", a, usage);
        if (strcmp(a, "--bytes") == 0) bytes = true;
        else if (strcmp(a, "--no-eos") == 0) opt.no_eos = true;
        else if (strcmp(a, "--ids-text") == 0) opt.ids_text = true;
        else if (strcmp(a, "-o") == 0 || strcmp(a, "--output") == 0) opt.output_path = argv[++i];
        else if (strcmp(a, "--tokenizer") == 0) {
            free(tokenizer_path);
            opt.tokenizer_path = tokenizer_path =
                tt_hf_local_path(argv[++i], TT_HF_MODEL, NULL, "tokenize: --tokenizer");
        } else if (strcmp(a, "--eos") == 0) opt.eos_token = argv[++i];
        else if (a[0] == '-') tt_die("tokenize: unknown option '%s'; %s", a, usage);
        else inputs[input_count++] = argv[i];
    }
    if (bytes == (opt.tokenizer_path != NULL))
        tt_die("tokenize: give exactly one of --tokenizer (the model's tokenizer.json) and --bytes; %s", usage);
    if (!opt.output_path || input_count == 0) tt_die("tokenize: %s", usage);
    if (bytes) tt_tokenize_bytes(inputs, input_count, opt.output_path);
    else tt_tokenize_files(&opt, inputs, input_count);
    free(inputs);
    free(tokenizer_path);
    return 0;
}

/* OpenMP's idle threads spin (libgomp's default, OMP_WAIT_POLICY active): where other processes share the cores, a
 * spinning thread takes a core from the one with work. Measured on a 2-core machine, the demo's 100 steps
 * (docs/benchmarks.md): alone 11.1-13.3 s active against 11.4-12.2 s passive; beside one busy process 27.7-32.4 s
 * against 19.4-22.7 s. So tiertrain waits passively unless the user sets OMP_WAIT_POLICY. libgomp reads it as it
 * loads, before main, so the process starts itself again with it set (where /proc/self/exe is not there, it goes on
 * with the default). */
static void wait_passively(char **argv) {
    if (getenv("OMP_WAIT_POLICY")) return;
    if (setenv("OMP_WAIT_POLICY", "passive", 1) != 0) return;
    execv("/proc/self/exe", argv);
}

int main(int argc, char **argv) {
    wait_passively(argv);
    if (argc < 2) {
        print_usage(stderr);
        return 1;
    }
    const char *command = argv[1];
    if (strcmp(command, "train") == 0) return run_train_or_plan(argc - 2, argv + 2, true);
    if (strcmp(command, "plan") == 0) return run_train_or_plan(argc - 2, argv + 2, false);
    if (strcmp(command, "tokenize") == 0) return run_tokenize(argc - 2, argv + 2);
    if (strcmp(command, "preprocess") == 0) return run_preprocess(argc - 2, argv + 2);
    if (strcmp(command, "merge") == 0) return run_merge(argc - 2, argv + 2);
    if (strcmp(command, "dequantize") == 0) return run_dequantize(argc - 2, argv + 2);
    if (strcmp(command, "inference") == 0) return tt_cli_inference(argc - 2, argv + 2);
    if (strcmp(command, "evaluate") == 0) return run_evaluate(argc - 2, argv + 2);
    if (strcmp(command, "--version") == 0 || strcmp(command, "version") == 0) {
        puts("tiertrain " TT_VERSION);
        return 0;
    }
    if (strcmp(command, "--help") == 0 || strcmp(command, "-h") == 0 || strcmp(command, "help") == 0) {
        print_usage(stdout);
        return 0;
    }
    fprintf(stderr, "tiertrain: error: unknown command '%s'\n\n", command);
    print_usage(stderr);
    return 1;
}
