#!/usr/bin/env python3
"""XLA's own TPU program against Tessel's count, for every single-slice MaxText configuration of
the validation table (docs/simulator.md, "Validation against published runs").

For each distinct one-slice MaxText run of tests/validation/published_runs.json: compiles the step
as the recipe runs it, with 3 layers, ahead of time for the run's TPU topology
(xla_fusion_census.py, which needs jax 0.10.2 and the libtpu 0.0.42 wheel with TPU_LIBRARY_PATH
set; no TPU; not part of CI), and runs `tessel simulate` with the validation row's flags at 3 and
6 layers. Prints one Markdown table row per configuration:

  - per layer, in ms of one device: XLA's matmul fusions at the preset's peak x dot efficiency,
    XLA's memory-bound ops (elementwise, reduce, convert, copy and async-copy fusions at the HBM
    bandwidth), and their sum with Tessel's flash-kernel time (XLA's Pallas kernels are custom
    calls the census costs by bytes only); Tessel's layer (its 6-layer minus 3-layer compute, / 3),
    its matmuls and its other ops;
  - the whole 3-layer step: XLA's roofline (flash as above) over Tessel's compute;
  - the row's validation error and the fraction of XLA's own roofline the published run reached:
    (1 + error) x (XLA / Tessel), Tessel's step being within a few percent of its compute.

  python3 tests/validation/xla_census_table.py [--python /path/to/jax/venv/bin/python] \
      [--tessel build/tools/tessel] [--work DIR]

Per-layer figures come from the census's "per_layer" (the loops of trip count 3: the scans over
the layers, their nested windowed-einsum loops included). --work keeps each compile's JSON and
optimized HLO, and reuses them on a rerun.
"""
import argparse
import importlib.util
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LAYERS = 3


def load_validation():
    spec = importlib.util.spec_from_file_location(
        "validate_simulator", os.path.join(ROOT, "scripts", "validate_simulator.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def topology_name(preset):
    """"v5p:4x4x4" from a one-slice preset: the device generation and the slice's chip grid."""
    generation = preset["device_spec"]["name"].split()[-1]  # "TPU v5p" -> "v5p"
    return generation + ":" + "x".join(str(d) for d in preset["slices"][0]["shape"])


def census_config(run, dims, chips):
    tensor = run["ici"].get("tensor", 1)
    return {"topology": None, "fsdp": chips // tensor, "tensor": tensor,
            "batch": run["per_device_batch_size"] * chips, "seq": run["seq_len"],
            "d": dims["d_model"], "heads": dims["heads"], "head_dim": dims["head_dim"],
            "ffn": dims["ffn"], "layers": LAYERS, "vocab": dims["vocab"], "remat": run["remat"]}


def tessel_json(tessel, cmd, layers):
    args = list(cmd[1:])  # without "tessel"
    args[args.index("--layers") + 1] = str(layers)
    out = subprocess.run([tessel] + args + ["--json"], cwd=ROOT, capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", default=sys.executable,
                        help="a Python with jax and libtpu (TPU_LIBRARY_PATH set)")
    parser.add_argument("--tessel", default=os.path.join(ROOT, "build", "tools", "tessel"))
    parser.add_argument("--work", default=None, help="keep compiles here (and reuse them)")
    args = parser.parse_args()
    v = load_validation()
    data = json.load(open(os.path.join(ROOT, "tests", "validation", "published_runs.json")))
    print("| row | run | error | XLA matmul | XLA memory-bound | XLA layer | Tessel layer "
          "(matmul, other) | XLA / Tessel, layer | XLA / Tessel, 3-layer step | "
          "published / XLA roofline |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    seen = set()
    for index, run in enumerate(data["runs"]):
        if run.get("framework", "maxtext") != "maxtext" or run["num_slices"] != 1:
            continue
        dims = v.maxtext_dims(data["maxtext_base"], run["global_parameter_scale"])
        chips = v.chips_of(run)
        preset = json.load(open(os.path.join(ROOT, run["topology"])))
        cfg = census_config(run, dims, chips)
        cfg["topology"] = topology_name(preset)
        key = json.dumps(cfg, sort_keys=True)
        if key in seen:
            continue
        seen.add(key)
        spec = preset["device_spec"]
        peak = spec["peak_tflops"]["bf16"] * 1e12 * spec["efficiency"].get("dot", 1.0)
        census_file = os.path.join(args.work, f"census_{index}.json") if args.work else None
        if census_file and os.path.exists(census_file):
            census = json.load(open(census_file))
        else:
            cmd = [args.python, os.path.join(ROOT, "tests", "validation", "xla_fusion_census.py"),
                   "--preset", run["topology"], "--layers", str(LAYERS), json.dumps(cfg)]
            if args.work:
                cmd += ["--dump", os.path.join(args.work, f"census_{index}.hlo")]
            out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True)
            census = json.loads(out.stdout)
            if census_file:
                with open(census_file, "w") as f:
                    f.write(out.stdout)
        # The validation row's own command and framework flags, at 3 and 6 layers.
        row_cmd = v.command(run, dims, chips)
        row_cmd += v.framework_flags(data["frameworks"]["maxtext"], row_cmd)
        t3 = tessel_json(args.tessel, row_cmd, LAYERS)
        t6 = tessel_json(args.tessel, row_cmd, 2 * LAYERS)
        layer = (t6["compute_s"] - t3["compute_s"]) / LAYERS
        flash = (t6["attention"]["flash_s"] - t3["attention"]["flash_s"]) / LAYERS
        flash_flops = (t6["attention"]["flash_flops_per_device"] -
                       t3["attention"]["flash_flops_per_device"]) / LAYERS
        matmul = ((t6["flops_per_device"] - t3["flops_per_device"]) / LAYERS - flash_flops) / peak
        other = layer - matmul - flash
        per_layer = census["per_layer"]

        def roofline(cls):
            return per_layer.get(cls, {}).get("roofline_s", 0.0)

        x_matmul = roofline("matmul")
        x_memory = sum(roofline(c) for c in ("elementwise", "reduce", "convert", "copy",
                                              "async_copy"))
        x_layer = x_matmul + x_memory + flash
        custom = census["classes"].get("custom", {}).get("roofline_s", 0.0)
        x_step = census["total"]["roofline_s"] - custom + t3["attention"]["flash_s"]
        step_ratio = x_step / t3["compute_s"]
        # The validation error of this row, from the same computation as validate_simulator.py.
        published_s = v.maxtext_flops_per_chip(dims, run) / (run["published"]["tflops_per_chip"] *
                                                             1e12)
        full = tessel_json(args.tessel, row_cmd, dims["layers"])
        error = (full["step_time_s"] - published_s) / published_s
        print(f"| {index} | {run['id']} | {100 * error:+.1f} % | {1e3 * x_matmul:.1f} | "
              f"{1e3 * x_memory:.1f} | {1e3 * x_layer:.1f} | {1e3 * layer:.1f} "
              f"({1e3 * matmul:.1f}, {1e3 * other:.1f}) | {x_layer / layer:.3f} | "
              f"{step_ratio:.3f} | {(1 + error) * step_ratio:.3f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
