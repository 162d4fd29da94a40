#!/usr/bin/env bash
# Hub names read from the local Hugging Face cache (src/core/hf_cache.h): a cache laid out as huggingface_hub lays
# it out (models--<owner>--<name>/refs/<revision> holding a commit, snapshots/<commit>/ the files) is built here from
# a model tiertrain trains first; then base_model: tiny/bytes-qwen3 fine-tunes it from HF_HUB_CACHE, HF_HOME/hub and
# XDG_CACHE_HOME/huggingface/hub, with revision_of_model (a branch, a commit), tokenizer_config and lora_model_dir as
# Hub names too, and what is saved names the Hub repository (adapter_config.json's base_model_name_or_path, the
# model card). An absent repository, revision or snapshot stops the run naming the path looked for, `hf download`,
# and never reaches the network. merge, inference and tokenize take Hub names as well.
# Arguments: tiertrain binary, source dir, scratch dir.
set -uo pipefail
tiertrain=$1; source_dir=$2; scratch=$3
rm -rf "$scratch"; mkdir -p "$scratch"; cd "$scratch"
source "$source_dir/tests/shell_fixtures.sh"
fixtures=$source_dir/tests/fixtures/data
unset HF_HUB_CACHE HUGGINGFACE_HUB_CACHE HF_HOME XDG_CACHE_HOME

# the "Hub" model: a tiny byte-level Qwen3 trained two steps from random init, saved whole with its tokenizer
byte_qwen3 model
cat > base.yaml <<YAML
model_config: model/config.json
tokenizer_config: $fixtures/bytes_tokenizer
datasets:
  - path: $fixtures/alpaca.jsonl
    type: alpaca
sequence_len: 256
micro_batch_size: 2
max_steps: 2
learning_rate: 1.0e-3
output_dir: hub_model
YAML
"$tiertrain" train base.yaml > base.txt 2>&1
check "the model to cache trains" test -f hub_model/model.safetensors
"$tiertrain" train base.yaml max_steps=3 output_dir=hub_model_v1 > base_v1.txt 2>&1
check "... and its revision v1 (a step further)" test -f hub_model_v1/model.safetensors

# cache/models--tiny--bytes-qwen3: main and v1 point at two snapshots (v1's weights trained a step further)
main_commit=0123456789abcdef0123456789abcdef01234567
v1_commit=89abcdef0123456789abcdef0123456789abcdef
make_cache() { # ROOT
  local repo=$1/models--tiny--bytes-qwen3
  mkdir -p "$repo/refs" "$repo/snapshots/$main_commit" "$repo/snapshots/$v1_commit" "$repo/blobs"
  cp hub_model/config.json hub_model/model.safetensors hub_model/tokenizer.json hub_model/tokenizer_config.json \
    "$repo/snapshots/$main_commit/"
  cp -r "$repo/snapshots/$main_commit/." "$repo/snapshots/$v1_commit/"
  cp hub_model_v1/model.safetensors "$repo/snapshots/$v1_commit/"
  printf '%s' "$main_commit" > "$repo/refs/main"
  printf '%s\n' "$v1_commit" > "$repo/refs/v1"
}
make_cache hub_cache
cat > tune.yaml <<YAML
base_model: tiny/bytes-qwen3
datasets:
  - path: $fixtures/alpaca.jsonl
    type: alpaca
sequence_len: 256
micro_batch_size: 2
max_steps: 2
learning_rate: 1.0e-3
adapter: lora
lora_r: 4
lora_alpha: 8
lora_target_linear: true
output_dir: tuned
YAML
HF_HUB_CACHE=$PWD/hub_cache "$tiertrain" train tune.yaml > tune.txt 2>&1
check "base_model: tiny/bytes-qwen3 trains from HF_HUB_CACHE" test -f tuned/adapter_model.safetensors
check "... the adapter names the Hub repository" \
  grep -q '"base_model_name_or_path": "tiny/bytes-qwen3"' tuned/adapter_config.json
check "... so does the model card" grep -q "^base_model: tiny/bytes-qwen3" tuned/README.md
loss_main=$(grep -o '"loss": [0-9.e+-]*' tuned/metrics.jsonl | head -1)

# the same cache under HF_HOME/hub and XDG_CACHE_HOME/huggingface/hub, and with a revision
mkdir -p hf_home && mv hub_cache hf_home/hub
HF_HOME=$PWD/hf_home "$tiertrain" train tune.yaml output_dir=tuned_home > home.txt 2>&1
check "HF_HOME/hub is the cache when HF_HUB_CACHE is unset" test -f tuned_home/adapter_model.safetensors
check "... the same first loss ($loss_main)" grep -q "$loss_main" tuned_home/metrics.jsonl
mkdir -p xdg/huggingface && mv hf_home/hub xdg/huggingface/hub
XDG_CACHE_HOME=$PWD/xdg "$tiertrain" train tune.yaml output_dir=tuned_xdg > xdg.txt 2>&1
check "XDG_CACHE_HOME/huggingface/hub without HF_HOME" test -f tuned_xdg/adapter_model.safetensors
mv xdg/huggingface/hub hub_cache
export HF_HUB_CACHE=$PWD/hub_cache
first_loss() { grep -o '"loss": [0-9.e+-]*' "$1/metrics.jsonl" | head -1; }
"$tiertrain" train tune.yaml revision_of_model=v1 output_dir=tuned_v1 > v1.txt 2>&1
check "revision_of_model: v1 (a branch in refs/) trains v1's weights: another first loss than main's" \
  test -n "$(first_loss tuned_v1)" -a "$(first_loss tuned_v1)" != "$loss_main"
"$tiertrain" train tune.yaml model_revision=$v1_commit output_dir=tuned_commit > commit.txt 2>&1
check "model_revision (axolotl's other name) as v1's commit hash: v1's first loss" \
  test -n "$(first_loss tuned_commit)" -a "$(first_loss tuned_commit)" = "$(first_loss tuned_v1)"
"$tiertrain" train tune.yaml tokenizer_config=tiny/bytes-qwen3 lora_model_dir=null output_dir=tuned_tok > tok.txt 2>&1
check "tokenizer_config as a Hub name" test -f tuned_tok/adapter_model.safetensors
mkdir -p "hub_cache/models--tiny--adapter/refs" "hub_cache/models--tiny--adapter/snapshots/$main_commit"
cp tuned/adapter_model.safetensors tuned/adapter_config.json "hub_cache/models--tiny--adapter/snapshots/$main_commit/"
printf '%s' "$main_commit" > hub_cache/models--tiny--adapter/refs/main
"$tiertrain" train tune.yaml lora_model_dir=tiny/adapter output_dir=tuned_adapter > adapter.txt 2>&1
check "lora_model_dir as a Hub name continues from the cached adapter" test -f tuned_adapter/adapter_model.safetensors

# reinit_weights: the cached model's architecture from random init, as model_config trains it (its tokenizer too)
cat > reinit.yaml <<YAML
base_model: tiny/bytes-qwen3
reinit_weights: true
datasets:
  - path: $fixtures/alpaca.jsonl
    type: alpaca
sequence_len: 256
micro_batch_size: 2
max_steps: 2
learning_rate: 1.0e-3
output_dir: reinit
YAML
"$tiertrain" train reinit.yaml > reinit.txt 2>&1
snapshot=$PWD/hub_cache/models--tiny--bytes-qwen3/snapshots/$main_commit
"$tiertrain" train reinit.yaml reinit_weights=false base_model=null model_config=$snapshot tokenizer_config=$snapshot \
  output_dir=random > random.txt 2>&1
check "reinit_weights: true trains the base model's config.json from random init: model_config's first loss" \
  test -n "$(first_loss reinit)" -a "$(first_loss reinit)" = "$(first_loss random)"
check "... and says so" grep -q "reinit_weights: true" reinit.txt

# the commands that take directories take Hub names too
"$tiertrain" merge --base tiny/bytes-qwen3 --adapter tiny/adapter -o merged > merge.txt 2>&1
check "merge --base and --adapter as Hub names" test -f merged/model.safetensors
"$tiertrain" inference --model tiny/bytes-qwen3 --adapter tiny/adapter --prompt "Say hi." --max-new-tokens 3 --ids \
  > infer.txt 2>&1
check "inference --model and --adapter as Hub names" test $? -eq 0
"$tiertrain" tokenize --tokenizer tiny/bytes-qwen3 -o hub.tok "$source_dir/README.md" > tokenize.txt 2>&1
check "tokenize --tokenizer as a Hub name" test -s hub.tok
"$tiertrain" merge --base tiny/absent --adapter tiny/adapter -o merged2 > merge_absent.txt 2>&1
check "merge --base of an absent repository names it" grep -q "merge: --base 'tiny/absent': it is not a path here" \
  merge_absent.txt

# what is not there stops the run, naming where it looked, and never downloads
"$tiertrain" plan tune.yaml base_model=tiny/absent > absent.txt 2>&1
check "an absent repository is an error (exit 1)" test $? -eq 1
check "... naming the path looked for" grep -q "hub_cache/models--tiny--absent: No such file or directory" absent.txt
check "... and how to fetch it" grep -q "hf download tiny/absent" absent.txt
"$tiertrain" plan tune.yaml revision_of_model=v2 > norev.txt 2>&1
check "an absent revision is an error naming refs/v2" grep -q "no revision 'v2' of it (.*refs/v2 is absent" norev.txt
rm -rf "hub_cache/models--tiny--bytes-qwen3/snapshots/$v1_commit"
"$tiertrain" plan tune.yaml revision_of_model=v1 > nosnap.txt 2>&1
check "a revision whose snapshot is missing is an error naming it" \
  grep -q "points revision 'v1' at .*snapshots/$v1_commit, which is not there" nosnap.txt
"$tiertrain" plan tune.yaml base_model=../tiny > dots.txt 2>&1
check "a relative path that is no directory is not taken for a Hub name" grep -q "base_model '../tiny' does not exist" dots.txt
check "... nor looked for in the cache" bash -c '! grep -q "Hugging Face cache" dots.txt'
"$tiertrain" plan reinit.yaml model_config=$snapshot/config.json > reinit_both.txt 2>&1
check "reinit_weights beside model_config is refused" grep -q "reinit_weights: true and model_config are both set" \
  reinit_both.txt
"$tiertrain" plan reinit.yaml base_model=tiny/absent > reinit_absent.txt 2>&1
check "reinit_weights of an absent repository names base_model and the cache path" \
  grep -q "base_model 'tiny/absent'.*models--tiny--absent" reinit_absent.txt

echo "test_hf_cache: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
