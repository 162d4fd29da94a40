#!/usr/bin/env bash
# `tiertrain inference` end to end:
# - greedy decoding of every family's tiny fixture, with and without its peft adapter, equals transformers' generate
#   (tests/fixtures/generation/greedy.txt, made by tools/make_generation_golden.py): every id on the CPU backend (fp32);
#   on the GPU (TT_TEST_OVERRIDES=device=cuda, bf16) the ids up to the first step whose two largest logits are closer
#   than bf16's rounding can tell apart (GPU_GAP);
# - a tiny byte-level model trained to answer a chat (full fine-tuning, then a LoRA adapter teaching another answer)
#   answers through --config, --model/--adapter, stdin and a --prompts file, rendered with the run's chat template and
#   stopping at its EOS;
# - `tiertrain evaluate` gives the eval loss the training loop logged at the same weights (the final model or adapter,
#   a checkpoint);
# - sampling repeats with its seed, top-k 1 is greedy, and bad input is refused by name.
# Arguments: tiertrain binary, source dir, scratch dir. TT_TEST_OVERRIDES: key=value overrides for every command.
set -uo pipefail
tiertrain=$1; source_dir=$2; scratch=$3
rm -rf "$scratch"; mkdir -p "$scratch"; cd "$scratch"
source "$source_dir/tests/shell_fixtures.sh"
read -r -a overrides <<< "${TT_TEST_OVERRIDES:-}"
gpu=false
for o in "${overrides[@]}"; do [ "$o" = device=cuda ] && gpu=true; done
GPU_GAP=0.25

# ---- greedy ids against transformers ----
fixtures=$source_dir/tests/fixtures
while read -r name model adapter prompt ids gaps; do
  args=(--model "$fixtures/$model" --prompt-ids "$prompt" --max-new-tokens 24 --ids --max-context 64)
  [ "$adapter" != - ] && args+=(--adapter "$fixtures/$model/$adapter")
  "$tiertrain" inference "${args[@]}" "${overrides[@]}" > "ids_$name.txt" 2> "err_$name.txt"
  got=$(tr ' ' ',' < "ids_$name.txt")
  if ! $gpu; then
    check "$name: greedy ids equal transformers' ($ids, got $got)" test "$got" = "$ids"
    continue
  fi
  # the steps before the first near tie must agree
  sure=$(echo "$gaps" | tr ',' '\n' | awk -v tol=$GPU_GAP '$1 < tol { exit } { n++ } END { print n + 0 }')
  want=$(echo "$ids" | cut -d, -f1-"$((sure > 0 ? sure : 1))")
  check "$name: the first $sure greedy ids equal transformers' ($want, got $got)" \
    bash -c "[ $sure -eq 0 ] || [ \"\${1:0:${#want}}\" = \"$want\" ]" _ "$got"
done < "$fixtures/generation/greedy.txt"

# ---- a model trained to answer ----
byte_qwen3 model
byte_chat_tokenizer "$source_dir" chat_tok
: > blue.jsonl
for i in 1 2 3 4; do
  printf '{"messages": [{"role": "user", "content": "Color %d?"}, {"role": "assistant", "content": "Blue number %d."}]}\n' \
    "$i" "$i" >> blue.jsonl
done
sed 's/Blue/Red/' blue.jsonl > red.jsonl
cat > full.yaml <<YAML
model_config: model/config.json
initializer_range: 0.1
tokenizer_config: chat_tok
datasets:
  - path: blue.jsonl
    type: chat_template
sequence_len: 64
micro_batch_size: 4
max_steps: 150
learning_rate: 1.0e-2
lr_scheduler: constant
output_dir: out_full
logging_steps: 50
YAML
cat > lora.yaml <<YAML
base_model: out_full
tokenizer_config: chat_tok
datasets:
  - path: red.jsonl
    type: chat_template
adapter: lora
lora_r: 8
lora_alpha: 16
lora_target_linear: true
sequence_len: 64
micro_batch_size: 4
max_steps: 100
learning_rate: 2.0e-2
lr_scheduler: constant
output_dir: out_lora
dataset_prepared_path: lora_prepared
YAML
"$tiertrain" inference --config full.yaml --prompt "Color 3?" "${overrides[@]}" > before.txt 2>&1
check "before training, the run's output is refused by name" grep -q "out_full/config.json is not there" before.txt
"$tiertrain" train full.yaml "${overrides[@]}" > train_full.txt 2>&1
check "full fine-tuning succeeds" test $? -eq 0
"$tiertrain" inference --config full.yaml --prompt "Color 3?" --show-prompt "${overrides[@]}" > full.txt 2> full_err.txt
check "the fine-tuned model answers its question" test "$(cat full.txt)" = "Blue number 3."
check "... through the run's chat template" grep -q "prompt (25 tokens): <user>Color 3?<assistant>" full_err.txt
check "... and stops at its EOS" grep -q "15 new tokens (stopped at an end token)" full_err.txt
"$tiertrain" inference --config full.yaml --prompt "Color 3?" --chat-template none --show-prompt "${overrides[@]}" \
  > raw.txt 2> raw_err.txt
check "--chat-template none: the prompt as the tokenizer encodes it (BOS first)" grep -q "prompt (9 tokens): <s>Color 3?" raw_err.txt
"$tiertrain" inference --config full.yaml --prompt "Color 3?" --max-new-tokens 4 "${overrides[@]}" > short.txt 2>&1
check "--max-new-tokens 4: four tokens" grep -q "^Blue$" short.txt

"$tiertrain" train lora.yaml "${overrides[@]}" > train_lora.txt 2>&1
check "LoRA fine-tuning on the fine-tuned model succeeds" test $? -eq 0
"$tiertrain" inference --config lora.yaml --prompt "Color 2?" "${overrides[@]}" > lora.txt 2> lora_err.txt
check "the run's adapter answers its own way" test "$(cat lora.txt)" = "Red number 2."
check "... loaded from output_dir" grep -q "with the adapter out_lora" lora_err.txt
printf 'Color 4?\nColor 1?\n' | "$tiertrain" inference --model out_full --adapter out_lora "${overrides[@]}" \
  > stdin.txt 2> stdin_err.txt
check "--model --adapter, a prompt a line of stdin" test "$(cat stdin.txt)" = "$(printf 'Red number 4.\nRed number 1.')"
check "... with the tokenizer's chat template" grep -q "greedy, chat template" stdin_err.txt
cat > prompts.jsonl <<'JSON'
{"messages": [{"role": "user", "content": "Color 2?"}]}
{"prompt": "Color 3?"}
Color 1?
JSON
"$tiertrain" inference --model out_full --prompts prompts.jsonl "${overrides[@]}" > prompts.txt 2>&1
check "--prompts: messages, prompt and text lines" \
  test "$(grep -c 'Blue number' prompts.txt)" -eq 3
check "... each answered in turn" grep -q "Blue number 2." prompts.txt

# ---- evaluate: the eval loss of the run's model equals the training loop's at the same weights ----
for i in 5 6 7 8; do
  printf '{"messages": [{"role": "user", "content": "Color %d?"}, {"role": "assistant", "content": "Blue number %d."}]}\n' \
    "$i" "$i" >> eight.jsonl
done
cat blue.jsonl >> eight.jsonl
for kind in full lora; do
  sed -e "s/^output_dir: .*/output_dir: out_eval_$kind/" -e "s/path: [a-z]*.jsonl/path: eight.jsonl/" \
      -e "s/^max_steps: .*/max_steps: 20/" -e "/^dataset_prepared_path/d" "$kind.yaml" > "eval_$kind.yaml"
  printf 'val_set_size: 0.25\neval_steps: 10\nsave_steps: 10\ndataset_prepared_path: eval_prepared\n' >> "eval_$kind.yaml"
  "$tiertrain" evaluate --config "eval_$kind.yaml" "${overrides[@]}" > "evaluate_none_$kind.txt" 2>&1
  check "$kind: evaluate before training is refused by name" grep -q "holds neither the run's final" "evaluate_none_$kind.txt"
  "$tiertrain" train "eval_$kind.yaml" "${overrides[@]}" > "train_eval_$kind.txt" 2>&1
  check "$kind: training with an eval split succeeds" test $? -eq 0
  last=$(grep '"step": 20, "eval_loss"' "out_eval_$kind/metrics.jsonl" | sed -E 's/.*"eval_loss": ([^,]*),.*/\1/')
  at10=$(grep '"step": 10, "eval_loss"' "out_eval_$kind/metrics.jsonl" | sed -E 's/.*"eval_loss": ([^,]*),.*/\1/')
  "$tiertrain" evaluate --config "eval_$kind.yaml" "${overrides[@]}" > "evaluate_$kind.txt" 2>&1
  check "$kind: evaluate of the final model gives the last step's eval loss ($last)" \
    grep -q "the final [a-z]* in out_eval_$kind on 2 eval documents: loss $last, perplexity" "evaluate_$kind.txt"
  "$tiertrain" evaluate --config "eval_$kind.yaml" --checkpoint "out_eval_$kind/checkpoint-10" "${overrides[@]}" \
    > "evaluate10_$kind.txt" 2>&1
  check "$kind: evaluate of checkpoint-10 gives step 10's ($at10)" \
    grep -q "checkpoint-10 (step 10) on 2 eval documents: loss $at10, perplexity" "evaluate10_$kind.txt"
done

# --dataset: every document of a file in the run's format; the model trained on the blue answers knows them best
"$tiertrain" evaluate --config full.yaml --dataset blue.jsonl "${overrides[@]}" > evaluate_blue.txt 2>&1
"$tiertrain" evaluate --config full.yaml --dataset red.jsonl "${overrides[@]}" > evaluate_red.txt 2>&1
check "evaluate --dataset takes every document of the file" grep -q "on 4 eval documents: loss" evaluate_red.txt
blue_loss=$(sed -nE 's/.*: loss ([^,]*), perplexity.*/\1/p' evaluate_blue.txt)
red_loss=$(sed -nE 's/.*: loss ([^,]*), perplexity.*/\1/p' evaluate_red.txt)
check "... and the answers the model learned cost less than the others ($blue_loss < $red_loss)" \
  awk -v a="$blue_loss" -v b="$red_loss" 'BEGIN { exit !(a + 0 < b + 0 && a != "") }'

# ---- sampling ----
sample=(--model out_full --prompt "Color 2?" --temperature 1.5 --max-new-tokens 20 --ids)
"$tiertrain" inference "${sample[@]}" --seed 7 "${overrides[@]}" > seed7a.txt 2>/dev/null
"$tiertrain" inference "${sample[@]}" --seed 7 "${overrides[@]}" > seed7b.txt 2>/dev/null
check "a seed repeats a sampled answer" cmp -s seed7a.txt seed7b.txt
"$tiertrain" inference "${sample[@]}" --top-k 1 "${overrides[@]}" > topk1.txt 2>/dev/null
"$tiertrain" inference --model out_full --prompt "Color 2?" --max-new-tokens 20 --ids "${overrides[@]}" > greedy.txt 2>/dev/null
check "top-k 1 is greedy" cmp -s topk1.txt greedy.txt
"$tiertrain" inference "${sample[@]}" --top-p 0.000001 "${overrides[@]}" > topp.txt 2>/dev/null
check "a tiny top-p is greedy" cmp -s topp.txt greedy.txt

# ---- bad input ----
"$tiertrain" inference --model out_full --prompt-ids 5,300 "${overrides[@]}" > bad_id.txt 2>&1
check "an id past the vocabulary is refused" grep -q "token 1 of the prompt is id 300, but the model's vocab_size is 259" bad_id.txt
"$tiertrain" inference --model out_full --prompt "$(printf 'x%.0s' {1..80})" --max-context 32 "${overrides[@]}" \
  > too_long.txt 2>&1
check "a prompt longer than the context is refused" grep -q "the context holds 32; raise --max-context" too_long.txt
"$tiertrain" inference --model out_full --temperature -1 > bad_t.txt 2>&1
check "a negative temperature is refused" grep -q -- "--temperature needs a number in" bad_t.txt
"$tiertrain" inference --config full.yaml --adapter nowhere --prompt x "${overrides[@]}" > bad_adapter.txt 2>&1
check "a missing adapter directory is refused by file" grep -q "nowhere/adapter_config.json" bad_adapter.txt
"$tiertrain" inference --model out_full --prompt "Color 1?" --stop "Blue" "${overrides[@]}" > bad_stop.txt 2>&1
check "a --stop that is not one token is refused" grep -q -- "--stop 'Blue' is not a token" bad_stop.txt

echo "inference_cli: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
