#!/usr/bin/env bash
# Several GPUs against one: tok/s (median of the steps after the first) and GPU peak per rank of one row per case.
#   bash bench/data_parallel.sh TIERTRAIN "CASE ..."    CASE: gpus:model:sequence_len[:key=value,key=value...]
# gpus 1 runs one process; more start one process a GPU with torchrun's variables. model: a directory of
# bench/models. Random init, random tokens (bench/make_tokens.py), gradient checkpointing (with selective_checkpointing's
# default auto: from 16k tokens the plan may keep attention outputs in pinned memory; add selective_checkpointing=~
# to a case for plain recompute), loss chunks of 4096,
# save_strategy no. RUN_TIMEOUT (default 900) is each run's limit in seconds. Examples (docs/benchmarks.md):
#   bash bench/data_parallel.sh build/tiertrain "1:qwen3-1.7b:16384 4:qwen3-1.7b:16384:zero_stage=1"
#   bash bench/data_parallel.sh build/tiertrain \
#     "4:qwen3-8b:131072:adapter=lora,lora_r=16,lora_alpha=32,lora_target_linear=true,activation_offloading=hidden_states,sequence_parallel_degree=4"
# Logs under $OUT (the device machine's) or ./bench-data-parallel. "process GiB" is the most GPU memory nvidia-smi saw
# one rank's process hold (sampled every 0.5 s): the size table's peak plus what it does not price (the CUDA context,
# the libraries' handles, NCCL's buffers).
set -uo pipefail
tiertrain=$(realpath "${1:?usage: bench/data_parallel.sh TIERTRAIN \"CASE ...\"}")
source_dir=$(cd "$(dirname "$0")/.." && pwd)
work=${OUT:-$PWD}/bench-data-parallel
mkdir -p "$work" && cd "$work"
STEPS=${STEPS:-5}
run_timeout=${RUN_TIMEOUT:-900}
port=29900
printf '%-70s %10s %12s %12s %s\n' case tok/s "peak GiB" "process GiB" loss
for case in $2; do
  IFS=: read -r gpus model seq extra <<< "$case"
  extra_args=()
  [ -n "${extra:-}" ] && IFS=, read -r -a extra_args <<< "$extra"
  sp=1
  for kv in "${extra_args[@]}"; do [[ $kv == sequence_parallel_degree=* ]] && sp=${kv#*=}; done
  tokens=tok-$seq-$gpus.tok
  [ -f "$tokens" ] || python3 "$source_dir/bench/make_tokens.py" "$tokens" 151936 $(((STEPS + 2) * gpus / sp * seq + 1))
  out=run-$(echo "$case" | tr ':,=/' '____')
  rm -rf "$out"
  args=(model_config="$source_dir/bench/models/$model" "datasets=[$tokens]" sequence_len="$seq" micro_batch_size=1
        max_steps="$STEPS" gradient_checkpointing=true loss_chunk_size=4096 learning_rate=1e-5 warmup_steps=0
        val_set_size=0 save_strategy=no progress=false device=cuda output_dir="$out" "${extra_args[@]}")
  nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits -lms 500 -f "$out.smi" 2> /dev/null &
  sampler=$!
  if [ "$gpus" -eq 1 ]; then
    timeout "$run_timeout" "$tiertrain" train "${args[@]}" > "$out.0.log" 2>&1
  else
    port=$((port + 2))
    pids=()
    for ((r = 0; r < gpus; r++)); do
      RANK=$r LOCAL_RANK=$r WORLD_SIZE=$gpus LOCAL_WORLD_SIZE=$gpus MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
        timeout "$run_timeout" "$tiertrain" train "${args[@]}" > "$out.$r.log" 2>&1 &
      pids+=($!)
    done
    wait "${pids[@]}"
  fi
  kill "$sampler" 2> /dev/null; wait "$sampler" 2> /dev/null
  python3 - "$case" "$out/metrics.jsonl" "$out.smi" <<'PY'
import json, sys
case, path, smi = sys.argv[1], sys.argv[2], sys.argv[3]
process = 0.0
try:
    for line in open(smi):
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[1].isdigit():
            process = max(process, int(parts[1]) / 1024)
except OSError:
    pass
try:
    rows = [json.loads(l) for l in open(path) if '"loss"' in l]
except OSError:
    rows = []
if not rows:
    print(f"{case:70s} {'failed':>10s}")
    sys.exit(0)
t = sorted(r["tok_per_s"] for r in rows[1:]) or [rows[0]["tok_per_s"]]
peak = max(r.get("mem_gpu_peak_bytes", 0) for r in rows) / 2**30
print(f"{case:70s} {t[len(t) // 2]:10.0f} {peak:12.2f} {process:12.2f} {rows[-1]['loss']:.6f}")
PY
done
