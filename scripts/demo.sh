#!/usr/bin/env bash
# The main job of the README: install what is missing, build, then continue a prompt with the
# bundled TinyStories model (greedy, so the text is always the same).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
./build/bin/ft_generate --model tests/data/stories260K --prompt "Once upon a time" \
  --temperature 0 --max-new-tokens 40
