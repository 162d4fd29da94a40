#!/usr/bin/env bash
# QLoRA adapters against transformers + peft (run on the GPU machine: torch, transformers, peft; no bitsandbytes
# needed). For each base of tests/fixtures/quant4/model (bnb_nf4_dq: saved in bitsandbytes' 4-bit format; bnb_nf4_skip:
# the same with v_proj and down_proj kept in bf16 (llm_int8_skip_modules); bf16:
# quantized at load):
#   1. tiertrain trains a QLoRA adapter on it (DEVICE, default cuda);
#   2. tiertrain dequantize writes the base the run computes with (F32, no quantization_config);
#   3. tiertrain reports the adapter's loss on a fixed batch (4 rows of 32 tokens): a run that loads the adapter
#      (lora_model_dir, lora_dropout 0) and takes one step, on the fp32 CPU backend and on DEVICE;
#   4. tests/peft_load_check.py loads the dequantized base in fp32, attaches the adapter with peft and compares its
#      loss on the same rows with tiertrain's: within 1e-4 relative of the CPU run, 2e-2 of a bf16 GPU run.
# Passes when every peft_load_check.py run ends in OK; the last line is then "peft_qlora_check: all passed".
#   bash tests/peft_qlora_check.sh TIERTRAIN_BINARY [SCRATCH_DIR]
set -euo pipefail
tiertrain=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
source_dir=$(cd "$(dirname "$0")/.." && pwd)
scratch=${2:-${OUT:-/tmp}/peft-qlora}
device=${DEVICE:-cuda}
rm -rf "$scratch"; mkdir -p "$scratch"
models=$source_dir/tests/fixtures/quant4/model
python3 "$source_dir/bench/make_tokens.py" "$scratch/train.tok" 32 4000
python3 - "$scratch/batch.tok" <<'PY'
# 4 rows of 32 tokens + 1, other ids than the training file's
import array, random, struct, sys
rng = random.Random(11)
ids = array.array("I", (rng.randrange(32) for _ in range(4 * 32 + 1)))
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<8sIIQII", b"TTTOKENS", 1, 32, len(ids), 0xFFFFFFFF, 0))
    f.write(ids.tobytes())
PY
qlora=(adapter=qlora load_in_4bit=true bnb_4bit_quant_type=nf4 bnb_4bit_use_double_quant=true lora_r=8 lora_alpha=16
       lora_target_linear=true val_set_size=0 progress=false)
failed=0
for base in bnb_nf4_dq bnb_nf4_skip bf16; do
  out=$scratch/$base
  mkdir -p "$out"
  "$tiertrain" train base_model="$models/$base" "${qlora[@]}" datasets="[$scratch/train.tok]" sequence_len=32 \
    micro_batch_size=4 max_steps=30 learning_rate=1e-2 lora_dropout=0.05 save_steps=0 device="$device" \
    output_dir="$out/adapter" > "$out/train.log" 2>&1 || { echo "$base: training failed"; tail "$out/train.log"; exit 1; }
  "$tiertrain" dequantize --base "$models/$base" --quant-type nf4 --double-quant true -o "$out/dequantized" \
    > "$out/dequantize.log" 2>&1 || { echo "$base: dequantize failed"; tail "$out/dequantize.log"; exit 1; }
  for loss_device in cpu "$device"; do
    "$tiertrain" train base_model="$models/$base" "${qlora[@]}" lora_model_dir="$out/adapter" lora_dropout=0 \
      datasets="[$scratch/batch.tok]" sequence_len=32 micro_batch_size=4 max_steps=1 learning_rate=1e-30 \
      save_strategy=no device="$loss_device" output_dir="$out/loss_$loss_device" > "$out/loss_$loss_device.log" 2>&1 ||
      { echo "$base: the loss run on $loss_device failed"; tail "$out/loss_$loss_device.log"; exit 1; }
    tolerance=1e-4
    [ "$loss_device" = cpu ] || tolerance=2e-2
    echo "== $base: peft on the dequantized base against tiertrain on $loss_device"
    python3 "$source_dir/tests/peft_load_check.py" --base "$out/dequantized" --adapter "$out/adapter" \
      --tokens "$scratch/batch.tok" --seq-len 32 --rows 4 --metrics "$out/loss_$loss_device/metrics.jsonl" \
      --tolerance "$tolerance" || failed=1
  done
done
[ "$failed" -eq 0 ] && echo "peft_qlora_check: all passed" || { echo "peft_qlora_check: FAILED"; exit 1; }
