/* MFU's and HFU's FLOP counts (train/flops.h) against the field's formula written out by hand for the tiny Llama:
 * 6 x its matrices (4 x a frozen one) + 3 x the causal attention forward for the model, and for the hardware half an
 * attention forward more (the backward's score recompute) and, with checkpointing, each recomputed layer's q, k, v,
 * o_proj, gate and up GEMMs, the adapters' down and up projections and the attention forward again; and the GPU
 * peaks MFU divides by. */
#include <math.h>
#include <string.h>

#include "memory/plan.h"
#include "test_backend.h"
#include "test_util.h"
#include "tiny_model.h"
#include "train/flops.h"
#include "train/model_setup.h"

static const int64_t B = 2, T = 7;

static tt_step_flops flops_of(const tt_model_config *model, tt_slot_set recompute, const tt_trainable_spec *spec) {
    tt_model_config copy = *model, *config = &copy; /* the state takes it */
    tt_plan plan;
    memset(&plan, 0, sizeof plan);
    plan.num_layers = config->num_layers;
    plan.layers = calloc((size_t)config->num_layers, sizeof(tt_layer_plan));
    for (int64_t l = 0; l < config->num_layers; l++) {
        plan.layers[l].recompute = recompute;
        plan.layers[l].saved_activation_tier = TT_TIER_HOST;
        plan.layers[l].layer_input_tier = TT_TIER_HOST;
    }
    plan.compute_tier = TT_TIER_HOST;
    plan.offload_ring = 2;
    plan.saved_ring = 1;
    plan.micro_batch = B;
    plan.seq_len = T;
    plan.loss_chunk = B * T;
    plan.precision = (tt_precision){.activation = TT_F32, .gradient = TT_F32, .moment = TT_F32, .master = false};
    plan.activation_bytes = plan.weight_bytes = plan.gradient_bytes = plan.moment_bytes = 4;
    tt_plan_tile_mlp(&plan, 1);
    tt_model_state s;
    tt_model_state_init_trainable(&s, config, &plan, spec, tt_test_cpu_backend(), 0);
    const tt_step_flops f = tt_step_flops_of(&s.config, &s.params, &s.plan);
    tt_model_state_free(&s);
    return f;
}

static bool near(double a, double b) { return fabs(a - b) <= 1e-9 * fabs(b); }

int main(void) {
    const tt_model_config c = tt_test_tiny_family("llama"); /* untied, attention biases, head_dim 6 */
    const double D = (double)c.hidden_size, F = (double)c.intermediate_size, V = (double)c.vocab_size;
    const double q = (double)(c.num_heads * c.head_dim), kv = (double)(c.num_kv_heads * c.head_dim);
    const double L = (double)c.num_layers;
    const double q_k_v = D * (q + 2 * kv), o = q * D, gate_up = 2 * D * F, down = F * D;
    const double layer_matrices = q_k_v + o + gate_up + down;
    /* a query of 7 causal tokens sees (7 + 1) / 2 keys on average: QK^T and PV, 2 FLOPs a multiply-add */
    const double attention = L * 2 * 2 * ((T + 1) / 2.0) * (double)c.head_dim * (double)c.num_heads;

    const tt_step_flops full = flops_of(&c, TT_RECOMPUTE_NOTHING, NULL);
    const double model = 6 * (L * layer_matrices + V * D) + 3 * attention;
    TT_EXPECT(near(full.model_per_token, model), "full fine-tune: model FLOPs %.1f, expected %.1f",
              full.model_per_token, model);
    TT_EXPECT(near(full.hardware_per_token, model + 0.5 * attention),
              "nothing recomputed: the hardware adds the backward's score product only (%.1f)",
              full.hardware_per_token);

    /* full checkpointing recomputes every layer's forward but down_proj (its output is no saved slot) */
    const tt_step_flops checkpointed = flops_of(&c, TT_RECOMPUTE_EVERYTHING, NULL);
    TT_EXPECT(near(checkpointed.model_per_token, model), "checkpointing leaves the model FLOPs as they are");
    const double recompute = L * 2 * (q_k_v + o + gate_up) + attention;
    TT_EXPECT(near(checkpointed.hardware_per_token, model + 0.5 * attention + recompute),
              "checkpointing: hardware FLOPs %.1f, expected %.1f", checkpointed.hardware_per_token,
              model + 0.5 * attention + recompute);
    const tt_step_flops selective = flops_of(&c, TT_RECOMPUTE_ALL_BUT_ATTENTION, NULL);
    TT_EXPECT(near(selective.hardware_per_token, model + 0.5 * attention + recompute - attention),
              "selective checkpointing keeps the attention: no attention forward again");

    /* LoRA rank 3 on q and v: the base (and the LM head) frozen, 4 x; the adapters 6 x; recomputed, q and v's
     * adapters run their down and up projections again */
    const tt_trainable_spec spec = {
        .lora_rank = 3, .lora_alpha = 6, .lora_targets = (1u << TT_LORA_Q) | (1u << TT_LORA_V)};
    const double r = 3, adapters = r * (D + q) + r * (D + kv);
    const tt_step_flops lora = flops_of(&c, TT_RECOMPUTE_NOTHING, &spec);
    const double lora_model = 4 * (L * layer_matrices + V * D) + 6 * L * adapters + 3 * attention;
    TT_EXPECT(near(lora.model_per_token, lora_model), "LoRA: model FLOPs %.1f, expected %.1f", lora.model_per_token,
              lora_model);
    const tt_step_flops lora_checkpointed = flops_of(&c, TT_RECOMPUTE_EVERYTHING, &spec);
    TT_EXPECT(near(lora_checkpointed.hardware_per_token, lora_model + 0.5 * attention + recompute + L * 2 * adapters),
              "LoRA, checkpointed: the adapters' projections recomputed too (%.1f)",
              lora_checkpointed.hardware_per_token);

    /* a tied LM head is the embedding's matrix, counted once a token */
    const tt_model_config tied = tt_test_tiny_family("qwen3");
    const tt_step_flops qwen3 = flops_of(&tied, TT_RECOMPUTE_NOTHING, NULL);
    const double qd = (double)(tied.num_heads * tied.head_dim), kd = (double)(tied.num_kv_heads * tied.head_dim);
    const double qwen3_attention = L * 2 * 2 * ((T + 1) / 2.0) * (double)tied.head_dim * (double)tied.num_heads;
    const double qwen3_model = 6 * (L * (D * (qd + 2 * kd) + qd * D + 3 * D * F) + V * D) + 3 * qwen3_attention;
    TT_EXPECT(near(qwen3.model_per_token, qwen3_model), "tied head: model FLOPs %.1f, expected %.1f",
              qwen3.model_per_token, qwen3_model);

    TT_EXPECT(tt_dense_bf16_peak_flops("cuda: NVIDIA H200, 139.80 GiB") == 989e12, "H200: 989 TFLOP/s");
    TT_EXPECT(tt_dense_bf16_peak_flops("cuda: NVIDIA H100 80GB HBM3, 79.19 GiB") == 989e12, "H100 SXM: 989 TFLOP/s");
    TT_EXPECT(tt_dense_bf16_peak_flops("cuda: NVIDIA H100 PCIe, 79.19 GiB") == 756e12, "H100 PCIe: 756 TFLOP/s");
    TT_EXPECT(tt_dense_bf16_peak_flops("cuda: NVIDIA A100-SXM4-80GB") == 312e12, "A100: 312 TFLOP/s");
    TT_EXPECT(tt_dense_bf16_peak_flops("cpu: 2 threads") == 0, "the CPU: no peak, no MFU");
    TT_EXPECT(tt_dense_bf16_peak_flops("cuda: NVIDIA Unknown 9000") == 0, "a GPU not in the table: no MFU");
    return tt_test_summary("flops");
}
