#!/usr/bin/env bash
# Checks that check_simulator_doc.py passes a current example, reports a stale output line and a
# line the command does not print, rewrites the stale line with --update, and reports a --help
# flag that no example shows.
# Usage: simulator_doc_selftest.sh CHECKER TESSEL_BINARY
set -uo pipefail
checker="$1"
tessel="$2"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
write_doc() {  # write_doc STEP_LINE: one --assume-trip-count example whose output shows STEP_LINE
  cat > "$tmp/doc.md" <<DOC
\`\`\`sh
\$ tessel simulate configs/single_device.json --hlo tests/cli/Inputs/while_unknown_trip_count.hlo \\
    --assume-trip-count 10
\`\`\`
Real output (lines 2-3):
\`\`\`
$1
compute        104.858 us
\`\`\`
DOC
}
check() { python3 "$checker" --tessel "$tessel" --doc "$tmp/doc.md" "$@"; }
current='step time      104.858 us (in order; in order 104.858 us, overlapped 104.858 us)'
write_doc "$current"
if ! out=$(check --no-flag-check); then echo "FAIL: current doc reported: $out"; exit 1; fi
write_doc 'step time      99.000 us (in order; in order 99.000 us, overlapped 99.000 us)'
if out=$(check --no-flag-check); then echo "FAIL: stale line not reported"; exit 1; fi
echo "$out" | grep -qF "doc.md:7: shows 'step time      99.000 us" ||
  { echo "FAIL: message: $out"; exit 1; }
check --no-flag-check --update > /dev/null
grep -qxF "$current" "$tmp/doc.md" || { echo "FAIL: --update did not rewrite the line"; exit 1; }
write_doc 'memory         1.00 GiB per device'
if out=$(check --no-flag-check); then echo "FAIL: a line the command does not print passed"; exit 1; fi
echo "$out" | grep -qF "no output line like 'memory " || { echo "FAIL: message: $out"; exit 1; }
write_doc "$current"
if out=$(check); then echo "FAIL: flags without examples not reported"; exit 1; fi
echo "$out" | grep -qF -- "--model (in --help) has no example with its output in the doc" ||
  { echo "FAIL: message: $out"; exit 1; }
echo "simulator_doc selftest: ok"
