#!/usr/bin/env bash
# optimizer: adamw_bnb_8bit end to end through the command line: plan shows the smaller optimizer state, training
# lowers the loss and logs every step, checkpoints hold the quantized state, a resumed run ends bit-identical to one
# that never stopped (full fine-tuning, LoRA, two processes where MPI is built in), its names run the same bits, a
# plan that moves activations or weights changes nothing, and what it does not run with is refused naming the key.
# Arguments: tiertrain binary, source dir, scratch dir. TT_TEST_OVERRIDES adds key=value overrides to every run.
set -uo pipefail
tiertrain=$1; source_dir=$2; scratch=$3
read -r -a overrides <<< "${TT_TEST_OVERRIDES:-}" # `make test-gpu` adds device=cuda
rm -rf "$scratch"; mkdir -p "$scratch"; cd "$scratch"
source "$source_dir/tests/shell_fixtures.sh"
# bytes of the size table's "optimizer state" row (its first column) in a plan's output
state_bytes() {
  awk '/^  optimizer state/ { v = $3; u = $4; m = 1
    if (u == "KiB") m = 1024; else if (u == "MiB") m = 1048576; else if (u == "GiB") m = 1073741824
    printf "%d\n", v * m; exit }' "$1"
}
differ() { ! cmp -s "$1" "$2"; }
losses() { grep -o '"loss": [0-9.e+-]*' "$1" | awk '{ print $2 }'; }

# 8-bit moments: q_proj and o_proj (4096 elements), the MLP's (8704), the embedding and the LM head (16448: 64 blocks
# and a short one); fp32 moments: k_proj and v_proj (2048) and the norms
mkdir -p model
cat > model/config.json <<'JSON'
{"model_type": "qwen3", "vocab_size": 257, "hidden_size": 64, "intermediate_size": 136, "num_hidden_layers": 2,
 "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "max_position_embeddings": 128,
 "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "tie_word_embeddings": false, "torch_dtype": "float32"}
JSON
head -c 20000 "$source_dir/README.md" > a.txt
cat "$source_dir"/src/core/*.c | head -c 20000 > b.txt
"$tiertrain" tokenize --bytes -o corpus.tok a.txt b.txt > /dev/null
check "tokenize writes a token file" test -s corpus.tok

cat > run.yaml <<'YAML'
model_config: model/config.json
initializer_range: 0.1
datasets: [corpus.tok]
sequence_len: 32
micro_batch_size: 2
gradient_accumulation_steps: 2
learning_rate: 3.0e-3
warmup_steps: 2
max_steps: 8
save_steps: 4
weight_decay: 0.1
max_grad_norm: 1.0
optimizer: adamw_bnb_8bit
output_dir: out_a
YAML

"$tiertrain" plan --config run.yaml "${overrides[@]}" > plan_8bit.txt 2>&1
check "plan succeeds" test $? -eq 0
check "plan names the 8-bit AdamW and its tensors" grep -q "8-bit AdamW: 12 of 25 trainable tensors" plan_8bit.txt
"$tiertrain" plan --config run.yaml "${overrides[@]}" optimizer=adamw_torch > plan_fp32.txt 2>&1
eight=$(state_bytes plan_8bit.txt); fp32=$(state_bytes plan_fp32.txt)
check "plan: the 8-bit optimizer state ($eight bytes) is under a third of fp32 AdamW's ($fp32)" \
  test -n "$eight" -a -n "$fp32" -a $((eight * 3)) -lt "$fp32"

"$tiertrain" train --config run.yaml "${overrides[@]}" > train_a.txt 2>&1
check "training succeeds" test $? -eq 0
check "metrics has 8 steps" test "$(grep -c '"loss"' out_a/metrics.jsonl)" -eq 8
first=$(losses out_a/metrics.jsonl | head -1); last=$(losses out_a/metrics.jsonl | tail -1)
check "the loss goes down ($first -> $last)" awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 0.3) }'
check "the measured optimizer state is the estimate" \
  awk '/^  optimizer state/ { found = 1; same = $3 " " $4 == $5 " " $6 } END { exit !(found && same) }' train_a.txt
header=$(head -c 8192 out_a/checkpoint-4/optimizer.safetensors | tr -d '\0')
check "the checkpoint holds the 8-bit codes" grep -q '"exp_avg_codes.model.layers.0.mlp.up_proj.weight":{"dtype":"U8"' <<< "$header"
check "... their absmax per 256-element block" grep -q '"exp_avg_sq_absmax.model.embed_tokens.weight":{"dtype":"F32","shape":\[65\]' <<< "$header"
check "... the small tensors' fp32 moments" grep -q '"exp_avg.model.layers.0.self_attn.k_proj.weight":{"dtype":"F32"' <<< "$header"
check "... the maps" grep -q '"quantization_map.exp_avg":{"dtype":"F32","shape":\[256\]' <<< "$header"

# Resume: a run restarted from checkpoint-4 ends with the same bits as one that never stopped.
mkdir -p out_b && cp -r out_a/checkpoint-4 out_b/
"$tiertrain" train --config run.yaml "${overrides[@]}" output_dir=out_b --resume > train_b.txt 2>&1
check "resumed training succeeds" test $? -eq 0
check "resumed final weights are bit-identical" cmp -s out_a/model.safetensors out_b/model.safetensors
check "resumed optimizer state is bit-identical" \
  cmp -s out_a/checkpoint-8/optimizer.safetensors out_b/checkpoint-8/optimizer.safetensors
check "resumed losses are bit-identical" cmp -s <(losses out_a/metrics.jsonl | tail -4) <(losses out_b/metrics.jsonl | tail -4)

# The other names run the same optimizer; AdamW's fp32 moments give other bits.
for name in adamw_8bit paged_adamw_8bit; do
  "$tiertrain" train --config run.yaml "${overrides[@]}" optimizer=$name output_dir=out_$name > train_$name.txt 2>&1
  check "optimizer: $name trains" test $? -eq 0
  check "optimizer: $name has the bits of adamw_bnb_8bit" cmp -s out_a/model.safetensors out_$name/model.safetensors
done
"$tiertrain" train --config run.yaml "${overrides[@]}" optimizer=adamw_torch save_steps=0 output_dir=out_torch > train_torch.txt 2>&1
check "optimizer: adamw_torch trains" test $? -eq 0
check "... to other weights than the 8-bit AdamW" differ out_a/model.safetensors out_torch/model.safetensors

# Plans that keep activations and weights elsewhere change no bit of the update.
for mode in "gradient_checkpointing=true" \
  "cpu_offloading=true;cpu_offloading_num_layers=1;cpu_offloading_weights=true;cpu_offloading_activations=false"; do
  IFS=';' read -r -a mode_args <<< "$mode"
  name=$(echo "$mode" | tr -c 'a-z0-9\n' '_' | cut -c1-60)
  "$tiertrain" train --config run.yaml "${overrides[@]}" save_steps=0 output_dir="out_$name" "${mode_args[@]}" > "train_$name.txt" 2>&1
  check "$mode: training succeeds" test $? -eq 0
  check "$mode: weights are bit-identical" cmp -s out_a/model.safetensors "out_$name/model.safetensors"
done

# LoRA (rank 64: lora_A of the 64-wide layers has 4096 elements, 8-bit moments): a resume continues bit for bit.
lora="adapter=lora;lora_r=64;lora_alpha=16;lora_target_linear=true"
IFS=';' read -r -a lora_args <<< "$lora"
"$tiertrain" train --config run.yaml "${overrides[@]}" "${lora_args[@]}" output_dir=out_lora > train_lora.txt 2>&1
check "LoRA trains" test $? -eq 0
check "LoRA: the checkpoint holds 8-bit codes" grep -aq 'exp_avg_codes.base_model' out_lora/checkpoint-4/optimizer.safetensors
mkdir -p out_lora_b && cp -r out_lora/checkpoint-4 out_lora_b/
"$tiertrain" train --config run.yaml "${overrides[@]}" "${lora_args[@]}" output_dir=out_lora_b --resume > train_lora_b.txt 2>&1
check "LoRA: resumed training succeeds" test $? -eq 0
check "LoRA: resumed adapters are bit-identical" \
  cmp -s out_lora/adapter_model.safetensors out_lora_b/adapter_model.safetensors

# Data parallel (two processes through MPI, each keeping the whole 8-bit state): a resume continues bit for bit.
# (mpirun's processes train on the CPU backend: GPUs run one process a GPU with NCCL, tests/gpu/data_parallel.sh)
if command -v mpirun > /dev/null && ldd "$tiertrain" | grep -q libmpi && [[ " ${overrides[*]} " != *" device=cuda "* ]]; then
  mpi() { ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0 timeout 300 mpirun --allow-run-as-root \
    --oversubscribe -np 2 "$tiertrain" "$@"; }
  mpi train --config run.yaml output_dir=out_dp > train_dp.txt 2>&1
  check "two processes train" test $? -eq 0
  mkdir -p out_dp_b && cp -r out_dp/checkpoint-4 out_dp_b/
  mpi train --config run.yaml output_dir=out_dp_b --resume > train_dp_b.txt 2>&1
  check "two processes resume" test $? -eq 0
  check "two processes: resumed weights are bit-identical" cmp -s out_dp/model.safetensors out_dp_b/model.safetensors
  check "two processes: resumed optimizer state is bit-identical" \
    cmp -s out_dp/checkpoint-8/optimizer.safetensors out_dp_b/checkpoint-8/optimizer.safetensors
fi

# A checkpoint resumes only with the optimizer that wrote it.
mkdir -p out_mixed && cp -r out_a/checkpoint-4 out_mixed/
"$tiertrain" train --config run.yaml "${overrides[@]}" optimizer=adamw_torch output_dir=out_mixed --resume > train_mixed.txt 2>&1
check "an 8-bit checkpoint under adamw_torch is refused" test $? -ne 0
check "... naming the optimizer it was saved with" grep -q "optimizer: adamw_bnb_8bit" train_mixed.txt
mkdir -p out_mixed2 && cp -r out_torch/checkpoint-8 out_mixed2/
"$tiertrain" train --config run.yaml "${overrides[@]}" output_dir=out_mixed2 --resume > train_mixed2.txt 2>&1
check "an fp32 AdamW checkpoint under adamw_bnb_8bit is refused" test $? -ne 0
check "... naming the optimizer it was saved with" grep -q "saved with optimizer: adamw_torch" train_mixed2.txt

# What the 8-bit AdamW does not run with is refused, naming the keys; never a silent fp32 AdamW.
"$tiertrain" train --config run.yaml "${overrides[@]}" optimizer_cpu_offload=true master_weights=true output_dir=out_r1 > refuse_offload.txt 2>&1
check "optimizer_cpu_offload is refused" test $? -ne 0
check "... naming both keys" grep -q "optimizer: adamw_bnb_8bit and optimizer_cpu_offload" refuse_offload.txt
"$tiertrain" train --config run.yaml "${overrides[@]}" zero_stage=1 output_dir=out_r2 > refuse_zero.txt 2>&1
check "zero_stage is refused" test $? -ne 0
check "... naming both keys" grep -q "optimizer: adamw_bnb_8bit and zero_stage: 1" refuse_zero.txt
"$tiertrain" train --config run.yaml "${overrides[@]}" optimizer=paged_lion_8bit output_dir=out_r3 > refuse_lion.txt 2>&1
check "bitsandbytes' Lion is refused" test $? -ne 0
check "... with what to use" grep -q "adamw_bnb_8bit for bitsandbytes' 8-bit AdamW" refuse_lion.txt

echo "adamw_8bit_cli: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
