#!/usr/bin/env bash
# 4-bit checkpoints through the command line: a model saved in bitsandbytes' 4-bit format trains with adapter: qlora
# to the same adapter bits as its bf16 source quantized at load (NF4 with double quantization, FP4 without); plan
# prices it alike; adapter: lora and full fine-tuning of it are refused naming the fix; tiertrain dequantize writes
# the same model from both, on which a LoRA run trains the QLoRA run's adapter bit for bit; tiertrain merge takes the
# 4-bit base; a checkpoint that keeps some linear weights in bf16 (llm_int8_skip_modules) trains with those in bf16.
# Arguments: tiertrain binary, source dir, scratch dir. TT_TEST_OVERRIDES adds key=value overrides to every run.
set -uo pipefail
tiertrain=$1; source_dir=$2; scratch=$3
read -r -a overrides <<< "${TT_TEST_OVERRIDES:-}"
rm -rf "$scratch"; mkdir -p "$scratch"; cd "$scratch"
passed=0; failed=0
check() { # description, command...
  local what=$1; shift
  if "$@"; then passed=$((passed + 1)); return; fi
  failed=$((failed + 1)); echo "FAIL: $what" >&2
  local last; last=$(ls -t -- *.txt 2>/dev/null | head -1)
  [ -n "$last" ] && { echo "---- tail of $last" >&2; tail -8 "$last" >&2; }
}
models=$source_dir/tests/fixtures/quant4/model
python3 "$source_dir/bench/make_tokens.py" tokens.tok 32 3000
cat > run.yaml <<'YAML'
datasets: [tokens.tok]
sequence_len: 16
micro_batch_size: 2
max_steps: 3
learning_rate: 1.0e-3
val_set_size: 0
save_steps: 0
progress: false
adapter: qlora
load_in_4bit: true
lora_r: 4
lora_alpha: 8
lora_target_linear: true
YAML

for pair in "bnb_nf4_dq:nf4:true" "bnb_fp4:fp4:false"; do
  IFS=: read -r dir type dq <<< "$pair"
  "$tiertrain" train --config run.yaml "${overrides[@]}" base_model="$models/$dir" output_dir="out_$dir" > "train_$dir.txt" 2>&1
  check "$dir: QLoRA trains on the 4-bit checkpoint" test $? -eq 0
  "$tiertrain" train --config run.yaml "${overrides[@]}" base_model="$models/bf16" bnb_4bit_quant_type="$type" \
    bnb_4bit_use_double_quant="$dq" output_dir="out_bf16_$dir" > "train_bf16_$dir.txt" 2>&1
  check "$dir: QLoRA trains on the bf16 source" test $? -eq 0
  check "$dir: the same adapter bits from the checkpoint as from quantizing its bf16 source" \
    cmp -s "out_$dir/adapter_model.safetensors" "out_bf16_$dir/adapter_model.safetensors"
  check "$dir: the training line names the format" grep -q "QLoRA: linear weights in 4-bit ${type^^}" "train_$dir.txt"
done
# the checkpoint's format wins over the run's keys, with a warning
"$tiertrain" train --config run.yaml "${overrides[@]}" base_model="$models/bnb_fp4" bnb_4bit_quant_type=nf4 \
  output_dir=out_keys > train_keys.txt 2>&1
check "a checkpoint's own 4-bit format is used" cmp -s out_bnb_fp4/adapter_model.safetensors out_keys/adapter_model.safetensors
check "the run's other bnb keys are named in a warning" grep -q "its format is used, not bnb_4bit_quant_type: nf4" train_keys.txt
"$tiertrain" plan --config run.yaml "${overrides[@]}" base_model="$models/bnb_nf4_dq" > plan_bnb.txt 2>&1
"$tiertrain" plan --config run.yaml "${overrides[@]}" base_model="$models/bf16" > plan_bf16.txt 2>&1
check "plan prices the 4-bit checkpoint as its bf16 source quantized" \
  bash -c 'diff <(grep -v "^device\|budget" plan_bnb.txt) <(grep -v "^device\|budget" plan_bf16.txt)'

"$tiertrain" train --config run.yaml "${overrides[@]}" base_model="$models/bnb_nf4_dq" adapter=lora load_in_4bit=false \
  output_dir=out_lora > train_lora.txt 2>&1
check "adapter: lora on a 4-bit checkpoint is refused" test $? -eq 1
check "  naming adapter: qlora" grep -q "so it trains with adapter: qlora and load_in_4bit: true" train_lora.txt
grep -v "adapter\|load_in_4bit\|lora_" run.yaml > full.yaml
"$tiertrain" train --config full.yaml "${overrides[@]}" base_model="$models/bnb_nf4_dq" output_dir=out_full \
  > train_full.txt 2>&1
check "full fine-tuning of a 4-bit checkpoint is refused" test $? -eq 1
check "  naming the original model" grep -q "full fine-tuning (adapter: ~) would need the weights in bf16" train_full.txt

"$tiertrain" dequantize --base "$models/bnb_nf4_dq" -o deq_bnb > deq_bnb.txt 2>&1
check "dequantize a 4-bit checkpoint" test $? -eq 0
"$tiertrain" dequantize --base "$models/bf16" -o deq_bf16 > deq_bf16.txt 2>&1
check "dequantize a bf16 model as QLoRA quantizes it (nf4, double quantization)" test $? -eq 0
check "the same dequantized model from both" cmp -s deq_bnb/model.safetensors deq_bf16/model.safetensors
grep -v "adapter\|load_in_4bit" run.yaml > lora.yaml
"$tiertrain" train --config lora.yaml "${overrides[@]}" base_model=deq_bnb adapter=lora output_dir=out_deq_lora \
  > train_deq_lora.txt 2>&1
case " ${overrides[*]} " in
  *device=cuda*) ;; # bf16 GEMMs read bf16 of the dequantized values on the GPU: another rounding than a bf16 base's
  *) check "LoRA on the dequantized base trains the QLoRA run's adapter bit for bit (fp32)" \
       cmp -s out_bnb_nf4_dq/adapter_model.safetensors out_deq_lora/adapter_model.safetensors ;;
esac
# inference: the QLoRA run's adapter on its 4-bit base (the run's config), and on the dequantized base (--model)
"$tiertrain" inference --config run.yaml "${overrides[@]}" base_model="$models/bnb_nf4_dq" output_dir=out_bnb_nf4_dq \
  --prompt-ids 5,9,2,7 --max-new-tokens 8 --ids --max-context 32 > infer_qlora.txt 2> infer_qlora_err.txt
check "inference runs a QLoRA run's adapter on its 4-bit base" test -s infer_qlora.txt
check "... loaded as the run trained it (4 bits)" grep -q "with the adapter out_bnb_nf4_dq" infer_qlora_err.txt
case " ${overrides[*]} " in
  *device=cuda*) ;; # the GPU's GEMMs round the dequantized values to bf16 (as training, above)
  *) "$tiertrain" inference --model deq_bnb --adapter out_bnb_nf4_dq --prompt-ids 5,9,2,7 --max-new-tokens 8 --ids \
       --max-context 32 > infer_deq.txt 2> infer_deq_err.txt
     check "... and generates what the dequantized base with the same adapter does" cmp -s infer_qlora.txt infer_deq.txt ;;
esac
"$tiertrain" dequantize --base "$models/bnb_nf4_dq" --quant-type fp4 -o deq_x > deq_x.txt 2>&1
check "dequantize refuses another format than the checkpoint's" grep -q "not fp4 with double quantization; leave the format out" deq_x.txt
# load_in_8bit: LoRA on the bf16 base stored in 8 bits; `dequantize --quant-type int8` writes that base as the run
# computes with it, and LoRA on it trains the same adapter (fp32)
"$tiertrain" train --config lora.yaml "${overrides[@]}" base_model="$models/bf16" adapter=lora load_in_8bit=true \
  output_dir=out_int8 > train_int8.txt 2>&1
check "load_in_8bit: LoRA on an 8-bit base trains" test -f out_int8/adapter_model.safetensors
"$tiertrain" dequantize --base "$models/bf16" --quant-type int8 -o deq_int8 > deq_int8.txt 2>&1
check "dequantize --quant-type int8" test $? -eq 0
"$tiertrain" train --config lora.yaml "${overrides[@]}" base_model=deq_int8 adapter=lora output_dir=out_deq_int8 \
  > train_deq_int8.txt 2>&1
case " ${overrides[*]} " in
  *device=cuda*) ;;
  *) check "... LoRA on it trains the 8-bit run's adapter bit for bit (fp32)" \
       cmp -s out_int8/adapter_model.safetensors out_deq_int8/adapter_model.safetensors ;;
esac
"$tiertrain" dequantize --base "$models/bf16" --quant-type int8 --double-quant true -o deq_int8_dq > deq_int8_dq.txt 2>&1
check "... with double quantization refused" grep -q "an 8-bit base has no double quantization" deq_int8_dq.txt
"$tiertrain" merge --base "$models/bnb_nf4_dq" --adapter out_bnb_nf4_dq -o merged > merge.txt 2>&1
check "merge takes a 4-bit base (dequantized)" test $? -eq 0
check "  and writes no quantization_config" bash -c '! grep -q quantization_config merged/config.json'

# a checkpoint that keeps some linear weights in bf16 (llm_int8_skip_modules, as Unsloth's dynamic 4-bit saves):
# those stay bf16 in the run; a LoRA run on its dequantized export trains the same adapter (fp32); layer_offloading
# streams the mixed layer and keeps the bits
"$tiertrain" train --config run.yaml "${overrides[@]}" base_model="$models/bnb_nf4_skip" output_dir=out_skip \
  > train_skip.txt 2>&1
check "bnb_nf4_skip: QLoRA trains on a checkpoint with llm_int8_skip_modules" test $? -eq 0
check "  saying which stay in float" grep -q "2 linear weight(s) of the base stay in its float dtype" train_skip.txt
"$tiertrain" train --config run.yaml "${overrides[@]}" base_model="$models/bnb_nf4_skip" layer_offloading=true \
  gradient_checkpointing=true output_dir=out_skip_stream > train_skip_stream.txt 2>&1
check "  with layer_offloading + checkpointing: the same adapter bits" \
  cmp -s out_skip/adapter_model.safetensors out_skip_stream/adapter_model.safetensors
"$tiertrain" dequantize --base "$models/bnb_nf4_skip" -o deq_skip > deq_skip.txt 2>&1
check "  dequantize it" test $? -eq 0
"$tiertrain" train --config lora.yaml "${overrides[@]}" base_model=deq_skip adapter=lora output_dir=out_deq_skip \
  > train_deq_skip.txt 2>&1
case " ${overrides[*]} " in
  *device=cuda*) ;;
  *) check "  LoRA on its dequantized export trains the same adapter bit for bit (fp32)" \
       cmp -s out_skip/adapter_model.safetensors out_deq_skip/adapter_model.safetensors ;;
esac
"$tiertrain" train --config run.yaml "${overrides[@]}" base_model="$models/bf16" output_dir=out_all4 > train_all4.txt 2>&1
check "  (not the adapter of quantizing every linear weight)" \
  bash -c '! cmp -s out_skip/adapter_model.safetensors out_all4/adapter_model.safetensors'

echo "test_qlora_cli: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
