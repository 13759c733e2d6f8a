#!/usr/bin/env bash
# Builds with sanitizers, each in its own folder, and runs the suites under them. LibTorch is not
# instrumented; our code, the tests and every rank process they start are.
#   scripts/sanitize.sh address   # ASan + UBSan in build-asan/: the unit and multi-rank suites
#   scripts/sanitize.sh address --libtorch pip
#                                 # the same on the pip CUDA LibTorch 2.x in build-asan-pip/, plus
#                                 # the interop suite whose ft side differs on 2.x (logits
#                                 # against transformers: sdpa attention): CI's second LibTorch
#   scripts/sanitize.sh thread    # TSan in build-tsan/: the data prefetcher and the communicator
#                                 # watchdog (peer monitor) with real rank processes
#   scripts/sanitize.sh address -R test_faults   # extra arguments go to ctest (address only)
# The longest suites run their LEAN_FILTER cases (tests/CMakeLists.txt).
# ASan and TSan reports from any process (also a rank that was meant to fail) are written under
# build-*/sanitizer-reports/; the run fails when there is one, and prints it. UBSan reports may
# go to stderr instead (gcc's UBSan ignores log_path beside ASan), where the tests look for them
# too: a ctest FAIL_REGULAR_EXPRESSION, and test_support's run_command for rank processes' output.
# The compiler is clang++ unless FT_CXX names another (scripts/libtorch_choice.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
kind=${1:?usage: scripts/sanitize.sh address|thread [--libtorch debian|pip] [ctest arguments]}
shift
source scripts/libtorch_choice.sh  # an optional --libtorch; the rest stays in args
case "$kind" in
  address) dir=build-asan ;;
  thread) dir=build-tsan ;;
  *) echo "sanitize.sh: expected address or thread, got '$kind'" >&2; exit 2 ;;
esac
labels="unit|multirank"
if [ "$libtorch" = pip ]; then
  [ "$kind" = address ] || { echo "sanitize.sh: --libtorch pip goes with address" >&2; exit 2; }
  dir=build-asan-pip
  labels="unit|multirank|sdpa"
  scripts/setup.sh --libtorch pip
  export FT_REQUIRE_INTEROP=1  # setup.sh made the pinned environment: a skipped interop suite is a failure
else
  scripts/setup.sh
fi
libtorch_cmake_args
if [ ! -f "$dir/build.ninja" ]; then
  compiler_cmake_args
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFT_SANITIZE="$kind" "${compiler_args[@]}" "${cmake_args[@]}" >/dev/null
fi
reports="$PWD/$dir/sanitizer-reports"
rm -rf "$reports"
mkdir -p "$reports"
supp="$PWD/tests/sanitizers"
status=0
if [ "$kind" = address ]; then
  # Build only the suites this run selects (their programs come as their dependencies): the
  # benchmarks and the reference-only suites would add minutes of instrumented compiling.
  ninja -C "$dir" build.ninja >/dev/null  # re-configures when a CMakeLists.txt changed
  targets=()
  for t in $(cd "$dir" && ctest -N -L "$labels" "${args[@]}" | sed -n 's/^ *Test *#[0-9]*: *//p'); do
    if ninja -C "$dir" -t query "$t" >/dev/null 2>&1; then targets+=("$t"); fi  # not the script tests
  done
  # The interop suite of this stage (label sdpa: logits against transformers) runs ft_logits.
  [ "$libtorch" = debian ] || targets+=(ft_logits)
  ninja -C "$dir" "${targets[@]}"
  # LibTorch registers operators and kernels into process-lifetime tables it never frees:
  # leak reports for allocations made inside it are suppressed (tests/sanitizers/lsan.supp).
  export ASAN_OPTIONS="log_path=$reports/asan:detect_stack_use_after_return=0:check_initialization_order=1:strict_init_order=1"
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
  export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0"
  (cd "$dir" && ctest --output-on-failure --timeout 1800 -j "$(nproc)" -L "$labels" "${args[@]}") || status=$?
else
  ninja -C "$dir" test_data test_multirank comm_worker ft_launch
  # ignore_noninstrumented_modules: calls that uninstrumented LibTorch and libgloo make to
  # intercepted functions (free, recv, pthread_cond_*) are not recorded, since TSan cannot see the
  # synchronization around them; it reported gloo's own threads racing on a killed peer's buffers,
  # about one run in ten, with stacks that cannot be unwound to name. Races in ft's code still are.
  export TSAN_OPTIONS="log_path=$reports/tsan:halt_on_error=1:second_deadlock_stack=1:ignore_noninstrumented_modules=1:suppressions=$supp/tsan.supp"
  # One thread per rank and no OpenMP pool: what races is ours, not LibTorch's uninstrumented pool.
  export OMP_NUM_THREADS=1
  "$dir/tests/test_data" --gtest_filter='PrefetcherTest.*' || status=$?
  "$dir/tests/test_multirank" --gtest_filter='*Collectives.*:Faults.*' || status=$?
fi

shopt -s nullglob
found=("$reports"/*)
if [ ${#found[@]} -ne 0 ]; then
  for f in "${found[@]}"; do echo "=== $f"; head -80 "$f"; done
  echo "sanitize.sh ($kind): ${#found[@]} sanitizer report(s), listed above"
  exit 1
fi
if [ "$status" -ne 0 ]; then
  echo "sanitize.sh ($kind): tests failed"
  exit "$status"
fi
echo "sanitize.sh ($kind): clean"
