#!/usr/bin/env bash
# The preprocessing load test (docs/benchmarks.md, "Preprocessing at scale"): `tiertrain preprocess` of mixed JSONL
# (bench/preprocess_load_data.py: many documents, huge lines, long chats) at each size given, with the real Qwen3
# tokenizer and its chat template, three datasets (completion, chat_template, alpaca) of one run. Prints a row a size:
# bytes, seconds, MB/s, the peak resident memory, the tokens kept, and whether the peak stayed under the ceiling:
#   CEILING_MIB (default 4096), and at most 400 MiB + 7 bytes a token kept (the documents are held as 4-byte ids and
#   a label byte until the file is written; the rest is the records in flight, bounded by the chunk, not the file).
# Time proportional to bytes shows as a steady MB/s from size to size.
#
# usage: bench/preprocess_load.sh TIERTRAIN TOKENIZER_DIR WORK_DIR GB...
#   TOKENIZER_DIR: tokenizer.json and tokenizer_config.json of Qwen3 (the tests fetch it:
#   build/tests/tokenizer_cache/qwen3/package/models)
set -euo pipefail
tiertrain=$1; tokenizer=$2; work=$3; shift 3
here=$(cd "$(dirname "$0")" && pwd)
ceiling=${CEILING_MIB:-4096}
mkdir -p "$work/model"
python3 - "$work/model/config.json" <<'PY'
import json, sys
# a tiny Qwen3 with the tokenizer's vocabulary: preprocess reads only the vocabulary size
json.dump({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 32, "intermediate_size": 48,
           "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "num_hidden_layers": 2,
           "vocab_size": 151936, "max_position_embeddings": 40960, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
           "tie_word_embeddings": True, "hidden_act": "silu"}, open(sys.argv[1], "w"))
PY
status=0
printf '%-6s %14s %9s %8s %10s %14s %s\n' GB bytes seconds MB/s peak_MiB tokens_kept ceiling
for gb in "$@"; do
  data=$work/data_$gb
  [ -f "$data/alpaca.jsonl" ] || python3 "$here/preprocess_load_data.py" "$data" "$gb"
  cat > "$work/run_$gb.yaml" <<YAML
model_config: $work/model/config.json
tokenizer_config: $tokenizer
datasets:
  - path: $data/completion.jsonl
    type: completion
  - path: $data/chat.jsonl
    type: chat_template
  - path: $data/alpaca.jsonl
    type: alpaca
sequence_len: 4096
micro_batch_size: 1
output_dir: $work/out_$gb
dataset_prepared_path: $work/prepared_$gb
YAML
  rm -rf "$work/prepared_$gb"
  log=$work/preprocess_$gb.log
  "$tiertrain" preprocess "$work/run_$gb.yaml" > "$log" 2>&1 || { echo "preprocess failed: $log" >&2; tail "$log" >&2; exit 1; }
  bytes=$(cat "$data"/*.jsonl | wc -c)
  seconds=$(sed -n 's/.*done in \([0-9.]*\) s.*/\1/p' "$log")
  peak=$(sed -n 's/.*peak resident memory \([0-9]*\) MiB.*/\1/p' "$log")
  tokens=$(sed -n 's/.*documents, \([0-9]*\) tokens.*/\1/p' "$log")
  limit=$((400 + 7 * tokens / 1048576))
  [ "$limit" -gt "$ceiling" ] && limit=$ceiling
  verdict="under $limit MiB"
  if [ "$peak" -gt "$limit" ]; then verdict="OVER $limit MiB"; status=1; fi
  printf '%-6s %14s %9s %8.1f %10s %14s %s\n' "$gb" "$bytes" "$seconds" \
    "$(awk -v b="$bytes" -v s="$seconds" 'BEGIN { print b / 1e6 / s }')" "$peak" "$tokens" "$verdict"
done
exit $status
