/* Tensor classes and memory tiers: the vocabulary of the size table, the plan and
 * the arenas. Every training tensor has exactly one class and lives in one tier. */
#ifndef TT_CORE_TIER_H
#define TT_CORE_TIER_H

#include <stddef.h>
#include <stdint.h>

typedef enum tt_tier {
    TT_TIER_GPU,    /* device memory of the accelerator */
    TT_TIER_PINNED, /* page-locked host memory: the only tier whose copies overlap compute */
    TT_TIER_HOST,   /* pageable host memory; the compute tier of the CPU backend */
    TT_TIER_DISK,   /* files under offload_dir */
    TT_TIER_COUNT
} tt_tier;

typedef enum tt_class {
    TT_CLASS_FROZEN_WEIGHT,    /* parameters that receive no gradient */
    TT_CLASS_WEIGHT,           /* trainable parameters in compute precision */
    TT_CLASS_LORA,             /* LoRA adapters */
    TT_CLASS_GRADIENT,         /* gradients of trainable parameters */
    TT_CLASS_MASTER,           /* fp32 master weights (when compute precision is lower) */
    TT_CLASS_OPTIMIZER_STATE,  /* AdamW m and v */
    TT_CLASS_LAYER_INPUT,      /* each decoder layer's input: the checkpoint ("hidden_states") */
    TT_CLASS_SAVED_ACTIVATION, /* tensors a layer's backward needs: norms, q/k/v, attention, MLP */
    TT_CLASS_LOGITS,           /* one chunk of LM-head logits */
    TT_CLASS_WORKSPACE,        /* scratch that lives inside one op or one layer's backward */
    TT_CLASS_COUNT
} tt_class;

const char *tt_tier_name(tt_tier tier);
const char *tt_class_name(tt_class cls);

/* All arena allocations are rounded up to this many bytes (GPU-friendly alignment).
 * The size table applies the same rounding, so estimates and accounting agree exactly. */
#define TT_ALIGNMENT ((size_t)256)

static inline size_t tt_align_up(size_t bytes) { return (bytes + TT_ALIGNMENT - 1) & ~(TT_ALIGNMENT - 1); }

#endif
