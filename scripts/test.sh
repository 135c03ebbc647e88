#!/usr/bin/env bash
# Builds Tessel (installing what is missing) and runs the whole test suite with CTest; then the
# build is installed to a prefix under it and examples/consumer is built against that prefix with
# find_package(tessel) and pkg-config, and run (scripts/test_install.sh); then the Python
# package is installed into a fresh virtual environment and its pytest suite run
# (scripts/test_python.sh; needs PyPI); last, the unit tests under ASan+UBSan and the fuzz
# targets (scripts/sanitize.sh, a clang build in build-asan/).
#
# Three builds, one per configuration: the first (scripts/build.sh) with the SIMD paths it picks
# (TESSEL_ISA=avx2 where the CPU has AVX2), the Python package's and the sanitizer build with the
# default configuration's baseline x86-64 paths (TESSEL_ISA=portable, what
# `cmake -S . -B b && cmake --build b` gives a CMake user), so every unit test also runs on the
# portable paths, under the sanitizers. Each stage prints its wall time.
#
#   bash scripts/test.sh [ctest options for the first build, e.g. -L unit or -R core_]
#
# Environment: TESSEL_BUILD_DIR (default build).
set -euo pipefail
cd "$(dirname "$0")/.."

# The wall time of each stage, so that a CI log shows where its minutes went.
stage_start=$SECONDS
stage_done() {
  echo "test: $1 took $(( SECONDS - stage_start )) s"
  stage_start=$SECONDS
}

bash scripts/build.sh
stage_done "the build (scripts/build.sh)"
BUILD_DIR="${TESSEL_BUILD_DIR:-build}"
(cd "$BUILD_DIR" && ctest --output-on-failure -j 2 "$@")
stage_done "ctest"

echo "test: install and build the consumer example against it (scripts/test_install.sh)"
bash scripts/test_install.sh "$BUILD_DIR"
stage_done "the install test"

echo "test: the Python package (scripts/test_python.sh)"
bash scripts/test_python.sh
stage_done "the Python package"

# --- Sanitizers and fuzzing --------------------------------------------------------------------
# The unit tests under ASan+UBSan (halting on the first report) and every libFuzzer target on its
# corpus plus TESSEL_FUZZ_SECONDS (default 20) of fuzzing, in a clang build of just those targets
# (scripts/sanitize.sh; tests/README.md, "Sanitizers and fuzzing").
echo "test: ASan+UBSan unit tests and fuzz targets (scripts/sanitize.sh)"
bash scripts/sanitize.sh
stage_done "the sanitizer build and tests"
# --- end of sanitizers and fuzzing -------------------------------------------------------------
