#!/usr/bin/env bash
# Faults (issue 19, item 4) through the command line, on a tiny model that saves a checkpoint
# every step:
#  (a) SIGKILL at 30 moments spread over a run, then `--resume` (or a fresh start when no
#      checkpoint was complete yet): it resumes from the last complete checkpoint, every
#      checkpoint under its final name is bit-identical to the uninterrupted run's, and the final
#      model.safetensors is too;
#  (b) a disk that fills up in output_dir (TT_FAULT_ENOSPC_AFTER_BYTES, the writers' test hook):
#      the run stops naming the file and directory, the earlier checkpoints stay intact, and a
#      resume ends with the same bits;
#  (c) an offload_dir that is not a directory or is full (at the reservation, at the first
#      write): a clear error, and no offload file left;
#  (d) SIGINT during a save (TT_FAULT_SAVE_PAUSE_MS holds the save open): no checkpoint under
#      the final name for it, and the next start says it removed the incomplete one;
#  (e) a host whose memory cannot hold a save beside the run (TT_FAULT_HOST_MEMORY_BYTES): said at
#      the start, with the sizes.
# Arguments: tiertrain binary, source dir, scratch dir.
set -uo pipefail
tiertrain=$1; source_dir=$2; scratch=$3
rm -rf "$scratch"; mkdir -p "$scratch"; cd "$scratch"
source "$source_dir/tests/shell_fixtures.sh"

byte_llama model 2 64
byte_corpus "$tiertrain" "$source_dir" 6000 corpus.tok
cat > run.yaml <<'YAML'
model_config: model/config.json
datasets: [corpus.tok]
sequence_len: 16
micro_batch_size: 2
max_steps: 16
save_steps: 1
learning_rate: 1.0e-2
seed: 7
device: cpu
num_threads: 1
progress: false
YAML
steps=16

"$tiertrain" train --config run.yaml output_dir=ref > ref.txt 2>&1
check "the uninterrupted run" test -f ref/model.safetensors -a -d ref/checkpoint-$steps
[ -f ref/model.safetensors ] || { echo "faults: $passed passed, $((failed + 1)) failed"; exit 1; }

# The complete checkpoints (final names only) of a directory, oldest first.
complete_checkpoints() { ls "$1" | grep -E '^checkpoint-[0-9]+$' | sort -t- -k2 -n; }
latest_checkpoint() { complete_checkpoints "$1" | tail -1; }
# Every complete checkpoint of $1 holds what the uninterrupted run's of that step holds.
checkpoints_match_reference() {
  local c
  for c in $(complete_checkpoints "$1"); do
    cmp -s "$1/$c/model.safetensors" "ref/$c/model.safetensors" || return 1
    cmp -s "$1/$c/optimizer.safetensors" "ref/$c/optimizer.safetensors" || return 1
    cmp -s "$1/$c/trainer_state.json" "ref/$c/trainer_state.json" || return 1
  done
}
# Resumes $1 (from its last complete checkpoint, or afresh without one) into $2.txt; checks it
# said where it resumed from and ends with the reference's bits.
resume_and_compare() { # dir, what
  local dir=$1 what=$2 latest
  latest=$(latest_checkpoint "$dir")
  if [ -n "$latest" ]; then
    "$tiertrain" train --config run.yaml output_dir="$dir" --resume > "$dir.txt" 2>&1
    check "$what: resumed from the last complete checkpoint ($latest)" grep -q "resumed from $dir/$latest at step" "$dir.txt"
  else
    "$tiertrain" train --config run.yaml output_dir="$dir" > "$dir.txt" 2>&1
  fi
  check "$what: the run ends with the reference's bits" cmp -s "$dir/model.safetensors" ref/model.safetensors
}

# ---- (a) SIGKILL at 30 moments ----
# The moments are a fixed pseudo-random spread (the same in every CI run) over the run, placed by its progress rather
# than by the clock alone (a loaded machine slows a 16-step run of a few tens of ms unevenly): trial i waits for the
# run's k-th complete checkpoint (k from 0, the start, to 16, the last), then a random part of one step more.
t0=$(date +%s%N)
"$tiertrain" train --config run.yaml output_dir=timing > /dev/null 2>&1
run_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
moments=$(awk -v n=30 -v step="$run_ms" \
  'BEGIN { srand(19); for (i = 0; i < n; i++) printf "%d:%.4f ", int(rand() * 17), rand() * step / 16 * 1.1 / 1000 }')
trial=0; with_checkpoint=0; during_save=0
for moment in $moments; do
  trial=$((trial + 1))
  after=${moment%%:*}; delay=${moment#*:}
  dir=kill$trial
  "$tiertrain" train --config run.yaml output_dir=$dir > $dir.killed.txt 2>&1 &
  pid=$!
  if [ "$after" -gt 0 ]; then
    while [ ! -d "$dir/checkpoint-$after" ] && kill -0 $pid 2>/dev/null; do sleep 0.002; done
  fi
  sleep "$delay"
  kill -KILL $pid 2>/dev/null
  wait $pid 2>/dev/null
  check "kill $trial: every complete checkpoint is whole and the reference's" checkpoints_match_reference $dir
  [ -n "$(latest_checkpoint $dir 2>/dev/null)" ] && with_checkpoint=$((with_checkpoint + 1))
  resume_and_compare $dir "kill $trial (${delay}s after checkpoint $after)"
  grep -q "output_dir: removed" $dir.txt && during_save=$((during_save + 1))
  check "kill $trial: nothing incomplete left" test -z "$(ls $dir | grep -E '\.partial$|\.tmp$')"
  rm -rf $dir
done
echo "faults: $trial SIGKILL trials over a ${run_ms} ms run, $with_checkpoint of them after a complete checkpoint, $during_save during a save (left a .partial or .tmp the resume removed)"
check "most kills land after a checkpoint ($with_checkpoint of $trial)" test $with_checkpoint -ge 15

# ---- (b) disk full in output_dir ----
# One checkpoint's bytes (the files the writers write), then a budget that runs out in the third.
checkpoint_bytes=$(cat ref/checkpoint-1/* | wc -c)
limit=$((2 * checkpoint_bytes + checkpoint_bytes / 2))
TT_FAULT_ENOSPC_AFTER_BYTES=$limit "$tiertrain" train --config run.yaml output_dir=full > full.failed.txt 2>&1
status=$?
check "disk full: exit status 1 (got $status)" test $status -eq 1
check "disk full: the message names the file in output_dir and the cause" \
  grep -q "cannot write full/checkpoint-3.partial/.*No space left on device.*free disk space or choose another output directory" full.failed.txt
check "disk full: checkpoints 1 and 2 complete, 3 not" test "$(complete_checkpoints full | tr '\n' ' ')" = "checkpoint-1 checkpoint-2 "
check "disk full: the earlier checkpoints are intact" checkpoints_match_reference full
resume_and_compare full "disk full"
check "disk full: the next start removed the incomplete checkpoint" grep -q "removed incomplete checkpoint-3.partial" full.txt

# ---- (c) offload_dir ----
offload=(gradient_checkpointing=true activation_offloading=disk max_steps=2)
touch not_a_dir
"$tiertrain" train --config run.yaml "${offload[@]}" offload_dir=not_a_dir/sub output_dir=off1 > off1.txt 2>&1
check "offload_dir not a directory: refused at start" \
  grep -q "offload_dir 'not_a_dir/sub': cannot use it for the activations the plan puts on disk: Not a directory" off1.txt
mkdir -p offload
TT_FAULT_ENOSPC_AFTER_BYTES=1 "$tiertrain" train --config run.yaml "${offload[@]}" offload_dir=offload output_dir=off2 > off2.txt 2>&1
status=$?
check "offload_dir full at the start: exit status 1 (got $status)" test $status -eq 1
check "offload_dir full at the start: refused before any memory is taken, naming the directory and the sizes" \
  grep -q "offload_dir 'offload': the plan puts 8.00 KiB of activations on disk but the file system has 1 B free" off2.txt
check "offload_dir full at the start: no file left" test -z "$(ls -A offload)"
# the tiny model's disk tier is two slots of 4096 bytes (a layer's 1 KiB input each, rounded to
# the O_DIRECT alignment): 8201 bytes pass the start's check (8192 within 8201 less a thousandth), the
# reservation fits, the first write does not
TT_FAULT_ENOSPC_AFTER_BYTES=8201 "$tiertrain" train --config run.yaml "${offload[@]}" offload_dir=offload output_dir=off3 > off3.txt 2>&1
status=$?
check "offload_dir full at the first write: exit status 1 (got $status)" test $status -eq 1
check "offload_dir full at the first write: the message names the file and the cause" \
  grep -q "writing slot 0 of the activation file offload/tiertrain-activations-.* No space left on device" off3.txt
check "offload_dir full at the first write: no file left" test -z "$(ls -A offload)"

# ---- (d) SIGINT during a save ----
# (job control on: a non-interactive shell starts background commands with SIGINT ignored)
set -m
TT_FAULT_SAVE_PAUSE_MS=1500 "$tiertrain" train --config run.yaml output_dir=int > int.killed.txt 2>&1 &
pid=$!
set +m
for _ in $(seq 200); do [ -d int/checkpoint-2.partial ] && break; sleep 0.05; done
check "SIGINT: the second save is under way" test -d int/checkpoint-2.partial
kill -INT $pid
wait $pid
status=$?
check "SIGINT: the run ended by the signal (status $status)" test $status -ne 0
check "SIGINT: no checkpoint-2 under its final name" test ! -e int/checkpoint-2
check "SIGINT: checkpoint-1 complete and intact" checkpoints_match_reference int
check "SIGINT: the incomplete save is left as .partial" test -d int/checkpoint-2.partial
resume_and_compare int "SIGINT during a save"
check "SIGINT: the next start says what it found" grep -q "output_dir: removed incomplete checkpoint-2.partial" int.txt

# ---- (e) a save larger than the host's memory for runs ----
# 1 MiB of machine: 512 KiB for runs, less than the tiny run's arena and its save (an explicit host_memory_budget
# keeps the plan's own budget out of it)
TT_FAULT_HOST_MEMORY_BYTES=1048576 "$tiertrain" train --config run.yaml max_steps=1 host_memory_budget=64MiB \
  output_dir=small_host > small_host.txt 2>&1
check "a small host: warned at the start, naming the sizes" \
  grep -q "warning: a save takes .* of pageable host memory (the largest tensor: a full fine-tune's save streams a tensor at a time) beside the .* held by the 1 process on this host, more than the 512.00 KiB the host has for runs" small_host.txt
check "this machine: no warning" bash -c "! grep -q 'a save takes' ref.txt"
TT_FAULT_HOST_MEMORY_BYTES=1048576 "$tiertrain" train --config run.yaml max_steps=1 save_strategy=no \
  host_memory_budget=64MiB output_dir=no_save > no_save.txt 2>&1
check "a small host without saves: no warning" bash -c "! grep -q 'a save takes' no_save.txt"

echo "faults: $passed passed, $failed failed"
[ $failed -eq 0 ]
