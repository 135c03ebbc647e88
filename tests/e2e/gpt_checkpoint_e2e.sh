#!/usr/bin/env bash
# End to end: distributed checkpoints of the GPT example (mesh/runtime/checkpoint.h) on the
# 8-device two-slice config (4 host processes, mesh data=2 x fsdp=2 x tensor=2).
#  1. An uninterrupted run of 6 steps, saving every 2: the reference losses.
#  2. The same run killed during the save of step 4 at each point of the save (the test hook
#     TESSEL_TEST_CRASH_AT makes the hosts _exit(137), as kill -9 would), then --resume: it
#     resumes from step 2 (or 4 when the kill came after the metadata), and every loss after the
#     resume equals the uninterrupted run's bit for bit.
#  3. Reshard on load: the step-6 checkpoint of mesh A gives the same validation loss (1e-4
#     relative) on mesh B (data=1, fsdp=4, tensor=2), on a 4-device config and on one device.
#  4. Bad input (missing dir, truncated shard, wrong shape, another model's checkpoint or
#     metadata, corrupt bytes): exit 1 with one error line, no crash.
# Needs the Debian package fortunes (skipped, exit 77, when its corpus is missing).
#   gpt_checkpoint_e2e.sh TESSEL_BIN GPT_TRAIN_BIN CONFIG FOUR_DEVICE_CONFIG
set -euo pipefail
TESSEL="$1"; SINGLE="$2"; CONFIG="$3"; CONFIG4="$4"
[ -d /usr/share/games/fortunes ] || { echo "SKIP: the fortunes corpus is not installed"; exit 77; }
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
BASE=(--heads 4 --seq-len 32 --batch 8 --warmup 2 --lr 1e-2 --log-every 1 --eval-every 2
      --eval-batches 2 --generate 0 --json --seed 11)
COMMON=("${BASE[@]}" --steps 6 --layers 2 --d-model 32)

# "STEP LOSS" per training step, as printed (JSON keeps every digit of the double).
losses() { sed -n 's/^{"grad_norm":[^,]*,"loss":\([^,]*\),.*"step":\([0-9]*\),.*$/\2 \1/p' "$1"; }
val_loss() { sed -n "s/^{\"step\":$2,\"val_bits_per_byte\":[^,]*,\"val_loss\":\([^,}]*\)}\$/\1/p" "$1" | head -1; }
fail() { echo "FAIL: $*"; exit 1; }

"$TESSEL" run "$CONFIG" --example gpt "${COMMON[@]}" --checkpoint-dir "$WORK/ref" \
  --checkpoint-every 2 >"$WORK/ref.out" 2>"$WORK/ref.err" || { cat "$WORK/ref.err"; fail "reference run exited $?"; }
# `tessel run --json` passes host 0's records to stderr as they come and prints one object.
losses "$WORK/ref.err" >"$WORK/ref.losses"
[ "$(wc -l <"$WORK/ref.losses")" -eq 6 ] || { cat "$WORK/ref.err"; fail "expected 6 steps in the reference run"; }
[ -f "$WORK/ref/step_00000006/metadata.json" ] || fail "no step-6 checkpoint"

# 2. Kill during the save of step 4, at each point; resume; compare.
for point in before_shards mid_shards after_shards before_metadata after_metadata; do
  dir="$WORK/crash_$point"
  rc=0
  TESSEL_TEST_CRASH_AT="$point:4" "$TESSEL" run "$CONFIG" --example gpt "${COMMON[@]}" \
    --checkpoint-dir "$dir" --checkpoint-every 2 >"$dir.out" 2>"$dir.err" || rc=$?
  [ "$rc" -ne 0 ] || fail "$point: the run was not killed"
  # A killed save leaves no metadata: the checkpoint of step 2 stays the newest.
  want=2; [ "$point" = after_metadata ] && want=4
  [ -f "$dir/step_00000004/metadata.json" ] && [ "$want" -eq 2 ] && fail "$point: a torn step-4 checkpoint has metadata"
  "$TESSEL" run "$CONFIG" --example gpt "${COMMON[@]}" --checkpoint-dir "$dir" \
    --checkpoint-every 2 --resume >"$dir.resumed" 2>"$dir.resumed.err" || { cat "$dir.resumed.err"; fail "$point: resume exited $?"; }
  grep -q "\"resumed_from\":\"$dir/step_0000000$want\"" "$dir.resumed.err" || { cat "$dir.resumed.err"; fail "$point: did not resume from step $want"; }
  losses "$dir.resumed.err" >"$dir.losses"
  [ "$(wc -l <"$dir.losses")" -eq $((6 - want)) ] || { cat "$dir.resumed.err"; fail "$point: expected $((6 - want)) steps after the resume"; }
  # Bit for bit: the resumed steps' losses are the uninterrupted run's, digit for digit.
  grep -vxFf "$WORK/ref.losses" "$dir.losses" && fail "$point: losses after the resume differ from the uninterrupted run"
  echo "$point: resumed at step $want, $(wc -l <"$dir.losses") losses equal bit for bit"
done

# 3. Reshard on load: the validation loss at step 6 on other meshes.
ref_val=$(val_loss "$WORK/ref.err" 6)
RESUME=("${COMMON[@]}" --checkpoint-dir "$WORK/ref" --resume)
"$TESSEL" run "$CONFIG" --example gpt "${RESUME[@]}" --ici-mesh-shape 1,2,2 --dcn-mesh-shape 1,2,1 \
  >"$WORK/mesh_b" 2>"$WORK/mesh_b.err" || { cat "$WORK/mesh_b.err"; fail "mesh B exited $?"; }
"$TESSEL" run "$CONFIG4" --example gpt "${RESUME[@]}" --ici-mesh-shape 1,2,2 --dcn-mesh-shape 1,1,1 \
  >"$WORK/four" 2>"$WORK/four.err" || { cat "$WORK/four.err"; fail "4-device run exited $?"; }
"$SINGLE" --single-device "${RESUME[@]}" >"$WORK/one" 2>"$WORK/one.err" || { cat "$WORK/one.err"; fail "single device exited $?"; }
# The single-device binary prints its records on stdout; tessel run on stderr.
cp "$WORK/mesh_b.err" "$WORK/mesh_b.records"; cp "$WORK/four.err" "$WORK/four.records"
cp "$WORK/one" "$WORK/one.records"
for run in mesh_b four one; do
  got=$(val_loss "$WORK/$run.records" 6)
  [ -n "$got" ] || { cat "$WORK/$run.records"; fail "$run: no validation loss at step 6"; }
  awk -v a="$got" -v b="$ref_val" -v r="$run" 'BEGIN { d = a - b; if (d < 0) d = -d;
    if (d / b > 1e-4) { printf "FAIL: %s: validation loss %s vs mesh A %s\n", r, a, b; exit 1 }
    printf "%s: validation loss %s (mesh A %s)\n", r, a, b }'
done
grep -q '"devices":4' "$WORK/four" || fail "the 4-device run did not use 4 devices"

# 4. Bad input: exit 1, one error line.
expect_error() {  # NAME PHRASE COMMAND...
  local name="$1" phrase="$2" rc=0; shift 2
  "$@" >"$WORK/$name.out" 2>"$WORK/$name.err" || rc=$?
  [ "$rc" -eq 1 ] || { cat "$WORK/$name.err"; fail "$name: exit $rc, expected 1"; }
  grep -q -- "$phrase" "$WORK/$name.err" || { cat "$WORK/$name.err"; fail "$name: no '$phrase' in the error"; }
  [ "$(wc -l <"$WORK/$name.err")" -eq 1 ] || { cat "$WORK/$name.err"; fail "$name: more than one error line"; }
  grep -q '"step":1,' "$WORK/$name.out" && fail "$name: training ran"
  echo "$name: $(cat "$WORK/$name.err")"
}
expect_error missing_dir "does not exist" "$TESSEL" run "$CONFIG" --example gpt "${COMMON[@]}" \
  --checkpoint-dir "$WORK/nothing" --resume
cp -r "$WORK/ref" "$WORK/truncated"
shard=$(ls "$WORK"/truncated/step_00000006/host_0-*.shards)
truncate -s 1000 "$shard"
expect_error truncated_shard "truncated" "$TESSEL" run "$CONFIG" --example gpt "${COMMON[@]}" \
  --checkpoint-dir "$WORK/truncated" --resume
expect_error wrong_shape "is f32\[256,32\] in the checkpoint but f32\[256,64\]" "$TESSEL" run "$CONFIG" \
  --example gpt "${BASE[@]}" --steps 6 --layers 2 --d-model 64 --checkpoint-dir "$WORK/ref" --resume
expect_error other_model "which the model lacks" "$TESSEL" run "$CONFIG" --example gpt "${BASE[@]}" \
  --steps 6 --layers 1 --d-model 32 --checkpoint-dir "$WORK/ref" --resume
# Another model's metadata over this checkpoint's shard files.
"$SINGLE" --single-device "${BASE[@]}" --steps 1 --layers 1 --d-model 32 --checkpoint-dir "$WORK/other" \
  --checkpoint-every 1 >/dev/null 2>&1 || fail "the one-layer run exited $?"
cp -r "$WORK/ref" "$WORK/swapped"
cp "$WORK/other/step_00000001/metadata.json" "$WORK/swapped/step_00000006/metadata.json"
# Its step set to the folder's, so that what fails is the shard files it names.
python3 -c 'import json, sys; m = json.load(open(sys.argv[1])); m["step"] = 6; json.dump(m, open(sys.argv[1], "w"))' \
  "$WORK/swapped/step_00000006/metadata.json"
expect_error other_metadata "is missing" "$TESSEL" run "$CONFIG" --example gpt "${COMMON[@]}" \
  --checkpoint-dir "$WORK/swapped" --resume
# A flipped byte inside a shard: caught by its crc32 when the shard is read whole.
cp -r "$WORK/other" "$WORK/corrupt"
shard=$(ls "$WORK"/corrupt/step_00000001/host_0-*.shards)
printf '\x7f' | dd of="$shard" bs=1 seek=100 conv=notrunc status=none
expect_error corrupt_bytes "checksum mismatch" "$SINGLE" --single-device "${BASE[@]}" --steps 6 --layers 1 \
  --d-model 32 --checkpoint-dir "$WORK/corrupt" --resume
# Adam's step count in the attributes as a string: it aborted the process (nlohmann type_error).
cp -r "$WORK/other" "$WORK/bad_count"
python3 -c 'import json, sys; m = json.load(open(sys.argv[1])); m["attributes"]["adam_step_count"] = "4"; json.dump(m, open(sys.argv[1], "w"))' \
  "$WORK/bad_count/step_00000001/metadata.json"
expect_error adam_step_count "adam_step_count: expected an integer in \[0, 1\]" "$SINGLE" --single-device \
  "${BASE[@]}" --steps 6 --layers 1 --d-model 32 --checkpoint-dir "$WORK/bad_count" --resume
echo "PASS: resume after a kill at 5 points equals the uninterrupted run bit for bit; reshard on load to mesh B, 4 devices and 1 device; 7 bad checkpoints rejected"
