#!/usr/bin/env bash
# Bad input through the command line: each case ends with exit status 1 and a message that
# names what was wrong, never a crash. Arguments: tiertrain binary, source dir, scratch dir.
set -uo pipefail
tiertrain=$1; source_dir=$2; scratch=$3
rm -rf "$scratch"; mkdir -p "$scratch"; cd "$scratch"
source "$source_dir/tests/shell_fixtures.sh"
expect_error() { # description, expected message (grep -E), command...
  local what=$1 pattern=$2; shift 2
  "$@" > out.txt 2> err.txt
  local status=$?
  if [ $status -eq 1 ] && grep -Eq "$pattern" err.txt; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "FAIL: $what: status $status, stderr:" >&2; cat err.txt >&2
  fi
}

# A valid model and corpus to corrupt.
byte_llama model 1 64
byte_corpus "$tiertrain" "$source_dir" 4000 corpus.tok
cat > run.yaml <<'YAML'
model_config: model/config.json
overwrite_output_dir: true  # the runs here reuse output directories on purpose
datasets: [corpus.tok]
sequence_len: 16
max_steps: 1
output_dir: out
progress: false
YAML
"$tiertrain" train --config run.yaml > /dev/null 2>&1 || echo "setup run failed" >&2
[ -f out/model.safetensors ] || { echo "train_bad_input: 0 passed, 1 failed"; exit 1; }

printf 'learning_rate: [1, 2\nseed: 3\n' > malformed.yaml
expect_error "malformed YAML" "malformed.yaml:2:[0-9]+: malformed YAML" "$tiertrain" train --config malformed.yaml
printf 'model_config: model/config.json\ndatasets: [corpus.tok]\nlearning_rat: 0.1\n' > unknown.yaml
expect_error "unknown key" "learning_rat.*learning_rate" "$tiertrain" train --config unknown.yaml
expect_error "wrong type" "micro_batch_size" "$tiertrain" train --config run.yaml micro_batch_size=abc
expect_error "out of range" "sequence_len" "$tiertrain" train --config run.yaml sequence_len=0
expect_error "later value" "not available yet" "$tiertrain" train --config run.yaml fp16=true
# optimizer offload: Megatron's keys need each other, an fp32 master copy, and room in host memory (with a vocab of
# 32768 and 2 threads, the 12 MiB budget fits the compute tier, 10.6 MiB with the CPU GEMM's packing buffers of
# 272 KiB a thread, not the offloaded optimizer state, 16 MiB)
sed 's/"vocab_size": 257/"vocab_size": 32768/' model/config.json > vocab32k.json
expect_error "offload fraction without offload" "optimizer_offload_fraction is 0.5 but optimizer_cpu_offload is false" \
  "$tiertrain" train --config run.yaml optimizer_offload_fraction=0.5
expect_error "offload fraction out of range" "optimizer_offload_fraction must be in \[0, 1\], got 2" \
  "$tiertrain" train --config run.yaml optimizer_cpu_offload=true optimizer_offload_fraction=2
expect_error "overlap without offload" "overlap_cpu_optimizer_d2h_h2d is true but optimizer_cpu_offload is false" \
  "$tiertrain" train --config run.yaml overlap_cpu_optimizer_d2h_h2d=true
expect_error "offload without master weights" "optimizer_cpu_offload keeps fp32 master weights.*master_weights: true" \
  "$tiertrain" train --config run.yaml optimizer_cpu_offload=true master_weights=false
expect_error "offloaded optimizer state over the host budget" \
  "offloading \(optimizer_cpu_offload's master weights and moments included\) needs .* host_memory_budget allows" \
  "$tiertrain" train --config run.yaml model_config=vocab32k.json num_threads=2 optimizer_cpu_offload=true \
  host_memory_budget=12MiB
expect_error "offloading without checkpointing" "activation_offloading: hidden_states offloads the checkpoints.*gradient_checkpointing: true" \
  "$tiertrain" train --config run.yaml activation_offloading=hidden_states gradient_checkpointing=false
expect_error "missing config file" "nope.yaml" "$tiertrain" train --config nope.yaml
# Device and precision keys that do not fit together stop before anything runs (this machine has
# no GPU: CI builds the CUDA backend without one, the sanitizer build has none).
expect_error "device cuda without a GPU" "device: cuda, but (no CUDA GPU is visible|this tiertrain was built without CUDA)" \
  "$tiertrain" train --config run.yaml device=cuda
expect_error "bf16 on the CPU" "bf16: true needs device: cuda" "$tiertrain" train --config run.yaml device=cpu bf16=true
expect_error "bf16 recipe on the CPU" "master_weights: false .* needs device: cuda" \
  "$tiertrain" train --config run.yaml device=cpu master_weights=false
expect_error "GPU attention on the CPU" "attn_implementation: cudnn and flash are GPU kernels" \
  "$tiertrain" train --config run.yaml device=cpu attn_implementation=flash
expect_error "offload_dir missing" "offload_dir '/nonexistent/dir': cannot use it for the activations the plan puts on disk: No such file or directory" \
  "$tiertrain" train --config run.yaml device=cpu gradient_checkpointing=true activation_offloading=disk \
  offload_dir=/nonexistent/dir
expect_error "disk offload without checkpointing" "activation_offloading: disk offloads the checkpoints" \
  "$tiertrain" train --config run.yaml activation_offloading=disk
expect_error "attention name" "attn_implementation must be one of auto, cudnn, flash, simple" \
  "$tiertrain" train --config run.yaml attn_implementation=sdpa_fast

# LoRA and freezing keys that do not fit together or do not fit the model
expect_error "qlora without load_in_4bit" "adapter: qlora needs load_in_4bit: true" \
  "$tiertrain" train --config run.yaml adapter=qlora lora_target_linear=true
expect_error "bf16 dequantization on the CPU" "bnb_4bit_compute_dtype: bfloat16, but the CPU backend" \
  "$tiertrain" train --config run.yaml device=cpu adapter=qlora load_in_4bit=true lora_target_linear=true \
  bnb_4bit_compute_dtype=bfloat16
expect_error "LoRA setting without adapter" "lora_r is set but adapter is not" "$tiertrain" train --config run.yaml lora_r=16
expect_error "adapter without targets" "adapter: lora has no modules to adapt" "$tiertrain" train --config run.yaml adapter=lora
expect_error "unknown LoRA target" "lora_target_modules: 'lm_head' is not a linear layer" \
  "$tiertrain" train --config run.yaml adapter=lora 'lora_target_modules=[q_proj, lm_head]'
expect_error "frozen layer past the model" "frozen_layers lists layer 5 but the model has 1 decoder layers" \
  "$tiertrain" train --config run.yaml 'frozen_layers=[5]'
expect_error "freezing with LoRA" "frozen_layers chooses what full fine-tuning trains" \
  "$tiertrain" train --config run.yaml adapter=lora lora_target_linear=true 'frozen_layers=[0]'
expect_error "merge without an adapter" "merge: --adapter missing" "$tiertrain" merge --base out -o merged
expect_error "merge of a directory without an adapter" "adapter_config.json" \
  "$tiertrain" merge --base out --adapter out -o merged

make_model_dir() { rm -rf "$1"; mkdir -p "$1"; cp out/config.json "$1/"; }

make_model_dir truncated
head -c 3000 out/model.safetensors > truncated/model.safetensors
expect_error "truncated safetensors" "truncated/model.safetensors" \
  "$tiertrain" train --config run.yaml model_config=null base_model=truncated output_dir=o1

make_model_dir past_end
header='{"model.embed_tokens.weight":{"dtype":"F32","shape":[257,16],"data_offsets":[0,16448]}}'
len=${#header}
printf "$(printf '\\x%02x\\x%02x\\x00\\x00\\x00\\x00\\x00\\x00' $((len & 255)) $((len >> 8)))" > past_end/model.safetensors
printf '%s' "$header" >> past_end/model.safetensors
head -c 100 /dev/zero >> past_end/model.safetensors
expect_error "offsets past the file" "model.embed_tokens.weight" \
  "$tiertrain" train --config run.yaml model_config=null base_model=past_end output_dir=o2

make_model_dir missing
cp out/model.safetensors missing/
sed -i 's/"num_hidden_layers": 1/"num_hidden_layers": 2/' missing/config.json
expect_error "missing tensor" "model.layers.1.*missing" \
  "$tiertrain" train --config run.yaml model_config=null base_model=missing output_dir=o3

make_model_dir shape
cp out/model.safetensors shape/
sed -i 's/"intermediate_size": 32/"intermediate_size": 48/' shape/config.json
expect_error "shape mismatch" "mlp.*shape" \
  "$tiertrain" train --config run.yaml model_config=null base_model=shape output_dir=o4

sed 's/"vocab_size": 257/"vocab_size": 100/' model/config.json > small_vocab.json
expect_error "token id out of range" "corpus.tok.*vocab" \
  "$tiertrain" train --config run.yaml model_config=small_vocab.json output_dir=o5

expect_error "bad budget" "budget" "$tiertrain" train --config run.yaml host_memory_budget=1KiB output_dir=o6

# Not a regular file: a FIFO as config.json or as the model's weights is refused at once, naming
# it (a plain open() would wait for a writer forever; timeout turns that into status 124).
mkfifo fifo_config.json
expect_error "FIFO as config.json" "fifo_config.json is not a regular file \(a FIFO\)" \
  timeout 20 "$tiertrain" train --config run.yaml model_config=fifo_config.json output_dir=o7
make_model_dir fifo_weights
mkfifo fifo_weights/model.safetensors
expect_error "FIFO as model.safetensors" "fifo_weights" \
  timeout 20 "$tiertrain" train --config run.yaml model_config=null base_model=fifo_weights output_dir=o8

mkdir -p fifo_adapter
mkfifo fifo_adapter/adapter_config.json
expect_error "FIFO as adapter_config.json" "adapter_config.json is not a regular file \(a FIFO\)" \
  timeout 20 "$tiertrain" merge --base out --adapter fifo_adapter -o merged_fifo

# ... and so are a FIFO as the token file, the run YAML, a JSONL dataset and tokenizer.json
mkfifo fifo.tok fifo.yaml fifo.jsonl
expect_error "FIFO as a token file" "fifo.tok is not a regular file \(a FIFO\); expected a token file" \
  timeout 20 "$tiertrain" train --config run.yaml 'datasets=[fifo.tok]' output_dir=o9
expect_error "FIFO as the run config" "fifo.yaml is not a regular file \(a FIFO\); expected a run config" \
  timeout 20 "$tiertrain" train --config fifo.yaml
fixtures=$source_dir/tests/fixtures/data
expect_error "FIFO as a JSONL dataset" "fifo.jsonl is not a regular file \(a FIFO\)" \
  timeout 20 "$tiertrain" preprocess --config run.yaml tokenizer_config=$fixtures/bytes_tokenizer \
  'datasets=[{path: fifo.jsonl, type: completion}]'
mkdir -p fifo_tokenizer && mkfifo fifo_tokenizer/tokenizer.json
expect_error "FIFO as tokenizer.json" "fifo_tokenizer/tokenizer.json is not a regular file \(a FIFO\)" \
  timeout 20 "$tiertrain" preprocess --config run.yaml tokenizer_config=fifo_tokenizer \
  'datasets=[{path: $fixtures/alpaca.jsonl, type: alpaca}]'

# Absurd sizes are refused at start, naming the key or file, within seconds (each used to run
# for minutes or crash: issue 19); `timeout` turns a run that starts working into a failure.
expect_error "num_threads ceiling" "num_threads must be in \[0, 1024\], got 100000" \
  timeout 20 "$tiertrain" train --config run.yaml num_threads=100000 output_dir=o10
expect_error "micro-batch larger than the data" "micro_batch_size 100000 is more than the [0-9]+ training sequences" \
  timeout 20 "$tiertrain" train --config run.yaml micro_batch_size=100000 output_dir=o11
expect_error "LoRA rank beyond the model" "lora_r 1000000 is more than the widest layer of the model \(32\)" \
  timeout 20 "$tiertrain" plan --config run.yaml adapter=lora lora_target_linear=true lora_r=1000000
expect_error "LoRA rank beyond the model (train)" "lora_r 1000000 is more than the widest layer" \
  timeout 20 "$tiertrain" train --config run.yaml adapter=lora lora_target_linear=true lora_r=1000000 output_dir=o12
sed 's/"max_position_embeddings"/"head_dim": 1048576, "max_position_embeddings"/' model/config.json > head_dim.json
expect_error "head_dim ceiling" "head_dim.json: head_dim \(1048576\) is more than 1024" \
  timeout 20 "$tiertrain" train --config run.yaml model_config=head_dim.json output_dir=o13
expect_error "sequence_len over the data" "one sequence needs sequence_len \+ 1 = 100000001" \
  timeout 20 "$tiertrain" train --config run.yaml sequence_len=100000000 host_memory_budget=1GiB output_dir=o14
expect_error "sequence_len over the budget" "the plan needs .* of host memory but its budget is" \
  timeout 20 "$tiertrain" train --config run.yaml sequence_len=2000 host_memory_budget=1MiB output_dir=o14
sed 's/"vocab_size": 257/"vocab_size": 2000000000/' model/config.json > big_vocab.json
expect_error "vocab over the budget" "the plan needs .* of host memory but its budget is" \
  timeout 20 "$tiertrain" train --config run.yaml model_config=big_vocab.json host_memory_budget=1GiB output_dir=o15
sed 's/"hidden_size": 16/"hidden_size": 16000000, "head_dim": 64/' model/config.json > big_hidden.json
expect_error "hidden size over the budget" "the plan needs .* of host memory but its budget is" \
  timeout 20 "$tiertrain" train --config run.yaml model_config=big_hidden.json host_memory_budget=1GiB output_dir=o16
{ printf 'seed: 1\nlora_target_modules: '; head -c 100000 /dev/zero | tr '\0' '['; head -c 100000 /dev/zero | tr '\0' ']'; echo; } > deep.yaml
expect_error "YAML nested 100000 deep" "deep.yaml:2: lists and mappings nested more than 64 deep" \
  timeout 20 "$tiertrain" train --config deep.yaml

echo "bad_input: $passed passed, $failed failed"
[ $failed -eq 0 ]
