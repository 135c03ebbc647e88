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

"$TESSEL" run "$CONFIG" --example gpt "${COMMON[@]}" >"$WORK/sharded" 2>"$WORK/sharded.err" || {
  echo "FAIL: tessel run exited $?"; cat "$WORK/sharded.err"; exit 1; }
"$SINGLE" --single-device "${COMMON[@]}" >"$WORK/single" 2>"$WORK/single.err" || {
  echo "FAIL: single-device run exited $?"; cat "$WORK/single.err"; exit 1; }

# "KIND STEP VALUE" per record: KIND loss (training step) or val_loss (evaluation).
values() {
  sed -n -e 's/^{"grad_norm":[^,]*,"loss":\([^,]*\),.*"step":\([0-9]*\),.*$/loss \2 \1/p' \
         -e 's/^{"step":\([0-9]*\),"val_bits_per_byte":[^,]*,"val_loss":\([^,}]*\)}$/val_loss \1 \2/p' "$1"
}
# `tessel run --json` passes host 0's records to stderr as they come and prints one object.
values "$WORK/sharded.err" | sed 's/ /_/' | sort >"$WORK/sharded.values"
values "$WORK/single" | sed 's/ /_/' | sort >"$WORK/single.values"
echo "record sharded single"
join "$WORK/sharded.values" "$WORK/single.values" | tee "$WORK/joined"
# 4 training steps and 3 evaluations (before training, after step 2, after step 4).
[ "$(grep -c '^loss_' "$WORK/joined")" -eq 4 ] || { echo "FAIL: expected 4 steps in both runs"; cat "$WORK/sharded" "$WORK/single"; exit 1; }
[ "$(grep -c '^val_loss_' "$WORK/joined")" -eq 3 ] || { echo "FAIL: expected 3 evaluations in both runs"; cat "$WORK/sharded" "$WORK/single"; exit 1; }
awk '{ d = $2 - $3; if (d < 0) d = -d; r = d / ($3 < 0 ? -$3 : $3);
       if (r > 1e-4) { printf "FAIL: %s: sharded %s vs single %s (rel %.3g)\n", $1, $2, $3, r; bad = 1 } }
     END { exit bad }' "$WORK/joined"
# Training moved the loss: the last step is below the first.
first=$(grep '^loss_1 ' "$WORK/joined" | cut -d' ' -f3); last=$(grep '^loss_4 ' "$WORK/joined" | cut -d' ' -f3)
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a) }' || { echo "FAIL: loss did not fall ($first -> $last)"; exit 1; }

# Only host 0 writes stdout: one summary; 8 devices on 4 hosts; DCN used; a sample was printed
# from the prompt.
[ "$(grep -c '"summary":true' "$WORK/sharded")" -eq 1 ] || { echo "FAIL: expected one summary line"; cat "$WORK/sharded"; exit 1; }
grep -q '"devices":8' "$WORK/sharded" || { echo "FAIL: not 8 devices"; exit 1; }
grep -q '"hosts":4' "$WORK/sharded" || { echo "FAIL: not 4 hosts"; exit 1; }
grep -q '"sample_greedy":"The meaning of life is' "$WORK/sharded" || { echo "FAIL: no sample"; exit 1; }
dcn=$(sed -n 's/.*"step_dcn_bytes":\([0-9.]*\).*/\1/p' "$WORK/sharded")
awk -v d="${dcn:-0}" 'BEGIN { exit !(d > 0) }' || { echo "FAIL: no DCN traffic"; exit 1; }
echo "PASS: 4 steps and 3 evaluations equal within 1e-4 relative; $dcn DCN bytes per step"
