#!/usr/bin/env bash
# The sanitizer and fuzzing step of CI (tests/README.md, "Sanitizers and fuzzing"): builds, with
# clang 14, AddressSanitizer and UndefinedBehaviorSanitizer (-fno-sanitize-recover=all: the first
# report fails the test), into build-asan/, only the libFuzzer targets and the unit tests of the
# code that reads outside input (HLO text, shardings, meshes and partition specs, topology JSON,
# sizes, environment variables, files, the transport's wire format and shared memory), then runs
# those unit tests and every fuzz target on its committed corpus in fuzz/corpus/ plus
# TESSEL_FUZZ_SECONDS of fuzzing.
#
#   bash scripts/sanitize.sh [ctest options, e.g. -R fuzz_]
#
# Environment: TESSEL_ASAN_BUILD_DIR (default build-asan), TESSEL_FUZZ_SECONDS (default 20),
# TESSEL_SANITIZER_TESTS (the test targets; default below, "unit_tests" for every unit test),
# TESSEL_JOBS (default: nproc).
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh

DIR="${TESSEL_ASAN_BUILD_DIR:-build-asan}"
JOBS="${TESSEL_JOBS:-$(nproc)}"
FUZZ_SECONDS="${TESSEL_FUZZ_SECONDS:-20}"

cmake -S . -B "$DIR" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=clang++-14 \
  -DTESSEL_SANITIZE=ON -DTESSEL_FUZZ=ON -DTESSEL_FUZZ_SECONDS="$FUZZ_SECONDS" >/dev/null
# The unit tests of the parsers, shapes and the transport. The kernels, partitioner, nn and
# simulator tests run in the normal builds only: under ASan they are about 60 more objects to
# compile, more than doubling this step.
TESTS="${TESSEL_SANITIZER_TESTS:-core_ir_test core_hlo_test spmd_test mesh_topology_test transport_test}"
# shellcheck disable=SC2086
cmake --build "$DIR" -j "$JOBS" --target fuzz_targets $TESTS
if [ "$TESTS" = unit_tests ]; then
  SELECT=(-L 'unit|fuzz')
else
  SELECT=(-R "^(${TESTS// /|}|fuzz_.*)\$")
fi

# halt_on_error is what -fno-sanitize-recover=all compiles in; the options make the reports
# readable and catch what ASan leaves off by default.
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:strict_string_checks=1:check_initialization_order=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
ctest --test-dir "$DIR" --output-on-failure -j 2 "${SELECT[@]}" "$@"
