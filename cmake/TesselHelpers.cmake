# tessel_cc_library(NAME name SRCS ... HDRS ... DEPS ...)
#
# Declares the static library `tessel_<name>` with the alias `tessel::<name>`, in the style of
# abseil's absl_cc_library. Include paths are rooted at the repository root, so code includes
# "core/shape.h". A library with no sources becomes an INTERFACE library.
function(tessel_cc_library)
  cmake_parse_arguments(T "" "NAME" "SRCS;HDRS;DEPS" ${ARGN})
  set(target tessel_${T_NAME})
  if(T_SRCS)
    add_library(${target} STATIC ${T_SRCS} ${T_HDRS})
    target_include_directories(${target} PUBLIC ${PROJECT_SOURCE_DIR})
    target_link_libraries(${target} PUBLIC ${T_DEPS})
    target_compile_options(${target} PRIVATE ${TESSEL_WARNING_FLAGS})
  else()
    add_library(${target} INTERFACE)
    target_include_directories(${target} INTERFACE ${PROJECT_SOURCE_DIR})
    target_link_libraries(${target} INTERFACE ${T_DEPS})
  endif()
  add_library(tessel::${T_NAME} ALIAS ${target})
endfunction()

# tessel_cc_test(NAME name SRCS ... DEPS ... [LABELS ...] [TIMEOUT s])
#
# One GoogleTest binary registered with CTest as a single test (one process per binary keeps
# ctest -j2 cheap on two cores). Default label `unit`, default timeout 300 s. Tests labelled
# `unit` are also prerequisites of the `unit_tests` target (build just what `ctest -L unit` runs).
function(tessel_cc_test)
  cmake_parse_arguments(T "" "NAME;TIMEOUT" "SRCS;DEPS;LABELS;ARGS" ${ARGN})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  if(NOT T_LABELS)
    set(T_LABELS unit)
  endif()
  add_executable(${T_NAME} ${T_SRCS})
  target_link_libraries(${T_NAME} PRIVATE ${T_DEPS} GTest::gtest GTest::gmock GTest::gtest_main)
  target_compile_options(${T_NAME} PRIVATE ${TESSEL_WARNING_FLAGS})
  add_test(NAME ${T_NAME} COMMAND ${T_NAME} ${T_ARGS})
  set_tests_properties(${T_NAME} PROPERTIES LABELS "${T_LABELS}" TIMEOUT ${T_TIMEOUT})
  if("unit" IN_LIST T_LABELS)
    set_property(GLOBAL APPEND PROPERTY TESSEL_UNIT_TEST_TARGETS ${T_NAME})
  endif()
endfunction()
