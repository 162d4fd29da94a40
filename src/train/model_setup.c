#include "train/model_setup.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "core/check.h"
#include "memory/disk_store.h"
#include "train/measure.h"
#include "train/model_attach.h"

void tt_model_state_init(tt_model_state *s, tt_model_config *config, tt_plan *plan, const tt_backend *backend,
                         size_t budget_bytes) {
    tt_model_state_init_trainable(s, config, plan, NULL, backend, budget_bytes);
}

/* The disk tier's need against offload_dir's free space, before any memory is taken: at long context the host
 * memory is pinned first (a minute at 118 GiB) and a full disk would only show when the activation files are
 * reserved after it. */
static void check_disk_room(const tt_plan *plan, const tt_size_table *sizes) {
    const size_t need = sizes->tier_peak[TT_TIER_DISK];
    if (!need) return;
    const char *dir = plan->offload_dir ? plan->offload_dir : ".";
    size_t free_bytes = 0;
    if (!tt_disk_free_bytes(dir, &free_bytes))
        tt_die("offload_dir '%s': cannot use it for the activations the plan puts on disk: %s; set offload_dir to a "
               "writable directory on a local disk",
               dir, strerror(errno));
    const int processes = plan->offload_dir_processes > 1 ? plan->offload_dir_processes : 1;
    if (need <= tt_disk_budget(free_bytes, processes)) return;
    char need_text[32], free_text[32], processes_text[64] = "";
    if (processes > 1)
        snprintf(processes_text, sizeof processes_text, " in each of the %d processes of this host (a file each)",
                 processes);
    tt_die("offload_dir '%s': the plan puts %s of activations on disk%s but the file system has %s free (less a "
           "thousandth for its own blocks); free disk space, choose another offload_dir, or raise host_memory_budget "
           "or lower sequence_len (run `tiertrain plan` to see the table)",
           dir, tt_format_bytes(need, need_text, sizeof need_text), processes_text,
           tt_format_bytes(free_bytes, free_text, sizeof free_text));
}

/* What a mixture of experts does not train with yet, refused by name before any work. */
static void check_experts(const tt_model_config *config, const tt_plan *plan, const tt_trainable_spec *trainable,
                          const tt_backend *backend) {
    if (config->num_experts == 0) return;
    if (!backend->iface->moe_forward)
        tt_die("%s: a mixture of experts trains on the CPU backend only for now (device: cpu); the GPU's grouped "
               "expert GEMMs are not built yet",
               config->model_type);
    if (plan->mlp_shards > 1)
        tt_die("%s: tiled_mlp tiles a dense MLP; a mixture of experts' layers are not tiled yet: set tiled_mlp: false",
               config->model_type);
    if (trainable && trainable->quantize_base)
        tt_die(
            "%s: a quantized base (adapter: qlora with load_in_4bit, or load_in_8bit) of a mixture of experts is not "
            "supported yet (its experts would stay in their float dtype): use adapter: lora without load_in_8bit",
            config->model_type);
}

void tt_model_state_init_trainable(tt_model_state *s, tt_model_config *config, tt_plan *plan,
                                   const tt_trainable_spec *trainable, const tt_backend *backend, size_t budget_bytes) {
    check_experts(config, plan, trainable, backend);
    tt_param_table params;
    tt_param_table_build_trainable(config, trainable, &params);
    tt_size_table sizes;
    tt_size_table_configure(&sizes, config, &params, plan, backend);
    check_disk_room(plan, &sizes);
    tt_model_state_init_core(s, config, plan, &params, &sizes, backend, budget_bytes);
    tt_model_state_attach_optimizer(s);
}

void tt_model_state_free(tt_model_state *s) {
    tt_model_state_detach_optimizer(s);
    tt_model_state_release(s);
}
