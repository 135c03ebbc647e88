#!/usr/bin/env bash
# Checks that no_per_config_factors.py passes a clean tree and reports a per-model factor, an
# efficiency outside a device spec, two efficiency sets for one device, and an unsourced one.
set -uo pipefail
checker="$1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/configs/models" "$tmp/tests/validation"
spec='"device_spec": {"name": "X", "efficiency": {"dot": 0.8}}'
echo "{\"name\": \"a\", \"source\": [\"efficiency dot: a benchmark\"], $spec}" > "$tmp/configs/a.json"
echo "{\"name\": \"b\", \"source\": [\"efficiency dot: a benchmark\"], $spec}" > "$tmp/configs/b.json"
echo '{"name": "m", "layers": 2}' > "$tmp/configs/models/m.json"
if ! out=$(python3 "$checker" "$tmp"); then echo "FAIL: clean tree reported: $out"; exit 1; fi
expect() {  # expect MESSAGE: the checker fails and prints MESSAGE
  if out=$(python3 "$checker" "$tmp"); then echo "FAIL: not reported: $1"; exit 1; fi
  echo "$out" | grep -qF "$1" || { echo "FAIL: message: $out (want $1)"; exit 1; }
}
echo '{"name": "m", "layers": 2, "mfu_correction": 0.9}' > "$tmp/configs/models/m.json"
expect 'configs/models/m.json: /mfu_correction: a key that tunes a result'
echo '{"name": "m", "layers": 2}' > "$tmp/configs/models/m.json"
echo '{"runs": [{"id": "r", "fudge": 1.1}]}' > "$tmp/tests/validation/runs.json"
expect 'tests/validation/runs.json: /runs/0/fudge: a key that tunes a result'
echo '{"runs": []}' > "$tmp/tests/validation/runs.json"
echo "{\"name\": \"b\", \"source\": [\"efficiency dot: a benchmark\"], \"device_spec\": {\"name\": \"X\", \"efficiency\": {\"dot\": 0.7}}}" > "$tmp/configs/b.json"
expect 'differs from configs/a.json'
echo "{\"name\": \"b\", \"source\": [], $spec}" > "$tmp/configs/b.json"
expect 'configs/b.json: /device_spec/efficiency/dot: no source line names "efficiency dot"'
echo "no_per_config_factors selftest: ok"
