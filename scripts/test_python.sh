#!/usr/bin/env bash
# Builds and tests the Python package: makes a fresh virtual environment, `pip install`s the
# repository into it (pyproject.toml: scikit-build-core + CMake, only the extension target and
# the libraries it links are built, in build/python/ which is kept between runs) and runs the
# pytest suite in python/tests/.
#
#   bash scripts/test_python.sh [VENV_DIR]      (default: build/python-venv)
#
# Environment: PYTHON (default python3) makes the venv; TESSEL_JOBS (default nproc) compile
# jobs; PYTEST_ARGS are passed to pytest.
# The JAX round-trip test is skipped unless jax is importable in that venv (install it there,
# or run python/tests with /work/venv-jax style environments that have it).
set -euo pipefail
cd "$(dirname "$0")/.."

VENV="$(realpath -m "${1:-build/python-venv}")"
PYTHON="${PYTHON:-python3}"
# The CMake build inside `pip install` uses as many jobs as build.sh does.
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-${TESSEL_JOBS:-$(nproc)}}"

rm -rf "$VENV"
"$PYTHON" -m venv "$VENV"
start=$(date +%s)
"$VENV/bin/python" -m pip install -q ".[test]"
echo "test_python: pip install took $(( $(date +%s) - start )) s"
# From outside the repository, so that `import tessel` is the installed package.
cd python/tests
"$VENV/bin/python" -m pytest -q ${PYTEST_ARGS:-} .
