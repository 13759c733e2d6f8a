# Finds LibTorch and what must match it, and refuses at configure time what would fail or
# misbehave at run time:
#   - a LibTorch older than 1.13;
#   - a CUDA LibTorch next to a CUDA toolkit of another major version;
#   - a CUDA runtime or NCCL other than the LibTorch's own: a process loads one libcudart.so.N and
#     one libnccl.so.2, so ft compiles against the headers of the libraries LibTorch loads (the
#     nvidia-* wheels beside a pip torch) and links those same files;
#   - an NCCL whose header and library disagree;
#   - Gloo headers that do not fit the Gloo compiled into LibTorch (cmake/gloo_probe.cpp).
# Sets FT_TORCH_VERSION, FT_TORCH_CUDA (ON for a CUDA LibTorch), FT_TORCH_CUDA_VERSION, and for
# the NCCL communicator FT_WITH_NCCL, FT_CUDA_INCLUDE_DIR, FT_CUDART_LIBRARY, FT_NCCL_INCLUDE_DIR,
# FT_NCCL_LIBRARY.

# ft compiles no CUDA sources, but a CUDA LibTorch's CMake package enables the CUDA language and
# gives it the C++ standard (C++20, which CMake 3.25 cannot ask of nvcc), and without an
# architecture list it compiles and runs a program to look for GPUs. Neither matters to ft.
set(CMAKE_CUDA_STANDARD 17)
if(NOT DEFINED TORCH_CUDA_ARCH_LIST AND NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST})
  set(TORCH_CUDA_ARCH_LIST "8.0;8.9;9.0")
endif()
find_package(Torch REQUIRED)

set(FT_PIP_FIX "scripts/setup.sh --libtorch pip && scripts/build.sh --libtorch pip (torch 2.15.0 with CUDA 13.2 in .venv/)")
# <prefix>/share/cmake/Torch -> <prefix>: site-packages/torch for a pip torch, the unpacked zip
# (Debian's is /usr/lib/x86_64-linux-gnu/cmake/Torch). The libraries' folder comes from LibTorch's
# own imported target.
get_filename_component(FT_TORCH_PREFIX "${Torch_DIR}/../../.." ABSOLUTE)
get_target_property(torch_cpu_file torch_cpu LOCATION)
get_filename_component(FT_TORCH_LIBDIR "${torch_cpu_file}" DIRECTORY)
set(FT_TORCH_VERSION "${Torch_VERSION}")
if(FT_TORCH_VERSION VERSION_LESS 1.13)
  message(FATAL_ERROR "LibTorch ${FT_TORCH_VERSION} (${Torch_DIR}) is too old: ft needs LibTorch 1.13 (Debian 12's "
          "libtorch-dev) or 2.x.\nFix: ${FT_PIP_FIX}, or point CMAKE_PREFIX_PATH at a newer LibTorch's share/cmake.")
endif()
# The standard the LibTorch's headers are written for: 2.x's recent headers require C++20, while
# 1.13's do not compile as C++20 under clang 14 (std::vector<IValue> of an incomplete IValue in
# ATen/core/List.h: the fuzz build). ft's own code is C++17 and compiles either way.
if(FT_TORCH_VERSION VERSION_LESS 2.0)
  set(CMAKE_CXX_STANDARD 17)
else()
  set(CMAKE_CXX_STANDARD 20)
endif()

set(FT_TORCH_CUDA OFF)
if(TARGET torch_cuda)
  set(FT_TORCH_CUDA ON)
  # The CUDA version LibTorch was built with: torch/version.py in a pip install, build-version
  # ("2.5.1+cu124") in the LibTorch zip.
  set(FT_TORCH_CUDA_VERSION "")
  if(EXISTS "${FT_TORCH_PREFIX}/version.py")
    file(STRINGS "${FT_TORCH_PREFIX}/version.py" line REGEX "^cuda")
    if(line MATCHES "'([0-9]+\\.[0-9]+)'")
      set(FT_TORCH_CUDA_VERSION "${CMAKE_MATCH_1}")
    endif()
  elseif(EXISTS "${FT_TORCH_PREFIX}/build-version")
    file(READ "${FT_TORCH_PREFIX}/build-version" line)
    if(line MATCHES "\\+cu([0-9]+)([0-9])")
      set(FT_TORCH_CUDA_VERSION "${CMAKE_MATCH_1}.${CMAKE_MATCH_2}")
    endif()
  endif()
  if(FT_TORCH_CUDA_VERSION STREQUAL "")
    set(FT_TORCH_CUDA_VERSION "${CUDAToolkit_VERSION_MAJOR}.${CUDAToolkit_VERSION_MINOR}")
    message(WARNING "ft: cannot tell which CUDA LibTorch ${FT_TORCH_VERSION} was built with (no version.py or "
            "build-version under ${FT_TORCH_PREFIX}); assuming the toolkit's ${FT_TORCH_CUDA_VERSION}")
  endif()
  string(REGEX MATCH "^[0-9]+" FT_TORCH_CUDA_MAJOR "${FT_TORCH_CUDA_VERSION}")
  if(NOT FT_TORCH_CUDA_MAJOR STREQUAL CUDAToolkit_VERSION_MAJOR)
    message(FATAL_ERROR "LibTorch ${FT_TORCH_VERSION} (${FT_TORCH_PREFIX}) was built with CUDA ${FT_TORCH_CUDA_VERSION}, "
            "but the CUDA toolkit CMake found is ${CUDAToolkit_VERSION} (${CUDAToolkit_BIN_DIR}): a process would load "
            "two CUDA runtimes.\nFix: use a LibTorch built for CUDA ${CUDAToolkit_VERSION_MAJOR} (${FT_PIP_FIX}), "
            "or point CUDAToolkit_ROOT (or CUDA_HOME and PATH) at a CUDA ${FT_TORCH_CUDA_MAJOR} toolkit.")
  endif()
endif()

# Gloo. Debian's libtorch-dev is built against libgloo-dev's headers; a pip torch or the LibTorch
# zip carries Gloo inside libtorch_cpu.so without its headers, so the ones found here (Debian's
# libgloo-dev) must be shown to fit: the probe compiles c10d's Gloo header with them and runs a
# collective through LibTorch's Gloo.
find_path(FT_GLOO_INCLUDE_DIR gloo/config.h HINTS "${FT_TORCH_PREFIX}/include")
if(NOT FT_GLOO_INCLUDE_DIR)
  message(FATAL_ERROR "Gloo's headers (gloo/config.h) were not found: c10d's ProcessGroupGloo.hpp includes them.\n"
          "Fix: apt-get install libgloo-dev (scripts/setup.sh does), or set FT_GLOO_INCLUDE_DIR.")
endif()
# Debian's libtorch-dev and libgloo-dev are one distribution's build: no probe needed.
if(FT_TORCH_LIBDIR MATCHES "^/usr/lib/" AND FT_GLOO_INCLUDE_DIR STREQUAL "/usr/include")
  set(FT_GLOO_CHECKED "${FT_TORCH_LIBDIR}|${FT_GLOO_INCLUDE_DIR}" CACHE INTERNAL "")
endif()
if(NOT FT_GLOO_CHECKED STREQUAL "${FT_TORCH_LIBDIR}|${FT_GLOO_INCLUDE_DIR}")
  message(STATUS "ft: checking that the Gloo headers in ${FT_GLOO_INCLUDE_DIR} fit LibTorch ${FT_TORCH_VERSION}")
  # LibTorch's imported targets do not carry into a try_run project: its files are named instead.
  try_run(run_result compile_result "${CMAKE_BINARY_DIR}/ft_probes/gloo" "${CMAKE_SOURCE_DIR}/cmake/gloo_probe.cpp"
          CMAKE_FLAGS "-DINCLUDE_DIRECTORIES=${TORCH_INCLUDE_DIRS};${FT_GLOO_INCLUDE_DIR}"
          COMPILE_DEFINITIONS -DUSE_C10D_GLOO -DUSE_DISTRIBUTED
          LINK_LIBRARIES "${FT_TORCH_LIBDIR}/libtorch_cpu.so" "${FT_TORCH_LIBDIR}/libc10.so" CXX_STANDARD ${CMAKE_CXX_STANDARD}
          COMPILE_OUTPUT_VARIABLE compile_output RUN_OUTPUT_VARIABLE probe)
  if(NOT compile_result)
    string(REGEX MATCH "[^\n]*error[^\n]*" first_error "${compile_output}")
    message(FATAL_ERROR "The Gloo headers in ${FT_GLOO_INCLUDE_DIR} do not compile with LibTorch ${FT_TORCH_VERSION}'s "
            "c10d (${FT_TORCH_PREFIX}): ${first_error}\nFix: point FT_GLOO_INCLUDE_DIR at the headers of the Gloo "
            "commit that LibTorch ${FT_TORCH_VERSION} pins (pytorch's third_party/gloo).")
  elseif(NOT run_result EQUAL 0)
    message(FATAL_ERROR "With the Gloo headers in ${FT_GLOO_INCLUDE_DIR}, a one-rank Gloo all-reduce through LibTorch "
            "${FT_TORCH_VERSION} (${FT_TORCH_PREFIX}) failed (exit ${run_result}): ${probe}\nFix: point "
            "FT_GLOO_INCLUDE_DIR at the headers of the Gloo commit that LibTorch ${FT_TORCH_VERSION} pins.")
  endif()
  set(FT_GLOO_CHECKED "${FT_TORCH_LIBDIR}|${FT_GLOO_INCLUDE_DIR}" CACHE INTERNAL "")
endif()

# The CUDA runtime and NCCL. A pip torch loads them from the nvidia-* wheels beside it
# (site-packages/nvidia/cu13 or nvidia/cuda_runtime, nvidia/nccl), which usually carry their
# headers too (else the toolkit's of the same version are used); otherwise they come from the CUDA
# toolkit (CUDA_HOME / FT_CUDA_ROOT, FT_NCCL_ROOT override).
set(FT_CUDA_ROOT "$ENV{CUDA_HOME}" CACHE PATH "CUDA toolkit root (default: LibTorch's toolkit, /usr/local/cuda)")
set(FT_NCCL_ROOT "$ENV{NCCL_HOME}" CACHE PATH "NCCL root, when not inside the CUDA toolkit or beside a pip torch")
get_filename_component(wheels "${FT_TORCH_PREFIX}/../nvidia" ABSOLUTE)
if(FT_CUDA_ROOT)
  set(toolkit ${FT_CUDA_ROOT})  # the one asked for, and no other
else()
  set(toolkit ${CUDAToolkit_LIBRARY_ROOT} /usr/local/cuda)
endif()
set(cudart_hints ${toolkit})
set(nccl_hints ${FT_NCCL_ROOT})
if(FT_TORCH_CUDA)
  list(PREPEND cudart_hints "${wheels}/cu${FT_TORCH_CUDA_MAJOR}" "${wheels}/cuda_runtime")
  if(NOT FT_NCCL_ROOT)
    set(nccl_hints "${wheels}/nccl")
  endif()
endif()
find_path(FT_CUDA_INCLUDE_DIR cuda_runtime.h HINTS ${cudart_hints} PATH_SUFFIXES include NO_DEFAULT_PATH)
find_library(FT_CUDART_LIBRARY NAMES cudart libcudart.so.${FT_TORCH_CUDA_MAJOR} NAMES_PER_DIR HINTS ${cudart_hints}
             PATH_SUFFIXES lib64 lib NO_DEFAULT_PATH)
find_path(FT_NCCL_INCLUDE_DIR nccl.h HINTS ${nccl_hints} ${toolkit} PATH_SUFFIXES include NO_DEFAULT_PATH)
find_library(FT_NCCL_LIBRARY NAMES nccl libnccl.so.2 NAMES_PER_DIR HINTS ${nccl_hints} ${toolkit}
             PATH_SUFFIXES lib64 lib NO_DEFAULT_PATH)

if(FT_CUDA_INCLUDE_DIR AND FT_CUDART_LIBRARY AND FT_NCCL_INCLUDE_DIR AND FT_NCCL_LIBRARY)
  set(nccl_found ON)
else()
  set(nccl_found OFF)
endif()
# Required with a CUDA LibTorch (-DFT_WITH_NCCL=OFF to go without); where found otherwise.
if(FT_TORCH_CUDA)
  option(FT_WITH_NCCL "Build the NCCL communicator (lib/comm/nccl_communicator.cpp)" ON)
else()
  option(FT_WITH_NCCL "Build the NCCL communicator (lib/comm/nccl_communicator.cpp)" ${nccl_found})
endif()
if(FT_TORCH_CUDA AND NOT nccl_found AND FT_WITH_NCCL)
  message(FATAL_ERROR "LibTorch ${FT_TORCH_VERSION} has CUDA but NCCL was not found (cuda_runtime.h: "
          "${FT_CUDA_INCLUDE_DIR}, libcudart: ${FT_CUDART_LIBRARY}, nccl.h: ${FT_NCCL_INCLUDE_DIR}, libnccl: "
          "${FT_NCCL_LIBRARY}; looked in ${cudart_hints} ${nccl_hints}): ft's multi-GPU training needs it.\n"
          "Fix: pip install nvidia-nccl-cu${FT_TORCH_CUDA_MAJOR} into the torch's environment (${FT_PIP_FIX} does), "
          "or set FT_NCCL_ROOT to an NCCL install, or configure with -DFT_WITH_NCCL=OFF for single-GPU use.")
elseif(FT_WITH_NCCL AND NOT nccl_found)
  message(FATAL_ERROR "FT_WITH_NCCL is ON but the CUDA runtime with NCCL was not found (cuda_runtime.h: "
          "${FT_CUDA_INCLUDE_DIR}, libcudart: ${FT_CUDART_LIBRARY}, nccl.h: ${FT_NCCL_INCLUDE_DIR}, libnccl: "
          "${FT_NCCL_LIBRARY}).\nFix: set CUDA_HOME or FT_CUDA_ROOT / FT_NCCL_ROOT, or -DFT_WITH_NCCL=OFF")
endif()

# A pip torch's libtorch_cuda.so loads these files (its run path): ft must link the same ones.
if(FT_TORCH_CUDA AND FT_WITH_NCCL)
  foreach(pair "FT_NCCL_LIBRARY;${wheels}/nccl/lib/libnccl.so.2"
               "FT_CUDART_LIBRARY;${wheels}/cu${FT_TORCH_CUDA_MAJOR}/lib/libcudart.so.${FT_TORCH_CUDA_MAJOR}"
               "FT_CUDART_LIBRARY;${wheels}/cuda_runtime/lib/libcudart.so.${FT_TORCH_CUDA_MAJOR}")
    list(GET pair 0 var)
    list(GET pair 1 torch_own)
    if(EXISTS "${torch_own}")
      file(REAL_PATH "${torch_own}" torch_own_real)
      file(REAL_PATH "${${var}}" ours_real)
      if(NOT ours_real STREQUAL torch_own_real)
        message(FATAL_ERROR "ft would link ${${var}} but LibTorch ${FT_TORCH_VERSION} loads ${torch_own}: one process "
                "can hold only one of them.\nFix: configure without FT_CUDA_ROOT / FT_NCCL_ROOT and without the cached "
                "paths (cmake -U 'FT_NCCL_*' -U 'FT_CUD*' ...), or start from an empty build folder.")
      endif()
    endif()
  endforeach()
endif()

if(FT_WITH_NCCL)
  # Which versions the headers declare and the libraries are: a program built and run now (the
  # CUDA runtime and NCCL answer their version without a GPU).
  try_run(run_result compile_result "${CMAKE_BINARY_DIR}/ft_probes/cuda" "${CMAKE_SOURCE_DIR}/cmake/cuda_probe.cpp"
          CMAKE_FLAGS "-DINCLUDE_DIRECTORIES=${FT_NCCL_INCLUDE_DIR};${FT_CUDA_INCLUDE_DIR}"
          LINK_LIBRARIES "${FT_NCCL_LIBRARY}" "${FT_CUDART_LIBRARY}"
          COMPILE_OUTPUT_VARIABLE compile_output RUN_OUTPUT_VARIABLE probe)
  if(NOT compile_result OR NOT run_result EQUAL 0 OR NOT probe MATCHES "cudart_header=([0-9]+) cudart_library=([0-9]+) nccl_header=([0-9]+) nccl_library=([0-9]+)")
    message(FATAL_ERROR "ft: could not build and run a program against the CUDA runtime and NCCL (${FT_CUDART_LIBRARY}, "
            "${FT_NCCL_LIBRARY}): ${probe}\n${compile_output}")
  endif()
  math(EXPR cudart_header_major "${CMAKE_MATCH_1} / 1000")
  set(cudart_library "${CMAKE_MATCH_2}")
  math(EXPR cudart_library_major "${CMAKE_MATCH_2} / 1000")
  set(nccl_header "${CMAKE_MATCH_3}")
  set(nccl_library "${CMAKE_MATCH_4}")
  if(FT_TORCH_CUDA AND NOT cudart_library_major EQUAL FT_TORCH_CUDA_MAJOR)
    message(FATAL_ERROR "The CUDA runtime ft would link (${FT_CUDART_LIBRARY}) is CUDA ${cudart_library_major}, but "
            "LibTorch ${FT_TORCH_VERSION} was built with CUDA ${FT_TORCH_CUDA_VERSION}.\nFix: set FT_CUDA_ROOT to a "
            "CUDA ${FT_TORCH_CUDA_MAJOR} runtime, or ${FT_PIP_FIX}.")
  endif()
  if(NOT cudart_header_major EQUAL cudart_library_major)
    message(FATAL_ERROR "cuda_runtime.h in ${FT_CUDA_INCLUDE_DIR} is CUDA ${cudart_header_major} but the runtime library "
            "${FT_CUDART_LIBRARY} is CUDA ${cudart_library_major}.\nFix: set FT_CUDA_ROOT to one CUDA install.")
  endif()
  if(NOT nccl_header EQUAL nccl_library)
    message(FATAL_ERROR "nccl.h in ${FT_NCCL_INCLUDE_DIR} is NCCL ${nccl_header} but ${FT_NCCL_LIBRARY} is NCCL "
            "${nccl_library} (NCCL_VERSION_CODE).\nFix: set FT_NCCL_ROOT to one NCCL install (the one LibTorch loads: "
            "${wheels}/nccl for a pip torch).")
  endif()
  if(FT_TORCH_CUDA)
    # Every consumer of the CUDA runtime (LibTorch's own torch::cudart included) links this file,
    # so the executables' run path holds one libcudart.so.N: the LibTorch's.
    set_target_properties(CUDA::cudart PROPERTIES IMPORTED_LOCATION "${FT_CUDART_LIBRARY}")
  endif()
  math(EXPR nccl_major "${nccl_library} / 10000")
  math(EXPR nccl_minor "${nccl_library} % 10000 / 100")
  math(EXPR nccl_patch "${nccl_library} % 100")
  math(EXPR cudart_minor "${cudart_library} % 1000 / 10")
  string(CONCAT FT_NCCL_SUMMARY "NCCL ${nccl_major}.${nccl_minor}.${nccl_patch} (${FT_NCCL_LIBRARY}), CUDA runtime "
         "${cudart_library_major}.${cudart_minor} (${FT_CUDART_LIBRARY})")
else()
  set(FT_NCCL_SUMMARY "no NCCL communicator (parallel.backend nccl will say so)")
endif()

if(FT_TORCH_CUDA)
  message(STATUS "ft: LibTorch ${FT_TORCH_VERSION} with CUDA ${FT_TORCH_CUDA_VERSION} (${FT_TORCH_PREFIX}); ${FT_NCCL_SUMMARY}")
else()
  message(STATUS "ft: LibTorch ${FT_TORCH_VERSION}, CPU only (${FT_TORCH_LIBDIR}); ${FT_NCCL_SUMMARY}")
endif()
