# Sanitizer and fuzzing configurations (tests/README.md, "Sanitizers and fuzzing").
#
#   TESSEL_SANITIZE=ON  every target is built with AddressSanitizer and UndefinedBehaviorSanitizer,
#                       and the first report halts the process (-fno-sanitize-recover=all), so a
#                       test that triggers undefined behaviour fails instead of printing a
#                       warning and passing. GCC or clang.
#   TESSEL_FUZZ=ON      the libFuzzer targets in fuzz/ are built (clang only: libFuzzer ships with
#                       clang's runtime, Debian's libclang-rt-14-dev); the libraries get
#                       coverage instrumentation (-fsanitize=fuzzer-no-link) so the fuzzer sees
#                       the branches of the code under test.
#
# The sanitizer build uses -O1 with line tables (readable stack traces, a quicker compile than
# -O3) whatever CMAKE_BUILD_TYPE says; scripts/test.sh builds it with clang into build-asan/.
option(TESSEL_SANITIZE "Build with ASan+UBSan, halting on the first report" OFF)
option(TESSEL_FUZZ "Build the libFuzzer targets in fuzz/ (clang only)" OFF)

if(TESSEL_SANITIZE)
  set(tessel_sanitizers -fsanitize=address,undefined -fno-sanitize-recover=all)
  add_compile_options(${tessel_sanitizers} -fno-omit-frame-pointer -O1 -g1)
  add_link_options(${tessel_sanitizers})
endif()

if(TESSEL_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "TESSEL_FUZZ needs clang (libFuzzer), got ${CMAKE_CXX_COMPILER_ID}; "
                        "configure with -DCMAKE_CXX_COMPILER=clang++")
  endif()
  add_compile_options(-fsanitize=fuzzer-no-link)
endif()
