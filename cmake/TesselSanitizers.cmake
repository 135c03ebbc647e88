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

# The timeouts of the GoogleTest binaries (tessel_cc_test) and of the suites that run `tessel`
# (tests/CMakeLists.txt) are multiplied by TESSEL_TEST_TIMEOUT_SCALE: under ASan+UBSan code runs
# 2-5x slower, and on a loaded 2-core CI machine the transport and autoshard unit tests passed
# their 120 s and 300 s limits beside another test (4x: the lit suites' golden run took 62 s alone
# and over 120 s beside lit_cli). The timeouts are hang guards, not speed bounds.
set(TESSEL_TEST_TIMEOUT_SCALE 1)
if(TESSEL_SANITIZE)
  set(TESSEL_TEST_TIMEOUT_SCALE 4)
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
