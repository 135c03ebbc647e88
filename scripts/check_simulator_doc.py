#!/usr/bin/env python3
"""Checks that docs/simulator.md shows `tessel simulate` as it is: every flag of `--help` in an
example command whose real output the doc shows, and every shown output line what the command
prints now.

  python3 scripts/check_simulator_doc.py [--tessel build/tools/tessel] [--doc docs/simulator.md]
                                         [--update] [--no-flag-check]

An example is a fenced block whose first line is `$ tessel simulate ...` (continued by trailing
backslashes), with its output in the rest of the block or in the fenced block that follows within
a few lines. The output block may
show part of the output ("..." lines skip): each shown line is matched, in order, to the next
output line with the same label (the text before the line's first digit, e.g. "step time      "
or "  parameters "), and must equal it. The command runs in a scratch folder where configs/ and tests/ are the
repository's, with the binary first on PATH, stderr merged into stdout (as a terminal shows it).

Exit 0 when the doc is current; 1 with one line per stale line, per example whose command fails
to match, and per flag without an example. --update rewrites the stale lines in place (it never
adds examples) and then reports what is still missing.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# How many lines of prose may stand between an example's command block and its output block.
MAX_GAP_LINES = 4


def label(line):
    match = re.search(r"\d", line)
    return line if match is None else line[:match.start()]


def fences(lines):
    """(first, last, indent) line indices of each fenced block, the fence lines included."""
    blocks, start = [], None
    for i, line in enumerate(lines):
        if line.strip().startswith("```"):
            if start is None:
                start = i
            else:
                blocks.append((start, i, len(lines[start]) - len(lines[start].lstrip())))
                start = None
    return blocks


def examples(lines):
    """(command, output_first, output_last, indent) per example; output lines are
    [output_first, output_last)."""
    blocks = fences(lines)
    found = []
    for n, (first, last, indent) in enumerate(blocks):
        body = [l[indent:] for l in lines[first + 1:last]]
        if not body or not body[0].startswith("$ tessel simulate"):
            continue
        command = []
        for l in body:
            command.append(l.rstrip().rstrip("\\").strip())
            if not l.rstrip().endswith("\\"):
                break
        command_lines = len(command)
        command = " ".join(command)[2:]
        if command_lines < len(body):  # the output follows in the same block
            found.append((command, first + 1 + command_lines, last, indent))
            continue
        if n + 1 < len(blocks) and blocks[n + 1][0] - last <= MAX_GAP_LINES:
            out_first, out_last, out_indent = blocks[n + 1]
            following = lines[out_first + 1]
            if not following[out_indent:].startswith("$ "):
                found.append((command, out_first + 1, out_last, out_indent))
                continue
        found.append((command, None, None, indent))
    return found


def run(tessel, command):
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(os.path.abspath(tessel)) + os.pathsep + env.get("PATH", "")
    # A scratch folder that looks like the repository root for the paths examples read, so that
    # the files examples write (--trace step.json) land outside the checkout.
    with tempfile.TemporaryDirectory() as scratch:
        for name in ("configs", "tests"):
            os.symlink(os.path.join(ROOT, name), os.path.join(scratch, name))
        out = subprocess.run(["bash", "-c", "{ " + command + "\n} 2>&1"], cwd=scratch, env=env,
                             capture_output=True, text=True)
    return out.stdout.splitlines()


def compare(shown, actual):
    """Yields (index into shown, the actual line or None when no line has its label)."""
    at = 0
    for i, line in enumerate(shown):
        if line.strip() == "...":
            continue
        key = label(line)
        j = at
        while j < len(actual) and label(actual[j]) != key:
            j += 1
        if j == len(actual):
            yield i, None
            continue
        yield i, actual[j]
        at = j + 1


def help_flags(tessel):
    out = subprocess.run([tessel, "simulate", "--help"], capture_output=True, text=True)
    text = out.stdout + out.stderr
    flags = set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", text))
    return sorted(flags - {"--help"})


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tessel", default=os.path.join(ROOT, "build", "tools", "tessel"))
    parser.add_argument("--doc", default=os.path.join(ROOT, "docs", "simulator.md"))
    parser.add_argument("--update", action="store_true")
    parser.add_argument("--no-flag-check", action="store_true",
                        help="check the examples only (for a doc that is not the whole manual)")
    args = parser.parse_args()
    lines = open(args.doc).read().split("\n")
    doc_name = os.path.relpath(args.doc, ROOT)
    if doc_name.startswith(".."):
        doc_name = args.doc
    problems = []
    shown_flags = set()
    changed = False
    for command, first, last, indent in examples(lines):
        if first is None:
            problems.append(f"example without its output: {command}")
            continue
        shown_flags.update(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", command))
        actual = run(args.tessel, command)
        shown = [l[indent:] for l in lines[first:last]]
        for i, line in compare(shown, actual):
            where = f"{doc_name}:{first + i + 1}"
            if line is None:
                problems.append(f"{where}: no output line like {shown[i]!r} from: {command}")
            elif line != shown[i]:
                if args.update:
                    lines[first + i] = " " * indent + line
                    changed = True
                else:
                    problems.append(f"{where}: shows {shown[i]!r}, the command prints {line!r}")
    for flag in [] if args.no_flag_check else help_flags(args.tessel):
        if flag not in shown_flags and not any(f.startswith(flag) for f in shown_flags):
            problems.append(f"{flag} (in --help) has no example with its output in the doc")
    if changed:
        open(args.doc, "w").write("\n".join(lines))
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
