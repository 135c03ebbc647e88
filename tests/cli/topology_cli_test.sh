#!/usr/bin/env bash
# Checks `tessel topology` end to end: every preset in CONFIGS_DIR validates (exit 0) in text
# and --json form; bad files exit 1 with exactly one line `tessel topology: ...` on stderr; bad
# arguments exit 2.
#
# Usage: topology_cli_test.sh TESSEL_BINARY CONFIGS_DIR
set -u
tessel="$1"
configs="$2"
source "$(dirname "$0")/cli_test_lib.sh"



# expect_one_error_line PREFIX: stderr is exactly one line starting with PREFIX.
expect_one_error_line() {
  local lines
  lines=$(wc -l <"$tmp/err")
  if [[ "$lines" != 1 ]] || ! grep -q "^$1" "$tmp/err"; then
    fail "expected one stderr line starting with '$1', got: $(cat "$tmp/err")"
  fi
}

count=0
for config in "$configs"/*.json; do
  count=$((count + 1))
  if expect_exit 0 topology "$config"; then
    grep -q "^total: " "$tmp/out" || fail "no 'total:' line for $config"
  fi
  if expect_exit 0 topology "$config" --json; then
    if command -v python3 >/dev/null; then
      python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["num_devices"] > 0' \
        <"$tmp/out" || fail "--json output of $config is not the expected JSON"
    fi
  fi
done
[[ "$count" -ge 8 ]] || fail "expected at least 8 presets in $configs, found $count"

# A file that does not validate: exit 1, one line naming the file and the JSON pointer.
sed 's/"hosts": 2/"hosts": 0/' "$configs/two_slices_2x2hosts.json" >"$tmp/bad.json"
expect_exit 1 topology "$tmp/bad.json" && expect_one_error_line "tessel topology: $tmp/bad.json: /slices/0/hosts: expected a positive integer, got 0"
# Not JSON at all.
printf '{"slices": [' >"$tmp/truncated.json"
expect_exit 1 topology "$tmp/truncated.json" && expect_one_error_line "tessel topology: $tmp/truncated.json: invalid JSON"
# A missing file.
expect_exit 1 topology "$tmp/no_such_file.json" && expect_one_error_line "tessel topology: $tmp/no_such_file.json: no such file"
# A directory.
expect_exit 1 topology "$tmp" && expect_one_error_line "tessel topology: "

# Bad arguments: exit 2 with one line.
expect_exit 2 topology && expect_one_error_line "tessel: "
expect_exit 2 topology "$configs/v4-8.json" --bogus && expect_one_error_line "tessel: "
expect_exit 2 topology "$configs/v4-8.json" "$configs/v4-16.json" && expect_one_error_line "tessel: "
expect_exit 2 no-such-command

if [[ "$failures" -ne 0 ]]; then
  echo "$failures failure(s)" >&2
  exit 1
fi
echo "tessel topology: $count presets and all error cases passed"
