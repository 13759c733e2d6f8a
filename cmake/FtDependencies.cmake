# Finds the system packages that scripts/setup.sh installs (Debian 12).
# libtorch-dev: LibTorch 1.13; or a CUDA LibTorch 2.x via CMAKE_PREFIX_PATH (cmake/FtTorch.cmake checks it)
include(FtTorch)
find_package(nlohmann_json 3 REQUIRED)
find_package(Threads REQUIRED)
find_package(ZLIB REQUIRED)           # zlib1g-dev: crc32 for checkpoint checksums
find_path(CXXOPTS_INCLUDE_DIR cxxopts.hpp REQUIRED)
add_library(ft_cxxopts INTERFACE)
target_include_directories(ft_cxxopts SYSTEM INTERFACE ${CXXOPTS_INCLUDE_DIR})
if(FT_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
