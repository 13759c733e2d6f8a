#!/usr/bin/env bash
# The test command of the README (and of CI): install what is missing, build, run every test.
#   scripts/test.sh                      # all suites, Debian's LibTorch 1.13 (build/)
#   scripts/test.sh -L unit              # extra arguments go to ctest: only the fast unit suites
#   scripts/test.sh --libtorch pip       # all suites on the pip CUDA LibTorch (build-pip/); on a
#                                        # machine without a GPU the gpu suites report themselves skipped;
#                                        # the interop suites (transformers, PEFT, torchrun, ...) must run
# Without .venv/ (scripts/setup.sh --libtorch pip) the interop suites report themselves skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/libtorch_choice.sh
if [ "$libtorch" = pip ]; then
  scripts/setup.sh --libtorch pip
  export FT_REQUIRE_INTEROP=1  # setup.sh made the pinned environment: a skipped interop suite is a failure
else
  scripts/setup.sh
fi
scripts/build.sh --libtorch "$libtorch"
cd "$build_dir"
ctest --output-on-failure --timeout 900 -j "$(nproc)" "${args[@]}"
