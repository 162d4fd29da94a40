#!/usr/bin/env bash
# One command on the device: tiertrain and the PyTorch peer side by side, same random-init
# Qwen3 shapes, batch 1, same sequence length, gradient checkpointing, LM head + loss in
# 4096-token chunks. Prints a table (also table.md) and writes the results (bench.jsonl, JSON
# lines) and logs to $OUT (on the device machine) or bench/out.
#   bench/run.sh [tiertrain-binary] ["model:seq:recipe ..."]
# recipe: bf16 (like-for-like: bf16 parameters, gradients and AdamW state) or master (fp32
# master weights, gradients and AdamW state, tiertrain's default); the peer always runs bf16.
# An optional fourth field picks tiertrain's attn_implementation (auto, cudnn, flash), an optional
# fifth the memory mode, tokens joined by '+': gc (gradient checkpointing, the default; from 16k tokens with
# selective_checkpointing's default auto, so the plan may keep attention outputs in pinned memory instead of recomputing
# them: the run's plan line says so); recompute (selective_checkpointing ~: every checkpointed layer recomputes its
# attention, the plain checkpointing of earlier rows);
# hidden_states, true, legacy or disk (activation_offloading, with gradient checkpointing);
# selective (selective_checkpointing {save: [attention], offload: true}: the attention output kept in
# pinned memory, no attention recompute); tiled or tiled<N> (tiled_mlp, N shards); layer_offloading
# (the frozen base streamed); weights<N> (cpu_offloading_weights: the trainable weights of the first N layers in
# pinned memory, streamed); optimizer_cpu_offload (the whole optimizer on the CPU with overlap; use the
# master recipe: the offload keeps fp32 master weights); noclip (max_grad_norm 0); ws<N>
# (attn_workspace_limit N GiB; auto otherwise); save_on_cpu runs
# the peer alone (no checkpointing, torch.autograd.graph.save_on_cpu). The peer runs once per model,
# length, adapter and its own mode: hidden_states when the case has it, else gc (none with
# optimizer_cpu_offload). An optional sixth field: full (default), lora<r> (LoRA of rank r on all
# linear layers but the LM head (all-linear), alpha 2r, on both sides; the peer uses peft) or qlora<r> (the same on a base
# quantized to NF4 with double quantization at load; no peer: the device has no bitsandbytes, so compare
# with the lora<r> case of the same shape) or int8lora<r> (LoRA on a base stored in 8 bits at load, load_in_8bit;
# no peer either). QLoRA cases:
#   bench/run.sh build/tiertrain "qwen3-8b:16384:master:auto:gc:lora16 qwen3-8b:16384:master:auto:gc:qlora16
#     qwen3-8b:65536:master:auto:hidden_states:lora16 qwen3-8b:65536:master:auto:hidden_states:qlora16
#     llama-3-70b:32768:master:auto:hidden_states+layer_offloading:qlora16"
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
tiertrain=${1:-$here/../build/tiertrain}
cases=${2:-"qwen3-1.7b:4096:bf16 qwen3-1.7b:16384:bf16 qwen3-1.7b:65536:bf16 qwen3-0.6b:4096:bf16 qwen3-1.7b:16384:master"}
# TT_ARGS: extra key=value overrides for every tiertrain run (e.g. attn_workspace_limit=4GiB)
read -r -a extra_args <<< "${TT_ARGS:-}"
steps=${STEPS:-6}
warmup=${WARMUP:-2}
out=${OUT:-$here/out}
mkdir -p "$out"
results=$out/bench.jsonl
# the GPU each row ran on: bench/report.py divides by its dense bf16 peak
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || true)
: > "$results"
rm -f "$out"/peer-*.json
for c in $cases; do
  IFS=: read -r model seq recipe attention memory adapter <<< "$c"
  attention=${attention:-auto}
  memory=${memory:-gc}
  adapter=${adapter:-full}
  adapter_args=()
  peer_adapter_args=()
  if [[ $adapter == lora* ]]; then
    rank=${adapter#lora}
    adapter_args=(adapter=lora lora_r=$rank lora_alpha=$((2 * rank)) lora_target_linear=true)
    peer_adapter_args=(--lora "$rank")
  elif [[ $adapter == int8lora* ]]; then # LoRA on a base stored in 8 bits at load (load_in_8bit)
    rank=${adapter#int8lora}
    adapter_args=(adapter=lora load_in_8bit=true lora_r=$rank lora_alpha=$((2 * rank)) lora_target_linear=true)
  elif [[ $adapter == qlora* ]]; then
    rank=${adapter#qlora}
    adapter_args=(adapter=qlora load_in_4bit=true bnb_4bit_quant_type=nf4 bnb_4bit_use_double_quant=true lora_r=$rank
                  lora_alpha=$((2 * rank)) lora_target_linear=true)
  fi
  vocab=$(python3 -c "import json, sys; print(json.load(open(sys.argv[1]))['vocab_size'])" "$here/models/$model/config.json")
  tokens=$out/tokens-$seq-$vocab.tok
  [ -f "$tokens" ] || python3 "$here/make_tokens.py" "$tokens" "$vocab" $(( (steps + warmup + 1) * seq + 1 ))
  master=false
  [ "$recipe" = master ] && master=true
  run_dir=$out/run-$model-$seq-$recipe-$attention-$memory-$adapter
  rm -rf "$run_dir"
  memory_args=()
  peer_memory=gc
  IFS=+ read -r -a memory_tokens <<< "$memory"
  for token in "${memory_tokens[@]}"; do
    case $token in
      gc) ;;
      hidden_states|true|legacy|disk) memory_args+=(activation_offloading=$token offload_dir="$out"); [ $token = hidden_states ] && peer_memory=hidden_states ;;
      selective) memory_args+=("selective_checkpointing={save: [attention], offload: true}") ;;
      recompute) memory_args+=("selective_checkpointing=~") ;;
      tiled) memory_args+=(tiled_mlp=true) ;;
      tiled*) memory_args+=(tiled_mlp=true tiled_mlp_num_shards=${token#tiled}) ;;
      layer_offloading) memory_args+=(layer_offloading=true) ;;
      weights*) memory_args+=(cpu_offloading=true cpu_offloading_num_layers=${token#weights} cpu_offloading_weights=true cpu_offloading_activations=false) ;;
      optimizer_cpu_offload) memory_args+=(optimizer_cpu_offload=true optimizer_offload_fraction=1.0 overlap_cpu_optimizer_d2h_h2d=true); peer_memory= ;;
      noclip) memory_args+=(max_grad_norm=0) ;;
      ws*) memory_args+=(attn_workspace_limit=${token#ws}GiB) ;;
      save_on_cpu) peer_memory=save_on_cpu ;;
      *) echo "bench: unknown memory token '$token' in $c"; exit 2 ;;
    esac
  done
  if [ "$memory" != save_on_cpu ]; then
  "$tiertrain" train model_config="$here/models/$model" datasets="[$tokens]" sequence_len=$seq micro_batch_size=1 \
    max_steps=$((steps + warmup)) gradient_checkpointing=true loss_chunk_size=4096 master_weights=$master \
    attn_implementation=$attention "${memory_args[@]}" "${adapter_args[@]}" "${extra_args[@]}" \
    learning_rate=1e-5 warmup_steps=0 weight_decay=0 val_set_size=0 save_strategy=no progress=false \
    overwrite_output_dir=true output_dir="$run_dir" > "$run_dir.log" 2>&1 || { echo "tiertrain failed: $run_dir.log"; tail -20 "$run_dir.log"; continue; }
  python3 - "$run_dir/metrics.jsonl" "$model" "$seq" "$recipe" "$warmup" "$attention" "$memory" "$adapter" "$gpu" >> "$results" <<'PY'
import json, sys
path, model, seq, recipe, warmup, attention, memory, adapter, gpu = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5]), sys.argv[6], sys.argv[7], sys.argv[8], sys.argv[9]
rows = [json.loads(l) for l in open(path) if '"loss"' in l and 'eval_loss' not in l]
times = sorted(r["step_seconds"] for r in rows[warmup:])
# sequences per optimizer step (gradient_accumulation_steps through TT_ARGS): every step's targets but the masked
sequences = max(1, round(rows[-1]["tokens"] / seq))
peak = max(r.get("mem_gpu_peak_bytes", 0) for r in rows)
print(json.dumps({"who": "tiertrain", "model": model, "seq": seq, "recipe": recipe, "attention": attention,
                  "memory": memory, "adapter": adapter, "tok_s": seq * sequences / times[len(times) // 2], "peak_bytes": peak, "loss": rows[-1]["loss"],
                  "grad_norms": [r.get("grad_norm") for r in rows], "gpu": gpu,
                  "model_flops_per_token": rows[-1]["model_flops_per_token"],
                  "hardware_flops_per_token": rows[-1]["hardware_flops_per_token"]}))
PY
  grep -h "attention: \|plan: .* pinned memory instead\|tiled_mlp:\|offload copies\|disk tier\|layer_offloading:\|weight offload\|gradient ring\|CPU AdamW\|optimizer offload" "$run_dir.log" || true
  fi
  peer_out=$out/peer-$model-$seq-$peer_memory-$adapter
  if [ "${PEER:-1}" != 0 ] && [ "$recipe" = bf16 ] && [ -n "$peer_memory" ] && [[ $adapter != qlora* ]] && [[ $adapter != int8lora* ]] && [ ! -f "$peer_out.json" ]; then
    python3 "$here/peer.py" --model "$here/models/$model" --seq "$seq" --steps "$steps" --warmup "$warmup" \
      --memory "$peer_memory" "${peer_adapter_args[@]}" > "$peer_out.json" 2> "$peer_out.log" || { echo "peer failed"; tail -5 "$peer_out.log"; }
    python3 -c "import json,sys; d=json.load(open(sys.argv[1])); d.update(model=sys.argv[2], recipe='bf16', gpu=sys.argv[3]); print(json.dumps(d))" \
      "$peer_out.json" "$model" "$gpu" >> "$results" 2>/dev/null || true
  fi
done
# The table (markdown) goes to the terminal and to $out/table.md, for docs/benchmarks.md.
python3 "$here/report.py" "$results" "$here/models" | tee "$out/table.md"
