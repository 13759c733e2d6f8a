#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) in build-fuzz/ and runs each for a
# bounded time on its committed seed corpus (fuzz/corpus/<target>/). New inputs go to a scratch
# corpus under build-fuzz/, crashes to build-fuzz/crashes/: a crash becomes a regression test.
#   scripts/fuzz.sh                       # every target, 30 s each
#   scripts/fuzz.sh safetensors_header 300
set -euo pipefail
cd "$(dirname "$0")/.."
targets=${1:-all}
seconds=${2:-30}
CC=clang-14 CXX=clang++-14 cmake -S . -B build-fuzz -G Ninja -DFT_BUILD_FUZZERS=ON -DFT_BUILD_TESTS=OFF \
  -DFT_USE_PCH=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
if [ "$targets" = all ]; then
  targets=$(ls fuzz/*_fuzz.cpp | sed 's#fuzz/##; s#_fuzz.cpp##')
fi
mkdir -p build-fuzz/crashes
for t in $targets; do
  ninja -C build-fuzz "fuzz_$t"
  mkdir -p "build-fuzz/corpus/$t"
  echo "== fuzz_$t for ${seconds}s"
  ./build-fuzz/fuzz/"fuzz_$t" -max_total_time="$seconds" -max_len=65536 -print_final_stats=1 \
    -artifact_prefix=build-fuzz/crashes/"$t"- "build-fuzz/corpus/$t" "fuzz/corpus/$t" 2>&1 |
    grep -E "stat::number_of_executed_units|stat::new_units_added|ERROR|SUMMARY|Done" || true
done
