#!/usr/bin/env bash
# `tiertrain plan --max-sequence-len`: the longest sequence_len whose plan fits the budgets. The
# length it finds trains one step within the same budget; one step of the search longer is refused
# by the budget check at start. Also: a gradient-checkpointed plan reaches further than keeping
# everything. Arguments: tiertrain binary, source dir, scratch dir.
set -uo pipefail
tiertrain=$1; source_dir=$2; scratch=$3
rm -rf "$scratch"; mkdir -p "$scratch"; cd "$scratch"
source "$source_dir/tests/shell_fixtures.sh"

byte_llama model 2 65536
byte_corpus "$tiertrain" "$source_dir" 60000 corpus.tok
cat > run.yaml <<'YAML'
model_config: model/config.json
datasets: [corpus.tok]
max_steps: 1
output_dir: out
progress: false
host_memory_budget: 8MiB
loss_chunk_size: 256
YAML

"$tiertrain" plan --config run.yaml --max-sequence-len --sequence-len-step 128 > keep.txt 2> keep.err
longest=$(sed -n 's/^longest: sequence_len \([0-9]*\) .*/\1/p' keep.txt)
check "the search finds a length (keep everything)" [ -n "$longest" ]
longest=${longest:-0}
check "the length is a multiple of the step" [ $((longest % 128)) -eq 0 ]
check "the plan printed is that length's" grep -q "x sequence $longest," keep.txt
check "that plan is within the budget" bash -c "! grep -q EXCEEDED keep.txt"

"$tiertrain" train --config run.yaml sequence_len=$longest output_dir=at > at.txt 2> at.err
check "sequence_len $longest trains a step in 8 MiB (status $?)" [ -f at/model.safetensors ]
"$tiertrain" train --config run.yaml sequence_len=$((longest + 128)) output_dir=over > over.txt 2> over.err
check "sequence_len $((longest + 128)) is refused by the budget" grep -q "the plan needs .* of host memory but its budget is 8.00 MiB" over.err

"$tiertrain" plan --config run.yaml gradient_checkpointing=true --max-sequence-len --sequence-len-step 128 > gc.txt 2> gc.err
gc=$(sed -n 's/^longest: sequence_len \([0-9]*\) .*/\1/p' gc.txt)
check "checkpointing reaches further ($gc > $longest)" [ "${gc:-0}" -gt "$longest" ]

"$tiertrain" plan --config run.yaml --max-sequence-len host_memory_budget=64KiB > none.txt 2> none.err
check "nothing fits: a clear error" grep -q "not even sequence_len 1024 fits" none.err
"$tiertrain" plan --config run.yaml --sequence-len-step 128 > lone.txt 2> lone.err
check "--sequence-len-step alone is refused" grep -q "goes with --max-sequence-len" lone.err

# The disk tier against offload_dir's free space (TT_FAULT_ENOSPC_AFTER_BYTES stands in for a small disk): a full
# disk is a budget of 0 bytes, not none; a length one step over the disk budget found is refused at start
disk=(gradient_checkpointing=true activation_offloading=disk offload_dir=.)
TT_FAULT_ENOSPC_AFTER_BYTES=0 "$tiertrain" plan --config run.yaml "${disk[@]}" --max-sequence-len \
  --sequence-len-step 128 > full.txt 2> full.err
check "a full disk: nothing fits" grep -q "not even sequence_len 128 fits: the disk tier needs .* of its 0 B budget" full.err
TT_FAULT_ENOSPC_AFTER_BYTES=200000 "$tiertrain" plan --config run.yaml "${disk[@]}" --max-sequence-len \
  --sequence-len-step 128 > small.txt 2> small.err
small=$(sed -n 's/^longest: sequence_len \([0-9]*\) .*over its .* budget.*/\1/p' small.txt)
check "a small disk: the search stops at the disk's budget ($small)" grep -q "on the disk tier, over its" small.txt
small=${small:-0}
TT_FAULT_ENOSPC_AFTER_BYTES=200000 "$tiertrain" train --config run.yaml "${disk[@]}" sequence_len=$((small + 128)) \
  output_dir=small_over > small_over.txt 2> small_over.err
check "sequence_len $((small + 128)) is refused at start by offload_dir's free space" \
  grep -q "offload_dir '.': the plan puts .* of activations on disk but the file system has" small_over.err
# (at the length found the start's check passes; the hook then counts the reservation and the writes both, so
# that run would stop at a write: not a disk's behaviour, so not trained here)
TT_FAULT_ENOSPC_AFTER_BYTES=200000 "$tiertrain" train --config run.yaml "${disk[@]}" sequence_len=$small \
  output_dir=small_at > small_at.txt 2> small_at.err
check "sequence_len $small passes the start's check" bash -c "! grep -q 'the plan puts' small_at.err"

echo "longest_context: $passed passed, $failed failed (keep everything: $longest tokens, checkpointing: ${gc:-0})"
[ $failed -eq 0 ]
