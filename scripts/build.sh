#!/usr/bin/env bash
# Configures (once) and builds with Ninja: everything, or only the targets named.
#   scripts/build.sh [--libtorch debian|pip] [TARGET...]
#   scripts/build.sh                        # everything, Debian's LibTorch 1.13 (CPU) into build/
#   scripts/build.sh --libtorch pip         # everything, the pip CUDA LibTorch in .venv/ into build-pip/
#   scripts/build.sh ft_generate            # one target (scripts/demo.sh names the programs it runs)
# Arguments after --libtorch go to ninja as they are (targets, or options such as -k 0).
# Another LibTorch (the zip from pytorch.org, a conda or pip torch elsewhere):
#   cmake -S . -B build-own -G Ninja -DCMAKE_PREFIX_PATH=/path/to/libtorch && ninja -C build-own
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/libtorch_choice.sh
libtorch_cmake_args
if [ ! -f "$build_dir/build.ninja" ]; then
  compiler_cmake_args
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "${compiler_args[@]}" "${cmake_args[@]}"
elif ! grep -qx "FT_LEAN_SUITES:BOOL=$lean_suites" "$build_dir/CMakeCache.txt"; then
  cmake "$build_dir" "${cmake_args[@]}" >/dev/null  # the option changes which test cases register
fi
ninja -C "$build_dir" "${args[@]}"
