#!/usr/bin/env bash
# tiertrain plan prices a GPU run on a machine without one: `plan gpu=h200` (the CUDA backend's size model) prints the
# plan the CUDA backend printed on an H200 for the same configurations (tests/fixtures/plans/h200_*.txt, `tiertrain
# plan` there with host_memory_budget=64GiB; the device and attention lines aside): per-layer placement, the size
# table, the budget. Runs the CUDA backend's shapes cuDNN would size are refused by name, and so are an unknown GPU
# and gpu= with train. Skipped where tiertrain was built without CUDA.
# Arguments: tiertrain binary, source dir, scratch dir.
set -uo pipefail
tiertrain=$1; source_dir=$2; scratch=$3
rm -rf "$scratch"; mkdir -p "$scratch"; cd "$scratch"
source "$source_dir/tests/shell_fixtures.sh"
echo hi > x.txt
"$tiertrain" tokenize --bytes -o x.tok x.txt > /dev/null
models=$source_dir/bench/models
"$tiertrain" plan model_config="$models/qwen3-0.6b/config.json" datasets=[x.tok] gpu=h200 > probe.txt 2>&1
if grep -q "built without CUDA" probe.txt; then
  echo "offline_plan: skipped: this tiertrain was built without CUDA"
  exit 77
fi
cases=("qwen3-1.7b sequence_len=16384 gradient_checkpointing=true"
       "qwen3-1.7b sequence_len=65536 gradient_checkpointing=true activation_offloading=true"
       "qwen3-8b sequence_len=16384 gradient_checkpointing=true adapter=lora lora_r=16 lora_alpha=32 lora_target_linear=true")
i=0
for c in "${cases[@]}"; do
  i=$((i + 1))
  read -r -a args <<< "$c"
  "$tiertrain" plan model_config="$models/${args[0]}/config.json" datasets=[x.tok] host_memory_budget=64GiB gpu=h200 \
    "${args[@]:1}" > "offline_$i.txt" 2>&1
  check "case $i ($c): the offline plan succeeds" test $? -eq 0
  check "... names the GPU it priced" grep -q "^device: cuda, priced without a GPU: NVIDIA H200, 139.80 GiB" "offline_$i.txt"
  check "... and is the plan the H200 printed" \
    diff <(grep -v "^device\|^attention\|^flops" "$source_dir/tests/fixtures/plans/h200_$i.txt") \
         <(grep -v "^device\|^attention\|^flops" "offline_$i.txt")
done
"$tiertrain" plan model_config="$models/qwen3-0.6b/config.json" datasets=[x.tok] device=cuda gpu_memory_budget=3GiB \
  > budget.txt 2>&1
check "device: cuda with gpu_memory_budget prices without a GPU too" \
  grep -q "gpu budget: 3.00 GiB (3221225472 bytes)" budget.txt
"$tiertrain" plan model_config="$source_dir/tests/fixtures/tiny_gemma2/config.json" datasets=[x.tok] gpu=h200 \
  > cudnn.txt 2>&1
check "a shape only cuDNN sizes is refused, not guessed" grep -q "runs cuDNN's fused kernels, whose workspaces" cudnn.txt
"$tiertrain" plan model_config="$models/qwen3-0.6b/config.json" datasets=[x.tok] gpu=a100 > unknown.txt 2>&1
check "an unknown GPU is refused with the known ones" grep -q "gpu: 'a100' is not a GPU tiertrain knows; use one of h200" unknown.txt
"$tiertrain" train model_config="$models/qwen3-0.6b/config.json" datasets=[x.tok] gpu=h200 > train.txt 2>&1
check "train refuses gpu=" grep -q "gpu: h200 prices a run for that GPU with tiertrain plan" train.txt

echo "offline_plan: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
