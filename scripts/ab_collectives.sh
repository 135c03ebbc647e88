#!/usr/bin/env bash
# Same-session A/B of collectives_bench variants: runs every variant once per round, round after
# round (interleaved, so that each sees the same mix of machine load; each round starts with the
# next variant, so none always runs first), then prints the median bus bandwidth (GB/s) and CPU
# time per call (us, all ranks together) of every (collective, ranks, bytes) per variant and its
# ratio to the first variant, plus the CPU steal time of each round (/proc/stat: time the
# hypervisor gave this VM's CPUs to others; rounds with high steal are noise).
#
#   bash scripts/ab_collectives.sh [--rounds 3] [--raw FILE] -- "VARIANT" "VARIANT" ... -- ARGS
#
# A VARIANT is a name, a colon, and the command that prints collectives_bench rows (a binary and
# its own flags); ARGS are appended to every variant. Example (spin_wait off vs the default):
#
#   bash scripts/ab_collectives.sh --rounds 5 -- \
#     "spin0:build/benchmarks/collectives_bench --spin_us=0" \
#     "default:build/benchmarks/collectives_bench" \
#     -- --hosts=2 --min_bytes=1048576 --max_bytes=67108864 --budget_ms=250
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=3
RAW=""
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  case "$1" in
    --rounds) ROUNDS="$2"; shift 2 ;;
    --raw) RAW="$2"; shift 2 ;;
    *) echo "ab_collectives: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ $# -gt 0 ] || { echo "ab_collectives: expected -- VARIANT ... -- ARGS" >&2; exit 2; }
shift
VARIANTS=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do VARIANTS+=("$1"); shift; done
[ ${#VARIANTS[@]} -ge 1 ] || { echo "ab_collectives: no variant given" >&2; exit 2; }
[ $# -gt 0 ] && shift
ARGS=("$@")
for v in "${VARIANTS[@]}"; do
  case "$v" in
    *:*) ;;
    *) echo "ab_collectives: variant \"$v\" is not NAME:COMMAND" >&2; exit 2 ;;
  esac
done
if [ -z "$RAW" ]; then RAW="$(mktemp /tmp/ab_collectives.XXXXXX)"; fi
: >"$RAW"

# user+nice+system+idle+iowait+irq+softirq+steal and steal, from /proc/stat.
cpu_times() { awk '/^cpu /{ t = 0; for (i = 2; i <= 9; ++i) t += $i; print t, $9 }' /proc/stat; }

echo "# $(date -u '+%Y-%m-%d %H:%M:%S UTC')  $(nproc) cores  load average: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# raw rows: $RAW"
for round in $(seq "$ROUNDS"); do
  read -r total0 steal0 < <(cpu_times)
  # Round r starts with variant r (mod the count), so that no variant always runs first.
  count=${#VARIANTS[@]}
  for i in $(seq 0 $((count - 1))); do
    v="${VARIANTS[$(( (i + round - 1) % count ))]}"
    name="${v%%:*}"
    read -r -a command <<<"${v#*:}"
    "${command[@]}" "${ARGS[@]}" | awk -v name="$name" '$1 == "all-reduce" || $1 == "all-gather" {
      print name, $1, $3, $4, $7, (NF >= 8 ? $8 : "") }' >>"$RAW"
  done
  read -r total1 steal1 < <(cpu_times)
  echo "# round $round of $ROUNDS: steal $(( (steal1 - steal0) * 100 / (total1 - total0 + 1) ))%," \
       "load average $(cut -d' ' -f1-3 /proc/loadavg)"
done

NAMES="$(for v in "${VARIANTS[@]}"; do printf '%s ' "${v%%:*}"; done)"
# One table per metric: field 5 (bus bandwidth, GB/s, higher is better) and, where the rows
# have it, field 6 (CPU time per call of all ranks together, us, lower is better).
for field in 5 6; do
  awk -v names="$NAMES" -v field="$field" '
    NF >= field { key = $2 " " $3 " " $4; vals[$1, key] = vals[$1, key] " " $field
      if (!(key in seen)) { seen[key] = 1; order[++n] = key } }
    function median(s,    a, m, i, j, t) {
      m = split(s, a, " "); if (m == 0) return ""
      for (i = 2; i <= m; ++i) { t = a[i] + 0; for (j = i - 1; j >= 1 && a[j] + 0 > t; --j) a[j + 1] = a[j]; a[j + 1] = t }
      return m % 2 ? a[(m + 1) / 2] + 0 : (a[m / 2] + a[m / 2 + 1]) / 2
    }
    END {
      if (n == 0) exit
      if (field == 6) printf "\nCPU time per call, all ranks together (us, median; lower is better)\n"
      k = split(names, name, " ")
      printf "%-11s %5s %10s |", "collective", "ranks", "bytes"
      for (j = 1; j <= k; ++j) printf " %10s", name[j]
      printf " |"
      for (j = 2; j <= k; ++j) printf " %10s", name[j] "/" name[1]
      printf "\n"
      for (i = 1; i <= n; ++i) {
        split(order[i], f, " ")
        printf "%-11s %5s %10s |", f[1], f[2], f[3]
        for (j = 1; j <= k; ++j) { m[j] = median(vals[name[j], order[i]]); printf " %10s", m[j] == "" ? "-" : sprintf(field == 5 ? "%.3f" : "%.1f", m[j]) }
        printf " |"
        for (j = 2; j <= k; ++j) printf " %10s", (m[1] == "" || m[j] == "" || m[1] == 0) ? "-" : sprintf("%.2f", m[j] / m[1])
        printf "\n"
      }
    }' "$RAW"
done
