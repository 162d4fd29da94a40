#!/usr/bin/env bash
# `make run`: tokenize a corpus the machine already has (its license texts; the project's own
# docs as a fallback) at the byte level, print the plan, and train the demo model.
set -euo pipefail
tiertrain=${1:-build/tiertrain}
shift || true
mkdir -p data/demo
corpus=()
if [ -d /usr/share/common-licenses ]; then
  while IFS= read -r f; do corpus+=("$f"); done < <(find -L /usr/share/common-licenses -maxdepth 1 -type f | sort)
fi
if [ ${#corpus[@]} -eq 0 ]; then
  while IFS= read -r f; do corpus+=("$f"); done < <(find docs src -name '*.md' -o -name '*.c' -o -name '*.h' | sort)
fi
"$tiertrain" tokenize --bytes -o data/demo/corpus.tok "${corpus[@]}"
rm -rf runs/demo
"$tiertrain" train --config configs/demo.yaml "$@"
