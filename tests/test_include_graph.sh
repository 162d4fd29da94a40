#!/usr/bin/env bash
# The layering of src/ (core < config, model, ops < memory, data < train < cli) and no include cycles between
# modules: tools/include_graph.py over the tree. Arguments: tiertrain binary, source dir, scratch dir.
set -euo pipefail
python3 "$2/tools/include_graph.py" "$2/src"
