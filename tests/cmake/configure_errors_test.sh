#!/usr/bin/env bash
# What cmake/FtTorch.cmake refuses at configure time, each with what it found, what it needs and
# the fix: a LibTorch older than 1.13, a CUDA LibTorch next to a toolkit of another CUDA major, a
# CUDA LibTorch without NCCL, an nccl.h that is not the NCCL library's. Fake LibTorch packages (a
# TorchConfig.cmake naming Debian's real libraries) and a fake NCCL folder stand in for them.
#   tests/cmake/configure_errors_test.sh REPO_ROOT
set -u
src=$(realpath "${1:?usage: configure_errors_test.sh REPO_ROOT}")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0

# fake_torch DIR VERSION [CUDA_VERSION]: a LibTorch package at DIR/share/cmake/Torch.
fake_torch() {
  local dir=$1 version=$2 cuda=${3:-}
  mkdir -p "$dir/share/cmake/Torch" "$dir/lib"
  echo "set(PACKAGE_VERSION \"$version\")
set(PACKAGE_VERSION_COMPATIBLE TRUE)" > "$dir/share/cmake/Torch/TorchConfigVersion.cmake"
  cat > "$dir/share/cmake/Torch/TorchConfig.cmake" <<CMAKE
add_library(torch_cpu SHARED IMPORTED)
set_target_properties(torch_cpu PROPERTIES IMPORTED_LOCATION /usr/lib/x86_64-linux-gnu/libtorch_cpu.so)
add_library(torch INTERFACE IMPORTED)
set(TORCH_FOUND TRUE)
CMAKE
  if [ -n "$cuda" ]; then
    echo "add_library(torch_cuda INTERFACE IMPORTED)
set(CUDAToolkit_VERSION 13.0.88)
set(CUDAToolkit_VERSION_MAJOR 13)
set(CUDAToolkit_VERSION_MINOR 0)
set(CUDAToolkit_BIN_DIR /usr/local/cuda/bin)" >> "$dir/share/cmake/Torch/TorchConfig.cmake"
    echo "cuda = '$cuda'" > "$dir/version.py"
  fi
}

# expect NAME FRAGMENT... -- CMAKE ARGS: configuring must fail and print every fragment.
expect() {
  local name=$1
  shift
  local fragments=()
  while [ "$1" != "--" ]; do fragments+=("$1"); shift; done
  shift
  local output
  output=$(cmake -S "$src" -B "$tmp/build-$name" -G Ninja -DFT_BUILD_TESTS=OFF "$@" 2>&1 | tr -s ' \n' ' ')
  local ok=1
  if echo "$output" | grep -q "Configuring done"; then ok=0; fi
  for f in "${fragments[@]}"; do
    echo "$output" | grep -qF -- "$f" || ok=0
  done
  if [ $ok -eq 1 ]; then
    echo "ok: $name"
  else
    echo "FAILED: $name: expected a configure error with: ${fragments[*]}"
    echo "$output" | tail -c 3000
    failures=$((failures + 1))
  fi
}

fake_torch "$tmp/torch-1.12" 1.12.1
expect old-libtorch "LibTorch 1.12.1" "is too old: ft needs LibTorch 1.13" "scripts/setup.sh --libtorch pip" \
  -- -DCMAKE_PREFIX_PATH="$tmp/torch-1.12"

fake_torch "$tmp/torch-cu124" 2.5.1 12.4
expect cuda-major "was built with CUDA 12.4, but the CUDA toolkit CMake found is 13.0.88" \
  "use a LibTorch built for CUDA 13" "CUDAToolkit_ROOT" -- -DCMAKE_PREFIX_PATH="$tmp/torch-cu124"

fake_torch "$tmp/torch-cu130" 2.11.0 13.0
mkdir -p "$tmp/no-cuda"
expect no-nccl "LibTorch 2.11.0 has CUDA but NCCL was not found" "pip install nvidia-nccl-cu13" "-DFT_WITH_NCCL=OFF" \
  -- -DCMAKE_PREFIX_PATH="$tmp/torch-cu130" -DFT_CUDA_ROOT="$tmp/no-cuda"

if [ -f /usr/local/cuda/include/nccl.h ]; then
  mkdir -p "$tmp/nccl/include" "$tmp/nccl/lib"
  sed -E -e 's/^#define NCCL_MINOR [0-9]+/#define NCCL_MINOR 25/' -e 's/^#define NCCL_VERSION_CODE [0-9]+/#define NCCL_VERSION_CODE 22509/' \
    /usr/local/cuda/include/nccl.h > "$tmp/nccl/include/nccl.h"
  ln -s "$(realpath /usr/local/cuda/lib64/libnccl.so.2)" "$tmp/nccl/lib/libnccl.so.2"
  expect nccl-header "is NCCL 225" "Fix: set FT_NCCL_ROOT to one NCCL install" \
    -- -DFT_NCCL_ROOT="$tmp/nccl"
else
  echo "skipped: nccl-header (no CUDA toolkit with NCCL here)"
fi

[ $failures -eq 0 ] && echo "configure checks: all refused as expected" || echo "configure checks: $failures failed"
exit $((failures > 0))
