#!/usr/bin/env bash
# Checks that layering_test.sh passes a clean tree and reports each kind of violation: a lower
# layer including a higher one (core -> spmd, mesh/topology -> mesh/sim), a library including a
# tool, and a source file in a folder that has no rule.
set -uo pipefail
checker="$1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/core" "$tmp/spmd" "$tmp/mesh/topology" "$tmp/mesh/sim" "$tmp/tools"
printf '#include "core/a.h"\n#include <vector>\n' > "$tmp/core/a.cc"
printf '#include "core/a.h"\n#include "mesh/topology/t.h"\n' > "$tmp/spmd/b.cc"
printf '#include "mesh/topology/t.h"\n' > "$tmp/mesh/topology/t.cc"
printf '#include "mesh/sim/s.h"\n#include "spmd/b.h"\n' > "$tmp/mesh/sim/s.cc"
printf '#include "mesh/sim/s.h"\n#include "tools/x.h"\n' > "$tmp/tools/x.cc"
if ! out=$(bash "$checker" "$tmp"); then
  echo "FAIL: clean tree reported a violation: $out"; exit 1
fi

expect_violation() {  # FILE LINE MESSAGE
  local file="$1" line="$2" message="$3" out
  cp "$tmp/$file" "$tmp/$file.bak"
  printf '%s\n' "$line" >> "$tmp/$file"
  if out=$(bash "$checker" "$tmp"); then
    echo "FAIL: violation not detected: $file: $line"; exit 1
  fi
  echo "$out" | grep -qF "$message" || { echo "FAIL: message: $out"; exit 1; }
  mv "$tmp/$file.bak" "$tmp/$file"
}
expect_violation core/a.cc '#include "spmd/b.h"' 'core/a.cc includes "spmd/b.h"'
expect_violation mesh/topology/t.cc '#include "mesh/sim/s.h"' \
  'mesh/topology/t.cc includes "mesh/sim/s.h"'
expect_violation spmd/b.cc '#include "tools/x.h"' 'spmd/b.cc includes "tools/x.h"'
# The installed layout ("tessel/<folder>/...") is held to the same rules.
expect_violation core/a.cc '#include "tessel/spmd/b.h"' 'core/a.cc includes "spmd/b.h"'
printf '#include "core/a.h"\n' > "$tmp/mesh/loose.cc"
out=$(bash "$checker" "$tmp") && { echo "FAIL: file without a rule not detected"; exit 1; }
echo "$out" | grep -qF 'mesh/loose.cc is in a folder with no layering rule' ||
  { echo "FAIL: message: $out"; exit 1; }
echo "layering selftest: ok"
