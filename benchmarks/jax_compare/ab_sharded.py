"""A/B of 8-device `tessel run` variants (layouts, topologies, environment, binaries), interleaved.

Each round runs every variant once: a run of 3 steps and one of 3 + STEPS steps of the
Fashion-MNIST MLP (`--lr-schedule constant`), so start-up, the first (compiling) step and the
evaluation cancel in the difference. Prints per round and variant the wall ms per step, the CPU
ms per step of every process of the run (getrusage of the waited children, the same
difference), the share of idle CPU of the machine over the pair of runs (/proc/stat: on a
shared machine, 0 means other work took every core) and the loss; then per variant the median
and the minimum over the rounds. Development only, not part of CI.

  python3 benchmarks/jax_compare/ab_sharded.py ROUNDS STEPS OPTIMIZER BATCH -- VARIANT...

OPTIMIZER `gpt` runs the GPT example's step instead (`--example gpt`, the flags of
gpt_compare.py: 2 layers, d_model 128, seq_len 64, learned positions, GELU, AdamW; BATCH
sequences per step; mesh axes data,fsdp,tensor, e.g. ICI 1,2,2 and DCN 2,1,1).

VARIANT is NAME|CONFIG|ICI_MESH_SHAPE|DCN_MESH_SHAPE[|VAR=VALUE...]; VAR=VALUE entries go to
the run's environment, BIN=PATH picks another tessel binary (default build/tools/tessel), e.g.

  python3 benchmarks/jax_compare/ab_sharded.py 4 30 sgd 512 -- \\
    "4h|configs/two_slices_2x2hosts.json|2,2|2,1" \\
    "4h-slots0|configs/two_slices_2x2hosts.json|2,2|2,1|TESSEL_COMPUTE_SLOTS=0" \\
    "1h-cpu|configs/cpu_one_host_8dev.json|4,2|1,1"
  python3 benchmarks/jax_compare/ab_sharded.py 4 30 gpt 16 -- \\
    "4h-cpu|configs/cpu_2x2hosts.json|1,2,2|2,1,1" \\
    "4h-cpu-uncombined|configs/cpu_2x2hosts.json|1,2,2|2,1,1|TESSEL_COMBINE_ALL_REDUCE_BYTES=0"
"""

GPT_FLAGS = ["--seq-len", "64", "--position", "learned", "--mlp", "gelu", "--eval-every", "0",
             "--generate", "0", "--axis-names", "data,fsdp,tensor"]

import json
import os
import statistics
import subprocess
import sys


def cpu_counters():
    with open("/proc/stat") as f:
        return [int(x) for x in f.readline().split()[1:]]


def run(binary, config, ici, dcn, env, optimizer, batch, steps):
    """(train_seconds, CPU seconds of the run's processes, loss) of one run."""
    if optimizer == "gpt":
        cmd = [binary, "run", config, "--example", "gpt", "--json", "--steps", str(steps),
               "--log-every", str(steps), "--batch", batch, "--ici-mesh-shape", ici,
               "--dcn-mesh-shape", dcn] + GPT_FLAGS
    else:
        cmd = [binary, "run", config, "--example", "fashion-mnist-mlp", "--json", "--epochs", "1",
               "--steps", str(steps), "--batch-size", batch, "--optimizer", optimizer,
               "--lr-schedule", "constant", "--ici-mesh-shape", ici, "--dcn-mesh-shape", dcn,
               "--axis-names", "data,model"]
    before = os.times()
    out = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, check=True, text=True).stdout
    after = os.times()
    cpu = (after.children_user + after.children_system) - (
        before.children_user + before.children_system)
    if optimizer == "gpt":
        summary = json.loads(out.strip().splitlines()[-1])["summary"]
        return summary["train_seconds"], cpu, summary["final_train_loss"]
    epoch = [r for r in json.loads(out)["records"] if "epoch" in r][-1]
    return epoch["train_seconds"], cpu, epoch["loss"]


def main():
    if len(sys.argv) < 7 or sys.argv[5] != "--":
        sys.exit(__doc__)
    rounds, steps, optimizer, batch = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    variants = []
    for text in sys.argv[6:]:
        name, config, ici, dcn, *settings = text.split("|")
        env, binary = dict(os.environ), "build/tools/tessel"
        for setting in filter(None, settings):
            key, _, value = setting.partition("=")
            if key == "BIN":
                binary = value
            else:
                env[key] = value
        variants.append((name, binary, config, ici, dcn, env))
    results = {v[0]: [] for v in variants}
    for r in range(rounds):
        for name, binary, config, ici, dcn, env in variants:
            start = cpu_counters()
            short_s, short_cpu, _ = run(binary, config, ici, dcn, env, optimizer, batch, 3)
            long_s, long_cpu, loss = run(binary, config, ici, dcn, env, optimizer, batch,
                                         steps + 3)
            delta = [b - a for a, b in zip(start, cpu_counters())]
            idle = (delta[3] + delta[4]) / max(1, sum(delta))
            ms = 1e3 * (long_s - short_s) / steps
            cpu_ms = 1e3 * (long_cpu - short_cpu) / steps
            results[name].append((ms, cpu_ms))
            with open("/proc/loadavg") as f:
                load = f.read().split()[0]
            print(f"round {r} {name:14s} ms/step {ms:7.1f}  cpu ms/step {cpu_ms:7.1f}  "
                  f"idle {idle:.2f}  loss {loss:.6f}  load {load}", flush=True)
    for name, xs in results.items():
        print(f"{name:14s} ms/step median {statistics.median(x[0] for x in xs):7.1f} "
              f"min {min(x[0] for x in xs):7.1f}  cpu ms/step median "
              f"{statistics.median(x[1] for x in xs):7.1f}  all {[round(x[0], 1) for x in xs]}")


if __name__ == "__main__":
    main()
