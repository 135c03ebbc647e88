#!/usr/bin/env python3
"""What XLA's TPU compiler runs for a MaxText-style Llama step, op class by op class, for checking
the simulator's compute model (docs/simulator.md, "Validation against published runs").

Builds the step of xla_memory_replica.py (same JSON configuration), compiles it ahead of time for
the TPU topology (no TPU needed; jax 0.10.2 with the libtpu 0.0.42 wheel, TPU_LIBRARY_PATH
pointing at its libtpu.so; not part of CI), or reads an optimized HLO text already dumped
(--hlo FILE), and walks the optimized HLO: the entry computation and each while body times its
trip count (the condition's `compare(i, constant(N)), direction=LT`, the scan's counter from 0).
Each top-level op is put in one class:

  matmul      a fusion holding a convolution or dot (XLA:TPU's convolution fusions, also the
              async collective fusions that run a matmul beside an all-gather);
              flops = 2 x |output| x contracted size, from the shapes and dim_labels / dims
  elementwise a loop fusion (or top-level op) of elementwise work (norm scaling, SwiGLU,
              residual adds, the optimizer)
  reduce      a fusion holding a reduce (norm statistics, the loss, gradient sums)
  convert     a fusion or op that only converts (f32 <-> bf16 of weights, gradients)
  copy        copies, transposes, dynamic-(update-)slices and other data movement
  async_copy  copy-start / copy-done (memory-space moves; counted once, at the start)
  collective  all-gather, all-reduce, reduce-scatter, all-to-all, collective-permute, their
              async forms and XLA:TPU's AsyncCollectiveStart / Done (no HBM roofline here:
              the simulator costs them as collectives)
  custom      custom calls: the Pallas flash kernels (tpu_custom_call)

Bytes per op = operand bytes + output bytes (logical shapes, TPU tile padding ignored); a fusion
operand read only through (dynamic-)slices counts the slices, and an in-place
dynamic-update-slice counts the update, as HloCostAnalysis does; an async op (copy-start,
slice-start, dynamic-update-slice-start, ...) is counted once, at its start, as the slice or
update it moves; a matmul fusion that also holds a collective (XLA:TPU's async collective
fusions) counts its matmuls' operands and results only (the collective's buffers are the DMA
engines' work). Per-op roofline = max(flops / (peak x e_dot), bytes / HBM bandwidth), with the
preset's figures (--preset configs/v5e-256.json). Prints one JSON object: per class count,
flops, bytes, roofline seconds, compute seconds and memory-bound seconds (ops whose bytes term
is the larger), for the whole step ("classes"), for each while loop of the entry ("loops") and,
with --layers N (or the configuration's "layers"), per layer ("per_layer": the loops of trip
count N, the scans over the layers, divided by N; XLA may unroll a short scan, then there is
none). With "slices": N in the configuration (several slices over DCN) it also prints
"dcn_transfers": XLA:TPU's cross-slice collectives (Megascale host transfers) per computation,
their bytes, and the compute the schedule puts between each one's start and finish.
docs/simulator.md ("Validation against published runs") has what it showed.

  python3 tests/validation/xla_fusion_census.py --preset configs/v5e-256.json '{"topology":
      "v5e:16x16", "fsdp": 256, "tensor": 1, "batch": 1536, "seq": 2048, "d": 4096,
      "heads": 64, "head_dim": 128, "ffn": 28672, "layers": 2, "vocab": 32000, "remat": "full"}'
"""
import argparse
import json
import math
import re
import sys
from collections import defaultdict

DTYPE_BYTES = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2, "s32": 4,
               "u32": 4, "f32": 4, "s64": 8, "u64": 8, "f64": 8, "f8e4m3fn": 1, "f8e5m2": 1,
               "s4": 1, "u4": 1}
ARRAY = re.compile(r"\b(" + "|".join(DTYPE_BYTES) + r")\[([\d,]*)\]")
FREE = {"parameter", "get-tuple-element", "tuple", "constant", "bitcast", "partition-id",
        "replica-id", "after-all", "opt-barrier", "iota", "add-dependency"}
COLLECTIVE = ("all-gather", "all-reduce", "reduce-scatter", "all-to-all", "collective-permute",
              "async-start", "async-update", "async-done", "send", "recv")
MOVEMENT = {"copy", "transpose", "bitcast", "reshape", "slice", "dynamic-slice",
            "dynamic-update-slice", "concatenate", "pad", "broadcast", "parameter", "constant",
            "get-tuple-element", "tuple", "iota", "reverse", "gather", "scatter"}


def strip_layouts(s):
    """The shape text without its {layout} parts."""
    while True:
        t = re.sub(r"\{[^{}]*\}", "", s)
        if t == s:
            return t
        s = t


def shape_bytes(shape):
    total = 0
    for dtype, dims in ARRAY.findall(strip_layouts(shape)):
        total += DTYPE_BYTES[dtype] * math.prod(int(d) for d in dims.split(",") if d)
    return total


def dims_of(shape):
    m = ARRAY.search(strip_layouts(shape))
    return [int(d) for d in m.group(2).split(",") if d] if m else []


def matching(s, i):
    """Index just past the bracket that closes s[i]."""
    depth, pairs = 0, {"(": ")", "{": "}", "[": "]"}
    opener = s[i]
    for j in range(i, len(s)):
        if s[j] == opener:
            depth += 1
        elif s[j] == pairs[opener]:
            depth -= 1
            if depth == 0:
                return j + 1
    raise ValueError("unbalanced: " + s[i:i + 80])


def parse_instruction(line):
    m = re.match(r"\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*", line)
    if not m:
        return None
    rest = line[m.end():]
    if rest.startswith("("):
        end = matching(rest, 0)
    else:
        end = rest.index(" ")
    shape, rest = rest[:end], rest[end:].lstrip()
    op = re.match(r"([\w\-]+)\(", rest)
    if not op:
        return None
    close = matching(rest, op.end() - 1)
    operands = re.findall(r"%([\w.\-]+)", rest[op.end():close - 1])
    attrs = rest[close:]
    return {"name": m.group(1), "shape": shape, "op": op.group(1), "operands": operands,
            "args": rest[op.end():close - 1].strip(), "attrs": attrs,
            "root": line.lstrip().startswith("ROOT")}


def parse_module(text):
    comps, entry, cur = {}, None, None
    for line in text.splitlines():
        head = re.match(r"(ENTRY\s+)?%([\w.\-]+)\s.*\{\s*$", line)
        if head and not line.startswith(" "):
            cur = head.group(2)
            comps[cur] = []
            if head.group(1):
                entry = cur
            continue
        if line.startswith("}"):
            cur = None
            continue
        if cur is not None:
            ins = parse_instruction(line)
            if ins:
                comps[cur].append(ins)
    return comps, entry


def called(ins, key):
    m = re.search(key + r"=%([\w.\-]+)", ins["attrs"])
    return m.group(1) if m else None


def conv_flops(ins, table):
    out = math.prod(dims_of(ins["shape"]))
    if ins["op"] == "dot":
        lhs = dims_of(table[ins["operands"][0]]["shape"])
        m = re.search(r"lhs_contracting_dims=\{([\d,]*)\}", ins["attrs"])
        k = math.prod(lhs[int(d)] for d in m.group(1).split(",") if d) if m else 1
        return 2 * out * k
    # As HloCostAnalysis: per spatial dim, the (output, kernel) position pairs that land on
    # input (XLA:TPU writes head and batch dims of einsums as padded, reversed windows).
    if re.search(r"(feature|batch)_group_count=(?!1\b)", ins["attrs"]):
        raise ValueError(f"{ins['name']}: grouped convolutions are not counted")
    lhs_l, rhs_l, out_l = re.search(r"dim_labels=(\w+)_(\w+)->(\w+)", ins["attrs"]).groups()
    lhs = dims_of(table[ins["operands"][0]]["shape"])
    rhs = dims_of(table[ins["operands"][1]]["shape"])
    outd = dims_of(ins["shape"])
    window = re.search(r"window=\{([^}]*)\}", ins["attrs"])
    fields = dict(f.split("=") for f in window.group(1).split()) if window else {}
    nsp = sum(ch.isdigit() for ch in rhs_l)

    def field(key, default):
        return [int(v) for v in fields[key].split("x")] if key in fields else [default] * nsp
    pads = [tuple(int(v) for v in p.split("_")) for p in fields["pad"].split("x")] \
        if "pad" in fields else [(0, 0)] * nsp
    stride, ldil, rdil = field("stride", 1), field("lhs_dilate", 1), field("rhs_dilate", 1)
    pairs = 1
    for d in range(nsp):
        size_i = lhs[lhs_l.index(str(d))]
        size_k = rhs[rhs_l.index(str(d))]
        size_o = outd[out_l.index(str(d))]
        span = (size_i - 1) * ldil[d]
        pairs *= sum(1 for o in range(size_o) for k in range(size_k)
                     if 0 <= (p := o * stride[d] + k * rdil[d] - pads[d][0]) <= span
                     and p % ldil[d] == 0)
    batch_out = outd[out_l.index("b")] * outd[out_l.index("f")]
    in_features = rhs[rhs_l.index("i")]
    return 2 * batch_out * in_features * pairs


def walk_fusion(comps, name, seen=None):
    """All instructions of a fused computation, nested fusions and async bodies included."""
    seen = seen if seen is not None else set()
    if name in seen or name not in comps:
        return []
    seen.add(name)
    out = []
    for ins in comps[name]:
        out.append((ins, {i["name"]: i for i in comps[name]}))
        for key in ("calls", "to_apply"):
            sub = called(ins, key)
            if sub and ins["op"] in ("fusion", "custom-call", "async-start", "call"):
                out += walk_fusion(comps, sub, seen)
    return out


def fusion_operand_bytes(comps, fused, operand_shapes):
    """Operand bytes as read: a parameter used only by (dynamic-)slices counts the slices; the
    buffer an in-place dynamic-update-slice root writes into counts nothing."""
    body = comps[fused]
    users = defaultdict(list)
    for ins in body:
        for o in ins["operands"]:
            users[o].append(ins)
    root = next((i for i in body if i["root"]), body[-1])
    pnames = {int(i["args"]): i["name"] for i in body if i["op"] == "parameter"}
    total = 0
    for idx, shape in enumerate(operand_shapes):
        pname = pnames.get(idx)
        if pname is None:
            total += shape_bytes(shape)
            continue
        us = users[pname]
        if root["op"] == "dynamic-update-slice" and root["operands"][0] == pname:
            continue
        if us and all(u["op"] in ("dynamic-slice", "slice") and u["operands"][0] == pname for u in us):
            total += sum(shape_bytes(u["shape"]) for u in us)
        else:
            total += shape_bytes(shape)
    return total


def classify(comps, ins):
    op = ins["op"]
    if op == "custom-call":
        target = re.search(r'custom_call_target="([^"]+)"', ins["attrs"]).group(1)
        if target.startswith("AsyncCollective"):
            return "collective", 0
        if target in ("AllocateBuffer", "AssumeGatherIndicesInBound", "ConcatBitcast"):
            return "free", 0
        return "custom", 0
    if any(op.startswith(c) for c in COLLECTIVE):
        return "collective", 0
    if op.endswith("-done"):
        return "free", 0  # counted at its -start
    if op.endswith("-start"):
        return "async_copy", 0
    if op != "fusion":
        if op in MOVEMENT:
            return "copy", 0
        if op == "convert":
            return "convert", 0
        if op in ("reduce", "sort", "reduce-window"):
            return "reduce", 0
        if op in ("convolution", "dot"):
            return "matmul", None
        return "elementwise", 0
    inner = walk_fusion(comps, called(ins, "calls"))
    ops = {i["op"] for i, _ in inner}
    flops = sum(conv_flops(i, t) for i, t in inner if i["op"] in ("convolution", "dot"))
    if flops:
        return "matmul", flops
    if any(o.startswith(c) for o in ops for c in COLLECTIVE) or any(
            "AsyncCollective" in i["attrs"] for i, _ in inner if i["op"] == "custom-call"):
        return "collective", 0
    if ops <= MOVEMENT | {"convert"} and "convert" in ops:
        return "convert", 0
    if ops <= MOVEMENT:
        return "copy", 0
    if "reduce" in ops:
        return "reduce", 0
    return "elementwise", 0


def op_bytes(comps, ins, table):
    operand_shapes = [table[o]["shape"] for o in ins["operands"] if o in table]
    out = shape_bytes(ins["shape"])
    if ins["op"] == "fusion":
        fused = called(ins, "calls")
        inner = walk_fusion(comps, fused)
        if any(i["op"].startswith(COLLECTIVE) or "AsyncCollective" in i["attrs"] for i, _ in inner):
            # XLA:TPU's async collective fusions pass the collective's buffers through (the
            # gathered operand, the ring's send and receive buffers): the DMA engines move those,
            # costed as collectives; the TensorCore reads and writes the matmul's own tiles.
            return sum(shape_bytes(i["shape"]) + sum(shape_bytes(t[o]["shape"]) for o in i["operands"][:2])
                       for i, t in inner if i["op"] in ("convolution", "dot"))
        body = comps.get(fused, [])
        root = next((i for i in body if i["root"]), None)
        if root is not None and root["op"] == "dynamic-update-slice":
            out = shape_bytes({i["name"]: i for i in body}[root["operands"][1]]["shape"])
        return out + fusion_operand_bytes(comps, fused, operand_shapes)
    if ins["op"] in ("dynamic-update-slice", "dynamic-update-slice-start"):
        return 2 * shape_bytes(operand_shapes[1])
    if ins["op"] == "copy-start":
        return 2 * shape_bytes(operand_shapes[0])
    if ins["op"] in ("slice-start", "dynamic-slice-start"):  # ((operands), slice, context)
        after_operands = strip_layouts(ins["shape"])[1:]
        after_operands = after_operands[matching(after_operands, 0):]
        return 2 * shape_bytes(ARRAY.search(after_operands).group(0))
    if ins["op"] in ("dynamic-slice", "slice"):
        return 2 * out
    return out + sum(shape_bytes(s) for s in operand_shapes)


def trip_count(comps, cond, body):
    """N / step for a loop whose condition is `compare(gte(param, k), constant(N)), direction=LT`
    and whose body adds constant(step) to tuple element k (a counter from 0; XLA:TPU's unrolled
    windowed-einsum loops step by 2)."""
    ctable = {i["name"]: i for i in comps[cond]}
    cmp = next(i for i in comps[cond] if i["root"])
    if cmp["op"] != "compare" or "direction=LT" not in cmp["attrs"]:
        raise ValueError(f"while condition {cond}: not a `counter < N` loop")
    counter, limit = (ctable[o] for o in cmp["operands"])
    if counter["op"] != "get-tuple-element" or limit["op"] != "constant":
        raise ValueError(f"while condition {cond}: cannot read the trip count")
    index = int(re.search(r"index=(\d+)", counter["attrs"]).group(1))
    btable = {i["name"]: i for i in comps[body]}
    update = btable[next(i for i in comps[body] if i["root"])["operands"][index]]
    while update["op"] in ("copy", "bitcast", "convert"):
        update = btable[update["operands"][0]]
    steps = [btable[o]["args"] for o in update["operands"]
             if btable[o]["op"] == "constant"] if update["op"] == "add" else []
    if len(steps) != 1:
        raise ValueError(f"while body {body}: the counter update is not `counter + constant`")
    return -(-int(limit["args"]) // int(steps[0]))


def census(comps, entry, peak, e_dot, bandwidth):
    """Per class totals of the whole step ("classes") and of each while loop of the entry
    computation ("loops": the scan over the layers, the logits' windowed einsums, ...), nested
    loops included, each op times the trip counts around it."""
    acc = defaultdict(lambda: defaultdict(float))
    loops = []

    def visit(name, times, sinks):
        table = {i["name"]: i for i in comps[name]}
        for ins in comps[name]:
            if ins["op"] == "while":
                body = called(ins, "body")
                trips = trip_count(comps, called(ins, "condition"), body)
                if name == entry:
                    loops.append({"body": body, "trip_count": trips,
                                  "classes": defaultdict(lambda: defaultdict(float))})
                    visit(body, times * trips, sinks + [loops[-1]["classes"]])
                else:
                    visit(body, times * trips, sinks)
                continue
            if ins["op"] in FREE:
                continue
            cls, flops = classify(comps, ins)
            if cls == "free":
                continue
            if flops is None:
                flops = conv_flops(ins, table)
            nbytes = 0 if cls == "collective" else op_bytes(comps, ins, table)
            t_c, t_m = flops / (peak * e_dot), nbytes / bandwidth
            for sink in sinks:
                add(sink[cls], times, flops, nbytes, t_c, t_m)
    visit(entry, 1, [acc])
    total = defaultdict(float)
    for a in acc.values():
        for k, v in a.items():
            total[k] += v
    plain = lambda classes: {k: dict(v) for k, v in sorted(classes.items())}
    return {"classes": plain(acc), "total": dict(total),
            "loops": [dict(l, classes=plain(l["classes"])) for l in loops]}


def dcn_transfers(comps, entry, peak, e_dot, bandwidth):
    """XLA:TPU's cross-slice collectives: each is a host transfer to the Megascale runtime, a
    `send` with _xla_megascale_transfer_type and a `recv` of the same rendezvous, finished by
    the recv's `recv-done`. Per computation holding them (the entry, or a while body with its
    trip count): how many, the bytes sent per run, and the roofline seconds of the ops the
    schedule puts between a send and its recv-done (the compute that can hide the transfer;
    the smallest over the computation's transfers)."""
    trips = {}
    for name, instrs in comps.items():
        for ins in instrs:
            if ins["op"] == "while":
                body = called(ins, "body")
                trips[body] = trip_count(comps, called(ins, "condition"), body)
    out = []
    for name, instrs in comps.items():
        table = {i["name"]: i for i in instrs}
        position = {i["name"]: k for k, i in enumerate(instrs)}
        rendezvous = lambda i: (re.search(r'_xla_host_transfer_rendezvous="([^"]+)"', i["attrs"])
                                or [None, None])[1]
        sends = {rendezvous(i): i for i in instrs
                 if i["op"] == "send" and "_xla_megascale_transfer_type" in i["attrs"]}
        if not sends:
            continue
        recvs = {rendezvous(i): i["name"] for i in instrs if i["op"] == "recv"}
        done = {i["operands"][0]: i["name"] for i in instrs if i["op"] == "recv-done"}
        windows, nbytes = [], 0
        for key, send in sends.items():
            nbytes += shape_bytes(table[send["operands"][0]]["shape"])
            finish = done.get(recvs.get(key))
            if finish is None:
                continue
            window = 0.0
            for ins in instrs[position[send["name"]] + 1:position[finish]]:
                if ins["op"] in FREE or ins["op"] == "while":
                    continue
                cls, flops = classify(comps, ins)
                if cls in ("free", "collective"):
                    continue
                if flops is None:
                    flops = conv_flops(ins, table)
                window += max(flops / (peak * e_dot), op_bytes(comps, ins, table) / bandwidth)
            windows.append(window)
        out.append({"computation": name, "trip_count": trips.get(name, 1), "transfers": len(sends),
                    "bytes": nbytes, "min_window_s": min(windows) if windows else None})
    return out


def add(a, times, flops, nbytes, t_c, t_m):
    """Adds one op, run `times` times, to a class's totals."""
    a["count"] += times
    a["flops"] += times * flops
    a["bytes"] += times * nbytes
    a["roofline_s"] += times * max(t_c, t_m)
    a["compute_s"] += times * t_c
    if t_m > t_c:
        a["memory_bound_s"] += times * t_m
        a["memory_bound_count"] += times


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("config", nargs="?", help="xla_memory_replica.py's JSON configuration")
    ap.add_argument("--preset", required=True, help="configs/*.json (peak, HBM bandwidth, e_dot)")
    ap.add_argument("--hlo", help="read this optimized HLO text instead of compiling")
    ap.add_argument("--dump", help="write the optimized HLO text here")
    ap.add_argument("--layers", type=int, help="also print per_layer: the entry's while loops "
                    "with this trip count (the forward and backward scans), divided by it")
    args = ap.parse_args()
    if args.hlo:
        text = open(args.hlo).read()
    else:
        sys.path.insert(0, __file__.rsplit("/", 1)[0])
        import xla_memory_replica
        text = xla_memory_replica.build(json.loads(args.config))[0].compile().as_text()
        if args.dump:
            open(args.dump, "w").write(text)
    spec = json.load(open(args.preset))["device_spec"]
    peak = spec["peak_tflops"]["bf16"] * 1e12
    e_dot = spec.get("efficiency", {}).get("dot", 1.0)
    bandwidth = spec["hbm_bandwidth_gbytes_per_s"] * 1e9
    comps, entry = parse_module(text)
    result = census(comps, entry, peak, e_dot, bandwidth)
    dcn = dcn_transfers(comps, entry, peak, e_dot, bandwidth)
    if dcn:
        result["dcn_transfers"] = dcn
    layers = args.layers or (json.loads(args.config)["layers"] if args.config else None)
    if layers:
        per_layer = defaultdict(lambda: defaultdict(float))
        for loop in result["loops"]:
            if loop["trip_count"] == layers:
                for cls, a in loop["classes"].items():
                    for k, v in a.items():
                        per_layer[cls][k] += v / layers
        result["per_layer"] = {k: dict(v) for k, v in sorted(per_layer.items())}
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
