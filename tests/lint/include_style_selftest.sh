#!/usr/bin/env bash
# Checks that the include-style lint (scripts/dev/rewrite_includes.py --check) passes a tree with
# "tessel/..." includes and reports an old-style one ("core/...") with its file and line, and
# that the rewrite fixes it and is idempotent (a second run changes nothing).
set -uo pipefail
script="$1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
git -C "$tmp" init -q
mkdir -p "$tmp/core" "$tmp/tools"
printf '#include "tessel/core/a.h"\n#include <vector>\n#include "absl/status/status.h"\n' \
  > "$tmp/core/a.cc"
printf '#include "tools/command.h"\n#include "tessel/mesh/runtime/local_mesh.h"\n' \
  > "$tmp/tools/x.cc"
git -C "$tmp" add -A
if ! out=$(python3 "$script" --check "$tmp"); then
  echo "FAIL: clean tree reported: $out"; exit 1
fi
printf '#  include "mesh/sim/simulator.h"\n' >> "$tmp/tools/x.cc"
if out=$(python3 "$script" --check "$tmp"); then
  echo "FAIL: old include style not detected"; exit 1
fi
echo "$out" | grep -qF 'tools/x.cc:3: old include style' || { echo "FAIL: message: $out"; exit 1; }
# --no-format: the rewrite itself (the clang-format step that sorts includes is clang-format's).
python3 "$script" --no-format "$tmp" >/dev/null || { echo "FAIL: the rewrite failed"; exit 1; }
grep -qxF '#  include "tessel/mesh/sim/simulator.h"' "$tmp/tools/x.cc" ||
  { echo "FAIL: not rewritten: $(cat "$tmp/tools/x.cc")"; exit 1; }
grep -qxF '#include "tools/command.h"' "$tmp/tools/x.cc" ||
  { echo "FAIL: a program's include was rewritten"; exit 1; }
before=$(cat "$tmp/tools/x.cc" "$tmp/core/a.cc")
python3 "$script" --no-format "$tmp" >/dev/null
[ "$before" = "$(cat "$tmp/tools/x.cc" "$tmp/core/a.cc")" ] || { echo "FAIL: not idempotent"; exit 1; }
python3 "$script" --check "$tmp" >/dev/null || { echo "FAIL: still reported after the rewrite"; exit 1; }
echo "include style selftest: ok"
