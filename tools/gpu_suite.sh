#!/usr/bin/env bash
# The GPU suite (`make test-gpu`) on built binaries: every test_gpu_* program against the CPU
# reference, then the CLI suite on the GPU in both recipes (fp32 master weights; bf16 parameters
# and AdamW state). Each part's log goes to LOG_DIR (default: $OUT on the device machine, else
# the build dir); a summary line per part is printed last.
#   tools/gpu_suite.sh BUILD_DIR [SOURCE_DIR] [part ...]   parts: kernels attention cudnn_attention
#   model optimizer_offload adamw_8bit quant4 cli cli-bf16 adamw_8bit_cli inference data_parallel (default: all; data_parallel needs two GPUs or more and
#   is skipped otherwise)
set -uo pipefail
build=$(cd "${1:?usage: tools/gpu_suite.sh BUILD_DIR [SOURCE_DIR] [part ...]}" && pwd)
source_dir=$(cd "${2:-$(dirname "$0")/..}" && pwd)
shift $(( $# >= 2 ? 2 : 1 ))
parts=("$@")
[ ${#parts[@]} -eq 0 ] && parts=(kernels attention cudnn_attention model optimizer_offload adamw_8bit quant4 cli cli-bf16 adamw_8bit_cli inference data_parallel)
log_dir=${LOG_DIR:-${OUT:-$build}}
mkdir -p "$log_dir"
summary=()
failed=0
for part in "${parts[@]}"; do
  log=$log_dir/gpu-$part.log
  start=$(date +%s)
  case $part in
    cli) TT_TEST_OVERRIDES="device=cuda" bash "$source_dir/tests/test_train_cli.sh" "$build/tiertrain" "$source_dir" \
           "$build/gpu-cli" > "$log" 2>&1 ;;
    cli-bf16) TT_TEST_OVERRIDES="device=cuda master_weights=false" bash "$source_dir/tests/test_train_cli.sh" \
           "$build/tiertrain" "$source_dir" "$build/gpu-cli-bf16" > "$log" 2>&1 ;;
    adamw_8bit_cli) TT_TEST_OVERRIDES="device=cuda" bash "$source_dir/tests/test_adamw_8bit_cli.sh" "$build/tiertrain" \
           "$source_dir" "$build/gpu-adamw-8bit-cli" > "$log" 2>&1 ;;
    inference) TT_TEST_OVERRIDES="device=cuda" bash "$source_dir/tests/test_inference_cli.sh" "$build/tiertrain" \
           "$source_dir" "$build/gpu-inference" > "$log" 2>&1 ;;
    data_parallel) bash "$source_dir/tests/gpu/data_parallel.sh" "$build/tiertrain" "$source_dir" \
           "$build/gpu-data-parallel" > "$log" 2>&1 ;;
    *) "$build/test_gpu_$part" "$source_dir" --quick > "$log" 2>&1 ;;
  esac
  status=$?
  [ $status -eq 77 ] && status=0 # skipped: it says why
  [ $status -ne 0 ] && failed=1
  summary+=("$(printf '%-18s exit %d  %4ds  %s' "$part" "$status" $(( $(date +%s) - start )) "$(grep -E 'passed|failed|checks' "$log" | tail -1)")")
  [ $status -ne 0 ] && { echo "== $part failed, last lines of $log:"; tail -25 "$log"; }
done
printf '%s\n' "${summary[@]}"
exit $failed
