#!/usr/bin/env bash
# Data parallel on the CPU backend through MPI (issue 18's CPU path): `mpirun -np 2 tiertrain train run.yaml`.
#  (a) two ranks give the same bits run after run (gradients and loss sums added in rank order), whether mpirun bound
#      them or they split the host's CPUs themselves;
#  (b) against one process training the same global batch (gradient_accumulation_steps x 2): the same losses and
#      gradient norms to rounding (the sums are grouped by rank, the one process adds micro-batch by micro-batch);
#  (c) memory modes keep their bits under data parallel: checkpointing with hidden_states offload, LoRA with the
#      frozen base streamed (layer_offloading), half the optimizer on the CPU, each against the same two ranks
#      without it;
#  (d) resume: two ranks from the step-2 checkpoint end with the uninterrupted run's bits;
#  (e) ranks started with different configurations, a bad input on every rank, optimizer offload with overlap: every rank
#      ends with a message, none hangs;
#  (f) zero_stage 1 (sharded optimizer state), 2 (and gradients) and 3 (and weights) give zero_stage 0's bits on 2 and 3 ranks,
#      checkpoints, resume and each rank's optimizer offload included;
#  (g) sequence parallel (Ulysses) on two ranks, on four, and two groups of two on four: one process's losses to
#      rounding, its own bits under the memory modes and the ZeRO stages; on two ranks for Llama, Qwen3, Gemma 3
#      (sliding and full layers) and Phi-3 (fused projections), and the last two under zero_stage 2 too.
# A check of losses to rounding that fails prints both runs' figures.
# Skipped (exit 77) where mpirun or an MPI build is missing. Arguments: tiertrain binary, source dir, scratch dir.
set -uo pipefail
tiertrain=$1; source_dir=$2; scratch=$3
command -v mpirun > /dev/null || { echo "skipped: no mpirun (apt-get install openmpi-bin libopenmpi-dev)"; exit 77; }
ldd "$tiertrain" | grep libmpi > /dev/null || { echo "skipped: $tiertrain was built without MPI"; exit 77; }
rm -rf "$scratch"; mkdir -p "$scratch"; cd "$scratch"
source "$source_dir/tests/shell_fixtures.sh"
# Open MPI's own allocations are not ours to check under the sanitizers; root is CI's user
export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0
mpi() { timeout 300 mpirun --allow-run-as-root --oversubscribe -np 2 "$tiertrain" "$@"; }

byte_llama model 2 64
byte_corpus "$tiertrain" "$source_dir" 20000 corpus.tok
cat > run.yaml <<'YAML'
model_config: model/config.json
overwrite_output_dir: true  # the runs here reuse output directories on purpose
datasets: [corpus.tok]
sequence_len: 32
micro_batch_size: 2
gradient_accumulation_steps: 2
max_steps: 4
save_steps: 2
learning_rate: 1.0e-2
progress: false
device: cpu
YAML

same() { cmp -s "$1" "$2"; }
losses() { sed -E 's/.*"loss": ([^,]*),.*"grad_norm": ([^,]*),.*/\1 \2/' "$1"; }
# losses and gradient norms of two metrics.jsonl files agree to a relative 1e-5
close_metrics() { metrics_close "$1" "$2" 1e-5; }

# (a) the same bits run after run; only the leader writes
mpi train run.yaml output_dir=dp1 > dp1.log 2>&1; check "two ranks train (exit 0)" test $? -eq 0
mpi train run.yaml output_dir=dp2 > dp2.log 2>&1
check "two ranks: the same model run after run" same dp1/model.safetensors dp2/model.safetensors
check "two ranks: the same checkpoint run after run" same dp1/checkpoint-2/model.safetensors dp2/checkpoint-2/model.safetensors
check "the step counts every rank's sequences" grep -q "4 steps of 8 sequences (256 tokens)" dp1.log
check "one metrics line a step (the leader's)" test "$(wc -l < dp1/metrics.jsonl)" -eq 4
# the gradient sum's buckets are in the plan: the end report's measured peak is the estimate, and is one process's
# (one thread, as each of the two ranks on two cores) plus the buckets
check "the plan prices the data-parallel buckets: measured peak = estimate" \
  awk '/total \(tier peak\)/ && NF == 7 { n++; if ($4 != $6 || $5 != $7) bad = 1 } END { exit (bad || n != 1) }' dp1.log
"$tiertrain" train run.yaml output_dir=one_thread max_steps=1 num_threads=1 > one_thread.log 2>&1
check "two ranks' peak is one process's plus the buckets" \
  awk '/total \(tier peak\)/ && NF == 7 { if (FILENAME == ARGV[1]) a = $6; else b = $6 }
       END { exit !(b + 0 > 0 && a + 0 > b + 0) }' dp1.log one_thread.log

# the host's CPUs (dist/host_cpus.h): ranks that the launcher left one affinity set (--bind-to none, as torchrun does)
# split it, whole cores each, and say so; ranks it bound to their own cores keep them; an OpenMP binding variable
# leaves the set whole; none changes a bit
# runs_on BINDING OUTPUT [key=value ...], MPI_EXTRA: more mpirun arguments
runs_on() { local binding=$1 out=$2; shift 2
  # shellcheck disable=SC2086
  timeout 300 mpirun --allow-run-as-root --oversubscribe --bind-to "$binding" ${MPI_EXTRA:-} -np 2 "$tiertrain" train \
    run.yaml output_dir="$out" "$@" > "$out.log" 2>&1; }
runs_on none unbound; check "two unbound ranks train (exit 0)" test $? -eq 0
parts=$(grep -oE "host CPUs: 2 processes of this machine shared one affinity set of [0-9]+ CPUs; each now runs on \
its part \(rank 0: CPUs [0-9,-]+; rank 1: CPUs [0-9,-]+\)" unbound.log)
check "two unbound ranks split the machine's CPUs (log: $(grep 'host CPUs' unbound.log))" test -n "$parts"
check "... into two different parts" \
  test "$(sed -E 's/.*rank 0: CPUs ([^;]*);.*/\1/' <<< "$parts")" != "$(sed -E 's/.*rank 1: CPUs ([^)]*)\).*/\1/' <<< "$parts")"
check "... with the bound run's model bits" same dp1/model.safetensors unbound/model.safetensors
runs_on core bound; check "two ranks bound to a core each train (exit 0)" test $? -eq 0
check "... and keep their cores (nothing split)" bash -c "! grep -q 'host CPUs:' bound.log"
check "... with the same model bits" same dp1/model.safetensors bound/model.safetensors
# (with half the optimizer on the CPU: its pool takes the process's CPUs from OpenMP's places, libgomp having pinned
# the first thread to one)
MPI_EXTRA="-x OMP_PROC_BIND=true" runs_on none openmp_bound optimizer_cpu_offload=true optimizer_offload_fraction=0.5
check "OMP_PROC_BIND set: the ranks train (exit 0)" test $? -eq 0
check "... and leave the shared set whole, saying why" grep -q "not split among this machine.s 2 processes: OMP_PROC_BIND is set" openmp_bound.log
check "... with the same model bits" same dp1/model.safetensors openmp_bound/model.safetensors

# (b) one process, the same global batch
"$tiertrain" train run.yaml output_dir=one gradient_accumulation_steps=4 > one.log 2>&1
check "one process trains" test $? -eq 0
check "two ranks' losses and gradient norms are one process's to rounding" close_metrics dp1/metrics.jsonl one/metrics.jsonl

# (c) memory modes keep their bits under data parallel
mpi train run.yaml output_dir=dp_gc gradient_checkpointing=true activation_offloading=hidden_states > dp_gc.log 2>&1
check "checkpointing + hidden_states: same bits as keeping everything" same dp1/model.safetensors dp_gc/model.safetensors
mpi train run.yaml output_dir=dp_lora adapter=lora lora_r=4 lora_alpha=8 lora_target_linear=true > dp_lora.log 2>&1
check "LoRA trains on two ranks" test -f dp_lora/adapter_model.safetensors
mpi train run.yaml output_dir=dp_lora_stream adapter=lora lora_r=4 lora_alpha=8 lora_target_linear=true \
  layer_offloading=true gradient_checkpointing=true > dp_lora_stream.log 2>&1
check "LoRA + layer_offloading + checkpointing: the same adapter bits" \
  same dp_lora/adapter_model.safetensors dp_lora_stream/adapter_model.safetensors
# each rank updates half of its optimizer on the host CPU (the update after the ranks' sum)
mpi train run.yaml output_dir=dp_offload optimizer_cpu_offload=true optimizer_offload_fraction=0.5 > dp_offload.log 2>&1
check "optimizer_cpu_offload (half, no overlap) on two ranks: the same bits" same dp1/model.safetensors dp_offload/model.safetensors

# evaluation split over the ranks: each takes every other eval micro-batch, the sums in rank order
mpi train run.yaml output_dir=dp_eval val_set_size=0.25 eval_steps=2 > dp_eval.log 2>&1
"$tiertrain" train run.yaml output_dir=one_eval val_set_size=0.25 eval_steps=2 gradient_accumulation_steps=4 \
  > one_eval.log 2>&1
eval_close() {
  paste -d ' ' <(grep -o '"eval_loss": [^,}]*' "$1" | cut -d' ' -f2) <(grep -o '"eval_loss": [^,}]*' "$2" | cut -d' ' -f2) |
    awk '{ d = $1 - $2; if (d < 0) d = -d; if (d > 1e-5 * ($2 < 0 ? -$2 : $2)) bad = 1; n++ } END { exit (bad || n != 2) }'
}
check "the eval loss split over two ranks is one process's to rounding" eval_close dp_eval/metrics.jsonl one_eval/metrics.jsonl

# (d) resume from the step-2 checkpoint
mkdir -p resumed && cp -r dp1/checkpoint-2 resumed/
mpi train run.yaml output_dir=resumed --resume > resumed.log 2>&1
check "two ranks resume" grep -q "resumed from" resumed.log
check "resumed: the uninterrupted run's bits" same dp1/model.safetensors resumed/model.safetensors

# JSON data: rank 0 prepares the tokenized file, the others wait and reuse it; the same bits as one process with the
# same global batch would only agree to rounding, so two runs are compared (the second reuses the file)
byte_qwen3 sft_model
cat > sft.yaml <<YAML
model_config: sft_model/config.json
tokenizer_config: $source_dir/tests/fixtures/data/bytes_tokenizer
datasets:
  - path: $source_dir/tests/fixtures/data/alpaca.jsonl
    type: alpaca
dataset_prepared_path: prepared
sequence_len: 256
micro_batch_size: 2
max_steps: 2
progress: false
device: cpu
YAML
mpi train sft.yaml output_dir=sft1 > sft1.log 2>&1
check "an alpaca JSONL on two ranks: prepared once, trained (exit 0)" test -f sft1/model.safetensors
check "... rank 0 prepared the file" test "$(ls prepared/*.tok 2>/dev/null | wc -l)" -eq 1
mpi train sft.yaml output_dir=sft2 > sft2.log 2>&1
check "... and the second run reuses it, the same bits" same sft1/model.safetensors sft2/model.safetensors

# (f) zero_stage 1: each rank keeps and updates its shard of the optimizer state (whole layers), sends the others its
#     new weights; the same bits as every rank updating everything, checkpoints included, and on 3 ranks (shards of
#     unequal size, the embedding alone on one)
mpi train run.yaml output_dir=zero1 zero_stage=1 > zero1.log 2>&1
check "zero_stage 1 on two ranks trains (exit 0)" test $? -eq 0
check "... the rank says what it keeps" grep -q 'zero_stage 1: this rank keeps the master weights and moments of' zero1.log
check "... the same model bits as zero_stage 0" same dp1/model.safetensors zero1/model.safetensors
check "... the same losses and gradient norms" same <(losses dp1/metrics.jsonl) <(losses zero1/metrics.jsonl)
check "... a checkpoint with every rank's optimizer state, the same bits" \
  same dp1/checkpoint-2/optimizer.safetensors zero1/checkpoint-2/optimizer.safetensors
mkdir -p zero1_resumed && cp -r dp1/checkpoint-2 zero1_resumed/
mpi train run.yaml output_dir=zero1_resumed zero_stage=1 --resume > zero1_resumed.log 2>&1
check "zero_stage 1 resumes an unsharded checkpoint: the uninterrupted run's bits" \
  same dp1/model.safetensors zero1_resumed/model.safetensors
mpi train run.yaml output_dir=zero1_lora zero_stage=1 adapter=lora lora_r=4 lora_alpha=8 lora_target_linear=true \
  layer_offloading=true gradient_checkpointing=true > zero1_lora.log 2>&1
check "zero_stage 1 + LoRA + layer_offloading: the same adapter bits" \
  same dp_lora/adapter_model.safetensors zero1_lora/adapter_model.safetensors
mpi3() { timeout 300 mpirun --allow-run-as-root --oversubscribe -np 3 "$tiertrain" "$@"; }
mpi3 train run.yaml output_dir=three gradient_accumulation_steps=1 max_grad_norm=0.5 > three.log 2>&1
mpi3 train run.yaml output_dir=three_zero1 gradient_accumulation_steps=1 max_grad_norm=0.5 zero_stage=1 \
  > three_zero1.log 2>&1
check "zero_stage 1 on three ranks (unequal shards, clipping): the same bits as zero_stage 0" \
  same three/model.safetensors three_zero1/model.safetensors
check "... and the same optimizer checkpoint" \
  same three/checkpoint-2/optimizer.safetensors three_zero1/checkpoint-2/optimizer.safetensors
# zero_stage 2: the other ranks' layers' gradients through two ring slots, each unit's summed on its owner as its
# backward ends (one micro-batch a step): a six-layer model on 3 ranks (slots reused), and the tied Qwen3 (the LM head
# writes the embedding's gradient first)
byte_llama deep 6 64
mpi3 train run.yaml model_config=deep/config.json output_dir=deep0 gradient_accumulation_steps=1 > deep0.log 2>&1
mpi3 train run.yaml model_config=deep/config.json output_dir=deep2 gradient_accumulation_steps=1 zero_stage=2 \
  > deep2.log 2>&1
check "zero_stage 2 on three ranks (six layers): the same bits as zero_stage 0" \
  same deep0/model.safetensors deep2/model.safetensors
check "... the same optimizer checkpoint" same deep0/checkpoint-2/optimizer.safetensors deep2/checkpoint-2/optimizer.safetensors
check "... the plan shows the ring" grep -q "ring slot, then summed on their rank (zero_stage 2)" deep2.log
mpi train run.yaml model_config=sft_model/config.json output_dir=tied2 gradient_accumulation_steps=1 \
  gradient_checkpointing=true zero_stage=2 max_grad_norm=0.1 > tied2.log 2>&1
mpi train run.yaml model_config=sft_model/config.json output_dir=tied0c gradient_accumulation_steps=1 \
  gradient_checkpointing=true max_grad_norm=0.1 > tied0c.log 2>&1
check "zero_stage 2, tied embeddings, checkpointing, clipping: zero_stage 0's bits" \
  same tied0c/model.safetensors tied2/model.safetensors
# several micro-batches a step: each micro-batch's gradients are summed onto their owner as they come (another
# grouping of the sums): the same bits run after run, zero_stage 0's losses and norms to rounding; tied head too
for z in 2 3; do
  for run in 1 2; do
    mpi3 train run.yaml model_config=deep/config.json output_dir=accumulate${z}_$run zero_stage=$z learning_rate=1e-3 \
      > accumulate${z}_$run.log 2>&1
  done
  check "zero_stage $z, two micro-batches a step: the same bits run after run" \
    same accumulate${z}_1/model.safetensors accumulate${z}_2/model.safetensors
done
mpi3 train run.yaml model_config=deep/config.json output_dir=accumulate0 learning_rate=1e-3 > accumulate0.log 2>&1
check "... zero_stage 0's losses and norms to rounding" close_metrics accumulate2_1/metrics.jsonl accumulate0/metrics.jsonl
mpi train run.yaml model_config=sft_model/config.json output_dir=tied_accumulate0 learning_rate=1e-3 > tied_accumulate0.log 2>&1
mpi train run.yaml model_config=sft_model/config.json output_dir=tied_accumulate2 learning_rate=1e-3 zero_stage=2 \
  gradient_checkpointing=true > tied_accumulate2.log 2>&1
check "... with a tied head and checkpointing too" close_metrics tied_accumulate2/metrics.jsonl tied_accumulate0/metrics.jsonl
# each rank offloads half of its shard's optimizer (the top units of the shard) to the CPU AdamW
for z in 1 2; do
  mpi3 train run.yaml model_config=deep/config.json output_dir=deep${z}_offload gradient_accumulation_steps=1 \
    zero_stage=$z optimizer_cpu_offload=true optimizer_offload_fraction=0.5 > deep${z}_offload.log 2>&1
  check "zero_stage $z + optimizer_cpu_offload (half of each shard) on three ranks: zero_stage 0's bits" \
    same deep0/model.safetensors deep${z}_offload/model.safetensors
  check "... and its optimizer checkpoint" \
    same deep0/checkpoint-2/optimizer.safetensors deep${z}_offload/checkpoint-2/optimizer.safetensors
done
check "... the plan says what each rank offloads" grep -q "of this rank's zero_stage shard" deep2_offload.log
# zero_stage 3: the other ranks' decoder layers' weights are sent into two ring slots before each use (forward,
# backward, evaluation); the embedding and head everywhere
for extra in "" "optimizer_cpu_offload=true optimizer_offload_fraction=0.5 gradient_checkpointing=true"; do
  mpi3 train run.yaml model_config=deep/config.json output_dir=deep3 gradient_accumulation_steps=1 zero_stage=3 \
    $extra > deep3.log 2>&1
  check "zero_stage 3 on three ranks${extra:+ with $extra}: zero_stage 0's bits" \
    same deep0/model.safetensors deep3/model.safetensors
  check "... and its optimizer checkpoint" same deep0/checkpoint-2/optimizer.safetensors deep3/checkpoint-2/optimizer.safetensors
  rm -rf deep3
done
check "... the plan shows the weights' ring" grep -q "ring slot, from their rank (zero_stage 3)" deep3.log
# Megatron's weight offload (the first three layers' weights in host memory) with zero_stage 1 and 2: each unit's new
# weights from its owner, the offloaded ones into every rank's host copy
for z in 1 2; do
  mpi3 train run.yaml model_config=deep/config.json output_dir=deep${z}_weights gradient_accumulation_steps=1 \
    zero_stage=$z cpu_offloading=true cpu_offloading_num_layers=3 cpu_offloading_weights=true > deep${z}_weights.log 2>&1
  check "zero_stage $z + cpu_offloading_weights on three ranks: zero_stage 0's bits" \
    same deep0/model.safetensors deep${z}_weights/model.safetensors
done
mkdir -p deep3_resumed && cp -r deep0/checkpoint-2 deep3_resumed/
mpi3 train run.yaml model_config=deep/config.json output_dir=deep3_resumed gradient_accumulation_steps=1 zero_stage=3 \
  --resume > deep3_resumed.log 2>&1
check "zero_stage 3 resumes zero_stage 0's checkpoint: the uninterrupted run's bits" \
  same deep0/model.safetensors deep3_resumed/model.safetensors
mpi train run.yaml model_config=deep/config.json output_dir=lora0 adapter=lora lora_r=4 lora_alpha=8 \
  lora_target_linear=true gradient_accumulation_steps=1 val_set_size=0.1 eval_steps=2 > lora0.log 2>&1
mpi train run.yaml model_config=deep/config.json output_dir=lora3 adapter=lora lora_r=4 lora_alpha=8 \
  lora_target_linear=true gradient_accumulation_steps=1 val_set_size=0.1 eval_steps=2 zero_stage=3 \
  layer_offloading=true gradient_checkpointing=true > lora3.log 2>&1
check "zero_stage 3 + LoRA + layer_offloading + checkpointing, evaluating: the same adapter bits" \
  same lora0/adapter_model.safetensors lora3/adapter_model.safetensors
check "... and the same eval losses" same <(grep -o '"eval_loss": [^,}]*' lora0/metrics.jsonl) \
  <(grep -o '"eval_loss": [^,}]*' lora3/metrics.jsonl)

# (g) sequence parallel (Ulysses): two ranks share each sequence (16 of its 32 tokens each), trading tokens for heads
#     around attention; against one process on the same batch: the same losses and norms to rounding (the weight
#     gradients add each rank's tokens, then the ranks; a learning rate of 1e-3 keeps four steps from amplifying the
#     rounding past the tolerance); the memory modes keep its bits
cat > sp_llama.json <<'JSON'
{"model_type": "llama", "vocab_size": 257, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
 "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64, "rms_norm_eps": 1e-5,
 "rope_theta": 10000.0, "tie_word_embeddings": false, "torch_dtype": "float32"}
JSON
sed -e 's/"llama"/"qwen3"/' -e 's/"tie_word_embeddings": false/"tie_word_embeddings": true, "head_dim": 8/' \
  sp_llama.json > sp_qwen3.json
# Gemma 3: a sliding layer (8 of the 32 tokens) and a full one, sandwich norms, q/k norms; Phi-3: fused qkv_proj and
# gate_up_proj, half the head rotated
cat > sp_gemma3_text.json <<'JSON'
{"model_type": "gemma3_text", "vocab_size": 257, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
 "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "max_position_embeddings": 64, "rms_norm_eps": 1e-6,
 "sliding_window": 8, "layer_types": ["sliding_attention", "full_attention"], "query_pre_attn_scalar": 8,
 "torch_dtype": "float32"}
JSON
cat > sp_phi3.json <<'JSON'
{"model_type": "phi3", "vocab_size": 257, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
 "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64, "rms_norm_eps": 1e-5,
 "partial_rotary_factor": 0.5, "rope_theta": 10000.0, "tie_word_embeddings": false, "torch_dtype": "float32"}
JSON
for arch in llama qwen3 gemma3_text phi3; do
  "$tiertrain" train run.yaml model_config=sp_$arch.json learning_rate=1e-3 output_dir=sp_one_$arch val_set_size=0.1 eval_steps=2 \
    > sp_one_$arch.log 2>&1
  mpi train run.yaml model_config=sp_$arch.json learning_rate=1e-3 output_dir=sp_$arch val_set_size=0.1 eval_steps=2 \
    sequence_parallel_degree=2 > sp_$arch.log 2>&1
  check "sequence parallel on two ranks ($arch) trains (exit $?)" test -f sp_$arch/model.safetensors
  check "... its losses and gradient norms are one process's to rounding" close_metrics sp_$arch/metrics.jsonl sp_one_$arch/metrics.jsonl
  check "... and its eval losses" eval_close sp_$arch/metrics.jsonl sp_one_$arch/metrics.jsonl
done
# data parallel over the new families: zero_stage 2 with checkpointing gives zero_stage 0's bits
for arch in gemma3_text phi3; do
  mpi train run.yaml model_config=sp_$arch.json output_dir=dp0_$arch gradient_accumulation_steps=1 > dp0_$arch.log 2>&1
  mpi train run.yaml model_config=sp_$arch.json output_dir=dp2_$arch gradient_accumulation_steps=1 zero_stage=2 \
    gradient_checkpointing=true > dp2_$arch.log 2>&1
  check "data parallel ($arch): zero_stage 2 with checkpointing, zero_stage 0's bits" \
    same dp0_$arch/model.safetensors dp2_$arch/model.safetensors
done
check "the plan says how the sequence is shared" \
  grep -q "2 processes share each sequence of 32 tokens; this one holds 16 of them and attends over all of them for 2 of the 4 query heads" sp_qwen3.log
mpi train run.yaml model_config=sp_qwen3.json learning_rate=1e-3 output_dir=sp_again val_set_size=0.1 eval_steps=2 \
  sequence_parallel_degree=2 > sp_again.log 2>&1
check "sequence parallel: the same bits run after run" same sp_qwen3/model.safetensors sp_again/model.safetensors
mpi train run.yaml model_config=sp_qwen3.json learning_rate=1e-3 output_dir=sp_modes val_set_size=0.1 eval_steps=2 \
  sequence_parallel_degree=2 gradient_checkpointing=true activation_offloading=hidden_states zero_stage=1 \
  > sp_modes.log 2>&1
check "sequence parallel + checkpointing + hidden_states + zero_stage 1: the same bits" \
  same sp_qwen3/model.safetensors sp_modes/model.safetensors
"$tiertrain" train run.yaml model_config=sp_qwen3.json learning_rate=1e-3 output_dir=sp_tiled_one tiled_mlp=true tiled_mlp_num_shards=2 \
  > sp_tiled_one.log 2>&1
mpi train run.yaml model_config=sp_qwen3.json learning_rate=1e-3 output_dir=sp_tiled sequence_parallel_degree=2 tiled_mlp=true \
  tiled_mlp_num_shards=2 > sp_tiled.log 2>&1
check "sequence parallel + tiled_mlp: one process's (tiled) losses to rounding" \
  close_metrics sp_tiled/metrics.jsonl sp_tiled_one/metrics.jsonl
# packed documents (two or three a sequence of 512, some across the ranks' shares): the attention's document mask
# spans the whole sequence, RoPE each token's position
"$tiertrain" train sft.yaml output_dir=sp_packed_one sample_packing=true learning_rate=1e-3 max_steps=4 \
  micro_batch_size=1 sequence_len=512 > sp_packed_one.log 2>&1
mpi train sft.yaml output_dir=sp_packed sample_packing=true learning_rate=1e-3 max_steps=4 micro_batch_size=1 \
  sequence_len=512 sequence_parallel_degree=2 > sp_packed.log 2>&1
check "sequence parallel with sample_packing: one process's losses and norms to rounding" \
  close_metrics sp_packed/metrics.jsonl sp_packed_one/metrics.jsonl
mpi train sft.yaml output_dir=sp_packed_modes sample_packing=true learning_rate=1e-3 max_steps=4 micro_batch_size=1 \
  sequence_len=512 sequence_parallel_degree=2 gradient_checkpointing=true activation_offloading=hidden_states \
  > sp_packed_modes.log 2>&1
check "... and its bits under checkpointing + hidden_states" same sp_packed/model.safetensors sp_packed_modes/model.safetensors
"$tiertrain" train run.yaml model_config=sp_qwen3.json learning_rate=1e-3 output_dir=sp_alone sequence_parallel_degree=2 > sp_alone.log 2>&1
status=$?
check "sequence_parallel_degree 2 in one process: refused (exit $status)" test $status -ne 0
check "... saying how many processes to start" grep -q "start a multiple of 2 processes" sp_alone.log
# four ranks: two sequence-parallel groups of two, side by side (data parallel over the groups)
mpi4() { timeout 300 mpirun --allow-run-as-root --oversubscribe -np 4 "$tiertrain" "$@"; }
"$tiertrain" train run.yaml model_config=sp_qwen3.json learning_rate=1e-3 output_dir=grid_one gradient_accumulation_steps=4 \
  val_set_size=0.1 eval_steps=2 > grid_one.log 2>&1
mpi4 train run.yaml model_config=sp_qwen3.json learning_rate=1e-3 output_dir=grid sequence_parallel_degree=2 val_set_size=0.1 \
  eval_steps=2 > grid.log 2>&1
check "two groups of two sequence-parallel ranks: one process's losses and norms to rounding" \
  close_metrics grid/metrics.jsonl grid_one/metrics.jsonl
check "... and its eval losses" eval_close grid/metrics.jsonl grid_one/metrics.jsonl
mpi4 train run.yaml model_config=sp_qwen3.json learning_rate=1e-3 output_dir=grid_z2 sequence_parallel_degree=2 val_set_size=0.1 \
  eval_steps=2 gradient_accumulation_steps=1 zero_stage=2 > grid_z2.log 2>&1
mpi4 train run.yaml model_config=sp_qwen3.json learning_rate=1e-3 output_dir=grid_z0 sequence_parallel_degree=2 val_set_size=0.1 \
  eval_steps=2 gradient_accumulation_steps=1 > grid_z0.log 2>&1
check "... zero_stage 2 over the four: zero_stage 0's bits" same grid_z0/model.safetensors grid_z2/model.safetensors
mpi4 train run.yaml model_config=sp_qwen3.json learning_rate=1e-3 output_dir=grid_z3 sequence_parallel_degree=2 val_set_size=0.1 \
  eval_steps=2 gradient_accumulation_steps=1 zero_stage=3 > grid_z3.log 2>&1
check "... zero_stage 3 over the four: zero_stage 0's bits" same grid_z0/model.safetensors grid_z3/model.safetensors
# all four ranks in one sequence-parallel group: each holds a quarter of the tokens and, around the attention, 2 of the
# 8 query heads and 1 of the 4 kv heads (the GPU suite's shape at four GPUs)
sed -e 's/"num_attention_heads": 4, "num_key_value_heads": 2/"num_attention_heads": 8, "num_key_value_heads": 4/' \
  sp_qwen3.json > sp4_qwen3.json
"$tiertrain" train run.yaml model_config=sp4_qwen3.json learning_rate=1e-3 output_dir=sp4_one val_set_size=0.1 eval_steps=2 \
  > sp4_one.log 2>&1
mpi4 train run.yaml model_config=sp4_qwen3.json learning_rate=1e-3 output_dir=sp4 sequence_parallel_degree=4 val_set_size=0.1 \
  eval_steps=2 > sp4.log 2>&1
check "sequence parallel over four ranks: one process's losses and norms to rounding" \
  close_metrics sp4/metrics.jsonl sp4_one/metrics.jsonl
check "... and its eval losses" eval_close sp4/metrics.jsonl sp4_one/metrics.jsonl
check "... each rank holds a quarter of the tokens and 2 of the 8 query heads" \
  grep -q "4 processes share each sequence of 32 tokens; this one holds 8 of them and attends over all of them for 2 of the 8 query heads" sp4.log
"$tiertrain" plan run.yaml model_config=sp_qwen3.json sequence_parallel_degree=2 > sp_plan.log 2>&1
check "tiertrain plan prices one rank of a sequence-parallel group" grep -q "this one holds 16 of them" sp_plan.log
# plan --processes N --rank R: one rank of a run of N (its shard); its estimate is what that rank measured
"$tiertrain" plan run.yaml model_config=deep/config.json --processes 3 --rank 1 zero_stage=2 \
  gradient_accumulation_steps=1 > plan_rank1.log 2>&1
check "plan --processes 3 --rank 1: says which rank" grep -q "this is rank 1 of 3 (data parallel, zero_stage 2" plan_rank1.log
"$tiertrain" plan run.yaml model_config=deep/config.json --processes 3 zero_stage=2 gradient_accumulation_steps=1 \
  > plan_rank0.log 2>&1
peak() { awk '/total \(tier peak\)/ { print $4, $5; exit }' "$1"; }
check "... and rank 0's plan is the estimate rank 0 of that run printed" \
  test "$(peak plan_rank0.log)" = "$(peak deep2.log)" -a -n "$(peak deep2.log)"

# axolotl's form: a DeepSpeed JSON names the stage and the optimizer offload
cat > zero2_offload.json <<'JSON'
{"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "pin_memory": true}, "overlap_comm": true,
 "contiguous_gradients": true, "reduce_bucket_size": "auto"},
 "bf16": {"enabled": "auto"}, "gradient_accumulation_steps": "auto", "train_micro_batch_size_per_gpu": 2,
 "gradient_clipping": "auto", "train_batch_size": "auto"}
JSON
mpi3 train run.yaml model_config=deep/config.json output_dir=ds_zero2 gradient_accumulation_steps=1 \
  deepspeed=zero2_offload.json > ds_zero2.log 2>&1
check "deepspeed: zero2_offload.json on three ranks: zero_stage 0's bits" same deep0/model.safetensors ds_zero2/model.safetensors
check "... read as zero_stage 2 with optimizer_cpu_offload, its own tuning listed" \
  grep -q "deepspeed zero2_offload.json: zero_stage 2, optimizer_cpu_offload; DeepSpeed's own tuning, no effect here: overlap_comm, contiguous_gradients, reduce_bucket_size" ds_zero2.log
echo '{"zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"}}}' > zero3_param.json
"$tiertrain" train run.yaml deepspeed=zero3_param.json > ds_param.log 2>&1
check "deepspeed with offload_param: refused, naming it" grep -q "offload_param.device \"cpu\" is not available yet" ds_param.log
echo '{"train_micro_batch_size_per_gpu": 8}' > mismatch.json
"$tiertrain" train run.yaml deepspeed=mismatch.json > ds_mismatch.log 2>&1
check "deepspeed with another micro batch size: refused, naming both" \
  grep -q "train_micro_batch_size_per_gpu is another number but the run's micro_batch_size is 2" ds_mismatch.log

# (e) errors end every rank
timeout 300 mpirun --allow-run-as-root --oversubscribe -np 1 "$tiertrain" train run.yaml output_dir=mix : \
  -np 1 "$tiertrain" train run.yaml output_dir=mix seed=7 > mix.log 2>&1
status=$?
check "different configurations: refused (exit $status)" test $status -ne 0 -a $status -ne 124
check "... naming the rank" grep -q "rank 1 was started with another configuration than rank 0" mix.log
mpi train run.yaml output_dir=bad "datasets=[missing.tok]" > bad.log 2>&1
status=$?
check "a bad dataset on every rank: refused (exit $status)" test $status -ne 0 -a $status -ne 124
check "... each rank says so" test "$(grep -c 'rank [01] of 2: cannot open token file missing.tok' bad.log)" -ge 1
mpi train run.yaml output_dir=offload optimizer_cpu_offload=true overlap_cpu_optimizer_d2h_h2d=true > offload.log 2>&1
status=$?
check "optimizer_cpu_offload with overlap and two ranks: refused (exit $status)" test $status -ne 0 -a $status -ne 124
check "... saying it is not available yet" \
  grep -q "optimizer_cpu_offload with overlap_cpu_optimizer_d2h_h2d and 2 data-parallel processes is not available yet" offload.log

# The processes of a host share offload_dir: 8201 bytes hold one process's disk tier (two slots of 4096 bytes, less
# a thousandth; tests/test_faults.sh) but not two, and the start says so before any memory is taken.
mkdir -p shared_offload
TT_FAULT_ENOSPC_AFTER_BYTES=8201 timeout 300 mpirun --allow-run-as-root --oversubscribe -np 2 \
  -x TT_FAULT_ENOSPC_AFTER_BYTES "$tiertrain" train run.yaml output_dir=disk gradient_checkpointing=true \
  activation_offloading=disk offload_dir=shared_offload > disk.log 2>&1
status=$?
check "two processes, room for one's disk tier: refused (exit $status)" test $status -ne 0 -a $status -ne 124
check "... naming the directory and the processes" \
  grep -q "offload_dir 'shared_offload': the plan puts 8.00 KiB of activations on disk in each of the 2 processes of this host (a file each) but the file system has 8.01 KiB free" disk.log
check "... no file left" test -z "$(ls -A shared_offload)"

echo "data_parallel: $passed passed, $failed failed"
[ $failed -eq 0 ]
