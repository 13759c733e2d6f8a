#!/usr/bin/env bash
# Runs one interop suite (tests/interop/test_SUITE.py) with the pinned pip environment's Python.
#   tests/interop/run_suite.sh SUITE        (ctest sets FT_BIN_DIR and FT_SOURCE_DIR)
# Exit 77 (ctest: skipped) when .venv/ lacks the packages, unless FT_REQUIRE_INTEROP=1.
set -uo pipefail
suite=${1:?usage: run_suite.sh SUITE}
root=${FT_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
python="$root/.venv/bin/python3"
missing=""
if [ ! -x "$python" ]; then
  missing="no $python"
elif ! "$python" -c "import torch, transformers, peft, sentencepiece, tokenizers, safetensors" 2>/tmp/ft_interop_import.$$; then
  missing="$python cannot import the interop packages: $(tail -1 /tmp/ft_interop_import.$$)"
fi
rm -f /tmp/ft_interop_import.$$
if [ -n "$missing" ]; then
  echo "interop_$suite: $missing. Install them with scripts/setup.sh --libtorch pip (scripts/interop-requirements.txt)."
  if [ "${FT_REQUIRE_INTEROP:-0}" = 1 ]; then exit 1; fi
  exit 77
fi
cd "$root/tests/interop" && exec "$python" -m unittest -v "test_$suite"
