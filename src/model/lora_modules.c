#include "model/lora_modules.h"

#include "core/check.h"

static const char *const names[TT_LORA_MODULE_COUNT] = {"q_proj",  "k_proj",    "v_proj",   "o_proj",      "gate_proj",
                                                        "up_proj", "down_proj", "qkv_proj", "gate_up_proj"};
static const char *const short_names[TT_LORA_MODULE_COUNT] = {"q",  "k",    "v",   "o",      "gate",
                                                              "up", "down", "qkv", "gate_up"};
static const char *const paths[TT_LORA_MODULE_COUNT] = {"self_attn.q_proj", "self_attn.k_proj",   "self_attn.v_proj",
                                                        "self_attn.o_proj", "mlp.gate_proj",      "mlp.up_proj",
                                                        "mlp.down_proj",    "self_attn.qkv_proj", "mlp.gate_up_proj"};

static void check_module(tt_lora_module module) {
    TT_CHECK(module >= 0 && module < TT_LORA_MODULE_COUNT, "LoRA module %d", (int)module);
}

const char *tt_lora_module_name(tt_lora_module module) {
    check_module(module);
    return names[module];
}

const char *tt_lora_module_short_name(tt_lora_module module) {
    check_module(module);
    return short_names[module];
}

const char *tt_lora_module_path(tt_lora_module module) {
    check_module(module);
    return paths[module];
}
