#!/usr/bin/env bash
# Kill one host of a running `tessel run` with SIGKILL: the launcher must exit non-zero within
# 10 s with a message naming that host, and no host process may be left.
#   run_kill_e2e.sh TESSEL_BIN CONFIG
set -uo pipefail
TESSEL="$1"; CONFIG="$2"
WORK=$(mktemp -d)
MARKER="0.000987654"   # a unique --lr value: finds this test's processes
cleanup() { pkill -9 -f -- "--lr $MARKER" 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT

"$TESSEL" run "$CONFIG" --example fashion-mnist-mlp --epochs 1 --log-every 1 --json \
  --lr "$MARKER" >"$WORK/out" 2>"$WORK/err" &
launcher=$!

# Wait for training to be under way (two logged steps; `tessel run --json` passes the records
# to stderr as they come).
for _ in $(seq 1 600); do
  [ "$(grep -c '"step"' "$WORK/err" 2>/dev/null)" -ge 2 ] && break
  kill -0 "$launcher" 2>/dev/null || { echo "FAIL: tessel run ended early"; cat "$WORK/err"; exit 1; }
  sleep 0.1
done
[ "$(grep -c '"step"' "$WORK/err")" -ge 2 ] || { echo "FAIL: no training steps after 60 s"; cat "$WORK/err"; exit 1; }

victim=""
for pid in $(pgrep -P "$launcher"); do
  if tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx 'TESSEL_HOST_INDEX=2'; then victim=$pid; fi
done
[ -n "$victim" ] || { echo "FAIL: host 2's process not found among the launcher's children"; exit 1; }

start=$(date +%s.%N)
kill -9 "$victim"
status=0
for _ in $(seq 1 150); do
  kill -0 "$launcher" 2>/dev/null || break
  sleep 0.1
done
if kill -0 "$launcher" 2>/dev/null; then echo "FAIL: tessel run still running 15 s after the kill"; exit 1; fi
wait "$launcher"; status=$?
elapsed=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
echo "tessel run exited $status after ${elapsed} s; stderr:"
cat "$WORK/err"
[ "$status" -ne 0 ] || { echo "FAIL: exit status 0"; exit 1; }
awk -v e="$elapsed" 'BEGIN { exit !(e < 10) }' || { echo "FAIL: took ${elapsed} s (limit 10 s)"; exit 1; }
grep -q "host 2" "$WORK/err" || { echo "FAIL: no message names host 2"; exit 1; }
sleep 0.5
if pgrep -f -- "--lr $MARKER" >/dev/null; then echo "FAIL: processes left:"; pgrep -af -- "--lr $MARKER"; exit 1; fi
echo "PASS"
