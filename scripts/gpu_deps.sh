#!/usr/bin/env bash
# Copies what scripts/setup.sh installs from Debian's packages for building ft (headers, static
# libraries and CMake files of Gloo, nlohmann/json, cxxopts, GoogleTest and zlib) into one folder,
# for a GPU machine that has a compiler, CMake, nvcc and a pip torch but no apt:
#   scripts/gpu_deps.sh .gpu-deps && scripts/gpu_check.sh OUT --deps .gpu-deps   (there)
# The folder keeps the packages' layout, so their CMake files find their libraries in it.
set -euo pipefail
out=${1:?usage: scripts/gpu_deps.sh OUT_DIR}
arch=$(gcc -print-multiarch)
rm -rf "$out"
mkdir -p "$out/include" "$out/lib/$arch" "$out/share/cmake"
cp -r /usr/include/gloo /usr/include/nlohmann /usr/include/gtest /usr/include/gmock "$out/include/"
cp /usr/include/cxxopts.hpp /usr/include/zlib.h /usr/include/zconf.h "$out/include/"
cp -r /usr/share/cmake/nlohmann_json "$out/share/cmake/"
cp -r "/usr/lib/$arch/cmake" "$out/lib/$arch/cmake.all"
mkdir -p "$out/lib/$arch/cmake"
mv "$out/lib/$arch/cmake.all/GTest" "$out/lib/$arch/cmake/"
rm -rf "$out/lib/$arch/cmake.all"
cp /usr/lib/$arch/libgtest.a /usr/lib/$arch/libgtest_main.a /usr/lib/$arch/libgmock.a /usr/lib/$arch/libgmock_main.a \
   /usr/lib/$arch/libz.a "$out/lib/$arch/"
echo "gpu_deps: $(du -sh "$out" | cut -f1) in $out"
