#!/usr/bin/env bash
# The test command of the README (and of CI): install what is missing, build, run every test.
#   scripts/test.sh            # all suites
#   scripts/test.sh -L unit    # extra arguments go to ctest: only the fast unit suites
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
cd build
ctest --output-on-failure --timeout 900 -j "$(nproc)" "$@"
