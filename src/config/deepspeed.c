/* `deepspeed: path/to/zero2.json`, as axolotl users name their ZeRO stage: the DeepSpeed JSON's settings tiertrain has
 * an equal of become its keys (zero_optimization.stage -> zero_stage, offload_optimizer.device cpu ->
 * optimizer_cpu_offload); a setting that asks for what tiertrain does not do is refused, naming it; the rest are
 * DeepSpeed's own tuning (bucket sizes, overlap_comm, ...), listed once as having no effect here. A value "auto" is
 * DeepSpeed's "take the trainer's", which is what happens. */
#include <jansson.h>
#include <stdio.h>
#include <string.h>

#include "config/config_internal.h"
#include "core/check.h"
#include "core/input_file.h"

/* The largest DeepSpeed JSON read (they are a few hundred bytes). */
#define DEEPSPEED_JSON_BYTES ((size_t)1 << 20)

static bool is_auto(const json_t *v) { return json_is_string(v) && strcmp(json_string_value(v), "auto") == 0; }

/* A number of the JSON that must agree with the run's key (or be "auto"). */
static void check_agrees(const char *path, const json_t *root, const char *name, double run_value, const char *key) {
    const json_t *v = json_object_get(root, name);
    if (!v || is_auto(v) || json_is_null(v)) return;
    if (!json_is_number(v) || json_number_value(v) != run_value)
        tt_die("%s: %s is %s but the run's %s is %g; set it to \"auto\" (the run's value) or change %s", path, name,
               json_is_number(v) ? "another number" : "not a number", key, run_value, key);
}

static const char *device_of(const char *path, const json_t *zero, const char *name) {
    const json_t *offload = json_object_get(zero, name);
    if (!offload || json_is_null(offload)) return "none";
    const json_t *device = json_object_get(offload, "device");
    if (!json_is_string(device))
        tt_die("%s: zero_optimization.%s.device is missing or not a string (expected \"cpu\", \"nvme\" or \"none\")",
               path, name);
    return json_string_value(device);
}

static int64_t stage_of(const char *path, const json_t *zero) {
    const json_t *stage = json_object_get(zero, "stage");
    if (!stage) return 0;
    if (!json_is_integer(stage) || json_integer_value(stage) < 0 || json_integer_value(stage) > 3)
        tt_die("%s: zero_optimization.stage must be 0, 1, 2 or 3", path);
    return json_integer_value(stage);
}

/* The ZeRO stage and optimizer offload the JSON asks for, onto the run (a disagreement with the run's own keys is an
 * error). */
static void apply_zero(tt_run_config *c, const char *path, const json_t *zero) {
    const int64_t stage = stage_of(path, zero);
    if (c->zero_stage != 0 && c->zero_stage != stage)
        tt_die("%s asks for zero_optimization.stage %lld but the run sets zero_stage %lld; keep one of them", path,
               (long long)stage, (long long)c->zero_stage);
    c->zero_stage = stage;
    const char *optimizer = device_of(path, zero, "offload_optimizer"), *param = device_of(path, zero, "offload_param");
    if (strcmp(optimizer, "cpu") == 0) c->optimizer_cpu_offload = true;
    else if (strcmp(optimizer, "none") != 0)
        tt_die("%s: zero_optimization.offload_optimizer.device \"%s\" is not available (tiertrain offloads the "
               "optimizer to the CPU: \"cpu\", or \"none\")",
               path, optimizer);
    if (strcmp(param, "none") != 0)
        tt_die("%s: zero_optimization.offload_param.device \"%s\" is not available yet (ZeRO's parameter offload); "
               "remove offload_param (zero_stage 3 shards the weights over the GPUs; layer_offloading streams a "
               "frozen base from the host)",
               path, param);
}

void cfg_apply_deepspeed(tt_run_config *c) {
    if (!c->deepspeed) return;
    const char *path = c->deepspeed;
    json_error_t error;
    json_t *root =
        tt_json_load_regular_file(path, JSON_REJECT_DUPLICATES, DEEPSPEED_JSON_BYTES, "a DeepSpeed config", &error);
    if (!root) tt_die("deepspeed: %s: %s (line %d)", path, error.text, error.line);
    if (!json_is_object(root)) tt_die("deepspeed: %s is not a JSON object", path);
    const json_t *zero = json_object_get(root, "zero_optimization");
    if (zero && !json_is_object(zero)) tt_die("%s: zero_optimization is not an object", path);
    if (zero) apply_zero(c, path, zero);
    check_agrees(path, root, "train_micro_batch_size_per_gpu", (double)c->micro_batch_size, "micro_batch_size");
    check_agrees(path, root, "gradient_accumulation_steps", (double)c->gradient_accumulation_steps,
                 "gradient_accumulation_steps");
    check_agrees(path, root, "gradient_clipping", c->max_grad_norm, "max_grad_norm");
    const json_t *fp16 = json_object_get(root, "fp16");
    const json_t *fp16_on = fp16 ? json_object_get(fp16, "enabled") : NULL;
    if (json_is_true(fp16_on)) tt_die("%s: fp16.enabled is true; tiertrain trains in bf16 (bf16: true or auto)", path);
    /* what DeepSpeed tunes for itself: said once, so that nothing is taken silently */
    char ignored[512] = "";
    const char *key;
    json_t *value;
    if (zero) json_object_foreach((json_t *)zero, key, value) {
            if (strcmp(key, "stage") == 0 || strcmp(key, "offload_optimizer") == 0 || strcmp(key, "offload_param") == 0)
                continue;
            if (strlen(ignored) + strlen(key) + 3 < sizeof ignored) {
                if (ignored[0]) strcat(ignored, ", ");
                strcat(ignored, key);
            }
        }
    tt_info("deepspeed %s: zero_stage %lld%s%s%s", path, (long long)c->zero_stage,
            c->optimizer_cpu_offload ? ", optimizer_cpu_offload" : "",
            ignored[0] ? "; DeepSpeed's own tuning, no effect here: " : "", ignored);
    json_decref(root);
}
