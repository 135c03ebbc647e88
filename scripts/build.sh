#!/usr/bin/env bash
# Installs what is missing (scripts/setup.sh), then configures and builds Tessel in build/.
#
#   bash scripts/build.sh [extra cmake -D options]
#
# Environment: TESSEL_BUILD_DIR (default build), TESSEL_ISA (default: avx2 when this CPU has AVX2
# and FMA, otherwise portable; see README "Build options"), TESSEL_JOBS (default: nproc).
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh

BUILD_DIR="${TESSEL_BUILD_DIR:-build}"
if [ -z "${TESSEL_ISA:-}" ]; then
  if grep -qw avx2 /proc/cpuinfo 2>/dev/null && grep -qw fma /proc/cpuinfo 2>/dev/null; then
    TESSEL_ISA=avx2
  else
    TESSEL_ISA=portable
  fi
fi
JOBS="${TESSEL_JOBS:-$(nproc)}"

cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DTESSEL_ISA="$TESSEL_ISA" "$@" >/dev/null
cmake --build "$BUILD_DIR" -j "$JOBS"
