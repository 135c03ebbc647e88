# Sourced by the GPT e2e scripts (gpt_e2e.sh, autoshard_run_e2e.sh): one comparison of a sharded
# `tessel run --example gpt` with the single-device run of the same flags.
#   compare_gpt_runs FLAGS...   (needs TESSEL, SINGLE, CONFIG and WORK set)
# Runs both with FLAGS (which must ask for --steps 4 --eval-every 2 --json), then checks: 4
# training steps and 3 evaluations (before training, after step 2, after step 4) in both, every
# loss equal within 1e-4 relative, the last step's loss below the first's. Leaves the sharded
# run's stdout in $WORK/sharded and the joined values in $WORK/joined; exits 1 on a failure.

compare_gpt_runs() {
  "$TESSEL" run "$CONFIG" --example gpt "$@" >"$WORK/sharded" 2>"$WORK/sharded.err" || {
    echo "FAIL: tessel run exited $?"; cat "$WORK/sharded.err"; exit 1; }
  "$SINGLE" --single-device "$@" >"$WORK/single" 2>"$WORK/single.err" || {
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
  [ "$(grep -c '^loss_' "$WORK/joined")" -eq 4 ] || { echo "FAIL: expected 4 steps in both runs"; cat "$WORK/sharded" "$WORK/single"; exit 1; }
  [ "$(grep -c '^val_loss_' "$WORK/joined")" -eq 3 ] || { echo "FAIL: expected 3 evaluations in both runs"; cat "$WORK/sharded" "$WORK/single"; exit 1; }
  awk '{ d = $2 - $3; if (d < 0) d = -d; r = d / ($3 < 0 ? -$3 : $3);
         if (r > 1e-4) { printf "FAIL: %s: sharded %s vs single %s (rel %.3g)\n", $1, $2, $3, r; bad = 1 } }
       END { exit bad }' "$WORK/joined"
  # Training moved the loss: the last step is below the first.
  local first last
  first=$(grep '^loss_1 ' "$WORK/joined" | cut -d' ' -f3); last=$(grep '^loss_4 ' "$WORK/joined" | cut -d' ' -f3)
  awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a) }' || { echo "FAIL: loss did not fall ($first -> $last)"; exit 1; }
}
