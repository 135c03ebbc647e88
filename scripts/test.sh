#!/usr/bin/env bash
# Builds Tessel (installing what is missing) and runs the whole test suite with CTest, then
# builds the default CMake configuration (no options: TESSEL_ISA=portable, what
# `cmake -S . -B b && cmake --build b` gives a CMake user) and runs its unit tests, so both the
# SIMD paths scripts/build.sh picks and the baseline x86-64 paths are tested; then the first build
# is installed to a prefix under it and examples/consumer is built against that prefix with
# find_package(tessel) and pkg-config, and run (scripts/test_install.sh); last, the Python
# package is installed into a fresh virtual environment and its pytest suite run
# (scripts/test_python.sh; needs PyPI). Then the unit tests under ASan+UBSan and the fuzz
# targets (scripts/sanitize.sh, a clang build in build-asan/).
#
#   bash scripts/test.sh [ctest options for the first build, e.g. -L unit or -R core_]
#
# Environment: TESSEL_BUILD_DIR (default build), TESSEL_DEFAULT_BUILD_DIR (default
# build-default), TESSEL_JOBS (default: nproc).
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/build.sh
BUILD_DIR="${TESSEL_BUILD_DIR:-build}"
(cd "$BUILD_DIR" && ctest --output-on-failure -j 2 "$@")

echo "test: install and build the consumer example against it (scripts/test_install.sh)"
bash scripts/test_install.sh "$BUILD_DIR"

DEFAULT_DIR="${TESSEL_DEFAULT_BUILD_DIR:-build-default}"
JOBS="${TESSEL_JOBS:-$(nproc)}"
echo "test: the default configuration in $DEFAULT_DIR (unit tests)"
cmake -S . -B "$DEFAULT_DIR" >/dev/null
cmake --build "$DEFAULT_DIR" -j "$JOBS" --target unit_tests
ctest --test-dir "$DEFAULT_DIR" --output-on-failure -j 2 -L unit

echo "test: the Python package (scripts/test_python.sh)"
bash scripts/test_python.sh

# --- Sanitizers and fuzzing --------------------------------------------------------------------
# The unit tests under ASan+UBSan (halting on the first report) and every libFuzzer target on its
# corpus plus TESSEL_FUZZ_SECONDS (default 20) of fuzzing, in a clang build of just those targets
# (scripts/sanitize.sh; tests/README.md, "Sanitizers and fuzzing").
echo "test: ASan+UBSan unit tests and fuzz targets (scripts/sanitize.sh)"
bash scripts/sanitize.sh
# --- end of sanitizers and fuzzing -------------------------------------------------------------
