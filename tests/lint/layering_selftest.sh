#!/usr/bin/env bash
# Checks that layering_test.sh reports a core file including spmd/, and passes a clean tree.
set -uo pipefail
checker="$1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/core" "$tmp/spmd"
printf '#include "core/a.h"\n#include <vector>\n' > "$tmp/core/a.cc"
printf '#include "core/a.h"\n' > "$tmp/spmd/b.cc"
if ! bash "$checker" "$tmp" >/dev/null; then
  echo "FAIL: clean tree reported a violation"; exit 1
fi
printf '#include "spmd/b.h"\n' >> "$tmp/core/a.cc"
out=$(bash "$checker" "$tmp")
if [ $? -eq 0 ]; then
  echo "FAIL: violation not detected"; exit 1
fi
echo "$out" | grep -q 'core/a.cc includes "spmd/b.h"' || { echo "FAIL: message: $out"; exit 1; }
echo "layering selftest: ok"
