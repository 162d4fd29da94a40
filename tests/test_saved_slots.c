/* Each family's table of a decoder layer's saved slots (its description, src/model/arch_*.c): the invariants the
 * step program relies on (the MLP's slots last, one slot per LoRA module, unique labels), the slots each norm
 * placement and q/k norm needs, the shapes against the closed forms of each slot for a Llama and a Qwen3 layer, and the
 * cheap set Megatron's selective recompute takes. */
#include <stdio.h>
#include <string.h>

#include "memory/plan.h"
#include "model/arch.h"
#include "model/saved_slots.h"
#include "model/lora_modules.h"
#include "test_util.h"

static tt_model_config layer_config(bool qk_norm) {
    tt_model_config c = {0};
    snprintf(c.model_type, sizeof c.model_type, "%s", qk_norm ? "qwen3" : "llama");
    c.hidden_size = 96;
    c.intermediate_size = 160;
    c.num_heads = 6;
    c.num_kv_heads = 2;
    c.head_dim = 24;
    return c;
}

static void test_invariants(const tt_layer_slots *slots, unsigned modules) {
    int lora_slots[TT_LORA_MODULE_COUNT] = {0};
    for (int i = 0; i < TT_SAVED_SLOT_COUNT; i++) {
        const tt_saved_slot_info *s = &slots->slot[i];
        if (!s->present) continue;
        TT_EXPECT(s->name && s->name[0], "%s: slot %d has a label", slots->architecture, i);
        for (int j = 0; j < i; j++)
            TT_EXPECT(!slots->slot[j].present || strcmp(s->name, slots->slot[j].name) != 0,
                      "%s: slots %d and %d share the label %s", slots->architecture, i, j, s->name);
        /* the step program pops the MLP's slots first: they are the last ones (TT_SAVED_FIRST_MLP_SLOT on) */
        TT_EXPECT(s->mlp_half == (i >= TT_SAVED_FIRST_MLP_SLOT), "%s: %s is in the %s half", slots->architecture,
                  s->name, s->mlp_half ? "MLP" : "attention");
        TT_EXPECT((s->lora_module >= 0) == (s->producer == TT_SLOT_OP_LORA_DOWN),
                  "%s: %s: a LoRA module exactly when an adapter's down projection writes it", slots->architecture,
                  s->name);
        if (s->lora_module >= 0) {
            TT_EXPECT(s->lora_module < TT_LORA_MODULE_COUNT && s->width == TT_SLOT_WIDTH_LORA_RANK,
                      "%s: %s is [rows, r]", slots->architecture, s->name);
            lora_slots[s->lora_module]++;
            TT_EXPECT(tt_lora_saved_slot(slots, s->lora_module) == (tt_saved_slot)i,
                      "%s: the slot of LoRA module %d is %d", slots->architecture, s->lora_module, i);
        }
    }
    for (int m = 0; m < TT_LORA_MODULE_COUNT; m++)
        TT_EXPECT(lora_slots[m] == (int)((modules >> m) & 1u), "%s: LoRA module %d has %s slot (%d)",
                  slots->architecture, m, (modules >> m) & 1u ? "one" : "no", lora_slots[m]);
}

/* Each slot's elements against its closed form (what the size table wrote out slot by slot before the table). */
static void test_shapes(bool qk_norm) {
    const tt_model_config c = layer_config(qk_norm);
    const tt_layer_slots *slots = tt_layer_slots_for(&c);
    TT_EXPECT(strcmp(slots->architecture, qk_norm ? "qwen3" : "llama") == 0, "the table of %s",
              qk_norm ? "qk_norm" : "no qk_norm");
    const int64_t N = 40, mlp_rows = 16, r = 4, D = c.hidden_size, F = c.intermediate_size;
    const int64_t q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim;
    const tt_slot_dims dims = {.tokens = N,
                               .mlp_rows = mlp_rows,
                               .num_heads = c.num_heads,
                               .num_kv_heads = c.num_kv_heads,
                               .head_dim = c.head_dim,
                               .hidden = D,
                               .intermediate = F,
                               .lora_rank = r};
    int64_t expected[TT_SAVED_SLOT_COUNT] = {
        [TT_SAVED_ATTN_RSTD] = N,
        [TT_SAVED_ATTN_NORMED] = N * D,
        [TT_SAVED_LORA_Q] = N * r,
        [TT_SAVED_LORA_K] = N * r,
        [TT_SAVED_LORA_V] = N * r,
        [TT_SAVED_Q_RAW] = qk_norm ? N * q : 0,
        [TT_SAVED_Q_RSTD] = qk_norm ? N * c.num_heads : 0,
        [TT_SAVED_K_RAW] = qk_norm ? N * kv : 0,
        [TT_SAVED_K_RSTD] = qk_norm ? N * c.num_kv_heads : 0,
        [TT_SAVED_Q] = N * q,
        [TT_SAVED_K] = N * kv,
        [TT_SAVED_V] = N * kv,
        [TT_SAVED_ATTN_OUT] = N * q,
        [TT_SAVED_LSE] = N * c.num_heads,
        [TT_SAVED_LORA_O] = N * r,
        [TT_SAVED_RESIDUAL_MID] = N * D,
        [TT_SAVED_MLP_RSTD] = N,
        [TT_SAVED_MLP_NORMED] = N * D,
        [TT_SAVED_LORA_GATE] = N * r,
        [TT_SAVED_LORA_UP] = N * r,
        [TT_SAVED_GATE] = mlp_rows * F,
        [TT_SAVED_UP] = mlp_rows * F,
        [TT_SAVED_GLU] = mlp_rows * F,
        [TT_SAVED_LORA_DOWN] = N * r,
    };
    const tt_slot_set fp32 = TT_SLOT(TT_SAVED_ATTN_RSTD) | TT_SLOT(TT_SAVED_Q_RSTD) | TT_SLOT(TT_SAVED_K_RSTD) |
                             TT_SLOT(TT_SAVED_LSE) | TT_SLOT(TT_SAVED_MLP_RSTD);
    for (int i = 0; i < TT_SAVED_SLOT_COUNT; i++) {
        const tt_saved_slot_info *s = &slots->slot[i];
        const int64_t got = tt_saved_slot_elements(s, &dims);
        TT_EXPECT(got == expected[i], "%s: %s has %lld elements (closed form %lld)", slots->architecture, s->name,
                  (long long)got, (long long)expected[i]);
        if (s->present)
            TT_EXPECT(s->fp32 == ((fp32 >> i) & 1u), "%s: %s is %s", slots->architecture, s->name,
                      s->fp32 ? "fp32" : "the activation dtype");
    }
    /* the cheap set: the norms, SwiGLU, and with qk_norm the per-head norms and RoPE of q and k */
    tt_slot_set cheap = TT_SLOT(TT_SAVED_ATTN_RSTD) | TT_SLOT(TT_SAVED_ATTN_NORMED) | TT_SLOT(TT_SAVED_MLP_RSTD) |
                        TT_SLOT(TT_SAVED_MLP_NORMED) | TT_SLOT(TT_SAVED_GLU);
    if (qk_norm)
        cheap |= TT_SLOT(TT_SAVED_Q) | TT_SLOT(TT_SAVED_Q_RSTD) | TT_SLOT(TT_SAVED_K) | TT_SLOT(TT_SAVED_K_RSTD);
    TT_EXPECT(tt_cheap_slots(slots) == cheap && tt_recompute_cheap_ops(&c) == cheap, "%s: the cheap set",
              slots->architecture);
}

/* Every family's table against its description: a slot for each norm its layer has (pre-norms, post-norms), the
 * q/k norms' rstd one a head or one a token as its q/k norm is, the post-norms' inputs and statistics in their halves,
 * and the MLP's slots every dense layer has. */
static void test_family(const tt_arch *arch) {
    const tt_layer_slots *slots = arch->slots;
    unsigned modules = 0;
    for (int i = 0; i < arch->linear_layer_count; i++) modules |= 1u << arch->linear_layers[i].module;
    test_invariants(slots, modules);
    const bool pre = arch->norm_placement != TT_NORM_POST, post = arch->norm_placement != TT_NORM_PRE;
    const bool qk_norm = arch->qk_norm != TT_QK_NORM_NONE;
    const tt_saved_slot_info *s = slots->slot;
    TT_EXPECT(s[TT_SAVED_ATTN_NORMED].present == pre && s[TT_SAVED_ATTN_RSTD].present == pre &&
                  s[TT_SAVED_MLP_NORMED].present == pre && s[TT_SAVED_MLP_RSTD].present == pre,
              "%s: the pre-norms' slots where it has pre-norms", arch->model_type);
    TT_EXPECT(s[TT_SAVED_ATTN_PROJ].present == post && s[TT_SAVED_ATTN_POST_RSTD].present == post &&
                  s[TT_SAVED_MLP_PROJ].present == post && s[TT_SAVED_MLP_POST_RSTD].present == post,
              "%s: the post-norms' inputs and statistics where it has post-norms", arch->model_type);
    TT_EXPECT(!post || (!s[TT_SAVED_ATTN_PROJ].mlp_half && !s[TT_SAVED_ATTN_POST_RSTD].mlp_half &&
                        s[TT_SAVED_MLP_PROJ].mlp_half && s[TT_SAVED_MLP_POST_RSTD].mlp_half &&
                        s[TT_SAVED_RESIDUAL_MID].producer == TT_SLOT_OP_POST_NORM),
              "%s: the post-norms' slots in their halves", arch->model_type);
    TT_EXPECT(s[TT_SAVED_Q_RAW].present == qk_norm && s[TT_SAVED_K_RSTD].present == qk_norm,
              "%s: q/k before their norms where it has q/k norms", arch->model_type);
    if (qk_norm) {
        const tt_slot_rows want = arch->qk_norm == TT_QK_NORM_PER_HEAD ? TT_SLOT_ROWS_Q_HEADS : TT_SLOT_ROWS_TOKENS;
        TT_EXPECT(s[TT_SAVED_Q_RSTD].rows == want &&
                      s[TT_SAVED_K_RSTD].rows ==
                          (arch->qk_norm == TT_QK_NORM_PER_HEAD ? TT_SLOT_ROWS_KV_HEADS : TT_SLOT_ROWS_TOKENS),
                  "%s: the q/k norms' rstd rows", arch->model_type);
    }
    const tt_saved_slot always[] = {TT_SAVED_Q,        TT_SAVED_K,   TT_SAVED_V,
                                    TT_SAVED_ATTN_OUT, TT_SAVED_LSE, TT_SAVED_RESIDUAL_MID};
    for (size_t i = 0; i < sizeof always / sizeof always[0]; i++)
        TT_EXPECT(s[always[i]].present, "%s: slot %d is there", arch->model_type, (int)always[i]);
    /* the MLP half: a gated MLP's intermediates, or a mixture of experts' slots, all written by its one op */
    const bool experts = arch->block == TT_BLOCK_MOE;
    const tt_saved_slot dense[] = {TT_SAVED_GATE, TT_SAVED_UP, TT_SAVED_GLU};
    for (size_t i = 0; i < sizeof dense / sizeof dense[0]; i++)
        TT_EXPECT(s[dense[i]].present == !experts, "%s: the dense MLP's slot %d where it has one", arch->model_type,
                  (int)dense[i]);
    for (int i = TT_SAVED_ROUTER_PROBS; i <= TT_SAVED_EXPERT_OUT; i++)
        TT_EXPECT(s[i].present == experts && (!experts || (s[i].producer == TT_SLOT_OP_EXPERTS && s[i].mlp_half)),
                  "%s: the experts' slot %d where it has experts, in the MLP half, from their op", arch->model_type, i);
}

int main(void) {
    test_shapes(false);
    test_shapes(true);
    for (int i = 0; i < tt_arch_family_count(); i++) test_family(tt_arch_family(i));
    return tt_test_summary("saved slots");
}
