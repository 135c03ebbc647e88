#!/usr/bin/env bash
# Search time of `tessel autoshard` for a 96-layer model (GPT-3 175B, configs/models/
# gpt3-175b.json, global batch 2048) on 8192 TPU v5p chips (4 slices of v5p-4096 over DCN), and
# how much of the space it covered (mesh/autoshard/autoshard.h).
#
# Usage: benchmarks/autoshard_bench.sh [TESSEL_BINARY] [BUDGET_S]
#   BUDGET_S (default 0: none) stops simulating new meshes after that many seconds.
# Prints: wall s, CPU s (user + sys), meshes enumerated / simulated, plans evaluated, whether
# the search completed, the best plan's step time, and the load average before the run.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
tessel="${1:-$root/build/tools/tessel}"
budget="${2:-0}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
load=$(cut -d' ' -f1 /proc/loadavg)
/usr/bin/time -f "%e %U %S" -o "$tmp/time" "$tessel" autoshard "$root/configs/4x_v5p-4096.json" \
  --model-config "$root/configs/models/gpt3-175b.json" --batch 2048 --budget "$budget" \
  --json > "$tmp/out.json" 2> "$tmp/err" || { cat "$tmp/err" >&2; exit 1; }
read -r wall user sys < "$tmp/time"
python3 - "$tmp/out.json" "$wall" "$user" "$sys" "$load" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
s = r["search"]
wall, user, sys_s, load = map(float, sys.argv[2:6])
print(f"wall {wall:.1f} s, cpu {user + sys_s:.1f} s (load average before: {load}); "
      f"meshes {s['meshes_enumerated']} enumerated, {s['meshes_simulated']} simulated; "
      f"plans {s['plans_evaluated']}; complete {s['complete']}; "
      f"best step {r['best']['step_time_s']:.3f} s")
PY
