#!/usr/bin/env bash
# Bad input to the main job gives one clear error line and a non-zero exit, never a hang:
# mesh flags that do not fit the config, a missing dataset, a missing config, and an
# unreachable coordinator.
#   run_errors_test.sh TESSEL_BIN FASHION_MNIST_BIN CONFIG
set -uo pipefail
TESSEL="$1"; FASHION="$2"; CONFIG="$3"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
fail=0

# expect_error NAME PATTERN COMMAND...: non-zero exit, exactly one stderr line matching PATTERN.
expect_error() {
  local name="$1" pattern="$2"; shift 2
  timeout 60 "$@" >"$WORK/out" 2>"$WORK/err"
  local status=$?
  local lines; lines=$(wc -l <"$WORK/err")
  if [ "$status" -eq 0 ] || [ "$status" -eq 124 ] || [ "$lines" -ne 1 ] || ! grep -q -- "$pattern" "$WORK/err"; then
    echo "FAIL $name: exit $status, $lines stderr lines (want 1 matching '$pattern'):"; cat "$WORK/err"; fail=1
  else
    echo "ok   $name (exit $status): $(cat "$WORK/err")"
  fi
}

expect_error "mesh flags" "--ici-mesh-shape 4,4" \
  "$TESSEL" run "$CONFIG" --example fashion-mnist-mlp --ici-mesh-shape 4,4
expect_error "axis names" "axis" \
  "$TESSEL" run "$CONFIG" --example fashion-mnist-mlp --axis-names data
expect_error "dataset" "/nonexistent/fashion" \
  "$TESSEL" run "$CONFIG" --example fashion-mnist-mlp --data-dir /nonexistent/fashion
expect_error "config" "no_such_config.json" \
  "$TESSEL" run "$WORK/no_such_config.json" --example fashion-mnist-mlp
echo '{"slices": [' >"$WORK/broken.json"
expect_error "config json" "broken.json" \
  "$TESSEL" run "$WORK/broken.json" --example fashion-mnist-mlp
# Sizes past int64 or the host: a batch of 2^59 sequences wrapped its token count and wrote past
# its buffer (SIGSEGV on one host, std::length_error on another).
expect_error "batch tokens" "is more than 2147483648 tokens a step" \
  "$TESSEL" run "$CONFIG" --example gpt --steps 1 --layers 1 --d-model 32 --heads 4 --seq-len 32 \
  --batch 576460752303423488
# A host whose coordinator is not there: bootstrap times out (2 s here) with the address named.
start=$(date +%s)
TESSEL_HOST_INDEX=1 TESSEL_NUM_HOSTS=4 TESSEL_CONFIG="$CONFIG" \
  TESSEL_COORDINATOR="ipc://$WORK/nobody-listens" TESSEL_BOOTSTRAP_TIMEOUT_S=2 \
  expect_error "coordinator" "nobody-listens" "$FASHION" --epochs 1
[ $(( $(date +%s) - start )) -le 20 ] || { echo "FAIL coordinator: took more than 20 s"; fail=1; }

exit $fail
