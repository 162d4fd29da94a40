#include "core/tier.h"

const char *tt_tier_name(tt_tier tier) {
    switch (tier) {
    case TT_TIER_GPU: return "gpu";
    case TT_TIER_PINNED: return "pinned";
    case TT_TIER_HOST: return "host";
    case TT_TIER_DISK: return "disk";
    default: return "?";
    }
}

const char *tt_class_name(tt_class cls) {
    switch (cls) {
    case TT_CLASS_FROZEN_WEIGHT: return "frozen weights";
    case TT_CLASS_WEIGHT: return "weights";
    case TT_CLASS_LORA: return "lora adapters";
    case TT_CLASS_GRADIENT: return "gradients";
    case TT_CLASS_MASTER: return "master weights";
    case TT_CLASS_OPTIMIZER_STATE: return "optimizer state";
    case TT_CLASS_LAYER_INPUT: return "layer inputs";
    case TT_CLASS_SAVED_ACTIVATION: return "saved activations";
    case TT_CLASS_LOGITS: return "logits chunk";
    case TT_CLASS_WORKSPACE: return "workspace";
    default: return "?";
    }
}
