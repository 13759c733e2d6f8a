#!/usr/bin/env bash
# Installs every Debian 12 package the build, the tests and the reference scripts need.
# Idempotent: packages already present are skipped, and `apt-get update` runs at most once.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  libtorch-dev            # LibTorch 1.13 (CPU) with c10d: TCPStore, ProcessGroupGloo
  libgloo-dev             # Gloo headers that c10d's ProcessGroupGloo header includes
  libopenblas0-pthread    # without it LibTorch falls back to the reference BLAS: ~40x slower matmuls
  nlohmann-json3-dev      # configs, safetensors headers, HF config.json
  libcxxopts-dev          # command-line parsing in apps/
  libgtest-dev            # unit and multi-rank tests
  zlib1g-dev              # CRC-32 checksums of checkpoint files
  python3-torch           # reference values (tests/reference/*.py)
  python3-sentencepiece   # reference tokenization (ft reads tokenizer.model itself, see lib/data/tokenizer.h)
  python3-numpy
  python3-matplotlib      # scripts/plot_metrics.py
  clang-14 libclang-rt-14-dev  # libFuzzer for scripts/fuzz.sh (CI fuzzes every parser)
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages already installed"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "setup: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "setup: done"
