#!/usr/bin/env bash
# Replays, then fuzzes, each target: run.sh BUILD_DIR SECONDS TARGET...
# SECONDS "auto": each target's own time (target_seconds below), long enough to find its past findings again from
# the seeds alone (fuzz/README.md, "Found again from the seeds": run_config's alias cycle took 14 minutes).
#  1. every file of fuzz/corpus/<target>/ once (the seeds and the regression files of past
#     findings: each must end cleanly);
#  2. libFuzzer for SECONDS on a working copy of that corpus in BUILD_DIR/corpus/<target>/
#     (the repository's corpus is never written), with fuzz/<target>.dict as its dictionary where
#     there is one. A finding lands in BUILD_DIR/findings/<target>/; once fixed, copy it into
#     fuzz/corpus/<target>/ so it stays a regression test.
# Exits 1 on any finding; prints each target's executed inputs.
set -uo pipefail
build=$1; seconds_given=$2; shift 2
target_seconds() {
  case $1 in
    run_config) echo 1800 ;;
    tokenizer_regex|chat_template|json_dataset|parquet) echo 600 ;;
    *) echo 120 ;;
  esac
}
here=$(cd "$(dirname "$0")" && pwd)
status=0
summary=""
for target in "$@"; do
  seconds=$seconds_given
  [ "$seconds" = auto ] && seconds=$(target_seconds "$target")
  bin=$build/fuzz_$target
  seeds=$here/corpus/$target
  work=$build/corpus/$target
  findings=$build/findings/$target
  mkdir -p "$work" "$findings"
  # Leaks: a reader that dies on bad input frees nothing by design (the process ends); the
  # safetensors, config.json, token file, JSON dataset and chat template harnesses release what a
  # dying reader held and keep leak detection on; the run config reader (src/config/ keeps no
  # record of what it holds mid-load) cannot be made to, and the tokenizer harness frees a
  # half-built tokenizer but not the path of a load that died before it existed, so their leaks
  # are not findings (tokenizer_regex too: a Replace that dies normalizing an added token at load
  # leaves that load's scratch text). They add up: a run config dying on a key leaves its YAML
  # document, so most of an hour of run_config reaches the RSS limit (FUZZ_RSS_LIMIT_MB raises it).
  case $target in tokenizer|tokenizer_regex|run_config) leaks=0 ;; *) leaks=1 ;; esac
  dict=()
  [ -f "$here/$target.dict" ] && dict=(-dict="$here/$target.dict")
  export ASAN_OPTIONS="detect_leaks=$leaks:allocator_may_return_null=1"
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
  log=$build/$target.log
  if ! "$bin" -runs=0 -detect_leaks=$leaks -artifact_prefix="$findings/" "$seeds" > "$log.replay" 2>&1; then
    echo "fuzz: $target: an input of $seeds fails:" >&2; tail -40 "$log.replay" >&2
    status=1; continue
  fi
  replayed=$(ls "$seeds" | wc -l)
  "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb="${FUZZ_RSS_LIMIT_MB:-2048}" -detect_leaks=$leaks -print_final_stats=1 \
    ${dict[@]+"${dict[@]}"} -artifact_prefix="$findings/" "$work" "$seeds" > "$log" 2>&1
  rc=$?
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || true)
  if [ $rc -ne 0 ]; then
    echo "fuzz: $target: FINDING (exit $rc); the input is in $findings/:" >&2
    grep -E 'ERROR|SUMMARY|runtime error|Test unit written|internal error' "$log" | head -20 >&2
    status=1
  fi
  summary+=$(printf '\n  %-15s %8s inputs in %ss, %s corpus files replayed, %s' "$target" "${runs:-?}" "$seconds" \
             "$replayed" "$([ $rc -eq 0 ] && echo clean || echo FINDING)")
done
echo "fuzz:$summary"
exit $status
