#!/usr/bin/env bash
# End to end through the command line: tokenize, plan, train with checkpoints, resume
# bit-identically, gradient checkpointing bit-identical, NaN stops cleanly.
# Arguments: tiertrain binary, source dir, scratch dir. TT_TEST_OVERRIDES adds key=value overrides
# to every run (`make test-gpu` runs this with device=cuda, with and without master weights).
set -uo pipefail
tiertrain=$1; source_dir=$2; scratch=$3
read -r -a overrides <<< "${TT_TEST_OVERRIDES:-}"
rm -rf "$scratch"; mkdir -p "$scratch"; cd "$scratch"
passed=0; failed=0
check() { # description, command...
  local what=$1; shift
  if "$@"; then passed=$((passed + 1)); return; fi
  failed=$((failed + 1)); echo "FAIL: $what" >&2
  # the output of the last run, which is what a failure is usually about
  local last; last=$(ls -t -- *.txt 2>/dev/null | head -1)
  [ -n "$last" ] && { echo "---- tail of $last" >&2; tail -8 "$last" >&2; }
}

# train_mode PREFIX "key=value;key=value..." REFERENCE: trains run.yaml with those keys into
# out_<name> (name: PREFIX and the keys, in $name afterwards), checks that it succeeds and that its
# weights equal REFERENCE/model.safetensors bit for bit.
train_mode() {
  local prefix=$1 mode=$2 reference=$3 mode_args
  name=${prefix}_$(echo "$mode" | tr -c 'a-z0-9\n' '_' | cut -c1-100)
  IFS=';' read -r -a mode_args <<< "$mode"
  "$tiertrain" train --config run.yaml "${overrides[@]}" overwrite_output_dir=true output_dir="out_$name" "${mode_args[@]}" \
    > "train_$name.txt" 2>&1
  check "$mode: training succeeds" test $? -eq 0
  check "$mode: weights are bit-identical" cmp -s "$reference/model.safetensors" "out_$name/model.safetensors"
}

mkdir -p model
cat > model/config.json <<'JSON'
{"model_type": "qwen3", "vocab_size": 257, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
 "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "max_position_embeddings": 128,
 "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "tie_word_embeddings": true, "torch_dtype": "float32"}
JSON
head -c 20000 "$source_dir/README.md" > a.txt
cat "$source_dir"/src/core/*.c | head -c 20000 > b.txt
"$tiertrain" tokenize --bytes -o corpus.tok a.txt b.txt > /dev/null
check "tokenize writes a token file" test -s corpus.tok

cat > run.yaml <<'YAML'
model_config: model/config.json
initializer_range: 0.1
datasets: [corpus.tok]
val_set_size: 0.1
sequence_len: 32
micro_batch_size: 2
gradient_accumulation_steps: 2
learning_rate: 3.0e-3
warmup_steps: 2
max_steps: 6
save_steps: 3
eval_steps: 3
weight_decay: 0.1
output_dir: out_a
progress: true
YAML

"$tiertrain" plan --config run.yaml "${overrides[@]}" > plan.txt
check "plan prints the size table" grep -q "saved activations" plan.txt
check "plan prints per-layer policy" grep -q "keep" plan.txt
"$tiertrain" plan --config run.yaml "${overrides[@]}" gradient_checkpointing=true > plan_gc.txt
check "plan with checkpointing recomputes" grep -q "recompute" plan_gc.txt
if [ ${#overrides[@]} -eq 0 ]; then
  env -u OMP_WAIT_POLICY "$tiertrain" plan --config run.yaml > plan_wait.txt 2>&1
  check "OpenMP's threads wait passively unless OMP_WAIT_POLICY says" grep -q "OpenMP threads wait passive)" plan_wait.txt
  OMP_WAIT_POLICY=active "$tiertrain" plan --config run.yaml > plan_wait_active.txt 2>&1
  check "... and as OMP_WAIT_POLICY says where it is set" grep -q "OpenMP threads wait active)" plan_wait_active.txt
  "$tiertrain" plan --config run.yaml host_memory_budget=64KiB > plan_over.txt 2>&1
  check "a plan over its budget exits with status 1" test $? -eq 1
  check "... saying what it needs and what to change" \
    grep -q "error: the plan needs .* of host but the budget is 64.00 KiB: training would stop at start" plan_over.txt
fi

"$tiertrain" train --config run.yaml "${overrides[@]}" > train_a.txt 2>&1
check "training succeeds" test $? -eq 0
check "progress line printed" grep -q "step 6/6" train_a.txt
check "... with the epoch, both token rates, memory, elapsed time and ETA (plain lines off a terminal)" \
  grep -qE "^epoch [0-9.]+ \| step 6/6 \| loss [0-9.]+ \| lr [0-9.e+-]+ \| grad norm [0-9.]+ \| [0-9]+ tok/s \([0-9]+ trained\) \| .* [0-9:]+, ETA [0-9:]+$" train_a.txt
check "metrics rows carry the epoch and the trained tokens' rate" grep -q '"epoch": .*"target_tok_per_s"' out_a/metrics.jsonl
check "measured peaks printed" grep -q "measured" train_a.txt
check "checkpoint-3 written" test -f out_a/checkpoint-3/optimizer.safetensors
check "checkpoint-6 written" test -f out_a/checkpoint-6/trainer_state.json
check "final model written" test -f out_a/model.safetensors -a -f out_a/config.json
check "no partial checkpoint left" test -z "$(ls -d out_a/*.partial 2>/dev/null)"
check "metrics has 6 steps" test "$(grep -c '"loss"' out_a/metrics.jsonl)" -eq 6
check "metrics has eval rows" grep -q eval_loss out_a/metrics.jsonl

"$tiertrain" train --config run.yaml "${overrides[@]}" progress=false max_steps=2 output_dir=out_quiet > quiet.txt 2>&1
check "progress: false still prints the logged steps" grep -q "step 2/2" quiet.txt
check "... and the evals" grep -q "eval at step 2: loss" quiet.txt
check "metrics rows carry the model's and this plan's FLOPs a token" \
  grep -q '"model_flops_per_token": [0-9.e+]*, "hardware_flops_per_token": ' out_a/metrics.jsonl
if grep -q "^flops: .* against the GPU's dense bf16 peak" train_a.txt; then
  check "... and on a GPU tiertrain knows, MFU and HFU" grep -q '"mfu": 0\.[0-9]*, "hfu": 0\.[0-9]*' out_a/metrics.jsonl
fi

# profile: each step's seconds by op class in metrics.jsonl, within the step's, and the table at the end
"$tiertrain" train --config run.yaml "${overrides[@]}" progress=false max_steps=3 profile=true output_dir=out_profile \
  > profile.txt 2>&1
check "profile: true trains" test $? -eq 0
check "... prints where a step's time went" \
  grep -q "^profile: where a step's time went, the mean of the steps after the first" profile.txt
check "... every class and the gaps with their share of the step" bash -c 'for c in GEMMs "attention forward" \
  "attention backward" "LM head and loss" "norms and element-wise" optimizer "copies and collectives waited for" gaps; do
  grep -qE "^  $c.* s +-?[0-9.]+%$" profile.txt || exit 1; done'
check "... and each step's seconds by class in metrics.jsonl: the compute classes timed, their sum within the step's" \
  python3 -c '
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if "\"loss\"" in l]
assert len(rows) == 3, rows
for r in rows:
    p = r["profile_seconds"]
    assert all(p[c] > 0 for c in ("gemm", "attention_forward", "attention_backward", "lm_head_loss", "norms_elementwise",
                                  "optimizer")), p
    classes = sum(v for k, v in p.items() if k != "gaps")
    assert classes <= r["step_seconds"] + 1e-4 and abs(classes + p["gaps"] - r["step_seconds"]) < 1e-4, (p, r)
' out_profile/metrics.jsonl
"$tiertrain" train --config run.yaml "${overrides[@]}" max_steps=1 profile=true trace=t.json output_dir=out_pt \
  > profile_trace.txt 2>&1
check "profile with trace is refused, naming both" grep -q "profile and trace both mark the backend's timeline" profile_trace.txt

# NEFTune: noise on the embedding output in training; a function of the seed, step and micro-batch, so checkpointing
# and offloading draw the same noise (the same bits), and it changes the training loss, not the eval loss's definition
"$tiertrain" train --config run.yaml "${overrides[@]}" neftune_noise_alpha=5 output_dir=out_nef > train_nef.txt 2>&1
check "NEFTune trains" test $? -eq 0
check "... its noise changes the training losses" \
  bash -c '! cmp -s <(grep "\"loss\"" out_a/metrics.jsonl | sed "s/, \"lr\".*//") <(grep "\"loss\"" out_nef/metrics.jsonl | sed "s/, \"lr\".*//")'
"$tiertrain" train --config run.yaml "${overrides[@]}" neftune_noise_alpha=5 gradient_checkpointing=true \
  activation_offloading=true output_dir=out_nef_gc > train_nef_gc.txt 2>&1
check "... and checkpointing with offload draws the same noise: the same losses and gradient norms" \
  cmp -s <(sed 's/"step_seconds.*//' out_nef/metrics.jsonl | grep '"loss"') \
         <(sed 's/"step_seconds.*//' out_nef_gc/metrics.jsonl | grep '"loss"')
"$tiertrain" train --config run.yaml "${overrides[@]}" noisy_embedding_alpha=5 output_dir=out_nef_old > train_nef_old.txt 2>&1
check "axolotl's older name noisy_embedding_alpha is the same key" cmp -s out_nef/model.safetensors out_nef_old/model.safetensors

# Resume: a run that restarts from checkpoint-3 ends with the same bits as one that never stopped.
mkdir -p out_b && cp -r out_a/checkpoint-3 out_b/
"$tiertrain" train --config run.yaml "${overrides[@]}" output_dir=out_b --resume > train_b.txt 2>&1
check "resumed training succeeds" test $? -eq 0
check "resume reported" grep -q "resumed from" train_b.txt
check "resumed final weights are bit-identical" cmp -s out_a/model.safetensors out_b/model.safetensors
check "resumed optimizer state is bit-identical" cmp -s out_a/checkpoint-6/optimizer.safetensors out_b/checkpoint-6/optimizer.safetensors
grep '"loss"' out_a/metrics.jsonl | tail -3 | sed 's/"step_seconds.*//' > losses_a.txt
grep '"loss"' out_b/metrics.jsonl | tail -3 | sed 's/"step_seconds.*//' > losses_b.txt
check "resumed losses are bit-identical" cmp -s losses_a.txt losses_b.txt

# Gradient checkpointing changes memory, not numbers.
"$tiertrain" train --config run.yaml "${overrides[@]}" output_dir=out_gc gradient_checkpointing=true > train_gc.txt 2>&1
check "checkpointed training succeeds" test $? -eq 0
check "checkpointed weights are bit-identical" cmp -s out_a/model.safetensors out_gc/model.safetensors
"$tiertrain" plan --config run.yaml "${overrides[@]}" gradient_checkpointing=true \
  'selective_checkpointing={save: [attention]}' > plan_sel.txt
check "plan with selective checkpointing keeps attention" grep -q "keep attention" plan_sel.txt
"$tiertrain" train --config run.yaml "${overrides[@]}" output_dir=out_sel gradient_checkpointing=true \
  'selective_checkpointing={save: [attention]}' > train_sel.txt 2>&1
check "selective checkpointing training succeeds" test $? -eq 0
check "selective checkpointing weights are bit-identical" cmp -s out_a/model.safetensors out_sel/model.safetensors
"$tiertrain" train --config run.yaml "${overrides[@]}" output_dir=out_cheap recompute_granularity=selective > train_cheap.txt 2>&1
check "cheap-op recompute training succeeds" test $? -eq 0
check "cheap-op recompute weights are bit-identical" cmp -s out_a/model.safetensors out_cheap/model.safetensors
"$tiertrain" plan --config run.yaml "${overrides[@]}" recompute_granularity=full recompute_method=block \
  recompute_num_layers=1 > plan_block.txt
check "block recompute plans layer 0 recomputed, layer 1 kept" \
  bash -c 'grep -Eq "^  0 +recompute" plan_block.txt && grep -Eq "^  1 +keep" plan_block.txt'
"$tiertrain" plan --config run.yaml "${overrides[@]}" gradient_checkpointing=true every_n_layers=2 > plan_every.txt
check "every_n_layers plans layer 0 recomputed, layer 1 kept" \
  bash -c 'grep -Eq "^  0 +recompute" plan_every.txt && grep -Eq "^  1 +keep" plan_every.txt'
"$tiertrain" train --config run.yaml "${overrides[@]}" output_dir=out_every gradient_checkpointing=true every_n_layers=2 > train_every.txt 2>&1
check "every_n_layers weights are bit-identical" cmp -s out_a/model.safetensors out_every/model.safetensors
"$tiertrain" plan --config run.yaml "${overrides[@]}" gradient_checkpointing=true checkpoint_trainable_layers_only=true \
  'frozen_layers=[1]' > plan_trainable.txt
check "checkpoint_trainable_layers_only keeps the frozen layer 1" \
  bash -c 'grep -Eq "^  0 +recompute" plan_trainable.txt && grep -Eq "^  1 +keep" plan_trainable.txt'
"$tiertrain" train --config run.yaml "${overrides[@]}" output_dir=out_block recompute_granularity=full \
  recompute_method=block recompute_num_layers=1 > train_block.txt 2>&1
check "block recompute weights are bit-identical" cmp -s out_a/model.safetensors out_block/model.safetensors

# Free keeps: with LM head chunks of 32 tokens the head's phase needs less memory than a layer's backward, so
# checkpointing keeps the top layer's attention half from the forward (no attention recompute there): the same
# bits as keeping everything with the same chunks (the chunks decide the LM head's gradient sums).
"$tiertrain" plan --config run.yaml "${overrides[@]}" gradient_checkpointing=true loss_chunk_size=32 > plan_free.txt 2>&1
check "checkpointing keeps the top layer's attention half where the head leaves room" \
  bash -c 'grep -Eq "^  0 +recompute " plan_free.txt && grep -Eq "^  1 +recompute MLP" plan_free.txt'
"$tiertrain" train --config run.yaml "${overrides[@]}" output_dir=out_chunk32 loss_chunk_size=32 > train_chunk32.txt 2>&1
"$tiertrain" train --config run.yaml "${overrides[@]}" output_dir=out_free gradient_checkpointing=true \
  loss_chunk_size=32 > train_free.txt 2>&1
check "free keep training succeeds" test $? -eq 0
check "free keep weights are bit-identical" cmp -s out_chunk32/model.safetensors out_free/model.safetensors

# activation_offloading: legacy moves the checkpoints to pinned host memory and back: same bits.
"$tiertrain" plan --config run.yaml "${overrides[@]}" gradient_checkpointing=true activation_offloading=legacy > plan_off.txt
check "plan shows the pinned tier" grep -q "pinned" plan_off.txt
"$tiertrain" train --config run.yaml "${overrides[@]}" output_dir=out_off gradient_checkpointing=true \
  activation_offloading=legacy > train_off.txt 2>&1
check "offloaded training succeeds" test $? -eq 0
check "offloaded weights are bit-identical" cmp -s out_a/model.safetensors out_off/model.safetensors
check "offloaded run reports the pinned tier's peak" grep -q "pinned" train_off.txt
# The streamed modes (true, hidden_states: copies on side streams, the next input prefetched),
# a larger stash, pageable memory, unstreamed true, and the race stress (random delays in front of
# every copy): the same bits, and the run reports what moved.
for mode in "hidden_states" "true" "true;max_fwd_stash_size=3" "true;use_pin_memory=false" "true;use_streams=false" \
  "hidden_states;debug_copy_delay_us=3000"; do
  train_mode streamed "gradient_checkpointing=true;activation_offloading=$mode" out_a
  # (on the CPU backend pageable host memory is the compute tier itself: nothing moves)
  case "$mode ${overrides[*]}" in *use_pin_memory=false*) [[ " ${overrides[*]} " == *" device=cuda "* ]] || continue ;; esac
  check "activation_offloading $mode: the report says what was offloaded" grep -q "offload copies (activations" "train_$name.txt"
done
# Kept activations in host memory: activation_offloading: true without checkpointing (every saved
# tensor), selective checkpointing with offload, Megatron's cpu_offloading with and without
# recompute and double buffering: the same bits.
for mode in "gradient_checkpointing=false;activation_offloading=true" \
  "gradient_checkpointing=false;activation_offloading=true;min_offload_size=4096" \
  "gradient_checkpointing=true;selective_checkpointing={save: [attention], offload: true}" \
  "gradient_checkpointing=true;selective_checkpointing={save: [attention], offload: true};activation_offloading=hidden_states" \
  "gradient_checkpointing=false;cpu_offloading=true;cpu_offloading_num_layers=1" \
  "gradient_checkpointing=true;cpu_offloading=true;cpu_offloading_num_layers=1;cpu_offloading_double_buffering=true" \
  "gradient_checkpointing=false;activation_offloading=true;debug_copy_delay_us=3000"; do
  train_mode kept "$mode" out_a
  check "$mode: the report says what was offloaded" grep -q "offload copies (activations" "train_$name.txt"
done
# tiled_mlp (ALST): the MLP over shards of the tokens is its own arithmetic (the weight gradients add up
# shard by shard), and every memory mode with the same tiling gives the tiled run's bits.
"$tiertrain" train --config run.yaml "${overrides[@]}" output_dir=out_tiled tiled_mlp=true tiled_mlp_num_shards=3 \
  > train_tiled.txt 2>&1
check "tiled_mlp training succeeds" test $? -eq 0
check "tiled_mlp: the plan names the shards" grep -q "tiled_mlp: the MLP in 3 shards of 24 tokens" train_tiled.txt
for mode in "tiled_mlp=true;tiled_mlp_num_shards=3;gradient_checkpointing=true" \
  "tiled_mlp=true;tiled_mlp_num_shards=3;gradient_checkpointing=true;activation_offloading=hidden_states" \
  "tiled_mlp=true;tiled_mlp_num_shards=3;gradient_checkpointing=true;selective_checkpointing={save: [attention], offload: true};activation_offloading=hidden_states" \
  "tiled_mlp=true;tiled_mlp_num_shards=3;gradient_checkpointing=false;activation_offloading=true"; do
  train_mode tiled "$mode" out_tiled
done
"$tiertrain" plan --config run.yaml "${overrides[@]}" cpu_offloading=true cpu_offloading_num_layers=1 > plan_megatron.txt
check "the plan shows Megatron's offload" grep -q "the kept activations of 1 layer" plan_megatron.txt

mkdir -p model4
sed 's/"num_hidden_layers": 2/"num_hidden_layers": 4/' model/config.json > model4/config.json

# Weight offload (Megatron's cpu_offloading_weights): the first layers' trainable weights live in host memory and
# stream through two buffers; updated on the compute tier (then stored home) or, with optimizer offload, by the CPU
# AdamW in place; the same bits as without (a 4-layer model, three layers offloaded), and a resume with it continues
# the run without it bit for bit.
"$tiertrain" train --config run.yaml "${overrides[@]}" model_config=model4/config.json output_dir=out_m4 > train_m4.txt 2>&1
check "4 layers: training succeeds" test $? -eq 0
weights3="cpu_offloading=true;cpu_offloading_num_layers=3;cpu_offloading_weights=true"
for mode in "$weights3;cpu_offloading_activations=false" \
  "$weights3;gradient_checkpointing=true" \
  "$weights3;cpu_offloading_activations=false;freeze_embeddings=true;frozen_layers=[1]" \
  "$weights3;cpu_offloading_activations=false;freeze_embeddings=true;frozen_layers=[1];layer_offloading=true" \
  "$weights3;cpu_offloading_activations=false;optimizer_cpu_offload=true;optimizer_offload_fraction=0.5;overlap_cpu_optimizer_d2h_h2d=true" \
  "$weights3;cpu_offloading_activations=false;optimizer_cpu_offload=true"; do
  case "$mode ${overrides[*]}" in *optimizer_cpu_offload*master_weights=false*) continue ;; esac
  reference=out_m4
  case "$mode" in
    *frozen_layers*)
      reference=out_m4_frozen
      [ -d $reference ] || "$tiertrain" train --config run.yaml "${overrides[@]}" model_config=model4/config.json \
        output_dir=$reference freeze_embeddings=true "frozen_layers=[1]" > train_m4_frozen.txt 2>&1 ;;
  esac
  case_number=$((${case_number:-0} + 1)) # distinct names: the modes share their first 100 characters
  train_mode weights$case_number "model_config=model4/config.json;$mode" $reference
  check "$mode: the report gives the streamed bytes" grep -Eq "weight offload: [0-9.]+ [KMG]?i?B of layer weights streamed" "train_$name.txt"
done
check "the plan shows the weight offload" \
  grep -q "weight offload (cpu_offloading_weights): the trainable weights of layers 0-2" "train_$name.txt"
mkdir -p out_weights_resume && cp -r out_m4/checkpoint-3 out_weights_resume/
"$tiertrain" train --config run.yaml "${overrides[@]}" model_config=model4/config.json output_dir=out_weights_resume \
  cpu_offloading=true cpu_offloading_num_layers=2 cpu_offloading_weights=true cpu_offloading_activations=false \
  --resume > train_weights_resume.txt 2>&1
check "resumed with weight offload: training succeeds" test $? -eq 0
check "resumed with weight offload: weights are bit-identical" cmp -s out_m4/model.safetensors out_weights_resume/model.safetensors

# Spill on the GPU: keep-everything under a gpu_memory_budget a little below its need moves layer inputs and then
# kept activation blocks to pinned memory; the same bits (the CPU's spill is tested in test_step_plans).
if [[ " ${overrides[*]} " == *" device=cuda "* ]]; then
  need=$("$tiertrain" plan --config run.yaml "${overrides[@]}" model_config=model4/config.json |
    awk '/total \(tier peak\)/ {m = $5 == "KiB" ? 1024 : $5 == "MiB" ? 1048576 : $5 == "GiB" ? 1073741824 : 1;
         printf "%d", $4 * m; exit}')
  check "the plan gives the GPU need" test "${need:-0}" -gt 200000
  # the largest cut (of a few) that the spill can absorb and that moves kept blocks as well as inputs
  budget=0
  for cut in 16384 32768 49152 65536 98304 131072; do
    "$tiertrain" plan --config run.yaml "${overrides[@]}" model_config=model4/config.json \
      gpu_memory_budget=$((need - cut)) > plan_spill.txt 2>&1
    if grep -Eq "kept activations of [1-9][0-9]* layer" plan_spill.txt && ! grep -q "still over budget" plan_spill.txt; then
      budget=$((need - cut))
    fi
  done
  check "a budget below the need spills kept activations" test "$budget" -gt 0
  train_mode spill "model_config=model4/config.json;gpu_memory_budget=$budget" out_m4
  check "the start of the run says what spilled" grep -Eq "budget is full: .*kept activations of [1-9][0-9]* layer" "train_$name.txt"
fi

# deterministic (on the GPU): attn_implementation: cudnn runs cuDNN's deterministic backward unless deterministic:
# false; with deterministic: false auto takes cuDNN's backward that adds dQ with atomics where cuDNN has it (head_dim
# 64: a shape cuDNN's fused attention takes) and says so at start.
if [[ " ${overrides[*]} " == *" device=cuda "* ]]; then
  mkdir -p model64
  cat > model64/config.json <<'JSON'
{"model_type": "qwen3", "vocab_size": 257, "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2,
 "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 64, "max_position_embeddings": 128,
 "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "tie_word_embeddings": true, "torch_dtype": "float32"}
JSON
  "$tiertrain" train --config run.yaml "${overrides[@]}" model_config=model64/config.json attn_implementation=cudnn \
    output_dir=out_cudnn > train_cudnn.txt 2>&1
  check "attn_implementation: cudnn trains (deterministic: true, the default)" test $? -eq 0
  check "... on cuDNN's deterministic backward" grep -q "attention: cuDNN .*deterministic" train_cudnn.txt
  check "... without atomics" bash -c '! grep -q "adds dQ with atomics" train_cudnn.txt'
  "$tiertrain" train --config run.yaml "${overrides[@]}" model_config=model64/config.json deterministic=false \
    output_dir=out_atomic > train_atomic.txt 2>&1
  check "deterministic: false trains" test $? -eq 0
  check "... and says that its attention backward adds with atomics" \
    grep -q "deterministic: false: cuDNN's attention backward adds dQ with atomics" train_atomic.txt
  "$tiertrain" train --config run.yaml "${overrides[@]}" model_config=model64/config.json output_dir=out_determ \
    > train_determ.txt 2>&1
  check "deterministic (the default) does not add with atomics" bash -c '! grep -q "adds dQ with atomics" train_determ.txt'
  # selective_checkpointing: auto (the default) at 16k tokens on the GPU: the plan keeps the checkpointed layers'
  # attention outputs in pinned memory instead of recomputing them, and the bits are plain recompute's (~)
  mkdir -p model16k
  # four layers: the free keeps (the top layer or two keep their attention half on the GPU) leave some to switch
  sed 's/"max_position_embeddings": 128/"max_position_embeddings": 16384/; s/"num_hidden_layers": 2/"num_hidden_layers": 4/' \
    model64/config.json > model16k/config.json
  long=(model_config=model16k/config.json sequence_len=16384 micro_batch_size=1 gradient_accumulation_steps=1
        max_steps=2 save_steps=2 val_set_size=0 gradient_checkpointing=true)
  "$tiertrain" train --config run.yaml "${overrides[@]}" "${long[@]}" output_dir=out_auto16k > train_auto16k.txt 2>&1
  check "16k tokens, checkpointing, selective_checkpointing auto: trains" test $? -eq 0
  check "... its plan keeps attention outputs in pinned memory" \
    grep -q "keep their attention output and log-sum-exp in pinned memory" train_auto16k.txt
  "$tiertrain" train --config run.yaml "${overrides[@]}" "${long[@]}" 'selective_checkpointing=~' \
    output_dir=out_recompute16k > train_recompute16k.txt 2>&1
  check "... selective_checkpointing ~ recomputes them" \
    bash -c '! grep -q "attention output and log-sum-exp in pinned" train_recompute16k.txt'
  check "... with the same bits" cmp -s out_auto16k/model.safetensors out_recompute16k/model.safetensors
fi

# Optimizer offload (Megatron's optimizer_cpu_offload): a share of the parameters updated by the CPU AdamW
# from host memory, after the backward or layer by layer beside it, the same bits as the run without it;
# a resume with it continues the run without it bit for bit. (Not with the bf16 recipe: it needs master
# weights.)
if [[ " ${overrides[*]} " != *" master_weights=false "* ]]; then
  "$tiertrain" plan --config run.yaml "${overrides[@]}" optimizer_cpu_offload=true optimizer_offload_fraction=0.5 \
    > plan_optimizer.txt
  check "the plan shows the optimizer offload split" \
    grep -Eq "optimizer offload \(optimizer_offload_fraction 0.5\): .*trainable parameters.*pinned memory: master" \
    plan_optimizer.txt
  "$tiertrain" train --config run.yaml "${overrides[@]}" output_dir=out_noclip max_grad_norm=0 > train_noclip.txt 2>&1
  for mode in "optimizer_cpu_offload=true" \
    "optimizer_cpu_offload=true;optimizer_offload_fraction=0.5" \
    "optimizer_cpu_offload=true;optimizer_offload_fraction=0" \
    "optimizer_cpu_offload=true;overlap_cpu_optimizer_d2h_h2d=true" \
    "optimizer_cpu_offload=true;optimizer_offload_fraction=0.5;overlap_cpu_optimizer_d2h_h2d=true;debug_copy_delay_us=3000" \
    "optimizer_cpu_offload=true;optimizer_offload_fraction=0.7;overlap_cpu_optimizer_d2h_h2d=true;gradient_checkpointing=true;activation_offloading=hidden_states" \
    "optimizer_cpu_offload=true;overlap_cpu_optimizer_d2h_h2d=true;max_grad_norm=0" \
    "optimizer_cpu_offload=true;max_grad_norm=0"; do
    reference=out_a
    case "$mode" in *max_grad_norm=0*) reference=out_noclip ;; esac
    train_mode opt "$mode" $reference
    check "$mode: optimizer state is bit-identical" \
      cmp -s $reference/checkpoint-6/optimizer.safetensors "out_$name/checkpoint-6/optimizer.safetensors"
    case "$mode" in *fraction=0\;*|*fraction=0) continue ;; esac
    check "$mode: the report gives the CPU AdamW's bandwidth" grep -Eq "CPU AdamW \(.*\): [0-9.]+ GB/s" "train_$name.txt"
  done
  # The gradient ring (overlap): the layers' gradients stream to the host out of two slots; the same bits as no
  # offload (a 4-layer model: the ring needs three layers with gradients).
  "$tiertrain" train --config run.yaml "${overrides[@]}" model_config=model4/config.json output_dir=out_ga1 \
    gradient_accumulation_steps=1 > train_ga1.txt 2>&1
  check "one micro-batch per step: training succeeds" test $? -eq 0
  train_mode ring "model_config=model4/config.json;gradient_accumulation_steps=1;optimizer_cpu_offload=true;overlap_cpu_optimizer_d2h_h2d=true" out_ga1
  check "the plan shows the gradient ring" grep -q "gradient ring: the gradients of layers 0-3 stream" "train_$name.txt"
  train_mode ring "model_config=model4/config.json;gradient_accumulation_steps=1;optimizer_cpu_offload=true;overlap_cpu_optimizer_d2h_h2d=true;$weights3;cpu_offloading_activations=false" out_ga1
  # two micro-batches per step: each one's ringed gradients go out and come back for the next
  train_mode ring_ga2 "model_config=model4/config.json;optimizer_cpu_offload=true;overlap_cpu_optimizer_d2h_h2d=true;debug_copy_delay_us=2000" out_m4
  check "two micro-batches: the plan shows the gradient ring" grep -q "gradient ring: the gradients of layers 0-3 stream" "train_$name.txt"
  train_mode ring_ga2 "model_config=model4/config.json;optimizer_cpu_offload=true;overlap_cpu_optimizer_d2h_h2d=true;$weights3;gradient_checkpointing=true" out_m4
  mkdir -p out_opt_resume && cp -r out_a/checkpoint-3 out_opt_resume/
  "$tiertrain" train --config run.yaml "${overrides[@]}" output_dir=out_opt_resume optimizer_cpu_offload=true \
    optimizer_offload_fraction=0.5 overlap_cpu_optimizer_d2h_h2d=true --resume > train_opt_resume.txt 2>&1
  check "resumed with optimizer offload: training succeeds" test $? -eq 0
  check "resumed with optimizer offload: weights are bit-identical" \
    cmp -s out_a/model.safetensors out_opt_resume/model.safetensors
fi
"$tiertrain" plan --config run.yaml "${overrides[@]}" gradient_checkpointing=true activation_offloading=true \
  min_offload_size=1GB > plan_min.txt
check "min_offload_size keeps small inputs on the compute tier" bash -c '! grep -q "pinned" plan_min.txt'

mkdir -p offload
"$tiertrain" train --config run.yaml "${overrides[@]}" output_dir=out_disk gradient_checkpointing=true \
  activation_offloading=disk offload_dir=offload > train_disk.txt 2>&1
check "disk-offloaded training succeeds" test $? -eq 0
check "disk-offloaded weights are bit-identical" cmp -s out_a/model.safetensors out_disk/model.safetensors
check "the disk tier leaves no file behind" test -z "$(ls -A offload)"
check "disk-offloaded run reports the disk tier" grep -q "disk" train_disk.txt

# --trace writes a whole Chrome/Perfetto trace: compute and copy spans, bytes per tier.
# On the GPU the spans are CUDA events on the compute and copy streams.
case " ${overrides[*]} " in
  *)
    "$tiertrain" train --config run.yaml "${overrides[@]}" output_dir=out_trace gradient_checkpointing=true \
      activation_offloading=hidden_states max_steps=2 --trace trace.json > train_trace.txt 2>&1
    check "traced training succeeds" test $? -eq 0
    check "the trace is JSON with forward, backward and copy spans and memory counters" python3 -c '
import json
events = json.load(open("trace.json"))["traceEvents"]
names = {e["name"] for e in events}
assert {"forward 0", "recompute 1", "backward 0", "offload input 0", "restore input 1", "bytes in use"} <= names, names
tracks = {e["args"]["name"] for e in events if e["ph"] == "M"}
assert {"compute", "copies to host", "copies to the compute tier"} <= tracks, tracks
assert all(e["dur"] >= 0 for e in events if e["ph"] == "X")'
    check "no partial trace left" test ! -e trace.json.partial ;;
esac

# Freezing: frozen tensors come out as they went in (two runs with different learning rates agree on
# them and on nothing else), the plan prices optimizer state for the trainable part only, and
# resume is bit-identical.
tensor_digests() { # safetensors file -> "name sha256" per tensor
  python3 - "$1" <<'PY'
import hashlib, json, struct, sys
data = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", data[:8])[0]
header = json.loads(data[8:8 + n])
for name, t in sorted(header.items()):
    if name != "__metadata__":
        begin, end = t["data_offsets"]
        print(name, hashlib.sha256(data[8 + n + begin:8 + n + end]).hexdigest())
PY
}
freeze=(freeze_embeddings=true 'frozen_layers=[0]')
"$tiertrain" plan --config run.yaml "${overrides[@]}" "${freeze[@]}" > plan_frozen.txt
check "plan reports frozen parameters" grep -q "frozen: no gradient" plan_frozen.txt
check "plan prices frozen weights" grep -q "frozen weight" plan_frozen.txt
"$tiertrain" train --config run.yaml "${overrides[@]}" "${freeze[@]}" output_dir=out_f1 > train_f1.txt 2>&1
check "training with frozen parts succeeds" test $? -eq 0
"$tiertrain" train --config run.yaml "${overrides[@]}" "${freeze[@]}" output_dir=out_f1s layer_offloading=true > train_f1s.txt 2>&1
check "streaming the frozen layer 0 (layer_offloading) is bit-identical" cmp -s out_f1/model.safetensors out_f1s/model.safetensors
"$tiertrain" train --config run.yaml "${overrides[@]}" "${freeze[@]}" output_dir=out_f2 learning_rate=1e-3 > train_f2.txt 2>&1
tensor_digests out_f1/model.safetensors > digests_f1.txt
tensor_digests out_f2/model.safetensors > digests_f2.txt
check "frozen tensors are unchanged by training" \
  test "$(join digests_f1.txt digests_f2.txt | awk '$2 == $3 {print $1}' | tr '\n' ' ')" = \
  "model.embed_tokens.weight model.layers.0.input_layernorm.weight model.layers.0.mlp.down_proj.weight model.layers.0.mlp.gate_proj.weight model.layers.0.mlp.up_proj.weight model.layers.0.post_attention_layernorm.weight model.layers.0.self_attn.k_norm.weight model.layers.0.self_attn.k_proj.weight model.layers.0.self_attn.o_proj.weight model.layers.0.self_attn.q_norm.weight model.layers.0.self_attn.q_proj.weight model.layers.0.self_attn.v_proj.weight "
check "frozen parameters have no optimizer state" python3 -c '
import json, struct
d = open("out_f1/checkpoint-6/optimizer.safetensors", "rb").read()
names = json.loads(d[8:8 + struct.unpack("<Q", d[:8])[0]])
assert not any("layers.0." in k or "embed_tokens" in k for k in names), "frozen state saved"
assert any("layers.1." in k for k in names)'
mkdir -p out_f3 && cp -r out_f1/checkpoint-3 out_f3/
"$tiertrain" train --config run.yaml "${overrides[@]}" "${freeze[@]}" output_dir=out_f3 --resume > train_f3.txt 2>&1
check "resumed training with frozen parts is bit-identical" cmp -s out_f1/model.safetensors out_f3/model.safetensors

# LoRA on the model trained above: the plan prices adapters, not gradients of the base; the run
# writes PEFT's files (checkpoints too); resume and every checkpointing and offloading mode give
# the same bits, dropout included; `tiertrain merge` makes a full model that trains.
lora=(model_config=null base_model=out_a adapter=lora lora_r=4 lora_alpha=8 lora_dropout=0.1 lora_target_linear=true)
"$tiertrain" plan --config run.yaml "${overrides[@]}" "${lora[@]}" > plan_lora.txt
check "plan reports LoRA" grep -q "training: LoRA adapters, rank 4" plan_lora.txt
check "plan prices the adapters" grep -q "LoRA adapters" plan_lora.txt
check "plan prices the frozen base" grep -q "frozen weights" plan_lora.txt
"$tiertrain" train --config run.yaml "${overrides[@]}" "${lora[@]}" output_dir=out_l > train_l.txt 2>&1
check "LoRA training succeeds" test $? -eq 0
check "LoRA writes the adapter in PEFT's format" test -f out_l/adapter_model.safetensors -a -f out_l/adapter_config.json
check "LoRA does not write a full model" test ! -e out_l/model.safetensors
check "LoRA checkpoints hold the adapter" test -f out_l/checkpoint-3/adapter_model.safetensors -a -f out_l/checkpoint-3/adapter_config.json
check "adapter_config.json is PEFT's" python3 -c '
import json
c = json.load(open("out_l/adapter_config.json"))
assert c["peft_type"] == "LORA" and c["r"] == 4 and c["lora_alpha"] == 8 and c["task_type"] == "CAUSAL_LM", c
assert sorted(c["target_modules"]) == sorted(["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])'
check "the adapters trained" bash -c "grep -q '\"loss\"' out_l/metrics.jsonl && ! cmp -s out_l/checkpoint-3/adapter_model.safetensors out_l/adapter_model.safetensors"
# rank-stabilized LoRA (peft_use_rslora): scaling lora_alpha / sqrt(r), so alpha 8 at r 4 trains as plain LoRA's alpha 16
"$tiertrain" train --config run.yaml "${overrides[@]}" "${lora[@]}" peft_use_rslora=true output_dir=out_rs \
  > train_rs.txt 2>&1
"$tiertrain" train --config run.yaml "${overrides[@]}" "${lora[@]}" lora_alpha=16 output_dir=out_rs16 > train_rs16.txt 2>&1
check "rsLoRA (alpha 8, r 4) trains the adapter of LoRA with alpha 16, bit for bit" \
  cmp -s out_rs/adapter_model.safetensors out_rs16/adapter_model.safetensors
check "... and says use_rslora in adapter_config.json, as PEFT reads it" \
  python3 -c 'import json, sys; c = json.load(open("out_rs/adapter_config.json")); sys.exit(not (c["use_rslora"] is True and c["lora_alpha"] == 8))'
"$tiertrain" train --config run.yaml "${overrides[@]}" "${lora[@]}" lora_model_dir=out_rs output_dir=out_rs_mix \
  > train_rs_mix.txt 2>&1
check "continuing an rsLoRA adapter without peft_use_rslora is refused naming the key" \
  grep -q "use_rslora is true but the run's peft_use_rslora is false" train_rs_mix.txt
mkdir -p out_l2 && cp -r out_l/checkpoint-3 out_l2/
"$tiertrain" train --config run.yaml "${overrides[@]}" "${lora[@]}" output_dir=out_l2 --resume > train_l2.txt 2>&1
check "resumed LoRA adapter is bit-identical" cmp -s out_l/adapter_model.safetensors out_l2/adapter_model.safetensors
check "resumed LoRA optimizer state is bit-identical" cmp -s out_l/checkpoint-6/optimizer.safetensors out_l2/checkpoint-6/optimizer.safetensors
for mode in "gradient_checkpointing=true" "gradient_checkpointing=true;selective_checkpointing={save: [attention]}" \
            "recompute_granularity=selective" "gradient_checkpointing=true;activation_offloading=legacy" \
            "gradient_checkpointing=true;activation_offloading=disk;offload_dir=offload" \
            "gradient_checkpointing=true;activation_offloading=true" \
            "gradient_checkpointing=true;activation_offloading=hidden_states" \
            "cpu_offloading=true;cpu_offloading_num_layers=1" \
            "layer_offloading=true" "layer_offloading=true;gradient_checkpointing=true;activation_offloading=hidden_states" \
            "layer_offloading=true;optimizer_cpu_offload=true;optimizer_offload_fraction=0.5;overlap_cpu_optimizer_d2h_h2d=true"; do
  # (with LoRA, activation_offloading: true offloads every kept tensor instead of recomputing;
  # the optimizer offload needs master weights, which the bf16 recipe does not have)
  case "$mode ${overrides[*]}" in *optimizer_cpu_offload*master_weights=false*) continue ;; esac
  IFS=';' read -r -a mode_keys <<< "$mode"
  rm -rf out_lm
  "$tiertrain" train --config run.yaml "${overrides[@]}" "${lora[@]}" "${mode_keys[@]}" output_dir=out_lm save_steps=0 > train_lm.txt 2>&1
  check "LoRA with $mode is bit-identical" cmp -s out_l/adapter_model.safetensors out_lm/adapter_model.safetensors
done
"$tiertrain" train --config run.yaml "${overrides[@]}" "${lora[@]}" layer_offloading=true output_dir=out_lo save_steps=0 > train_lo.txt 2>&1
check "layer_offloading reports the streamed weights" grep -q "layer_offloading: .* of frozen weights streamed" train_lo.txt
"$tiertrain" train --config run.yaml "${overrides[@]}" layer_offloading=true output_dir=out_lo2 > train_lo2.txt 2>&1
check "layer_offloading without frozen layers is refused" grep -q "layer_offloading streams frozen decoder layers, but every layer trains" train_lo2.txt
# QLoRA: the same adapters on the base quantized to 4 bits at load (NF4, double quantization); the plan
# prices the 4-bit bytes; every memory mode gives the bits of the plain QLoRA run; the adapter is PEFT's
qlora=(model_config=null base_model=out_a adapter=qlora load_in_4bit=true lora_r=4 lora_alpha=8 lora_dropout=0.1
       lora_target_linear=true)
"$tiertrain" plan --config run.yaml "${overrides[@]}" "${lora[@]}" > plan_lb.txt
"$tiertrain" plan --config run.yaml "${overrides[@]}" "${qlora[@]}" > plan_q.txt
check "plan prices fewer frozen bytes with a 4-bit base" python3 -c '
import re, sys
def frozen(path):
    for line in open(path):
        if "frozen weights" in line:
            return line
print(frozen("plan_lb.txt"), frozen("plan_q.txt"), file=sys.stderr)
assert frozen("plan_lb.txt") != frozen("plan_q.txt")'
"$tiertrain" train --config run.yaml "${overrides[@]}" "${qlora[@]}" output_dir=out_q save_steps=0 > train_q.txt 2>&1
check "QLoRA training succeeds" test $? -eq 0
check "QLoRA writes the adapter in PEFT's format" test -f out_q/adapter_model.safetensors -a -f out_q/adapter_config.json
check "QLoRA trains other adapters than LoRA on the unquantized base" bash -c "! cmp -s out_l/adapter_model.safetensors out_q/adapter_model.safetensors"
for mode in "gradient_checkpointing=true" "gradient_checkpointing=true;activation_offloading=hidden_states" \
            "gradient_checkpointing=true;activation_offloading=true" "cpu_offloading=true;cpu_offloading_num_layers=1" \
            "layer_offloading=true" "layer_offloading=true;gradient_checkpointing=true;activation_offloading=hidden_states" \
            "bnb_4bit_use_double_quant=true;bnb_4bit_quant_type=nf4"; do
  IFS=';' read -r -a mode_keys <<< "$mode"
  rm -rf out_qm
  "$tiertrain" train --config run.yaml "${overrides[@]}" "${qlora[@]}" "${mode_keys[@]}" output_dir=out_qm save_steps=0 > train_qm.txt 2>&1
  check "QLoRA with $mode is bit-identical" cmp -s out_q/adapter_model.safetensors out_qm/adapter_model.safetensors
done
"$tiertrain" train --config run.yaml "${overrides[@]}" "${qlora[@]}" bnb_4bit_quant_type=fp4 bnb_4bit_use_double_quant=false \
  output_dir=out_qf save_steps=0 > train_qf.txt 2>&1
check "QLoRA with FP4 and plain absmax trains" test $? -eq 0
# load_in_8bit (axolotl's LoRA on an 8-bit base): the base's linear weights in 8 bits (ops/quant4.h's int8 form),
# priced at about a byte a weight; the first loss is near the unquantized LoRA run's and not equal to it; every memory
# mode gives the bits of the plain 8-bit run
lora8=("${lora[@]}" model_config=null base_model=out_a load_in_8bit=true)
"$tiertrain" plan --config run.yaml "${overrides[@]}" "${lora8[@]}" > plan_l8.txt
check "plan prices the 8-bit base between the 4-bit and the full one" python3 -c '
import re, sys
def frozen(path):
    for line in open(path):
        if "frozen weights" in line:
            value, unit = re.search(r"([0-9.]+) (B|KiB|MiB|GiB)", line).groups()
            return float(value) * {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}[unit]
q, e, b = frozen("plan_q.txt"), frozen("plan_l8.txt"), frozen("plan_lb.txt")
print(q, e, b, file=sys.stderr)
assert q < e < b'
check "... and names the 8-bit base" grep -q "load_in_8bit: linear weights in 8 bits" plan_l8.txt
"$tiertrain" train --config run.yaml "${overrides[@]}" "${lora8[@]}" output_dir=out_l8 save_steps=0 > train_l8.txt 2>&1
check "LoRA on an 8-bit base trains" test -f out_l8/adapter_model.safetensors
"$tiertrain" train --config run.yaml "${overrides[@]}" "${lora[@]}" model_config=null base_model=out_a \
  output_dir=out_l8ref save_steps=0 > train_l8ref.txt 2>&1
check "... its first loss within 1% of the unquantized base's, not equal" python3 -c '
import json, sys
a = json.loads(open("out_l8/metrics.jsonl").readline())["loss"]
b = json.loads(open("out_l8ref/metrics.jsonl").readline())["loss"]
print(a, b, file=sys.stderr)
assert a != b and abs(a - b) < 0.01 * abs(b)'
for mode in "gradient_checkpointing=true;activation_offloading=true" "layer_offloading=true"; do
  IFS=';' read -r -a mode_keys <<< "$mode"
  rm -rf out_l8m
  "$tiertrain" train --config run.yaml "${overrides[@]}" "${lora8[@]}" "${mode_keys[@]}" output_dir=out_l8m save_steps=0 > train_l8m.txt 2>&1
  check "load_in_8bit with $mode is bit-identical" cmp -s out_l8/adapter_model.safetensors out_l8m/adapter_model.safetensors
done
"$tiertrain" plan --config run.yaml "${overrides[@]}" "${qlora[@]}" load_in_8bit=true > plan_l84.txt 2>&1
check "load_in_8bit beside load_in_4bit is refused" grep -q "load_in_8bit and load_in_4bit are both true" plan_l84.txt
# lora_model_dir: a run that continues from out_l's adapter at a learning rate too small to move it
# saves that adapter bit for bit; another lora_r is refused with the key to change
"$tiertrain" train --config run.yaml "${overrides[@]}" "${lora[@]}" lora_model_dir=out_l output_dir=out_lc \
  max_steps=1 learning_rate=1e-30 save_steps=0 > train_lc.txt 2>&1
check "continuing from a saved adapter succeeds" test $? -eq 0
check "lora_model_dir loads the adapter" cmp -s out_l/adapter_model.safetensors out_lc/adapter_model.safetensors
"$tiertrain" train --config run.yaml "${overrides[@]}" "${lora[@]}" lora_model_dir=out_l lora_r=8 output_dir=out_lx \
  max_steps=1 > train_lx.txt 2>&1
check "lora_model_dir with another rank is refused" grep -q "r is 4 but lora_r is 8; set lora_r: 4" train_lx.txt
"$tiertrain" merge --base out_a --adapter out_l -o out_merged > merge.txt 2>&1
check "merge succeeds" test $? -eq 0 -a -f out_merged/model.safetensors -a -f out_merged/config.json
"$tiertrain" train --config run.yaml "${overrides[@]}" model_config=null base_model=out_merged output_dir=out_mt max_steps=1 > train_mt.txt 2>&1
check "the merged model trains" test $? -eq 0

# lora_modules_to_save (PEFT's modules_to_save): embed_tokens and lm_head of an untied model train whole beside the
# adapters, are saved with them under PEFT's names, continue bit for bit, and replace the base's in a merge
mkdir -p model_untied
sed 's/"tie_word_embeddings": true/"tie_word_embeddings": false/' model/config.json > model_untied/config.json
"$tiertrain" train --config run.yaml "${overrides[@]}" model_config=model_untied/config.json output_dir=out_u \
  max_steps=1 > train_u.txt 2>&1
saved=(model_config=null base_model=out_u adapter=lora lora_r=4 lora_alpha=8 lora_target_linear=true
       "lora_modules_to_save=[embed_tokens, lm_head]")
"$tiertrain" train --config run.yaml "${overrides[@]}" "${saved[@]}" output_dir=out_ls max_steps=2 > train_ls.txt 2>&1
check "LoRA with lora_modules_to_save trains" test $? -eq 0
check "... saying what trains whole" grep -q "and embed_tokens and lm_head trained whole (lora_modules_to_save)" \
  train_ls.txt
tensor_bytes() { # file tensor: the tensor's values, exactly (hex of their float32 bits), whatever its dtype (F32 or
  # BF16: the bf16 recipe saves an adapter's modules in the parameters' dtype, a merge in the base's)
  python3 -c '
import json, struct, sys
f = open(sys.argv[1], "rb"); n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n))
t = h[sys.argv[2]]; begin, end = t["data_offsets"]; f.seek(8 + n + begin); raw = f.read(end - begin)
if t["dtype"] == "BF16": raw = b"".join(b"\0\0" + raw[i:i + 2] for i in range(0, len(raw), 2))
else: assert t["dtype"] == "F32", t["dtype"]
print(raw.hex())' "$1" "$2"
}
check "... saved under PEFT's names, with modules_to_save in adapter_config.json" python3 -c '
import json, struct
f = open("out_ls/adapter_model.safetensors", "rb"); n = struct.unpack("<Q", f.read(8))[0]; h = json.loads(f.read(n))
assert "base_model.model.model.embed_tokens.weight" in h and "base_model.model.lm_head.weight" in h, sorted(h)[:4]
assert json.load(open("out_ls/adapter_config.json"))["modules_to_save"] == ["embed_tokens", "lm_head"]'
check "... the embedding trained" test "$(tensor_bytes out_u/model.safetensors model.embed_tokens.weight)" != \
  "$(tensor_bytes out_ls/adapter_model.safetensors base_model.model.model.embed_tokens.weight)"
"$tiertrain" train --config run.yaml "${overrides[@]}" "${saved[@]}" lora_model_dir=out_ls output_dir=out_lsc \
  max_steps=1 learning_rate=1e-30 save_steps=0 > train_lsc.txt 2>&1
check "... lora_model_dir continues from the adapter and its modules_to_save bit for bit" \
  cmp -s out_ls/adapter_model.safetensors out_lsc/adapter_model.safetensors
"$tiertrain" train --config run.yaml "${overrides[@]}" "${saved[@]}" lora_model_dir=out_l output_dir=out_lsx \
  max_steps=1 > train_lsx.txt 2>&1
check "... an adapter without them is refused, naming the key" \
  grep -q "modules_to_save is not the run's lora_modules_to_save" train_lsx.txt
"$tiertrain" merge --base out_u --adapter out_ls -o out_lsm > merge_ls.txt 2>&1
check "... merge puts the trained LM head into the model" \
  test "$(tensor_bytes out_lsm/model.safetensors lm_head.weight)" = \
  "$(tensor_bytes out_ls/adapter_model.safetensors base_model.model.lm_head.weight)"
# a tied model: PEFT wraps embed_tokens and lm_head apart, so the head trains as a copy of its own and the merged
# model is untied (lm_head.weight the adapter's, tie_word_embeddings false)
"$tiertrain" train --config run.yaml "${overrides[@]}" "${lora[@]}" "lora_modules_to_save=[embed_tokens, lm_head]" \
  output_dir=out_lst max_steps=2 > train_lst.txt 2>&1
check "... a tied model's embedding and head train as copies of their own" test $? -eq 0
"$tiertrain" merge --base out_a --adapter out_lst -o out_lstm > merge_lst.txt 2>&1
check "... its merge is untied: the adapter's head" \
  test "$(tensor_bytes out_lstm/model.safetensors lm_head.weight)" = \
  "$(tensor_bytes out_lst/adapter_model.safetensors base_model.model.lm_head.weight)"
check "... and its config says so" grep -q '"tie_word_embeddings": false' out_lstm/config.json
"$tiertrain" train --config run.yaml "${overrides[@]}" "${saved[@]}" "lora_modules_to_save=[norm]" output_dir=out_lsn \
  max_steps=1 > train_lsn.txt 2>&1
check "... a module it cannot train whole is refused by name" grep -q "lora_modules_to_save lists 'norm'" train_lsn.txt

# A mixture of experts (the Qwen3-MoE fixture, its golden in test_golden): trains, with checkpointing and offloaded
# activations the same losses and gradient norms; LoRA adapts its attention; what it does not train yet is refused
python3 "$source_dir/bench/make_tokens.py" moe.tok 96 4000 > /dev/null
moe=(model_config=null "base_model=$source_dir/tests/fixtures/tiny_qwen3_moe" datasets=[moe.tok] sequence_len=32
     micro_batch_size=2 max_steps=3 save_strategy=no val_set_size=0)
"$tiertrain" train --config run.yaml "${overrides[@]}" "${moe[@]}" output_dir=out_moe > train_moe.txt 2>&1
if [[ " ${overrides[*]} " == *" device=cuda "* ]]; then
  check "a mixture of experts on the GPU is refused, saying where it trains" \
    grep -q "a mixture of experts trains on the CPU backend only for now" train_moe.txt
else
  check "a mixture of experts trains" grep -q "step 3/3" train_moe.txt
  check "... its layers described" grep -q "model: qwen3_moe, 2 layers, .*4 experts of 16 (2 a token)" train_moe.txt
  "$tiertrain" train --config run.yaml "${overrides[@]}" "${moe[@]}" gradient_checkpointing=true \
    activation_offloading=true output_dir=out_moe_gc > train_moe_gc.txt 2>&1
  check "... checkpointed and offloaded: the same losses and gradient norms" \
    cmp -s <(grep '"loss"' out_moe/metrics.jsonl | sed 's/"step_seconds.*//') \
           <(grep '"loss"' out_moe_gc/metrics.jsonl | sed 's/"step_seconds.*//')
  "$tiertrain" train --config run.yaml "${overrides[@]}" "${moe[@]}" adapter=lora lora_r=4 lora_alpha=8 \
    lora_target_linear=true output_dir=out_moe_lora > train_moe_lora.txt 2>&1
  check "... LoRA adapts its attention" grep -q "on q_proj k_proj v_proj o_proj: " train_moe_lora.txt
  "$tiertrain" train --config run.yaml "${overrides[@]}" "${moe[@]}" adapter=lora lora_r=4 lora_alpha=8 \
    "lora_target_modules=[gate_proj]" output_dir=out_moe_x > train_moe_x.txt 2>&1
  check "... adapters on its experts are refused by name" grep -q "names gate_proj, but qwen3_moe models have no" \
    train_moe_x.txt
  "$tiertrain" train --config run.yaml "${overrides[@]}" "${moe[@]}" tiled_mlp=true tiled_mlp_num_shards=3 \
    output_dir=out_moe_t > train_moe_t.txt 2>&1
  check "... tiled_mlp is refused, saying why" grep -q "tiled_mlp tiles a dense MLP" train_moe_t.txt
  # output_router_logits: the routers' auxiliary loss joins the loss and is logged (its gradient: test_moe_aux_loss)
  mkdir -p moe_aux && cp "$source_dir"/tests/fixtures/tiny_qwen3_moe/{config.json,model.safetensors} moe_aux/
  sed -i 's/"output_router_logits": false/"output_router_logits": true/' moe_aux/config.json
  "$tiertrain" train --config run.yaml "${overrides[@]}" "${moe[@]}" base_model=moe_aux output_dir=out_moe_aux \
    > train_moe_aux.txt 2>&1
  check "... with output_router_logits, each step logs its routers' auxiliary loss" \
    test "$(grep -c '"router_aux_loss": [0-9]' out_moe_aux/metrics.jsonl)" -eq 3
fi

# Continue training from a saved Hugging Face checkpoint.
"$tiertrain" train --config run.yaml "${overrides[@]}" model_config=null base_model=out_a output_dir=out_c max_steps=1 > train_c.txt 2>&1
check "training from a saved checkpoint succeeds" test $? -eq 0

# A diverging run stops with a clear message, a non-zero status and its last good checkpoint intact.
"$tiertrain" train --config run.yaml "${overrides[@]}" output_dir=out_nan learning_rate=1e30 max_grad_norm=0 warmup_steps=0 save_steps=1 > train_nan.txt 2>&1
status=$?
check "non-finite loss exits with status 2 (got $status)" test $status -eq 2
check "non-finite loss message" grep -q "not finite" train_nan.txt
check "last good checkpoint named" grep -q "last good checkpoint is" train_nan.txt
check "last good checkpoint intact" test -f out_nan/checkpoint-1/optimizer.safetensors

# sample_packing on a token file: its documents (one per file, each ending in eos) packed several to a
# sequence, each attending only to itself; every memory mode and a resume give the same bits.
mkdir -p docs
for i in $(seq 1 24); do tail -c +$((i * 97)) a.txt | head -c $((5 + (i * 13) % 50)) > "docs/d$(printf %02d "$i").txt"; done
"$tiertrain" tokenize --bytes -o docs.tok docs/d*.txt > /dev/null
pack_args=(datasets=[docs.tok] sample_packing=true sequence_len=64 val_set_size=2 max_steps=4 save_steps=2 eval_steps=2)
"$tiertrain" train --config run.yaml "${overrides[@]}" "${pack_args[@]}" output_dir=out_pack > train_pack.txt 2>&1
check "sample_packing trains on a token file" test $? -eq 0
check "... printing the packed sequences and the efficiency" \
  grep -q "sample_packing: 22 training documents (.*) packed into .* sequences of 64 tokens .*packing efficiency" train_pack.txt
check "... and the eval documents" grep -q "sample_packing: 2 eval documents packed into 1 sequences" train_pack.txt
check "... with a finite eval loss" grep -q '"eval_loss": [0-9]' out_pack/metrics.jsonl
for mode in "gradient_checkpointing=true" "gradient_checkpointing=true;activation_offloading=legacy" \
  "gradient_checkpointing=true;activation_offloading=disk" "gradient_checkpointing=true;activation_offloading=hidden_states" \
  "gradient_checkpointing=false;activation_offloading=true" "recompute_granularity=selective" \
  "gradient_checkpointing=true;selective_checkpointing={save: [attention], offload: true}"; do
  train_mode packed "$(printf '%s;' "${pack_args[@]}")$mode" out_pack
done
# tiled_mlp rounds the weight gradients shard by shard: its own reference
"$tiertrain" train --config run.yaml "${overrides[@]}" "${pack_args[@]}" tiled_mlp=true tiled_mlp_num_shards=3 \
  output_dir=out_pack_tiled > train_pack_tiled.txt 2>&1
check "sample_packing with tiled_mlp trains" test $? -eq 0
train_mode packed_tiled "$(printf '%s;' "${pack_args[@]}")tiled_mlp=true;tiled_mlp_num_shards=3;gradient_checkpointing=true;activation_offloading=hidden_states" out_pack_tiled
mkdir -p out_pack_resumed && cp -r out_pack/checkpoint-2 out_pack_resumed/
"$tiertrain" train --config run.yaml "${overrides[@]}" "${pack_args[@]}" output_dir=out_pack_resumed --resume > train_pack_resumed.txt 2>&1
check "sample_packing: resume succeeds" test $? -eq 0
check "sample_packing: resumed weights are bit-identical" cmp -s out_pack/model.safetensors out_pack_resumed/model.safetensors
# Per-epoch packing, as axolotl's multipack sampler: each epoch packs the documents anew in its own seeded order
# and prints its packing efficiency; num_epochs counts each epoch's own sequences; a resume one step into epoch 2
# ends with the bits of the run that never stopped.
epoch_args=(datasets=[docs.tok] sample_packing=true sequence_len=64 val_set_size=2 max_steps=0 num_epochs=3
            micro_batch_size=1 gradient_accumulation_steps=1 save_steps=1 eval_steps=0)
"$tiertrain" train --config run.yaml "${overrides[@]}" "${epoch_args[@]}" output_dir=out_epochs > train_epochs.txt 2>&1
check "sample_packing over 3 epochs trains" test $? -eq 0
n1=$(sed -n 's/.*packed into \([0-9]*\) sequences of 64 tokens for epoch 1 .*/\1/p' train_epochs.txt)
n2=$(sed -n 's/.*epoch 2: 22 training documents packed anew into \([0-9]*\) sequences: packing efficiency.*/\1/p' train_epochs.txt)
n3=$(sed -n 's/.*epoch 3: 22 training documents packed anew into \([0-9]*\) sequences: packing efficiency.*/\1/p' train_epochs.txt)
check "each epoch's packing and its efficiency are printed (epochs of '$n1', '$n2', '$n3' sequences)" \
  test -n "$n1" -a -n "$n2" -a -n "$n3"
total=$((${n1:-0} + ${n2:-0} + ${n3:-0}))
check "3 epochs are the epochs' own sequences: $total steps" grep -q "step $total/$total" train_epochs.txt
mid=$((${n1:-0} + 1))
mkdir -p out_epochs_resumed && cp -r "out_epochs/checkpoint-$mid" out_epochs_resumed/
"$tiertrain" train --config run.yaml "${overrides[@]}" "${epoch_args[@]}" output_dir=out_epochs_resumed --resume \
  > train_epochs_resumed.txt 2>&1
check "sample_packing: a resume inside epoch 2 succeeds" test $? -eq 0
check "... from checkpoint-$mid" grep -q "resumed from out_epochs_resumed/checkpoint-$mid at step $mid" train_epochs_resumed.txt
check "... with bit-identical final weights" cmp -s out_epochs/model.safetensors out_epochs_resumed/model.safetensors
grep '"loss"' out_epochs/metrics.jsonl | tail -n +$((mid + 1)) | sed 's/"step_seconds.*//' > losses_epochs.txt
grep '"loss"' out_epochs_resumed/metrics.jsonl | sed 's/"step_seconds.*//' > losses_epochs_resumed.txt
check "... and bit-identical losses for every step after it" cmp -s losses_epochs.txt losses_epochs_resumed.txt
"$tiertrain" train --config run.yaml "${overrides[@]}" datasets=[corpus.tok] sample_packing=true output_dir=out_pack_long > train_pack_long.txt 2>&1
check "sample_packing: documents longer than sequence_len are all dropped: a clear error" \
  grep -q "no document is left to pack (2 longer than sequence_len 32 were dropped)" train_pack_long.txt
"$tiertrain" train --config run.yaml "${overrides[@]}" datasets=[corpus.tok] sample_packing=true \
  excess_length_strategy=truncate max_steps=1 val_set_size=0 save_steps=0 eval_steps=0 output_dir=out_pack_trunc > train_pack_trunc.txt 2>&1
check "sample_packing: excess_length_strategy: truncate keeps them cut" grep -q "truncated 2 document(s) of the token files" train_pack_trunc.txt

# sample_packing is the same documents one per micro-batch, bit for bit, on the CPU: three documents packed into one
# sequence train the same weights as the three one to a sequence with gradient_accumulation_steps: 3, in the packed
# order (the loss of a step is scaled by its label tokens either way). Both runs shuffle the same three documents with
# the same seed and pack them first-fit in that order (per-epoch packing): one to a sequence at sequence_len 34, all
# in one at 96, so the packed sequence holds them in the order the one-by-one run visits them (a probe run, one
# document per step, shows that order through the steps' target tokens). adam_epsilon 1 makes the update follow the gradients' low
# bits. The model's LM head is its own: a tied embedding's gradient is two sums over the tokens into one matrix, which
# packing interleaves differently (docs/ARCHITECTURE.md). (The GPU rounds by where a row lies: not checked there.)
if [[ " ${overrides[*]} " != *" device=cuda "* ]]; then
  mkdir -p exact model_untied
  sed 's/"tie_word_embeddings": true/"tie_word_embeddings": false/' model/config.json > model_untied/config.json
  for len in 20 28 33; do tail -c +$((len * 31)) a.txt | head -c "$len" > "exact/d$len.txt"; done
  "$tiertrain" tokenize --bytes -o exact_probe.tok exact/d20.txt exact/d28.txt exact/d33.txt > /dev/null
  alone_args=(model_config=model_untied/config.json sample_packing=true sequence_len=34 val_set_size=0
              micro_batch_size=1 warmup_steps=0 adam_epsilon=1 save_steps=0 eval_steps=0)
  "$tiertrain" train --config run.yaml "${overrides[@]}" datasets=[exact_probe.tok] "${alone_args[@]}" \
    gradient_accumulation_steps=1 max_steps=3 output_dir=out_exact_probe > train_exact_probe.txt 2>&1
  check "one document per micro-batch: the probe trains" test $? -eq 0
  order=()
  for targets in $(sed -n 's/.*"target_tokens": \([0-9]*\).*/\1/p' out_exact_probe/metrics.jsonl); do
    order+=("exact/d$((targets)).txt") # a document of n bytes and its eos: n targets
  done
  check "the probe visits the three documents (${order[*]})" test "$(printf '%s\n' "${order[@]}" | sort -u | wc -l)" -eq 3
  "$tiertrain" train --config run.yaml "${overrides[@]}" datasets=[exact_probe.tok] "${alone_args[@]}" \
    gradient_accumulation_steps=3 max_steps=1 output_dir=out_exact_alone > train_exact_alone.txt 2>&1
  check "one document per micro-batch trains" test $? -eq 0
  "$tiertrain" train --config run.yaml "${overrides[@]}" datasets=[exact_probe.tok] "${alone_args[@]}" \
    sequence_len=96 gradient_accumulation_steps=1 max_steps=1 output_dir=out_exact_packed > train_exact_packed.txt 2>&1
  check "the three documents packed into one sequence train" grep -q "packed into 1 sequences" train_exact_packed.txt
  check "packed and one by one: the same weights bit for bit" \
    cmp -s out_exact_alone/model.safetensors out_exact_packed/model.safetensors
  for run in alone packed; do
    sed 's/.*\("loss": [^,]*, \).*\("grad_norm": [^,]*\).*/\1\2/' "out_exact_$run/metrics.jsonl" > "exact_$run.txt"
  done
  check "packed and one by one: the same loss and gradient norm ($(cat exact_packed.txt))" \
    cmp -s exact_alone.txt exact_packed.txt
fi

# axolotl's ways to say how often and how many: overrides in its CLI forms (--key=value, --key value, dashes), a
# fractional save_steps with save_total_limit, saves_per_epoch, evals_per_epoch, eval_strategy: no, the loss watchdog.
"$tiertrain" train --config run.yaml "${overrides[@]}" --max_steps=8 --save_steps 0.25 --save-total-limit 2 \
  --eval_strategy no --output_dir out_limit > train_limit.txt 2>&1
check "axolotl's CLI forms of overrides train" test $? -eq 0
check "save_steps 0.25 of 8 steps with save_total_limit 2 keeps checkpoints 6 and 8 ($(ls -d out_limit/checkpoint-* | tr '\n' ' '))" \
  test "$(cd out_limit && ls -d checkpoint-* | sort | tr '\n' ' ')" = "checkpoint-6 checkpoint-8 "
check "eval_strategy: no evaluates never" test "$(grep -c eval_loss out_limit/metrics.jsonl)" -eq 0
"$tiertrain" train --config run.yaml "${overrides[@]}" max_steps=8 save_steps=0 eval_steps=0 saves_per_epoch=2 \
  evals_per_epoch=4 output_dir=out_per_epoch > train_per_epoch.txt 2>&1
check "saves_per_epoch 2 of 8 steps saves at 4 and 8" \
  test "$(cd out_per_epoch && ls -d checkpoint-* | sort -t- -k2 -n | tr '\n' ' ')" = "checkpoint-4 checkpoint-8 "
check "evals_per_epoch 4 of 8 steps evaluates at 2, 4, 6 and 8" \
  test "$(grep -c eval_loss out_per_epoch/metrics.jsonl)" -eq 4
"$tiertrain" train --config run.yaml "${overrides[@]}" max_steps=8 loss_watchdog_threshold=0.01 \
  loss_watchdog_patience=2 output_dir=out_watchdog > train_watchdog.txt 2>&1
check "the loss watchdog ends the run cleanly" test $? -eq 0
check "the loss watchdog stops after 2 steps above the threshold" \
  test "$(grep -c '"loss"' out_watchdog/metrics.jsonl)" -eq 2
check "the loss watchdog says why" grep -q "loss_watchdog: the loss was above" train_watchdog.txt
check "a watchdog stop saves the model as at the end" test -f out_watchdog/model.safetensors
printf 'wandb_project:\nmodel_type: AutoModelForCausalLM\ngptq: false\n' | cat run.yaml - > run_axolotl.yaml
"$tiertrain" plan run_axolotl.yaml "${overrides[@]}" > plan_axolotl.txt 2>&1
check "axolotl's keys are noted at start (not wandb_project left empty)" \
  grep -q "config: 2 of axolotl's keys and values" plan_axolotl.txt
if [ ${#overrides[@]} -eq 0 ] && ! nvidia-smi -L > /dev/null 2>&1; then
  "$tiertrain" plan run_axolotl.yaml bf16=true > plan_bf16.txt 2>&1
  check "bf16: true with device auto and no GPU plans on the CPU, saying so" \
    grep -q "device: auto found no GPU .*: the CPU backend trains in fp32, not in the bf16 that bf16: true asks" \
    plan_bf16.txt
fi
printf 'gptq: true\nlearning_rat: 1\n' | cat run.yaml - > run_refused.yaml
"$tiertrain" plan run_refused.yaml "${overrides[@]}" > plan_refused.txt 2>&1
check "a refused key and an unknown key are reported together" \
  grep -q "the configuration has 2 problems" plan_refused.txt

# A previous run in output_dir: refused without --resume, replaced with overwrite_output_dir; a resumed run's
# metrics.jsonl holds each step once; an output_dir that is a file is named as the cause.
"$tiertrain" train --config run.yaml "${overrides[@]}" > train_again.txt 2>&1
check "a fresh run into a previous run's output_dir is refused" test $? -ne 0
check "... naming what is there and the ways out" \
  grep -q "output_dir out_a holds a previous run (metrics.jsonl, model.safetensors, checkpoint-6 and older checkpoints); pass --resume" \
  train_again.txt
cp -r out_a out_replaced
"$tiertrain" train --config run.yaml "${overrides[@]}" output_dir=out_replaced overwrite_output_dir=true max_steps=2 \
  save_steps=0 > train_replaced.txt 2>&1
check "overwrite_output_dir replaces it" test $? -eq 0
check "... the old checkpoints removed (only this run's checkpoint-2)" \
  test "$(cd out_replaced && ls -d checkpoint-* | tr '\n' ' ')" = "checkpoint-2 "
check "... and metrics.jsonl this run's alone" test "$(grep -c '"loss"' out_replaced/metrics.jsonl)" -eq 2
cp -r out_a out_replay
"$tiertrain" train --config run.yaml "${overrides[@]}" output_dir=out_replay \
  resume_from_checkpoint=out_replay/checkpoint-3 > train_replay.txt 2>&1
check "a run resumed from checkpoint-3 of 6 trains" test $? -eq 0
check "... and its metrics.jsonl has each of the 6 steps once" \
  test "$(grep '"loss"' out_replay/metrics.jsonl | sed 's/, "epoch".*//' | tr '\n' ' ')" = \
  '{"step": 1 {"step": 2 {"step": 3 {"step": 4 {"step": 5 {"step": 6 '
check "... the same rows as the run that never stopped" \
  cmp -s <(sed 's/"step_seconds.*//' out_a/metrics.jsonl | grep '"loss"') \
  <(sed 's/"step_seconds.*//' out_replay/metrics.jsonl | grep '"loss"')
touch not_a_dir
"$tiertrain" train --config run.yaml "${overrides[@]}" output_dir=not_a_dir > train_file_dir.txt 2>&1
check "an output_dir that is a file is named as the cause" grep -q "not_a_dir is not a directory" train_file_dir.txt

# Every key `--help` prints is documented in docs/CONFIG.md.
"$tiertrain" train --help > help.txt
check "help lists keys" grep -q "learning_rate" help.txt
undocumented=""
for key in $(awk '/^  [a-z_0-9]+ /{print $1}' help.txt); do
  grep -q "\`$key\`" "$source_dir/docs/CONFIG.md" || undocumented="$undocumented $key"
done
check "every key is documented in docs/CONFIG.md (missing:$undocumented)" test -z "$undocumented"

echo "train_cli: $passed passed, $failed failed"
[ $failed -eq 0 ]
