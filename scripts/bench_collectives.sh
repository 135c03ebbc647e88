#!/usr/bin/env bash
# Tessel collectives vs OpenMPI vs memcpy, in one session, one comparison table.
#
#   bash scripts/bench_collectives.sh [--ranks "2 4 8"] [--min_bytes 4096]
#                                     [--max_bytes 67108864] [--budget_ms 300] [--repeat 1]
#                                     [--raw FILE]
#   bash scripts/bench_collectives.sh --report FILE   # only the table, from saved raw rows
#
# Runs, one after the other (never concurrently), --repeat times (rounds, so that every
# implementation sees the same mix of machine load), then reports the median of the rounds:
#   1. build/benchmarks/collectives_bench --memcpy_only: memcpy between warm buffers, every size;
#   2. collectives_bench (Tessel, one process per rank) over ipc with its default shared-memory
#      payloads ("tessel-shm"), over ipc with ZeroMQ carrying every byte (--shared_memory=0,
#      "tessel-ipc") and over loopback tcp ("tessel-tcp"); and zmq_floor_bench --protocol=ipc
#      (Tessel's direct all-gather exchange on bare ZeroMQ sockets with no Tessel protocol: what
#      the carrier alone costs, "zmq-raw"; --poll, "zmq-raw-poll-ipc", is not run here);
#   3. for every rank count, build/benchmarks/mpi_collectives_bench under
#      mpirun --mca pml ob1 --mca btl self,tcp    (OpenMPI over loopback TCP, "mpi-tcp")
#      mpirun --mca pml ob1 --mca btl self,vader  (OpenMPI's default on-node shared-memory
#                                                  transport, "mpi-shm")
#      `pml ob1` pins the point-to-point layer that uses these BTLs (otherwise UCX could be
#      picked and the btl list ignored); --oversubscribe lets 8 ranks share fewer cores;
#      --allow-run-as-root is added when running as root.
# Every run prints rows "collective impl ranks bytes us algbw_gbps busbw_gbps cpu_us" (nccl-tests
# definitions, see benchmarks/collectives_bench.cc; cpu_us = CPU time of all ranks per call);
# all rows go to the raw file (default:
# a temporary file, path printed) and the table below joins them by (collective, ranks, bytes):
# the median over the rounds of the bus bandwidth in GB/s of each implementation, and the ratios
# of those medians
#   shm/mtcp, ipc/mtcp, tcp/mtcp (each Tessel variant over OpenMPI-tcp), shm/mshm (over OpenMPI
#   shared memory), shm/mcpy (busbw of tessel-shm over the warm memcpy bandwidth of a buffer of
#   that size), ipc/raw (Tessel-ipc over bare ZeroMQ, all-gather only);
# then a second table of the median CPU time per call of all ranks together. The header lines
# give the load average and the hypervisor's steal (/proc/stat) of every round.
# Requires: a build with collectives_bench and mpi_collectives_bench (scripts/setup.sh installs
# libopenmpi-dev and openmpi-bin; CMake builds the MPI driver when it finds MPI).
set -euo pipefail
cd "$(dirname "$0")/.."

RANKS="2 4 8"
MIN_BYTES=4096
MAX_BYTES=67108864
BUDGET_MS=300
REPEAT=1
RAW=""
REPORT=""
while [ $# -gt 0 ]; do
  case "$1" in
    --ranks) RANKS="$2"; shift 2 ;;
    --min_bytes) MIN_BYTES="$2"; shift 2 ;;
    --max_bytes) MAX_BYTES="$2"; shift 2 ;;
    --budget_ms) BUDGET_MS="$2"; shift 2 ;;
    --repeat) REPEAT="$2"; shift 2 ;;
    --raw) RAW="$2"; shift 2 ;;
    --report) REPORT="$2"; shift 2 ;;
    *) echo "bench_collectives: unknown argument $1" >&2; exit 2 ;;
  esac
done

if [ -n "$REPORT" ]; then
  RAW="$REPORT"
else
  BUILD_DIR="${TESSEL_BUILD_DIR:-build}"
  TESSEL_BENCH="$BUILD_DIR/benchmarks/collectives_bench"
  FLOOR_BENCH="$BUILD_DIR/benchmarks/zmq_floor_bench"
  MPI_BENCH="$BUILD_DIR/benchmarks/mpi_collectives_bench"
  for exe in "$TESSEL_BENCH" "$FLOOR_BENCH" "$MPI_BENCH"; do
    if [ ! -x "$exe" ]; then
      echo "bench_collectives: $exe not built (cmake --build $BUILD_DIR --target $(basename "$exe"))" >&2
      exit 1
    fi
  done
  command -v mpirun >/dev/null || { echo "bench_collectives: mpirun not found (openmpi-bin)" >&2; exit 1; }

  if [ -z "$RAW" ]; then RAW="$(mktemp /tmp/bench_collectives.XXXXXX)"; fi
  : >"$RAW"
  SIZES=(--min_bytes="$MIN_BYTES" --max_bytes="$MAX_BYTES" --budget_ms="$BUDGET_MS")
  HOSTS_CSV="$(echo "$RANKS" | tr -s ' ' ',')"
  ROOT_FLAG=()
  if [ "$(id -u)" -eq 0 ]; then ROOT_FLAG=(--allow-run-as-root); fi

  echo "# $(date -u '+%Y-%m-%d %H:%M:%S UTC')  $(nproc) cores  load average: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
  echo "# raw rows: $RAW"

  # Keeps only table rows (drops headers and MPI's chatter), echoing progress to stderr.
  collect() { grep -E '^(memcpy|all-reduce|all-gather) ' | tee -a "$RAW" >&2; }

  # user+nice+system+idle+iowait+irq+softirq+steal and steal, from /proc/stat: the share of
  # CPU time the hypervisor gave to others during a round (high steal makes a round noise).
  cpu_times() { awk '/^cpu /{ t = 0; for (i = 2; i <= 9; ++i) t += $i; print t, $9 }' /proc/stat; }
  steal_since() {
    read -r total1 steal1 < <(cpu_times)
    echo "$(( ($steal1 - $2) * 100 / ($total1 - $1 + 1) ))%"
  }
  for round in $(seq "$REPEAT"); do
    if [ "$round" -gt 1 ]; then echo "# round $((round - 1)): steal $(steal_since $total0 $steal0)"; fi
    read -r total0 steal0 < <(cpu_times)
    echo "# round $round of $REPEAT, load average: $(cut -d' ' -f1-3 /proc/loadavg)"
    "$TESSEL_BENCH" --memcpy_only "${SIZES[@]}" | collect
    "$TESSEL_BENCH" --hosts="$HOSTS_CSV" --protocol=ipc "${SIZES[@]}" | collect
    "$TESSEL_BENCH" --hosts="$HOSTS_CSV" --protocol=ipc --shared_memory=0 "${SIZES[@]}" | collect
    "$TESSEL_BENCH" --hosts="$HOSTS_CSV" --protocol=tcp "${SIZES[@]}" | collect
    "$FLOOR_BENCH" --hosts="$HOSTS_CSV" --protocol=ipc "${SIZES[@]}" | collect
    for n in $RANKS; do
      for mode in tcp shm; do
        btl="self,tcp"
        if [ "$mode" = shm ]; then btl="self,vader"; fi
        mpirun "${ROOT_FLAG[@]}" --oversubscribe -n "$n" --mca pml ob1 --mca btl "$btl" \
          --mca btl_base_warn_component_unused 0 \
          "$MPI_BENCH" --label="mpi-$mode" "${SIZES[@]}" | collect
      done
    done
  done
  echo "# round $REPEAT: steal $(steal_since $total0 $steal0)"
  echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"

fi

# One row per (collective, ranks, bytes): median bus bandwidths (GB/s) and their ratios.
awk '
  { key = $1 " " $3 " " $4; id = $2 SUBSEP key; vals[id] = vals[id] " " $7
    if (NF >= 8) cpus[id] = cpus[id] " " $8
    if ($1 != "memcpy" && !(key in seen)) { seen[key] = 1; order[++n] = key } }
  # The median of the space-separated numbers in s ("" if none).
  function median(s,    a, m, i, j, t) {
    m = split(s, a, " "); if (m == 0) return ""
    for (i = 2; i <= m; ++i) { t = a[i] + 0; for (j = i - 1; j >= 1 && a[j] + 0 > t; --j) a[j + 1] = a[j]; a[j + 1] = t }
    return m % 2 ? sprintf("%.3f", a[(m + 1) / 2]) : sprintf("%.3f", (a[m / 2] + a[m / 2 + 1]) / 2)
  }
  function get(impl, key) { return median(vals[impl, key]) }
  function ratio(a, b) { return (a == "" || b == "" || b == 0) ? "-" : sprintf("%.2f", a / b) }
  function val(x) { return x == "" ? "-" : x }
  END {
    printf "%-11s %5s %10s | %10s %10s %10s %10s %10s %10s %10s | %8s %8s %8s %8s %8s %8s\n",
           "collective", "ranks", "bytes", "tessel-shm", "tessel-ipc", "tessel-tcp", "zmq-raw",
           "mpi-tcp", "mpi-shm", "memcpy", "shm/mtcp", "ipc/mtcp", "tcp/mtcp", "shm/mshm",
           "shm/mcpy", "ipc/raw"
    for (i = 1; i <= n; ++i) {
      split(order[i], k, " ")
      shm = get("tessel-shm", order[i]); ipc = get("tessel-ipc", order[i])
      tcp = get("tessel-tcp", order[i])
      mt = get("mpi-tcp", order[i]); ms = get("mpi-shm", order[i])
      mc = get("memcpy", "memcpy 1 " k[3]); raw = get("zmq-raw-ipc", order[i])
      printf "%-11s %5s %10s | %10s %10s %10s %10s %10s %10s %10s | %8s %8s %8s %8s %8s %8s\n",
             k[1], k[2], k[3], val(shm), val(ipc), val(tcp), val(raw), val(mt), val(ms), val(mc),
             ratio(shm, mt), ratio(ipc, mt), ratio(tcp, mt), ratio(shm, ms), ratio(shm, mc),
             ratio(ipc, raw)
    }
    # CPU time per call, all ranks together (rows written before the cpu_us column have none).
    printf "\nCPU time per call, all ranks together (us, median)\n"
    printf "%-11s %5s %10s | %10s %10s %10s %10s | %8s %8s\n", "collective", "ranks", "bytes",
           "tessel-shm", "tessel-ipc", "mpi-tcp", "mpi-shm", "shm/mtcp", "ipc/mtcp"
    for (i = 1; i <= n; ++i) {
      split(order[i], k, " ")
      shm = median(cpus["tessel-shm", order[i]]); ipc = median(cpus["tessel-ipc", order[i]])
      mt = median(cpus["mpi-tcp", order[i]]); ms = median(cpus["mpi-shm", order[i]])
      printf "%-11s %5s %10s | %10s %10s %10s %10s | %8s %8s\n", k[1], k[2], k[3], val(shm),
             val(ipc), val(mt), val(ms), ratio(shm, mt), ratio(ipc, mt)
    }
  }' "$RAW"
