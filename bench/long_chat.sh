#!/usr/bin/env bash
# One long conversation through `tiertrain preprocess` (docs/benchmarks.md, "Preprocessing at scale"): a record of
# TURNS messages (user and assistant by turns, short texts), the real Qwen3 tokenizer and its chat template, a
# sequence_len that keeps it, so that every assistant turn is located (axolotl's find_turn: the conversation rendered
# and tokenized again with the turn's content replaced). Prints the seconds and the peak resident memory preprocess
# reports, and the prepared file's hash, so that two builds can be compared byte for byte.
#
# usage: bench/long_chat.sh TIERTRAIN TOKENIZER_DIR WORK_DIR TURNS
#   TOKENIZER_DIR: tokenizer.json and tokenizer_config.json of Qwen3 (the tests fetch it:
#   build/tests/tokenizer_cache/qwen3/package/models)
set -euo pipefail
tiertrain=$1; tokenizer=$2; work=$3; turns=$4
mkdir -p "$work/model"
python3 - "$work" "$turns" <<'PY'
import json, sys
work, turns = sys.argv[1], int(sys.argv[2])
json.dump({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 32, "intermediate_size": 48,
           "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "num_hidden_layers": 2,
           "vocab_size": 151936, "max_position_embeddings": 40960, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
           "tie_word_embeddings": True, "hidden_act": "silu"}, open(work + "/model/config.json", "w"))
messages = []
for i in range(turns // 2):
    messages.append({"role": "user", "content": "question number %d about things" % i})
    messages.append({"role": "assistant", "content": "answer number %d, said plainly." % i})
with open(work + "/long_chat.jsonl", "w") as f:
    f.write(json.dumps({"messages": messages}) + "\n")
PY
cat > "$work/run.yaml" <<YAML
model_config: $work/model/config.json
tokenizer_config: $tokenizer
datasets:
  - path: $work/long_chat.jsonl
    type: chat_template
sequence_len: 262144
micro_batch_size: 1
output_dir: $work/out
YAML
rm -rf "$work/prepared"
"$tiertrain" preprocess "$work/run.yaml" dataset_prepared_path="$work/prepared" | tee "$work/preprocess.txt" | grep -E "wrote|done in"
sha256sum "$work"/prepared/*.tok
