#!/usr/bin/env python3
"""Compare `tessel autoshard` with the hand-tuned meshes of published MaxText runs.

For each run of tests/validation/published_runs.json (MaxText's v5p / v5e recipes, with the mesh
each was tuned with), this predicts the hand plan's step time with `tessel simulate` (the run's
ici_* / dcn_* axes, remat policy, flash attention, sequence parallelism, overlapped schedule:
the flags scripts/validate_simulator.py uses), runs `tessel autoshard` on the same model and
topology, and predicts the chosen plan's step time with `tessel simulate` too (the full graph,
not the search's layer extrapolation), so both rows come from one model. It prints a Markdown
table (docs/autoshard.md) and exits 1 when the autoshard plan is slower than a hand plan that
fits (autoshard returns only plans that fit in HBM) on any run.

  python3 scripts/autoshard_published.py [--tessel build/tools/tessel] [--runs FILE]
      [--only ID,ID,...]
"""
import argparse
import json
import math
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
AXES = ["data", "stage", "fsdp", "fsdp_transpose", "sequence", "tensor", "expert"]


def maxtext_dims(base, scale):
    """MaxText pyconfig.get_individual_scales applied to base.yml's model."""
    log2 = int(math.log2(scale))
    base_scale, rem = divmod(log2, 3)
    head_scale = base_scale + int(rem > 0)
    emb_scale = base_scale + int(rem > 1)
    return {
        "d_model": 2**emb_scale * base["emb_dim"],
        "heads": 2**head_scale * base["num_heads"],
        "ffn": 2**head_scale * base["mlp_dim"],
        "layers": 2**base_scale * base["layers"],
        "head_dim": base["head_dim"],
        "vocab": base["vocab"],
    }


def chips_of(run):
    topo = json.load(open(os.path.join(ROOT, run["topology"])))
    per_slice = 1
    for d in topo["slices"][0]["shape"]:
        per_slice *= d
    return per_slice * run["num_slices"]


def model_flags(run, dims, chips):
    return ["--model", "llama", "--layers", str(dims["layers"]), "--d-model", str(dims["d_model"]),
            "--heads", str(dims["heads"]), "--head-dim", str(dims["head_dim"]),
            "--ffn", str(dims["ffn"]), "--vocab", str(dims["vocab"]),
            "--seq-len", str(run["seq_len"]),
            "--batch", str(run["per_device_batch_size"] * chips),
            "--attention", run["attention"], "--sequence-parallel", "--overlap"]


def slices_flags(run):
    return ["--num-slices", str(run["num_slices"])] if run["num_slices"] > 1 else []


def simulate(tessel, run, dims, chips, ici, dcn, remat, microbatches=0):
    cmd = [tessel, "simulate", run["topology"]] + slices_flags(run) + \
        model_flags(run, dims, chips) + ["--remat", remat]
    for prefix, sizes in (("ici", ici), ("dcn", dcn)):
        for axis, size in sizes.items():
            if size != 1:
                cmd += [f"--{prefix}-{axis.replace('_', '-')}", str(size)]
    if microbatches:
        cmd += ["--microbatches", str(microbatches)]
    out = subprocess.run(cmd + ["--json"], cwd=ROOT, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {out.stderr.strip()}")
    return json.loads(out.stdout), cmd


def plan_text(ici, dcn, remat, microbatches=0):
    parts = [f"ici {' '.join(f'{a}={s}' for a, s in ici.items() if s != 1) or '-'}"]
    if any(s != 1 for s in dcn.values()):
        parts.append(f"dcn {' '.join(f'{a}={s}' for a, s in dcn.items() if s != 1)}")
    parts.append(remat)
    if microbatches:
        parts.append(f"{microbatches} microbatches")
    return ", ".join(parts)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tessel", default=os.path.join(ROOT, "build", "tools", "tessel"))
    parser.add_argument("--runs", default=os.path.join(ROOT, "tests", "validation",
                                                       "published_runs.json"))
    parser.add_argument("--only", default="", help="comma-separated run ids (default: all)")
    args = parser.parse_args()
    data = json.load(open(args.runs))
    only = set(filter(None, args.only.split(",")))
    rows, slower = [], []
    for run in data["runs"]:
        if only and run["id"] not in only:
            continue
        dims = maxtext_dims(data["maxtext_base"], run["global_parameter_scale"])
        chips = chips_of(run)
        per_slice = chips // run["num_slices"]
        hand_ici = {a: 1 for a in AXES}
        hand_dcn = {a: 1 for a in AXES}
        for prefix, sizes, total in (("ici", hand_ici, per_slice), ("dcn", hand_dcn,
                                                                     run["num_slices"])):
            given = run.get(prefix, {})
            product = math.prod(s for s in given.values() if s != -1)
            for axis, size in given.items():
                sizes[axis] = total // product if size == -1 else size
        hand, hand_cmd = simulate(args.tessel, run, dims, chips, hand_ici, hand_dcn, run["remat"])
        auto_cmd = [args.tessel, "autoshard", run["topology"]] + slices_flags(run) + \
            model_flags(run, dims, chips)
        start = time.time()
        out = subprocess.run(auto_cmd + ["--json"], cwd=ROOT, capture_output=True, text=True)
        search_s = time.time() - start
        if out.returncode != 0:
            raise RuntimeError(f"{' '.join(auto_cmd)}: {out.stderr.strip()}")
        best = json.loads(out.stdout)["best"]
        auto_ici = dict(zip(AXES, best["ici"]))
        auto_dcn = dict(zip(AXES, best["dcn"]))
        auto, _ = simulate(args.tessel, run, dims, chips, auto_ici, auto_dcn, best["remat"],
                           best["microbatches"])
        h, a = hand["step_time_s"], auto["step_time_s"]
        # A hand plan the memory model says does not fit is no bound: autoshard only returns
        # plans that fit.
        if a > h * (1 + 1e-9) and hand["fits"]:
            slower.append(run["id"])
        rows.append((run, chips, plan_text(hand_ici, hand_dcn, run["remat"]), h, hand["fits"],
                     plan_text(auto_ici, auto_dcn, best["remat"], best["microbatches"]),
                     best["step_time_s"], a, search_s, " ".join(auto_cmd[1:]).replace(ROOT + "/", "")))
        print(f"{run['id']:34s} hand {h:8.3f} s  autoshard {a:8.3f} s ({(a / h - 1) * 100:+.1f} %)"
              f"  search {search_s:.1f} s", file=sys.stderr)
    print("| run (source) | chips | hand-tuned plan | its step | autoshard plan | search's "
          "prediction | its step (simulate) | change | search time |")
    print("|---|---:|---|---:|---|---:|---:|---:|---:|")
    for run, chips, hp, h, fits, ap, pred, a, s, _ in rows:
        print(f"| [{run['id']}]({run['recipe_source']}) | {chips} | {hp}{'' if fits else ' (does not fit)'} | "
              f"{h:.3f} s | {ap} | {pred:.3f} s | {a:.3f} s | {100 * (a / h - 1):+.1f} % | {s:.1f} s |")
    print()
    print("Commands (autoshard; the hand plan is the same model flags under `tessel simulate` with "
          "the run's --ici-* / --dcn-* / --remat):")
    print()
    print("```")
    for row in rows:
        print("tessel " + row[-1].split(" ", 1)[1] if row[-1].startswith("/") else "tessel " + row[-1])
    print("```")
    if slower:
        print(f"autoshard slower than the hand plan on: {', '.join(slower)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
