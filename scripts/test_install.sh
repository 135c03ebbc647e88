#!/usr/bin/env bash
# Installs a built Tessel into a fresh prefix and uses it as a project outside the repository
# would: configures and builds examples/consumer with find_package(tessel) against that prefix
# alone, runs it (it trains a small classifier on 4 in-process devices and exits 0 when the loss
# went down) and the program of docs/tutorial.md, then builds the consumer with pkg-config
# (tessel.pc) and runs that too, and checks that the installed `tessel --version` and the program
# agree on the version.
#
#   bash scripts/test_install.sh [BUILD_DIR]      (default: build; must be built already)
#
# Everything it makes is under BUILD_DIR: install-test/ (the prefix), consumer/ (the build).
# Environment: TESSEL_JOBS (default nproc).
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR="$(realpath "${1:-build}")"
JOBS="${TESSEL_JOBS:-$(nproc)}"
PREFIX="$BUILD_DIR/install-test"
CONSUMER="$BUILD_DIR/consumer"
start=$(date +%s)
rm -rf "$PREFIX" "$CONSUMER"

cmake --install "$BUILD_DIR" --prefix "$PREFIX" >/dev/null
for f in lib/cmake/tessel/tesselConfig.cmake lib/cmake/tessel/tesselConfigVersion.cmake \
         lib/cmake/tessel/tesselTargets.cmake lib/pkgconfig/tessel.pc include/tessel/version.h \
         include/tessel/core/shape.h include/tessel/mesh/runtime/local_mesh.h \
         lib/libtessel_core.a bin/tessel share/doc/tessel/LICENSE; do
  [ -e "$PREFIX/$f" ] || { echo "test_install: $f is not installed" >&2; exit 1; }
done

# Every Tessel header an installed header includes is installed too (HDRS lists in the
# CMakeLists.txt files) and named "tessel/...", and none includes a program's header.
missing=0
while IFS= read -r header; do
  while IFS= read -r inc; do
    case "$inc" in
      tessel/*) [ -e "$PREFIX/include/$inc" ] || { echo "$header includes $inc"; missing=1; } ;;
      core/*|spmd/*|partitioner/*|nn/*|mesh/*|transport/*|tools/*|examples/*|tests/*|benchmarks/*)
        echo "$header includes $inc"; missing=1 ;;
    esac
  done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$header")
done < <(find "$PREFIX/include/tessel" -name '*.h')
[ "$missing" -eq 0 ] || { echo "test_install: installed headers include what is not installed" >&2; exit 1; }

# CMAKE_PREFIX_PATH is the prefix only, so a package found elsewhere cannot stand in for it.
launcher=()
if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
cmake -S examples/consumer -B "$CONSUMER" -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$PREFIX" "${launcher[@]}" >/dev/null
cmake --build "$CONSUMER" -j "$JOBS" >/dev/null
"$CONSUMER/consumer" | tee "$CONSUMER/output.txt"
grep -qx "the loss went down" "$CONSUMER/output.txt"

"$CONSUMER/tutorial" "$CONSUMER/tutorial-out" > "$CONSUMER/tutorial.txt"
grep -q "^HLO module: f32\[8,16\], y\[0\]\[0\] = 8.0$" "$CONSUMER/tutorial.txt"
[ -s "$CONSUMER/tutorial-out/trace.json" ]

version="$("$PREFIX/bin/tessel" --version)"
grep -qx "$version on 4 in-process devices" "$CONSUMER/output.txt" || {
  echo "test_install: tessel --version says '$version', the consumer printed:" >&2
  head -1 "$CONSUMER/output.txt" >&2
  exit 1
}

# The same program through pkg-config.
export PKG_CONFIG_PATH="$PREFIX/lib/pkgconfig"
# shellcheck disable=SC2046  # pkg-config's flags are words
${CXX:-c++} -O1 examples/consumer/main.cc -o "$CONSUMER/consumer_pkg_config" \
  $(pkg-config --cflags --libs tessel)
"$CONSUMER/consumer_pkg_config" > "$CONSUMER/output_pkg_config.txt"
grep -qx "the loss went down" "$CONSUMER/output_pkg_config.txt"

echo "test_install: install, find_package and pkg-config consumers ok ($(( $(date +%s) - start )) s)"
