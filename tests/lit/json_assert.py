"""Checks Python expressions over JSON documents; FileCheck for what text patterns cannot say.

    json_assert.py [NAME=PATH ...] EXPRESSION ...

Each NAME=PATH loads one JSON document as the variable NAME (PATH `-` is stdin); with none, stdin
is loaded as `d`. The top-level keys of the first document that are Python identifiers are also
variables, so `num_devices > 0` reads `d["num_devices"] > 0`. Every EXPRESSION must be true.
Nothing is printed on success; the first false (or failing) expression is written to stderr with
the document it was checked on, and the exit status is 1 (2 for a file that is not JSON).

    # RUN: tessel topology %configs/v4-8.json --json | %json-assert 'num_devices == 4'
    # RUN: %json-assert r=%t/out.json trace=%t/trace.json 'r["mfu"] > 0' \
    # RUN:   'any(e["ph"] == "X" for e in trace["traceEvents"])'
"""
import json
import math
import re
import sys

_DOCUMENT = re.compile(r"^([A-Za-z_]\w*)=(?!=)(.*)$")


def _load(name, path):
    try:
        if path == "-":
            return json.load(sys.stdin)
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        sys.stderr.write(f"json_assert: {name}={path}: {e}\n")
        sys.exit(2)


def main(argv):
    documents = []
    expressions = []
    for arg in argv[1:]:
        match = _DOCUMENT.match(arg)
        if match and not expressions:
            documents.append((match.group(1), match.group(2)))
        else:
            expressions.append(arg)
    if not expressions:
        sys.stderr.write("usage: json_assert.py [NAME=PATH ...] EXPRESSION ...\n")
        return 1
    if not documents:
        documents = [("d", "-")]
    names = {"math": math}
    first = None
    for name, path in documents:
        names[name] = _load(name, path)
        if first is None:
            first = names[name]
    if isinstance(first, dict):
        for key, value in first.items():
            if key.isidentifier() and key not in names:
                names[key] = value
    for expression in expressions:
        try:
            ok = eval(expression, {"__builtins__": __builtins__, **names})
        except Exception as e:  # A missing key is a failed check, not a crash of the helper.
            ok = False
            why = f"{type(e).__name__}: {e}"
        else:
            why = "false"
        if not ok:
            shown = json.dumps(first, sort_keys=True)
            if len(shown) > 2000:
                shown = shown[:2000] + "..."
            sys.stderr.write(f"json_assert: {why}: {expression}\n  on {documents[0][0]} = {shown}\n")
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
