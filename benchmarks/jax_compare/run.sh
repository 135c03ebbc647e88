#!/usr/bin/env bash
# Tessel vs JAX (XLA CPU) on the same MLP training step (784-1024-1024-10, SGD and Adam, batch
# 32/128/512), on 1 device and on 8 devices (data=4 x model=2), back to back in one session.
# Prints one JSON line per row and a markdown table of ms per step and Tessel/JAX throughput.
# Development only, never part of CI: needs a built tree (scripts/build.sh) and a Python with jax
# (`pip install jax`; PYTHON=/path/to/python to choose it).
#
#   bash benchmarks/jax_compare/run.sh [STEPS]          # default 30 timed steps per row
#
# Tessel, 1 device: mlp_step_bench's BM_MlpWide*Step (random batch already on the host, the
# first step untimed), with its split of a step into trace_ms (tracing, fingerprint, cache
# lookup) and execute_ms (the executor); the rest of the step is host overhead (argument
# passing, reading back the loss). 8 devices: `tessel run CONFIG --example fashion-mnist-mlp`
# (real Fashion-MNIST batches) in each layout of LAYOUTS, the step time taken as the
# difference of a run of 3 + STEPS steps and one of 3 steps, so start-up, the first (compiling)
# step and the evaluation cancel (the same difference of the runs' CPU time, all processes and
# threads, gives tessel_cpu_ms); the long run's timeline (--trace) splits a step into compute,
# collectives (waiting for peers included) and host time (benchmarks/jax_compare/trace_split.py).
# Layouts of the 8-device rows (the data=4 x model=2 mesh in each):
#   4hosts-cpu  configs/cpu_2x2hosts.json: 4 host processes of 2 devices, described as this
#               CPU, so the partitioner weighs compute as the executor runs it (the default: the
#               devices JAX's rows run on, described as what they are)
#   1host-cpu   configs/cpu_one_host_8dev.json: one process of 8 device threads, as JAX's 8 CPU
#               devices, described as this CPU
#   4hosts      configs/two_slices_2x2hosts.json: the 4 processes with the devices described as
#               TPU v4 chips: the partitioner picks the plan of that TPU, which can differ from
#               the CPU's (docs/PERFORMANCE.md, "Tessel vs JAX (XLA CPU), MLP")
#   1host       configs/one_host_8dev.json: one process, the TPU v4 description
#
# Environment: PYTHON (default python3), BUILD (default build), TESSEL_EXECUTOR_FUSION=0 to time
# the executor without loop fusion, ROWS to pick rows ("1:adam:128 8:sgd:32 ..."), LAYOUTS to
# pick the 8-device layouts ("4hosts-cpu 4hosts ..."; default 4hosts-cpu),
# TESSEL_COMPUTE_SLOTS to set how many device threads of a host process compute at once
# (mesh/runtime/compute_slots.h).
set -euo pipefail
cd "$(dirname "$0")/../.."
STEPS="${1:-30}"
PYTHON="${PYTHON:-python3}"
BUILD="${BUILD:-build}"
ROWS="${ROWS:-$(for d in 1 8; do for o in sgd adam; do for b in 32 128 512; do
  printf '%s:%s:%s ' "$d" "$o" "$b"; done; done; done)}"
LAYOUTS="${LAYOUTS:-4hosts-cpu}"
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT

# The config and mesh flags of an 8-device layout (see above).
layout_flags() {
  case "$1" in
    4hosts) echo "configs/two_slices_2x2hosts.json --ici-mesh-shape 2,2 --dcn-mesh-shape 2,1" ;;
    1host) echo "configs/one_host_8dev.json --ici-mesh-shape 4,2 --dcn-mesh-shape 1,1" ;;
    4hosts-cpu) echo "configs/cpu_2x2hosts.json --ici-mesh-shape 2,2 --dcn-mesh-shape 2,1" ;;
    1host-cpu) echo "configs/cpu_one_host_8dev.json --ici-mesh-shape 4,2 --dcn-mesh-shape 1,1" ;;
    *)
      echo "run.sh: unknown layout \"$1\" in LAYOUTS (4hosts-cpu, 1host-cpu, 4hosts, 1host)" >&2
      return 1
      ;;
  esac
}
for layout in $LAYOUTS; do layout_flags "$layout" >/dev/null || exit 2; done

# "TRAIN_SECONDS CPU_SECONDS" of a sharded run of `steps` steps in `layout`: the epoch
# record's train_seconds and the CPU time of every process of the run; with a fifth argument,
# the run also writes its timeline there (tessel run --trace).
sharded_run_seconds() {
  local layout="$1" optimizer="$2" batch="$3" steps="$4"
  # shellcheck disable=SC2046  # layout_flags prints words to split
  "$PYTHON" -c 'import json, os, subprocess, sys
before = os.times()
run = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE, check=True)
after = os.times()
out = json.loads(run.stdout)  # one object: {"ok": ..., "records": [epoch lines, summary]}
cpu = (after.children_user + after.children_system) - (before.children_user + before.children_system)
print([r for r in out["records"] if "epoch" in r][-1]["train_seconds"], cpu)' \
    "$BUILD/tools/tessel" run $(layout_flags "$layout") --example fashion-mnist-mlp \
    --json --epochs 1 --steps "$steps" --batch-size "$batch" --optimizer "$optimizer" \
    --lr-schedule constant --axis-names data,model ${5:+--trace "$5"}
}

echo "# $(uname -n), $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for row in $ROWS; do
  IFS=: read -r devices optimizer batch <<<"$row"
  layouts="$LAYOUTS"
  [ "$devices" = 1 ] && layouts="-"
  for layout in $layouts; do
    if [ "$devices" = 1 ]; then
      name="BM_MlpWide$([ "$optimizer" = sgd ] && echo Sgd || echo Adam)Step/$batch/"
      "$BUILD/benchmarks/mlp_step_bench" --benchmark_filter="$name" --benchmark_format=json \
        --benchmark_min_time=1 >"$OUT/tessel.json" 2>/dev/null
      tessel="$("$PYTHON" -c 'import json,sys
b=json.load(open(sys.argv[1]))["benchmarks"][0]
print(json.dumps({"ms": b["real_time"], "trace_ms": b["trace_ms"], "execute_ms": b["execute_ms"]}))' \
        "$OUT/tessel.json")"
    else
      read -r short short_cpu <<<"$(sharded_run_seconds "$layout" "$optimizer" "$batch" 3)"
      read -r long long_cpu <<<"$(sharded_run_seconds "$layout" "$optimizer" "$batch" \
        "$((STEPS + 3))" "$OUT/trace.json")"
      ms="$("$PYTHON" -c 'import sys
print(1e3 * (float(sys.argv[2]) - float(sys.argv[1])) / int(sys.argv[3]))' "$short" "$long" "$STEPS")"
      cpu_ms="$("$PYTHON" -c 'import sys
print(1e3 * (float(sys.argv[2]) - float(sys.argv[1])) / int(sys.argv[3]))' "$short_cpu" \
        "$long_cpu" "$STEPS")"
      # The split of a step into compute, collectives and host time, from the long run's timeline.
      tessel="$("$PYTHON" benchmarks/jax_compare/trace_split.py "$OUT/trace.json" "$STEPS" "$ms" |
        "$PYTHON" -c 'import json,sys
s=json.load(sys.stdin)
print(json.dumps({"ms": s["step_ms"], "compute_ms": s["compute_ms"],
                    "collectives_ms": s["collectives_ms"], "host_ms": s["host_ms"],
                    "layout": sys.argv[1], "cpu_ms": float(sys.argv[2])}))' "$layout" "$cpu_ms")"
    fi
    # One device: at least 300 JAX steps, about as long as mlp_step_bench's one second of
    # Tessel steps, so both medians come from runs of similar length.
    jax_steps="$STEPS"
    [ "$devices" = 1 ] && [ "$jax_steps" -lt 300 ] && jax_steps=300
    jax="$(XLA_FLAGS=--xla_force_host_platform_device_count=8 "$PYTHON" \
      benchmarks/jax_compare/mlp_step.py --devices "$devices" --optimizer "$optimizer" \
      --batch "$batch" --steps "$jax_steps" | tail -1)"
    "$PYTHON" -c 'import json,sys
t, j = json.loads(sys.argv[1]), json.loads(sys.argv[2])
row = {"devices": j["devices"], "optimizer": j["optimizer"], "batch": j["batch"],
         "jax_ms": j["ms_per_step"], "tessel_ms": t["ms"]}
if "execute_ms" in t:
      row.update(tessel_execute_ms=t["execute_ms"], tessel_trace_ms=t["trace_ms"],
                 tessel_other_host_ms=t["ms"] - t["execute_ms"] - t["trace_ms"])
if "compute_ms" in t:
      row.update(layout=t["layout"], tessel_cpu_ms=t["cpu_ms"], jax_cpu_ms=j["cpu_ms_per_step"],
                 tessel_compute_ms=t["compute_ms"], tessel_collectives_ms=t["collectives_ms"],
                 tessel_host_ms=t["host_ms"])
row["tessel_over_jax_throughput"] = j["ms_per_step"] / t["ms"]
print(json.dumps(row))' "$tessel" "$jax"
  done
done | tee "$OUT/rows.json"
"$PYTHON" - "$OUT/rows.json" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("| devices | layout | optimizer | batch | JAX ms/step | Tessel ms/step | Tessel split, ms | "
      "CPU ms/step JAX, Tessel | Tessel/JAX throughput |")
print("|---|---|---|---|---|---|---|---|---|")
for r in rows:
    split = "-"
    if "tessel_execute_ms" in r:
        split = (f"executor {r['tessel_execute_ms']:.1f} / trace {r['tessel_trace_ms']:.1f} / "
                 f"other host {r['tessel_other_host_ms']:.1f}")
    if "tessel_compute_ms" in r:
        split = (f"compute {r['tessel_compute_ms']:.1f} / collectives "
                 f"{r['tessel_collectives_ms']:.1f} / host {r['tessel_host_ms']:.1f}")
    cpu = f"{r['jax_cpu_ms']:.0f}, {r['tessel_cpu_ms']:.0f}" if "tessel_cpu_ms" in r else "-"
    print(f"| {r['devices']} | {r.get('layout', '-')} | {r['optimizer']} | {r['batch']} | "
          f"{r['jax_ms']:.1f} | {r['tessel_ms']:.1f} | {split} | {cpu} | "
          f"{r['tessel_over_jax_throughput']:.2f}x |")
PY
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
