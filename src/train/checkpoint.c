#include "train/checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/check.h"
#include "core/file_names.h"
#include "core/fault_inject.h"
#include "core/input_file.h"
#include "model/lora.h"
#include "model/safetensors.h"
#include "model/weights.h"
#include "train/adamw_8bit_checkpoint.h"
#include "train/model_io.h"
#include "train/streamed_save.h"

void tt_make_directories(const char *path) {
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0755) != 0 && errno != EEXIST) tt_die("cannot create directory %s: %s", buf, strerror(errno));
        *p = '/';
    }
    if (mkdir(buf, 0755) != 0 && errno != EEXIST) tt_die("cannot create directory %s: %s", buf, strerror(errno));
    /* what stands there must be a directory: the cause named here, not in the first file written into it */
    struct stat st;
    if (stat(buf, &st) != 0) tt_die("cannot use directory %s: %s", buf, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        tt_die("%s is not a directory (a file of that name is in the way); choose another path", buf);
}

/* Removes a directory that tiertrain itself wrote (files only, no subdirectories). */
static void remove_flat_directory(const char *path) {
    DIR *d = opendir(path);
    if (!d) return;
    struct dirent *e;
    char file[4096];
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        snprintf(file, sizeof file, "%s/%s", path, e->d_name);
        unlink(file);
    }
    closedir(d);
    rmdir(path);
}

void tt_checkpoint_save_optimizer(const tt_model_state *m, const float *weights, const float *adam_m,
                                  const float *adam_v, const char *path) {
    tt_st_writer writer;
    tt_st_writer_init(&writer);
    char name[160];
    for (int i = 0; i < m->params.count; i++) {
        const tt_param_info *p = &m->params.params[i];
        if (!p->trainable) continue;
        const int64_t at = p->offset - m->params.trainable_start;
        snprintf(name, sizeof name, "master.%s", p->name);
        tt_st_writer_add(&writer, name, TT_F32, p->ndim, p->shape, weights + at);
        snprintf(name, sizeof name, "exp_avg.%s", p->name);
        tt_st_writer_add(&writer, name, TT_F32, p->ndim, p->shape, adam_m + at);
        snprintf(name, sizeof name, "exp_avg_sq.%s", p->name);
        tt_st_writer_add(&writer, name, TT_F32, p->ndim, p->shape, adam_v + at);
    }
    tt_st_writer_commit(&writer, path);
    tt_st_writer_free(&writer);
}

static void save_trainer_state(const tt_trainer_state *t, const char *path) {
    json_t *root = json_object();
    json_object_set_new(root, "format", json_string("tiertrain-trainer-state-1"));
    json_object_set_new(root, "global_step", json_integer(t->global_step));
    json_object_set_new(root, "data_epoch", json_integer(t->data_epoch));
    json_object_set_new(root, "data_index", json_integer(t->data_index));
    json_object_set_new(root, "tokens_seen", json_integer(t->tokens_seen));
    json_t *rng = json_array();
    for (int i = 0; i < 4; i++) {
        char hex[32];
        snprintf(hex, sizeof hex, "%016" PRIx64, t->rng.s[i]);
        json_array_append_new(rng, json_string(hex));
    }
    json_object_set_new(root, "rng_state", rng);
    char *text = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(root);
    tt_write_file_atomic(path, text, strlen(text));
    free(text);
}

/* fp32 host buffers of the trainable parameters: weights and the two moments, in the trainable layout. */
static float *host_parameter_buffers(const tt_model_state *m, float **adam_m, float **adam_v) {
    const size_t elements = 3 * (size_t)m->params.trainable_numel;
    float *weights = tt_xcalloc(elements, sizeof(float), "checkpoint buffers"); /* padding between parameters: 0 */
    *adam_m = weights + m->params.trainable_numel;
    *adam_v = *adam_m + m->params.trainable_numel;
    return weights;
}

/* The trainer state and the run's config into partial, then partial renamed to final_dir: only a complete checkpoint
 * gets the final name. Returns final_dir (the caller frees it). */
static char *finish_checkpoint(const tt_trainer_state *t, const tt_run_config *run, const char *partial,
                               const char *final_dir) {
    char path[4200];
    snprintf(path, sizeof path, "%s/trainer_state.json", partial);
    save_trainer_state(t, path);
    snprintf(path, sizeof path, "%s/run.yaml", partial);
    char *yaml = NULL;
    size_t yaml_size = 0;
    FILE *mem = open_memstream(&yaml, &yaml_size);
    tt_run_config_write_yaml(run, mem);
    fclose(mem);
    tt_write_file_atomic(path, yaml, yaml_size);
    free(yaml);

    tt_fault_pause_in_save(); /* a test hook (fault_inject.h); nothing outside tests */
    remove_flat_directory(final_dir);
    if (rename(partial, final_dir) != 0) tt_die("cannot rename %s to %s: %s", partial, final_dir, strerror(errno));
    return tt_xstrdup(final_dir);
}

char *tt_checkpoint_save(const tt_model_state *m, const tt_trainer_state *t, const tt_run_config *run, bool writes) {
    char final_dir[4096], partial[4112], path[4200];
    snprintf(final_dir, sizeof final_dir, "%s/checkpoint-%lld", run->output_dir, (long long)t->global_step);
    snprintf(partial, sizeof partial, "%s.partial", final_dir);
    if (writes) {
        remove_flat_directory(partial); /* left over from an interrupted save */
        tt_make_directories(partial);
    }

    if (m->params.lora_rank == 0 && tt_model_reads_trainable_ranges(m)) {
        /* a full fine-tune, a tensor at a time (16 bytes a parameter gathered at once would not fit a large model
         * beside its pinned memory); with zero_stage sharding every rank hands its units' tensors to the leader */
        tt_save_model_streamed(m, partial, run->max_shard_bytes, run->base_model, writes);
        snprintf(path, sizeof path, "%s/optimizer.safetensors", partial);
        if (m->adamw_8bit) { /* the quantized state as it is (no sharding with it: nothing to gather) */
            if (writes) tt_adamw_8bit_save(m, path);
        } else {
            tt_save_optimizer_streamed(m, path, writes);
        }
        return writes ? finish_checkpoint(t, run, partial, final_dir) : NULL;
    }
    float *adam_m, *adam_v, *weights = host_parameter_buffers(m, &adam_m, &adam_v);
    tt_model_get_trainable_weights(m, weights); /* with zero_stage 1, collectives: every rank is here */
    if (!m->adamw_8bit) tt_model_get_moments(m, adam_m, adam_v);
    if (!writes) {
        free(weights);
        return NULL;
    }
    if (m->params.lora_rank > 0) { /* the base model is not trained: the adapters are the model */
        tt_lora_save_peft(weights, &m->params, tt_adapter_dtype(m), tt_run_base_model_name(run), partial);
    } else { /* a whole Hugging Face model, frozen parts included */
        float *flat =
            tt_xmalloc(tt_mul_size((size_t)m->params.total_numel, sizeof(float), "the weights"), "the weights");
        tt_model_get_frozen_weights(m, flat);
        memcpy(flat + m->params.trainable_start, weights, (size_t)m->params.trainable_numel * sizeof(float));
        tt_weights_save_hf(flat, &m->params, &m->config, m->config.dtype, partial, run->max_shard_bytes,
                           run->base_model);
        free(flat);
    }
    snprintf(path, sizeof path, "%s/optimizer.safetensors", partial);
    if (m->adamw_8bit) tt_adamw_8bit_save(m, path);
    else tt_checkpoint_save_optimizer(m, weights, adam_m, adam_v, path);
    free(weights);
    return finish_checkpoint(t, run, partial, final_dir);
}

static void load_into(float *dst, const tt_st_file *file, const char *name, const tt_param_info *p) {
    const tt_st_tensor *t = tt_st_find(file, name);
    if (!t && tt_st_find(file, "quantization_map.exp_avg"))
        tt_die("%s: tensor '%s' is missing: the checkpoint holds bitsandbytes' 8-bit AdamW state (optimizer: "
               "adamw_bnb_8bit); resume with the optimizer it was saved with",
               file->path, name);
    if (!t) tt_die("%s: tensor '%s' is missing; the checkpoint does not belong to this model", file->path, name);
    if (t->dtype != TT_F32 || t->ndim != p->ndim || t->shape[0] != p->shape[0] ||
        (p->ndim == 2 && t->shape[1] != p->shape[1]))
        tt_die("%s: tensor '%s' has another dtype or shape than this model's (expected F32 with %lld elements); the "
               "checkpoint does not belong to this model",
               file->path, name, (long long)p->numel);
    memcpy(dst, t->data, (size_t)p->numel * sizeof(float));
}

static int64_t json_int_key(json_t *root, const char *key, const char *path) {
    json_t *v = json_object_get(root, key);
    if (!json_is_integer(v)) tt_die("%s: key '%s' is missing or not an integer", path, key);
    return json_integer_value(v);
}

void tt_checkpoint_load(tt_model_state *m, tt_trainer_state *t, const char *dir) {
    char path[4200];
    snprintf(path, sizeof path, "%s/optimizer.safetensors", dir);
    tt_st_file file;
    tt_st_open(path, &file);
    char name[160];
    float *adam_m, *adam_v, *weights = host_parameter_buffers(m, &adam_m, &adam_v);
    for (int i = 0; i < m->params.count; i++) { /* the frozen parameters keep theirs (the run's initial weights) */
        const tt_param_info *p = &m->params.params[i];
        if (!p->trainable) continue;
        const int64_t at = p->offset - m->params.trainable_start;
        snprintf(name, sizeof name, "master.%s", p->name);
        load_into(weights + at, &file, name, p);
        if (m->adamw_8bit) continue; /* its moments below */
        snprintf(name, sizeof name, "exp_avg.%s", p->name);
        load_into(adam_m + at, &file, name, p);
        snprintf(name, sizeof name, "exp_avg_sq.%s", p->name);
        load_into(adam_v + at, &file, name, p);
    }
    if (m->adamw_8bit) tt_adamw_8bit_load_moments(m, &file);
    tt_st_close(&file);
    tt_model_set_trainable_weights(m, weights);
    if (!m->adamw_8bit) tt_model_set_moments(m, adam_m, adam_v);
    free(weights);

    snprintf(path, sizeof path, "%s/trainer_state.json", dir);
    json_error_t error;
    json_t *root = tt_json_load_regular_file(path, 0, 16 << 20, "a trainer_state.json", &error);
    if (!root) tt_die("%s:%d: cannot read the trainer state: %s", path, error.line, error.text);
    memset(t, 0, sizeof(*t));
    t->global_step = json_int_key(root, "global_step", path);
    t->data_epoch = json_int_key(root, "data_epoch", path);
    t->data_index = json_int_key(root, "data_index", path);
    t->tokens_seen = json_int_key(root, "tokens_seen", path);
    json_t *rng = json_object_get(root, "rng_state");
    if (!json_is_array(rng) || json_array_size(rng) != 4) tt_die("%s: rng_state must be 4 hex strings", path);
    for (size_t i = 0; i < 4; i++) {
        const char *hex = json_string_value(json_array_get(rng, i));
        char *end = NULL;
        if (!hex || !*hex) tt_die("%s: rng_state[%zu] is not a hex string", path, i);
        errno = 0;
        t->rng.s[i] = strtoull(hex, &end, 16);
        if (*end || errno) tt_die("%s: rng_state[%zu] ('%s') is not a hex string", path, i, hex);
    }
    json_decref(root);
    if (t->global_step < 0 || t->data_epoch < 0 || t->data_index < 0)
        tt_die("%s: negative step or data position; the file is corrupt", path);
}

tt_dtype tt_adapter_dtype(const tt_model_state *m) {
    return m->plan.precision.master || m->plan.precision.activation == TT_F32 ? TT_F32 : m->plan.precision.activation;
}

const char *tt_run_base_model_name(const tt_run_config *run) {
    return run->base_model_repo_id ? run->base_model_repo_id : run->base_model ? run->base_model : run->model_config;
}

/* Whether a directory entry is "checkpoint-<step><suffix>", and its step. */
static bool checkpoint_step(const char *name, const char *suffix, long long *step) {
    int consumed = 0;
    return sscanf(name, "checkpoint-%lld%n", step, &consumed) == 1 && strcmp(name + consumed, suffix) == 0;
}

char *tt_checkpoint_find_latest(const char *output_dir) {
    DIR *d = opendir(output_dir);
    if (!d) return NULL;
    long long best = -1;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        long long step;
        if (checkpoint_step(e->d_name, "", &step) && step > best) best = step;
    }
    closedir(d);
    if (best < 0) return NULL;
    char path[4096];
    snprintf(path, sizeof path, "%s/checkpoint-%lld", output_dir, best);
    return tt_xstrdup(path);
}

static int compare_steps(const void *a, const void *b) {
    const long long x = *(const long long *)a, y = *(const long long *)b;
    return (x > y) - (x < y);
}

static void keep_newest(const char *output_dir, int64_t keep, const char *why) {
    DIR *d = opendir(output_dir);
    if (!d) return;
    long long *steps = NULL;
    size_t count = 0, capacity = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        long long step;
        if (!checkpoint_step(e->d_name, "", &step)) continue;
        if (count == capacity) {
            capacity = capacity ? 2 * capacity : 16;
            steps = tt_xrealloc(steps, capacity * sizeof *steps, "checkpoint list");
        }
        steps[count++] = step;
    }
    closedir(d);
    if (count > 0) qsort(steps, count, sizeof *steps, compare_steps);
    char path[4200];
    for (size_t i = 0; i + (size_t)keep < count; i++) {
        snprintf(path, sizeof path, "%s/checkpoint-%lld", output_dir, steps[i]);
        remove_flat_directory(path);
        tt_info("%s: removed %s", why, path);
    }
    free(steps);
}

void tt_checkpoint_keep_newest(const char *output_dir, int64_t keep) {
    char why[64];
    snprintf(why, sizeof why, "save_total_limit %lld", (long long)keep);
    keep_newest(output_dir, keep, why);
}

void tt_output_dir_check_previous_run(const char *output_dir, bool resuming, bool overwrite, bool leader) {
    if (resuming) return;
    static const char *const products[] = {"metrics.jsonl", "model.safetensors", "model.safetensors.index.json",
                                           "adapter_model.safetensors"};
    char found[1024] = "", path[4400];
    size_t used = 0;
    for (size_t i = 0; i < sizeof products / sizeof products[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", output_dir, products[i]);
        if (access(path, F_OK) == 0)
            used += (size_t)snprintf(found + used, used < sizeof found ? sizeof found - used : 0, "%s%s",
                                     used ? ", " : "", products[i]);
    }
    char *latest = tt_checkpoint_find_latest(output_dir);
    if (latest && used < sizeof found)
        snprintf(found + used, sizeof found - used, "%s%s and older checkpoints", used ? ", " : "",
                 strrchr(latest, '/') + 1);
    free(latest);
    if (!found[0]) return;
    if (!overwrite)
        tt_die("output_dir %s holds a previous run (%s); pass --resume to continue it, set overwrite_output_dir: true "
               "to replace it, or choose another output_dir",
               output_dir, found);
    if (!leader) return;
    keep_newest(output_dir, 0, "overwrite_output_dir");
    snprintf(path, sizeof path, "%s/metrics.jsonl", output_dir);
    if (unlink(path) != 0 && errno != ENOENT)
        tt_die("overwrite_output_dir: cannot remove %s: %s", path, strerror(errno));
    tt_info("overwrite_output_dir: replaced the previous run in %s (%s)", output_dir, found);
}

void tt_checkpoint_remove_incomplete(const char *output_dir) {
    DIR *d = opendir(output_dir);
    if (!d) return;
    struct dirent *e;
    char path[4400];
    while ((e = readdir(d)) != NULL) {
        long long step;
        const bool partial = checkpoint_step(e->d_name, ".partial", &step);
        /* the temporaries of tt_write_file_atomic (model and adapter files, their configs, run.yaml) */
        const bool temporary = tt_ends_with(e->d_name, ".safetensors.tmp") || tt_ends_with(e->d_name, ".json.tmp") ||
                               tt_ends_with(e->d_name, ".yaml.tmp");
        if (!partial && !temporary) continue;
        snprintf(path, sizeof path, "%s/%s", output_dir, e->d_name);
        if (partial) {
            remove_flat_directory(path);
            tt_info("output_dir: removed incomplete %s (a save that was interrupted; the checkpoints before it are "
                    "complete)",
                    e->d_name);
        } else if (unlink(path) == 0) {
            tt_info(
                "output_dir: removed %s (a file write that was interrupted; the file it was replacing is unchanged)",
                e->d_name);
        }
    }
    closedir(d);
}
