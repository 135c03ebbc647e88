#!/usr/bin/env python3
"""Rewrites Tessel's own includes to the installed layout: `#include "core/shape.h"` becomes
`#include "tessel/core/shape.h"`, for every public folder (core, spmd, partitioner, nn, mesh,
transport; cmake/TesselHelpers.cmake TESSEL_PUBLIC_FOLDERS). Only `#include "..."` lines change
(in C++ sources and headers, and in code shown in Markdown); tools/, examples/, benchmarks/ and
tests/ paths are programs, not installed, and stay as they are.

Then each rewritten C++ file goes through `clang-format -i --lines=N:N` for its changed lines
only (the repository's .clang-format; Debian clang-format 14), which sorts just the include
blocks those lines are in, so "tessel/..." takes its place among the other includes and no other
line of the file moves. --no-format skips that step.

Idempotent: a second run changes nothing. Files are those git tracks, so build outputs and
untracked files are left alone (outside a git checkout: all but hidden and build* folders).

    python3 scripts/dev/rewrite_includes.py [--check | --no-format] [REPO_ROOT]

--check rewrites nothing and exits 1, listing file:line, when a line would change (the lint
tests/lint/include_style.py runs this). Exit 0 otherwise.
"""
import argparse
import pathlib
import re
import shutil
import subprocess
import sys

PUBLIC_FOLDERS = ("core", "spmd", "partitioner", "nn", "mesh", "transport")
SUFFIXES = (".h", ".cc", ".hpp", ".cpp", ".in", ".md", ".pyi")
# `#include "core/...` (any spacing after # and include); the quote keeps <...> includes of
# other libraries out, and "tessel/core/..." does not match, which makes the rewrite idempotent.
INCLUDE = re.compile(r'^(\s*(?://\s*)?#\s*include\s*")((?:%s)/)' % "|".join(PUBLIC_FOLDERS))


def tracked_files(root):
    """The files git tracks under `root`; outside a git checkout (a source tarball), every file
    but those under hidden folders and build*/ folders."""
    try:
        out = subprocess.run(["git", "-C", str(root), "ls-files", "-z"], check=True,
                             capture_output=True).stdout.decode()
        return [root / p for p in out.split("\0") if p.endswith(SUFFIXES)]
    except (OSError, subprocess.CalledProcessError):
        files = []
        for path in sorted(root.rglob("*")):
            parts = path.relative_to(root).parts
            if any(p.startswith(".") or p.startswith("build") for p in parts[:-1]):
                continue
            if path.name.endswith(SUFFIXES):
                files.append(path)
        return files


def rewrite(text):
    """Returns (new text, 1-based numbers of the changed lines)."""
    lines = text.split("\n")
    changed = []
    for i, line in enumerate(lines):
        new = INCLUDE.sub(r"\1tessel/\2", line)
        if new != line:
            lines[i] = new
            changed.append(i + 1)
    return "\n".join(lines), changed


def format_lines(path, changed):
    """Sorts the include blocks of `changed` lines with clang-format, touching nothing else."""
    clang_format = shutil.which("clang-format")
    if clang_format is None:
        print("rewrite_includes: clang-format not found, includes left unsorted", file=sys.stderr)
        return
    lines = [f"--lines={n}:{n}" for n in changed]
    subprocess.run([clang_format, "-i", *lines, str(path)], check=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="report, do not rewrite")
    parser.add_argument("--no-format", action="store_true", help="do not sort the includes")
    parser.add_argument("root", nargs="?", default=pathlib.Path(__file__).resolve().parents[2])
    args = parser.parse_args()
    root = pathlib.Path(args.root).resolve()
    total = 0
    for path in tracked_files(root):
        if not path.is_file() or path.is_symlink():
            continue
        text = path.read_text(encoding="utf-8")
        new, changed = rewrite(text)
        if not changed:
            continue
        total += len(changed)
        rel = path.relative_to(root)
        if args.check:
            for n in changed:
                print(f"{rel}:{n}: old include style, write \"tessel/...\" "
                      f"(python3 scripts/dev/rewrite_includes.py)")
        else:
            path.write_text(new, encoding="utf-8")
            if not args.no_format and path.suffix in (".h", ".cc", ".hpp", ".cpp"):
                format_lines(path, changed)
    if args.check:
        return 1 if total else 0
    print(f"rewrite_includes: {total} lines rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main())
