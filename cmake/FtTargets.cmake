# Helpers that give every module, program and test the same flags and the same precompiled
# LibTorch header (built once in ft_pch and reused, so one edited file rebuilds in seconds).

set(FT_WARNINGS -Wall -Wextra -Wno-unused-parameter)

# Sanitizers apply to every target (and so to the precompiled header, which must match). -O1
# (after the build type's -O3, so it wins) halves the build time; the heavy lifting happens in
# LibTorch, which is not instrumented, so the tests hardly run slower for it.
if(FT_SANITIZE STREQUAL "address")
  # -fno-sanitize-recover: an undefined-behaviour report fails the test instead of scrolling by.
  add_compile_options(-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g1 -O1)
  add_link_options(-fsanitize=address,undefined)
elseif(FT_SANITIZE STREQUAL "thread")
  add_compile_options(-fsanitize=thread -fno-omit-frame-pointer -g1 -O1)
  add_link_options(-fsanitize=thread)
elseif(NOT FT_SANITIZE STREQUAL "")
  message(FATAL_ERROR "FT_SANITIZE must be empty, 'address' or 'thread', not '${FT_SANITIZE}'")
endif()

# ft_pch: an object library whose only job is to own the precompiled header.
add_library(ft_pch OBJECT ${CMAKE_SOURCE_DIR}/lib/pch/pch.cpp)
target_link_libraries(ft_pch PUBLIC torch)
target_compile_options(ft_pch PRIVATE ${FT_WARNINGS})
if(FT_USE_PCH)
  target_precompile_headers(ft_pch PRIVATE ${CMAKE_SOURCE_DIR}/lib/pch/torch_pch.h)
endif()

# Loading the 570 MB precompiled header costs ~3.6 s per file, more than a file without LibTorch
# takes to compile whole (util/log.cpp: 4.0 s with it, 0.4 s without). So a source that reaches
# no LibTorch header through its includes is compiled without it: 39 of 160 files.
set(FT_INCLUDE_ROOTS ${CMAKE_SOURCE_DIR}/lib ${CMAKE_SOURCE_DIR}/apps ${CMAKE_SOURCE_DIR}/tests/support
    ${CMAKE_SOURCE_DIR}/tests/train)

# ft_reaches_torch(FILE OUT): OUT is ON when FILE includes <torch/...>, <ATen/...> or <c10/...>,
# directly or through our own quoted includes (looked up beside the file, then under
# FT_INCLUDE_ROOTS). Any #include counts, also one under #ifdef. Either answer compiles (a file
# without the PCH includes what it uses), so a wrong or stale one (the scan runs at configure
# time, not when a header changes) only costs time.
function(ft_reaches_torch file out)
  get_property(known GLOBAL PROPERTY "FT_TORCH_${file}" SET)
  if(known)
    get_property(reaches GLOBAL PROPERTY "FT_TORCH_${file}")
    set(${out} ${reaches} PARENT_SCOPE)
    return()
  endif()
  set_property(GLOBAL PROPERTY "FT_TORCH_${file}" OFF)  # ends include cycles
  file(STRINGS "${file}" includes REGEX "^[ \t]*#[ \t]*include")
  get_filename_component(dir "${file}" DIRECTORY)
  set(reaches OFF)
  foreach(line IN LISTS includes)
    if(line MATCHES "<(torch|ATen|c10)/")
      set(reaches ON)
    elseif(line MATCHES "\"([^\"]+)\"")
      set(name "${CMAKE_MATCH_1}")
      foreach(root "${dir}" ${FT_INCLUDE_ROOTS})
        if(EXISTS "${root}/${name}")
          ft_reaches_torch("${root}/${name}" reaches)
          break()
        endif()
      endforeach()
    endif()
    if(reaches)
      break()
    endif()
  endforeach()
  set_property(GLOBAL PROPERTY "FT_TORCH_${file}" ${reaches})
  set(${out} ${reaches} PARENT_SCOPE)
endfunction()

function(ft_use_common_settings target)
  target_compile_options(${target} PRIVATE ${FT_WARNINGS})
  if(FT_USE_PCH)
    target_precompile_headers(${target} REUSE_FROM ft_pch)
    get_target_property(sources ${target} SOURCES)
    foreach(source IN LISTS sources)
      get_filename_component(path "${source}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_SOURCE_DIR}")
      ft_reaches_torch("${path}" reaches)
      if(NOT reaches)
        set_source_files_properties("${source}" PROPERTIES SKIP_PRECOMPILE_HEADERS ON)
      endif()
    endforeach()
  endif()
endfunction()

# ft_add_module(NAME SOURCES ... DEPS ...): lib/<name> as static library ft_<name>.
function(ft_add_module name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_library(ft_${name} STATIC ${ARG_SOURCES})
  target_include_directories(ft_${name} PUBLIC ${CMAKE_SOURCE_DIR}/lib)
  target_link_libraries(ft_${name} PUBLIC ${ARG_DEPS})
  ft_use_common_settings(ft_${name})
endfunction()

# ft_add_program(NAME SOURCES ... DEPS ... [OUTPUT_NAME file]): an executable in build/bin.
# OUTPUT_NAME lets a program share its file name with a library target (ft_train the program,
# target ft_train_app, next to ft_train the library of lib/train).
function(ft_add_program name)
  cmake_parse_arguments(ARG "" "OUTPUT_NAME" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS})
  ft_use_common_settings(${name})
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
  if(ARG_OUTPUT_NAME)
    set_target_properties(${name} PROPERTIES OUTPUT_NAME ${ARG_OUTPUT_NAME})
  endif()
endfunction()

# ft_add_test(NAME SOURCES ... DEPS ... LABELS ... [TIMEOUT s] [LEAN_FILTER f]): one
# GoogleTest executable, registered with CTest as one test carrying the given labels (unit,
# reference, multirank). LEAN_FILTER (a --gtest_filter) narrows a long suite to the cases that
# reach code the others do not, in sanitizer builds and with FT_LEAN_SUITES (CI's second LibTorch,
# whose cases the first one already ran in full); a plain build runs every case.
function(ft_add_test name)
  cmake_parse_arguments(ARG "" "TIMEOUT;LEAN_FILTER" "SOURCES;DEPS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} ft_test_support ft_test_main GTest::gtest)
  ft_use_common_settings(${name})
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  if((FT_SANITIZE OR FT_LEAN_SUITES) AND ARG_LEAN_FILTER)
    add_test(NAME ${name} COMMAND ${name} --gtest_filter=${ARG_LEAN_FILTER})
  else()
    add_test(NAME ${name} COMMAND ${name})
  endif()
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 600)
  endif()
  set_tests_properties(${name} PROPERTIES LABELS "${ARG_LABELS}" TIMEOUT ${ARG_TIMEOUT}
    ENVIRONMENT "OMP_NUM_THREADS=1")
  if(FT_SANITIZE)
    # gcc's UBSan ignores log_path next to ASan and reports on stderr: any report there fails
    # the test, also one from a rank process whose failure the test expected.
    set_tests_properties(${name} PROPERTIES FAIL_REGULAR_EXPRESSION
      "runtime error: ;ERROR: AddressSanitizer;ERROR: LeakSanitizer;WARNING: ThreadSanitizer")
  endif()
endfunction()
