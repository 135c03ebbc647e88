"""Splits the training step of a sharded `tessel run --trace` into compute, collectives and host.

Reads the Chrome-trace JSON that `tessel run ... --trace FILE` writes (mesh/runtime: one
"execute" event per device and graph run, one "collective" event per collective call, both in
wall microseconds), the number of timed steps at the end of the run and their wall milliseconds
per step (run.sh takes it from the difference of two runs), and prints one JSON object with
milliseconds per step:

  step_ms         wall time of a training step (as given)
  device_ms       a device's run of the step graph (mean over devices and steps)
  collectives_ms  of device_ms: time inside collectives (waiting for peers included)
  compute_ms      device_ms - collectives_ms: the executor's kernels
  host_ms         step_ms - device_ms: tracing, cache lookup, argument passing, data loading,
                  reading back the loss

The step graph is the graph run most often (run.sh's long run takes STEPS + 3 steps; the first
step runs a graph of its own, the evaluation a fixed 10 chunks per device); its name is printed.

  python3 benchmarks/jax_compare/trace_split.py TRACE.json STEPS STEP_MS
"""

import collections
import json
import sys


def main():
    trace_path, steps, step_ms = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    with open(trace_path) as f:
        trace = json.load(f)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    runs = collections.defaultdict(list)  # graph name -> [(device, start, end)]
    collectives = collections.defaultdict(list)  # device -> [(start, end)]
    for e in events:
        if e.get("ph") != "X":
            continue
        device = (e["pid"], e["tid"])
        span = (e["ts"], e["ts"] + e["dur"])
        if e.get("cat") == "execute":
            runs[e["name"]].append((device, *span))
        elif e.get("cat") == "collective":
            collectives[device].append(span)
    if not runs:
        sys.exit(f"{trace_path}: no execute events (was the run sharded?)")
    name = max(runs, key=lambda n: len(runs[n]))
    step_runs = runs[name]
    # The timed steps: the last `steps` runs of the step graph on each device.
    per_device = collections.defaultdict(list)
    for device, start, end in sorted(step_runs, key=lambda r: r[1]):
        per_device[device].append((start, end))
    device_us = collective_us = 0.0
    count = 0
    for device, spans in per_device.items():
        for start, end in spans[-steps:]:
            device_us += end - start
            collective_us += sum(min(ce, end) - max(cs, start)
                                 for cs, ce in collectives[device] if cs < end and ce > start)
            count += 1
    device_ms = device_us / count / 1e3
    coll_ms = collective_us / count / 1e3
    print(json.dumps({"graph": name, "devices": len(per_device), "steps": steps,
                      "step_ms": round(step_ms, 2), "device_ms": round(device_ms, 2),
                      "collectives_ms": round(coll_ms, 2),
                      "compute_ms": round(device_ms - coll_ms, 2),
                      "host_ms": round(step_ms - device_ms, 2)}))


if __name__ == "__main__":
    main()
