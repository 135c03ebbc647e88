"""Runs a command and succeeds only if it exits with the given status: lit's `not` with a number.

    expect_exit.py STATUS COMMAND [ARGS...]

The command's stdout and stderr pass through untouched, so a RUN line can still pipe them into
FileCheck. Exits 0 when the status matches; otherwise writes one line naming the command, the
status it got and the status expected to stderr and exits 1 (also for a command killed by a
signal, reported as `signal N`).

    # RUN: %expect-exit 2 tessel shard --spec "0,0" 2>&1 | FileCheck %s
"""
import subprocess
import sys


def main(argv):
    if len(argv) < 3 or not argv[1].lstrip("-").isdigit():
        sys.stderr.write("usage: expect_exit.py STATUS COMMAND [ARGS...]\n")
        return 1
    want = int(argv[1])
    command = argv[2:]
    try:
        got = subprocess.call(command)
    except OSError as e:
        sys.stderr.write(f"expect_exit: cannot run {command[0]}: {e}\n")
        return 1
    if got == want:
        return 0
    how = f"signal {-got}" if got < 0 else f"status {got}"
    sys.stderr.write(f"expect_exit: {' '.join(command)}: exited with {how}, expected status "
                     f"{want}\n")
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
