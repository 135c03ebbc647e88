#!/usr/bin/env bash
# The sanitizer and fuzzing step of CI (tests/README.md, "Sanitizers and fuzzing"): builds, with
# clang 14, AddressSanitizer and UndefinedBehaviorSanitizer (-fno-sanitize-recover=all: the first
# report fails the test), into build-asan/, the libFuzzer targets and every unit test (ctest label
# `unit`), then runs those unit tests and every fuzz target on its committed corpus in
# fuzz/corpus/ plus TESSEL_FUZZ_SECONDS of fuzzing. The integration, golden and e2e suites stay
# out of CI's sanitizer run (tests/README.md, "Sanitizers and fuzzing", says why and how to run
# them by hand).
#
#   bash scripts/sanitize.sh [ctest options, e.g. -R fuzz_]
#
# Environment: TESSEL_ASAN_BUILD_DIR (default build-asan), TESSEL_FUZZ_SECONDS (default 20),
# TESSEL_SANITIZER_TESTS (the test targets; default "unit_tests", every unit test; or a list of
# test targets, e.g. "core_hlo_test spmd_test"),
# TESSEL_JOBS (default: nproc).
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh

DIR="${TESSEL_ASAN_BUILD_DIR:-build-asan}"
JOBS="${TESSEL_JOBS:-$(nproc)}"
FUZZ_SECONDS="${TESSEL_FUZZ_SECONDS:-20}"

cmake -S . -B "$DIR" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=clang++-14 \
  -DTESSEL_SANITIZE=ON -DTESSEL_FUZZ=ON -DTESSEL_FUZZ_SECONDS="$FUZZ_SECONDS" >/dev/null
# Every unit test: cold on 2 cores this step (build and run) is the largest sanitizer set that
# keeps CI under its 40 minutes (the measured times are in tests/README.md).
TESTS="${TESSEL_SANITIZER_TESTS:-unit_tests}"
# shellcheck disable=SC2086
cmake --build "$DIR" -j "$JOBS" --target fuzz_targets $TESTS
if [ "$TESTS" = unit_tests ]; then
  SELECT=(-L 'unit|fuzz')
else
  SELECT=(-R "^(${TESTS// /|}|fuzz_.*)\$")
fi

# halt_on_error is what -fno-sanitize-recover=all compiles in; the options make the reports
# readable and catch what ASan leaves off by default (stack use after return: a thread or a
# callback still holding a dead frame's local; on the unit tests it cost no more than the
# run-to-run noise).
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:strict_string_checks=1:check_initialization_order=1:detect_stack_use_after_return=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
ctest --test-dir "$DIR" --output-on-failure -j 2 "${SELECT[@]}" "$@"
