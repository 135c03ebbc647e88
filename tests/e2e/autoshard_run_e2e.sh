#!/usr/bin/env bash
# End to end: the plan `tessel autoshard` chooses for the GPT example's model on the two-slice
# config runs for real under `tessel run`, and every step's loss (and validation loss) equals
# the single-device run's within 1e-4 relative, as tests/e2e/gpt_e2e.sh checks for the default
# mesh.
#
# The search is held to what the runtime example executes: --axes data,fsdp,tensor (the GPT
# example has no pipeline schedule and no context parallelism, so the stage and sequence axes
# would not mean there what they mean to the simulator) and --remat none (the runtime does not
# rematerialize). Without the restriction the search prefers dcn stage=2 (pipeline over DCN);
# that plan is printed, not run (docs/autoshard.md). The model is examples/gpt/model.json:
# the example's default sizes with learned positions, GELU and the tied head (GPT-2's
# architecture, which nn/transformer.h's `gpt` models). Needs the Debian package fortunes
# (skipped, exit 77, when its corpus is missing) and python3 (to read the plan's JSON).
#   autoshard_run_e2e.sh TESSEL_BIN GPT_TRAIN_BIN CONFIG MODEL_JSON
set -euo pipefail
TESSEL="$1"; SINGLE="$2"; CONFIG="$3"; MODEL="$4"
[ -d /usr/share/games/fortunes ] || { echo "SKIP: the fortunes corpus is not installed"; exit 77; }
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

"$TESSEL" autoshard "$CONFIG" --model-config "$MODEL" --json >"$WORK/free.json" 2>/dev/null || {
  echo "FAIL: tessel autoshard (all axes) exited $?"; exit 1; }
"$TESSEL" autoshard "$CONFIG" --model-config "$MODEL" --axes data,fsdp,tensor --remat none \
  --json >"$WORK/plan.json" 2>"$WORK/plan.err" || {
  echo "FAIL: tessel autoshard --axes data,fsdp,tensor exited $?"; cat "$WORK/plan.err"; exit 1; }

# The plan as the GPT example's flags: its mesh over (data, fsdp, tensor), and the model's sizes.
python3 - "$WORK/plan.json" "$WORK/free.json" "$MODEL" >"$WORK/flags" <<'EOF'
import json, sys
plan = json.load(open(sys.argv[1]))["best"]
free = json.load(open(sys.argv[2]))["best"]
model = json.load(open(sys.argv[3]))
names = plan["axis_names"]
ici, dcn = dict(zip(names, plan["ici"])), dict(zip(names, plan["dcn"]))
run_axes = ["data", "fsdp", "tensor"]
assert all(ici[a] == 1 and dcn[a] == 1 for a in names if a not in run_axes), plan
assert plan["remat"] == "none" and plan["microbatches"] == 0, plan
def text(p):
    return ", ".join(f"{k} " + " ".join(f"{a}={s}" for a, s in zip(names, p[k]) if s != 1)
                     for k in ("ici", "dcn")) + f", remat {p['remat']}, {p['step_time_s'] * 1e3:.3f} ms"
print(f"unrestricted best: {text(free)}", file=sys.stderr)
print(f"runnable best:     {text(plan)}", file=sys.stderr)
assert model["positions"] == "learned" and model["tie_embeddings"] and model["arch"] == "gpt"
print(" ".join([
    "--ici-mesh-shape", ",".join(str(ici[a]) for a in run_axes),
    "--dcn-mesh-shape", ",".join(str(dcn[a]) for a in run_axes),
    "--axis-names", ",".join(run_axes),
    "--layers", str(model["layers"]), "--d-model", str(model["d_model"]),
    "--heads", str(model["heads"]), "--ffn", str(model["ffn"]),
    "--seq-len", str(model["seq_len"]), "--batch", str(model["batch"]),
    "--position", "learned", "--mlp", "gelu", "--head", "tied"]))
EOF
read -r -a PLAN <"$WORK/flags"
echo "tessel run flags: ${PLAN[*]}"
COMMON=(--steps 4 --warmup 2 --lr 1e-2 --log-every 1 --eval-every 2 --eval-batches 2
        --generate 8 --json --seed 11 "${PLAN[@]}")

source "$(dirname "$0")/gpt_compare.sh"
compare_gpt_runs "${COMMON[@]}"

# The run used the plan's devices and hosts; the runtime's own prediction of its step (the
# simulator on the example's graph) is printed beside the search's.
[ "$(grep -c '"summary":true' "$WORK/sharded")" -eq 1 ] || { echo "FAIL: expected one summary line"; cat "$WORK/sharded"; exit 1; }
grep -q '"devices":8' "$WORK/sharded" || { echo "FAIL: not 8 devices"; exit 1; }
grep -q '"hosts":4' "$WORK/sharded" || { echo "FAIL: not 4 hosts"; exit 1; }
simulated=$(sed -n 's/.*"summary":{.*"simulated_step_seconds":\([0-9.e-]*\).*/\1/p' "$WORK/sharded")
echo "PASS: the autoshard plan (${PLAN[*]:0:6}) ran 4 steps and 3 evaluations equal to one device within 1e-4 relative; the example's simulated step ${simulated:-?} s"
