"""Checks the conventions every `tessel` subcommand follows (tools/command.h, docs/cli.md).

    check_conventions.py TESSEL CONFIGS GOLDEN SCRATCH

- The subcommands are read from `tessel --help`; each must have an entry in JSON_RUNS below
  (a new subcommand fails here until it gets one).
- Each summary is one line, starts with a capital letter and has no trailing period.
- `tessel --help` and every `tessel SUB --help` end with the same exit-code block.
- Positionals are named in capitals (CONFIG, HLO, PROGRAM).
- `tessel SUB ... --json` on a small valid input exits 0 and prints ONE JSON object on stdout.
Prints one line per subcommand checked; exits 1 with every problem listed.
"""
import json
import os
import re
import subprocess
import sys

tessel, configs, golden, scratch = sys.argv[1:5]
os.makedirs(scratch, exist_ok=True)
mlp = os.path.join(golden, "partitioner", "mlp_megatron.hlo")
v4_8 = os.path.join(configs, "v4-8.json")

# A small valid input per subcommand: argv after `tessel`.
JSON_RUNS = {
    "topology": ["topology", v4_8, "--json"],
    "mesh": ["mesh", "--mesh-shape", "4,2", "--axis-names", "x,y", "--json"],
    "shard": ["shard", "--mesh-shape", "2,4", "--axis-names", "x,y", "--shape", "8,10",
              "--spec", "x,y", "--json"],
    "propagate": ["propagate", mlp, "--num-partitions", "4", "--json"],
    "partition": ["partition", mlp, "--num-partitions", "4", "--json"],
    "verify": ["verify", mlp, "--num-partitions", "4", "--json"],
    "launch": ["launch", os.path.join(configs, "two_slices_2x2hosts.json"), "--json", "--",
               sys.executable, "-c", "print('host output goes to stderr')"],
    "run": ["run", os.path.join(configs, "single_device.json"), "--example", "gpt",
            "--single-device", "--steps", "2", "--layers", "1", "--d-model", "16", "--heads", "2",
            "--seq-len", "16", "--batch", "2", "--eval-every", "0", "--generate", "0",
            "--json"],
    "simulate": ["simulate", v4_8, "--hlo", mlp, "--json"],
    "autoshard": ["autoshard", v4_8, "--model", "llama", "--layers", "2", "--d-model", "64",
                  "--heads", "4", "--ffn", "128", "--vocab", "128", "--seq-len", "32",
                  "--remat", "full", "--json"],
}

problems = []


def run(argv):
    return subprocess.run([tessel] + argv, capture_output=True, text=True, timeout=300)


top = run(["--help"])
if top.returncode != 0:
    sys.exit(f"tessel --help exited {top.returncode}: {top.stderr}")
sections = top.stdout.split("Subcommands:", 1)
if len(sections) != 2:
    sys.exit("tessel --help lists no Subcommands:")
listing, _, _ = sections[1].partition("Exit codes:")
summaries = {}
for line in listing.strip().splitlines():
    m = re.match(r"\s*(\S+)\s+(.*\S)\s*$", line)
    if m:
        summaries[m.group(1)] = m.group(2)
    elif line.strip():
        problems.append(f"--help: cannot read the subcommand line {line!r}")
if not summaries:
    sys.exit("tessel --help lists no subcommands")

exit_block = top.stdout[top.stdout.find("Exit codes:"):].strip()
if "Exit codes:" not in top.stdout or not re.search(r"\b0\s+ok\b", exit_block):
    problems.append("tessel --help has no `Exit codes:` block with `0 ok`")
for code in ["1  failed", "2  usage", "3  does not fit"]:
    if code not in exit_block:
        problems.append(f"tessel --help: the exit codes lack {code!r}")

for name, summary in summaries.items():
    if not summary[0].isupper():
        problems.append(f"{name}: summary starts in lower case: {summary!r}")
    if summary.endswith("."):
        problems.append(f"{name}: summary ends with a period: {summary!r}")
    help_text = run([name, "--help"])
    if help_text.returncode != 0:
        problems.append(f"{name} --help exited {help_text.returncode}")
        continue
    block = help_text.stdout[help_text.stdout.find("Exit codes:"):].strip()
    if "Exit codes:" not in help_text.stdout or block != exit_block:
        problems.append(f"{name} --help: exit codes differ from tessel --help's:\n{block}")
    positionals = help_text.stdout.partition("Positionals:")[2].partition("Options:")[0]
    for m in re.finditer(r"^\s+(\S+)\s", positionals, re.M):
        if not re.fullmatch(r"[A-Z][A-Z_]*", m.group(1)):
            problems.append(f"{name}: positional {m.group(1)!r} is not named in capitals")
    if name not in JSON_RUNS:
        problems.append(f"{name}: no --json run in tests/cli/Inputs/check_conventions.py; add one")
        continue
    result = run(JSON_RUNS[name])
    if result.returncode != 0:
        problems.append(f"{name} --json exited {result.returncode}: {result.stderr.strip()}")
        continue
    try:
        if not isinstance(json.loads(result.stdout), dict):
            raise ValueError("not a JSON object")
    except ValueError as error:
        problems.append(f"{name} --json: {error}: {result.stdout[:300]!r}")
        continue
    print(f"{name}: ok")

for name in JSON_RUNS:
    if name not in summaries:
        problems.append(f"{name}: in JSON_RUNS but not in tessel --help")
if problems:
    print("\n".join(problems), file=sys.stderr)
    sys.exit(1)
print(f"{len(summaries)} subcommands follow the conventions")
