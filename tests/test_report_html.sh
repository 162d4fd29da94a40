#!/usr/bin/env bash
# output_dir/report.html, opened in headless Chromium (Debian's chromium, tools/install_deps.sh): a tiny run with evals,
# activation offload and a trace writes it; Chromium loads it from the file with the network off and dumps the DOM
# it built and a screenshot. The DOM (tests/report_dom_check.py) has every chart with both axes labelled and its data
# equal to metrics.jsonl, a polyline a series, the memory plan's bars per tier with the measured peaks, a residency
# row for every layer, the copy summary and the trace's timeline; the page fetches nothing.
# Arguments: tiertrain binary, source dir, scratch dir. TT_TEST_OVERRIDES: key=value overrides for every command.
set -uo pipefail
tiertrain=$1; source_dir=$2; scratch=$3
rm -rf "$scratch"; mkdir -p "$scratch"; cd "$scratch"
source "$source_dir/tests/shell_fixtures.sh"
read -r -a overrides <<< "${TT_TEST_OVERRIDES:-}"
browser=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$browser" ]; then
  echo "report_html: skipped: no chromium (tools/install_deps.sh installs Debian's chromium package)"
  exit 77
fi

byte_llama model 2 128
byte_corpus "$tiertrain" "$source_dir" 40000 train.tok
"$tiertrain" train model_config=model/config.json datasets=[train.tok] sequence_len=64 micro_batch_size=2 \
  max_steps=12 eval_steps=4 val_set_size=0.05 save_steps=6 learning_rate=3e-3 warmup_steps=2 \
  gradient_checkpointing=true activation_offloading=true trace=trace.json output_dir=out progress=false \
  "${overrides[@]}" > train.txt 2>&1
check "the run trains" test $? -eq 0
check "it names its report" grep -q "report: out/report.html" train.txt
check "report.html is there" test -s out/report.html
check "one file: no script, stylesheet or image fetched" \
  bash -c '! grep -Eq "<script[^>]* src=|<link |<img |@import|url\(" out/report.html'

timeout 120 "$browser" --headless --no-sandbox --disable-gpu --disable-extensions --no-first-run \
  --user-data-dir="$PWD/chromium-profile" --host-resolver-rules="MAP * ~NOTFOUND" \
  --dump-dom "file://$PWD/out/report.html" > dom.html 2> chromium_dom.txt
check "Chromium loads the page" test -s dom.html
timeout 120 "$browser" --headless --no-sandbox --disable-gpu --disable-extensions --no-first-run \
  --user-data-dir="$PWD/chromium-profile" --host-resolver-rules="MAP * ~NOTFOUND" --hide-scrollbars \
  --window-size=1400,2200 --screenshot="$PWD/report.png" "file://$PWD/out/report.html" > chromium_shot.txt 2>&1
check "... and draws it (a screenshot of it is a PNG)" bash -c 'head -c 8 report.png | od -An -c | grep -q "P   N   G"'
python3 "$source_dir/tests/report_dom_check.py" dom.html out/metrics.jsonl 2 > dom_check.txt 2>&1
check "the DOM Chromium built: charts, axes, data, memory, residency, copies (dom_check.txt)" test $? -eq 0
cat dom_check.txt

echo "report_html: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
