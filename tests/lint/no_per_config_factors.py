#!/usr/bin/env python3
"""The simulator's presets carry no per-configuration factor (docs/simulator.md).

  python3 tests/lint/no_per_config_factors.py ROOT

Checks every JSON file under ROOT/configs (hardware presets, and configs/models/ model files)
and ROOT/tests/validation (the published runs the simulator is validated against):
  - no key anywhere whose name says it tunes a result: one containing "fudge", "calibrat",
    "correction", "adjust", "fitted", "scale_factor", "multiplier" or "efficiency";
  - the one exception: "efficiency" directly under a hardware preset's "device_spec" (fraction
    of peak per op class, a property of the device), and then every preset with the same
    device_spec.name has the same efficiency map (one set per hardware generation, never per
    configuration), and the preset's "source" names each efficiency op class it sets.
Exits 1 naming the file, the JSON path and the rule; 0 when clean.
"""
import json
import os
import sys

SUSPECT = ("fudge", "calibrat", "correction", "adjust", "fitted", "scale_factor", "multiplier",
           "efficiency")


def walk(node, path, problems, file, allowed):
    if isinstance(node, dict):
        for key, value in node.items():
            sub = f"{path}/{key}"
            if any(s in key.lower() for s in SUSPECT) and sub not in allowed:
                problems.append(f"{file}: {sub}: a key that tunes a result (per-config factor)")
            walk(value, sub, problems, file, allowed)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            walk(value, f"{path}/{i}", problems, file, allowed)


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    problems = []
    by_device = {}
    files = []
    for top in ("configs", os.path.join("tests", "validation")):
        for dirpath, _, names in os.walk(os.path.join(root, top)):
            files += [os.path.join(dirpath, n) for n in sorted(names) if n.endswith(".json")]
    for file in sorted(files):
        rel = os.path.relpath(file, root)
        try:
            data = json.load(open(file))
        except (OSError, ValueError) as e:
            problems.append(f"{rel}: cannot read: {e}")
            continue
        allowed = set()
        spec = data.get("device_spec") if isinstance(data, dict) else None
        is_preset = rel.startswith("configs") and "models" not in rel.split(os.sep)
        if is_preset and isinstance(spec, dict) and "efficiency" in spec:
            allowed.add("/device_spec/efficiency")
            eff = spec["efficiency"]
            by_device.setdefault(spec.get("name", "?"), []).append((rel, eff))
            source = " ".join(data.get("source", []))
            for op_class in eff:
                if f"efficiency {op_class}" not in source:
                    problems.append(f"{rel}: /device_spec/efficiency/{op_class}: no source line "
                                    f"names \"efficiency {op_class}\"")
        walk(data, "", problems, rel, allowed)
    for device, entries in sorted(by_device.items()):
        first_file, first = entries[0]
        for file, eff in entries[1:]:
            if eff != first:
                problems.append(f"{file}: /device_spec/efficiency {eff} differs from {first_file} "
                                f"{first} for the same device \"{device}\" (one set per generation)")
    for p in problems:
        print(p)
    if problems:
        return 1
    print(f"no_per_config_factors: {len(files)} files checked, no per-config factor")
    return 0


if __name__ == "__main__":
    sys.exit(main())
