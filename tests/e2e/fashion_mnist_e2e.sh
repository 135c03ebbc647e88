#!/usr/bin/env bash
# End to end: `tessel run` trains the Fashion-MNIST MLP for a few steps on the 8-device two-slice
# config (4 host processes, real ZeroMQ collectives), and every step's loss must equal the
# single-device run's within 1e-4 relative.
#   fashion_mnist_e2e.sh TESSEL_BIN FASHION_MNIST_BIN CONFIG
set -euo pipefail
TESSEL="$1"; SINGLE="$2"; CONFIG="$3"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
COMMON=(--epochs 1 --steps 4 --log-every 1 --json --seed 7 --eval-batch-size 2000)

"$TESSEL" run "$CONFIG" --example fashion-mnist-mlp "${COMMON[@]}" >"$WORK/sharded" 2>"$WORK/sharded.err" || {
  echo "FAIL: tessel run exited $?"; cat "$WORK/sharded.err"; exit 1; }
"$SINGLE" --single-device "${COMMON[@]}" >"$WORK/single" 2>"$WORK/single.err" || {
  echo "FAIL: single-device run exited $?"; cat "$WORK/single.err"; exit 1; }

# {"loss":2.30707,"step":1} -> "1 2.30707"
losses() { sed -n 's/^{"loss":\([^,]*\),"step":\([0-9]*\)}$/\2 \1/p' "$1"; }
# `tessel run --json` passes host 0's records to stderr as they come and prints one object.
losses "$WORK/sharded.err" >"$WORK/sharded.losses"
losses "$WORK/single" >"$WORK/single.losses"
echo "step sharded single"
join "$WORK/sharded.losses" "$WORK/single.losses" | tee "$WORK/joined"
[ "$(wc -l <"$WORK/joined")" -eq 4 ] || { echo "FAIL: expected 4 steps in both runs"; cat "$WORK/sharded" "$WORK/single"; exit 1; }
awk '{ d = $2 - $3; if (d < 0) d = -d; r = d / ($3 < 0 ? -$3 : $3);
       if (r > 1e-4) { printf "FAIL: step %d: sharded %s vs single %s (rel %.3g)\n", $1, $2, $3, r; bad = 1 } }
     END { exit bad }' "$WORK/joined"

# Only host 0 writes stdout: one summary; it ran on 8 devices of 4 hosts and used DCN.
[ "$(grep -c '"summary":true' "$WORK/sharded")" -eq 1 ] || { echo "FAIL: expected one summary line"; cat "$WORK/sharded"; exit 1; }
grep -q '"devices":8' "$WORK/sharded" || { echo "FAIL: not 8 devices"; exit 1; }
grep -q '"hosts":4' "$WORK/sharded" || { echo "FAIL: not 4 hosts"; exit 1; }
dcn=$(sed -n 's/.*"host0_dcn_bytes":\([0-9]*\).*/\1/p' "$WORK/sharded")
[ "${dcn:-0}" -gt 0 ] || { echo "FAIL: no DCN traffic"; exit 1; }
echo "PASS: 4 steps equal within 1e-4 relative; host 0 sent $dcn bytes over DCN"
