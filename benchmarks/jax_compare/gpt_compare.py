#!/usr/bin/env python3
"""Tessel vs JAX (XLA CPU) on the GPT example's training step, tokens/s, on 1 and 8 devices.

The model and step of benchmarks/gpt_jax_tokens.py (2 layers, d_model 128, seq_len 64, batch 16,
learned positions, GELU, AdamW with clipping); Tessel runs `gpt_train --single-device` and
`tessel run CONFIG --example gpt` (8 devices as 4 host processes of 2, or as one process of 8
in layout 1host-cpu; mesh data=2 x fsdp=2 x tensor=2, parameters by the fsdp_tp recipe) with
the same flags. Rounds alternate the systems
so that load on the machine falls on both. Development only, never part of CI: needs a built
tree (scripts/build.sh) and a Python with jax (`pip install jax`).

  python3 benchmarks/jax_compare/gpt_compare.py --python /path/to/python-with-jax [--rounds 2] \
      [--layouts 4hosts,4hosts-cpu,1host-cpu]

Tessel's tokens/s is the median of its progress records' windows (every --log-every steps)
after the first window, which holds the compiling first step; JAX's is
gpt_jax_tokens.py's figure over --steps steps after its warm-up steps.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GPT_FLAGS = ["--seq-len", "64", "--batch", "16", "--position", "learned", "--mlp", "gelu",
             "--eval-every", "0", "--generate", "0", "--json"]
# layout -> the config and mesh flags of the 8-device run: the 4-process layouts put the
# slices on "data" (the example's default mesh flags), the one-process layout (JAX's: 8 devices
# in one process) has one slice of 8 devices.
LAYOUTS = {
    "4hosts": ["configs/two_slices_2x2hosts.json"],
    "4hosts-cpu": ["configs/cpu_2x2hosts.json"],
    "1host-cpu": ["configs/cpu_one_host_8dev.json", "--ici-mesh-shape", "2,2,2",
                  "--dcn-mesh-shape", "1,1,1"],
}


def run(cmd, env=None):
    result = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"gpt_compare: {' '.join(cmd)} exited {result.returncode}:\n{result.stderr[-2000:]}")
    return result.stdout


def tessel_tokens_per_second(cmd):
    """Median tokens/s of the progress windows after the first (JSON lines or one JSON object)."""
    out = run(cmd)
    records = []
    for line in out.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        obj = json.loads(line)
        records.extend(obj.get("records", [obj]))
    windows = [r["tokens_per_second"] for r in records
               if not r.get("summary") and "step" in r and "tokens_per_second" in r]
    if len(windows) < 2:
        sys.exit(f"gpt_compare: fewer than 2 progress records from {' '.join(cmd)}")
    return statistics.median(windows[1:])


def jax_tokens_per_second(python, steps, devices):
    env = dict(os.environ)
    cmd = [python, "benchmarks/gpt_jax_tokens.py", "--steps", str(steps)]
    if devices == 1:
        cmd.append("--single-device")
    else:
        env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    out = run(cmd, env)
    match = re.search(r"([0-9.]+) tokens/s", out)
    if not match:
        sys.exit(f"gpt_compare: no tokens/s in the output of {' '.join(cmd)}:\n{out}")
    return float(match.group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", default="python3", help="a Python with jax")
    ap.add_argument("--build", default="build")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--steps", type=int, default=40, help="timed steps per run")
    ap.add_argument("--log-every", type=int, default=5)
    ap.add_argument("--layouts", default="4hosts,4hosts-cpu,1host-cpu",
                    help=f"comma-separated 8-device layouts of Tessel, of {', '.join(LAYOUTS)}")
    args = ap.parse_args()
    layouts = args.layouts.split(",")
    if any(layout not in LAYOUTS for layout in layouts):
        sys.exit(f"gpt_compare: --layouts {args.layouts}: each must be one of {', '.join(LAYOUTS)}")
    if args.rounds < 1 or args.steps < 2 * args.log_every:
        sys.exit("gpt_compare: need --rounds >= 1 and --steps >= 2 x --log-every")
    steps = ["--steps", str(args.steps + args.log_every), "--log-every", str(args.log_every)]
    rows = {}
    for _ in range(args.rounds):
        rows.setdefault(("1", "-", "JAX"), []).append(jax_tokens_per_second(args.python, args.steps, 1))
        rows.setdefault(("1", "-", "Tessel"), []).append(tessel_tokens_per_second(
            [f"{args.build}/examples/gpt/gpt_train", "--single-device"] + GPT_FLAGS + steps))
        rows.setdefault(("8", "-", "JAX"), []).append(jax_tokens_per_second(args.python, args.steps, 8))
        for layout in layouts:
            config, *mesh = LAYOUTS[layout]
            rows.setdefault(("8", layout, "Tessel"), []).append(tessel_tokens_per_second(
                [f"{args.build}/tools/tessel", "run", config, "--example", "gpt"] + mesh +
                GPT_FLAGS + steps))
    print(f"# load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print("| devices | layout | system | tokens/s per round | Tessel/JAX per round |")
    print("|---|---|---|---|---|")
    for (devices, layout, system), values in rows.items():
        jax = rows[(devices, "-", "JAX")]
        ratio = "-" if system == "JAX" else ", ".join(f"{t / j:.2f}x" for t, j in zip(values, jax))
        print(f"| {devices} | {layout} | {system} | {', '.join(f'{v:,.0f}' for v in values)} | {ratio} |")


if __name__ == "__main__":
    main()
