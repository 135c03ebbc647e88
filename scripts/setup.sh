#!/usr/bin/env bash
# Installs every Debian 12 package Tessel needs to build, test and run (idempotent: when all are
# present it only checks). Run as root or with sudo available.
set -euo pipefail

PACKAGES=(
  # Toolchain.
  g++ cmake make ccache git pkg-config
  # Libraries (found by CMake through find_package).
  libabsl-dev libeigen3-dev libtbb-dev libzmq3-dev cppzmq-dev libsodium-dev nlohmann-json3-dev libcli11-dev
  zlib1g-dev
  # oneDNN: the executor's f32 GEMMs. Its CMake package also needs the OpenCL headers and
  # library, which libdnnl-dev only recommends (not installed with --no-install-recommends).
  libdnnl-dev ocl-icd-opencl-dev
  # Tests and benchmarks.
  libgtest-dev libgmock-dev libbenchmark-dev llvm-14-tools clang-format
  # The sanitizer and fuzzing build (scripts/sanitize.sh): clang 14 and its runtime libraries
  # (ASan, UBSan, libFuzzer).
  clang-14 libclang-rt-14-dev
  # Optional benchmark baseline: OpenMPI (benchmarks/mpi_collectives_bench, found by CMake's
  # FindMPI; without it that benchmark is skipped).
  libopenmpi-dev openmpi-bin
  # Data: the real Fashion-MNIST IDX files under /usr/share/datasets/fashion-mnist.
  dataset-fashion-mnist
  # Data: the fortune-cookie text corpus under /usr/share/games/fortunes (the GPT example).
  fortunes
  # Process tools the end-to-end tests use (pgrep, pkill).
  procps
  # Headless rendering of the `--html` pages in tests/cli/html.test (24 packages, 414 MB
  # installed, about 46 s to download and install here).
  chromium
  # The Python package (scripts/test_python.sh): headers for the extension and venv for the
  # test environment; scikit-build-core, pybind11, numpy and pytest come from PyPI into the venv.
  python3-dev python3-venv
)

missing=()
for pkg in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    SUDO="sudo"
  else
    echo "setup: missing packages (${missing[*]}) and not root; run as root or install sudo" >&2
    exit 1
  fi
fi

echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "setup: done"
