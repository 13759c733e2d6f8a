#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) in build-fuzz/ and runs each for a
# bounded time on its committed seed corpus (fuzz/corpus/<target>/). New inputs go to a scratch
# corpus under build-fuzz/, crashes to build-fuzz/crashes/: a crash becomes a regression test
# (and its input goes into the seed corpus). Exits non-zero when any target found a crash, a
# leak, a timeout or ran out of memory. Targets run side by side, one per core.
#   scripts/fuzz.sh                       # every target, 30 s each
#   scripts/fuzz.sh safetensors_header 300
#   scripts/fuzz.sh all 20                # what CI runs (.ci/run)
set -euo pipefail
cd "$(dirname "$0")/.."
targets=${1:-all}
seconds=${2:-30}
CC=clang-14 CXX=clang++-14 cmake -S . -B build-fuzz -G Ninja -DFT_BUILD_FUZZERS=ON -DFT_BUILD_TESTS=OFF \
  -DFT_USE_PCH=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
if [ "$targets" = all ]; then
  targets=$(ls fuzz/*_fuzz.cpp | sed 's#fuzz/##; s#_fuzz.cpp##')
fi
fuzzers=()
for t in $targets; do fuzzers+=("fuzz_$t"); done
ninja -C build-fuzz "${fuzzers[@]}"
mkdir -p build-fuzz/crashes
# One target; its report goes to build-fuzz/fuzz_T.log, and "T" to build-fuzz/failed when it failed.
fuzz_one() {
  local t=$1 log="build-fuzz/fuzz_$1.log"
  mkdir -p "build-fuzz/corpus/$t"
  # -rss_limit_mb: every parser must refuse huge sizes before allocating, so 2 GB is plenty.
  if ! ./build-fuzz/fuzz/"fuzz_$t" -max_total_time="$seconds" -max_len=65536 -rss_limit_mb=2048 -timeout=10 \
       -print_final_stats=1 -artifact_prefix=build-fuzz/crashes/"$t"- \
       "build-fuzz/corpus/$t" "fuzz/corpus/$t" >"$log" 2>&1; then
    echo "$t" >>build-fuzz/failed
  fi
}
# As many targets at a time as there are cores (each fuzzer is one process on one core).
rm -f build-fuzz/failed
running=0
for t in $targets; do
  echo "== fuzz_$t for ${seconds}s"
  fuzz_one "$t" &
  running=$((running + 1))
  if [ "$running" -ge "$(nproc)" ]; then
    wait -n || true
    running=$((running - 1))
  fi
done
wait
failed=()
for t in $targets; do
  log="build-fuzz/fuzz_$t.log"
  if grep -qx "$t" build-fuzz/failed 2>/dev/null; then
    failed+=("$t")
    grep -E -A30 "ERROR|SUMMARY|==[0-9]+==" "$log" | head -60 || tail -40 "$log"
    echo "fuzz_$t FAILED (log: $log; input: build-fuzz/crashes/$t-*)"
  else
    echo "fuzz_$t: $(grep -E "stat::number_of_executed_units|stat::new_units_added" "$log" | tr -s ' \n' ' ')"
  fi
done
if [ ${#failed[@]} -ne 0 ]; then
  echo "fuzz: crashes in ${failed[*]}"
  exit 1
fi
echo "fuzz: all targets clean"
