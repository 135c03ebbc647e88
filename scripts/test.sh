#!/usr/bin/env bash
# Builds Tessel (installing what is missing) and runs the whole test suite with CTest.
#
#   bash scripts/test.sh [ctest options, e.g. -L unit or -R core_]
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/build.sh
BUILD_DIR="${TESSEL_BUILD_DIR:-build}"
cd "$BUILD_DIR"
ctest --output-on-failure -j 2 "$@"
