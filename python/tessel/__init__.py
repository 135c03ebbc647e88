"""Tessel from Python: meshes and shardings, HLO sharding propagation and SPMD partitioning,
numerical verification, and pod simulation.

A thin layer over the C++ libraries (the extension ``tessel._tessel``) that the ``tessel`` CLI
uses: every result here is the one ``tessel shard / propagate / partition / verify / simulate``
computes. Errors in the input (HLO text that does not parse, a partition spec naming an unknown
axis, a mesh that does not fit the topology) raise ``ValueError`` with the C++ message; a missing
file raises ``FileNotFoundError``; an unsupported op raises ``NotImplementedError``.

Example (the fixture is an 8-device module lowered by JAX)::

    import tessel
    hlo = open("tests/fixtures/jax/dot_contracting_sharded.hlo").read()
    part = tessel.partition(hlo)                   # 8 partitions, from the shardings
    part.collectives["all-gather"].count
    report = tessel.simulate(hlo, tessel.Topology.preset("dgx_h100"))
    report.step_seconds                            # float, seconds per step
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Optional, Sequence, Union

from . import _tessel
from ._tessel import (
    CollectiveCount,
    DeviceClass,
    HybridMesh,
    Mesh,
    OpEntry,
    OutputCheck,
    PartitionResult,
    Shard,
    ShardResult,
    SimulationReport,
    Topology,
    VerifyReport,
)

__version__ = "0.1.0"

__all__ = [
    "CollectiveCount", "DeviceClass", "HybridMesh", "Mesh", "OpEntry", "OutputCheck",
    "PartitionResult", "Shard", "ShardResult", "SimulationReport", "Topology", "VerifyReport",
    "autoshard", "partition", "preset_names", "propagate", "shard", "simulate", "simulate_model",
    "verify",
    "verify_inputs",
]

_CONFIGS = Path(__file__).resolve().parent / "configs"


def preset_names() -> list:
    """Names of the topology presets shipped with the package (configs/*.json), sorted."""
    return sorted(p.stem for p in _CONFIGS.glob("*.json"))


def _preset(name: str) -> Topology:
    path = _CONFIGS / f"{name}.json"
    # A preset is a name of preset_names(), not a path ("../configs/v4-8" reached outside).
    if name not in preset_names():
        raise ValueError(f"unknown topology preset {name!r}; known: {', '.join(preset_names())}")
    return Topology.load(str(path))


Topology.preset = staticmethod(_preset)  # type: ignore[attr-defined]

HloLike = Union[str, os.PathLike]


def _hlo_text(hlo: HloLike) -> str:
    """HLO text from text or a path: a PathLike, or a str without a newline naming a file."""
    if isinstance(hlo, os.PathLike):
        return Path(hlo).read_text()
    if isinstance(hlo, str) and "\n" not in hlo and hlo.endswith((".hlo", ".txt")):
        return Path(hlo).read_text()
    if not isinstance(hlo, str):
        raise TypeError(f"expected HLO text or a path, got {type(hlo).__name__}")
    return hlo


def _topology(topology: Union[Topology, str, os.PathLike]) -> Topology:
    if isinstance(topology, Topology):
        return topology
    text = os.fspath(topology)
    if text.endswith(".json") or os.sep in text:
        return Topology.load(text)
    return _preset(text)


def shard(shape: Sequence[int], mesh: Mesh, partition_spec) -> ShardResult:
    """Shards a global array of ``shape`` over ``mesh`` as torch_xla's ``mark_sharding`` does.

    partition_spec: one entry per dim of ``shape``: None (replicated), an axis index or name,
    or a tuple of them (major to minor); or the same as a string, e.g. ``"(x,y),None"``.
    Returns the XLA sharding string and, per device, the [start, limit) index range of its
    piece along each dim (``Shard.index``); ``local_shape`` is one device's buffer (padded, so
    ceil(dim / tiles) per tiled dim).
    """
    return _tessel.shard(list(shape), mesh, partition_spec)


def propagate(hlo: HloLike, num_partitions: Optional[int] = None) -> str:
    """The module with every instruction's propagated sharding, as HLO text.

    num_partitions: device count; default: the largest device id in the module's shardings + 1.
    """
    return _tessel.propagate(_hlo_text(hlo), num_partitions)


def partition(hlo: HloLike, num_partitions: Optional[int] = None) -> PartitionResult:
    """Partitions a module with sharding annotations into the per-device SPMD program.

    Returns ``PartitionResult``: ``hlo_text`` (local shapes, collectives with replica groups in
    global device ids), ``collectives`` (kind -> count and bytes of each device's results),
    ``parameter_shardings`` / ``output_shardings`` (XLA sharding strings).
    """
    return _tessel.partition(_hlo_text(hlo), num_partitions)


def verify(hlo: HloLike, num_partitions: Optional[int] = None, seed: int = 0,
           rtol: Optional[float] = None, atol: Optional[float] = None,
           timeout_seconds: float = 60.0) -> VerifyReport:
    """Runs the module unpartitioned on one device and partitioned on ``num_partitions``
    in-process devices with the same random inputs (``verify_inputs(hlo, seed)``) and compares
    every output (partitioner/verify.h). ``report.ok`` is True when every output is within
    tolerance; ``report.outputs[i]`` holds the largest absolute / relative error of output i.
    rtol / atol default per dtype (f32: 1e-5 / 1e-5 scaled by max |expected|; see verify.h).
    timeout_seconds: how long a device waits for its peers in a collective, in (0, 1e6].
    Raises ValueError for a module that does not parse or partition, a negative or NaN rtol /
    atol, or a timeout_seconds outside its range. Each run is bounded to 10 minutes (a while
    loop that never ends fails, naming it); Ctrl-C stops the runs and raises KeyboardInterrupt.
    """
    return _tessel.verify(_hlo_text(hlo), num_partitions, seed, rtol, atol, timeout_seconds)


def verify_inputs(hlo: HloLike, seed: int = 0) -> list:
    """The random global inputs ``verify`` feeds the module for ``seed``: one NumPy array per
    entry parameter, in parameter order, with the parameter's global shape and dtype."""
    return _tessel.verify_inputs(_hlo_text(hlo), seed)


def simulate(hlo: HloLike, topology: Union[Topology, str, os.PathLike], *, overlap: bool = False,
             trace_path: Optional[Union[str, os.PathLike]] = None, top_k: int = 10,
             matmul_dtype: Optional[str] = None,
             assume_trip_count: Optional[int] = None) -> SimulationReport:
    """Partitions the module on ``topology.num_devices`` devices and simulates one step on that
    pod (``tessel simulate CONFIG --hlo FILE``).

    topology: a Topology, a path to a topology JSON, or a preset name (``preset_names()``).
    overlap: report the overlapped schedule (collectives beside compute) as ``step_seconds``.
    trace_path: also write a Chrome trace (chrome://tracing, Perfetto) of the step there.
    matmul_dtype: device-spec dtype whose peak every dot runs at (e.g. "s8", "f8e4m3fn").
    assume_trip_count: how many times a while loop whose trip count is not known statically runs
        (``--assume-trip-count``); without it such a loop is a ValueError naming it.
    Returns ``SimulationReport``; times in seconds (float), bytes as int.
    """
    trace = os.fspath(trace_path) if trace_path is not None else None
    return _tessel.simulate_hlo(_hlo_text(hlo), _topology(topology), overlap, trace, top_k,
                                matmul_dtype, assume_trip_count)


def simulate_model(model: Union[str, os.PathLike, dict], topology: Union[Topology, str, os.PathLike],
                   *, ici_mesh_shape: Optional[Sequence[int]] = None,
                   dcn_mesh_shape: Optional[Sequence[int]] = None,
                   axis_names: Sequence[str] = ("data", "fsdp", "tensor"),
                   recipe: str = "fsdp_tp", batch: Optional[int] = None, overlap: bool = False,
                   top_k: int = 10) -> SimulationReport:
    """Simulates one training step of a decoder transformer described as a model config
    (``tessel simulate CONFIG --model-config FILE``; keys in nn/model_config.h, presets in
    configs/models/).

    model: a dict of the config's keys, a path to a model JSON, or a preset name
        (``configs/models/NAME.json``, e.g. "llama3-8b").
    ici_mesh_shape / dcn_mesh_shape / axis_names: the HybridMesh (torch_xla semantics); without
        ``ici_mesh_shape`` the "data" axis spans each slice's devices (the other axes have size
        1) and slices go over DCN on it.
    recipe: dp, fsdp, tp, fsdp_tp or multislice_dp (how weights and activations are sharded).
    batch: global batch in sequences; default the file's, else one sequence per device.
    Returns ``SimulationReport``: ``step_seconds`` (float, seconds) includes remat recompute and
    flash attention; ``peak_memory_bytes`` is the per-device training memory (parameters,
    gradients, optimizer state, activations) and ``exceeds_hbm`` says whether it fits.
    Raises ValueError for a config, mesh or recipe that does not fit.
    """
    if isinstance(model, dict):
        text, source = json.dumps(model), "model"
    else:
        path = Path(model)
        if not path.is_file() and isinstance(model, str) and os.sep not in model:
            path = _CONFIGS / "models" / f"{model}.json"
        if not path.is_file():
            raise FileNotFoundError(f"model config {os.fspath(model)!r} not found")
        text, source = path.read_text(), os.fspath(path)
    return _tessel.simulate_model(text, source, _topology(topology),
                                  list(ici_mesh_shape or []), list(dcn_mesh_shape or []),
                                  _names("axis_names", axis_names), recipe, batch, overlap, top_k)


def _names(argument: str, names) -> list:
    """A list of axis names; a bare string is refused (list("data") would be its letters)."""
    if isinstance(names, (str, bytes)):
        raise ValueError(f"{argument}: expected a list of axis names, got the string {names!r} "
                         f"(write [{names!r}])")
    return list(names)


def _model_text(model: Union[str, os.PathLike, dict]) -> tuple:
    """(JSON text, source) of a model given as a dict, a path or a preset name."""
    if isinstance(model, dict):
        return json.dumps(model), "model"
    path = Path(model)
    if not path.is_file() and isinstance(model, str) and os.sep not in model:
        path = _CONFIGS / "models" / f"{model}.json"
    if not path.is_file():
        raise FileNotFoundError(f"model config {os.fspath(model)!r} not found")
    return path.read_text(), os.fspath(path)


def autoshard(model: Union[str, os.PathLike, dict], topology: Union[Topology, str, os.PathLike],
              *, batch: Optional[int] = None, budget_seconds: float = 0.0, top_k: int = 5,
              overlap: bool = False, axes: Sequence[str] = (), hbm_bytes: int = 0) -> dict:
    """Searches the mesh (MaxText's ici_* / dcn_* axis sizes), remat policy and microbatches with
    the least predicted step time that fit in HBM (``tessel autoshard CONFIG --model-config
    FILE``; mesh/autoshard/autoshard.h).

    model: as for ``simulate_model``. budget_seconds: stop simulating new meshes after this long
    (0: no limit). top_k: runners-up to return. axes: search only meshes over these of MaxText's
    axes (e.g. ("data", "fsdp", "tensor"); empty: all seven). hbm_bytes: the per-device memory
    limit plans must fit under (0: the device's HBM).
    Returns a dict: "best" (None when no plan fits; else "axis_names", "ici_mesh_shape",
    "dcn_mesh_shape", "remat", "microbatches", "step_seconds", "memory_bytes", "fits", ...),
    "alternatives" (the runners-up, best first) and "search" (meshes enumerated, pruned by
    reason, simulated; plans evaluated; complete; seconds).
    Raises ValueError for an invalid model config or an unknown axis name.
    """
    text, source = _model_text(model)
    return _tessel.autoshard(text, source, _topology(topology), batch, budget_seconds, top_k,
                             overlap, _names("axes", axes), hbm_bytes)


def _breakdown(self: SimulationReport) -> dict:
    """Seconds of one step by component: compute, ICI, DCN, exposed communication, step."""
    return {
        "step": self.step_seconds,
        "compute": self.compute_seconds,
        "ici": self.ici_seconds,
        "dcn": self.dcn_seconds,
        "exposed_comm": self.exposed_comm_seconds,
    }


def _memory(self: SimulationReport) -> dict:
    """Bytes per device: live-buffer peak, parameters, HBM capacity, and whether it fits."""
    return {
        "peak_bytes": self.peak_memory_bytes,
        "parameter_bytes": self.parameter_bytes,
        "hbm_bytes": self.hbm_bytes,
        "fits": not self.exceeds_hbm,
    }


def _collective_table(self: SimulationReport) -> list:
    """The most expensive collectives as dicts (opcode, name, local shape, seconds, bytes
    sent per device), most expensive first."""
    return [{"opcode": e.opcode, "name": e.name, "shape": e.shape, "seconds": e.seconds,
             "bytes": e.bytes} for e in self.top_collectives]


def _report_repr(self: SimulationReport) -> str:
    return (f"SimulationReport(device='{self.device_name}', devices={self.num_devices}, "
            f"step_seconds={self.step_seconds:.6g}, compute_seconds={self.compute_seconds:.6g}, "
            f"ici_seconds={self.ici_seconds:.6g}, peak_memory_bytes={self.peak_memory_bytes})")


SimulationReport.breakdown = property(_breakdown)  # type: ignore[attr-defined]
SimulationReport.memory = property(_memory)  # type: ignore[attr-defined]
SimulationReport.collective_table = property(_collective_table)  # type: ignore[attr-defined]
SimulationReport.__repr__ = _report_repr  # type: ignore[assignment]
