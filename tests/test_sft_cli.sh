#!/usr/bin/env bash
# Fine-tuning data end to end through the command line: `tiertrain preprocess` an alpaca JSONL
# (tests/fixtures/data/alpaca.jsonl) with a tokenizer fixture, `tiertrain train` a tiny model on the
# prepared file, and check that the loss is finite and counts only the unmasked targets (the output
# and its EOS of each record), that train reuses the prepared file, prepares one when there is
# none, and that 1 and 2 threads prepare the same bytes; then a chat_template JSONL (ShareGPT
# records, the tokenizer's own template) through preprocess and two training steps.
# Arguments: tiertrain binary, source dir, scratch dir.
set -uo pipefail
tiertrain=$1; source_dir=$2; scratch=$3
rm -rf "$scratch"; mkdir -p "$scratch"; cd "$scratch"
source "$source_dir/tests/shell_fixtures.sh"
check() { # description, command...
  local what=$1; shift
  if "$@"; then passed=$((passed + 1)); return; fi
  failed=$((failed + 1)); echo "FAIL: $what" >&2
  local last; last=$(ls -t -- *.txt 2>/dev/null | head -1)
  [ -n "$last" ] && { echo "---- tail of $last" >&2; tail -8 "$last" >&2; }
}

fixtures=$source_dir/tests/fixtures/data
byte_qwen3 model
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

# compressed datasets, as Hugging Face's json loader takes them: gzip (made here) and Zstandard (the fixture's
# alpaca.jsonl.zst, zstd -19), told by their magic bytes; the same documents as the plain file, byte for byte
python3 -c 'import gzip, shutil, sys; shutil.copyfileobj(open(sys.argv[1], "rb"), gzip.open("alpaca.jsonl.gz", "wb"))' \
  "$fixtures/alpaca.jsonl"
for compressed in alpaca.jsonl.gz "$fixtures/alpaca.jsonl.zst"; do
  out=prepared_$(basename "$compressed" | tr . _)
  "$tiertrain" preprocess run.yaml "datasets=[{path: $compressed, type: alpaca}]" dataset_prepared_path=$out \
    > "$out.txt" 2>&1
  check "$(basename "$compressed") preprocesses: 16 documents, $expected trained" \
    grep -q "16 documents, [0-9]* tokens, $expected of them trained" "$out.txt"
  check "... the plain file's bytes" cmp -s "$(ls last_run_prepared/*.tok)" "$(ls $out/*.tok)"
done
# a directory of data files, as the datasets library reads one: its train split's files (the names say), in path
# order; and a Hugging Face dataset name read from the local cache (datasets--<owner>--<name>/snapshots/...), never
# downloaded: the plain file's bytes
mkdir -p alpaca_dir/data
head -n 7 "$fixtures/alpaca.jsonl" > alpaca_dir/data/train-00000-of-00002.jsonl
tail -n +8 "$fixtures/alpaca.jsonl" | gzip > alpaca_dir/data/train-00001-of-00002.jsonl.gz
echo 'not json: the test split is not read' > alpaca_dir/data/test-00000-of-00001.jsonl
echo '# a card' > alpaca_dir/README.md
"$tiertrain" preprocess run.yaml "datasets=[{path: alpaca_dir, type: alpaca}]" dataset_prepared_path=p_dir > dir.txt 2>&1
check "a directory of train files preprocesses: 16 documents, $expected trained" \
  grep -q "16 documents, [0-9]* tokens, $expected of them trained" dir.txt
check "... the plain file's bytes" cmp -s "$(ls last_run_prepared/*.tok)" "$(ls p_dir/*.tok)"
commit=00000000000000000000000000000000000000aa
mkdir -p "hub/datasets--tiny--alpaca/refs" "hub/datasets--tiny--alpaca/snapshots/$commit"
printf '%s' "$commit" > hub/datasets--tiny--alpaca/refs/main
cp -r alpaca_dir/. "hub/datasets--tiny--alpaca/snapshots/$commit/"
HF_HUB_CACHE=$PWD/hub "$tiertrain" preprocess run.yaml "datasets=[{path: tiny/alpaca, type: alpaca}]" \
  dataset_prepared_path=p_hub > hub.txt 2>&1
check "a Hub dataset name from HF_HUB_CACHE: the plain file's bytes" cmp -s "$(ls last_run_prepared/*.tok)" "$(ls p_hub/*.tok)"
# a dataset's configuration (name: en, as allenai/c4's) is a directory of it
mkdir -p "hub/datasets--tiny--alpaca/snapshots/$commit/en"
cp "$fixtures/alpaca.jsonl" "hub/datasets--tiny--alpaca/snapshots/$commit/en/train.jsonl"
echo 'not json: the en configuration alone is read' > "hub/datasets--tiny--alpaca/snapshots/$commit/other.jsonl"
HF_HUB_CACHE=$PWD/hub "$tiertrain" preprocess run.yaml "datasets=[{path: tiny/alpaca, name: en, type: alpaca}]" \
  dataset_prepared_path=p_hub_en > hub_en.txt 2>&1
check "name: en reads the dataset's en directory: the plain file's bytes" \
  cmp -s "$(ls last_run_prepared/*.tok)" "$(ls p_hub_en/*.tok)"
HF_HUB_CACHE=$PWD/hub "$tiertrain" preprocess run.yaml "datasets=[{path: tiny/alpaca, name: fr, type: alpaca}]" \
  dataset_prepared_path=p_hub_fr > hub_fr.txt 2>&1
check "... a configuration it lacks is refused, naming the directory" grep -q "has no configuration 'fr' (no directory" \
  hub_fr.txt
# axolotl's pretraining_dataset (type pretrain, text_column): completion texts
python3 -c 'import json,sys
for l in open(sys.argv[1]):
    r = json.loads(l); print(json.dumps({"body": r["instruction"] + " " + r["output"]}))' "$fixtures/alpaca.jsonl" > texts.jsonl
"$tiertrain" preprocess run.yaml datasets=null "pretraining_dataset=[{path: texts.jsonl, type: pretrain, text_column: body}]" \
  dataset_prepared_path=p_pre > pre.txt 2>&1
"$tiertrain" preprocess run.yaml "datasets=[{path: texts.jsonl, type: completion, field: body}]" \
  dataset_prepared_path=p_comp > comp.txt 2>&1
check "pretraining_dataset's texts prepare as completion's" cmp -s "$(ls p_comp/*.tok)" "$(ls p_pre/*.tok)"
"$tiertrain" preprocess run.yaml "pretraining_dataset=[{path: texts.jsonl}]" dataset_prepared_path=p_both > both.txt 2>&1
check "... beside datasets it is refused" grep -q "pretraining_dataset and datasets are both set" both.txt
"$tiertrain" preprocess run.yaml datasets=null "pretraining_dataset=[{path: texts.jsonl, type: pretrain, text_column: body}]" \
  "datasets=[]" dataset_prepared_path=p_pre_empty > pre_empty.txt 2>&1
check "... datasets: [] after it keeps its texts (axolotl's examples write an empty datasets:)" \
  cmp -s "$(ls p_pre/*.tok)" "$(ls p_pre_empty/*.tok)"
"$tiertrain" preprocess run.yaml datasets=null "pretraining_dataset=[{path: texts.jsonl, text_column: body}]" \
  pretraining_dataset=null "datasets=[{path: texts.jsonl, type: completion, field: body}]" \
  dataset_prepared_path=p_pre_off > pre_off.txt 2>&1
check "... pretraining_dataset: null drops its entries, datasets then reads alone" \
  cmp -s "$(ls p_comp/*.tok)" "$(ls p_pre_off/*.tok)"
HF_HUB_CACHE=$PWD/hub "$tiertrain" preprocess run.yaml "datasets=[{path: tiny/absent, type: alpaca}]" \
  dataset_prepared_path=p_absent > absent.txt 2>&1
check "an absent Hub dataset names the cache path and the download" \
  grep -q "datasets--tiny--absent: No such file or directory.*hf download --repo-type dataset tiny/absent" absent.txt
mkdir -p csv_only && : > csv_only/train-00000-of-00001.csv
"$tiertrain" preprocess run.yaml "datasets=[{path: csv_only, type: alpaca}]" dataset_prepared_path=p_csv > csv.txt 2>&1
check "a directory of CSV alone is refused, naming the format and a conversion" \
  grep -q "holds CSV files (.*train-00000-of-00001.csv) and no JSON, JSONL or Parquet" csv.txt

# Parquet, as two independent writers (npm's hyparquet-writer and @dsnp/parquetjs) wrote the same rows: the bytes of
# their JSON lines, alone or as a directory's train file
pq=$source_dir/tests/fixtures/parquet
"$tiertrain" preprocess run.yaml "datasets=[{path: $pq/rows.jsonl, type: alpaca}]" dataset_prepared_path=p_rows > rows.txt 2>&1
for f in hyparquet_dictionary.parquet parquetjs_v2_gzip.parquet; do
  "$tiertrain" preprocess run.yaml "datasets=[{path: $pq/$f, type: alpaca}]" dataset_prepared_path=p_$f > $f.txt 2>&1
  check "$f preprocesses to its rows' JSON lines' bytes" cmp -s "$(ls p_rows/*.tok)" "$(ls p_$f/*.tok)"
done
mkdir -p pq_dir/data && cp "$pq/hyparquet_zstd.parquet" pq_dir/data/train-00000-of-00001.parquet
"$tiertrain" preprocess run.yaml "datasets=[{path: pq_dir, type: alpaca}]" dataset_prepared_path=p_pqdir > pqdir.txt 2>&1
check "... and as a directory's train file" cmp -s "$(ls p_rows/*.tok)" "$(ls p_pqdir/*.tok)"
# splits as the datasets library infers them: directories' names before files' names, a split word only between
# separators (pretraining, contest name none), one format of two (a JSON copy beside the Parquet is not read twice),
# its metadata files (dataset_info.json) not data, a trailing slash the same directory
mkdir -p split_dirs/train split_dirs/validation split_words mixed
cp "$pq/rows.jsonl" split_dirs/train/part.jsonl
echo 'not json: the validation directory is not read' > split_dirs/validation/part.jsonl
echo 'not json: a file name does not override the directories' > split_dirs/test.jsonl
head -n 7 "$pq/rows.jsonl" > split_words/a_pretraining.jsonl
tail -n +8 "$pq/rows.jsonl" > split_words/b_contest.jsonl
cp "$pq/rows.jsonl" mixed/train.jsonl && cp "$pq/hyparquet_zstd.parquet" mixed/train.parquet
echo '{"splits": {}}' > mixed/dataset_info.json
for d in split_dirs split_words mixed/; do
  "$tiertrain" preprocess run.yaml "datasets=[{path: $d, type: alpaca}]" dataset_prepared_path=p_$d > ${d%/}.txt 2>&1
  check "directory $d: the rows' bytes" cmp -s "$(ls p_rows/*.tok)" "$(ls p_${d%/}/*.tok)"
done
# a chat dataset as the Hub holds one: messages, a list of {role, content} structs
for d in chat_rows.jsonl chat.parquet; do
  "$tiertrain" preprocess run.yaml "datasets=[{path: $pq/$d, type: chat_template, chat_template: chatml}]" \
    dataset_prepared_path=p_$d > $d.txt 2>&1
done
check "a Parquet chat dataset (messages: a list of structs) prepares its JSON lines' bytes" \
  cmp -s "$(ls p_chat_rows.jsonl/*.tok)" "$(ls p_chat.parquet/*.tok)"

# axolotl's user-defined type (type: a mapping of fields and formats, filled as Python's str.format): with alpaca's
# own texts as its formats it prepares alpaca's bytes; another format and a system text train the same answers
cat > user_defined.yaml <<'YAML'
datasets:
  - path: PATH
    type:
      format: "Below is an instruction that describes a task, paired with an input that provides further context. Write a response that appropriately completes the request.\n\n### Instruction:\n{instruction}\n\n### Input:\n{input}\n\n### Response:\n"
      no_input_format: "Below is an instruction that describes a task. Write a response that appropriately completes the request.\n\n### Instruction:\n{instruction}\n\n### Response:\n"
YAML
sed "s|PATH|$fixtures/alpaca.jsonl|" user_defined.yaml > ud.yaml
cat run.yaml | grep -v "^datasets:\|^  - path:\|^    type:" > ud_run.yaml
cat ud.yaml >> ud_run.yaml
"$tiertrain" preprocess ud_run.yaml dataset_prepared_path=prepared_ud > ud.txt 2>&1
check "a user-defined type with alpaca's formats preprocesses ($expected trained)" \
  grep -q "16 documents, [0-9]* tokens, $expected of them trained" ud.txt
check "... alpaca's bytes" cmp -s "$(ls last_run_prepared/*.tok)" "$(ls prepared_ud/*.tok)"
"$tiertrain" preprocess run.yaml "datasets=[{path: $fixtures/alpaca.jsonl, type: {format: '[INST] {instruction} {input} [/INST]', no_input_format: '[INST] {instruction} [/INST]', system_prompt: 'Be brief.', system_format: '<<SYS>>{system}<</SYS>> '}}]" \
  dataset_prepared_path=prepared_ud2 > ud2.txt 2>&1
check "... other formats and a system prompt train the same answers ($expected)" \
  grep -q "16 documents, [0-9]* tokens, $expected of them trained" ud2.txt
"$tiertrain" preprocess run.yaml "datasets=[{path: $fixtures/alpaca.jsonl, type: {format: '{instruction} {output}'}}]" \
  dataset_prepared_path=prepared_ud3 > ud3.txt 2>&1
check "... a field the format is not given is refused, naming it" \
  grep -q "type: format: the field {output} is not one this format is given" ud3.txt
# A huge JSONL line is tokenized only as far as a document can use it: a 24 MB completion text keeps 64 pieces of
# sequence_len (axolotl's cap), an alpaca record with a 24 MB output is dropped as longer than sequence_len, and a
# truncating run keeps its first sequence_len tokens; the peak memory stays far under the 30 bytes a byte of text that
# encoding the whole line took (700+ MiB here)
python3 - <<'PY'
import json
text = "the quick brown fox jumps over the lazy dog. " * (24 * 1024 * 1024 // 45)
with open("huge_completion.jsonl", "w") as f:
    f.write(json.dumps({"text": text}) + "\n" + json.dumps({"text": "a short one"}) + "\n")
with open("huge_alpaca.jsonl", "w") as f:
    f.write(json.dumps({"instruction": "Say it.", "input": "", "output": text}) + "\n")
    f.write(json.dumps({"instruction": "Say hi.", "input": "", "output": "hi"}) + "\n")
PY
peak_mib() { sed -n 's/.*peak resident memory \([0-9]*\) MiB.*/\1/p' "$1"; }
# the growth over the small dataset's run, AddressSanitizer's quarantine of freed memory off where it is built in
base=$(peak_mib preprocess.txt)
grown_ok() { test $(($(peak_mib "$1") - base)) -lt 240; } # 10 bytes a byte of the line
lean_asan="${ASAN_OPTIONS:-}:quarantine_size_mb=0"
ASAN_OPTIONS=$lean_asan "$tiertrain" preprocess run.yaml "datasets=[{path: huge_completion.jsonl, type: completion}]" \
  dataset_prepared_path=p_huge > huge.txt 2>&1
check "a 24 MB completion line: 64 pieces of 256 tokens, then the short text" grep -q "65 documents, 16397 tokens" huge.txt
check "... within 240 MiB more than the small dataset ($(peak_mib huge.txt) vs $base MiB)" grown_ok huge.txt
ASAN_OPTIONS=$lean_asan "$tiertrain" preprocess run.yaml "datasets=[{path: huge_alpaca.jsonl, type: alpaca}]" \
  dataset_prepared_path=p_huge2 > huge2.txt 2>&1
check "an alpaca record with a 24 MB output is dropped as too long" \
  grep -q "dropped 1 document(s) longer than sequence_len 256" huge2.txt
check "... within 240 MiB more than the small dataset ($(peak_mib huge2.txt) vs $base MiB)" grown_ok huge2.txt
short=$(sed -n 's/.*: 1 documents, \([0-9]*\) tokens.*/\1/p' huge2.txt)
"$tiertrain" preprocess run.yaml "datasets=[{path: huge_alpaca.jsonl, type: alpaca}]" dataset_prepared_path=p_huge3 \
  excess_length_strategy=truncate > huge3.txt 2>&1
check "... truncated: its first 256 tokens kept beside the short record's $short" \
  grep -q "2 documents, $((256 + short)) tokens" huge3.txt
head -c 40 alpaca.jsonl.gz > truncated.jsonl.gz
"$tiertrain" preprocess run.yaml "datasets=[{path: truncated.jsonl.gz, type: alpaca}]" dataset_prepared_path=p_t \
  > truncated.txt 2>&1
check "a truncated gzip file is refused, naming it" grep -q "dataset truncated.jsonl.gz: the gzip stream is truncated" \
  truncated.txt
printf '\x28\xb5\x2f\xfdgarbage' > corrupt.jsonl.zst
"$tiertrain" preprocess run.yaml "datasets=[{path: corrupt.jsonl.zst, type: alpaca}]" dataset_prepared_path=p_c \
  > corrupt.txt 2>&1
check "corrupt Zstandard data is refused, naming it" grep -q "dataset corrupt.jsonl.zst: the Zstandard data is corrupt" \
  corrupt.txt

# split: a slice of the file's records, as datasets reads it (16 records: round(16 x 0.95) = 15, the rest 1)
for slice in 'train[:95%]' 'train[95%:]' 'train[-3:]'; do
  name=$(echo "$slice" | tr -c 'a-z0-9\n' '_')
  "$tiertrain" preprocess run.yaml "datasets=[{path: $fixtures/alpaca.jsonl, type: alpaca, split: '$slice'}]" \
    dataset_prepared_path="split_$name" > "split_$name.txt" 2>&1
done
check "split train[:95%] takes 15 of 16 records" grep -q "takes records 0 to 15 of 16" split_train__95__.txt
check "split train[:95%] prepares 15 documents" grep -q "\.tok: 15 documents" split_train__95__.txt
check "split train[95%:] takes the last record" grep -q "\.tok: 1 documents" split_train_95___.txt
check "split train[-3:] takes the last 3" grep -q "takes records 13 to 16 of 16" split_train__3__.txt

# special_tokens: unk_token restating the tokenizer's own is accepted (axolotl's Llama 2 configs); another is refused
cp -r "$fixtures/bytes_tokenizer" tok_unk
sed -i 's/"bos_token": "<s>",/"bos_token": "<s>", "unk_token": "<pad>",/' tok_unk/tokenizer_config.json
"$tiertrain" preprocess run.yaml tokenizer_config=tok_unk "special_tokens={unk_token: <pad>}" \
  dataset_prepared_path=unk_same > unk_same.txt 2>&1
check "special_tokens: unk_token equal to the tokenizer's is accepted" test $? -eq 0
"$tiertrain" preprocess run.yaml tokenizer_config=tok_unk "special_tokens={unk_token: <s>}" \
  dataset_prepared_path=unk_other > unk_other.txt 2>&1
check "special_tokens: another unk_token is refused by name" \
  grep -q "unk_token '<s>' is not the tokenizer's own unknown token ('<pad>'" unk_other.txt

"$tiertrain" train run.yaml > train.txt 2>&1
check "training succeeds" test $? -eq 0
check "train reuses the prepared file" grep -q "data: reusing the prepared dataset last_run_prepared/" train.txt
check "documents, one per sequence" grep -q "16 training and 0 eval documents" train.txt
check "4 steps logged" test "$(grep -c '"loss"' out/metrics.jsonl)" -eq 4
check "output_dir holds the tokenizer the run used" cmp -s "$fixtures/bytes_tokenizer/tokenizer.json" out/tokenizer.json
check "... and its tokenizer_config.json" \
  cmp -s "$fixtures/bytes_tokenizer/tokenizer_config.json" out/tokenizer_config.json
check "... and a model card with the run's configuration" \
  grep -q "trained by tiertrain for 4 optimizer steps" out/README.md
check "... the configuration as YAML that loads back" grep -q "^learning_rate: 0.003$" out/README.md
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

# bad data: clear errors, exit status 1
printf '{"instruction": "a", "output": "b"}\n{"instruction": "a"}\n' > bad.jsonl
"$tiertrain" preprocess run.yaml "datasets=[{path: bad.jsonl, type: alpaca}]" > bad.txt 2>&1
check "a missing field stops preprocess" test $? -eq 1
check "... naming file, line and field" grep -q "bad.jsonl:2: the record has no field 'output'" bad.txt

# chat_template: a tokenizer directory whose tokenizer_config.json carries a chat template
# (tokenizer_default), ShareGPT records mapped by message_property_mappings, preprocess, then two
# training steps. Each assistant turn's content and the EOS after it train: with one token per
# byte that is the answers' bytes plus one EOS per answer.
byte_chat_tokenizer "$source_dir" chat_tok
answers=0; turns=0
: > chats.jsonl
for i in 1 2 3 4 5 6 7 8; do
  a="Answer number $i, with $((i * i)) in it."
  printf '{"conversations": [{"from": "system", "value": "Be kind."}, {"from": "human", "value": "Question %d?"}, {"from": "gpt", "value": "%s"}, {"from": "human", "value": "More?"}, {"from": "gpt", "value": "Yes %d."}]}\n' "$i" "$a" "$i" >> chats.jsonl
  b="Yes $i."
  answers=$((answers + ${#a} + ${#b})); turns=$((turns + 2))
done
chat_expected=$((answers + turns))
cat > chat.yaml <<YAML
model_config: model/config.json
initializer_range: 0.1
tokenizer_config: chat_tok
datasets:
  - path: chats.jsonl
    type: chat_template
    field_messages: conversations
    message_property_mappings: {role: from, content: value}
sequence_len: 256
micro_batch_size: 2
max_steps: 2
output_dir: out_chat
dataset_prepared_path: chat_prepared
YAML
"$tiertrain" preprocess chat.yaml > chat_pre.txt 2>&1
check "chat preprocess succeeds" test $? -eq 0
check "... with the tokenizer's template" grep -q "chats.jsonl renders with chat_tok/tokenizer_config.json: chat_template" chat_pre.txt
check "... 8 documents, the answers and their EOS trained ($chat_expected)" grep -q "8 documents, [0-9]* tokens, $chat_expected of them trained" chat_pre.txt
"$tiertrain" train chat.yaml > chat_train.txt 2>&1
check "chat training succeeds" test $? -eq 0
check "... on the prepared file" grep -q "data: reusing the prepared dataset chat_prepared/" chat_train.txt
check "... 2 steps logged" test "$(grep -c '"loss"' out_chat/metrics.jsonl)" -eq 2
check "... the effective config keeps the mappings" grep -q "message_property_mappings: {role: from, content: value}" out_chat/checkpoint-2/run.yaml
# a conversation longer than sequence_len is dropped before its turns are located (each a re-render of the whole
# conversation: 4000 turns took minutes), and the others are kept as they were
python3 -c '
import json
turns = [{"from": "human" if t % 2 == 0 else "gpt", "value": "turn %d of the long one" % t} for t in range(4000)]
print(json.dumps({"conversations": turns}))' > long_chat.jsonl
cat chats.jsonl >> long_chat.jsonl
start=$(date +%s)
"$tiertrain" preprocess chat.yaml "datasets=[{path: long_chat.jsonl, type: chat_template, field_messages: conversations, message_property_mappings: {role: from, content: value}}]" \
  dataset_prepared_path=long_prepared > long_chat.txt 2>&1
check "a 4000-turn conversation over sequence_len is dropped" grep -q "dropped 1 document(s) longer than sequence_len 256" long_chat.txt
check "... the other 8 kept as before ($chat_expected trained)" grep -q "8 documents, [0-9]* tokens, $chat_expected of them trained" long_chat.txt
check "... without locating its 4000 turns ($(( $(date +%s) - start )) s)" test $(( $(date +%s) - start )) -lt 30
"$tiertrain" preprocess chat.yaml train_on_eos=none > chat_none.txt 2>&1
check "train_on_eos none: only the answers ($answers)" grep -q "8 documents, [0-9]* tokens, $answers of them trained" chat_none.txt
# an unknown role and a template that raises: file, line, field and the template's message
printf '{"conversations": [{"from": "human", "value": "a"}, {"from": "gpt", "value": "b"}]}\n{"conversations": [{"from": "narrator", "value": "c"}]}\n' > badchat.jsonl
"$tiertrain" preprocess chat.yaml "datasets=[{path: badchat.jsonl, type: chat_template, field_messages: conversations, message_property_mappings: {role: from, content: value}}]" > badchat.txt 2>&1
check "an unknown role stops preprocess" test $? -eq 1
check "... naming file, line, message and field" grep -q "badchat.jsonl:2: conversations\[0\].from is 'narrator'" badchat.txt
"$tiertrain" preprocess chat.yaml "chat_template_jinja=\"{{ raise_exception('roles must alternate') }}\"" > raise.txt 2>&1
check "a template that raises stops preprocess" test $? -eq 1
check "... naming the record and showing its message" grep -q "chats.jsonl:1: the chat template (chat_template_jinja) fails on this conversation: roles must alternate" raise.txt
# issue 14's chat keys from a YAML file: a message's own training field and character spans, split_thinking,
# chat_template_kwargs; a span past its content stops preprocess naming the file, line, message and field
printf '%s\n' '{"messages": [{"role": "user", "content": "hi", "train": true}, {"role": "assistant", "content": "<think>r</think>abcdef", "spans": [{"begin_offset": 1, "end_offset": 3, "train": true}]}]}' > spans.jsonl
cat > chat_keys.yaml <<YAML
model_config: model/config.json
tokenizer_config: chat_tok
datasets:
  - path: spans.jsonl
    type: chat_template
    message_field_training: train
    message_field_training_detail: spans
    split_thinking: true
    train_on_eos: none
chat_template_jinja: "{{ mark }}{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
chat_template_kwargs: {mark: "#"}
sequence_len: 256
output_dir: out_chat_keys
dataset_prepared_path: chat_keys_prepared
YAML
"$tiertrain" preprocess chat_keys.yaml > chat_keys.txt 2>&1
check "chat keys: preprocess succeeds" test $? -eq 0
check "... the user's own field and the spans' 3 characters train (hi + bcd = 5)" \
  grep -q "1 documents, 26 tokens, 5 of them trained" chat_keys.txt
sed 's/"end_offset": 3/"end_offset": 6/' spans.jsonl > badspans.jsonl
"$tiertrain" preprocess chat_keys.yaml "datasets=[{path: badspans.jsonl, type: chat_template, message_field_training_detail: spans, split_thinking: true}]" > badspans.txt 2>&1
check "a span past its content stops preprocess" test $? -eq 1
check "... naming file, line, message and field" \
  grep -q "badspans.jsonl:1: messages\[1\].spans\[0\]: end_offset 6 is past the content's last character (6 characters, so at most 5" badspans.txt

# tool-call arguments given as JSON text: parsed as axolotl parses them (a template that concatenates them, as
# DeepSeek-V3's does, then fails and the error names the way out), or kept as text with tool_call_arguments: as_given
printf '%s\n' '{"messages": [{"role": "user", "content": "weather?"}, {"role": "assistant", "content": null, "tool_calls": [{"type": "function", "function": {"name": "get", "arguments": "{\"city\": \"Oslo\"}"}}]}]}' > calls.jsonl
calls_template="{% for m in messages %}<{{ m.role }}>{% if m.content is none %}{% for c in m.tool_calls %}{{ c.function.name + ' ' + c.function.arguments }}{% endfor %}{% else %}{{ m.content }}{% endif %}{% endfor %}"
"$tiertrain" preprocess chat_keys.yaml "datasets=[{path: calls.jsonl, type: chat_template}]" \
  "chat_template_jinja=\"$calls_template\"" dataset_prepared_path=p_calls_parsed > calls_parsed.txt 2>&1
check "tool-call arguments parsed (axolotl) into a template that concatenates them: an error naming as_given" \
  grep -q "parsed into objects as axolotl parses them: \`tool_call_arguments: as_given\`" calls_parsed.txt
"$tiertrain" preprocess chat_keys.yaml "datasets=[{path: calls.jsonl, type: chat_template, tool_call_arguments: as_given}]" \
  "chat_template_jinja=\"$calls_template\"" dataset_prepared_path=p_calls_given > calls_given.txt 2>&1
check "... tool_call_arguments: as_given renders the text (transformers)" grep -q "1 documents, .* trained" calls_given.txt
"$tiertrain" preprocess chat_keys.yaml "datasets=[{path: calls.jsonl, type: chat_template, tool_call_arguments: raw}]" \
  > calls_bad.txt 2>&1
check "... another value is refused naming both" grep -q "tool_call_arguments: expected parsed .* or as_given" calls_bad.txt

# dataset_exact_deduplication: the 16 alpaca records, 5 of them again (one of those in a second entry), prepare 16
# documents, the bytes of the records alone
head -n 4 "$fixtures/alpaca.jsonl" > dup_a.jsonl
cat "$fixtures/alpaca.jsonl" >> dup_a.jsonl
sed -n 9p "$fixtures/alpaca.jsonl" > dup_b.jsonl
"$tiertrain" preprocess run.yaml "datasets=[{path: dup_a.jsonl, type: alpaca}, {path: dup_b.jsonl, type: alpaca}]" \
  dataset_exact_deduplication=true shuffle_merged_datasets=false dataset_prepared_path=p_dedup > dedup.txt 2>&1
check "dataset_exact_deduplication leaves out the 5 repeated records" \
  grep -q "left out 5 document(s) equal to an earlier one, 16 kept" dedup.txt
"$tiertrain" preprocess run.yaml "datasets=[{path: dup_a.jsonl, type: alpaca}]" shuffle_merged_datasets=false \
  dataset_prepared_path=p_nodedup > nodedup.txt 2>&1
check "... without it they stay (20 documents)" grep -q ": 20 documents" nodedup.txt
"$tiertrain" preprocess run.yaml "datasets=[{path: $fixtures/alpaca.jsonl, type: alpaca}]" shuffle_merged_datasets=false \
  dataset_prepared_path=p_plain16 > plain16.txt 2>&1
check "... the kept documents are the records' own, in their first order: the plain file's bytes" \
  cmp -s "$(ls p_dedup/*.tok)" "$(ls p_plain16/*.tok)"

# resize_token_embeddings_to_32x: the same run where the model has the rows already (vocab 288 for the byte
# tokenizer's 259); refused with the sizes where axolotl would grow the embedding (vocab 259 -> 288)
"$tiertrain" train run.yaml resize_token_embeddings_to_32x=true output_dir=out_resize max_steps=1 \
  dataset_prepared_path=p_resize > resize.txt 2>&1
check "resize_token_embeddings_to_32x that would resize is refused, naming the sizes" \
  grep -q "would grow the model's embedding and LM head from vocab_size 259 to 288 rows" resize.txt
mkdir -p model288 && sed 's/"vocab_size": 259/"vocab_size": 288/' model/config.json > model288/config.json
"$tiertrain" train run.yaml model_config=model288/config.json resize_token_embeddings_to_32x=true \
  output_dir=out_resize288 max_steps=1 dataset_prepared_path=p_resize > resize288.txt 2>&1
check "... and trains where the model has the rows" test -f out_resize288/model.safetensors

echo "test_sft_cli: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
