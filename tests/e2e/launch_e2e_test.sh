#!/usr/bin/env bash
# End-to-end checks of `tessel launch` and of a host started by hand, with real host_probe
# processes on ipc / loopback tcp. One case per run, so CTest reports each on its own:
#
#   launch_e2e_test.sh TESSEL HOST_PROBE CONFIGS_DIR CASE
#
# Cases:
#   ok           4 hosts, 20 all-reduces: exit 0, host 0's line (only) on stdout, argv[0]
#                found through PATH
#   host_exit    host 2 exits 3 after bootstrap: non-zero exit, stderr names host 2, nothing left
#   host_killed  SIGKILL host 1 mid-run: non-zero exit within 10 s, stderr names host 1 and its
#                pid, nothing left
#   launcher_killed  SIGKILL of tessel launch mid-run: no host is left (PR_SET_PDEATHSIG)
#   interrupted  SIGINT to tessel launch: forwarded, exit 130, no host left
#   bad_config   missing file / not JSON / not found program: exit 1 and one line; bad args of
#                tessel launch, or bad or unknown flags of host_probe: exit 2 and one line
#   mpirun       4 ranks under Open MPI's mpirun with only TESSEL_CONFIG set (the coordinator in
#                a private 0700 folder); over tcp without TESSEL_JOB_TOKEN: refused, naming it;
#                with the token exported: runs (skipped, exit 77, when mpirun is not installed)
#   unreachable  host 1 of 2 started by hand, coordinator that nobody serves (ipc and tcp),
#                TESSEL_BOOTSTRAP_TIMEOUT_S=1: exit 1 and one line naming the coordinator
set -u
tessel="$1"
probe="$2"
configs="$3"
case_name="$4"
config="$configs/two_slices_2x2hosts.json"
tmp="$(mktemp -d)"
tag="launch-e2e-$$-$RANDOM$RANDOM"
failures=0

# Pids of live host_probe processes carrying this run's tag (zombies that an init without a
# reaper keeps around are dead and not listed).
probe_pids() {
  local pid state
  for pid in $(pgrep -f -- "--tag $tag" 2>/dev/null); do
    [[ "$(cat "/proc/$pid/comm" 2>/dev/null)" == host_probe ]] || continue
    state=$(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | cut -d' ' -f1)
    [[ -n "$state" && "$state" != Z ]] && echo "$pid"
  done
}

cleanup() {
  local pids
  pids=$(probe_pids)
  [[ -n "$pids" ]] && kill -9 $pids 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT

fail() {
  echo "FAIL [$case_name]: $*" >&2
  failures=$((failures + 1))
}

# expect_no_probe: no host_probe of this run is left (zombies of a dead launcher count as gone).
expect_no_probe() {
  local i pids
  for i in $(seq 50); do
    pids=$(probe_pids)
    [[ -z "$pids" ]] && return 0
    sleep 0.1
  done
  fail "host_probe processes left running: $pids"
}

# expect_one_line FILE PREFIX: FILE is exactly one line that starts with PREFIX.
expect_one_line() {
  local lines
  lines=$(wc -l <"$1")
  if [[ "$lines" != 1 ]] || ! grep -qF -- "$2" "$1" || [[ "$(head -c ${#2} "$1")" != "$2" ]]; then
    fail "expected one line starting with '$2' in $1, got: $(cat "$1")"
  fi
}

case "$case_name" in
  ok)
    PATH="$(dirname "$probe"):$PATH" timeout 60 "$tessel" launch "$config" -- host_probe \
      --iterations 20 --tag "$tag" >"$tmp/out" 2>"$tmp/err"
    code=$?
    [[ "$code" == 0 ]] || fail "exit $code, expected 0; stderr: $(cat "$tmp/err")"
    expect_one_line "$tmp/out" "host 0: ok (20 all-reduces of 4096 f32 over 8 devices on 4 hosts"
    expect_no_probe
    ;;

  host_exit)
    start=$SECONDS
    timeout 60 "$tessel" launch "$config" -- "$probe" --iterations 1000000 --sleep-ms 10 \
      --exit-code 3 --fail-host 2 --tag "$tag" >"$tmp/out" 2>"$tmp/err"
    code=$?
    elapsed=$((SECONDS - start))
    [[ "$code" == 3 ]] || fail "exit $code, expected 3 (host 2's status); stderr: $(cat "$tmp/err")"
    [[ "$code" != 124 ]] || fail "tessel launch did not stop within 60 s"
    grep -qE "^tessel launch: host 2 \(pid [0-9]+\) exited with status 3" "$tmp/err" ||
      fail "stderr does not name host 2: $(cat "$tmp/err")"
    [[ "$elapsed" -le 15 ]] || fail "took ${elapsed}s to stop after host 2 failed"
    expect_no_probe
    ;;

  host_killed)
    "$tessel" launch "$config" -- "$probe" --iterations 1000000 --sleep-ms 10 --tag "$tag" \
      >"$tmp/out" 2>"$tmp/err" &
    launcher=$!
    victim=""
    for i in $(seq 200); do
      for pid in $(probe_pids); do
        if tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "TESSEL_HOST_INDEX=1"; then
          victim=$pid
        fi
      done
      [[ -n "$victim" && $(probe_pids | wc -l) == 4 ]] && break
      sleep 0.05
    done
    if [[ -z "$victim" ]]; then
      fail "host 1 never started; stderr: $(cat "$tmp/err")"
      kill -9 "$launcher"
    else
      sleep 1  # let the job bootstrap and run all-reduces
      kill -9 "$victim"
      for i in $(seq 100); do
        kill -0 "$launcher" 2>/dev/null || break
        sleep 0.1
      done
      if kill -0 "$launcher" 2>/dev/null; then
        fail "tessel launch still running 10 s after host 1 was killed"
        kill -9 "$launcher"
      fi
    fi
    wait "$launcher"
    code=$?
    [[ "$code" != 0 ]] || fail "exit 0 after a host was killed"
    [[ "$code" == 137 ]] || fail "exit $code, expected 137 (128 + SIGKILL)"
    grep -qF "tessel launch: host 1 (pid $victim) was killed by signal 9 (Killed)" "$tmp/err" ||
      fail "stderr does not name host 1 (pid $victim): $(cat "$tmp/err")"
    expect_no_probe
    ;;

  launcher_killed | interrupted)
    # SIGKILL of the launcher: PR_SET_PDEATHSIG takes the hosts down. SIGINT (Ctrl-C): forwarded
    # to the hosts, exit 130.
    "$tessel" launch "$config" -- "$probe" --iterations 1000000 --sleep-ms 10 --tag "$tag" \
      >"$tmp/out" 2>"$tmp/err" &
    launcher=$!
    for i in $(seq 200); do
      [[ $(probe_pids | wc -l) == 4 ]] && break
      sleep 0.05
    done
    [[ $(probe_pids | wc -l) == 4 ]] || fail "4 hosts never ran; stderr: $(cat "$tmp/err")"
    sleep 0.5
    if [[ "$case_name" == launcher_killed ]]; then
      # The private directory a SIGKILLed launcher cannot remove; the test removes it below.
      ipc_dir=$(tr '\0' '\n' <"/proc/$(probe_pids | head -1)/environ" | sed -n 's/^TESSEL_IPC_DIR=//p')
      kill -9 "$launcher"
      wait "$launcher"
    else
      kill -INT "$launcher"
      for i in $(seq 100); do
        kill -0 "$launcher" 2>/dev/null || break
        sleep 0.1
      done
      kill -0 "$launcher" 2>/dev/null && fail "tessel launch still running 10 s after SIGINT"
      wait "$launcher"
      code=$?
      [[ "$code" == 130 ]] || fail "exit $code after SIGINT, expected 130"
      grep -qF "tessel launch: received signal 2 (Interrupt); forwarding it to 4 running host(s)" \
        "$tmp/err" || fail "no forwarding message: $(cat "$tmp/err")"
    fi
    expect_no_probe
    [[ "$case_name" == launcher_killed && "$ipc_dir" == */tessel-launch-* ]] && rm -rf "$ipc_dir"
    ;;

  bad_config)
    "$tessel" launch "$tmp/no_such.json" -- "$probe" >"$tmp/out" 2>"$tmp/err"
    code=$?
    [[ "$code" == 1 ]] || fail "missing config: exit $code, expected 1"
    expect_one_line "$tmp/err" "tessel launch: $tmp/no_such.json: no such file"
    printf '{"slices": [' >"$tmp/truncated.json"
    "$tessel" launch "$tmp/truncated.json" -- "$probe" >"$tmp/out" 2>"$tmp/err"
    code=$?
    [[ "$code" == 1 ]] || fail "truncated config: exit $code, expected 1"
    expect_one_line "$tmp/err" "tessel launch: $tmp/truncated.json: invalid JSON"
    "$tessel" launch "$config" -- tessel-no-such-program >"$tmp/out" 2>"$tmp/err"
    code=$?
    [[ "$code" == 1 ]] || fail "missing program: exit $code, expected 1"
    expect_one_line "$tmp/err" "tessel launch: program \"tessel-no-such-program\" not found in \$PATH"
    "$tessel" launch "$config" >"$tmp/out" 2>"$tmp/err"
    code=$?
    [[ "$code" == 2 ]] || fail "no program: exit $code, expected 2"
    expect_one_line "$tmp/err" "tessel: "
    "$tessel" launch "$config" "$probe" --iterations 3 >"$tmp/out" 2>"$tmp/err"
    code=$?
    [[ "$code" == 2 ]] || fail "program flags without --: exit $code, expected 2"
    # host_probe's own flags: an unknown or a refused one is exit 2 and one line.
    for args in "--no-such-flag 1" "--iterations -1" "--exit-code 256" "--iterations"; do
      # shellcheck disable=SC2086  # split on purpose
      "$probe" $args >"$tmp/out" 2>"$tmp/err"
      code=$?
      [[ "$code" == 2 ]] || fail "host_probe $args: exit $code, expected 2"
      expect_one_line "$tmp/err" "host_probe: "
    done
    ;;

  unreachable)
    for coordinator in "ipc://$tmp/nobody-serves-this" "tcp://127.0.0.1:1"; do
      start=$SECONDS
      TESSEL_HOST_INDEX=1 TESSEL_NUM_HOSTS=2 TESSEL_CONFIG="$configs/two_v4-8_slices.json" \
        TESSEL_COORDINATOR="$coordinator" TESSEL_BOOTSTRAP_TIMEOUT_S=1 TESSEL_JOB_TOKEN=e2e-token \
        timeout 30 "$probe" --tag "$tag" >"$tmp/out" 2>"$tmp/err"
      code=$?
      elapsed=$((SECONDS - start))
      [[ "$code" == 1 ]] || fail "$coordinator: exit $code, expected 1; stderr: $(cat "$tmp/err")"
      expect_one_line "$tmp/err" "host_probe host 1: "
      grep -qF "$coordinator" "$tmp/err" || fail "$coordinator not named: $(cat "$tmp/err")"
      [[ "$elapsed" -le 6 ]] || fail "$coordinator: took ${elapsed}s with a 1 s bootstrap timeout"
    done
    ;;

  mpirun)
    if ! command -v mpirun >/dev/null; then
      echo "mpirun not installed (Debian: openmpi-bin); skipped"
      exit 77
    fi
    # Open MPI's rank variables and the coordinator derived from its job id (mesh/launch/host_env.h),
    # in a private folder: $TMPDIR/tessel-<uid>, mode 0700 (no XDG_RUNTIME_DIR here).
    mkdir "$tmp/t"
    timeout 60 env -u XDG_RUNTIME_DIR TMPDIR="$tmp/t" mpirun --allow-run-as-root --oversubscribe \
      -np 4 -x TESSEL_CONFIG="$config" "$probe" --iterations 5 --tag "$tag" >"$tmp/out" 2>"$tmp/err"
    code=$?
    [[ "$code" == 0 ]] || fail "mpirun exit $code, expected 0; stderr: $(cat "$tmp/err")"
    for h in 0 1 2 3; do
      grep -qx "host $h: ok (5 all-reduces of 4096 f32 over 8 devices on 4 hosts; rank from OMPI_COMM_WORLD_RANK)" \
        "$tmp/out" || fail "no line for host $h in: $(cat "$tmp/out")"
    done
    [[ $(wc -l <"$tmp/out") == 4 ]] || fail "expected 4 lines, got: $(cat "$tmp/out")"
    mode=$(stat -c '%a %u' "$tmp/t/tessel-$(id -u)" 2>/dev/null)
    [[ "$mode" == "700 $(id -u)" ]] || fail "private folder $tmp/t/tessel-$(id -u): mode/owner '$mode'"
    [[ -z "$(find "$tmp/t" -maxdepth 1 -name '*.coord')" ]] || fail "a coordinator socket in \$TMPDIR itself"
    expect_no_probe

    # tcp without a job token: every rank refuses at once, naming TESSEL_JOB_TOKEN.
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    timeout 60 mpirun --allow-run-as-root --oversubscribe -np 4 -x TESSEL_CONFIG="$config" \
      -x TESSEL_COORDINATOR="tcp://127.0.0.1:$port" "$probe" --iterations 5 --tag "$tag" \
      >"$tmp/out" 2>"$tmp/err"
    code=$?
    [[ "$code" != 0 ]] || fail "mpirun over tcp without a token exited 0"
    grep -q "TESSEL_JOB_TOKEN is not set" "$tmp/err" || fail "no token refusal in: $(cat "$tmp/err")"
    grep -q "mpirun -x TESSEL_JOB_TOKEN" "$tmp/err" || fail "no mpirun advice in: $(cat "$tmp/err")"
    expect_no_probe

    # The same with the token exported as docs/launch.md says (off the command line): it runs.
    export TESSEL_JOB_TOKEN="$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')"
    timeout 60 mpirun --allow-run-as-root --oversubscribe -np 4 -x TESSEL_CONFIG="$config" \
      -x TESSEL_COORDINATOR="tcp://127.0.0.1:$port" -x TESSEL_JOB_TOKEN "$probe" --iterations 5 \
      --tag "$tag" >"$tmp/out" 2>"$tmp/err"
    code=$?
    unset TESSEL_JOB_TOKEN
    [[ "$code" == 0 ]] || fail "mpirun over tcp with a token: exit $code; stderr: $(cat "$tmp/err")"
    [[ $(grep -c "ok (5 all-reduces" "$tmp/out") == 4 ]] || fail "expected 4 ok lines: $(cat "$tmp/out")"
    expect_no_probe
    ;;

  *)
    echo "unknown case $case_name" >&2
    exit 2
    ;;
esac

if [[ "$failures" -ne 0 ]]; then
  echo "$failures failure(s)" >&2
  exit 1
fi
echo "launch e2e $case_name: passed"
