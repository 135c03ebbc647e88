#!/usr/bin/env python3
"""Compare `tessel autoshard` with the hand-tuned plans of published training runs.

For each run of MaxText's and Megatron-LM's tables in tests/validation/published_runs.json
(MaxText's v5p / v5e recipes with the mesh each was tuned with; Megatron-LM's Table 1 GPT
layouts of Narayanan et al. 2021; the tpu-recipes step logs, given as explicit model sizes with
MaxText's custom remat, splash tiles and MoE, are not in this comparison), this predicts
the hand plan's step time with `tessel simulate` (the flags scripts/validate_simulator.py uses:
MaxText's ici_* / dcn_* axes, remat, flash attention, sequence parallelism; Megatron's tensor
inside a node, pipeline and data across nodes, its microbatch count; both with the overlapped
schedule), runs `tessel autoshard` on the same model and topology, and predicts the chosen plan's
step time with `tessel simulate` too (the full graph, not the search's layer extrapolation), so
both sides come from one model.

Autoshard returns only plans that fit in HBM. When Tessel's memory model puts the hand plan over
HBM (it ran on the hardware: the model is conservative there), the hand plan is no bound for that
search; the row then also gives autoshard with `--hbm-gib` set to the hand plan's own memory, a
search whose space holds the hand plan, which must match or beat it.

Prints a Markdown table (docs/autoshard.md) with the commands, and exits 1 when autoshard is
slower than the hand plan on a row where the hand plan is in its space.

  python3 scripts/autoshard_published.py [--tessel build/tools/tessel] [--runs FILE]
      [--only ID,ID,...] [--budget S] [--cache FILE] [--write-doc docs/autoshard.md]

--cache FILE keeps each finished row (JSON Lines, keyed by the run and the tessel binary's
modification time), so an interrupted table resumes where it stopped.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import time

# The MaxText model scaling and the chip count are the validation script's (one implementation).
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from validate_simulator import chips_of, maxtext_dims  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
AXES = ["data", "stage", "fsdp", "fsdp_transpose", "sequence", "tensor", "expert"]
GIB = 1024**3
BEGIN = "<!-- autoshard-published: begin (scripts/autoshard_published.py --write-doc) -->"
END = "<!-- autoshard-published: end -->"


def maxtext_plan(run, base, chips):
    """(model flags, ici sizes, dcn sizes, remat, microbatches) of a MaxText run."""
    dims = maxtext_dims(base, run["global_parameter_scale"])
    flags = ["--model", "llama", "--layers", str(dims["layers"]), "--d-model", str(dims["d_model"]),
             "--heads", str(dims["heads"]), "--head-dim", str(dims["head_dim"]),
             "--ffn", str(dims["ffn"]), "--vocab", str(dims["vocab"]),
             "--seq-len", str(run["seq_len"]),
             "--batch", str(run["per_device_batch_size"] * chips),
             "--attention", run["attention"], "--sequence-parallel", "--overlap"]
    ici = {a: 1 for a in AXES}
    dcn = {a: 1 for a in AXES}
    per_slice = chips // run["num_slices"]
    for prefix, sizes, total in (("ici", ici, per_slice), ("dcn", dcn, run["num_slices"])):
        given = run.get(prefix, {})
        product = math.prod(s for s in given.values() if s != -1)
        for axis, size in given.items():
            sizes[axis] = total // product if size == -1 else size
    return flags, ici, dcn, run["remat"], 0


def megatron_plan(run):
    """Megatron's (t, p, d) on N DGX nodes as scripts/validate_simulator.py maps it: tensor inside
    a node, the rest of the node data parallel, pipeline stages and data replicas across nodes;
    microbatches = global batch / (d x microbatch size)."""
    m, t, p, d = run["model"], run["tensor"], run["pipeline"], run["data"]
    per_node = 8
    flags = ["--model", m["arch"], "--layers", str(m["layers"]), "--d-model", str(m["d_model"]),
             "--heads", str(m["heads"]), "--vocab", str(m["vocab"]), "--seq-len", str(m["seq_len"]),
             "--batch", str(run["global_batch"]), "--attention", run["attention"], "--overlap"]
    ici = {a: 1 for a in AXES}
    dcn = {a: 1 for a in AXES}
    ici["tensor"] = t
    ici["data"] = per_node // t
    dcn["stage"] = p
    dcn["data"] = d // (per_node // t)
    microbatches = run["global_batch"] // (d * run["microbatch_size"]) if p > 1 else 0
    return flags, ici, dcn, run["remat"], microbatches


def slices_flags(run):
    return ["--num-slices", str(run["num_slices"])] if run["num_slices"] > 1 else []


def tessel(args, cmd):
    out = subprocess.run([args.tessel] + cmd + ["--json"], cwd=ROOT, capture_output=True,
                         text=True)
    if out.returncode != 0:
        raise RuntimeError(f"tessel {' '.join(cmd)}: {out.stderr.strip()}")
    return json.loads(out.stdout)


def simulate(args, run, flags, ici, dcn, remat, microbatches):
    cmd = ["simulate", run["topology"]] + slices_flags(run) + flags + ["--remat", remat]
    for prefix, sizes in (("ici", ici), ("dcn", dcn)):
        for axis, size in sizes.items():
            if size != 1:
                cmd += [f"--{prefix}-{axis.replace('_', '-')}", str(size)]
    if microbatches:
        cmd += ["--microbatches", str(microbatches)]
    return tessel(args, cmd)


def autoshard(args, run, flags, extra):
    """The best plan of `tessel autoshard` and its full-graph `tessel simulate` prediction."""
    cmd = ["autoshard", run["topology"]] + slices_flags(run) + flags + extra
    if args.budget:
        cmd += ["--budget", str(args.budget)]
    start = time.time()
    result = tessel(args, cmd)
    seconds = time.time() - start
    best = result["best"]
    ici, dcn = dict(zip(AXES, best["ici"])), dict(zip(AXES, best["dcn"]))
    sim = simulate(args, run, flags, ici, dcn, best["remat"], best["microbatches"])
    return {"cmd": "tessel " + " ".join(cmd), "plan": plan_text(ici, dcn, best["remat"],
                                                                 best["microbatches"]),
            "search_step": best["step_time_s"], "step": sim["step_time_s"],
            "memory": sim["memory"]["total_bytes"], "seconds": seconds,
            "complete": result["search"]["complete"],
            "plans": result["search"]["plans_evaluated"]}


def plan_text(ici, dcn, remat, microbatches=0):
    parts = [f"ici {' '.join(f'{a}={s}' for a, s in ici.items() if s != 1) or '-'}"]
    if any(s != 1 for s in dcn.values()):
        parts.append(f"dcn {' '.join(f'{a}={s}' for a, s in dcn.items() if s != 1)}")
    parts.append(remat)
    if microbatches:
        parts.append(f"{microbatches} microbatches")
    return ", ".join(parts)


def evaluate(args, run, base):
    chips = chips_of(run)
    if run.get("framework", "maxtext") == "megatron":
        flags, ici, dcn, remat, microbatches = megatron_plan(run)
    else:
        flags, ici, dcn, remat, microbatches = maxtext_plan(run, base, chips)
    hand = simulate(args, run, flags, ici, dcn, remat, microbatches)
    row = {"run": run, "chips": chips, "hand_plan": plan_text(ici, dcn, remat, microbatches),
           "hand": hand["step_time_s"], "hand_memory": hand["memory"]["total_bytes"],
           "hand_fits": hand["fits"], "hbm": hand["hbm_bytes"]}
    row["auto"] = autoshard(args, run, flags, [])
    row["relaxed"] = None
    if not hand["fits"]:
        # 0.01 GiB above the hand plan's memory, so the hand plan is in the searched space.
        gib = math.ceil(hand["memory"]["total_bytes"] / GIB * 100 + 1) / 100
        row["relaxed"] = autoshard(args, run, flags, ["--hbm-gib", f"{gib:.2f}"])
        row["relaxed"]["gib"] = gib
    bound = row["relaxed"] or row["auto"]
    row["ok"] = bound["step"] <= row["hand"] * (1 + 1e-9)
    return row


def table(rows):
    lines = ["| run (source) | chips | hand-tuned plan | its step (memory) | autoshard plan "
             "| its step (memory) | autoshard / hand | search time |",
             "|---|---:|---|---:|---|---:|---:|---:|"]
    for r in rows:
        run, a, x = r["run"], r["auto"], r["relaxed"]
        source = run.get("recipe_source") or run.get("source") or \
            "https://arxiv.org/abs/2104.04473"
        fit = "" if r["hand_fits"] else f", over {r['hbm'] / GIB:.0f} GiB HBM"
        auto = f"{a['plan']}{'' if a['complete'] else ' (budget: incomplete)'}"
        ratio = f"{a['step'] / r['hand']:.3f}"
        step = f"{a['step']:.3f} s ({a['memory'] / GIB:.1f} GiB)"
        seconds = f"{a['seconds']:.1f} s"
        if x:
            auto += f"; with `--hbm-gib {x['gib']:.2f}`: {x['plan']}"
            step += f"; {x['step']:.3f} s ({x['memory'] / GIB:.1f} GiB)"
            ratio += f"; {x['step'] / r['hand']:.3f}"
            seconds += f"; {x['seconds']:.1f} s"
        lines.append(f"| [{run['id']}]({source}) | {r['chips']} | {r['hand_plan']} | "
                     f"{r['hand']:.3f} s ({r['hand_memory'] / GIB:.1f} GiB{fit}) | {auto} | "
                     f"{step} | {ratio} | {seconds} |")
    better = sum(1 for r in rows if (r["relaxed"] or r["auto"])["step"] < r["hand"] * (1 - 1e-9))
    lines += ["", f"{len(rows)} runs; autoshard (within the hand plan's memory where that is over "
              f"HBM) at most the hand plan on {sum(r['ok'] for r in rows)}, strictly better on "
              f"{better}; the hand plan over Tessel's HBM on "
              f"{sum(not r['hand_fits'] for r in rows)}.", "",
              "The autoshard commands, in table order (the hand plan is the same model flags under "
              "`tessel simulate` with its --ici-* / --dcn-* / --remat / --microbatches):", "",
              "```"]
    for r in rows:
        lines.append(r["auto"]["cmd"])
        if r["relaxed"]:
            lines.append(r["relaxed"]["cmd"])
    lines.append("```")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tessel", default=os.path.join(ROOT, "build", "tools", "tessel"))
    parser.add_argument("--runs", default=os.path.join(ROOT, "tests", "validation",
                                                       "published_runs.json"))
    parser.add_argument("--only", default="", help="comma-separated run ids (default: all)")
    parser.add_argument("--budget", type=float, default=0,
                        help="autoshard --budget S (default: none, a complete search)")
    parser.add_argument("--cache", help="JSON Lines file of finished rows (read and appended)")
    parser.add_argument("--write-doc", help="replace the table between the markers of this file")
    args = parser.parse_args()
    data = json.load(open(args.runs))
    only = set(filter(None, args.only.split(",")))
    binary = os.path.getmtime(args.tessel)
    cached = {}
    if args.cache and os.path.exists(args.cache):
        for line in open(args.cache):
            entry = json.loads(line)
            if entry["binary"] == binary and entry["budget"] == args.budget:
                cached[entry["id"]] = entry["row"]
    rows = []
    skipped = []
    for run in data["runs"]:
        if only and run["id"] not in only:
            continue
        # The tpu-recipes logs (an explicit "model"): their plans use what the search does not
        # range over (custom remat lists, per-kernel splash tiles, MoE dispatch).
        if run.get("framework", "maxtext") == "maxtext" and "model" in run:
            skipped.append(run["id"])
            continue
        row = cached.get(run["id"])
        if row is None:
            row = evaluate(args, run, data["maxtext_base"])
            if args.cache:
                with open(args.cache, "a") as f:
                    f.write(json.dumps({"id": run["id"], "binary": binary,
                                        "budget": args.budget, "row": row}) + "\n")
        row["run"] = run
        rows.append(row)
        bound = row["relaxed"] or row["auto"]
        print(f"{run['id']:34s} hand {row['hand']:8.3f} s{'' if row['hand_fits'] else '*'}  "
              f"autoshard {row['auto']['step']:8.3f} s  bound {bound['step']:8.3f} s "
              f"({(bound['step'] / row['hand'] - 1) * 100:+.1f} %)  "
              f"search {row['auto']['seconds']:.1f} s", file=sys.stderr, flush=True)
    if skipped:
        print(f"not compared: {len(skipped)} tpu-recipes rows ({', '.join(skipped)})",
              file=sys.stderr)
    text = table(rows)
    print(text)
    if args.write_doc:
        doc = open(args.write_doc).read()
        if BEGIN not in doc or END not in doc:
            print(f"{args.write_doc}: no autoshard-published markers", file=sys.stderr)
            return 1
        head, rest = doc.split(BEGIN, 1)
        _, tail = rest.split(END, 1)
        with open(args.write_doc, "w") as f:
            f.write(f"{head}{BEGIN}\n{text}\n{END}{tail}")
    slower = [r["run"]["id"] for r in rows if not r["ok"]]
    if slower:
        print(f"autoshard slower than the hand plan on: {', '.join(slower)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
