#!/usr/bin/env bash
# Configures (once) and builds everything into build/ with Ninja. Extra arguments go to ninja,
# e.g. scripts/build.sh ft_generate
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -f build/build.ninja ]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
fi
ninja -C build "$@"
