# Shared helpers of the `tessel` CLI test scripts (sourced, not run). The caller sets `tessel`
# (the binary) before sourcing; this file makes the scratch directory `tmp` (removed on exit)
# and the failure counter `failures`.
#
#   tessel="$1"; source "$(dirname "$0")/cli_test_lib.sh"
#   expect_exit 0 topology configs/v4-8.json || ...
#   [[ "$failures" -eq 0 ]] || exit 1

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
failures=0

# fail MESSAGE...: reports a failure and counts it; the script goes on.
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}

# expect_exit CODE ARGS...: runs tessel ARGS, checks the exit code, keeps stdout/stderr in
# $tmp/out and $tmp/err. Returns 1 (after fail) when the code differs.
expect_exit() {
  local want="$1"
  shift
  "$tessel" "$@" >"$tmp/out" 2>"$tmp/err"
  local got=$?
  if [[ "$got" != "$want" ]]; then
    fail "tessel $* exited $got, expected $want; stderr: $(cat "$tmp/err")"
    return 1
  fi
  return 0
}
