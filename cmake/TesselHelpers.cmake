# The folders whose headers form Tessel's public include tree: a consumer includes
# "tessel/<folder>/<header>.h" (e.g. "tessel/core/shape.h", "tessel/mesh/runtime/local_mesh.h"),
# so nothing collides with another library's "core/..." or "mesh/...". tools/, examples/,
# benchmarks/ and tests/ are programs, not installed, and keep their repository paths.
set(TESSEL_PUBLIC_FOLDERS core spmd partitioner nn mesh transport)
# The build's include root: tessel/<folder> are symbolic links to the source folders and
# tessel/version.h is generated, so "tessel/core/shape.h" resolves in the build exactly as it does
# under an install prefix (<prefix>/include/tessel/core/shape.h), without copying headers (an
# edit to a header is seen at once) and without moving the sources into a tessel/ folder.
set(TESSEL_INCLUDE_ROOT ${PROJECT_BINARY_DIR}/include)

# tessel_make_include_tree()
#
# Creates ${TESSEL_INCLUDE_ROOT}/tessel: one symbolic link per public folder and version.h from
# cmake/version.h.in (TESSEL_VERSION_STRING etc., from project(VERSION)).
function(tessel_make_include_tree)
  file(MAKE_DIRECTORY ${TESSEL_INCLUDE_ROOT}/tessel)
  foreach(folder IN LISTS TESSEL_PUBLIC_FOLDERS)
    file(CREATE_LINK ${PROJECT_SOURCE_DIR}/${folder} ${TESSEL_INCLUDE_ROOT}/tessel/${folder}
         SYMBOLIC)
  endforeach()
  configure_file(${PROJECT_SOURCE_DIR}/cmake/version.h.in ${TESSEL_INCLUDE_ROOT}/tessel/version.h
                 @ONLY)
endfunction()

# tessel_cc_library(NAME name SRCS ... HDRS ... DEPS ... [INTERNAL])
#
# Declares the static library `tessel_<name>` with the alias `tessel::<name>`, in the style of
# abseil's absl_cc_library. Code includes "tessel/core/shape.h" (the include tree above; under an
# install prefix: <prefix>/include); the repository root is not on a library's public include
# path, so a project that adds Tessel with add_subdirectory sees no "core/..." of Tessel's either.
# The lint include_style (tests/CMakeLists.txt) rejects "core/..." includes, and
# scripts/dev/rewrite_includes.py rewrites them. A library with no sources becomes an INTERFACE
# library.
# Unless INTERNAL is given, the library is exported as tessel::<name> (tesselTargets.cmake) and
# its HDRS are installed to <prefix>/include/tessel/<path in the repository>; every exported
# library is part of tessel::tessel (tessel_add_umbrella_library).
function(tessel_cc_library)
  cmake_parse_arguments(T "INTERNAL" "NAME" "SRCS;HDRS;DEPS" ${ARGN})
  set(target tessel_${T_NAME})
  set(includes $<BUILD_INTERFACE:${TESSEL_INCLUDE_ROOT}>
               $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  if(T_SRCS)
    add_library(${target} STATIC ${T_SRCS} ${T_HDRS})
    target_include_directories(${target} PUBLIC ${includes})
    target_link_libraries(${target} PUBLIC ${T_DEPS})
    target_compile_features(${target} PUBLIC cxx_std_20)
    target_compile_options(${target} PRIVATE ${TESSEL_WARNING_FLAGS}
                           INTERFACE "$<INSTALL_INTERFACE:${TESSEL_ISA_FLAGS}>")
  else()
    add_library(${target} INTERFACE)
    target_include_directories(${target} INTERFACE ${includes})
    target_link_libraries(${target} INTERFACE ${T_DEPS})
    target_compile_features(${target} INTERFACE cxx_std_20)
    target_compile_options(${target} INTERFACE "$<INSTALL_INTERFACE:${TESSEL_ISA_FLAGS}>")
  endif()
  add_library(tessel::${T_NAME} ALIAS ${target})
  if(T_INTERNAL)
    return()
  endif()
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${T_NAME})
  set_property(GLOBAL APPEND PROPERTY TESSEL_EXPORTED_TARGETS ${target})
  if(TESSEL_INSTALL)
    install(TARGETS ${target} EXPORT tesselTargets
            ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT devel)
    file(RELATIVE_PATH folder ${PROJECT_SOURCE_DIR} ${CMAKE_CURRENT_SOURCE_DIR})
    foreach(header IN LISTS T_HDRS)
      get_filename_component(subdir ${header} DIRECTORY)
      install(FILES ${header}
              DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/tessel/${folder}/${subdir} COMPONENT devel)
    endforeach()
  endif()
endfunction()

# tessel_add_umbrella_library()
#
# tessel::tessel: an INTERFACE library linking every exported tessel::<name>, for programs that
# want all of Tessel (call after the last tessel_cc_library).
function(tessel_add_umbrella_library)
  get_property(targets GLOBAL PROPERTY TESSEL_EXPORTED_TARGETS)
  add_library(tessel_tessel INTERFACE)
  target_link_libraries(tessel_tessel INTERFACE ${targets})
  set_target_properties(tessel_tessel PROPERTIES EXPORT_NAME tessel)
  add_library(tessel::tessel ALIAS tessel_tessel)
  if(TESSEL_INSTALL)
    install(TARGETS tessel_tessel EXPORT tesselTargets COMPONENT devel)
  endif()
endfunction()

# tessel_install_package()
#
# The install rules outside the libraries: version.h, the CMake package
# (<libdir>/cmake/tessel/tesselConfig.cmake, tesselConfigVersion.cmake, tesselTargets.cmake;
# namespace tessel::), the pkg-config file <libdir>/pkgconfig/tessel.pc, the `tessel` program
# when built, LICENSE and CHANGELOG.md.
function(tessel_install_package)
  include(CMakePackageConfigHelpers)
  set(config_dir ${CMAKE_INSTALL_LIBDIR}/cmake/tessel)
  install(FILES ${TESSEL_INCLUDE_ROOT}/tessel/version.h
          DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/tessel COMPONENT devel)
  install(EXPORT tesselTargets NAMESPACE tessel:: DESTINATION ${config_dir} COMPONENT devel)
  configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/tesselConfig.cmake.in
                                ${PROJECT_BINARY_DIR}/tesselConfig.cmake
                                INSTALL_DESTINATION ${config_dir})
  # 0.x: a minor version may break the API, so only the same major.minor is compatible.
  write_basic_package_version_file(${PROJECT_BINARY_DIR}/tesselConfigVersion.cmake
                                   COMPATIBILITY SameMinorVersion)
  install(FILES ${PROJECT_BINARY_DIR}/tesselConfig.cmake
                ${PROJECT_BINARY_DIR}/tesselConfigVersion.cmake
          DESTINATION ${config_dir} COMPONENT devel)
  # pkg-config: the libraries in link order (each before what it uses).
  set(TESSEL_PC_LIBS "")
  foreach(name autoshard runtime launch sim nn partitioner cost spmd topology transport core)
    string(APPEND TESSEL_PC_LIBS " -ltessel_${name}")
  endforeach()
  list(JOIN TESSEL_ISA_FLAGS " " TESSEL_PC_ISA_FLAGS)
  file(RELATIVE_PATH TESSEL_PC_TO_PREFIX /prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /prefix)
  configure_file(${PROJECT_SOURCE_DIR}/cmake/tessel.pc.in ${PROJECT_BINARY_DIR}/tessel.pc @ONLY)
  install(FILES ${PROJECT_BINARY_DIR}/tessel.pc
          DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT devel)
  if(TARGET tessel)
    install(TARGETS tessel RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT tools)
  endif()
  install(FILES ${PROJECT_SOURCE_DIR}/LICENSE ${PROJECT_SOURCE_DIR}/CHANGELOG.md
          DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/tessel COMPONENT devel)
endfunction()

# tessel_cc_test(NAME name SRCS ... DEPS ... [LABELS ...] [TIMEOUT s])
#
# One GoogleTest binary registered with CTest as a single test (one process per binary keeps
# ctest -j2 cheap on two cores). Default label `unit`, default timeout 300 s (times
# TESSEL_TEST_TIMEOUT_SCALE, 4 in the sanitizer build). Tests labelled
# `unit` are also prerequisites of the `unit_tests` target (build just what `ctest -L unit` runs).
# Nothing is declared when TESSEL_BUILD_TESTS is OFF.
function(tessel_cc_test)
  if(NOT TESSEL_BUILD_TESTS)
    return()
  endif()
  cmake_parse_arguments(T "" "NAME;TIMEOUT" "SRCS;DEPS;LABELS;ARGS" ${ARGN})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  math(EXPR T_TIMEOUT "${T_TIMEOUT} * ${TESSEL_TEST_TIMEOUT_SCALE}")
  if(NOT T_LABELS)
    set(T_LABELS unit)
  endif()
  add_executable(${T_NAME} ${T_SRCS})
  target_link_libraries(${T_NAME} PRIVATE ${T_DEPS} GTest::gtest GTest::gmock GTest::gtest_main)
  # Tests may include test-only files by their repository path ("tests/...").
  target_include_directories(${T_NAME} PRIVATE ${PROJECT_SOURCE_DIR})
  target_compile_options(${T_NAME} PRIVATE ${TESSEL_WARNING_FLAGS})
  add_test(NAME ${T_NAME} COMMAND ${T_NAME} ${T_ARGS})
  set_tests_properties(${T_NAME} PROPERTIES LABELS "${T_LABELS}" TIMEOUT ${T_TIMEOUT})
  if("unit" IN_LIST T_LABELS)
    set_property(GLOBAL APPEND PROPERTY TESSEL_UNIT_TEST_TARGETS ${T_NAME})
  endif()
endfunction()
