#!/usr/bin/env bash
# Configures (once) and builds everything with Ninja. Extra arguments go to ninja.
#   scripts/build.sh                        # Debian's LibTorch 1.13 (CPU) into build/
#   scripts/build.sh --libtorch pip         # the pip CUDA LibTorch in .venv/ into build-pip/
#   scripts/build.sh ft_generate            # one target
# Another LibTorch (the zip from pytorch.org, a conda or pip torch elsewhere):
#   cmake -S . -B build-own -G Ninja -DCMAKE_PREFIX_PATH=/path/to/libtorch && ninja -C build-own
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/libtorch_choice.sh
libtorch_cmake_args
if [ ! -f "$build_dir/build.ninja" ]; then
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "${cmake_args[@]}"
fi
ninja -C "$build_dir" "${args[@]}"
