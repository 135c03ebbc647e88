#!/usr/bin/env python3
"""Fails when a function body outside the tests is longer than a limit (default 150 lines).

Usage: function_length.py ROOT [--max-lines N]

Scans the non-test .cc files under the library, tool and example folders. A function is a
brace block opened at namespace level (not a namespace, class, struct, enum or union, and not an
initializer such as `= {`); its length runs from the line that opens it to the line of its
closing brace, counted from the first line of its signature as lizard counts them. Lambdas and
member functions defined inside a class body are counted as part of what encloses them, which
only makes the check stricter. Strings, character literals and comments are skipped so that
braces inside them do not count.
"""
import argparse
import os
import re
import sys

FOLDERS = ["core", "spmd", "partitioner", "nn", "transport", "mesh", "tools", "examples", "benchmarks"]
NOT_A_FUNCTION = re.compile(r"\b(namespace|class|struct|enum|union)\b|=\s*$|^\s*extern\s+\"C\"")


def strip_code(text):
    """Returns `text` with comments, string and char literals blanked (newlines kept)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif text.startswith('R"', i):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            if not m:
                out.append(c)
                i += 1
                continue
            end = text.find(")" + m.group(1) + '"', i)
            j = n if end < 0 else end + len(m.group(1)) + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(" ")
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def long_functions(path, max_lines):
    with open(path, encoding="utf-8") as f:
        code = strip_code(f.read())
    lines = code.split("\n")
    # A stack of open blocks: (kind, first line). kind "fn" for a function, "scope" otherwise.
    stack = []
    statement = []  # text since the last ; { or } at the current level, for classifying a brace
    statement_line = 1  # where that text starts: a function's length counts from its signature
    found = []
    for number, line in enumerate(lines, start=1):
        for c in line:
            if not statement or not "".join(statement).strip():
                statement_line = number
            if c == "{":
                head = "".join(statement)
                inside_fn = any(kind == "fn" for kind, _ in stack)
                if inside_fn:
                    kind = "inner"
                elif NOT_A_FUNCTION.search(head) or not head.strip().endswith(")") and \
                        not re.search(r"\)\s*(const|override|final|noexcept|mutable|->.*)\s*$",
                                      head.strip()):
                    kind = "scope"
                else:
                    kind = "fn"
                stack.append((kind, statement_line if kind == "fn" else number))
                statement = []
            elif c == "}":
                if stack:
                    kind, start = stack.pop()
                    if kind == "fn" and number - start + 1 > max_lines:
                        found.append((start, number - start + 1))
                statement = []
            elif c == ";":
                statement = []
            else:
                statement.append(c)
        statement.append(" ")
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("root")
    parser.add_argument("--max-lines", type=int, default=150)
    args = parser.parse_args()
    checked = 0
    violations = []
    for folder in FOLDERS:
        for dirpath, _, files in os.walk(os.path.join(args.root, folder)):
            for name in sorted(files):
                if not name.endswith(".cc") or name.endswith("_test.cc"):
                    continue
                path = os.path.join(dirpath, name)
                checked += 1
                for start, length in long_functions(path, args.max_lines):
                    rel = os.path.relpath(path, args.root)
                    violations.append(f"{rel}:{start}: function of {length} lines "
                                      f"(limit {args.max_lines})")
    if checked == 0:
        print(f"function_length: no .cc files under {args.root}")
        return 1
    for v in violations:
        print(v)
    if violations:
        return 1
    print(f"function_length: {checked} files checked, no function over {args.max_lines} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
