#!/usr/bin/env bash
# Checks that function_length.py passes a function of exactly the limit, and reports one a line
# longer, braces in strings and comments notwithstanding, with its file and first line.
set -uo pipefail
checker="$1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/core"

# function LINES: a function whose signature, body and closing brace span LINES lines.
function_of() {
  echo "int F(int x) {"
  echo '  const char* s = "}}} {";  // } not a brace'
  for ((i = 0; i < $1 - 3; ++i)); do echo "  x += $i;"; done
  echo "}"
}
{ echo "namespace a {"; echo "struct S { int v = 0; };"; function_of 10; echo "}  // namespace a"; } \
  > "$tmp/core/small.cc"
if ! out=$(python3 "$checker" "$tmp" --max-lines 10); then
  echo "FAIL: a function of exactly the limit was reported: $out"; exit 1
fi
{ echo "namespace a {"; function_of 11; echo "}  // namespace a"; } > "$tmp/core/big.cc"
if out=$(python3 "$checker" "$tmp" --max-lines 10); then
  echo "FAIL: a function one line over the limit was not reported"; exit 1
fi
echo "$out" | grep -qF 'core/big.cc:2: function of 11 lines (limit 10)' ||
  { echo "FAIL: message: $out"; exit 1; }
echo "function length selftest: ok"
