#!/usr/bin/env bash
# End to end: `tessel run --example gpt` trains a tiny byte-level GPT for a few steps on the
# 8-device two-slice config (4 host processes, mesh data=2 x fsdp=2 x tensor=2, FSDP x Megatron
# parameters, real ZeroMQ collectives over ICI and DCN), and every step's loss must equal the
# single-device run's within 1e-4 relative; so must the validation losses. Needs the Debian
# package fortunes (skipped, exit 77, when its corpus is missing).
#   gpt_e2e.sh TESSEL_BIN GPT_TRAIN_BIN CONFIG [EXTRA FLAGS...]
set -euo pipefail
TESSEL="$1"; SINGLE="$2"; CONFIG="$3"; shift 3
[ -d /usr/share/games/fortunes ] || { echo "SKIP: the fortunes corpus is not installed"; exit 77; }
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
COMMON=(--steps 4 --layers 2 --d-model 32 --heads 4 --seq-len 32 --batch 8 --warmup 2 --lr 1e-2
        --log-every 1 --eval-every 2 --eval-batches 2 --generate 8 --json --seed 11 "$@")

source "$(dirname "$0")/gpt_compare.sh"
compare_gpt_runs "${COMMON[@]}"

# Only host 0 writes stdout: one summary; 8 devices on 4 hosts; DCN used; a sample was printed
# from the prompt.
[ "$(grep -c '"summary":true' "$WORK/sharded")" -eq 1 ] || { echo "FAIL: expected one summary line"; cat "$WORK/sharded"; exit 1; }
grep -q '"devices":8' "$WORK/sharded" || { echo "FAIL: not 8 devices"; exit 1; }
grep -q '"hosts":4' "$WORK/sharded" || { echo "FAIL: not 4 hosts"; exit 1; }
grep -q '"sample_greedy":"The meaning of life is' "$WORK/sharded" || { echo "FAIL: no sample"; exit 1; }
dcn=$(sed -n 's/.*"step_dcn_bytes":\([0-9.]*\).*/\1/p' "$WORK/sharded")
awk -v d="${dcn:-0}" 'BEGIN { exit !(d > 0) }' || { echo "FAIL: no DCN traffic"; exit 1; }
echo "PASS: 4 steps and 3 evaluations equal within 1e-4 relative; $dcn DCN bytes per step"
