#!/usr/bin/env bash
# `tiertrain plan` of two builds, side by side, over models x memory modes x sequence lengths: for a
# refactor that must not move a byte of the plan (the size table, the per-layer policy, the spill).
# Prints each plan that differs (the first lines of the diff) and a count; exits 1 when any does.
# The device line is left out (it names how the binary was built). Extra key=value overrides for
# every plan come from PLAN_DIFF_OVERRIDES (on a GPU machine: PLAN_DIFF_OVERRIDES="device=cuda"); PLAN_DIFF_MODELS
# (config.json paths, space-separated) replaces the model list, PLAN_DIFF_SEQ the sequence lengths.
#   tools/plan_diff.sh OLD_TIERTRAIN NEW_TIERTRAIN [SOURCE_DIR]
set -uo pipefail
old=${1:?usage: tools/plan_diff.sh OLD_TIERTRAIN NEW_TIERTRAIN [SOURCE_DIR]}
new=${2:?usage: tools/plan_diff.sh OLD_TIERTRAIN NEW_TIERTRAIN [SOURCE_DIR]}
source_dir=$(cd "${3:-$(dirname "$0")/..}" && pwd)
cd "$source_dir"
read -r -a extra <<< "${PLAN_DIFF_OVERRIDES:-}"
offload_dir=$(mktemp -d)
trap 'rm -rf "$offload_dir"' EXIT

models=(bench/models/qwen3-0.6b/config.json bench/models/qwen3-1.7b/config.json bench/models/qwen3-8b/config.json
        configs/demo-model/config.json tests/fixtures/tiny_qwen3/config.json tests/fixtures/tiny_llama/config.json
        tests/fixtures/tiny_qwen2/config.json)
[ -n "${PLAN_DIFF_MODELS:-}" ] && read -r -a models <<< "$PLAN_DIFF_MODELS"
read -r -a lengths <<< "${PLAN_DIFF_SEQ:-512 4096}"
modes=("gradient_checkpointing=false"
       "gradient_checkpointing=true"
       "gradient_checkpointing=true every_n_layers=2"
       "activation_offloading=true"
       "gradient_checkpointing=true activation_offloading=hidden_states"
       "gradient_checkpointing=true activation_offloading=legacy"
       "gradient_checkpointing=true activation_offloading=disk"
       "gradient_checkpointing=true activation_offloading=disk host_memory_budget=2GiB"
       "gradient_checkpointing=true selective_checkpointing={save: [attention], offload: true}"
       "gradient_checkpointing=true optimizer_cpu_offload=true optimizer_offload_fraction=0.5"
       "gradient_checkpointing=true optimizer_cpu_offload=true optimizer_offload_fraction=1.0 overlap_cpu_optimizer_d2h_h2d=true"
       "adapter=lora lora_r=16 lora_alpha=32 lora_target_linear=true gradient_checkpointing=true layer_offloading=true"
       "activation_offloading=true adapter=lora lora_r=8 lora_alpha=16 lora_target_linear=true"
       "gradient_checkpointing=true tiled_mlp=true"
       "cpu_offloading=true cpu_offloading_num_layers=2"
       "cpu_offloading=true cpu_offloading_weights=true cpu_offloading_num_layers=2"
       "gradient_checkpointing=true host_memory_budget=4GiB"
       "host_memory_budget=6GiB"
       "gradient_checkpointing=true micro_batch_size=2 loss_chunk_size=256"
       "attn_workspace_limit=1048576")
compared=0
differ=0
refused=0
for model in "${models[@]}"; do
  for mode in "${modes[@]}"; do
    for seq in "${lengths[@]}"; do
      args=(model_config="$model" sequence_len=$seq offload_dir="$offload_dir")
      read -r -a mode_args <<< "$mode"
      # selective_checkpointing's flow value holds spaces: pass the mode as one argument when it has braces
      [[ $mode == *"{"* ]] && mode_args=("${mode%% selective*}" "selective${mode#* selective}")
      a=$("$old" plan --config configs/demo.yaml "${args[@]}" "${mode_args[@]}" "${extra[@]}" 2>&1 | grep -v '^device:')
      b=$("$new" plan --config configs/demo.yaml "${args[@]}" "${mode_args[@]}" "${extra[@]}" 2>&1 | grep -v '^device:')
      compared=$((compared + 1))
      grep -q "error" <<< "$b" && refused=$((refused + 1))
      if [ "$a" != "$b" ]; then
        differ=$((differ + 1))
        echo "DIFFERS: $model sequence_len=$seq $mode"
        diff <(echo "$a") <(echo "$b") | head -12
      fi
    done
  done
done
echo "$compared plans compared, $differ differ ($refused refused by both with the same error)"
[ "$differ" -eq 0 ]
