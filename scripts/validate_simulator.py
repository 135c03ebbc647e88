#!/usr/bin/env python3
"""Reruns the simulator validation table: every published run of
tests/validation/published_runs.json through `tessel simulate`, against its published throughput.

  python3 scripts/validate_simulator.py [--tessel build/tools/tessel] [--write-doc docs/simulator.md]

Prints the table (Markdown) and the median |error| on all runs and on the held-out third (every
third run in file order: index % 3 == 2, chosen before any run was simulated). With --write-doc
the table replaces the text between the "validation-table" markers of the doc.

Published step time: MaxText reports model TFLOP/s per chip, from its own flop count as it was
when the tables were measured (the v5e table in MaxText/configs/largest_job/README.md of November
2023, before MaxText PR 644 of May 2024 changed the count; the v5p table taken to be of the same
time, its exact date not found: docs/simulator.md): PaLM's Appendix B (arXiv 2204.02311),
6 x num_model_parameters x tokens plus causal attention, 12 * heads * layers * head_dim * S^2 *
b / 2 (MaxText max_utils.calculate_training_tflops, later
maxtext_utils.calculate_tflops_training_per_device; the review of MaxText PR 537, March 2024,
notes that MaxText counts attention causally), where num_model_parameters counts every parameter
of the model: the token embedding and the untied logits projection (base.yml
logits_via_embedding: False), the attention and MLP kernels and the norm scales. The published
step time is that count for one chip's batch divided by the published TFLOP/s per chip;
error = (Tessel's step time - published) / published.

Megatron-LM rows ("framework": "megatron"): the published per-GPU TFLOP/s of Narayanan et al. 2021
(arXiv 2104.04473) use their equation (3), which counts the recompute of full activation
recomputation: F = 96 B s l h^2 (1 + s/(6h) + V/(16 l h)) per iteration; the published step time
is F / (GPUs x TFLOP/s per GPU). The median is also given per framework.

Framework properties: the "frameworks" entry of the runs file gives each framework's
collective overlap (`--overlap`: MaxText's async collectives; Megatron-LM 2021 runs its
collectives on the compute stream), kernel fusion (`--fusion`: MaxText (jax.jit) xla,
Megatron-LM (PyTorch eager with its hand-fused kernels) eager), whether remat replays the whole
layer forward (`--remat-replay`: Megatron's CheckpointFunction does, JAX's remat does not), the
attention dropout (`--attention-dropout`: Megatron's default 0.1, MaxText's 0), how its flash
kernel runs (`--flash-block`, `--flash-split-backward`: MaxText's TPU kernels) and how pipeline
stages exchange activations (`--blocking-p2p`, `--scatter-gather-p2p`: Megatron's 2021
p2p_communication), the same for all of its runs, each with its source. The interleaved schedule of a run (its script's
--num-layers-per-virtual-pipeline-stage) is `--layers-per-virtual-stage`.
Megatron rows without pipeline stages accumulate gradients over global batch / (data x
micro-batch size) microbatches (`--microbatches`).
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BEGIN = "<!-- validation-table: begin (scripts/validate_simulator.py --write-doc) -->"
END = "<!-- validation-table: end -->"


def maxtext_dims(base, scale):
    """MaxText pyconfig.get_individual_scales applied to base.yml's model."""
    log2 = int(math.log2(scale))
    if 2**log2 != scale:
        raise ValueError(f"global_parameter_scale {scale} is not a power of 2")
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


def maxtext_flops_per_chip(dims, run):
    """MaxText's model flops for one chip's batch as the published tables counted them (see the
    module doc): 6 x parameters x tokens, plus causal attention."""
    b, s = run["per_device_batch_size"], run["seq_len"]
    d, h, hd, f = dims["d_model"], dims["heads"], dims["head_dim"], dims["ffn"]
    layers, vocab = dims["layers"], dims["vocab"]
    # Per layer: query, key, value and output kernels (kv heads = heads), the gated MLP's three
    # matrices, two RMSNorm scales; then the token embedding, the logits projection and the
    # final norm's scale.
    per_layer = 4 * d * h * hd + 3 * d * f + 2 * d
    parameters = layers * per_layer + 2 * vocab * d + d
    attention = 12 * h * layers * hd * s * s * b / 2
    return 6 * parameters * s * b + attention


def command(run, dims, chips):
    cmd = ["tessel", "simulate", run["topology"]]
    if run["num_slices"] > 1:
        cmd += ["--num-slices", str(run["num_slices"])]
    cmd += ["--model", dims.get("arch", "llama"), "--layers", str(dims["layers"]),
            "--d-model", str(dims["d_model"]), "--heads", str(dims["heads"])]
    if "kv_heads" in dims:
        cmd += ["--kv-heads", str(dims["kv_heads"])]
    # The model file's logits_via_embedding: True (GPT-3).
    if dims.get("tie_embeddings"):
        cmd += ["--tie-embeddings"]
    # Mixture of experts (MaxText num_experts, num_experts_per_tok, capacity_factor).
    if dims.get("experts"):
        cmd += ["--experts", str(dims["experts"]), "--top-k", str(dims["top_k"]),
                "--capacity-factor", str(dims["capacity_factor"])]
    cmd += ["--head-dim", str(dims["head_dim"]),
            "--ffn", str(dims["ffn"]), "--vocab", str(dims["vocab"]),
            "--seq-len", str(run["seq_len"]),
            "--batch", str(run["per_device_batch_size"] * chips),
            "--remat", run["remat"]]
    # remat_policy custom: the recipe's names set to "device" / "offload".
    for key, flag in (("remat_device", "--remat-device"), ("remat_offload", "--remat-offload")):
        if run.get(key):
            cmd += [flag, ",".join(run[key])]
    if run.get("param_dtype"):
        cmd += ["--param-dtype", run["param_dtype"]]
    # MaxText's MoE with megablox false: the dense dropping path's einsum dispatch.
    if run.get("moe_dispatch"):
        cmd += ["--moe-dispatch", run["moe_dispatch"]]
    # MaxText quantization: int8 (AQT): every matmul at the int8 peak.
    if run.get("matmul_dtype"):
        cmd += ["--matmul-dtype", run["matmul_dtype"]]
    cmd += ["--attention", run["attention"]]
    for prefix in ("ici", "dcn"):
        for axis, size in run.get(prefix, {}).items():
            cmd += [f"--{prefix}-{axis.replace('_', '-')}", str(size)]
    # MaxText's base.yml maps activation_embed to the tensor axis (logical_axis_rules): the
    # residual stream is split over it, as Megatron's sequence parallelism (memory only).
    cmd += ["--sequence-parallel"]
    return cmd


def megatron_flops_per_gpu(run):
    m = run["model"]
    b, s, l, h, v = run["global_batch"], m["seq_len"], m["layers"], m["d_model"], m["vocab"]
    total = 96 * b * s * l * h * h * (1 + s / (6 * h) + v / (16 * l * h))
    return total / chips_of(run)


def megatron_command(run):
    """Megatron's (t, p, d) on N DGX nodes: tensor inside a node, the rest of the node data
    parallel, pipeline stages and data replicas across nodes (as Megatron orders its groups)."""
    m, t, p, d = run["model"], run["tensor"], run["pipeline"], run["data"]
    per_node = 8
    cmd = ["tessel", "simulate", run["topology"], "--num-slices", str(run["num_slices"]),
           "--model", m["arch"], "--layers", str(m["layers"]), "--d-model", str(m["d_model"]),
           "--heads", str(m["heads"]), "--vocab", str(m["vocab"]), "--seq-len", str(m["seq_len"]),
           "--batch", str(run["global_batch"]), "--remat", run["remat"],
           "--attention", run["attention"], "--ici-tensor", str(t)]
    if per_node // t > 1:
        cmd += ["--ici-data", str(per_node // t)]
    # Microbatches of --micro-batch-size per data-parallel rank: the pipeline's, or without
    # stages gradient accumulation (Megatron's forward_backward_no_pipelining).
    microbatches = run["global_batch"] // (d * run["microbatch_size"])
    if p > 1:
        cmd += ["--dcn-stage", str(p), "--microbatches", str(microbatches)]
        if run.get("layers_per_virtual_stage"):
            cmd += ["--layers-per-virtual-stage", str(run["layers_per_virtual_stage"])]
    elif microbatches > 1:
        cmd += ["--microbatches", str(microbatches)]
    dcn_data = d // (per_node // t)
    if dcn_data > 1:
        cmd += ["--dcn-data", str(dcn_data)]
    return cmd


def framework_flags(fw, cmd, run):
    """The flags of framework entry `fw` (the runs file's "frameworks") for a run whose command
    so far is `cmd`: how the framework runs every one of its steps, the same for all its runs.
    A run whose recipe sets the flash kernel's tiles (MaxText's sa_block_* and
    sa_use_fused_bwd_kernel; its "flash_source" names them) uses its own."""
    fw = dict(fw)
    for key in ("flash_block", "flash_split_backward"):
        if key in run:
            fw[key] = run[key]
    if "flash_blocks" in run:
        fw["flash_block"] = 0
    flags = []
    # Collectives overlapping compute (MaxText: XLA's async collectives) or in order.
    if fw.get("overlap"):
        flags += ["--overlap"]
    if fw["fusion"] != "xla":
        flags += ["--fusion", fw["fusion"]]
    if fw.get("remat_replay"):
        flags += ["--remat-replay"]
    if fw.get("attention_dropout", 0) > 0:
        flags += ["--attention-dropout", str(fw["attention_dropout"])]
    # How the framework's flash kernel tiles the mask and splits its backward.
    if "flash" in cmd:
        if fw.get("flash_block", 0) > 0:
            flags += ["--flash-block", str(fw["flash_block"])]
        if run.get("flash_blocks"):
            flags += ["--flash-blocks", ",".join(str(b) for b in run["flash_blocks"])]
        if fw.get("flash_split_backward"):
            flags += ["--flash-split-backward"]
    # Stage-to-stage transfers as the framework runs them (pipelined rows only).
    if "--dcn-stage" in cmd or "--ici-stage" in cmd:
        if fw.get("blocking_p2p"):
            flags += ["--blocking-p2p"]
        if fw.get("scatter_gather_p2p"):
            flags += ["--scatter-gather-p2p"]
    return flags


def chips_of(run):
    topo = json.load(open(os.path.join(ROOT, run["topology"])))
    per_slice = 1
    for d in topo["slices"][0]["shape"]:
        per_slice *= d
    return per_slice * run["num_slices"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tessel", default=os.path.join(ROOT, "build", "tools", "tessel"))
    parser.add_argument("--runs", default=os.path.join(ROOT, "tests", "validation",
                                                       "published_runs.json"))
    parser.add_argument("--write-doc", help="replace the table in this Markdown file")
    args = parser.parse_args()
    data = json.load(open(args.runs))
    rows, errors, held_errors, by_framework, by_device = [], [], [], {}, {}
    for index, run in enumerate(data["runs"]):
        held_out = index % 3 == 2
        framework = run.get("framework", "maxtext")
        if framework == "megatron":
            cmd = megatron_command(run)
            published_flops = megatron_flops_per_gpu(run)
            published_rate = run["published"]["tflops_per_gpu"]
        elif "model" in run:
            # A recipe's logged step ("completed step: N, seconds: S, ..."): the step time itself.
            cmd = command(run, run["model"], chips_of(run))
            published_rate = run["published"]["tflops_per_chip"]
            published_flops = run["published"]["step_seconds"] * published_rate * 1e12
        else:
            dims = maxtext_dims(data["maxtext_base"], run["global_parameter_scale"])
            cmd = command(run, dims, chips_of(run))
            published_flops = maxtext_flops_per_chip(dims, run)
            published_rate = run["published"]["tflops_per_chip"]
        # Which ops share a kernel, how remat recomputes, the attention dropout: properties of
        # the framework (the same for all its runs).
        cmd += framework_flags(data["frameworks"][framework], cmd, run)
        start = time.time()
        out = subprocess.run([args.tessel] + cmd[1:] + ["--json"], cwd=ROOT, capture_output=True,
                             text=True)
        wall = time.time() - start
        if out.returncode != 0:
            print(f"{run['id']}: tessel failed ({out.returncode}): {out.stderr.strip()}",
                  file=sys.stderr)
            return 1
        report = json.loads(out.stdout)
        published_s = published_flops / (published_rate * 1e12)
        predicted_s = report["step_time_s"]
        error = (predicted_s - published_s) / published_s
        errors.append(abs(error))
        if held_out:
            held_errors.append(abs(error))
        by_framework.setdefault(framework, ([], []))[1 if held_out else 0].append(abs(error))
        device = json.load(open(os.path.join(ROOT, run["topology"])))["device_spec"]["name"]
        by_device.setdefault(device, []).append(error)
        rows.append((run, held_out, " ".join(cmd), predicted_s, published_s, error,
                     report["fits"], wall, published_rate))
        print(f"{run['id']:34s} {'held-out' if held_out else '        '} "
              f"tessel {predicted_s:8.3f} s  published {published_s:8.3f} s  "
              f"error {100 * error:+6.1f} %  ({wall:.1f} s)", file=sys.stderr)
    lines = [
        "| # | run (source) | chips | Tessel step | published step (TFLOP/s per chip) | error | fits | held out |",
        "|---|---|---:|---:|---:|---:|---|---|",
    ]
    for i, (run, held, cmd, pred, pub, err, fits, _, rate) in enumerate(rows):
        lines.append(
            f"| {i} | [{run['id']}]({run['source']}) | {chips_of(run)} | {pred:.3f} s | "
            f"{pub:.3f} s ({rate}) | {100 * err:+.1f} % | "
            f"{'yes' if fits else 'no'} | {'yes' if held else ''} |")
    lines.append("")
    lines.append(f"Median |error|: {100 * statistics.median(errors):.1f} % on all {len(errors)} "
                 f"runs; {100 * statistics.median(held_errors):.1f} % on the "
                 f"{len(held_errors)} held out. Within 10 %: "
                 f"{sum(e <= 0.10 for e in errors)} of {len(errors)}.")
    for framework, (dev, held) in sorted(by_framework.items()):
        both = dev + held
        lines.append("")
        lines.append(f"{framework}: median |error| {100 * statistics.median(both):.1f} % on "
                     f"{len(both)} runs; {100 * statistics.median(held):.1f} % on the {len(held)} "
                     f"held out. Within 10 %: {sum(e <= 0.10 for e in both)} of {len(both)}.")
    lines.append("")
    lines.append("By device: " + "; ".join(
        f"{device} {100 * statistics.median(abs(e) for e in errs):.1f} % on {len(errs)} runs "
        f"({100 * min(errs):+.1f} .. {100 * max(errs):+.1f} %)"
        for device, errs in sorted(by_device.items())) + ".")
    lines.append("")
    lines.append("The commands, in table order (run from the repository root):")
    lines.append("")
    lines.append("```")
    for i, (_, _, cmd, *_rest) in enumerate(rows):
        lines.append(f"# {i}\n{cmd}")
    lines.append("```")
    table = "\n".join(lines)
    print(table)
    if args.write_doc:
        doc = open(args.write_doc).read()
        if BEGIN not in doc or END not in doc:
            print(f"{args.write_doc}: no validation-table markers", file=sys.stderr)
            return 1
        head, rest = doc.split(BEGIN, 1)
        _, tail = rest.split(END, 1)
        open(args.write_doc, "w").write(head + BEGIN + "\n" + table + "\n" + END + tail)
    return 0


if __name__ == "__main__":
    sys.exit(main())
