# Sourced by build.sh and test.sh: reads an optional leading `--libtorch debian|pip` from the
# arguments and sets `libtorch` and the build folder `build_dir`. The remaining arguments stay in
# `args`. libtorch_cmake_args sets `cmake_args`, the CMake arguments that pick that LibTorch (it
# looks in .venv/, so test.sh calls it only after setup.sh has installed the pip LibTorch) and the
# lean suites (`lean_suites`: ON or OFF, from FT_LEAN_SUITES). compiler_cmake_args sets
# `compiler_args`, the C++ compiler of a folder configured for the first time.
libtorch=debian
args=("$@")
if [ "${args[0]:-}" = "--libtorch" ]; then
  libtorch=${args[1]:-}
  args=("${args[@]:2}")
fi
case "$libtorch" in
  debian) build_dir=build ;;
  pip) build_dir=build-pip ;;
  *)
    echo "$(basename "$0"): --libtorch takes debian or pip, not '$libtorch'" >&2
    exit 2 ;;
esac

libtorch_cmake_args() {
  cmake_args=()
  # FT_LEAN_SUITES=1: the longest suites run their LEAN_FILTER cases only (as in the sanitizer builds); unset,
  # every case (also in a build folder an earlier lean run configured).
  lean_suites=$([ "${FT_LEAN_SUITES:-}" = 1 ] && echo ON || echo OFF)
  cmake_args+=("-DFT_LEAN_SUITES=$lean_suites")
  [ "$libtorch" = pip ] || return 0
  local torch_cmake
  torch_cmake=$(ls -d .venv/lib/python3*/site-packages/torch/share/cmake 2>/dev/null | head -1 || true)
  if [ -z "$torch_cmake" ]; then
    echo "$(basename "$0"): no pip LibTorch in .venv/: run scripts/setup.sh --libtorch pip first" >&2
    exit 1
  fi
  cmake_args+=("-DCMAKE_PREFIX_PATH=$PWD/$torch_cmake")
}

# clang++ builds the tree in about half of g++'s time (546 s against 1183 s on 2 cores): its
# precompiled header keeps the template instantiations, which g++ redoes in every file. setup.sh
# installs clang-14 (the fuzzers need it too). FT_CXX=g++ (or any compiler) picks another; a
# folder keeps the compiler it was configured with.
compiler_cmake_args() {
  local cxx=${FT_CXX:-}
  if [ -z "$cxx" ]; then
    cxx=$(command -v clang++-14 || command -v clang++ || command -v c++ || true)
  fi
  compiler_args=()
  [ -z "$cxx" ] || compiler_args=("-DCMAKE_CXX_COMPILER=$cxx")
}
