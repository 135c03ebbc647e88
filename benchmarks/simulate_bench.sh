#!/usr/bin/env bash
# Wall time and peak RSS of `tessel simulate` for a 96-layer GPT training step (fsdp_tp) on
# 256, 2048 and 8192 TPU v5p chips (the last as 4 slices over DCN), with the split between
# building the graph, partitioning it and simulating it (the --json "wall_s" field).
# 8192-stage and 8192-sequence: the same 8192 chips with MaxText's axes, 4 pipeline stages over
# DCN (8 microbatches), or a sequence axis of 4 (context parallelism, flash attention).
#
# Usage: benchmarks/simulate_bench.sh [TESSEL_BINARY] [--extrapolate-layers] [CHIPS...]
#   e.g. benchmarks/simulate_bench.sh build/tools/tessel 256 2048 8192
#        benchmarks/simulate_bench.sh build/tools/tessel --extrapolate-layers 8192
# --extrapolate-layers: simulate 1- and 2-layer stages and extrapolate (mesh/sim/model_step.h)
# instead of the full 96-layer graph.
# Prints the load average before the runs, then one line per size: chips, wall s, CPU s (user +
# sys), peak RSS MiB, build / partition / simulate s, device classes, local nodes, predicted
# step time.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
tessel="${1:-$root/build/tools/tessel}"
shift || true
extra=()
sizes=()
for arg in "$@"; do
  case "$arg" in
    --extrapolate-layers) extra+=("$arg") ;;
    *) sizes+=("$arg") ;;
  esac
done
[ ${#sizes[@]} -eq 0 ] && sizes=(256 2048 8192)
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

model=(--model gpt --layers 96 --d-model 1024 --heads 16 --vocab 32000 --seq-len 1024
       --recipe fsdp_tp --json)
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)${extra:+ (${extra[*]})}"
printf "%14s %8s %7s %9s %8s %10s %9s %8s %8s %10s\n" chips wall_s cpu_s rss_MiB build_s \
  partition_s simulate_s classes nodes step_s
for chips in "${sizes[@]}"; do
  case "$chips" in
    256) args=("$root/configs/v5p-512.json" --ici-mesh-shape 1,64,4 --batch 256) ;;
    2048) args=("$root/configs/v5p-4096.json" --ici-mesh-shape 1,512,4 --batch 2048) ;;
    8192) args=("$root/configs/4x_v5p-4096.json" --ici-mesh-shape 1,512,4 --dcn-mesh-shape 4,1,1
                --batch 8192) ;;
    8192-stage) args=("$root/configs/4x_v5p-4096.json" --ici-fsdp 512 --ici-tensor 4
                      --dcn-stage 4 --microbatches 8 --batch 4096) ;;
    8192-sequence) args=("$root/configs/4x_v5p-4096.json" --ici-fsdp 128 --ici-sequence 4
                         --ici-tensor 4 --dcn-data 4 --batch 2048 --attention flash) ;;
    *) echo "unsupported size $chips (256, 2048, 8192, 8192-stage, 8192-sequence)" >&2; exit 2 ;;
  esac
  /usr/bin/time -v "$tessel" simulate "${args[@]}" "${model[@]}" ${extra[@]+"${extra[@]}"} >"$tmp/out.json" 2>"$tmp/time" ||
    { cat "$tmp/time" >&2; exit 1; }
  wall=$(awk -F': ' '/Elapsed \(wall clock\)/ {print $2}' "$tmp/time" |
         awk -F: '{ if (NF == 3) print $1*3600 + $2*60 + $3; else print $1*60 + $2 }')
  rss_kb=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$tmp/time")
  cpu=$(awk -F': ' '/User time|System time/ {s += $2} END {print s}' "$tmp/time")
  python3 - "$tmp/out.json" "$chips" "$wall" "$rss_kb" "$cpu" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
w = r["wall_s"]
print("%14s %8.2f %7.2f %9.0f %8.2f %10.2f %9.2f %8d %8d %10.4f" % (
    sys.argv[2], float(sys.argv[3]), float(sys.argv[5]), int(sys.argv[4]) / 1024, w["build"],
    w["partition"], w["simulate"], r["device_classes"], r["local_nodes"], r["step_time_s"]))
PY
done
