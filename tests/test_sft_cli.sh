#!/usr/bin/env bash
# Fine-tuning data end to end through the command line: `tiertrain preprocess` an alpaca JSONL
# (tests/fixtures/data/alpaca.jsonl) with a tokenizer fixture, `tiertrain train` a tiny model on the
# prepared file, and check that the loss is finite and counts only the unmasked targets (the output
# and its EOS of each record), that train reuses the prepared file, prepares one when there is
# none, and that 1 and 2 threads prepare the same bytes.
# Arguments: tiertrain binary, source dir, scratch dir.
set -uo pipefail
tiertrain=$1; source_dir=$2; scratch=$3
rm -rf "$scratch"; mkdir -p "$scratch"; cd "$scratch"
passed=0; failed=0
check() { # description, command...
  local what=$1; shift
  if "$@"; then passed=$((passed + 1)); return; fi
  failed=$((failed + 1)); echo "FAIL: $what" >&2
  local last; last=$(ls -t -- *.txt 2>/dev/null | head -1)
  [ -n "$last" ] && { echo "---- tail of $last" >&2; tail -8 "$last" >&2; }
}

fixtures=$source_dir/tests/fixtures/data
mkdir -p model
cat > model/config.json <<'JSON'
{"model_type": "qwen3", "vocab_size": 259, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
 "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "max_position_embeddings": 512,
 "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "tie_word_embeddings": true, "torch_dtype": "float32"}
JSON
# 16 records, one epoch in 4 steps of 2 x 2 documents
cat > run.yaml <<YAML
model_config: model/config.json
initializer_range: 0.1
tokenizer_config: $fixtures/bytes_tokenizer
datasets:
  - path: $fixtures/alpaca.jsonl
    type: alpaca
sequence_len: 256
micro_batch_size: 2
gradient_accumulation_steps: 2
learning_rate: 3.0e-3
max_steps: 4
output_dir: out
progress: true
YAML

# The targets that train, worked out from the data: each record's output (its UTF-8 bytes: the
# tokenizer fixture has one token per byte) and the EOS after it; the prompt is masked.
records=$(grep -c . "$fixtures/alpaca.jsonl")
output_bytes=$(LC_ALL=C sed -n 's/.*"output": "\([^"]*\)".*/\1/p' "$fixtures/alpaca.jsonl" | LC_ALL=C awk '{ n += length($0) } END { print n }')
expected=$((output_bytes + records))

"$tiertrain" preprocess run.yaml > preprocess.txt 2>&1
check "preprocess succeeds" test $? -eq 0
check "preprocess prints the file" grep -q "preprocess: wrote last_run_prepared/[0-9a-f]\{32\}\.tok: 16 documents" preprocess.txt
check "preprocess counts the trained tokens ($expected)" grep -q ", $expected of them trained" preprocess.txt
check "one prepared file" test "$(ls last_run_prepared | wc -l)" -eq 1
"$tiertrain" preprocess --config run.yaml > preprocess2.txt 2>&1
check "a second preprocess finds it" grep -q "is prepared already" preprocess2.txt

"$tiertrain" train run.yaml > train.txt 2>&1
check "training succeeds" test $? -eq 0
check "train reuses the prepared file" grep -q "data: reusing the prepared dataset last_run_prepared/" train.txt
check "documents, one per sequence" grep -q "16 training and 0 eval documents" train.txt
check "4 steps logged" test "$(grep -c '"loss"' out/metrics.jsonl)" -eq 4
check "the loss is finite" test -z "$(grep '"loss"' out/metrics.jsonl | grep -i -E '"loss": (nan|-?inf)')"
counted=$(sed -n 's/.*"target_tokens": \([0-9]*\).*/\1/p' out/metrics.jsonl | awk '{ n += $1 } END { print n }')
check "one epoch counts exactly the unmasked targets ($counted vs $expected)" test "$counted" -eq "$expected"

# resume from the checkpoint after step 2: the same bits as the run that never stopped
"$tiertrain" train run.yaml output_dir=out_full save_steps=2 > train_full.txt 2>&1
mkdir -p out_resumed && cp -r out_full/checkpoint-2 out_resumed/
"$tiertrain" train run.yaml output_dir=out_resumed save_steps=2 --resume > train_resumed.txt 2>&1
check "resume succeeds" test $? -eq 0
check "resumed weights are bit-identical" cmp -s out_full/model.safetensors out_resumed/model.safetensors
check "... and equal the run without checkpoints" cmp -s out/model.safetensors out_full/model.safetensors

# an eval set of documents
"$tiertrain" train run.yaml output_dir=out_eval val_set_size=4 max_steps=2 > train_eval.txt 2>&1
check "val_set_size holds out documents" grep -q "12 training and 4 eval documents" train_eval.txt
check "the eval loss is logged" grep -q '"eval_loss"' out_eval/metrics.jsonl

# train_on_inputs: the prompts train too, so more targets count (every token but each first one)
"$tiertrain" train run.yaml train_on_inputs=true output_dir=out_inputs > train_inputs.txt 2>&1
check "train_on_inputs trains" test $? -eq 0
check "without a prepared file, train prepares one" grep -q "data: no prepared dataset with this hash yet: prepared last_run_prepared/" train_inputs.txt
counted_all=$(sed -n 's/.*"target_tokens": \([0-9]*\).*/\1/p' out_inputs/metrics.jsonl | awk '{ n += $1 } END { print n }')
check "train_on_inputs counts more targets ($counted_all > $counted)" test "$counted_all" -gt "$counted"
check "two prepared files now" test "$(ls last_run_prepared | wc -l)" -eq 2

# sample_packing: two examples to a sequence of 512, each attending only to itself; one epoch counts
# exactly the unmasked targets; checkpointing and a resume give the same bits
pack=(sample_packing=true sequence_len=512 max_steps=0 num_epochs=1 save_steps=1)
"$tiertrain" train run.yaml "${pack[@]}" output_dir=out_pack > train_pack.txt 2>&1
check "sample_packing trains on alpaca" test $? -eq 0
check "... 16 documents into 8 sequences, with the efficiency" \
  grep -q "sample_packing: 16 training documents (.*) packed into 8 sequences of 512 tokens .*packing efficiency" train_pack.txt
counted_pack=$(sed -n 's/.*"target_tokens": \([0-9]*\).*/\1/p' out_pack/metrics.jsonl | awk '{ n += $1 } END { print n }')
check "packed: one epoch counts exactly the unmasked targets ($counted_pack vs $expected)" test "$counted_pack" -eq "$expected"
"$tiertrain" train run.yaml "${pack[@]}" output_dir=out_pack_gc gradient_checkpointing=true activation_offloading=disk > train_pack_gc.txt 2>&1
check "packed with checkpointing offloaded to disk: bit-identical" cmp -s out_pack/model.safetensors out_pack_gc/model.safetensors
mkdir -p out_pack_resumed && cp -r out_pack/checkpoint-1 out_pack_resumed/
"$tiertrain" train run.yaml "${pack[@]}" output_dir=out_pack_resumed --resume > train_pack_resumed.txt 2>&1
check "packed resume: bit-identical" cmp -s out_pack/model.safetensors out_pack_resumed/model.safetensors
"$tiertrain" train run.yaml "${pack[@]}" output_dir=out_pack_est sample_packing_eff_est=0.9 pad_to_sequence_len=false max_steps=1 > train_pack_est.txt 2>&1
check "sample_packing_eff_est and pad_to_sequence_len are accepted and explained" \
  grep -q "sample_packing_eff_est 0.900: .*measured" train_pack_est.txt
"$tiertrain" train run.yaml sample_packing_eff_est=0.9 output_dir=out_est > train_est.txt 2>&1
check "sample_packing_eff_est without sample_packing is refused" grep -q "set sample_packing: true or remove sample_packing_eff_est" train_est.txt

# 1 and 2 threads: the same bytes
"$tiertrain" preprocess run.yaml num_threads=1 dataset_prepared_path=p1 > p1.txt 2>&1
"$tiertrain" preprocess run.yaml num_threads=2 dataset_prepared_path=p2 > p2.txt 2>&1
check "1 and 2 threads prepare identical files" cmp -s p1/*.tok p2/*.tok
first=$(basename p1/*.tok)
check "... named by the same hash, the same bytes as the first preprocess" cmp -s "p1/$first" "last_run_prepared/$first"

# bad data and chat_template: clear errors, exit status 1
printf '{"instruction": "a", "output": "b"}\n{"instruction": "a"}\n' > bad.jsonl
"$tiertrain" preprocess run.yaml "datasets=[{path: bad.jsonl, type: alpaca}]" > bad.txt 2>&1
check "a missing field stops preprocess" test $? -eq 1
check "... naming file, line and field" grep -q "bad.jsonl:2: the record has no field 'output'" bad.txt
"$tiertrain" train run.yaml "datasets=[{path: bad.jsonl, type: chat_template}]" > chat.txt 2>&1
check "chat_template stops" test $? -eq 1
check "... saying it is not available in this build" grep -q "type chat_template is not available in this build" chat.txt

echo "test_sft_cli: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
