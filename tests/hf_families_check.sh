#!/usr/bin/env bash
# Every family's fixture against transformers and peft (run where torch, transformers and peft are installed: the GPU
# machine). For each tests/fixtures/tiny_<family> (and the multimodal Gemma 3 checkpoint):
#   1. a full fine-tune of one step at learning rate 1e-30, saved: tests/hf_load_check.py loads it with transformers
#      (no missing or unexpected weights; the vision tower of the multimodal checkpoint kept) and its loss on the
#      fixture's golden batch is transformers' golden loss;
#   2. LoRA adapters on every linear layer (20 steps), saved in PEFT's format; a run that loads them (lora_dropout 0)
#      reports the loss of a fixed batch (4 rows of 32 tokens) on DEVICE (default cpu, the fp32 oracle); `tiertrain
#      merge` merges them: tests/peft_load_check.py attaches them with peft (every tensor loaded, adapter_config.json
#      read back), compares the adapted model's loss with tiertrain's (1e-4 relative on the CPU, 2e-2 on the GPU) and
#      the merged model's with peft's own merge.
# Passes when every check ends in OK; the last line is then "hf_families_check: all passed".
#   [FAMILIES="tiny_gemma2 ..."] [DEVICE=cuda] bash tests/hf_families_check.sh TIERTRAIN_BINARY [SCRATCH_DIR]
set -uo pipefail
tiertrain=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
source_dir=$(cd "$(dirname "$0")/.." && pwd)
scratch=${2:-${OUT:-/tmp}/hf-families}
device=${DEVICE:-cpu}
fixtures=$source_dir/tests/fixtures
rm -rf "$scratch"
mkdir -p "$scratch"
all_families="tiny_qwen3 tiny_llama tiny_qwen2 tiny_gemma3 tiny_gemma2 tiny_olmo2 tiny_smollm3 tiny_granite tiny_phi3"
read -r -a families <<< "${FAMILIES:-$all_families tiny_gemma3_multimodal}"
tolerance=1e-4
[ "$device" = cpu ] || tolerance=2e-2
failed=()
for family in "${families[@]}"; do
  base=$fixtures/$family
  work=$scratch/$family
  mkdir -p "$work/full"
  vocab=$(python3 -c "import json, sys; c = json.load(open(sys.argv[1])); print(c.get('text_config', c)['vocab_size'])" \
          "$base/config.json")
  python3 "$source_dir/bench/make_tokens.py" "$work/train.tok" "$vocab" 4000 > /dev/null
  python3 - "$work/batch.tok" "$vocab" <<'PY'
# 4 rows of 32 tokens + 1, other ids than the training file's
import array, random, struct, sys
rng = random.Random(11)
ids = array.array("I", (rng.randrange(int(sys.argv[2])) for _ in range(4 * 32 + 1)))
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<8sIIQII", b"TTTOKENS", 1, int(sys.argv[2]), len(ids), 0xFFFFFFFF, 0))
    f.write(ids.tobytes())
PY
  common=(datasets="[$work/train.tok]" sequence_len=32 micro_batch_size=2 val_set_size=0 progress=false device="$device")
  echo "== $family: a full fine-tune saved, loaded by transformers"
  if "$tiertrain" train base_model="$base" "${common[@]}" max_steps=1 learning_rate=1e-30 \
       output_dir="$work/full/$family" > "$work/full.log" 2>&1; then
    python3 "$source_dir/tests/hf_load_check.py" "$fixtures" "$work/full/$family" || failed+=("$family full")
  else
    echo "$family: the full fine-tune failed"; tail -5 "$work/full.log"; failed+=("$family full")
  fi
  echo "== $family: LoRA adapters, loaded by peft, merged"
  lora=(adapter=lora lora_r=4 lora_alpha=8 lora_target_linear=true)
  if "$tiertrain" train base_model="$base" "${common[@]}" "${lora[@]}" max_steps=20 learning_rate=1e-2 save_steps=0 \
       output_dir="$work/adapter" > "$work/lora.log" 2>&1 &&
     "$tiertrain" train base_model="$base" "${lora[@]}" lora_model_dir="$work/adapter" lora_dropout=0 \
       datasets="[$work/batch.tok]" sequence_len=32 micro_batch_size=4 max_steps=1 learning_rate=1e-30 val_set_size=0 \
       progress=false save_strategy=no device="$device" output_dir="$work/loss" > "$work/loss.log" 2>&1 &&
     "$tiertrain" merge --base "$base" --adapter "$work/adapter" -o "$work/merged" > "$work/merge.log" 2>&1; then
    python3 "$source_dir/tests/peft_load_check.py" --base "$base" --adapter "$work/adapter" --merged "$work/merged" \
      --tokens "$work/batch.tok" --seq-len 32 --rows 4 --metrics "$work/loss/metrics.jsonl" \
      --tolerance "$tolerance" || failed+=("$family lora")
  else
    echo "$family: a LoRA run or the merge failed"; tail -5 "$work"/lora.log "$work"/loss.log "$work"/merge.log 2>/dev/null
    failed+=("$family lora")
  fi
done
if [ ${#failed[@]} -eq 0 ]; then echo "hf_families_check: all passed"; else
  echo "hf_families_check: FAILED: ${failed[*]}"; exit 1; fi
